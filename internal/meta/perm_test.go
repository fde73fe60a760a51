package meta

import (
	"strings"
	"testing"

	"github.com/cairnfs/cairn/internal/base"
)

var (
	alice = &Caller{Uid: 1000, Gid: 1000, Gids: []uint32{1000, 50}}
	bob   = &Caller{Uid: 1001, Gid: 1001}
)

func TestXattr(t *testing.T) {
	m := newTestMeta(t)
	f := create(t, m, root, base.RootIno, "f")
	c0 := attr(t, m, f).Ctime
	ok(t, m.SetXattr(ctx, root, f, "user.a", []byte("1"), XattrCreate))
	if attr(t, m, f).Ctime <= c0 {
		t.Error("ctime not updated")
	}
	wantErr(t, m.SetXattr(ctx, root, f, "user.a", []byte("2"), XattrCreate), base.ErrExist)
	wantErr(t, m.SetXattr(ctx, root, f, "user.b", []byte("2"), XattrReplace), base.ErrNoAttr)
	ok(t, m.SetXattr(ctx, root, f, "user.a", []byte("2"), XattrReplace))
	ok(t, m.SetXattr(ctx, root, f, "trusted.t", nil, 0))
	ok(t, m.SetXattr(ctx, root, f, "user.empty", []byte{}, 0))
	if v := must[[]byte](t)(m.GetXattr(ctx, root, f, "user.a")); string(v) != "2" {
		t.Fatalf("value %q", v)
	}
	if v := must[[]byte](t)(m.GetXattr(ctx, root, f, "user.empty")); len(v) != 0 {
		t.Fatalf("value %q", v)
	}
	_, err := m.GetXattr(ctx, root, f, "user.none")
	wantErr(t, err, base.ErrNoAttr)
	if l := must[[]string](t)(m.ListXattr(ctx, root, f)); strings.Join(l, ",") != "trusted.t,user.a,user.empty" {
		t.Fatalf("list %v", l)
	}
	if l := must[[]string](t)(m.ListXattr(ctx, alice, f)); strings.Join(l, ",") != "user.a,user.empty" {
		t.Fatalf("list for alice %v", l)
	}
	ok(t, m.RemoveXattr(ctx, root, f, "user.a"))
	wantErr(t, m.RemoveXattr(ctx, root, f, "user.a"), base.ErrNoAttr)
	wantErr(t, m.SetXattr(ctx, root, f, strings.Repeat("u", 256), nil, 0), base.ErrRange)
	wantErr(t, m.SetXattr(ctx, root, f, "", nil, 0), base.ErrRange)
	wantErr(t, m.SetXattr(ctx, root, f, "user.big", make([]byte, MaxXattrValue+1), 0), base.ErrRange)
	ok(t, m.SetXattr(ctx, root, f, "user.max", make([]byte, MaxXattrValue), 0))
	wantErr(t, m.SetXattr(ctx, root, f, "system.posix_acl_access", nil, 0), base.ErrNotSupported)
	wantErr(t, m.SetXattr(ctx, root, f, "user.x", nil, 3), base.ErrInvalid)
	wantErr(t, m.SetXattr(ctx, root, 999, "user.x", nil, 0), base.ErrNotFound)
	// permissions: file is root's 0644
	wantErr(t, m.SetXattr(ctx, alice, f, "user.x", nil, 0), base.ErrAccess)
	wantErr(t, m.SetXattr(ctx, alice, f, "trusted.x", nil, 0), base.ErrPermission)
	_, err = m.GetXattr(ctx, alice, f, "trusted.t")
	wantErr(t, err, base.ErrPermission)
	wantErr(t, m.SetXattr(ctx, alice, f, "security.x", nil, 0), base.ErrPermission)
	_, err = m.GetXattr(ctx, alice, f, "user.empty")
	ok(t, err)
	l, _, err := m.Mknod(ctx, root, base.RootIno, "l", base.TypeSymlink, 0, 0, 0, "f")
	ok(t, err)
	wantErr(t, m.SetXattr(ctx, alice, l, "user.x", nil, 0), base.ErrPermission)
	// removing the file removes its xattrs (Check verifies no orphans)
	ok(t, m.Unlink(ctx, root, base.RootIno, "f"))
}

