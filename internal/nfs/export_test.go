package nfs

import (
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"testing"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/nfs/nfsclient"
	"github.com/cairnfs/cairn/internal/nfs/proto"
)

func TestExportValidate(t *testing.T) {
	tests := []struct {
		name string
		x    Export
		ok   bool
	}{
		{"zero", Export{}, true},
		{"everything", Export{ReadOnly: true, Allow: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}, Squash: SquashAll, AnonUid: 1, AnonGid: 2}, true},
		{"bad squash", Export{Squash: 3}, false},
		{"invalid prefix", Export{Allow: []netip.Prefix{{}}}, false},
	}
	for _, tc := range tests {
		err := Options{VolumeUUID: "u", Export: tc.x}.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	for _, s := range []string{"none", "root", "all"} {
		if q, err := ParseSquash(s); err != nil || q.String() != s {
			t.Errorf("ParseSquash(%q) = %v %v", s, q, err)
		}
	}
	if _, err := ParseSquash("everyone"); err == nil {
		t.Error("ParseSquash accepts everyone")
	}
}

// allProcedures calls every NFSv3 procedure but NULL once on fh (a
// directory) and returns each status.
func allProcedures(c *nfsclient.Client, fh []byte) map[string]error {
	out := map[string]error{}
	_, out["getattr"] = c.GetAttr(fh)
	out["setattr"] = c.SetAttr(fh, proto.Sattr3{Mode: u32(0o777)})
	_, _, out["lookup"] = c.Lookup(fh, "x")
	_, out["access"] = c.Access(fh, proto.AccessRead)
	_, out["readlink"] = c.Readlink(fh)
	_, _, out["read"] = c.Read(fh, 0, 10)
	_, out["write"] = c.Write(fh, 0, []byte("x"), proto.Unstable)
	_, out["create"] = c.Create(fh, "x", proto.CreateUnchecked, proto.Sattr3{}, [8]byte{})
	_, out["mkdir"] = c.Mkdir(fh, "x", 0o755)
	_, out["symlink"] = c.Symlink(fh, "x", "y")
	_, out["mknod"] = c.Mknod(fh, "x", proto.NF3FIFO, 0o644, 0, 0)
	out["remove"] = c.Remove(fh, "x")
	out["rmdir"] = c.Rmdir(fh, "x")
	out["rename"] = c.Rename(fh, "x", fh, "y")
	out["link"] = c.Link(fh, fh, "x")
	_, out["readdir"] = c.ReadDir(fh, 4096)
	_, _, out["readdirplus"] = c.ReadDirPlus(fh, 4096)
	_, _, out["fsstat"] = c.FSStat(fh)
	_, out["commit"] = c.Commit(fh)
	return out
}

