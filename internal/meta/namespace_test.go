package meta

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/cairnfs/cairn/internal/base"
)

func TestMknodAndLookup(t *testing.T) {
	m := newTestMeta(t)
	before := attr(t, m, base.RootIno)
	d := mkdir(t, m, root, base.RootIno, "d")
	ra := attr(t, m, base.RootIno)
	if ra.Nlink != 3 || ra.Mtime <= before.Mtime || ra.Ctime != ra.Mtime {
		t.Fatalf("root after mkdir %+v", ra)
	}
	da := attr(t, m, d)
	if da.Nlink != 2 || da.Parent != base.RootIno || da.Type != base.TypeDir || da.Btime == 0 ||
		da.Atime != da.Btime || da.Mtime != da.Btime || da.Ctime != da.Btime {
		t.Fatalf("dir %+v", da)
	}
	f, fa, err := m.Mknod(ctx, root, d, "f", base.TypeFile, 0o666, 0o022, 0, "")
	ok(t, err)
	if fa.Mode != 0o644 || fa.Nlink != 1 || fa.Type != base.TypeFile {
		t.Fatalf("file %+v", fa)
	}
	s, sa, err := m.Mknod(ctx, root, d, "s", base.TypeSymlink, 0, 0o022, 0, "../target")
	ok(t, err)
	if sa.Mode != 0o777 || sa.Length != 9 {
		t.Fatalf("symlink %+v", sa)
	}
	if tgt := must[string](t)(m.Readlink(ctx, s)); tgt != "../target" {
		t.Fatalf("readlink %q", tgt)
	}
	_, err = m.Readlink(ctx, f)
	wantErr(t, err, base.ErrInvalid)
	dev, deva, err := m.Mknod(ctx, root, d, "dev", base.TypeChar, 0o600, 0, 0x0501, "")
	ok(t, err)
	if deva.Rdev != 0x0501 || deva.Type != base.TypeChar {
		t.Fatalf("dev %+v", deva)
	}
	for name, want := range map[string]base.Ino{"f": f, "s": s, "dev": dev, ".": d, "..": base.RootIno} {
		if got := lookup(t, m, d, name); got != want {
			t.Errorf("lookup %q = %d want %d", name, got, want)
		}
	}
	if got := lookup(t, m, base.RootIno, ".."); got != base.RootIno {
		t.Errorf("root .. = %d", got)
	}

	long := strings.Repeat("x", 256)
	for _, tc := range []struct {
		parent base.Ino
		name   string
		typ    base.FileType
		target string
		want   error
	}{
		{d, "f", base.TypeFile, "", base.ErrExist},
		{d, "f", base.TypeDir, "", base.ErrExist},
		{d, ".", base.TypeDir, "", base.ErrExist},
		{d, "..", base.TypeDir, "", base.ErrExist},
		{d, "", base.TypeFile, "", base.ErrInvalid},
		{d, "a/b", base.TypeFile, "", base.ErrInvalid},
		{d, "a\x00b", base.TypeFile, "", base.ErrInvalid},
		{d, long, base.TypeFile, "", base.ErrNameTooLong},
		{f, "x", base.TypeFile, "", base.ErrNotDir},
		{999, "x", base.TypeFile, "", base.ErrNotFound},
		{d, "l", base.TypeSymlink, "", base.ErrNotFound},
		{d, "l", base.TypeSymlink, strings.Repeat("t", MaxSymlinkLen+1), base.ErrNameTooLong},
		{d, "x", 0, "", base.ErrInvalid},
	} {
		_, _, err := m.Mknod(ctx, root, tc.parent, tc.name, tc.typ, 0o644, 0, 0, tc.target)
		if err == nil || !errorsIs(err, tc.want) {
			t.Errorf("mknod %q in %d: %v, want %v", tc.name, tc.parent, err, tc.want)
		}
	}
	_, _, err = m.Lookup(ctx, root, d, "nope")
	wantErr(t, err, base.ErrNotFound)
	_, _, err = m.Lookup(ctx, root, f, "x")
	wantErr(t, err, base.ErrNotDir)
	_, _, err = m.Lookup(ctx, root, d, long)
	wantErr(t, err, base.ErrNameTooLong)
	if strings.Join(names(t, m, d), ",") != "dev,f,s" {
		t.Fatalf("readdir %v", names(t, m, d))
	}
	_, err = m.Readdir(ctx, root, f, "", 0, false)
	wantErr(t, err, base.ErrNotDir)
	u := must[Usage](t)(m.Usage(ctx))
	if u.Inodes != 5 {
		t.Fatalf("usage %+v", u)
	}
}

