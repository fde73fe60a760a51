package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/daemon"
	"github.com/cairnfs/cairn/internal/meta"
)

// mkdirOffline makes a directory in the root of an unmounted volume.
func mkdirOffline(t *testing.T, metaURL, name string) {
	t.Helper()
	ctx := context.Background()
	vol, err := daemon.OpenVolume(ctx, daemon.VolumeOptions{MetaURL: metaURL})
	if err != nil {
		t.Fatal(err)
	}
	defer vol.Close()
	if _, _, err := vol.Meta.Mknod(ctx, base.RootCaller, base.RootIno, name, base.TypeDir, 0o755, 0, 0, ""); err != nil {
		t.Fatal(err)
	}
}

func TestSnapshotVerbs(t *testing.T) {
	dir := t.TempDir()
	url := "pebble://" + dir + "/meta"
	if out, err := run(t, "format", url, "v"); err != nil {
		t.Fatalf("format: %v\n%s", err, out)
	}
	out, err := run(t, "snapshot", "list", url)
	if err != nil || !strings.Contains(out, "no snapshots") {
		t.Fatalf("list of a fresh volume: %v\n%s", err, out)
	}
	out, err = run(t, "snapshot", "create", url, "s1")
	if err != nil || !strings.Contains(out, `created snapshot "s1"`) {
		t.Fatalf("create: %v\n%s", err, out)
	}
	_, err = run(t, "snapshot", "create", url, "s1")
	wantErr(t, err, "exists")
	_, err = run(t, "snapshot", "create", url, "a/b")
	wantErr(t, err, "invalid")

	mkdirOffline(t, url, "newdir")
	out, err = run(t, "snapshot", "diff", url, "s1")
	if err != nil || !strings.Contains(out, "+ /newdir\n") {
		t.Fatalf("diff s1 live: %v\n%s", err, out)
	}
	out, err = run(t, "snapshot", "diff", "--json", url, "s1")
	if err != nil {
		t.Fatalf("diff --json: %v\n%s", err, out)
	}
	var created bool
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var c daemon.SnapshotChange
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("diff --json line %q: %v", sc.Text(), err)
		}
		if c.Op == meta.Created && c.Path == "/newdir" && c.Type == "dir" && c.Ino != 0 {
			created = true
		}
	}
	if !created {
		t.Fatalf("diff --json does not report /newdir:\n%s", out)
	}

	if out, err := run(t, "snapshot", "create", url, "s2"); err != nil {
		t.Fatalf("create s2: %v\n%s", err, out)
	}
	out, err = run(t, "snapshot", "diff", url, "s1", "s2")
	if err != nil || !strings.Contains(out, "+ /newdir") {
		t.Fatalf("diff s1 s2: %v\n%s", err, out)
	}
	_, err = run(t, "snapshot", "diff", url, "nope")
	wantErr(t, err, "nope")

	out, err = run(t, "snapshot", "list", url)
	if err != nil || !strings.Contains(out, "ONLY IN SNAPSHOT") || !strings.Contains(out, "s1 ") || !strings.Contains(out, "s2 ") {
		t.Fatalf("list: %v\n%s", err, out)
	}
	if strings.Index(out, "s1 ") > strings.Index(out, "s2 ") {
		t.Fatalf("list is not oldest first:\n%s", out)
	}
	out, err = run(t, "snapshot", "list", "--json", url)
	if err != nil {
		t.Fatal(err)
	}
	var infos []daemon.SnapshotInfo
	if err := json.Unmarshal([]byte(out), &infos); err != nil || len(infos) != 2 || infos[0].Name != "s1" || infos[1].Epoch <= infos[0].Epoch {
		t.Fatalf("list --json: %v\n%s", err, out)
	}

	out, err = run(t, "snapshot", "delete", url, "s1")
	if err != nil || !strings.Contains(out, `deleted snapshot "s1"`) {
		t.Fatalf("delete: %v\n%s", err, out)
	}
	_, err = run(t, "snapshot", "delete", url, "s1")
	wantErr(t, err, "s1")
	out, err = run(t, "snapshot", "list", url)
	if err != nil || strings.Contains(out, "s1 ") || !strings.Contains(out, "s2 ") {
		t.Fatalf("list after delete: %v\n%s", err, out)
	}
	if out, err := run(t, "gc", url); err != nil || !strings.Contains(out, "0 orphans") {
		t.Fatalf("gc: %v\n%s", err, out)
	}
	if out, err := run(t, "fsck", url); err != nil {
		t.Fatalf("fsck: %v\n%s", err, out)
	}
}

