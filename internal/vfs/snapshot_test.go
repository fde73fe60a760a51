package vfs

import (
	"bytes"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/meta"
)

// writeFile creates parent/name with content p (committed at close).
func (e *env) writeFile(t *testing.T, parent base.Ino, name string, p []byte) base.Ino {
	t.Helper()
	ino, _, fh, en := e.v.Create(ctx, root, parent, name, 0o644, 0, syscall.O_RDWR)
	if en != 0 {
		t.Fatalf("create %s: %v", name, en)
	}
	e.write(t, fh, 0, p)
	if en := e.v.Release(ctx, fh); en != 0 {
		t.Fatalf("release %s: %v", name, en)
	}
	return ino
}

func (e *env) mkdir(t *testing.T, parent base.Ino, name string) base.Ino {
	t.Helper()
	ino, _, en := e.v.Mknod(ctx, root, parent, name, base.TypeDir, 0o755, 0, 0, "")
	if en != 0 {
		t.Fatalf("mkdir %s: %v", name, en)
	}
	return ino
}

func (e *env) lookup(t *testing.T, parent base.Ino, name string) (base.Ino, base.Attr) {
	t.Helper()
	ino, a, en := e.v.Lookup(ctx, root, parent, name)
	if en != 0 {
		t.Fatalf("lookup %q in %#x: %v", name, parent, en)
	}
	return ino, a
}

// readAll opens ino read-only and reads it whole.
func (e *env) readAll(t *testing.T, ino base.Ino) []byte {
	t.Helper()
	fh, en := e.v.Open(ctx, root, ino, syscall.O_RDONLY)
	if en != 0 {
		t.Fatalf("open %#x: %v", ino, en)
	}
	defer e.v.Release(ctx, fh)
	a, en := e.v.GetAttr(ctx, ino)
	if en != 0 {
		t.Fatal(en)
	}
	return e.read(t, fh, 0, int(a.Length)+1)
}

// names lists a directory through a handle.
func (e *env) names(t *testing.T, dir base.Ino, plus bool) []string {
	t.Helper()
	fh, en := e.v.OpenDir(ctx, root, dir)
	if en != 0 {
		t.Fatalf("opendir %#x: %v", dir, en)
	}
	defer e.v.ReleaseDir(fh)
	var out []string
	attrs := NoAttrs
	if plus {
		attrs = AllAttrs
	}
	en = e.v.ReadDir(ctx, root, fh, 0, attrs, func(d DirEntry) bool {
		out = append(out, d.Name)
		if plus && d.Attr == nil {
			t.Errorf("readdirplus entry %q has no attributes", d.Name)
		}
		return true
	})
	if en != 0 {
		t.Fatalf("readdir %#x: %v", dir, en)
	}
	return out
}

// snapshotRoot returns the front-end inode of /.snapshots/name.
func (e *env) snapshotRoot(t *testing.T, name string) base.Ino {
	t.Helper()
	dir, _ := e.lookup(t, base.RootIno, SnapshotsDir)
	if dir != SnapshotsIno {
		t.Fatalf("/.snapshots is %#x, want %#x", dir, SnapshotsIno)
	}
	ino, _ := e.lookup(t, dir, name)
	return ino
}