func TestLinkUnlink(t *testing.T) {
	m := newTestMeta(t)
	d := mkdir(t, m, root, base.RootIno, "d")
	f := create(t, m, root, base.RootIno, "f")
	a0 := attr(t, m, f)
	la, err := m.Link(ctx, root, f, d, "g")
	ok(t, err)
	if la.Nlink != 2 || la.Ctime <= a0.Ctime {
		t.Fatalf("after link %+v", la)
	}
	if lookup(t, m, d, "g") != f {
		t.Fatal("link lookup")
	}
	_, err = m.Link(ctx, root, d, base.RootIno, "dd")
	wantErr(t, err, base.ErrPermission)
	_, err = m.Link(ctx, root, f, d, "g")
	wantErr(t, err, base.ErrExist)
	_, err = m.Link(ctx, root, f, f, "x")
	wantErr(t, err, base.ErrNotDir)
	_, err = m.Link(ctx, root, 999, d, "x")
	wantErr(t, err, base.ErrNotFound)

	ok(t, m.Unlink(ctx, root, base.RootIno, "f"))
	if a := attr(t, m, f); a.Nlink != 1 {
		t.Fatalf("nlink %d", a.Nlink)
	}
	wantErr(t, m.Unlink(ctx, root, base.RootIno, "f"), base.ErrNotFound)
	wantErr(t, m.Unlink(ctx, root, base.RootIno, "d"), base.ErrIsDir)
	wantErr(t, m.Unlink(ctx, root, base.RootIno, "."), base.ErrIsDir)
	wantErr(t, m.Unlink(ctx, root, f, "x"), base.ErrNotDir)
	ok(t, m.Unlink(ctx, root, d, "g"))
	_, err = m.GetAttr(ctx, f)
	wantErr(t, err, base.ErrNotFound)
	if u := must[Usage](t)(m.Usage(ctx)); u.Inodes != 2 {
		t.Fatalf("usage %+v", u)
	}
}

func TestMaxLinks(t *testing.T) {
	m := newTestMeta(t)
	f := create(t, m, root, base.RootIno, "f")
	ok(t, m.mutate(ctx, func(o *op) error {
		a, _ := o.attr(f)
		a.Nlink = MaxLinks
		o.put(f, a)
		return nil
	}))
	_, err := m.Link(ctx, root, f, base.RootIno, "g")
	wantErr(t, err, base.ErrTooManyLinks)
	ok(t, m.mutate(ctx, func(o *op) error {
		a, _ := o.attr(f)
		a.Nlink = 1
		o.put(f, a)
		return nil
	}))
}

func TestRmdir(t *testing.T) {
	m := newTestMeta(t)
	d := mkdir(t, m, root, base.RootIno, "d")
	mkdir(t, m, root, d, "sub")
	create(t, m, root, base.RootIno, "f")
	wantErr(t, m.Rmdir(ctx, root, base.RootIno, "d"), base.ErrNotEmpty)
	wantErr(t, m.Rmdir(ctx, root, base.RootIno, "f"), base.ErrNotDir)
	wantErr(t, m.Rmdir(ctx, root, base.RootIno, "none"), base.ErrNotFound)
	wantErr(t, m.Rmdir(ctx, root, d, "."), base.ErrInvalid)
	wantErr(t, m.Rmdir(ctx, root, d, ".."), base.ErrNotEmpty)
	if a := attr(t, m, d); a.Nlink != 3 {
		t.Fatalf("nlink %d", a.Nlink)
	}
	ok(t, m.SetXattr(ctx, root, d, "user.x", []byte("1"), 0))
	ok(t, m.Rmdir(ctx, root, d, "sub"))
	if a := attr(t, m, d); a.Nlink != 2 {
		t.Fatalf("nlink %d", a.Nlink)
	}
	ok(t, m.Rmdir(ctx, root, base.RootIno, "d"))
	if a := attr(t, m, base.RootIno); a.Nlink != 2 {
		t.Fatalf("root nlink %d", a.Nlink)
	}
	_, _, err := m.Mknod(ctx, root, d, "x", base.TypeFile, 0o644, 0, 0, "")
	wantErr(t, err, base.ErrNotFound)
}