// While a process holds an embedded volume, the snapshot verbs reach it
// through its control socket.
func TestSnapshotVerbsThroughControlSocket(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	url := "pebble://" + dir + "/meta"
	if out, err := run(t, "format", url, "v"); err != nil {
		t.Fatalf("format: %v\n%s", err, out)
	}
	vol, err := daemon.OpenVolume(ctx, daemon.VolumeOptions{MetaURL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer vol.Close()
	srv, err := daemon.ServeControl(vol, daemon.Holder{Pid: 1, Host: "h", MountPoint: "/mnt/x"}, daemon.RunAdmin)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	if out, err := run(t, "snapshot", "create", url, "held"); err != nil {
		t.Fatalf("create through the socket: %v\n%s", err, out)
	}
	if _, err := vol.Meta.SnapshotByName(ctx, "held"); err != nil {
		t.Fatalf("the holder does not see the snapshot: %v", err)
	}
	out, err := run(t, "snapshot", "list", url)
	if err != nil || !strings.Contains(out, "held") {
		t.Fatalf("list through the socket: %v\n%s", err, out)
	}
	if _, _, err := vol.Meta.Mknod(ctx, base.RootCaller, base.RootIno, "d", base.TypeDir, 0o755, 0, 0, ""); err != nil {
		t.Fatal(err)
	}
	out, err = run(t, "snapshot", "diff", url, "held")
	if err != nil || !strings.Contains(out, "+ /d") {
		t.Fatalf("diff through the socket: %v\n%s", err, out)
	}
	_, err = run(t, "snapshot", "create", url, "held")
	wantErr(t, err, "exists")
	if out, err := run(t, "snapshot", "delete", url, "held"); err != nil {
		t.Fatalf("delete through the socket: %v\n%s", err, out)
	}
	if snaps, err := vol.Meta.Snapshots(ctx); err != nil || len(snaps) != 0 {
		t.Fatalf("snapshots after delete: %v %v", snaps, err)
	}
}

// writeTree writes files of several sizes (one spanning blocks), a
// directory tree and a symlink under root.
func writeTree(t *testing.T, root string) {
	t.Helper()
	files := map[string]int{
		"empty": 0, "one": 1, "small.txt": 4097, "mid.bin": 300 << 10, "big.bin": 5 << 20,
		"del.bin": 70000, "ren.bin": 9000, "trunc.bin": 200000, "app.log": 1000,
		"dir/a": 123, "dir/sub/b": 45678, "gone/x": 10, "gone/y/z": 20, "stale.bin": 9 << 20,
	}
	for name, n := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, n)
		rand.Read(b)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("dir/sub/b", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
}

// changeTree modifies, deletes, renames, truncates and extends files of
// writeTree's tree, and adds new ones.
func changeTree(t *testing.T, root string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(root, "big.bin"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte("overwritten"), 1000), 4<<20-5000); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, step := range []error{
		os.Remove(filepath.Join(root, "del.bin")),
		os.Rename(filepath.Join(root, "ren.bin"), filepath.Join(root, "dir", "renamed.bin")),
		os.Truncate(filepath.Join(root, "trunc.bin"), 1234),
		os.RemoveAll(filepath.Join(root, "gone")),
		os.WriteFile(filepath.Join(root, "new.txt"), []byte("new"), 0o644),
		os.Chmod(filepath.Join(root, "small.txt"), 0o600),
		os.Remove(filepath.Join(root, "link")),
		os.Symlink("elsewhere", filepath.Join(root, "link")),
	} {
		if step != nil {
			t.Fatal(step)
		}
	}
	g, err := os.OpenFile(filepath.Join(root, "app.log"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	g.WriteString("appended line\n")
	g.Close()
}

func wantErrno(t *testing.T, what string, err error, want syscall.Errno) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: %v, want %v", what, err, want)
	}
}

func TestE2ESnapshots(t *testing.T) {
	v := newE2EVolume(t)
	v.mount(t)
	writeTree(t, v.mnt)
	sums0 := treeSums(t, v.mnt)
	if out := cairn(t, "snapshot", "create", v.meta, "s1"); !strings.Contains(out, `"s1"`) {
		t.Fatalf("snapshot create: %s", out)
	}
	changeTree(t, v.mnt)
	sums1 := treeSums(t, v.mnt)
	cairn(t, "snapshot", "create", v.meta, "s2")
	cairn(t, "snapshot", "create", v.meta, "s3")

	// The snapshots hold the trees as they were, the live volume the new one.
	snaps := filepath.Join(v.mnt, ".snapshots")
	sameTrees(t, sums0, treeSums(t, filepath.Join(snaps, "s1")))
	sameTrees(t, sums1, treeSums(t, filepath.Join(snaps, "s2")))
	sameTrees(t, sums1, treeSums(t, v.mnt))
	var live, old syscall.Stat_t
	if err := syscall.Stat(filepath.Join(v.mnt, "big.bin"), &live); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(filepath.Join(snaps, "s1", "big.bin"), &old); err != nil {
		t.Fatal(err)
	}
	if live.Ino == old.Ino {
		t.Errorf("a snapshot file has the live file's inode number %d", live.Ino)
	}

	// .snapshots is hidden from the root's listing, but there.
	ents, err := os.ReadDir(v.mnt)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() == ".snapshots" {
			t.Error("ls shows .snapshots")
		}
	}
	if out := sh(t, v.mnt, "ls -a"); strings.Contains(out, ".snapshots") {
		t.Errorf("ls -a shows .snapshots:\n%s", out)
	}
	if out := sh(t, snaps, "ls"); out != "s1\ns2\ns3\n" {
		t.Errorf("ls .snapshots: %q", out)
	}

	// Nothing under it can change.
	s1 := filepath.Join(snaps, "s1")
	wantErrno(t, "create", os.WriteFile(filepath.Join(s1, "x"), nil, 0o644), syscall.EROFS)
	_, err = os.OpenFile(filepath.Join(s1, "one"), os.O_WRONLY, 0)
	wantErrno(t, "open for writing", err, syscall.EROFS)
	wantErrno(t, "truncate", os.Truncate(filepath.Join(s1, "one"), 0), syscall.EROFS)
	wantErrno(t, "unlink", os.Remove(filepath.Join(s1, "one")), syscall.EROFS)
	wantErrno(t, "rmdir", os.Remove(filepath.Join(s1, "gone", "y")), syscall.EROFS)
	wantErrno(t, "mkdir", os.Mkdir(filepath.Join(s1, "d"), 0o755), syscall.EROFS)
	wantErrno(t, "rename", os.Rename(filepath.Join(s1, "one"), filepath.Join(s1, "two")), syscall.EROFS)
	wantErrno(t, "rename out", os.Rename(filepath.Join(s1, "one"), filepath.Join(v.mnt, "two")), syscall.EROFS)
	wantErrno(t, "rename in", os.Rename(filepath.Join(v.mnt, "new.txt"), filepath.Join(s1, "new.txt")), syscall.EROFS)
	wantErrno(t, "link", os.Link(filepath.Join(s1, "one"), filepath.Join(v.mnt, "two")), syscall.EROFS)
	wantErrno(t, "symlink", os.Symlink("one", filepath.Join(s1, "two")), syscall.EROFS)
	wantErrno(t, "chmod", os.Chmod(filepath.Join(s1, "one"), 0o777), syscall.EROFS)
	wantErrno(t, "utimes", os.Chtimes(filepath.Join(s1, "one"), time.Now(), time.Now()), syscall.EROFS)
	wantErrno(t, "setxattr", syscall.Setxattr(filepath.Join(s1, "one"), "user.x", []byte("1"), 0), syscall.EROFS)
	wantErrno(t, "rmdir snapshot", os.Remove(s1), syscall.EROFS)
	wantErrno(t, "mkdir in .snapshots", os.Mkdir(filepath.Join(snaps, "mine"), 0o755), syscall.EROFS)
	wantErrno(t, "mkdir /.snapshots", os.Mkdir(snaps, 0o755), syscall.EEXIST)
	wantErrno(t, "rmdir /.snapshots", os.Remove(snaps), syscall.EROFS)
	sameTrees(t, sums0, treeSums(t, s1))

	// The CLI lists and compares them.
	list := cairn(t, "snapshot", "list", v.meta)
	for _, s := range []string{"s1", "s2", "s3", "KiB"} {
		if !strings.Contains(list, s) {
			t.Errorf("snapshot list lacks %q:\n%s", s, list)
		}
	}
	var infos []daemon.SnapshotInfo
	if err := json.Unmarshal([]byte(cairn(t, "snapshot", "list", "--json", v.meta)), &infos); err != nil || len(infos) != 3 {
		t.Fatalf("snapshot list --json: %v %v", err, infos)
	}
	// s1 alone holds the files deleted since (del.bin, gone/x, gone/y/z).
	if infos[0].Bytes < 70030 || infos[1].Bytes != 0 {
		t.Errorf("space held only by each snapshot: %+v", infos)
	}
	diff := cairn(t, "snapshot", "diff", v.meta, "s1", "s2")
	for _, line := range []string{"- /del.bin", "R /ren.bin -> /dir/renamed.bin", "M /trunc.bin", "M /big.bin", "+ /new.txt", "- /gone"} {
		if !strings.Contains(diff, line+"\n") {
			t.Errorf("snapshot diff lacks %q:\n%s", line, diff)
		}
	}
	if out := cairn(t, "snapshot", "diff", v.meta, "s3"); strings.TrimSpace(out) != "" {
		t.Errorf("diff of a fresh snapshot and the live volume:\n%s", out)
	}

	// An embedded volume is held by its mount: a snapshot mount is refused
	// with the path where the snapshot already is.
	mnt2 := filepath.Join(v.dir, "mnt2")
	os.Mkdir(mnt2, 0o755)
	out, err := cairnErr(t, "mount", "-d", "--snapshot", "s2", v.meta, mnt2)
	if err == nil || !strings.Contains(out, filepath.Join(snaps, "s2")) {
		t.Errorf("snapshot mount of a mounted embedded volume: %v\n%s", err, out)
	}

	// A deleted snapshot goes stale, even for files open in it.
	f, err := os.Open(filepath.Join(snaps, "s3", "stale.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.ReadAt(make([]byte, 4096), 0); err != nil {
		t.Fatal(err)
	}
	if out := cairn(t, "snapshot", "delete", v.meta, "s3"); !strings.Contains(out, `deleted snapshot "s3"`) {
		t.Fatalf("snapshot delete: %s", out)
	}
	time.Sleep(1200 * time.Millisecond) // the kernel's entry and attribute caches, the snapshot check
	_, err = f.ReadAt(make([]byte, 4096), 8<<20)
	wantErrno(t, "read of a deleted snapshot's file", err, syscall.ESTALE)
	_, err = os.Stat(filepath.Join(snaps, "s3"))
	wantErrno(t, "stat of a deleted snapshot", err, syscall.ENOENT)
	f.Close()
	if list := cairn(t, "snapshot", "list", v.meta); strings.Contains(list, "s3") {
		t.Errorf("deleted snapshot still listed:\n%s", list)
	}
	cairn(t, "fsck", v.meta)

	// Unmounted, the volume's snapshot can be mounted on its own.
	v.unmount(t)
	sv := &e2eVolume{dir: v.dir, meta: v.meta, mnt: mnt2}
	cairn(t, "mount", "-d", "--snapshot", "s1", "--log", v.dir+"/snap.log", v.meta, mnt2)
	t.Cleanup(func() { sv.unmount(t) })
	sameTrees(t, sums0, treeSums(t, mnt2))
	wantErrno(t, "create in a snapshot mount", os.WriteFile(filepath.Join(mnt2, "x"), nil, 0o644), syscall.EROFS)
	if _, err := os.Stat(filepath.Join(mnt2, ".snapshots")); !errors.Is(err, syscall.ENOENT) {
		t.Errorf(".snapshots in a snapshot mount: %v", err)
	}
	// Admin verbs reach it through its control socket.
	cairn(t, "snapshot", "delete", v.meta, "s2")
	sv.unmount(t)
	cairn(t, "snapshot", "delete", v.meta, "s1")
	cairn(t, "gc", v.meta)
	cairn(t, "fsck", v.meta)
}

// On a shared volume every client shows a snapshot taken by the CLI at
// once, and a snapshot mount runs beside the live mounts.
func TestSharedSnapshots(t *testing.T) {
	v := newSharedVolume(t)
	a := v.mount(t, "a")
	b := v.mount(t, "b")
	writeTree(t, a.mnt)
	sums0 := treeSums(t, a.mnt)
	if out, err := v.cairn(t, "snapshot", "create", v.meta, "s1"); err != nil {
		t.Fatalf("snapshot create: %v\n%s", err, out)
	}
	changeTree(t, a.mnt)
	sameTrees(t, sums0, treeSums(t, filepath.Join(b.mnt, ".snapshots", "s1")))
	sameTrees(t, treeSums(t, a.mnt), treeSums(t, b.mnt))

	c := v.mount(t, "c", "--snapshot", "s1")
	sameTrees(t, sums0, treeSums(t, c.mnt))
	wantErrno(t, "create in a snapshot mount", os.WriteFile(c.path("x"), nil, 0o644), syscall.EROFS)
	wantErrno(t, "unlink in a snapshot mount", os.Remove(c.path("one")), syscall.EROFS)

	if out, err := v.cairn(t, "snapshot", "delete", v.meta, "s1"); err != nil {
		t.Fatalf("snapshot delete: %v\n%s", err, out)
	}
	time.Sleep(1200 * time.Millisecond) // the kernel's attribute cache
	_, err := os.ReadDir(c.mnt)
	wantErrno(t, "listing a deleted snapshot's mount", err, syscall.ESTALE)
	_, err = os.Stat(filepath.Join(b.mnt, ".snapshots", "s1"))
	wantErrno(t, "stat of a deleted snapshot", err, syscall.ENOENT)
	c.stop(t)
	a.stop(t)
	b.stop(t)
	if out, err := v.cairn(t, "fsck", v.meta); err != nil {
		t.Fatalf("fsck: %v\n%s", err, out)
	}
}

// TestE2ESnapshotRestore: a tree deleted from the live volume comes back
// from a snapshot through the CLI (served by the mount process), byte for
// byte, without copying data; it survives the snapshot's deletion, and
// once the copy is removed too, gc finds nothing to collect and fsck is
// clean.
func TestE2ESnapshotRestore(t *testing.T) {
	v := newE2EVolume(t)
	v.mount(t)
	writeTree(t, v.mnt)
	sums := treeSums(t, v.mnt)
	cairn(t, "snapshot", "create", v.meta, "keep")
	sh(t, v.mnt, "rm -rf ./*")
	var before syscall.Stat_t
	if err := syscall.Stat(v.mnt, &before); err != nil {
		t.Fatal(err)
	}
	out := cairn(t, "snapshot", "restore", v.meta, "keep", "/", "/back")
	if !strings.Contains(out, "no data copied") {
		t.Fatalf("restore: %s", out)
	}
	// The mount's kernel keeps the root's attributes for an hour on an
	// embedded volume: the restore must have told it.
	var after syscall.Stat_t
	if err := syscall.Stat(v.mnt, &after); err != nil {
		t.Fatal(err)
	}
	if after.Nlink != before.Nlink+1 {
		t.Errorf("root's nlink after restoring a directory into it: %d, want %d", after.Nlink, before.Nlink+1)
	}
	sameTrees(t, sums, treeSums(t, filepath.Join(v.mnt, "back")))
	if _, err := cairnErr(t, "snapshot", "restore", v.meta, "keep", "/", "/back"); err == nil {
		t.Fatal("restore over an existing path succeeded")
	}
	cairn(t, "snapshot", "delete", v.meta, "keep")
	sameTrees(t, sums, treeSums(t, filepath.Join(v.mnt, "back")))
	sh(t, v.mnt, "rm -rf back")
	v.unmount(t)
	if out := cairn(t, "fsck", v.meta); !strings.Contains(out, "0 metadata problems") {
		t.Fatalf("fsck: %s", out)
	}
	out = cairn(t, "gc", "--delete", v.meta)
	if !strings.Contains(out, " 0 orphans") || !strings.Contains(out, "slices queued for deletion") {
		t.Fatalf("gc after restore and deletes: %s", out)
	}
	if out := cairn(t, "gc", v.meta); !strings.Contains(out, "0 objects") {
		t.Fatalf("objects left after gc: %s", out)
	}
}