func TestPermissions(t *testing.T) {
	m := newTestMeta(t)
	R := base.RootIno
	pub := mkdir(t, m, root, R, "pub")
	_, err := m.SetAttr(ctx, root, pub, SetAttrRequest{Valid: SetMode, Mode: 0o1777})
	ok(t, err)
	priv := mkdir(t, m, root, R, "priv") // 0755 root
	home := mkdir(t, m, root, R, "home")
	_, err = m.SetAttr(ctx, root, home, SetAttrRequest{Valid: SetUid | SetGid, Uid: alice.Uid, Gid: alice.Gid})
	ok(t, err)

	// create needs w+x on the parent
	_, _, err = m.Mknod(ctx, alice, priv, "x", base.TypeFile, 0o644, 0, 0, "")
	wantErr(t, err, base.ErrAccess)
	af, afa, err := m.Mknod(ctx, alice, pub, "af", base.TypeFile, 0o666, 0o022, 0, "")
	ok(t, err)
	if afa.Uid != alice.Uid || afa.Gid != alice.Gid || afa.Mode != 0o644 {
		t.Fatalf("owner %+v", afa)
	}
	// KernelChecked skips rwx checks
	kc := &Caller{Uid: bob.Uid, Gid: bob.Gid, KernelChecked: true}
	_, _, err = m.Mknod(ctx, kc, priv, "kc", base.TypeFile, 0o644, 0, 0, "")
	ok(t, err)
	ok(t, m.Unlink(ctx, root, priv, "kc"))

	// sticky: bob may not remove or rename alice's file; alice and root may
	wantErr(t, m.Unlink(ctx, bob, pub, "af"), base.ErrPermission)
	wantErr(t, m.Rename(ctx, bob, pub, "af", pub, "bf", 0), base.ErrPermission)
	wantErr(t, m.Unlink(ctx, kc, pub, "af"), base.ErrPermission) // sticky applies even kernel-checked
	create(t, m, bob, pub, "bobs")
	wantErr(t, m.Rename(ctx, alice, pub, "af", pub, "bobs", 0), base.ErrPermission) // replacing bob's file
	ok(t, m.Rename(ctx, alice, pub, "af", pub, "af2", 0))

	// lookup needs x
	_, err = m.SetAttr(ctx, root, priv, SetAttrRequest{Valid: SetMode, Mode: 0o700})
	ok(t, err)
	_, _, err = m.Lookup(ctx, alice, priv, "x")
	wantErr(t, err, base.ErrAccess)
	_, err = m.Readdir(ctx, alice, priv, "", 0, false)
	wantErr(t, err, base.ErrAccess)
	wantErr(t, m.Access(ctx, alice, priv, MayRead), base.ErrAccess)
	ok(t, m.Access(ctx, alice, home, MayRead|MayWrite|MayExec))
	ok(t, m.Access(ctx, root, priv, MayRead|MayWrite|MayExec))
	// root needs some x bit to execute a file
	wantErr(t, m.Access(ctx, root, af, MayExec), base.ErrAccess)
	ok(t, m.Access(ctx, root, af, MayRead|MayWrite))
	// group and other classes
	_, err = m.SetAttr(ctx, alice, af, SetAttrRequest{Valid: SetMode, Mode: 0o604})
	ok(t, err)
	groupie := &Caller{Uid: 2000, Gid: 2000, Gids: []uint32{alice.Gid}}
	wantErr(t, m.Access(ctx, groupie, af, MayRead), base.ErrAccess) // group has no bits, other has r
	ok(t, m.Access(ctx, bob, af, MayRead))

	// moving a directory to another parent needs w on the directory itself
	ad := mkdir(t, m, alice, home, "ad")
	_, err = m.SetAttr(ctx, alice, ad, SetAttrRequest{Valid: SetMode, Mode: 0o555})
	ok(t, err)
	wantErr(t, m.Rename(ctx, alice, home, "ad", pub, "ad", 0), base.ErrAccess)
	ok(t, m.Rename(ctx, alice, home, "ad", home, "ad2", 0)) // same parent: fine

	// truncate needs write permission
	_, err = m.SetAttr(ctx, bob, af, SetAttrRequest{Valid: SetSize, Size: 0})
	wantErr(t, err, base.ErrAccess)
}