func TestReaddirPagination(t *testing.T) {
	m := newTestMeta(t)
	d := mkdir(t, m, root, base.RootIno, "d")
	const n = 1000
	want := make(map[string]base.Ino)
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("f%04d", i)
		if i%3 == 0 {
			name += "-longer" // names that extend others
		}
		want[name] = create(t, m, root, d, name)
	}
	create(t, m, root, base.RootIno, "outside")
	var got []base.Entry
	after := ""
	for pages := 0; ; pages++ {
		es, err := m.Readdir(ctx, root, d, after, 37, pages%2 == 0)
		ok(t, err)
		if len(es) == 0 {
			break
		}
		for _, e := range es {
			if (pages%2 == 0) != (e.Attr != nil) {
				t.Fatalf("plus mismatch on %q", e.Name)
			}
			if e.Attr != nil && e.Attr.Type != base.TypeFile {
				t.Fatalf("attr %+v", e.Attr)
			}
		}
		got = append(got, es...)
		after = es[len(es)-1].Name
	}
	if len(got) != n {
		t.Fatalf("got %d entries", len(got))
	}
	for i, e := range got {
		if i > 0 && got[i-1].Name >= e.Name {
			t.Fatalf("order: %q then %q", got[i-1].Name, e.Name)
		}
		if want[e.Name] != e.Ino || e.Type != base.TypeFile {
			t.Fatalf("entry %+v", e)
		}
	}
	// after a name that does not exist, and a prefix of others
	es := must[[]base.Entry](t)(m.Readdir(ctx, root, d, "f0003", 2, false))
	if es[0].Name != "f0003-longer" || es[1].Name != "f0004" {
		t.Fatalf("after prefix: %v", es)
	}
}

func TestConcurrentCreates(t *testing.T) {
	m := newTestMeta(t)
	d := mkdir(t, m, root, base.RootIno, "d")
	var wg sync.WaitGroup
	var mu sync.Mutex
	inos := map[base.Ino]string{}
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				name := fmt.Sprintf("g%d-%d", g, i)
				ino, _, err := m.Mknod(ctx, root, d, name, base.TypeFile, 0o644, 0, 0, "")
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				if other, dup := inos[ino]; dup {
					errs <- fmt.Errorf("ino %d given to %s and %s", ino, other, name)
				}
				inos[ino] = name
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(names(t, m, d)) != 400 || len(inos) != 400 {
		t.Fatalf("%d entries", len(names(t, m, d)))
	}
	if u := must[Usage](t)(m.Usage(ctx)); u.Inodes != 402 {
		t.Fatalf("usage %+v", u)
	}
}

func TestStatFS(t *testing.T) {
	m := newTestMeta(t)
	f := create(t, m, root, base.RootIno, "f")
	id := must[uint64](t)(m.NewSliceID(ctx))
	_, err := m.WriteSlice(ctx, f, 0, base.Slice{ID: id, Size: 5000, Len: 5000}, 1)
	ok(t, err)
	st := must[StatFS](t)(m.StatFS(ctx))
	if st.TotalBytes != VirtualCapacity || st.UsedBytes != 8192 || st.AvailBytes != VirtualCapacity-8192 ||
		st.Files != 2 || st.AvailFiles != VirtualInodes-2 {
		t.Fatalf("statfs %+v", st)
	}
}
