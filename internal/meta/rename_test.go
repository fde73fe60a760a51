package meta

import (
	"testing"

	"github.com/cairnfs/cairn/internal/base"
)

// tree builds: /a (dir) with /a/sub (dir) and /a/sub/deep (dir), /b (dir,
// empty), /c (dir with file x), /f, /g (files), /h hard link of /f.
type tree struct{ a, sub, deep, b, c, x, f, g base.Ino }

func buildTree(t *testing.T, m *Meta) tree {
	var tr tree
	tr.a = mkdir(t, m, root, base.RootIno, "a")
	tr.sub = mkdir(t, m, root, tr.a, "sub")
	tr.deep = mkdir(t, m, root, tr.sub, "deep")
	tr.b = mkdir(t, m, root, base.RootIno, "b")
	tr.c = mkdir(t, m, root, base.RootIno, "c")
	tr.x = create(t, m, root, tr.c, "x")
	tr.f = create(t, m, root, base.RootIno, "f")
	tr.g = create(t, m, root, base.RootIno, "g")
	_, err := m.Link(ctx, root, tr.f, base.RootIno, "h")
	ok(t, err)
	return tr
}

func TestRenameMatrix(t *testing.T) {
	R := base.RootIno
	for _, tc := range []struct {
		name   string
		sp     func(tree) base.Ino
		sn     string
		dp     func(tree) base.Ino
		dn     string
		flags  uint32
		want   error
		verify func(t *testing.T, m *Meta, tr tree)
	}{
		{name: "file to new name", sn: "f", dn: "f2", verify: func(t *testing.T, m *Meta, tr tree) {
			if lookup(t, m, R, "f2") != tr.f {
				t.Fatal("moved")
			}
		}},
		{name: "file over file", sn: "f", dn: "g", verify: func(t *testing.T, m *Meta, tr tree) {
			if lookup(t, m, R, "g") != tr.f {
				t.Fatal("replaced")
			}
			if _, err := m.GetAttr(ctx, tr.g); !errorsIs(err, base.ErrNotFound) {
				t.Fatal("replaced inode survives")
			}
		}},
		{name: "file over own hard link is a no-op", sn: "f", dn: "h", verify: func(t *testing.T, m *Meta, tr tree) {
			if lookup(t, m, R, "f") != tr.f || lookup(t, m, R, "h") != tr.f || attr(t, m, tr.f).Nlink != 2 {
				t.Fatal("changed")
			}
		}},
		{name: "same name no-op", sn: "a", dn: "a"},
		{name: "hard link over other file keeps inode", sn: "h", dn: "g", verify: func(t *testing.T, m *Meta, tr tree) {
			if attr(t, m, tr.f).Nlink != 2 {
				t.Fatal("nlink")
			}
		}},
		{name: "file into dir", sn: "f", dp: func(tr tree) base.Ino { return tr.b }, dn: "f"},
		{name: "dir to other parent", sn: "a", dp: func(tr tree) base.Ino { return tr.b }, dn: "a",
			verify: func(t *testing.T, m *Meta, tr tree) {
				if attr(t, m, tr.a).Parent != tr.b || attr(t, m, tr.b).Nlink != 3 || attr(t, m, R).Nlink != 4 {
					t.Fatal("parents/nlinks")
				}
				if lookup(t, m, tr.a, "..") != tr.b {
					t.Fatal("..")
				}
			}},
		{name: "dir over empty dir", sn: "a", dn: "b", verify: func(t *testing.T, m *Meta, tr tree) {
			if lookup(t, m, R, "b") != tr.a || attr(t, m, R).Nlink != 4 {
				t.Fatal("replace")
			}
			if _, err := m.GetAttr(ctx, tr.b); !errorsIs(err, base.ErrNotFound) {
				t.Fatal("replaced dir survives")
			}
		}},
		{name: "dir over empty dir elsewhere", sp: func(tr tree) base.Ino { return tr.sub }, sn: "deep", dn: "b",
			verify: func(t *testing.T, m *Meta, tr tree) {
				if attr(t, m, tr.sub).Nlink != 2 || attr(t, m, R).Nlink != 5 || attr(t, m, tr.deep).Parent != R {
					t.Fatal("nlinks")
				}
			}},
		{name: "dir over non-empty dir", sn: "a", dn: "c", want: base.ErrNotEmpty},
		{name: "dir over file", sn: "a", dn: "f", want: base.ErrNotDir},
		{name: "file over dir", sn: "f", dn: "b", want: base.ErrIsDir},
		{name: "dir into itself", sn: "a", dp: func(tr tree) base.Ino { return tr.a }, dn: "x", want: base.ErrInvalid},
		{name: "dir into own subtree", sn: "a", dp: func(tr tree) base.Ino { return tr.deep }, dn: "x", want: base.ErrInvalid},
		{name: "parent over child's ancestor", sp: func(tr tree) base.Ino { return tr.sub }, sn: "deep", dn: "a", want: base.ErrNotEmpty},
		{name: "missing source", sn: "nope", dn: "x", want: base.ErrNotFound},
		{name: "source parent not dir", sp: func(tr tree) base.Ino { return tr.f }, sn: "x", dn: "x", want: base.ErrNotDir},
		{name: "dot", sn: ".", dn: "x", want: base.ErrBusy},
		{name: "dotdot target", sn: "f", dn: "..", want: base.ErrBusy},
		{name: "bad name", sn: "f", dn: "a/b", want: base.ErrInvalid},
		{name: "both flags", sn: "f", dn: "g", flags: RenameNoReplace | RenameExchange, want: base.ErrInvalid},
		{name: "unknown flag", sn: "f", dn: "g", flags: 4, want: base.ErrInvalid},
		{name: "noreplace existing", sn: "f", dn: "g", flags: RenameNoReplace, want: base.ErrExist},
		{name: "noreplace new", sn: "f", dn: "n", flags: RenameNoReplace},
		{name: "exchange missing", sn: "f", dn: "n", flags: RenameExchange, want: base.ErrNotFound},
		{name: "exchange files", sn: "f", dn: "g", flags: RenameExchange, verify: func(t *testing.T, m *Meta, tr tree) {
			if lookup(t, m, R, "f") != tr.g || lookup(t, m, R, "g") != tr.f {
				t.Fatal("swap")
			}
		}},
		{name: "exchange dir and file across parents", sn: "a", dp: func(tr tree) base.Ino { return tr.c }, dn: "x",
			flags: RenameExchange, verify: func(t *testing.T, m *Meta, tr tree) {
				if lookup(t, m, R, "a") != tr.x || lookup(t, m, tr.c, "x") != tr.a {
					t.Fatal("swap")
				}
				if attr(t, m, tr.a).Parent != tr.c || attr(t, m, tr.c).Nlink != 3 || attr(t, m, R).Nlink != 4 {
					t.Fatal("nlinks")
				}
			}},
		{name: "exchange dirs across parents", sn: "b", dp: func(tr tree) base.Ino { return tr.a }, dn: "sub",
			flags: RenameExchange, verify: func(t *testing.T, m *Meta, tr tree) {
				if attr(t, m, tr.b).Parent != tr.a || attr(t, m, tr.sub).Parent != R ||
					attr(t, m, tr.a).Nlink != 3 || attr(t, m, R).Nlink != 5 {
					t.Fatal("parents")
				}
			}},
		{name: "exchange dir with its descendant", sn: "a", dp: func(tr tree) base.Ino { return tr.sub }, dn: "deep",
			flags: RenameExchange, want: base.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newTestMeta(t)
			tr := buildTree(t, m)
			sp, dp := R, R
			if tc.sp != nil {
				sp = tc.sp(tr)
			}
			if tc.dp != nil {
				dp = tc.dp(tr)
			}
			before := attr(t, m, sp)
			err := m.Rename(ctx, root, sp, tc.sn, dp, tc.dn, tc.flags)
			if tc.want != nil {
				wantErr(t, err, tc.want)
				return
			}
			ok(t, err)
			if tc.verify != nil {
				tc.verify(t, m, tr)
			}
			if tc.sn != tc.dn && tc.sn != "h" && tc.name != "file over own hard link is a no-op" {
				if a := attr(t, m, sp); a.Mtime <= before.Mtime {
					t.Error("source parent mtime not updated")
				}
			}
		})
	}
}

func TestRenameOpenReplaced(t *testing.T) {
	m := newTestMeta(t)
	f := create(t, m, root, base.RootIno, "f")
	g := create(t, m, root, base.RootIno, "g")
	must[base.Attr](t)(m.OpenFile(ctx, g))
	ok(t, m.Rename(ctx, root, base.RootIno, "f", base.RootIno, "g", 0))
	if a := attr(t, m, g); a.Nlink != 0 {
		t.Fatalf("open replaced inode %+v", a)
	}
	ok(t, m.CloseFile(ctx, g))
	_, err := m.GetAttr(ctx, g)
	wantErr(t, err, base.ErrNotFound)
	_ = f
}
