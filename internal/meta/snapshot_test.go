package meta

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"path"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// treeReader is what both *Meta (live) and *View (a snapshot) can read.
type treeReader interface {
	GetAttr(ctx context.Context, ino base.Ino) (base.Attr, error)
	Readdir(ctx context.Context, c *Caller, dir base.Ino, after string, limit int, plus bool) ([]base.Entry, error)
	Readlink(ctx context.Context, ino base.Ino) (string, error)
	ListXattr(ctx context.Context, c *Caller, ino base.Ino) ([]string, error)
	GetXattr(ctx context.Context, c *Caller, ino base.Ino, name string) ([]byte, error)
	Chunks(ctx context.Context, ino base.Ino) ([]ChunkInfo, error)
}

var (
	_ treeReader = (*Meta)(nil)
	_ treeReader = (*View)(nil)
)

// dumpTree renders every path of a tree with its attributes, symlink
// target, xattrs and chunk maps, one line per path, sorted.
func dumpTree(t *testing.T, r treeReader) map[string]string {
	t.Helper()
	out := map[string]string{}
	var walk func(dir base.Ino, p string)
	walk = func(dir base.Ino, p string) {
		es, err := r.Readdir(ctx, root, dir, "", 0, true)
		if err != nil {
			t.Fatalf("readdir %s: %v", p, err)
		}
		for _, e := range es {
			a := e.Attr
			fp := path.Join(p, e.Name)
			var b strings.Builder
			fmt.Fprintf(&b, "ino=%d type=%s mode=%o nlink=%d len=%d mtime=%d", e.Ino, a.Type, a.Mode, a.Nlink, a.Length, a.Mtime)
			switch a.Type {
			case base.TypeSymlink:
				target, err := r.Readlink(ctx, e.Ino)
				if err != nil {
					t.Fatalf("readlink %s: %v", fp, err)
				}
				fmt.Fprintf(&b, " -> %s", target)
			case base.TypeFile:
				cs, err := r.Chunks(ctx, e.Ino)
				if err != nil {
					t.Fatalf("chunks %s: %v", fp, err)
				}
				fmt.Fprintf(&b, " chunks=%v", cs)
			}
			if a.Type == base.TypeFile || a.Type == base.TypeDir {
				xs, err := r.ListXattr(ctx, root, e.Ino)
				if err != nil {
					t.Fatalf("listxattr %s: %v", fp, err)
				}
				for _, x := range xs {
					v, err := r.GetXattr(ctx, root, e.Ino, x)
					if err != nil {
						t.Fatalf("getxattr %s %s: %v", fp, x, err)
					}
					fmt.Fprintf(&b, " %s=%s", x, v)
				}
			}
			out[fp] = b.String()
			if a.Type == base.TypeDir {
				walk(e.Ino, fp)
			}
		}
	}
	walk(base.RootIno, "/")
	return out
}

func diffDumps(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	if maps.Equal(got, want) {
		return
	}
	keys := slices.Sorted(maps.Keys(want))
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	n := 0
	for _, k := range keys {
		if got[k] != want[k] && n < 10 {
			n++
			t.Errorf("%s: %s\n got  %q\n want %q", what, k, got[k], want[k])
		}
	}
	t.FailNow()
}

// writeSlice commits a fresh slice of n bytes at off of file ino.
func writeSlice(t *testing.T, m *Meta, ino base.Ino, off uint64, n uint32) uint64 {
	t.Helper()
	id := must[uint64](t)(m.NewSliceID(ctx))
	s := base.Slice{Pos: uint32(off % base.ChunkSize), ID: id, Size: n, Len: n}
	must[bool](t)(m.WriteSlice(ctx, ino, uint32(off/base.ChunkSize), s, m.now()))
	return id
}

