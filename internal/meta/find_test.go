package meta

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/cairnfs/cairn/internal/base"
)

// findAll runs Find and returns the relative paths visited, sorted, with
// the entries by path.
func findAll(t *testing.T, m *Meta, o FindOptions) ([]string, map[string]FindEntry) {
	t.Helper()
	var mu sync.Mutex
	got := map[string]FindEntry{}
	var paths []string
	o.Visit = func(dir *FindDir, ents []FindEntry) error {
		mu.Lock()
		defer mu.Unlock()
		for i := range ents {
			p := ents[i].RelPath(dir)
			if _, dup := got[p]; dup {
				t.Errorf("%q visited twice", p)
			}
			got[p] = ents[i]
			paths = append(paths, p)
		}
		return nil
	}
	if err := m.Find(ctx, o); err != nil {
		t.Fatalf("find %+v: %v", o, err)
	}
	sort.Strings(paths)
	return paths, got
}

// findTree makes:
//
//	a/            a/b/  a/b/c/  a/b/c/deep
//	a/f1          a/link -> f1 (symlink)   a/hard (hard link of a/f1)
//	top           "sp ace"
func findTree(t *testing.T, m *Meta) map[string]base.Ino {
	t.Helper()
	inos := map[string]base.Ino{}
	inos["a"] = mkdir(t, m, root, base.RootIno, "a")
	inos["a/b"] = mkdir(t, m, root, inos["a"], "b")
	inos["a/b/c"] = mkdir(t, m, root, inos["a/b"], "c")
	inos["a/b/c/deep"] = create(t, m, root, inos["a/b/c"], "deep")
	inos["a/f1"] = create(t, m, root, inos["a"], "f1")
	l, _, err := m.Mknod(ctx, root, inos["a"], "link", base.TypeSymlink, 0o777, 0, 0, "f1")
	ok(t, err)
	inos["a/link"] = l
	_, err = m.Link(ctx, root, inos["a/f1"], inos["a"], "hard")
	ok(t, err)
	inos["a/hard"] = inos["a/f1"]
	inos["top"] = create(t, m, root, base.RootIno, "top")
	inos["sp ace"] = create(t, m, root, base.RootIno, "sp ace")
	return inos
}

func TestFindWalk(t *testing.T) {
	m := newTestMeta(t)
	inos := findTree(t, m)
	all := []string{"", "a", "a/b", "a/b/c", "a/b/c/deep", "a/f1", "a/hard", "a/link", "sp ace", "top"}
	for _, c := range []struct {
		name string
		o    FindOptions
		want []string
	}{
		{"all", FindOptions{MaxDepth: -1}, all},
		{"one worker", FindOptions{MaxDepth: -1, Workers: 1}, all},
		{"maxdepth 0", FindOptions{MaxDepth: 0}, []string{""}},
		{"maxdepth 1", FindOptions{MaxDepth: 1}, []string{"", "a", "sp ace", "top"}},
		{"maxdepth 2", FindOptions{MaxDepth: 2}, []string{"", "a", "a/b", "a/f1", "a/hard", "a/link", "sp ace", "top"}},
		{"subdir", FindOptions{Path: "/a/b", MaxDepth: -1}, []string{"", "c", "c/deep"}},
		{"relative with slash", FindOptions{Path: "a/b/", MaxDepth: -1}, []string{"", "c", "c/deep"}},
		{"dot dot", FindOptions{Path: "/a/b/../b/./c", MaxDepth: -1}, []string{"", "deep"}},
		{"a file", FindOptions{Path: "/a/f1", MaxDepth: -1}, []string{""}},
		{"a symlink is not followed", FindOptions{Path: "/a/link", MaxDepth: -1}, []string{""}},
		{"filter", FindOptions{MaxDepth: -1, Filter: func(_ *FindDir, e *FindEntry) bool { return e.Type == base.TypeFile }},
			[]string{"a/b/c/deep", "a/f1", "a/hard", "sp ace", "top"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, ents := findAll(t, m, c.o)
			if !slices.Equal(got, c.want) {
				t.Fatalf("got %q, want %q", got, c.want)
			}
			for p, e := range ents {
				want := inos[p]
				if p == "" {
					continue
				}
				if c.o.Path != "" {
					continue // relative to another start
				}
				if e.Ino != want {
					t.Errorf("%s: ino %d, want %d", p, e.Ino, want)
				}
				if e.Depth != strings.Count(p, "/")+1 {
					t.Errorf("%s: depth %d", p, e.Depth)
				}
			}
		})
	}
}