// TestExportAllow: a client outside the allowed networks gets
// MNT3ERR_ACCES and NFS3ERR_ACCES for every procedure, even with a valid
// handle; NULL, EXPORT (listing the networks) and UMNT still answer. The
// test client connects from 127.0.0.1.
func TestExportAllow(t *testing.T) {
	v, m, cs := newVFS(t)
	refused := &env{v: v, m: m, cs: cs}
	refused.start(t, Options{Export: Export{Allow: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}})
	c, err := nfsclient.Dial(refused.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var ms nfsclient.MountStatusError
	if _, err := c.Mount("/"); !errors.As(err, &ms) || ms != proto.MntErrAccess {
		t.Fatalf("mount from outside the allowed networks: %v, want MNT3ERR_ACCES", err)
	}
	if _, err := c.Call(proto.ProgNFS, proto.NFSVersion, proto.NFSProcNull, nil); err != nil {
		t.Errorf("NULL from outside: %v", err)
	}
	if ex, err := c.Exports(); err != nil || len(ex) != 1 || ex[0].Dir != "/" || !slices.Equal(ex[0].Groups, []string{"10.0.0.0/8"}) {
		t.Errorf("EXPORT: %+v %v", ex, err)
	}
	root := refused.srv.fh.encode(kindLive, 0, base.RootIno) // known to the client by other means
	for proc, err := range allProcedures(c, root) {
		if status(err) != proto.NFS3ErrAccess {
			t.Errorf("%s from outside the allowed networks: %v, want NFS3ERR_ACCES", proc, err)
		}
	}
	if _, _, en := v.Lookup(ctx, base.RootCaller, base.RootIno, "x"); en == 0 {
		t.Error("a refused client created x")
	}
	if p, err := exec.LookPath("nfs-ls"); err == nil {
		if out, err := exec.Command(p, refused.url("/")).CombinedOutput(); err == nil {
			t.Errorf("nfs-ls from outside the allowed networks succeeds:\n%s", out)
		}
	}

	// Loopback allowed (IPv4 and IPv6): everything works, nfs-ls too.
	allowed := &env{v: v, m: m, cs: cs}
	allowed.start(t, Options{Export: Export{Allow: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}})
	c2, root2 := allowed.client(t)
	if _, err := c2.Mkdir(root2, "made", 0o755); err != nil {
		t.Fatalf("mkdir from an allowed network: %v", err)
	}
	if p, err := exec.LookPath("nfs-ls"); err == nil {
		run(t, p, allowed.url("/"))
	}
}

// TestExportReadOnly: a read-only export refuses every modifying
// procedure with NFS3ERR_ROFS, grants no modification in ACCESS, and
// serves everything else; the volume stays writable through vfs.
func TestExportReadOnly(t *testing.T) {
	v, m, cs := newVFS(t)
	e := &env{v: v, m: m, cs: cs}
	fino, _, fh, en := v.Create(ctx, base.RootCaller, base.RootIno, "f", 0o666, 0, 2)
	if en != 0 {
		t.Fatal(en)
	}
	v.Write(ctx, fh, 0, []byte("data"))
	v.Release(ctx, fh)
	e.start(t, Options{Export: Export{ReadOnly: true}})
	c, root := e.client(t)
	got := allProcedures(c, root)
	for _, proc := range []string{"setattr", "write", "create", "mkdir", "symlink", "mknod", "remove", "rmdir", "rename", "link"} {
		if status(got[proc]) != proto.NFS3ErrROFS {
			t.Errorf("%s on a read-only export: %v, want NFS3ERR_ROFS", proc, got[proc])
		}
	}
	for _, proc := range []string{"getattr", "access", "readdir", "readdirplus", "fsstat", "commit"} {
		if got[proc] != nil {
			t.Errorf("%s on a read-only export: %v", proc, got[proc])
		}
	}
	f, _, err := c.Lookup(root, "f")
	if err != nil {
		t.Fatal(err)
	}
	if p, _, err := c.Read(f, 0, 10); err != nil || string(p) != "data" {
		t.Errorf("read on a read-only export: %q %v", p, err)
	}
	if a, err := c.Access(f, proto.AccessRead|proto.AccessModify|proto.AccessExtend); err != nil || a != proto.AccessRead {
		t.Errorf("access on a read-only export: %#x %v", a, err)
	}
	if _, en := v.SetAttr(ctx, base.RootCaller, fino, base.SetAttrRequest{Valid: base.SetSize, Size: 1}); en != 0 {
		t.Errorf("the volume is not writable through vfs beside a read-only export: %v", en)
	}
}

// TestExportSquash: who owns what a client creates, per squash mode and
// the identity it sends.
func TestExportSquash(t *testing.T) {
	tests := []struct {
		squash             Squash
		anonUid, anonGid   uint32
		uid, gid           uint32
		gids               []uint32
		wantUid, wantGid   uint32
		wantGroupWriteable bool // may write a file of group 0 with mode 0660
	}{
		{SquashNone, 0, 0, 0, 0, nil, 0, 0, true},
		{SquashNone, 0, 0, 1000, 100, nil, 1000, 100, false},
		{SquashRoot, 0, 0, 0, 0, nil, 65534, 65534, false},
		{SquashRoot, 0, 0, 1000, 100, []uint32{0}, 1000, 100, false},
		{SquashRoot, 4242, 4343, 0, 7, nil, 4242, 7, false},
		{SquashRoot, 0, 0, 1000, 0, nil, 1000, 65534, false},
		{SquashAll, 0, 0, 1000, 100, []uint32{0}, 65534, 65534, false},
		{SquashAll, 4242, 4343, 0, 0, nil, 4242, 4343, false},
		{SquashNone, 0, 0, 1000, 100, []uint32{0}, 1000, 100, true},
	}
	for i, tc := range tests {
		t.Run(fmt.Sprintf("%d-%s-uid%d", i, tc.squash, tc.uid), func(t *testing.T) {
			v, m, cs := newVFS(t)
			if _, en := v.SetAttr(ctx, base.RootCaller, base.RootIno, base.SetAttrRequest{Valid: base.SetMode, Mode: 0o777}); en != 0 {
				t.Fatal(en)
			}
			_, _, fh, en := v.Create(ctx, base.RootCaller, base.RootIno, "group0", 0o660, 0, 2)
			if en != 0 {
				t.Fatal(en)
			}
			v.Release(ctx, fh)
			e := &env{v: v, m: m, cs: cs}
			e.start(t, Options{Export: Export{Squash: tc.squash, AnonUid: tc.anonUid, AnonGid: tc.anonGid}})
			c, root := e.client(t)
			c.SetUser(tc.uid, tc.gid, tc.gids...)
			f, err := c.Create(root, "new", proto.CreateGuarded, proto.Sattr3{}, [8]byte{})
			if err != nil {
				t.Fatal(err)
			}
			a, err := c.GetAttr(f)
			if err != nil || a.Uid != tc.wantUid || a.Gid != tc.wantGid {
				t.Errorf("created by %d:%d: owned by %d:%d (%v), want %d:%d", tc.uid, tc.gid, a.Uid, a.Gid, err, tc.wantUid, tc.wantGid)
			}
			g, _, err := c.Lookup(root, "group0")
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Write(g, 0, []byte("x"), proto.FileSync)
			if ok := err == nil; ok != tc.wantGroupWriteable {
				t.Errorf("write to a root:root 0660 file: %v", err)
			}
		})
	}
}

// StartTestGateway is newEnv and its client for the tests of package
// nfs_test (fstest_test.go), which cannot use package nfs's test helpers
// otherwise: a volume in memory served on a loopback port, a client
// connected to it, and the handle of its root; cleanup closes them and
// checks the volume.
func StartTestGateway(t *testing.T) (*nfsclient.Client, []byte) {
	t.Helper()
	return newEnv(t).client(t)
}