func TestChmodChownUtimes(t *testing.T) {
	m := newTestMeta(t)
	R := base.RootIno
	home := mkdir(t, m, root, R, "home")
	_, err := m.SetAttr(ctx, root, home, SetAttrRequest{Valid: SetMode, Mode: 0o777})
	ok(t, err)
	f := create(t, m, alice, home, "f")

	// chmod: owner or root
	_, err = m.SetAttr(ctx, bob, f, SetAttrRequest{Valid: SetMode, Mode: 0o777})
	wantErr(t, err, base.ErrPermission)
	a := must[base.Attr](t)(m.SetAttr(ctx, alice, f, SetAttrRequest{Valid: SetMode, Mode: 0o2755}))
	if a.Mode != 0o2755 {
		t.Fatalf("mode %o", a.Mode)
	}
	// chown: alice may change the group to one of hers, not the owner
	a = must[base.Attr](t)(m.SetAttr(ctx, alice, f, SetAttrRequest{Valid: SetGid, Gid: 50}))
	if a.Gid != 50 || a.Mode != 0o755 { // setgid cleared: group-exec set
		t.Fatalf("chgrp %+v mode %o", a, a.Mode)
	}
	_, err = m.SetAttr(ctx, alice, f, SetAttrRequest{Valid: SetGid, Gid: 7})
	wantErr(t, err, base.ErrPermission)
	_, err = m.SetAttr(ctx, alice, f, SetAttrRequest{Valid: SetUid, Uid: bob.Uid})
	wantErr(t, err, base.ErrPermission)
	_, err = m.SetAttr(ctx, bob, f, SetAttrRequest{Valid: SetGid, Gid: bob.Gid})
	wantErr(t, err, base.ErrPermission)
	// chmod by a non-member of the group clears setgid
	a = must[base.Attr](t)(m.SetAttr(ctx, root, f, SetAttrRequest{Valid: SetGid, Gid: 7}))
	a = must[base.Attr](t)(m.SetAttr(ctx, alice, f, SetAttrRequest{Valid: SetMode, Mode: 0o2755}))
	if a.Mode != 0o755 {
		t.Fatalf("setgid kept: %o", a.Mode)
	}
	// root chown clears setuid even for root; setgid without group-exec stays
	_, err = m.SetAttr(ctx, root, f, SetAttrRequest{Valid: SetMode, Mode: 0o6745})
	ok(t, err)
	a = must[base.Attr](t)(m.SetAttr(ctx, root, f, SetAttrRequest{Valid: SetUid, Uid: bob.Uid}))
	if a.Mode != 0o2745 || a.Uid != bob.Uid {
		t.Fatalf("after chown mode %o", a.Mode)
	}
	// chown with an explicit mode keeps the given mode
	a = must[base.Attr](t)(m.SetAttr(ctx, root, f, SetAttrRequest{Valid: SetUid | SetMode, Uid: alice.Uid, Mode: 0o4755}))
	if a.Mode != 0o4755 {
		t.Fatalf("mode %o", a.Mode)
	}
	// directories keep setgid on chown
	d := mkdir(t, m, alice, home, "d")
	_, err = m.SetAttr(ctx, alice, d, SetAttrRequest{Valid: SetMode, Mode: 0o2775})
	ok(t, err)
	a = must[base.Attr](t)(m.SetAttr(ctx, alice, d, SetAttrRequest{Valid: SetGid, Gid: 50}))
	if a.Mode != 0o2775 {
		t.Fatalf("dir mode %o", a.Mode)
	}

	// utimes: explicit times need ownership; "now" needs write access
	_, err = m.SetAttr(ctx, bob, f, SetAttrRequest{Valid: SetMtime, Mtime: 5})
	wantErr(t, err, base.ErrPermission)
	_, err = m.SetAttr(ctx, bob, f, SetAttrRequest{Valid: SetMtimeNow})
	wantErr(t, err, base.ErrAccess)
	_, err = m.SetAttr(ctx, root, f, SetAttrRequest{Valid: SetMode, Mode: 0o666})
	ok(t, err)
	before := attr(t, m, f)
	a = must[base.Attr](t)(m.SetAttr(ctx, bob, f, SetAttrRequest{Valid: SetMtimeNow | SetAtimeNow}))
	if a.Mtime <= before.Mtime || a.Ctime <= before.Ctime || a.Atime <= before.Atime {
		t.Fatalf("times %+v", a)
	}
	a = must[base.Attr](t)(m.SetAttr(ctx, alice, f, SetAttrRequest{Valid: SetMtime | SetAtime, Mtime: 5, Atime: 6}))
	if a.Mtime != 5 || a.Atime != 6 || a.Ctime <= before.Ctime {
		t.Fatalf("times %+v", a)
	}
	_, err = m.SetAttr(ctx, alice, f, SetAttrRequest{Valid: SetCtime, Ctime: 1})
	wantErr(t, err, base.ErrPermission)
	a = must[base.Attr](t)(m.SetAttr(ctx, root, f, SetAttrRequest{Valid: SetCtime, Ctime: 1}))
	if a.Ctime != 1 {
		t.Fatal("ctime")
	}
}