func TestFindAttrs(t *testing.T) {
	m := newTestMeta(t)
	inos := findTree(t, m)
	_, err := m.SetAttr(ctx, root, inos["top"], SetAttrRequest{Valid: SetMode | SetUid | SetMtime, Mode: 0o4711, Uid: 42, Mtime: 12345})
	ok(t, err)
	for _, workers := range []int{1, 3} {
		_, ents := findAll(t, m, FindOptions{MaxDepth: -1, Attrs: true, Workers: workers})
		for p, e := range ents {
			ino := inos[p]
			if p == "" {
				ino = base.RootIno
			}
			if want := attr(t, m, ino); e.Attr != want {
				t.Errorf("%q: attr %+v, want %+v", p, e.Attr, want)
			}
			if e.Type != e.Attr.Type {
				t.Errorf("%q: dentry type %v, attribute type %v", p, e.Type, e.Attr.Type)
			}
		}
		if a := ents["top"].Attr; a.Mode != 0o4711 || a.Uid != 42 || a.Mtime != 12345 {
			t.Errorf("top: %+v", a)
		}
	}
	// Without Attrs, none is read.
	_, ents := findAll(t, m, FindOptions{MaxDepth: -1})
	if ents["top"].Attr != (base.Attr{}) {
		t.Errorf("attribute read without Attrs: %+v", ents["top"].Attr)
	}
}

// TestFindSparseInodes: entries whose inodes are far apart are read by
// seeks rather than one scan; both give the same attributes.
func TestFindSparseInodes(t *testing.T) {
	m := newTestMeta(t)
	d := mkdir(t, m, root, base.RootIno, "d")
	other := mkdir(t, m, root, base.RootIno, "other")
	var inos []base.Ino
	for i := range 20 {
		inos = append(inos, create(t, m, root, d, fmt.Sprintf("f%d", i)))
		for j := range 30 { // inodes between them, elsewhere
			create(t, m, root, other, fmt.Sprintf("o%d-%d", i, j))
		}
	}
	_, ents := findAll(t, m, FindOptions{Path: "/d", MaxDepth: -1, Attrs: true})
	for i, ino := range inos {
		e := ents[fmt.Sprintf("f%d", i)]
		if e.Ino != ino || e.Attr != attr(t, m, ino) {
			t.Errorf("f%d: %+v", i, e)
		}
	}
}

// TestFindBig: directories larger than a page, and more directories than
// the queue holds (the workers then walk them depth first themselves).
func TestFindBig(t *testing.T) {
	m := newTestMeta(t)
	big := mkdir(t, m, root, base.RootIno, "big")
	want := []string{"", "big"}
	for i := range findPage*2 + 17 {
		name := fmt.Sprintf("f%05d", i)
		create(t, m, root, big, name)
		want = append(want, "big/"+name)
	}
	many := mkdir(t, m, root, base.RootIno, "many")
	want = append(want, "many")
	for i := range findQueueDirs + 40 {
		d := mkdir(t, m, root, many, fmt.Sprintf("d%03d", i))
		sub := mkdir(t, m, root, d, "sub")
		create(t, m, root, sub, "x")
		want = append(want, fmt.Sprintf("many/d%03d", i), fmt.Sprintf("many/d%03d/sub", i), fmt.Sprintf("many/d%03d/sub/x", i))
	}
	sort.Strings(want)
	for _, workers := range []int{1, 4} {
		got, _ := findAll(t, m, FindOptions{MaxDepth: -1, Workers: workers, Attrs: workers == 4})
		if !slices.Equal(got, want) {
			t.Fatalf("workers %d: %d paths, want %d", workers, len(got), len(want))
		}
	}
}