func TestSnapshotCreateListDelete(t *testing.T) {
	m := newTestMeta(t)
	f := create(t, m, root, base.RootIno, "f")
	writeSlice(t, m, f, 0, 100)
	s1 := must[Snapshot](t)(m.CreateSnapshot(ctx, "one"))
	_, err := m.CreateSnapshot(ctx, "one")
	wantErr(t, err, base.ErrExist)
	for _, bad := range []string{"", ".", "..", "a/b", strings.Repeat("x", 256)} {
		if _, err := m.CreateSnapshot(ctx, bad); err == nil {
			t.Fatalf("snapshot name %q accepted", bad)
		}
	}
	s2 := must[Snapshot](t)(m.CreateSnapshot(ctx, "two"))
	if s2.Epoch != s1.Epoch+1 {
		t.Fatalf("epochs %d then %d", s1.Epoch, s2.Epoch)
	}
	list := must[[]Snapshot](t)(m.Snapshots(ctx))
	if len(list) != 2 || list[0].Name != "one" || list[1].Name != "two" {
		t.Fatalf("list %+v", list)
	}
	wantErr(t, m.DeleteSnapshot(ctx, "nope", nil), base.ErrNotFound)
	ok(t, m.DeleteSnapshot(ctx, "one", nil))
	_, err = m.View(s1).GetAttr(ctx, f)
	wantErr(t, err, base.ErrStale)
	if _, err := m.SnapshotByName(ctx, "one"); !errorsIs(err, base.ErrNotFound) {
		t.Fatalf("deleted snapshot still found: %v", err)
	}
	ok(t, m.DeleteSnapshot(ctx, "two", nil))
	if n := countAll(t, m.Store(), pChange); n != 0 {
		t.Fatalf("%d change log entries left with no snapshot", n)
	}
}

func countAll(t *testing.T, store kv.Store, p byte) int {
	t.Helper()
	n := 0
	ok(t, store.View(ctx, func(r kv.Reader) error {
		return r.Scan([]byte{p}, []byte{p + 1}, false, func(_, _ []byte) bool { n++; return true })
	}))
	return n
}

// TestSnapshotSeesOldState: after a snapshot, modify, delete, rename and
// truncate in the live volume; the snapshot still reads the old tree
// exactly, and deleting it frees exactly the slices only it held.
func TestSnapshotSeesOldState(t *testing.T) {
	m := newTestMeta(t)
	d := mkdir(t, m, root, base.RootIno, "d")
	a := create(t, m, root, d, "a")
	b := create(t, m, root, base.RootIno, "b")
	c := create(t, m, root, base.RootIno, "c")
	idA := writeSlice(t, m, a, 0, 4096)
	idB := writeSlice(t, m, b, 0, 8192)
	idC := writeSlice(t, m, c, base.ChunkSize+10, 50)
	must[base.Ino](t)(func() (base.Ino, error) {
		ino, _, err := m.Mknod(ctx, root, d, "ln", base.TypeSymlink, 0, 0, 0, "../b")
		return ino, err
	}())
	ok(t, m.SetXattr(ctx, root, a, "user.k", []byte("v1"), 0))
	before := dumpTree(t, m)

	snap := must[Snapshot](t)(m.CreateSnapshot(ctx, "s"))
	view := m.View(snap)

	idA2 := writeSlice(t, m, a, 100, 10)                      // modify
	ok(t, m.Unlink(ctx, root, base.RootIno, "b"))             // delete
	ok(t, m.Rename(ctx, root, base.RootIno, "c", d, "c2", 0)) // rename
	must[base.Attr](t)(m.SetAttr(ctx, root, a, SetAttrRequest{Valid: SetMode, Mode: 0o600}))
	ok(t, m.SetXattr(ctx, root, a, "user.k", []byte("v2"), 0))
	must[base.Attr](t)(m.SetAttr(ctx, root, c, SetAttrRequest{Valid: SetSize, Size: 5})) // truncate
	ok(t, m.Unlink(ctx, root, d, "ln"))
	create(t, m, root, base.RootIno, "new")

	diffDumps(t, "snapshot", dumpTree(t, view), before)
	after := dumpTree(t, m)
	if maps.Equal(after, before) {
		t.Fatal("live tree did not change")
	}
	pending := pendingSet(t, m)
	if pending[idA] || pending[idB] || pending[idC] {
		t.Fatalf("slices the snapshot holds are queued for deletion: %v", pending)
	}
	space := must[SnapshotSpace](t)(m.SnapshotUsage(ctx, "s"))
	// b's slice (8192) and c's slice (50, beyond the truncation) are held
	// only by the snapshot; a's first slice is still live.
	if space.Slices != 2 || space.Bytes != 8192+50 {
		t.Fatalf("snapshot holds %+v, want 2 slices, 8242 bytes", space)
	}
	ok(t, m.DeleteSnapshot(ctx, "s", nil))
	pending = pendingSet(t, m)
	if !pending[idB] || !pending[idC] || pending[idA] || pending[idA2] {
		t.Fatalf("after delete, pending %v; want %d and %d, not %d or %d", pending, idB, idC, idA, idA2)
	}
	diffDumps(t, "live after delete", dumpTree(t, m), after)
}

