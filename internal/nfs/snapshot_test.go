package nfs

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/internal/nfs/nfsclient"
	"github.com/cairnfs/cairn/internal/nfs/proto"
	"github.com/cairnfs/cairn/internal/vfs"
)

// snapshotFixture is a volume with a snapshot "s" of a file, a directory
// and a symlink, taken before the live file changed, as seen by a client.
type snapshotFixture struct {
	e        *env
	c        *nfsclient.Client
	root     []byte
	snaps    []byte // /.snapshots
	sroot    []byte // /.snapshots/s
	file     []byte // /.snapshots/s/f
	old, new []byte // the file's content in the snapshot and now
}

func newSnapshotFixture(t *testing.T) *snapshotFixture {
	t.Helper()
	e := newEnv(t)
	c, root := e.client(t)
	f := &snapshotFixture{e: e, c: c, root: root, old: randBytes(300<<10+5, 3), new: []byte("changed")}
	fh, err := c.Create(root, "f", proto.CreateGuarded, proto.Sattr3{}, [8]byte{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(fh, 0, f.old, proto.FileSync); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Commit(fh); err != nil {
		t.Fatal(err)
	}
	d, err := c.Mkdir(root, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create(d, "inner", proto.CreateGuarded, proto.Sattr3{}, [8]byte{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Symlink(root, "link", "d/inner"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.CreateSnapshot(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	if err := c.SetAttr(fh, proto.Sattr3{Size: u64(0)}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(fh, 0, f.new, proto.FileSync); err != nil {
		t.Fatal(err)
	}
	if f.snaps, _, err = c.Lookup(root, vfs.SnapshotsDir); err != nil {
		t.Fatalf("lookup of /.snapshots: %v", err)
	}
	if f.sroot, _, err = c.Lookup(f.snaps, "s"); err != nil {
		t.Fatalf("lookup of /.snapshots/s: %v", err)
	}
	if f.file, _, err = c.Lookup(f.sroot, "f"); err != nil {
		t.Fatalf("lookup of /.snapshots/s/f: %v", err)
	}
	return f
}

func readWhole(t *testing.T, c *nfsclient.Client, fh []byte) []byte {
	t.Helper()
	var got []byte
	for {
		p, eof, err := c.Read(fh, uint64(len(got)), 128<<10)
		if err != nil {
			t.Fatalf("read at %d: %v", len(got), err)
		}
		got = append(got, p...)
		if eof {
			return got
		}
	}
}

func names(ents []nfsclient.Entry) []string {
	var out []string
	for _, e := range ents {
		out = append(out, e.Name)
	}
	slices.Sort(out)
	return out
}

// TestSnapshotsOverNFS: /.snapshots is found by LOOKUP (not listed in the
// root), lists its snapshots, and everything under it reads as it was when
// the snapshot was taken: READDIRPLUS (with handles), READ, READLINK,
// GETATTR, LOOKUP of "..".
func TestSnapshotsOverNFS(t *testing.T) {
	f := newSnapshotFixture(t)
	c := f.c
	ents, _, err := c.ReadDirPlus(f.root, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(names(ents), vfs.SnapshotsDir) {
		t.Errorf("the root lists %s: %v", vfs.SnapshotsDir, names(ents))
	}
	a, err := c.GetAttr(f.snaps)
	if err != nil || a.Type != proto.NF3Dir || a.Mode != 0o555 {
		t.Fatalf("getattr of /.snapshots: %+v %v", a, err)
	}
	ents, _, err = c.ReadDirPlus(f.snaps, 4096)
	if err != nil || !slices.Equal(names(ents), []string{".", "..", "s"}) {
		t.Fatalf("readdirplus of /.snapshots: %v %v", names(ents), err)
	}
	for _, en := range ents {
		if en.Name == "s" && (!bytes.Equal(en.Handle, f.sroot) || en.Attr == nil || en.Attr.Type != proto.NF3Dir) {
			t.Errorf("/.snapshots/s listed with handle %x attr %+v, lookup gave %x", en.Handle, en.Attr, f.sroot)
		}
	}
	ents, _, err = c.ReadDirPlus(f.sroot, 4096)
	if err != nil || !slices.Equal(names(ents), []string{".", "..", "d", "f", "link"}) {
		t.Fatalf("readdirplus of the snapshot: %v %v", names(ents), err)
	}
	for _, en := range ents {
		if en.Handle == nil || en.Attr == nil {
			t.Errorf("snapshot entry %q without handle or attributes", en.Name)
		}
		if en.Name == "f" && (!bytes.Equal(en.Handle, f.file) || en.Attr.Size != uint64(len(f.old))) {
			t.Errorf("snapshot file listed as %x size %d", en.Handle, en.Attr.Size)
		}
	}
	if got := readWhole(t, c, f.file); !bytes.Equal(got, f.old) {
		t.Errorf("snapshot file reads %d bytes, want the %d it had", len(got), len(f.old))
	}
	live, _, _ := c.Lookup(f.root, "f")
	if got := readWhole(t, c, live); !bytes.Equal(got, f.new) {
		t.Errorf("live file reads %q", got)
	}
	la, _ := c.GetAttr(live)
	sa, _ := c.GetAttr(f.file)
	if sa.Fileid == la.Fileid || sa.Size != uint64(len(f.old)) {
		t.Errorf("snapshot file: fileid %#x size %d; live fileid %#x", sa.Fileid, sa.Size, la.Fileid)
	}
	link, _, err := c.Lookup(f.sroot, "link")
	if err != nil {
		t.Fatal(err)
	}
	if target, err := c.Readlink(link); err != nil || target != "d/inner" {
		t.Errorf("readlink in the snapshot: %q %v", target, err)
	}
	d, _, err := c.Lookup(f.sroot, "d")
	if err != nil {
		t.Fatal(err)
	}
	if ns, err := c.ReadDir(d, 4096); err != nil || !slices.Contains(ns, "inner") {
		t.Errorf("readdir in the snapshot: %v %v", ns, err)
	}
	up, _, err := c.Lookup(f.sroot, "..")
	if err != nil || !bytes.Equal(up, f.snaps) {
		t.Errorf("lookup of .. in the snapshot root: %x %v, want /.snapshots %x", up, err, f.snaps)
	}
	up, _, err = c.Lookup(f.snaps, "..")
	if err != nil || !bytes.Equal(up, f.root) {
		t.Errorf("lookup of .. in /.snapshots: %x %v", up, err)
	}
	// MNT of a path in a snapshot, as libnfs does for a file URL there.
	if m, err := c.Mount("/.snapshots/s/d"); err != nil || !bytes.Equal(m, d) {
		t.Errorf("mount of /.snapshots/s/d: %x %v, want %x", m, err, d)
	}
}

// TestSnapshotsReadOnly: every modification under /.snapshots is
// NFS3ERR_ROFS.
func TestSnapshotsReadOnly(t *testing.T) {
	f := newSnapshotFixture(t)
	c := f.c
	live, _, _ := c.Lookup(f.root, "f")
	steps := []struct {
		name string
		do   func() error
	}{
		{"write", func() error { _, err := c.Write(f.file, 0, []byte("x"), proto.Unstable); return err }},
		{"stable write", func() error { _, err := c.Write(f.file, 0, []byte("x"), proto.FileSync); return err }},
		{"truncate", func() error { return c.SetAttr(f.file, proto.Sattr3{Size: u64(0)}) }},
		{"chmod", func() error { return c.SetAttr(f.file, proto.Sattr3{Mode: u32(0o777)}) }},
		{"chmod /.snapshots", func() error { return c.SetAttr(f.snaps, proto.Sattr3{Mode: u32(0o777)}) }},
		{"create", func() error {
			_, err := c.Create(f.sroot, "new", proto.CreateUnchecked, proto.Sattr3{}, [8]byte{})
			return err
		}},
		{"create in /.snapshots", func() error {
			_, err := c.Create(f.snaps, "new", proto.CreateGuarded, proto.Sattr3{}, [8]byte{})
			return err
		}},
		{"mkdir", func() error { _, err := c.Mkdir(f.sroot, "new", 0o755); return err }},
		{"mkdir in /.snapshots", func() error { _, err := c.Mkdir(f.snaps, "new", 0o755); return err }},
		{"symlink", func() error { _, err := c.Symlink(f.sroot, "new", "x"); return err }},
		{"mknod", func() error { _, err := c.Mknod(f.sroot, "fifo", proto.NF3FIFO, 0o644, 0, 0); return err }},
		{"remove", func() error { return c.Remove(f.sroot, "f") }},
		{"rmdir", func() error { return c.Rmdir(f.sroot, "d") }},
		{"remove a snapshot", func() error { return c.Rmdir(f.snaps, "s") }},
		{"remove /.snapshots", func() error { return c.Rmdir(f.root, vfs.SnapshotsDir) }},
		{"rename within", func() error { return c.Rename(f.sroot, "f", f.sroot, "g") }},
		{"rename out", func() error { return c.Rename(f.sroot, "f", f.root, "g") }},
		{"rename in", func() error { return c.Rename(f.root, "f", f.sroot, "g") }},
		{"link into", func() error { return c.Link(live, f.sroot, "g") }},
		{"link from", func() error { return c.Link(f.file, f.root, "g") }},
	}
	for _, st := range steps {
		if err := st.do(); status(err) != proto.NFS3ErrROFS {
			t.Errorf("%s under /.snapshots: %v, want NFS3ERR_ROFS", st.name, err)
		}
	}
	if got := readWhole(t, c, f.file); !bytes.Equal(got, f.old) {
		t.Errorf("the snapshot file changed: %d bytes", len(got))
	}
	if got := readWhole(t, c, live); !bytes.Equal(got, f.new) {
		t.Errorf("the live file changed: %q", got)
	}
	// ACCESS grants no modification under /.snapshots.
	got, err := c.Access(f.file, proto.AccessRead|proto.AccessModify|proto.AccessExtend)
	if err != nil || got != proto.AccessRead {
		t.Errorf("access of a snapshot file: %#x %v, want read only", got, err)
	}
}

// TestSnapshotHandlesAcrossGateways: handles of snapshot objects work on
// a gateway that never looked at /.snapshots (another gateway of the
// volume, or this one restarted), with the same file ids; once the
// snapshot is deleted they are NFS3ERR_STALE on both.
func TestSnapshotHandlesAcrossGateways(t *testing.T) {
	f := newSnapshotFixture(t)
	// Make another snapshot the first gateway meets first, so the two
	// vfs number their slots differently.
	if _, err := f.e.m.CreateSnapshot(ctx, "a-later"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.c.Lookup(f.snaps, "a-later"); err != nil {
		t.Fatal(err)
	}
	second := f.e.sibling(t, Options{})
	c2, err := nfsclient.Dial(second.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if got := readWhole(t, c2, f.file); !bytes.Equal(got, f.old) {
		t.Fatalf("snapshot file through the second gateway: %d bytes", len(got))
	}
	for _, fh := range [][]byte{f.snaps, f.sroot, f.file} {
		a1, err1 := f.c.GetAttr(fh)
		a2, err2 := c2.GetAttr(fh)
		if err1 != nil || err2 != nil || a1 != a2 {
			t.Errorf("handle %x: gateway 1 %+v %v, gateway 2 %+v %v", fh, a1, err1, a2, err2)
		}
	}
	ents, _, err := c2.ReadDirPlus(f.sroot, 4096)
	if err != nil || !slices.Contains(names(ents), "f") {
		t.Errorf("readdirplus of the snapshot on the second gateway: %v %v", names(ents), err)
	}
	if err := f.e.m.DeleteSnapshot(ctx, "s", nil); err != nil {
		t.Fatal(err)
	}
	third := f.e.sibling(t, Options{})
	c3, err := nfsclient.Dial(third.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	for i, c := range []*nfsclient.Client{f.c, c2, c3} {
		for _, fh := range [][]byte{f.sroot, f.file} {
			if _, err := c.GetAttr(fh); status(err) != proto.NFS3ErrStale {
				t.Errorf("gateway %d: getattr of a deleted snapshot's handle: %v", i+1, err)
			}
		}
		if _, _, err := c.Read(f.file, 0, 10); status(err) != proto.NFS3ErrStale {
			t.Errorf("gateway %d: read of a deleted snapshot's file: %v", i+1, err)
		}
		if _, err := c.GetAttr(f.snaps); err != nil {
			t.Errorf("gateway %d: /.snapshots after the delete: %v", i+1, err)
		}
	}
}

// TestLibnfsSnapshots: nfs-ls and nfs-cat (libnfs-utils) reach
// /.snapshots and read a file there as it was.
func TestLibnfsSnapshots(t *testing.T) {
	ls := libnfsTool(t, "nfs-ls")
	cat := libnfsTool(t, "nfs-cat")
	f := newSnapshotFixture(t)
	if out := run(t, ls, f.e.url("/.snapshots/s/")); !strings.Contains(out, "link") || !strings.Contains(out, "d") {
		t.Errorf("nfs-ls of /.snapshots/s:\n%s", out)
	}
	if out := run(t, cat, f.e.url("/.snapshots/s/f")); out != string(f.old) {
		t.Errorf("nfs-cat of the snapshot file: %d bytes, want %d", len(out), len(f.old))
	}
	if out := run(t, cat, f.e.url("f")); out != string(f.new) {
		t.Errorf("nfs-cat of the live file: %q", out)
	}
}