// TestFindDirDone: DirDone comes after everything below the directory,
// once per directory walked, so tallies add up as du's do.
func TestFindDirDone(t *testing.T) {
	m := newTestMeta(t)
	findTree(t, m)
	for _, workers := range []int{1, 4} {
		var mu sync.Mutex
		done := map[string]int64{}
		err := m.Find(ctx, FindOptions{MaxDepth: -1, Workers: workers,
			Visit: func(dir *FindDir, ents []FindEntry) error {
				if dir != nil {
					dir.Count.Add(int64(len(ents)))
				}
				return nil
			},
			DirDone: func(dir *FindDir) error {
				mu.Lock()
				defer mu.Unlock()
				if _, dup := done[dir.Path]; dup {
					t.Errorf("%q done twice", dir.Path)
				}
				for p := range done {
					if dir.Path != "" && strings.HasPrefix(dir.Path, p+"/") || dir.Path != "" && p == "" {
						t.Errorf("%q done after %q", dir.Path, p)
					}
				}
				done[dir.Path] = dir.Count.Load()
				if dir.Parent != nil {
					dir.Parent.Count.Add(dir.Count.Load())
				}
				return nil
			}})
		ok(t, err)
		want := map[string]int64{"": 9, "a": 6, "a/b": 2, "a/b/c": 1}
		if fmt.Sprint(done) != fmt.Sprint(want) {
			t.Errorf("workers %d: tallies %v, want %v", workers, done, want)
		}
	}
}

func TestFindErrors(t *testing.T) {
	m := newTestMeta(t)
	findTree(t, m)
	visit := func(*FindDir, []FindEntry) error { return nil }
	for _, c := range []struct {
		o    FindOptions
		want error
	}{
		{FindOptions{Path: "/nope"}, base.ErrNotFound},
		{FindOptions{Path: "/a/f1/"}, base.ErrNotDir},
		{FindOptions{Path: "/a/f1/x"}, base.ErrNotDir},
		{FindOptions{ChangedSince: "nosuch"}, base.ErrNotFound},
	} {
		c.o.Visit = visit
		wantErr(t, m.Find(ctx, c.o), c.want)
	}
	wantErr(t, m.Find(ctx, FindOptions{}), base.ErrInvalid)
	// A Visit error stops the walk and comes back.
	boom := errors.New("boom")
	n := 0
	var mu sync.Mutex
	err := m.Find(ctx, FindOptions{MaxDepth: -1, Workers: 2, Visit: func(dir *FindDir, _ []FindEntry) error {
		mu.Lock()
		defer mu.Unlock()
		n++
		if dir != nil {
			return boom
		}
		return nil
	}})
	if !errors.Is(err, boom) || n > 3 {
		t.Fatalf("err %v after %d visits", err, n)
	}
}