func pendingSet(t *testing.T, m *Meta) map[uint64]bool {
	t.Helper()
	out := map[uint64]bool{}
	for _, id := range pendingIDs(t, m) {
		out[id] = true
	}
	return out
}

func TestSnapshotDiff(t *testing.T) {
	m := newTestMeta(t)
	d := mkdir(t, m, root, base.RootIno, "d")
	keep := create(t, m, root, d, "keep")
	mod := create(t, m, root, d, "mod")
	create(t, m, root, base.RootIno, "gone")
	create(t, m, root, base.RootIno, "moved")
	writeSlice(t, m, mod, 0, 10)
	_ = keep
	must[Snapshot](t)(m.CreateSnapshot(ctx, "a"))
	writeSlice(t, m, mod, 10, 10)
	ok(t, m.Unlink(ctx, root, base.RootIno, "gone"))
	ok(t, m.Rename(ctx, root, base.RootIno, "moved", d, "moved2", 0))
	e := mkdir(t, m, root, d, "e")
	create(t, m, root, e, "fresh")
	tmp := create(t, m, root, base.RootIno, "tmp") // created and deleted in between
	_ = tmp
	ok(t, m.Unlink(ctx, root, base.RootIno, "tmp"))
	must[Snapshot](t)(m.CreateSnapshot(ctx, "b"))
	ok(t, m.SetXattr(ctx, root, keep, "user.x", []byte("1"), 0))

	collect := func(from, to string) []string {
		var out []string
		ok(t, m.Diff(ctx, from, to, func(c Change) error {
			s := fmt.Sprintf("%s %s", c.Op, c.Path)
			if c.Op == Renamed {
				s = fmt.Sprintf("%s %s -> %s", c.Op, c.OldPath, c.Path)
			}
			if c.Type == base.TypeDir && c.Op == Modified {
				return nil // directories whose entries changed
			}
			out = append(out, s)
			return nil
		}))
		sort.Strings(out)
		return out
	}
	want := []string{"created /d/e", "created /d/e/fresh", "deleted /gone", "modified /d/mod", "renamed /moved -> /d/moved2"}
	if got := collect("a", "b"); !slices.Equal(got, want) {
		t.Fatalf("diff a b:\n got %q\nwant %q", got, want)
	}
	if got, want := collect("b", ""), []string{"modified /d/keep"}; !slices.Equal(got, want) {
		t.Fatalf("diff b live:\n got %q\nwant %q", got, want)
	}
	if got := collect("a", ""); len(got) != 6 {
		t.Fatalf("diff a live: %q", got)
	}
	wantErr(t, m.Diff(ctx, "b", "a", func(Change) error { return nil }), base.ErrInvalid)
	wantErr(t, m.Diff(ctx, "zz", "", func(Change) error { return nil }), base.ErrNotFound)
}

// TestSnapshotModel interleaves random namespace, data and attribute
// changes with snapshot creations and deletions; every snapshot must keep
// reading exactly the tree it froze, and once all are deleted only the
// live versions and the live slices remain (Check runs at cleanup and
// reports leaked versions and change log entries).
func TestSnapshotModel(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runSnapshotModel(t, seed, 300) })
	}
}