func (e *env) snapshot(t *testing.T, name string) meta.Snapshot {
	t.Helper()
	s, err := e.m.CreateSnapshot(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// holds counts the open-file holds recorded in meta.
func (e *env) holds(t *testing.T) int {
	t.Helper()
	n := 0
	err := e.store.View(ctx, func(r kv.Reader) error {
		return r.Scan(nil, nil, false, func(k, _ []byte) bool {
			if ki, err := meta.DecodeKey(k); err == nil && ki.Kind == "hold" {
				n++
			}
			return true
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestSnapshotShowsOldState(t *testing.T) {
	e := newEnv(t)
	old := bytes.Repeat([]byte("0123456789"), 30000) // several blocks
	a := e.writeFile(t, base.RootIno, "a", old)
	e.writeFile(t, base.RootIno, "b", []byte("bee"))
	e.writeFile(t, base.RootIno, "c", []byte("sea"))
	d := e.writeFile(t, base.RootIno, "d", old)
	sub := e.mkdir(t, base.RootIno, "sub")
	e.writeFile(t, sub, "e", []byte("deep"))
	if _, _, en := e.v.Mknod(ctx, root, base.RootIno, "l", base.TypeSymlink, 0, 0, 0, "sub/e"); en != 0 {
		t.Fatal(en)
	}
	if en := e.v.SetXattr(ctx, root, a, "user.k", []byte("v1"), 0); en != 0 {
		t.Fatal(en)
	}
	if _, en := e.v.Link(ctx, root, d, sub, "dlink"); en != 0 {
		t.Fatal(en)
	}
	e.snapshot(t, "s1")

	// Change everything in the live tree.
	fh, en := e.v.Open(ctx, root, a, syscall.O_RDWR)
	if en != 0 {
		t.Fatal(en)
	}
	e.write(t, fh, 5, []byte("XXXXXXXX"))
	e.v.Release(ctx, fh)
	if en := e.v.Unlink(ctx, root, base.RootIno, "b"); en != 0 {
		t.Fatal(en)
	}
	if en := e.v.Rename(ctx, root, base.RootIno, "c", sub, "c2", 0); en != 0 {
		t.Fatal(en)
	}
	if _, en := e.v.SetAttr(ctx, root, d, base.SetAttrRequest{Valid: base.SetSize | base.SetMode, Size: 7, Mode: 0o600}); en != 0 {
		t.Fatal(en)
	}
	if en := e.v.SetXattr(ctx, root, a, "user.k", []byte("v2"), 0); en != 0 {
		t.Fatal(en)
	}
	if en := e.v.Unlink(ctx, root, sub, "e"); en != 0 {
		t.Fatal(en)
	}

	sr := e.snapshotRoot(t, "s1")
	if sr>>slotShift == 0 || sr&inoMask != base.RootIno {
		t.Fatalf("snapshot root is %#x, want a non-zero slot over the root", sr)
	}
	if p, _ := e.lookup(t, sr, ".."); p != SnapshotsIno {
		t.Fatalf(".. of the snapshot root is %#x", p)
	}
	if ra, _ := e.v.GetAttr(ctx, sr); ra.Parent != SnapshotsIno || ra.Type != base.TypeDir {
		t.Fatalf("snapshot root attributes: %+v", ra)
	}
	if got := e.names(t, sr, true); !slices.Equal(got, []string{".", "..", "a", "b", "c", "d", "l", "sub"}) {
		t.Fatalf("snapshot root lists %v", got)
	}
	sa, aa := e.lookup(t, sr, "a")
	if sa == a || sa&inoMask != a {
		t.Fatalf("snapshot inode %#x for live %#x", sa, a)
	}
	if aa.Length != uint64(len(old)) {
		t.Fatalf("snapshot a is %d bytes", aa.Length)
	}
	if !bytes.Equal(e.readAll(t, sa), old) {
		t.Fatal("snapshot a does not hold the old bytes")
	}
	if got, en := e.v.GetXattr(ctx, root, sa, "user.k"); en != 0 || string(got) != "v1" {
		t.Fatalf("snapshot xattr: %q %v", got, en)
	}
	if names, en := e.v.ListXattr(ctx, root, sa); en != 0 || !slices.Equal(names, []string{"user.k"}) {
		t.Fatalf("snapshot xattrs: %v %v", names, en)
	}
	sb, _ := e.lookup(t, sr, "b")
	if string(e.readAll(t, sb)) != "bee" {
		t.Fatal("deleted file b not in the snapshot")
	}
	sc, _ := e.lookup(t, sr, "c")
	if string(e.readAll(t, sc)) != "sea" {
		t.Fatal("renamed file c not at its old name in the snapshot")
	}
	ssub, _ := e.lookup(t, sr, "sub")
	if _, _, en := e.v.Lookup(ctx, root, ssub, "c2"); en != syscall.ENOENT {
		t.Fatalf("new name c2 in the snapshot: %v", en)
	}
	if p, _ := e.lookup(t, ssub, ".."); p != sr {
		t.Fatalf(".. of snapshot sub is %#x, want %#x", p, sr)
	}
	sd, da := e.lookup(t, sr, "d")
	if da.Length != uint64(len(old)) || da.Mode != 0o644 || !bytes.Equal(e.readAll(t, sd), old) {
		t.Fatalf("truncated/chmodded d in the snapshot: %d bytes, mode %o", da.Length, da.Mode)
	}
	if dl, _ := e.lookup(t, ssub, "dlink"); dl != sd {
		t.Fatalf("hard link in the snapshot is %#x, want %#x", dl, sd)
	}
	se, _ := e.lookup(t, ssub, "e")
	if string(e.readAll(t, se)) != "deep" {
		t.Fatal("sub/e not in the snapshot")
	}
	sl, _ := e.lookup(t, sr, "l")
	if target, en := e.v.Readlink(ctx, sl); en != 0 || target != "sub/e" {
		t.Fatalf("readlink in the snapshot: %q %v", target, en)
	}

	// The live tree has the new state.
	if got := e.readAll(t, a); !bytes.Equal(got[5:13], []byte("XXXXXXXX")) {
		t.Fatal("live a lost its change")
	}
	if da, _ := e.v.GetAttr(ctx, d); da.Length != 7 {
		t.Fatalf("live d is %d bytes", da.Length)
	}

	// Opening snapshot files recorded no hold.
	fh, en = e.v.Open(ctx, root, sa, syscall.O_RDONLY)
	if en != 0 {
		t.Fatal(en)
	}
	if n := e.holds(t); n != 0 {
		t.Fatalf("%d holds with a snapshot file open", n)
	}
	// Locks on it are granted without being recorded.
	if en := e.v.SetLock(ctx, fh, 1, base.Lock{Type: base.ReadLock, End: base.LockEOF}, false, false); en != 0 {
		t.Fatalf("read lock on a snapshot file: %v", en)
	}
	if l, en := e.v.GetLock(ctx, fh, 2, base.Lock{Type: base.WriteLock, End: base.LockEOF}); en != 0 || l.Type != base.Unlock {
		t.Fatalf("getlk on a snapshot file: %+v %v", l, en)
	}
	e.release(t, fh)
}

func TestSnapshotsDirHiddenButFound(t *testing.T) {
	e := newEnv(t)
	e.writeFile(t, base.RootIno, "f", []byte("x"))
	if got := e.names(t, base.RootIno, false); !slices.Equal(got, []string{".", "..", "f"}) {
		t.Fatalf("root lists %v", got)
	}
	dir, da := e.lookup(t, base.RootIno, SnapshotsDir)
	if dir != SnapshotsIno || da.Type != base.TypeDir || da.Mode != 0o555 || da.Parent != base.RootIno {
		t.Fatalf("/.snapshots: %#x %+v", dir, da)
	}
	if got := e.names(t, dir, false); !slices.Equal(got, []string{".", ".."}) {
		t.Fatalf("empty /.snapshots lists %v", got)
	}
	if p, _ := e.lookup(t, dir, ".."); p != base.RootIno {
		t.Fatalf(".. of /.snapshots is %#x", p)
	}

	// Snapshots taken by anyone show at once, in name order.
	e.snapshot(t, "zeta")
	e.snapshot(t, "alpha")
	if got := e.names(t, base.RootIno, true); !slices.Equal(got, []string{".", "..", "f"}) {
		t.Fatalf("root lists %v", got)
	}
	if got := e.names(t, dir, true); !slices.Equal(got, []string{".", "..", "alpha", "zeta"}) {
		t.Fatalf("/.snapshots lists %v", got)
	}
	if da, _ := e.v.GetAttr(ctx, dir); da.Nlink != 4 {
		t.Fatalf("/.snapshots has %d links, want 4", da.Nlink)
	}
	zr, ar := e.snapshotRoot(t, "zeta"), e.snapshotRoot(t, "alpha")
	if zr>>slotShift == ar>>slotShift {
		t.Fatalf("two snapshots share slot %d", zr>>slotShift)
	}
	if _, _, en := e.v.Lookup(ctx, root, dir, "nope"); en != syscall.ENOENT {
		t.Fatalf("lookup of a missing snapshot: %v", en)
	}
	// Inside a snapshot .snapshots is an ordinary (absent) name.
	if _, _, en := e.v.Lookup(ctx, root, zr, SnapshotsDir); en != syscall.ENOENT {
		t.Fatalf(".snapshots inside a snapshot: %v", en)
	}

	// The name cannot be taken in the root.
	if _, _, _, en := e.v.Create(ctx, root, base.RootIno, SnapshotsDir, 0o644, 0, syscall.O_RDWR); en != syscall.EEXIST {
		t.Fatalf("create /.snapshots: %v", en)
	}
	for _, typ := range []base.FileType{base.TypeDir, base.TypeFIFO} {
		if _, _, en := e.v.Mknod(ctx, root, base.RootIno, SnapshotsDir, typ, 0o755, 0, 0, ""); en != syscall.EEXIST {
			t.Fatalf("mknod %v /.snapshots: %v", typ, en)
		}
	}
	if _, _, en := e.v.Mknod(ctx, root, base.RootIno, SnapshotsDir, base.TypeSymlink, 0, 0, 0, "f"); en != syscall.EEXIST {
		t.Fatalf("symlink /.snapshots: %v", en)
	}
	f, _ := e.lookup(t, base.RootIno, "f")
	if _, en := e.v.Link(ctx, root, f, base.RootIno, SnapshotsDir); en != syscall.EEXIST {
		t.Fatalf("link /.snapshots: %v", en)
	}
	if en := e.v.Rename(ctx, root, base.RootIno, "f", base.RootIno, SnapshotsDir, 0); en != syscall.EROFS {
		t.Fatalf("rename onto /.snapshots: %v", en)
	}
	if en := e.v.Rename(ctx, root, base.RootIno, SnapshotsDir, base.RootIno, "g", 0); en != syscall.EROFS {
		t.Fatalf("rename /.snapshots: %v", en)
	}
	if en := e.v.Rmdir(ctx, root, base.RootIno, SnapshotsDir); en != syscall.EROFS {
		t.Fatalf("rmdir /.snapshots: %v", en)
	}
	// Elsewhere the name is ordinary.
	sub := e.mkdir(t, base.RootIno, "sub")
	e.mkdir(t, sub, SnapshotsDir)
	if got := e.names(t, sub, false); !slices.Equal(got, []string{".", "..", SnapshotsDir}) {
		t.Fatalf("sub lists %v", got)
	}
}

func TestSnapshotRefusesWrites(t *testing.T) {
	e := newEnv(t)
	f := e.writeFile(t, base.RootIno, "f", []byte("data"))
	e.mkdir(t, base.RootIno, "d")
	if en := e.v.SetXattr(ctx, root, f, "user.x", []byte("1"), 0); en != 0 {
		t.Fatal(en)
	}
	e.snapshot(t, "s")
	sr := e.snapshotRoot(t, "s")
	sf, _ := e.lookup(t, sr, "f")
	sd, _ := e.lookup(t, sr, "d")
	want := func(what string, en syscall.Errno) {
		t.Helper()
		if en != syscall.EROFS {
			t.Errorf("%s: %v, want EROFS", what, en)
		}
	}
	for _, dir := range []base.Ino{sr, sd, SnapshotsIno} {
		_, _, _, en := e.v.Create(ctx, root, dir, "new", 0o644, 0, syscall.O_RDWR)
		want("create", en)
		_, _, en = e.v.Mknod(ctx, root, dir, "new", base.TypeDir, 0o755, 0, 0, "")
		want("mkdir", en)
		_, _, en = e.v.Mknod(ctx, root, dir, "new", base.TypeSymlink, 0, 0, 0, "f")
		want("symlink", en)
		_, _, en = e.v.Mknod(ctx, root, dir, "new", base.TypeFIFO, 0o644, 0, 0, "")
		want("mkfifo", en)
		_, en = e.v.Link(ctx, root, f, dir, "new")
		want("link into", en)
		want("rename into", e.v.Rename(ctx, root, base.RootIno, "f", dir, "new", 0))
		_, en = e.v.SetAttr(ctx, root, dir, base.SetAttrRequest{Valid: base.SetMode, Mode: 0o777})
		want("chmod dir", en)
		want("setxattr dir", e.v.SetXattr(ctx, root, dir, "user.y", []byte("2"), 0))
		want("access W_OK", e.v.Access(ctx, root, dir, base.MayWrite))
	}
	want("unlink", e.v.Unlink(ctx, root, sr, "f"))
	want("rmdir", e.v.Rmdir(ctx, root, sr, "d"))
	want("rmdir snapshot root", e.v.Rmdir(ctx, root, SnapshotsIno, "s"))
	want("rename within", e.v.Rename(ctx, root, sr, "f", sr, "g", 0))
	want("rename out", e.v.Rename(ctx, root, sr, "f", base.RootIno, "g", 0))
	want("exchange", e.v.Rename(ctx, root, sr, "f", base.RootIno, "f", base.RenameExchange))
	_, en := e.v.Link(ctx, root, sf, base.RootIno, "g")
	want("link out", en)
	for _, req := range []base.SetAttrRequest{
		{Valid: base.SetSize, Size: 0},
		{Valid: base.SetMode, Mode: 0o600},
		{Valid: base.SetUid | base.SetGid, Uid: 5, Gid: 5},
		{Valid: base.SetMtimeNow | base.SetAtimeNow},
	} {
		_, en := e.v.SetAttr(ctx, root, sf, req)
		want("setattr", en)
	}
	want("setxattr", e.v.SetXattr(ctx, root, sf, "user.x", []byte("2"), 0))
	want("removexattr", e.v.RemoveXattr(ctx, root, sf, "user.x"))
	want("access W_OK", e.v.Access(ctx, root, sf, base.MayWrite))
	for _, flags := range []int{syscall.O_WRONLY, syscall.O_RDWR, syscall.O_RDONLY | syscall.O_TRUNC} {
		_, en := e.v.Open(ctx, root, sf, flags)
		want("open for writing", en)
	}
	if en := e.v.Access(ctx, root, sf, base.MayRead); en != 0 {
		t.Errorf("access R_OK: %v", en)
	}
	fh, en := e.v.Open(ctx, root, sf, syscall.O_RDONLY)
	if en != 0 {
		t.Fatal(en)
	}
	if _, en := e.v.Write(ctx, fh, 0, []byte("x")); en != syscall.EBADF {
		t.Errorf("write through a read-only handle: %v", en)
	}
	if en := e.v.Fallocate(ctx, root, fh, 0, 0, 100); en != syscall.EBADF {
		t.Errorf("fallocate through a read-only handle: %v", en)
	}
	e.v.Release(ctx, fh)
	// Nothing changed, in the snapshot or live.
	if string(e.readAll(t, sf)) != "data" || string(e.readAll(t, f)) != "data" {
		t.Fatal("content changed")
	}
	if got := e.names(t, sr, false); !slices.Equal(got, []string{".", "..", "d", "f"}) {
		t.Fatalf("snapshot lists %v", got)
	}
	if got := e.names(t, base.RootIno, false); !slices.Equal(got, []string{".", "..", "d", "f"}) {
		t.Fatalf("root lists %v", got)
	}
}

func TestSnapshotStaleAfterDelete(t *testing.T) {
	e := newEnvWith(t, Options{SnapshotCheck: time.Nanosecond})
	e.writeFile(t, base.RootIno, "f", bytes.Repeat([]byte{7}, 100000))
	e.mkdir(t, base.RootIno, "d")
	e.snapshot(t, "s")
	sr := e.snapshotRoot(t, "s")
	sf, _ := e.lookup(t, sr, "f")
	sd, _ := e.lookup(t, sr, "d")
	fh, en := e.v.Open(ctx, root, sf, syscall.O_RDONLY)
	if en != 0 {
		t.Fatal(en)
	}
	if got := e.read(t, fh, 0, 10); !bytes.Equal(got, bytes.Repeat([]byte{7}, 10)) {
		t.Fatalf("read before delete: %v", got)
	}
	dh, en := e.v.OpenDir(ctx, root, sd)
	if en != 0 {
		t.Fatal(en)
	}
	if err := e.m.DeleteSnapshot(ctx, "s", nil); err != nil {
		t.Fatal(err)
	}
	if _, en := e.v.Read(ctx, fh, 0, make([]byte, 10)); en != syscall.ESTALE {
		t.Errorf("read after delete: %v", en)
	}
	if _, en := e.v.GetAttr(ctx, sf); en != syscall.ESTALE {
		t.Errorf("getattr after delete: %v", en)
	}
	if _, _, en := e.v.Lookup(ctx, root, sr, "f"); en != syscall.ESTALE {
		t.Errorf("lookup after delete: %v", en)
	}
	if _, en := e.v.Open(ctx, root, sf, syscall.O_RDONLY); en != syscall.ESTALE {
		t.Errorf("open after delete: %v", en)
	}
	if en := e.v.ReadDir(ctx, root, dh, 2, NoAttrs, func(DirEntry) bool { return true }); en != syscall.ESTALE {
		t.Errorf("readdir after delete: %v", en)
	}
	if _, _, en := e.v.Lookup(ctx, root, SnapshotsIno, "s"); en != syscall.ENOENT {
		t.Errorf("lookup of the deleted snapshot: %v", en)
	}
	// Unknown slots are stale too.
	if _, en := e.v.GetAttr(ctx, base.Ino(77<<slotShift|1)); en != syscall.ESTALE {
		t.Errorf("getattr in an unknown slot: %v", en)
	}
	e.v.ReleaseDir(dh)
	if en := e.v.Release(ctx, fh); en != 0 {
		t.Errorf("release after delete: %v", en)
	}
	// A new snapshot of the same name is another tree.
	e.snapshot(t, "s")
	if sr2 := e.snapshotRoot(t, "s"); sr2 == sr {
		t.Fatalf("a new snapshot reuses the inode numbers %#x of a deleted one", sr)
	}
}

func TestSnapshotAtRoot(t *testing.T) {
	e := newEnv(t)
	e.writeFile(t, base.RootIno, "f", []byte("old"))
	s := e.snapshot(t, "s")
	fh, en := e.v.Open(ctx, root, mustLookup(t, e.v, base.RootIno, "f"), syscall.O_WRONLY|syscall.O_TRUNC)
	if en != 0 {
		t.Fatal(en)
	}
	e.write(t, fh, 0, []byte("new!"))
	e.v.Release(ctx, fh)

	sv := New(e.m, e.cs, Options{Snapshot: &s, FlushInterval: time.Hour})
	defer sv.Close(ctx)
	f := mustLookup(t, sv, base.RootIno, "f")
	if f>>slotShift != 0 {
		t.Fatalf("a snapshot mount numbers its files %#x", f)
	}
	h, en := sv.Open(ctx, root, f, syscall.O_RDONLY)
	if en != 0 {
		t.Fatal(en)
	}
	buf := make([]byte, 10)
	n, en := sv.Read(ctx, h, 0, buf)
	if en != 0 || string(buf[:n]) != "old" {
		t.Fatalf("snapshot mount reads %q %v", buf[:n], en)
	}
	sv.Release(ctx, h)
	if _, _, en := sv.Lookup(ctx, root, base.RootIno, SnapshotsDir); en != syscall.ENOENT {
		t.Fatalf("/.snapshots in a snapshot mount: %v", en)
	}
	if _, _, _, en := sv.Create(ctx, root, base.RootIno, "g", 0o644, 0, syscall.O_RDWR); en != syscall.EROFS {
		t.Fatalf("create in a snapshot mount: %v", en)
	}
	if _, en := sv.Open(ctx, root, f, syscall.O_RDWR); en != syscall.EROFS {
		t.Fatalf("open for writing in a snapshot mount: %v", en)
	}
	if en := sv.Unlink(ctx, root, base.RootIno, "f"); en != syscall.EROFS {
		t.Fatalf("unlink in a snapshot mount: %v", en)
	}
	if n := e.holds(t); n != 0 {
		t.Fatalf("%d holds left", n)
	}
	if err := e.m.DeleteSnapshot(ctx, "s", nil); err != nil {
		t.Fatal(err)
	}
	if _, en := sv.GetAttr(ctx, base.RootIno); en != syscall.ESTALE {
		t.Fatalf("getattr of a deleted snapshot's root: %v", en)
	}
}

func mustLookup(t *testing.T, v *VFS, parent base.Ino, name string) base.Ino {
	t.Helper()
	ino, _, en := v.Lookup(ctx, root, parent, name)
	if en != 0 {
		t.Fatalf("lookup %q: %v", name, en)
	}
	return ino
}

// TestSnapshotInoRoundTrip: SplitIno and SnapshotIno name snapshot inodes
// by (epoch, ino), so a second VFS of the volume (another gateway, or the
// same one after a restart) finds them without a lookup from /.snapshots.
func TestSnapshotInoRoundTrip(t *testing.T) {
	e := newEnvWith(t, Options{SnapshotCheck: time.Nanosecond})
	e.mkdir(t, base.RootIno, "d")
	e.writeFile(t, base.RootIno, "f", []byte("frozen"))
	s1 := e.snapshot(t, "one")
	s2 := e.snapshot(t, "two")
	sr := e.snapshotRoot(t, "two")
	sf, _ := e.lookup(t, sr, "f")
	live, _ := e.lookup(t, base.RootIno, "f")

	tests := []struct {
		name  string
		ino   base.Ino
		kind  InoKind
		epoch uint64
		real  base.Ino
	}{
		{"live file", live, InoRoot, 0, live},
		{"live root", base.RootIno, InoRoot, 0, base.RootIno},
		{"/.snapshots", SnapshotsIno, InoSnapshotsDir, 0, SnapshotsIno},
		{"snapshot root", sr, InoSnapshot, s2.Epoch, base.RootIno},
		{"snapshot file", sf, InoSnapshot, s2.Epoch, live},
	}
	other := New(e.m, e.cs, Options{FlushInterval: time.Hour, SnapshotCheck: time.Nanosecond})
	defer other.Close(ctx)
	for _, tc := range tests {
		kind, epoch, real, en := e.v.SplitIno(tc.ino)
		if en != 0 || kind != tc.kind || epoch != tc.epoch || real != tc.real {
			t.Errorf("%s: SplitIno(%#x) = %v %d %#x %v, want %v %d %#x", tc.name, tc.ino, kind, epoch, real, en, tc.kind, tc.epoch, tc.real)
		}
		if kind != InoSnapshot {
			continue
		}
		// The other VFS has never looked at /.snapshots.
		ino, en := other.SnapshotIno(ctx, epoch, real)
		if en != 0 {
			t.Fatalf("%s: SnapshotIno in another VFS: %v", tc.name, en)
		}
		a, en := other.GetAttr(ctx, ino)
		b, _ := e.v.GetAttr(ctx, tc.ino)
		if en != 0 || a.Type != b.Type || a.Length != b.Length || a.Mtime != b.Mtime {
			t.Errorf("%s: attributes in another VFS %+v (%v), want %+v", tc.name, a, en, b)
		}
		if k, ep, r, _ := other.SplitIno(ino); k != InoSnapshot || ep != epoch || r != real {
			t.Errorf("%s: round trip %v %d %#x", tc.name, k, ep, r)
		}
	}
	ino, _ := other.SnapshotIno(ctx, s2.Epoch, live)
	if got := string(e.readAllIn(t, other, ino)); got != "frozen" {
		t.Errorf("snapshot file through another VFS: %q", got)
	}
	// Same epoch, same slot; another epoch, another slot.
	if a, _ := other.SnapshotIno(ctx, s2.Epoch, base.RootIno); a>>slotShift != ino>>slotShift {
		t.Errorf("one snapshot in two slots: %#x %#x", a, ino)
	}
	if a, _ := other.SnapshotIno(ctx, s1.Epoch, base.RootIno); a>>slotShift == ino>>slotShift {
		t.Errorf("two snapshots in one slot: %#x", a)
	}
	for _, tc := range []struct {
		name  string
		epoch uint64
		ino   base.Ino
		want  syscall.Errno
	}{
		{"unknown epoch", s2.Epoch + 1000, base.RootIno, syscall.ESTALE},
		{"ino 0", s2.Epoch, 0, syscall.EINVAL},
		{"ino too large", s2.Epoch, 1 << slotShift, syscall.EINVAL},
	} {
		if _, en := other.SnapshotIno(ctx, tc.epoch, tc.ino); en != tc.want {
			t.Errorf("SnapshotIno, %s: %v, want %v", tc.name, en, tc.want)
		}
	}
	if _, _, _, en := other.SplitIno(base.Ino(99<<slotShift | 1)); en != syscall.ESTALE {
		t.Errorf("SplitIno of an unknown slot: %v", en)
	}
	if err := e.m.DeleteSnapshot(ctx, "two", nil); err != nil {
		t.Fatal(err)
	}
	third := New(e.m, e.cs, Options{FlushInterval: time.Hour})
	defer third.Close(ctx)
	if _, en := third.SnapshotIno(ctx, s2.Epoch, base.RootIno); en != syscall.ESTALE {
		t.Errorf("SnapshotIno of a deleted snapshot: %v", en)
	}
	if _, en := other.SnapshotIno(ctx, s2.Epoch, base.RootIno); en != syscall.ESTALE {
		t.Errorf("SnapshotIno of a deleted snapshot already in a slot: %v", en)
	}
	// A snapshot mount has no /.snapshots.
	sv := New(e.m, e.cs, Options{Snapshot: &s1, FlushInterval: time.Hour})
	defer sv.Close(ctx)
	if _, en := sv.SnapshotIno(ctx, s1.Epoch, base.RootIno); en != syscall.ESTALE {
		t.Errorf("SnapshotIno in a snapshot mount: %v", en)
	}
}

// readAllIn reads ino whole through v.
func (e *env) readAllIn(t *testing.T, v *VFS, ino base.Ino) []byte {
	t.Helper()
	fh, en := v.Open(ctx, root, ino, syscall.O_RDONLY)
	if en != 0 {
		t.Fatalf("open %#x: %v", ino, en)
	}
	defer v.Release(ctx, fh)
	buf := make([]byte, 1<<16)
	n, en := v.Read(ctx, fh, 0, buf)
	if en != 0 {
		t.Fatalf("read %#x: %v", ino, en)
	}
	return buf[:n]
}