func TestFindSnapshot(t *testing.T) {
	m := newTestMeta(t)
	inos := findTree(t, m)
	snap, err := m.CreateSnapshot(ctx, "s1")
	ok(t, err)
	// After the snapshot: a file created, one removed, one renamed, one
	// whose mode changed, one whose data changed, one left alone.
	newFile := create(t, m, root, inos["a/b"], "new")
	ok(t, m.Unlink(ctx, root, base.RootIno, "top"))
	ok(t, m.Rename(ctx, root, inos["a/b/c"], "deep", inos["a"], "moved", 0))
	_, err = m.SetAttr(ctx, root, inos["sp ace"], SetAttrRequest{Valid: SetMode, Mode: 0o600})
	ok(t, err)
	id, err := m.NewSliceID(ctx)
	ok(t, err)
	_, err = m.WriteSlices(ctx, inos["a/f1"], []SliceWrite{{Slice: base.Slice{ID: id, Size: 10, Len: 10}}}, 99)
	ok(t, err)
	live, ents := findAll(t, m, FindOptions{MaxDepth: -1, ChangedSince: "s1", Attrs: true})
	wantLive := []string{"", "a", "a/b", "a/b/c", "a/b/new", "a/f1", "a/hard", "a/link", "a/moved", "sp ace"}
	if !slices.Equal(live, wantLive) {
		t.Fatalf("live: %q, want %q", live, wantLive)
	}
	var changed []string
	for p, e := range ents {
		if e.Changed {
			changed = append(changed, p)
		}
	}
	sort.Strings(changed)
	// "" (the root lost top), a (gained moved), a/b (gained new), a/b/c
	// (lost deep): directories whose entries changed; a/f1 and its hard
	// link: data; a/moved: renamed; sp ace: mode.
	wantChanged := []string{"", "a", "a/b", "a/b/c", "a/b/new", "a/f1", "a/hard", "a/moved", "sp ace"}
	if !slices.Equal(changed, wantChanged) {
		t.Errorf("changed since s1: %q, want %q", changed, wantChanged)
	}
	if ents["a/b/new"].Ino != newFile {
		t.Errorf("new: %+v", ents["a/b/new"])
	}
	// The snapshot as it was, attributes included.
	old, oldEnts := findAll(t, m, FindOptions{MaxDepth: -1, Snapshot: &snap, Attrs: true})
	wantOld := []string{"", "a", "a/b", "a/b/c", "a/b/c/deep", "a/f1", "a/hard", "a/link", "sp ace", "top"}
	if !slices.Equal(old, wantOld) {
		t.Fatalf("snapshot: %q, want %q", old, wantOld)
	}
	if oldEnts["sp ace"].Attr.Mode != 0o644 || ents["sp ace"].Attr.Mode != 0o600 {
		t.Errorf("mode in the snapshot %o, live %o", oldEnts["sp ace"].Attr.Mode, ents["sp ace"].Attr.Mode)
	}
	// Between two snapshots.
	s2, err := m.CreateSnapshot(ctx, "s2")
	ok(t, err)
	create(t, m, root, base.RootIno, "after-s2")
	_, ents2 := findAll(t, m, FindOptions{MaxDepth: 1, Snapshot: &s2, ChangedSince: "s1"})
	if _, ok := ents2["after-s2"]; ok || !ents2["sp ace"].Changed || ents2["a"].Changed != true {
		t.Errorf("s1 to s2: %+v", ents2)
	}
	_, ents3 := findAll(t, m, FindOptions{MaxDepth: 1, ChangedSince: "s2"})
	if !ents3["after-s2"].Changed || ents3["sp ace"].Changed || ents3["a"].Changed {
		t.Errorf("since s2: %+v", ents3)
	}
	err = m.Find(ctx, FindOptions{Snapshot: &s2, ChangedSince: "s2", Visit: func(*FindDir, []FindEntry) error { return nil }})
	wantErr(t, err, base.ErrInvalid)
	// A deleted snapshot cannot be walked.
	ok(t, m.DeleteSnapshot(ctx, "s1", nil))
	err = m.Find(ctx, FindOptions{MaxDepth: -1, Snapshot: &snap, Visit: func(*FindDir, []FindEntry) error { return nil }})
	wantErr(t, err, base.ErrStale)
}

