package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/internal/daemon"
)

// statTree describes every file under root by everything replication
// must keep: inode number, link count, type and mode, owner, length,
// mtime to the nanosecond, xattrs, symlink target and content. The
// snapshot and trash directories at the root are left out.
func statTree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == ".snapshots" || rel == ".trash" {
			return filepath.SkipDir
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		desc := fmt.Sprintf("ino=%d nlink=%d mode=%o uid=%d gid=%d size=%d mtime=%d.%09d", st.Ino, st.Nlink, st.Mode, st.Uid, st.Gid, st.Size, st.Mtim.Sec, st.Mtim.Nsec)
		if rel == "." {
			desc = fmt.Sprintf("mode=%o uid=%d gid=%d", st.Mode, st.Uid, st.Gid) // the root's times follow .snapshots
		}
		buf := make([]byte, 4096)
		if n, err := unix.Llistxattr(p, buf); err == nil && n > 0 {
			names := strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00")
			sort.Strings(names)
			for _, name := range names {
				v := make([]byte, 4096)
				m, _ := unix.Lgetxattr(p, name, v)
				desc += fmt.Sprintf(" xattr:%s=%q", name, v[:max(m, 0)])
			}
		}
		switch {
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += fmt.Sprintf(" sha=%x", sha256.Sum256(b))
		case d.Type()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			desc += " link=" + l
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameStatTrees(t *testing.T, what string, want, got map[string]string) {
	t.Helper()
	var diffs []string
	for k, v := range want {
		if got[k] != v {
			diffs = append(diffs, fmt.Sprintf("%s:\n  source      %s\n  destination %s", k, v, got[k]))
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: only on the destination: %s", k, v))
		}
	}
	if len(diffs) > 0 {
		sort.Strings(diffs)
		t.Fatalf("%s: %d differences:\n%s", what, len(diffs), strings.Join(diffs[:min(len(diffs), 20)], "\n"))
	}
}

// replicaEdgeTree adds what replication must keep exactly beyond
// writeTree's files: hard links, a sparse file, xattrs, ownership,
// times, and a directory holding only directories.
func replicaEdgeTree(t *testing.T, root string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Link(filepath.Join(root, "mid.bin"), filepath.Join(root, "dir", "mid.link")))
	f, err := os.Create(filepath.Join(root, "sparse.bin"))
	must(err)
	_, err = f.WriteAt([]byte("start"), 0)
	must(err)
	_, err = f.WriteAt([]byte("far end"), 70<<20) // a hole over a whole chunk
	must(err)
	must(f.Close())
	must(syscall.Setxattr(filepath.Join(root, "small.txt"), "user.color", []byte("blue"), 0))
	must(syscall.Setxattr(filepath.Join(root, "dir"), "user.tag", []byte("d"), 0))
	must(os.Lchown(filepath.Join(root, "one"), 1234, 5678))
	must(os.MkdirAll(filepath.Join(root, "only", "dirs", "here"), 0o750))
	must(os.Mkdir(filepath.Join(root, "only", "more"), 0o700))
	old := time.Date(2001, 2, 3, 4, 5, 6, 7000, time.UTC)
	must(os.Chtimes(filepath.Join(root, "trunc.bin"), old, old))
}

// replicaEdgeChanges makes the changes a diff must carry exactly: a
// same-size rewrite whose mtime is put back, a hole punched, a link
// removed, an xattr changed and one removed, a rename across
// directories, a directory tree of directories removed.
func replicaEdgeChanges(t *testing.T, root string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	p := filepath.Join(root, "mid.bin")
	var st syscall.Stat_t
	must(syscall.Stat(p, &st))
	b, err := os.ReadFile(p)
	must(err)
	for i := range b {
		b[i] ^= 0xff
	}
	must(os.WriteFile(p, b, 0o644))
	mt := time.Unix(st.Mtim.Sec, st.Mtim.Nsec)
	must(os.Chtimes(p, mt, mt))
	f, err := os.OpenFile(filepath.Join(root, "big.bin"), os.O_RDWR, 0)
	must(err)
	must(syscall.Fallocate(int(f.Fd()), 0x01|0x02, 1<<20, 2<<20)) // KEEP_SIZE|PUNCH_HOLE
	must(f.Close())
	must(os.Remove(filepath.Join(root, "dir", "mid.link")))
	must(syscall.Setxattr(filepath.Join(root, "small.txt"), "user.color", []byte("green"), 0))
	must(syscall.Removexattr(filepath.Join(root, "dir"), "user.tag"))
	must(os.Rename(filepath.Join(root, "dir", "sub"), filepath.Join(root, "only", "sub")))
	must(os.RemoveAll(filepath.Join(root, "only", "dirs")))
}

// TestE2EReplicate: an embedded volume replicated to another, cycle by
// cycle. After each cycle the destination (mounted, read-only) holds the
// source's tree exactly, inode numbers and times included; the second
// cycle carries only the changes. A failover makes the destination
// writable; a reverse sends its new files back and undoes the old
// source's writes that never replicated. fsck is clean on both sides
// throughout.
func TestE2EReplicate(t *testing.T) {
	src, dst := newE2EVolume(t), newE2EVolume(t)
	src.mount(t)
	writeTree(t, src.mnt)
	replicaEdgeTree(t, src.mnt)
	want := statTree(t, src.mnt)
	src.unmount(t)

	out := cairn(t, "replicate", "start", "--once", src.meta, dst.meta)
	if !strings.Contains(out, "replicated snapshot replica.") || strings.Contains(out, "(0 objects made by the stores") {
		t.Fatalf("first cycle: %s\n(both data stores are on one file system: the objects are hard links)", out)
	}
	dst.mount(t)
	sameStatTrees(t, "after the first copy", want, statTree(t, dst.mnt))
	if err := os.WriteFile(filepath.Join(dst.mnt, "x"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write on the destination: %v, want EROFS", err)
	}
	dst.unmount(t)

	// A user's snapshot between two cycles is replicated as a snapshot.
	src.mount(t)
	changeTree(t, src.mnt)
	cairn(t, "snapshot", "create", src.meta, "s1")
	wantS1 := treeSums(t, filepath.Join(src.mnt, ".snapshots", "s1"))
	replicaEdgeChanges(t, src.mnt)
	want = statTree(t, src.mnt)
	src.unmount(t)
	out = cairn(t, "replicate", "start", "--once", src.meta, dst.meta)
	var records, inodes int
	line := out[strings.Index(out, "replicated snapshot"):]
	if _, err := fmt.Sscanf(line[strings.Index(line, ": ")+2:], "%d records (%d inodes)", &records, &inodes); err != nil || records == 0 || records > 120 {
		t.Fatalf("second cycle: %q: want a few dozen records at most (the changes)", out)
	}
	dst.mount(t)
	sameStatTrees(t, "after an incremental cycle", want, statTree(t, dst.mnt))
	sameTrees(t, wantS1, treeSums(t, filepath.Join(dst.mnt, ".snapshots", "s1")))
	dst.unmount(t)
	// Deleted on the source, it goes from the destination at the next
	// cycle.
	cairn(t, "snapshot", "delete", src.meta, "s1")
	cairn(t, "replicate", "start", "--once", src.meta, dst.meta)
	if out := cairn(t, "snapshot", "list", dst.meta); strings.Contains(out, "s1") {
		t.Fatalf("snapshot s1 deleted on the source is still on the destination:\n%s", out)
	}
	status := cairn(t, "replicate", "status", dst.meta)
	if !strings.Contains(status, "3 cycles") || !strings.Contains(status, "destination (read-only)") {
		t.Fatalf("status:\n%s", status)
	}
	fsckClean(t, nil, src.meta, dst.meta)
	if out, err := cairnErr(t, "gc", "--delete", dst.meta); err == nil || !strings.Contains(out, "after a failover") {
		t.Fatalf("gc --delete on a destination: %v\n%s", err, out)
	}

	// A new pair cannot take a volume that has files, nor this pair's
	// destination from another source.
	other := newE2EVolume(t)
	if out, err := cairnErr(t, "replicate", "start", "--once", other.meta, dst.meta); err == nil || !strings.Contains(out, "belongs to replication pair") {
		t.Fatalf("another source onto the destination: %v\n%s", err, out)
	}
	if out, err := cairnErr(t, "replicate", "start", "--once", other.meta, src.meta); err == nil || !strings.Contains(out, "not empty") {
		t.Fatalf("a destination with files: %v\n%s", err, out)
	}

	// The source writes something that never replicates; the destination
	// fails over and is written.
	src.mount(t)
	if err := os.WriteFile(filepath.Join(src.mnt, "lost.txt"), []byte("never replicated"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(src.mnt, "new.txt")); err != nil {
		t.Fatal(err)
	}
	src.unmount(t)
	if out := cairn(t, "replicate", "failover", dst.meta); !strings.Contains(out, "is writable") {
		t.Fatalf("failover: %s", out)
	}
	dst.mount(t)
	if err := os.WriteFile(filepath.Join(dst.mnt, "after-failover.txt"), bytes.Repeat([]byte("f"), 100000), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dst.mnt, "big.bin"), filepath.Join(dst.mnt, "only", "big.bin")); err != nil {
		t.Fatal(err)
	}
	want = statTree(t, dst.mnt)
	dst.unmount(t)

	out = cairn(t, "replicate", "reverse", "--once", dst.meta, src.meta)
	if !strings.Contains(out, "reversed") || !strings.Contains(out, "replicated snapshot") {
		t.Fatalf("reverse: %s", out)
	}
	src.mount(t)
	sameStatTrees(t, "the old source after the reverse", want, statTree(t, src.mnt))
	src.unmount(t)
	fsckClean(t, nil, src.meta, dst.meta)
}

// replicaStatus reads cairn replicate status --json of a destination.
func replicaStatus(t *testing.T, dstMeta string) daemon.ReplicaStatus {
	t.Helper()
	var s daemon.ReplicaStatus
	out := cairn(t, "replicate", "status", "--json", dstMeta)
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &s); err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	return s
}

// TestE2EReplicateUnderWriter: a mounted embedded volume replicates
// itself (--replicate-to) while a writer creates, rewrites, renames and
// removes files without pause. Cycles follow each other within the bound;
// once the writer stops, the next cycle brings the destination to the
// source's tree exactly, and both pass fsck.
func TestE2EReplicateUnderWriter(t *testing.T) {
	src, dst := newE2EVolume(t), newE2EVolume(t)
	cairn(t, "mount", "-d", "-o", "allow_other", "--log", src.dir+"/mount.log", "--replicate-to", dst.meta, "--replicate-max-out-of-sync", "2s", src.meta, src.mnt)
	t.Cleanup(func() { src.unmount(t) })
	if err := os.MkdirAll(filepath.Join(src.mnt, "w", "old"), 0o755); err != nil {
		t.Fatal(err)
	}
	stop := time.Now().Add(8 * time.Second)
	buf := make([]byte, 256<<10)
	for i := 0; time.Now().Before(stop); i++ {
		p := filepath.Join(src.mnt, "w", fmt.Sprintf("f%05d", i))
		n := 1 + (i*7919)%len(buf)
		for j := range buf[:n] {
			buf[j] = byte(i + j)
		}
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(buf[:n]); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		switch {
		case i%5 == 4:
			if err := os.Rename(filepath.Join(src.mnt, "w", fmt.Sprintf("f%05d", i-2)), filepath.Join(src.mnt, "w", "old", fmt.Sprintf("r%05d", i))); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
		case i%7 == 6:
			if err := os.Remove(filepath.Join(src.mnt, "w", fmt.Sprintf("f%05d", i-1))); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	s := replicaStatus(t, dst.meta)
	if s.Running == nil || s.State.Cycles < 3 {
		t.Fatalf("after 8 s with a 2 s bound: %d cycles (want 3 at least), running %+v", s.State.Cycles, s.Running)
	}
	t.Logf("after 8 s of writes: %d cycles, %d past the 2 s bound, last cycle %+v", s.State.Cycles, s.Running.Missed, s.State.LastCycle)
	last := time.Now()
	deadline := last.Add(20 * time.Second)
	for replicaStatus(t, dst.meta).State.Taken.Before(last) {
		if time.Now().After(deadline) {
			t.Fatal("no cycle after the writer stopped within 20 s")
		}
		time.Sleep(200 * time.Millisecond)
	}
	want := statTree(t, src.mnt)
	src.unmount(t)
	dst.mount(t)
	sameStatTrees(t, "after the writer stopped", want, statTree(t, dst.mnt))
	dst.unmount(t)
	fsckClean(t, nil, src.meta, dst.meta)
}

// TestE2EReplicateKill9: the replicator is killed (SIGKILL) in the middle
// of a first copy slowed by --bwlimit; the pair resumes after the last
// batch that committed, without sending again the objects that arrived,
// and converges. The destination cannot be mounted before the first copy
// ends.
func TestE2EReplicateKill9(t *testing.T) {
	// The destination's data on another file system: the objects are
	// copied (and --bwlimit slows them), not hard-linked.
	far, err := os.MkdirTemp("/dev/shm", "cairn-replica")
	if err != nil {
		t.Skipf("no second file system for the destination's data: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(far) })
	src, dst := newE2EVolume(t), newE2EVolumeData(t, "file://"+far)
	src.mount(t)
	for d := 0; d < 20; d++ {
		dir := filepath.Join(src.mnt, fmt.Sprintf("d%02d", d))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 100; i++ {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d", i)), bytes.Repeat([]byte{byte(d), byte(i)}, 10000+i), 0o644); err != nil { // past the inline limit
				t.Fatal(err)
			}
		}
	}
	want := statTree(t, src.mnt)
	src.unmount(t)
	c := exec.Command(cairnBinary(t), "replicate", "start", "--batch", "500", "--bwlimit", "8M", src.meta, dst.meta)
	c.Stdout, c.Stderr = os.Stderr, os.Stderr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		js, err := os.ReadFile(daemon.ReplicaStatusPath(dst.meta))
		var rr daemon.RunningReplica
		// Attributes and entries come first (about 4,000 records), then
		// the chunk maps, whose objects the batches copy.
		if err == nil && json.Unmarshal(js, &rr) == nil && rr.Done >= 5000 {
			break
		}
		if time.Now().After(deadline) {
			c.Process.Kill()
			c.Wait()
			t.Fatal("the first copy did not get going")
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.Process.Kill()
	c.Wait()
	if out, err := cairnErr(t, "mount", "-d", dst.meta, dst.mnt); err == nil || !strings.Contains(out, "first copy") {
		dst.unmount(t)
		t.Fatalf("mounting a destination in its first copy: %v\n%s", err, out)
	}
	out := cairn(t, "replicate", "start", "--once", src.meta, dst.meta)
	var records, inodes, objects int
	line := out[strings.Index(out, "replicated snapshot"):]
	if _, err := fmt.Sscanf(line[strings.Index(line, ": ")+2:], "%d records (%d inodes), %d objects", &records, &inodes, &objects); err != nil {
		t.Fatalf("resumed copy: %v: %q", err, out)
	}
	// Every file is one object: 2,000 in all.
	if objects >= 2000 || objects == 0 {
		t.Fatalf("the resumed copy sent %d objects: want only those that had not arrived (fewer than 2000)", objects)
	}
	dst.mount(t)
	sameStatTrees(t, "after a resumed first copy", want, statTree(t, dst.mnt))
	dst.unmount(t)
	fsckClean(t, nil, dst.meta)
}

// newE2EVolumeData is newE2EVolume with its data store at dataURL.
func newE2EVolumeData(t *testing.T, dataURL string) *e2eVolume {
	t.Helper()
	dir := t.TempDir()
	v := &e2eVolume{dir: dir, meta: "pebble://" + dir + "/meta", mnt: filepath.Join(dir, "mnt")}
	if err := os.Mkdir(v.mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	cairn(t, "format", "--data", dataURL, v.meta, "e2e")
	return v
}

// fsckClean runs cairn fsck (with env, if not nil) on each volume and
// fails unless it finds nothing wrong.
func fsckClean(t *testing.T, env []string, metas ...string) {
	t.Helper()
	for _, m := range metas {
		c := exec.Command(cairnBinary(t), "fsck", m)
		c.Env = env
		out, err := c.CombinedOutput()
		if err != nil || !strings.Contains(string(out), " 0 metadata problems, 0 missing objects") {
			t.Fatalf("fsck %s: %v\n%s", m, err, out)
		}
	}
}

// TestE2EReplicateCases: each change a diff must carry exactly, in a
// test of its own: made on the source through its mount, replicated by
// one incremental cycle, compared on the destination's mount (inode
// numbers, links, modes, owners, sizes, nanosecond mtimes, xattrs,
// symlink targets, content).
func TestE2EReplicateCases(t *testing.T) {
	src, dst := newE2EVolume(t), newE2EVolume(t)
	cairn(t, "replicate", "start", "--once", src.meta, dst.meta)
	must := func(t *testing.T, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	write := func(t *testing.T, p string, n int, b byte) {
		t.Helper()
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, bytes.Repeat([]byte{b}, n), 0o644))
	}
	cases := []struct {
		name   string
		change func(t *testing.T, root string)
	}{
		{"hard links", func(t *testing.T, r string) {
			write(t, filepath.Join(r, "hl", "a"), 70000, 1)
			must(t, os.MkdirAll(filepath.Join(r, "hl2"), 0o755))
			must(t, os.Link(filepath.Join(r, "hl", "a"), filepath.Join(r, "hl2", "b")))
			must(t, os.Link(filepath.Join(r, "hl", "a"), filepath.Join(r, "hl", "c")))
		}},
		{"hard link removed", func(t *testing.T, r string) {
			must(t, os.Remove(filepath.Join(r, "hl", "c")))
		}},
		{"renames across directories", func(t *testing.T, r string) {
			write(t, filepath.Join(r, "rn", "x", "f"), 5000, 2)
			must(t, os.MkdirAll(filepath.Join(r, "rn", "y"), 0o755))
			must(t, os.Rename(filepath.Join(r, "rn", "x", "f"), filepath.Join(r, "rn", "y", "g")))
			must(t, os.Rename(filepath.Join(r, "rn", "x"), filepath.Join(r, "hl2", "x-moved")))
		}},
		{"sparse holes", func(t *testing.T, r string) {
			f, err := os.Create(filepath.Join(r, "sparse"))
			must(t, err)
			_, err = f.WriteAt([]byte("head"), 0)
			must(t, err)
			_, err = f.WriteAt([]byte("tail"), 130<<20) // two chunks of hole
			must(t, err)
			must(t, f.Close())
		}},
		{"hole punched", func(t *testing.T, r string) {
			write(t, filepath.Join(r, "punch"), 3<<20, 3)
			f, err := os.OpenFile(filepath.Join(r, "punch"), os.O_RDWR, 0)
			must(t, err)
			must(t, syscall.Fallocate(int(f.Fd()), 0x01|0x02, 1<<20, 1<<20))
			must(t, f.Close())
		}},
		{"truncate", func(t *testing.T, r string) {
			write(t, filepath.Join(r, "tr1"), 300000, 4)
			write(t, filepath.Join(r, "tr2"), 1000, 5)
			must(t, os.Truncate(filepath.Join(r, "tr1"), 12345))
			must(t, os.Truncate(filepath.Join(r, "tr2"), 9<<20))
		}},
		{"same-size rewrite with its mtime put back", func(t *testing.T, r string) {
			p := filepath.Join(r, "tr1")
			var st syscall.Stat_t
			must(t, syscall.Stat(p, &st))
			write(t, p, 12345, 6)
			mt := time.Unix(st.Mtim.Sec, st.Mtim.Nsec)
			must(t, os.Chtimes(p, mt, mt))
		}},
		{"xattrs", func(t *testing.T, r string) {
			p := filepath.Join(r, "hl", "a")
			must(t, syscall.Setxattr(p, "user.one", []byte("1"), 0))
			must(t, syscall.Setxattr(p, "user.two", []byte("2"), 0))
			must(t, syscall.Setxattr(filepath.Join(r, "hl"), "user.dir", []byte("d"), 0))
		}},
		{"xattrs changed and removed", func(t *testing.T, r string) {
			p := filepath.Join(r, "hl", "a")
			must(t, syscall.Setxattr(p, "user.one", []byte("uno"), 0))
			must(t, syscall.Removexattr(p, "user.two"))
		}},
		{"a directory holding only directories", func(t *testing.T, r string) {
			must(t, os.MkdirAll(filepath.Join(r, "dd", "a", "b", "c"), 0o711))
			must(t, os.MkdirAll(filepath.Join(r, "dd", "e"), 0o700))
		}},
		{"symlinks, owners, modes", func(t *testing.T, r string) {
			must(t, os.Symlink("../hl/a", filepath.Join(r, "dd", "link")))
			must(t, os.Lchown(filepath.Join(r, "dd", "link"), 42, 43))
			must(t, os.Chmod(filepath.Join(r, "hl2", "b"), 0o640))
			must(t, os.Chown(filepath.Join(r, "dd", "e"), 7, 8))
		}},
		{"trees removed", func(t *testing.T, r string) {
			must(t, os.RemoveAll(filepath.Join(r, "dd", "a")))
			must(t, os.RemoveAll(filepath.Join(r, "rn")))
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src.mount(t)
			c.change(t, src.mnt)
			want := statTree(t, src.mnt)
			src.unmount(t)
			cairn(t, "replicate", "start", "--once", src.meta, dst.meta)
			dst.mount(t)
			got := statTree(t, dst.mnt)
			dst.unmount(t)
			sameStatTrees(t, c.name, want, got)
		})
	}
	fsckClean(t, nil, src.meta, dst.meta)
}