func runSnapshotModel(t *testing.T, seed uint64, steps int) {
	m := newTestMeta(t)
	rng := rand.New(rand.NewPCG(seed, 7))
	frozen := map[string]map[string]string{}
	snaps := map[string]Snapshot{}
	written := map[uint64]bool{}
	names := []string{"a", "b", "c"}
	// Directories known to exist, found by walking the live tree.
	dirs := func() []base.Ino {
		out := []base.Ino{base.RootIno}
		var walk func(base.Ino)
		walk = func(d base.Ino) {
			for _, e := range must[[]base.Entry](t)(m.Readdir(ctx, root, d, "", 0, false)) {
				if e.Type == base.TypeDir {
					out = append(out, e.Ino)
					walk(e.Ino)
				}
			}
		}
		walk(base.RootIno)
		return out
	}
	files := func() []base.Ino {
		var out []base.Ino
		for _, d := range dirs() {
			for _, e := range must[[]base.Entry](t)(m.Readdir(ctx, root, d, "", 0, false)) {
				if e.Type == base.TypeFile {
					out = append(out, e.Ino)
				}
			}
		}
		return out
	}
	checkAll := func(step int) {
		for name, want := range frozen {
			diffDumps(t, fmt.Sprintf("step %d snapshot %s", step, name), dumpTree(t, m.View(snaps[name])), want)
		}
	}
	nsnap := 0
	for step := 0; step < steps; step++ {
		ds := dirs()
		p, n := ds[rng.IntN(len(ds))], names[rng.IntN(len(names))]
		switch rng.IntN(10) {
		case 0:
			_, _, _ = m.Mknod(ctx, root, p, n, base.TypeDir, 0o755, 0, 0, "")
		case 1, 2:
			_, _, _ = m.Mknod(ctx, root, p, n, base.TypeFile, 0o644, 0, 0, "")
		case 3:
			if err := m.Unlink(ctx, root, p, n); err != nil {
				_ = m.Rmdir(ctx, root, p, n)
			}
		case 4:
			q := ds[rng.IntN(len(ds))]
			_ = m.Rename(ctx, root, p, n, q, names[rng.IntN(len(names))], 0)
		case 5, 6:
			if fs := files(); len(fs) > 0 {
				f := fs[rng.IntN(len(fs))]
				written[writeSlice(t, m, f, uint64(rng.IntN(3))*base.ChunkSize/2+uint64(rng.IntN(1000)), uint32(1+rng.IntN(5000)))] = true
			}
		case 7:
			if fs := files(); len(fs) > 0 {
				_, _ = m.SetAttr(ctx, root, fs[rng.IntN(len(fs))], SetAttrRequest{Valid: SetSize, Size: uint64(rng.IntN(3)) * base.ChunkSize / 3})
			}
		case 8:
			if fs := files(); len(fs) > 0 {
				_ = m.SetXattr(ctx, root, fs[rng.IntN(len(fs))], "user."+n, []byte(fmt.Sprint(step)), 0)
			}
		case 9:
			if len(frozen) > 0 && rng.IntN(3) == 0 {
				victims := slices.Sorted(maps.Keys(frozen))
				v := victims[rng.IntN(len(victims))]
				ok(t, m.DeleteSnapshot(ctx, v, nil))
				delete(frozen, v)
				delete(snaps, v)
			} else {
				nsnap++
				name := fmt.Sprint("s", nsnap)
				snaps[name] = must[Snapshot](t)(m.CreateSnapshot(ctx, name))
				frozen[name] = dumpTree(t, m)
			}
		}
		// Compaction-like rewrite: replace a chunk's slices by one.
		if step%25 == 24 {
			if fs := files(); len(fs) > 0 {
				f := fs[rng.IntN(len(fs))]
				if ss := must[[]base.Slice](t)(m.ReadChunk(ctx, f, 0)); len(ss) > 1 {
					id := must[uint64](t)(m.NewSliceID(ctx))
					written[id] = true
					var end uint32
					for _, s := range ss {
						end = max(end, s.Pos+s.Len)
					}
					err := m.CompactChunk(ctx, f, 0, ss, nil, base.Slice{ID: id, Size: end, Len: end})
					if err != nil {
						t.Fatalf("compact: %v", err)
					}
				}
			}
			checkAll(step)
		}
	}
	checkAll(steps)
	live := dumpTree(t, m)
	for _, name := range slices.Sorted(maps.Keys(frozen)) {
		ok(t, m.DeleteSnapshot(ctx, name, nil))
	}
	diffDumps(t, "live after deleting every snapshot", dumpTree(t, m), live)
	// Every slice ever written is referenced by the live tree or queued
	// for deletion, never both, and nothing else is referenced.
	refs := map[uint64]bool{}
	ok(t, m.ForEachSlice(ctx, func(u SliceUse) error { refs[u.ID] = true; return nil }))
	pend := pendingSet(t, m)
	for id := range written {
		if refs[id] == pend[id] {
			t.Fatalf("slice %d: referenced %v, pending %v", id, refs[id], pend[id])
		}
	}
	// Only one version per record is left.
	ok(t, m.Store().View(ctx, func(r kv.Reader) error {
		for _, p := range []byte{pAttr, pDentry, pChunk, pXattr, pSymlink} {
			var prev []byte
			err := r.Scan([]byte{p}, []byte{p + 1}, false, func(k, _ []byte) bool {
				l, _, _ := splitVersion(k)
				if prev != nil && string(prev) == string(l) {
					t.Errorf("record %x has several versions with no snapshot", l)
				}
				prev = append(prev[:0], l...)
				return true
			})
			if err != nil {
				return err
			}
		}
		return nil
	}))
}