func TestFindInline(t *testing.T) {
	m := newTestMeta(t)
	d := mkdir(t, m, root, base.RootIno, "d")
	const inline = true
	sid := func(inline bool) uint64 {
		id, err := m.NewSliceID(ctx)
		ok(t, err)
		if inline {
			id |= base.InlineBit
		}
		return id
	}
	write := func(name string, ids ...uint64) {
		ino := create(t, m, root, d, name)
		var ws []SliceWrite
		for i, id := range ids {
			w := SliceWrite{Slice: base.Slice{Pos: uint32(i * 10), ID: id, Size: 10, Len: 10}}
			if id&base.InlineBit != 0 {
				w.BlobKey, w.Blob = fmt.Sprintf("chunks/%d_0_10", id), make([]byte, 10)
			}
			ws = append(ws, w)
		}
		if len(ws) > 0 {
			_, err := m.WriteSlices(ctx, ino, ws, 1)
			ok(t, err)
		}
	}
	write("empty")
	write("inline", sid(inline))
	write("stored", sid(!inline))
	write("mixed", sid(inline), sid(!inline))
	write("two-inline", sid(inline), sid(inline))
	// A file extended by truncate past its inline data: holes hold no data.
	ino := create(t, m, root, d, "extended")
	id := sid(inline)
	_, err := m.WriteSlices(ctx, ino, []SliceWrite{{Slice: base.Slice{ID: id, Size: 10, Len: 10}, BlobKey: fmt.Sprintf("chunks/%d_0_10", id), Blob: make([]byte, 10)}}, 1)
	ok(t, err)
	_, err = m.SetAttr(ctx, root, ino, SetAttrRequest{Valid: SetSize, Size: 1 << 30})
	ok(t, err)
	_, ents := findAll(t, m, FindOptions{Path: "/d", MaxDepth: -1, Inline: true})
	var got []string
	for p, e := range ents {
		if e.Inline {
			got = append(got, p)
		}
	}
	sort.Strings(got)
	if want := []string{"extended", "inline", "two-inline"}; !slices.Equal(got, want) {
		t.Errorf("inline: %q, want %q", got, want)
	}
	if ents["stored"].Attr.Length != 10 {
		t.Errorf("Inline did not read attributes: %+v", ents["stored"])
	}
}

// TestSharedFind: a client of a real PostgreSQL finds what another made,
// live and in a snapshot, with attributes read by scan and by seeks.
func TestSharedFind(t *testing.T) {
	ms := pgClients(t, 2)
	inos := findTree(t, ms[0])
	other := mkdir(t, ms[0], root, base.RootIno, "other")
	for i := range 300 { // inodes far from those of a/ and its files
		create(t, ms[0], root, other, fmt.Sprintf("o%03d", i))
	}
	late := create(t, ms[0], root, inos["a"], "late")
	snap, err := ms[0].CreateSnapshot(ctx, "s")
	ok(t, err)
	ok(t, ms[0].Unlink(ctx, root, inos["a"], "late"))
	_, err = ms[0].SetAttr(ctx, root, inos["top"], SetAttrRequest{Valid: SetMode, Mode: 0o600})
	ok(t, err)
	got, ents := findAll(t, ms[1], FindOptions{Path: "/a", MaxDepth: -1, Attrs: true, ChangedSince: "s"})
	if want := []string{"", "b", "b/c", "b/c/deep", "f1", "hard", "link"}; !slices.Equal(got, want) {
		t.Fatalf("live /a: %q, want %q", got, want)
	}
	for p, e := range ents {
		if want := attr(t, ms[1], e.Ino); e.Attr != want {
			t.Errorf("%q: %+v, want %+v", p, e.Attr, want)
		}
		if e.Changed != (p == "") {
			t.Errorf("%q: changed %v", p, e.Changed)
		}
	}
	got, ents = findAll(t, ms[1], FindOptions{MaxDepth: 2, Snapshot: &snap, Attrs: true})
	if len(got) != 310 || ents["a/late"].Ino != late || ents["top"].Attr.Mode != 0o644 {
		t.Fatalf("snapshot: %d entries, a/late %+v, top %+v", len(got), ents["a/late"], ents["top"])
	}
}