// TestKillSuidgid: what a write by a process without CAP_FSETID drops,
// whoever asks, and never from a directory.
func TestKillSuidgid(t *testing.T) {
	m := newTestMeta(t)
	f := create(t, m, root, base.RootIno, "f")
	d := mkdir(t, m, root, base.RootIno, "d")
	for _, c := range []struct {
		ino        base.Ino
		mode, want uint32
	}{
		{f, 0o6755, 0o755},  // setuid, and setgid with group-execute
		{f, 0o6745, 0o2745}, // setgid without group-execute is mandatory locking: kept
		{f, 0o644, 0o644},
		{d, 0o6775, 0o6775},
	} {
		_, err := m.SetAttr(ctx, root, c.ino, SetAttrRequest{Valid: SetMode, Mode: c.mode})
		ok(t, err)
		before := attr(t, m, c.ino)
		a := must[base.Attr](t)(m.SetAttr(ctx, bob, c.ino, SetAttrRequest{Valid: SetKillSuidgid}))
		if a.Mode != c.want {
			t.Errorf("mode %o: after kill %o, want %o", c.mode, a.Mode, c.want)
		}
		if a.Ctime < before.Ctime {
			t.Errorf("ctime went back")
		}
	}
	// with a size change, as a truncation by another user sends it
	_, err := m.SetAttr(ctx, root, f, SetAttrRequest{Valid: SetMode, Mode: 0o4777})
	ok(t, err)
	a := must[base.Attr](t)(m.SetAttr(ctx, bob, f, SetAttrRequest{Valid: SetSize | SetKillSuidgid, Size: 10}))
	if a.Mode != 0o777 || a.Length != 10 {
		t.Fatalf("truncate: mode %o length %d", a.Mode, a.Length)
	}
}

func TestSetgidInheritance(t *testing.T) {
	m := newTestMeta(t)
	shared := mkdir(t, m, root, base.RootIno, "shared")
	_, err := m.SetAttr(ctx, root, shared, SetAttrRequest{Valid: SetMode | SetGid, Mode: 0o2777, Gid: 50})
	ok(t, err)
	// alice is in group 50: new file gets gid 50 and keeps a requested setgid
	_, fa, err := m.Mknod(ctx, alice, shared, "f", base.TypeFile, 0o2775, 0, 0, "")
	ok(t, err)
	if fa.Gid != 50 || fa.Mode != 0o2775 {
		t.Fatalf("file %+v mode %o", fa, fa.Mode)
	}
	// bob is not: gid inherited, setgid stripped (group-exec set)
	_, fb, err := m.Mknod(ctx, bob, shared, "g", base.TypeFile, 0o2775, 0, 0, "")
	ok(t, err)
	if fb.Gid != 50 || fb.Mode != 0o775 || fb.Uid != bob.Uid {
		t.Fatalf("file %+v mode %o", fb, fb.Mode)
	}
	// new directories inherit the setgid bit
	_, da, err := m.Mknod(ctx, bob, shared, "d", base.TypeDir, 0o755, 0o022, 0, "")
	ok(t, err)
	if da.Gid != 50 || da.Mode != 0o2755 {
		t.Fatalf("dir %+v mode %o", da, da.Mode)
	}
	// without setgid on the parent, the caller's gid
	_, fc, err := m.Mknod(ctx, bob, base.RootIno, "h", base.TypeFile, 0o644, 0, 0, "")
	wantErr(t, err, base.ErrAccess)
	_ = fc
}