// TestSnapshotRestore copies a tree back from a snapshot: same content
// and attributes, hard links kept, slices shared (not copied) and freed
// only when neither the snapshot nor the copy references them.
func TestSnapshotRestore(t *testing.T) {
	m := newTestMeta(t)
	d := mkdir(t, m, root, base.RootIno, "d")
	f := create(t, m, root, d, "f")
	id1 := writeSlice(t, m, f, 0, 1000)
	id2 := writeSlice(t, m, f, base.ChunkSize, 10)
	must[base.Attr](t)(m.Link(ctx, root, f, d, "hard"))
	ok(t, m.SetXattr(ctx, root, f, "user.a", []byte("x"), 0))
	must[base.Ino](t)(func() (base.Ino, error) {
		ino, _, err := m.Mknod(ctx, root, d, "sym", base.TypeSymlink, 0, 0, 0, "f")
		return ino, err
	}())
	sub := mkdir(t, m, root, d, "sub")
	create(t, m, root, sub, "empty")
	must[Snapshot](t)(m.CreateSnapshot(ctx, "s"))
	// Live: the tree goes away.
	for _, n := range []string{"f", "hard", "sym"} {
		ok(t, m.Unlink(ctx, root, d, n))
	}
	ok(t, m.Unlink(ctx, root, sub, "empty"))
	ok(t, m.Rmdir(ctx, root, d, "sub"))
	ok(t, m.Rmdir(ctx, root, base.RootIno, "d"))

	_, err := m.Restore(ctx, root, "s", "/d", "/", nil)
	wantErr(t, err, base.ErrExist)
	_, err = m.Restore(ctx, root, "s", "/nope", "/x", nil)
	wantErr(t, err, base.ErrNotFound)
	st := must[RestoreStats](t)(m.Restore(ctx, root, "s", "/d", "/back", nil))
	if st.Files != 2 || st.Dirs != 2 || st.Symlinks != 1 || st.Links != 1 {
		t.Fatalf("restore stats %+v", st)
	}
	_, err = m.Restore(ctx, root, "s", "/d", "/back", nil)
	wantErr(t, err, base.ErrExist)

	// Same tree apart from inode numbers and change times.
	norm := func(dump map[string]string, prefix string) map[string]string {
		out := map[string]string{}
		for k, v := range dump {
			if !strings.HasPrefix(k, prefix) {
				continue
			}
			fields := strings.Fields(v)
			out[strings.TrimPrefix(k, prefix)] = strings.Join(fields[1:], " ")
		}
		return out
	}
	snapDump := norm(dumpTree(t, m.View(must[Snapshot](t)(m.SnapshotByName(ctx, "s")))), "/d")
	diffDumps(t, "restored tree", norm(dumpTree(t, m), "/back"), snapDump)

	ok(t, m.DeleteSnapshot(ctx, "s", nil))
	taken := must[[]base.Slice](t)(m.TakeDeletes(ctx, 100))
	for _, s := range taken {
		if s.ID == id1 || s.ID == id2 {
			t.Fatalf("slice %d of the restored file freed with the snapshot", s.ID)
		}
	}
	back := lookup(t, m, base.RootIno, "back")
	ok(t, m.Unlink(ctx, root, back, "f"))
	ok(t, m.Unlink(ctx, root, back, "hard"))
	free := map[uint64]bool{}
	for _, s := range must[[]base.Slice](t)(m.TakeDeletes(ctx, 100)) {
		free[s.ID] = true
	}
	if !free[id1] || !free[id2] {
		t.Fatalf("slices %d, %d not freed after the last owner went: %v", id1, id2, free)
	}
	ok(t, m.FinishDeletes(ctx, []uint64{id1, id2}))
}
