package main

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/internal/testenv/pgtest"
)

// metaTree lists what a reader sees of the tree at root, one line per
// file: path, type and mode, owner, size, mtime (ns), link count, inode,
// xattrs, and the contents' hash or the link target.
func metaTree(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		line := fmt.Sprintf("%q mode=%o uid=%d gid=%d size=%d mtime=%d.%09d nlink=%d ino=%d rdev=%x",
			rel, st.Mode, st.Uid, st.Gid, st.Size, st.Mtim.Sec, st.Mtim.Nsec, st.Nlink, st.Ino, st.Rdev)
		buf := make([]byte, 4096)
		if n, err := unix.Llistxattr(p, buf); err == nil && n > 0 {
			names := strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00")
			slices.Sort(names)
			for _, x := range names {
				v := make([]byte, 4096)
				m, _ := unix.Lgetxattr(p, x, v)
				line += fmt.Sprintf(" %s=%q", x, v[:max(m, 0)])
			}
		}
		switch {
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			line += fmt.Sprintf(" sha=%x", sha256.Sum256(b))
		case d.Type()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			line += " -> " + l
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// writeDumpTree writes every kind of file a dump must keep exact.
func writeDumpTree(t *testing.T, mnt string) {
	sh(t, mnt, `
mkdir -p docs/deep/er "odd dir"
for i in $(seq 1 120); do printf 'small %d\n' $i > docs/s$i; done
: > docs/empty
head -c 9000000 /dev/urandom > docs/big
head -c 70000 /dev/urandom > "odd dir/medium file"
truncate -s 20M docs/sparse && printf tail >> docs/sparse
printf 'in the middle' | dd of=docs/sparse bs=1 seek=5000000 conv=notrunc status=none
ln docs/s1 docs/deep/hard1 && ln docs/s1 "odd dir/hard2"
ln -s ../s2 docs/deep/sym && ln -s /no/such/target dangling
mkfifo docs/fifo && mknod docs/dev c 1 3
setfattr -n user.color -v blue docs/s3 && setfattr -n user.bin -v 0x00ff10 docs/big && setfattr -n user.d -v dir docs/deep
chmod 4751 docs/s4 && chmod 1777 docs/deep/er && chown 1234:5678 docs/s5 && chown -h 42:43 docs/deep/sym
touch -d '2001-02-03 04:05:06.789' docs/s6 && touch -h -d '1999-12-31 23:59:59' docs/deep/sym
printf x > docs/deep/er/last && sync
`)
}

// TestE2EDumpLoad moves a volume across engines with dump and load:
// PostgreSQL (mounted, written) → Pebble → PostgreSQL → Pebble, the
// embedded dumps taken through the mount process's control socket. Each
// loaded volume shows the same tree byte for byte and by metadata
// (modes, owners, times, xattrs, links, inode numbers), and fsck finds it
// clean.
func TestE2EDumpLoad(t *testing.T) {
	src := newSharedVolume(t)
	m := src.mount(t, "src")
	writeDumpTree(t, m.mnt)
	// What the volume holds, read from a fresh mount: the mount that
	// wrote may still show an mtime its kernel set (writeback cache) a
	// few ms before the one stored when the data was flushed.
	m.stop(t)
	m = src.mount(t, "src-again")
	want := metaTree(t, m.mnt)
	dir := t.TempDir()
	run := func(args ...string) string {
		t.Helper()
		out, err := src.cairn(t, args...)
		if err != nil {
			t.Fatalf("cairn %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	// While mounted and written to.
	out := run("dump", src.meta, "-o", dir+"/1.cdump")
	if !strings.Contains(out, "dumped ") || !strings.Contains(out, "inodes") {
		t.Fatalf("dump summary: %s", out)
	}
	if _, err := os.Stat(dir + "/1.cdump.partial"); !os.IsNotExist(err) {
		t.Fatalf("the partial file was left: %v", err)
	}
	m.stop(t)

	check := func(meta, name string) {
		t.Helper()
		mm := (&sharedVolume{dir: dir, meta: meta, env: src.env}).mount(t, name)
		got := metaTree(t, mm.mnt)
		if !slices.Equal(got, want) {
			for i := range min(len(got), len(want)) {
				if got[i] != want[i] {
					t.Fatalf("%s: line %d differs:\n got %s\nwant %s", name, i, got[i], want[i])
				}
			}
			t.Fatalf("%s: %d lines, want %d", name, len(got), len(want))
		}
		// Through the control socket, to standard output.
		f, err := os.Create(dir + "/" + name + ".cdump")
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		c := exec.Command(cairnBinary(t), "dump", meta, "-o", "-")
		c.Env, c.Stdout, c.Stderr = src.env, f, &stderr
		if err := c.Run(); err != nil || !strings.Contains(stderr.String(), "inodes") {
			t.Fatalf("%s: dump to stdout: %v\n%s", name, err, stderr.String())
		}
		f.Close()
		mm.stop(t)
		if out := run("fsck", meta); !strings.Contains(out, " 0 metadata problems, 0 missing objects") {
			t.Fatalf("%s: fsck: %s", name, out)
		}
	}
	peb := "pebble://" + dir + "/meta-peb1"
	run("load", dir+"/1.cdump", peb)
	check(peb, "peb1")
	pg := pgtest.NewDatabase(t)
	if out := run("load", "--json", dir+"/peb1.cdump", pg); !strings.Contains(out, `"inodes":`) {
		t.Fatalf("load --json: %s", out)
	}
	check(pg, "pg2")
	peb2 := "pebble://" + dir + "/meta-peb3"
	run("load", dir+"/pg2.cdump", peb2)
	check(peb2, "peb3")
}

// TestE2EDumpLoadRefuses: bad dumps and bad targets give clear errors; a
// half-done load cannot be mounted, and running it again finishes it.
func TestE2EDumpLoadRefuses(t *testing.T) {
	v := newE2EVolume(t)
	v.mount(t)
	sh(t, v.mnt, `for i in $(seq 1 300); do echo $i > f$i; done; head -c 3000000 /dev/urandom > big; sync`)
	want := treeSums(t, v.mnt)
	dump := v.dir + "/v.cdump"
	cairn(t, "dump", v.meta, "-o", dump)
	if out, _ := cairnErr(t, "dump", v.meta); !strings.Contains(out, "-o FILE") {
		t.Fatalf("dump without -o: %s", out)
	}
	v.unmount(t)

	data, err := os.ReadFile(dump)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(v.dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	target := "pebble://" + v.dir + "/loaded"
	cases := []struct{ file, want string }{
		{write("foreign", []byte("PK\x03\x04 a zip, say")), "not a Cairn dump"},
		{write("cut", data[:len(data)*2/3]), "truncated"},
		// A flipped byte fails a frame's checksum, or, when it lands in
		// a frame's length, its bounds.
		{write("flipped", append(append([]byte(nil), data[:len(data)/2]...), append([]byte{data[len(data)/2] ^ 4}, data[len(data)/2+1:]...)...)), "checksum mismatch|not a valid dump"},
	}
	for _, c := range cases {
		out, err := cairnErr(t, "load", c.file, target)
		if err == nil || !slices.ContainsFunc(strings.Split(c.want, "|"), func(w string) bool { return strings.Contains(out, w) }) || !strings.Contains(out, "offset") {
			t.Fatalf("load %s: %v\n%s", filepath.Base(c.file), err, out)
		}
		if out, err := cairnErr(t, "mount", "-d", target, v.mnt); err == nil || !strings.Contains(out, "unfinished load") && !strings.Contains(out, "no Cairn volume") {
			t.Fatalf("mount after a failed load of %s: %v\n%s", filepath.Base(c.file), err, out)
		}
	}
	if out, err := cairnErr(t, "load", dump, v.meta); err == nil || !strings.Contains(out, `already holds volume "e2e"`) {
		t.Fatalf("load over a volume: %v\n%s", err, out)
	}
	if out := cairn(t, "load", dump, target); !strings.Contains(out, "finished the interrupted load") {
		t.Fatalf("second load: %s", out)
	}
	lv := &e2eVolume{dir: v.dir, meta: target, mnt: v.mnt}
	lv.mount(t)
	sameTrees(t, treeSums(t, lv.mnt), want)
	lv.unmount(t)
	if err := syscall.Access(v.dir+"/loaded", 0); err != nil {
		t.Fatal(err)
	}
}

// TestE2EDumpSnapshots: dump --snapshots of a mounted volume (through its
// control socket) loads as a volume whose live tree and snapshots read as
// the source's, and whose snapshots can be deleted.
func TestE2EDumpSnapshots(t *testing.T) {
	v := newE2EVolume(t)
	v.mount(t)
	writeDumpTree(t, v.mnt)
	cairn(t, "snapshot", "create", v.meta, "s1")
	sh(t, v.mnt, `rm -r docs/deep; printf more >> docs/s7; mv "odd dir" renamed; setfattr -x user.color docs/s3; sync`)
	// Read from a fresh mount (see TestE2EDumpLoad).
	v.unmount(t)
	v.mount(t)
	want := metaTree(t, v.mnt)
	wantSnap := metaTree(t, v.mnt+"/.snapshots/s1")
	dump := v.dir + "/snaps.cdump"
	cairn(t, "dump", "--snapshots", v.meta, "-o", dump)
	v.unmount(t)
	lv := &e2eVolume{dir: v.dir, meta: "pebble://" + v.dir + "/meta-loaded", mnt: v.mnt}
	cairn(t, "load", dump, lv.meta)
	lv.mount(t)
	if got := metaTree(t, lv.mnt); !slices.Equal(got, want) {
		t.Fatalf("live tree after the load:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := metaTree(t, lv.mnt+"/.snapshots/s1"); !slices.Equal(got, wantSnap) {
		t.Fatalf("snapshot s1 after the load:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantSnap, "\n"))
	}
	cairn(t, "snapshot", "delete", lv.meta, "s1")
	lv.unmount(t)
	if out := cairn(t, "fsck", lv.meta); !strings.Contains(out, " 0 metadata problems, 0 missing objects") {
		t.Fatalf("fsck: %s", out)
	}
}

// TestE2EGenDump: a volume made of a synthetic dump (bench/metadump.sh's
// way to millions of files) is a real one: its small files read back
// through a mount with the bytes the generator wrote, and fsck, which
// checks every inline block's size, is clean.
func TestE2EGenDump(t *testing.T) {
	v := newE2EVolume(t)
	dump := v.dir + "/syn.cdump"
	cairn(t, "gen-dump", v.meta, "--files", "2500", "--size", "700", "-o", dump)
	lv := &e2eVolume{dir: v.dir, meta: "pebble://" + v.dir + "/meta-syn", mnt: v.mnt}
	cairn(t, "load", dump, lv.meta)
	if out := cairn(t, "fsck", lv.meta); !strings.Contains(out, " 0 metadata problems, 0 missing objects") {
		t.Fatalf("fsck of the loaded synthetic volume: %s", out)
	}
	lv.mount(t)
	got, err := os.ReadFile(filepath.Join(lv.mnt, "d0000002", "f0000499"))
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 700)
	for i := range want {
		want[i] = byte(i*131 + i>>8)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("a synthetic file reads %d bytes %x…, want %x…", len(got), got[:min(len(got), 8)], want[:8])
	}
	if ents, err := os.ReadDir(filepath.Join(lv.mnt, "d0000002")); err != nil || len(ents) != 500 {
		t.Fatalf("the last directory: %d entries, %v", len(ents), err)
	}
}
