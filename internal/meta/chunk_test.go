package meta

import (
	"slices"
	"testing"

	"github.com/cairnfs/cairn/internal/base"
)

func newSlice(t *testing.T, m *Meta, pos, size uint32) base.Slice {
	t.Helper()
	id := must[uint64](t)(m.NewSliceID(ctx))
	return base.Slice{Pos: pos, ID: id, Size: size, Len: size}
}

func pendingIDs(t *testing.T, m *Meta) []uint64 {
	t.Helper()
	var ids []uint64
	for _, s := range must[[]base.Slice](t)(m.listPending(ctx, 0)) {
		ids = append(ids, s.ID)
	}
	return ids
}

func TestWriteReadChunk(t *testing.T) {
	m := newTestMeta(t)
	f := create(t, m, root, base.RootIno, "f")
	d := mkdir(t, m, root, base.RootIno, "d")
	if ss := must[[]base.Slice](t)(m.ReadChunk(ctx, f, 0)); ss != nil {
		t.Fatalf("hole %v", ss)
	}
	_, err := m.ReadChunk(ctx, 999, 0)
	wantErr(t, err, base.ErrNotFound)
	s1 := newSlice(t, m, 0, 100)
	s2 := newSlice(t, m, 50, 100)
	c, err := m.WriteSlice(ctx, f, 0, s1, 1000)
	ok(t, err)
	if c {
		t.Fatal("compact too early")
	}
	_, err = m.WriteSlice(ctx, f, 2, s2, 2000)
	ok(t, err)
	a := attr(t, m, f)
	if a.Length != 2*base.ChunkSize+150 || a.Mtime != 2000 || a.Ctime != 2000 {
		t.Fatalf("attr %+v", a)
	}
	if ss := must[[]base.Slice](t)(m.ReadChunk(ctx, f, 2)); len(ss) != 1 || ss[0] != s2 {
		t.Fatalf("chunk 2 %v", ss)
	}
	// an overwrite inside the file does not shrink the length
	_, err = m.WriteSlice(ctx, f, 0, newSlice(t, m, 10, 10), 3000)
	ok(t, err)
	if a := attr(t, m, f); a.Length != 2*base.ChunkSize+150 {
		t.Fatalf("length %d", a.Length)
	}
	cs := must[[]ChunkInfo](t)(m.Chunks(ctx, f))
	if len(cs) != 2 || cs[0].Index != 0 || len(cs[0].Slices) != 2 || cs[1].Index != 2 {
		t.Fatalf("chunks %+v", cs)
	}
	var uses []SliceUse
	ok(t, m.ForEachSlice(ctx, func(u SliceUse) error { uses = append(uses, u); return nil }))
	if len(uses) != 3 {
		t.Fatalf("uses %+v", uses)
	}
	if u := must[Usage](t)(m.Usage(ctx)); u.Bytes != (2*base.ChunkSize+150+4095)&^4095 {
		t.Fatalf("usage %+v", u)
	}

	for _, tc := range []struct {
		ino  base.Ino
		s    base.Slice
		want error
	}{
		{d, newSlice(t, m, 0, 1), base.ErrIsDir},
		{999, newSlice(t, m, 0, 1), base.ErrNotFound},
		{f, base.Slice{ID: 0, Len: 0}, base.ErrInvalid}, // a zero slice (punch hole) is fine, an empty one is not
		{f, base.Slice{ID: 5, Size: 1, Len: 0}, base.ErrInvalid},
		{f, base.Slice{ID: 5, Size: 10, Off: 5, Len: 10}, base.ErrInvalid},
		{f, base.Slice{ID: 5, Pos: base.ChunkSize - 1, Size: 10, Len: 2}, base.ErrInvalid},
	} {
		_, err := m.WriteSlice(ctx, tc.ino, 0, tc.s, 1)
		wantErr(t, err, tc.want)
	}
}

func TestCompaction(t *testing.T) {
	m, _ := newTestMetaStore(t, Options{CompactThreshold: 3})
	f := create(t, m, root, base.RootIno, "f")
	var old []base.Slice
	var compact bool
	for i := 0; i < 4; i++ {
		s := newSlice(t, m, uint32(i*10), 10)
		old = append(old, s)
		var err error
		compact, err = m.WriteSlice(ctx, f, 0, s, 1)
		ok(t, err)
		if compact != (i == 3) {
			t.Fatalf("compact=%v after %d slices", compact, i+1)
		}
	}
	// the chunk grows after the caller read it
	extra := newSlice(t, m, 5, 3)
	_, err := m.WriteSlice(ctx, f, 0, extra, 2)
	ok(t, err)
	merged := newSlice(t, m, 0, 40)
	ok(t, m.CompactChunk(ctx, f, 0, old, nil, merged))
	ss := must[[]base.Slice](t)(m.ReadChunk(ctx, f, 0))
	if !slices.Equal(ss, []base.Slice{merged, extra}) {
		t.Fatalf("after compaction %v", ss)
	}
	var wantPending []uint64
	for _, s := range old {
		wantPending = append(wantPending, s.ID)
	}
	if got := pendingIDs(t, m); !slices.Equal(got, wantPending) {
		t.Fatalf("pending %v want %v", got, wantPending)
	}
	select {
	case <-m.DeletesPending():
	default:
		t.Fatal("no deletes signal")
	}
	// stale: the list no longer starts with old
	err = m.CompactChunk(ctx, f, 0, old, nil, newSlice(t, m, 0, 40))
	wantErr(t, err, ErrCompactionStale)
	err = m.CompactChunk(ctx, 999, 0, old, nil, newSlice(t, m, 0, 40))
	wantErr(t, err, base.ErrNotFound)

	got := must[[]base.Slice](t)(m.TakeDeletes(ctx, 2))
	if len(got) != 2 || got[0].ID != old[0].ID || got[0].Size != 10 {
		t.Fatalf("take %v", got)
	}
	ok(t, m.FinishDeletes(ctx, []uint64{got[0].ID, got[1].ID}))
	if got := pendingIDs(t, m); len(got) != 2 {
		t.Fatalf("pending after finish %v", got)
	}
}

// TestLatePartOfFreedObject: a slice whose object a compaction queued for
// deletion (its other parts were dropped) cannot be committed afterwards;
// the commit fails and changes nothing, instead of referring to an object
// the deleter removes.
func TestLatePartOfFreedObject(t *testing.T) {
	m := newTestMeta(t)
	f := create(t, m, root, base.RootIno, "f")
	pack := must[uint64](t)(m.NewSliceID(ctx))
	first := base.Slice{Pos: 0, ID: pack, Size: 8192, Off: 0, Len: 4096}
	late := base.Slice{Pos: 8192, ID: pack, Size: 8192, Off: 4096, Len: 4096}
	_, err := m.WriteSlice(ctx, f, 0, first, 1)
	ok(t, err)
	merged := newSlice(t, m, 0, 4096)
	ok(t, m.CompactChunk(ctx, f, 0, []base.Slice{first}, nil, merged))
	if got := pendingIDs(t, m); !slices.Equal(got, []uint64{pack}) {
		t.Fatalf("pending %v, want the pack %d", got, pack)
	}
	other := newSlice(t, m, 16384, 10)
	_, err = m.WriteSlices(ctx, f, []SliceWrite{{Index: 0, Slice: other}, {Index: 0, Slice: late}}, 2)
	wantErr(t, err, base.ErrIO)
	if ss := must[[]base.Slice](t)(m.ReadChunk(ctx, f, 0)); !slices.Equal(ss, []base.Slice{merged}) {
		t.Fatalf("chunk after the refused commit %v, want only the merged slice", ss)
	}
	if a := attr(t, m, f); a.Length != 4096 {
		t.Fatalf("length %d after the refused commit, want 4096", a.Length)
	}
}

func TestTruncate(t *testing.T) {
	m := newTestMeta(t)
	f := create(t, m, root, base.RootIno, "f")
	s0 := newSlice(t, m, 0, 1000)
	s1 := newSlice(t, m, 0, 1000)
	s2 := newSlice(t, m, 0, 1000)
	for i, s := range []base.Slice{s0, s1, s2} {
		_, err := m.WriteSlice(ctx, f, uint32(i), s, 1)
		ok(t, err)
	}
	// shrink into chunk 1: chunk 2 goes, chunk 1 gets a zero tail
	a := must[base.Attr](t)(m.SetAttr(ctx, root, f, SetAttrRequest{Valid: SetSize, Size: base.ChunkSize + 100}))
	if a.Length != base.ChunkSize+100 || a.Mtime == 1 {
		t.Fatalf("attr %+v", a)
	}
	if ss := must[[]base.Slice](t)(m.ReadChunk(ctx, f, 2)); ss != nil {
		t.Fatalf("chunk 2 %v", ss)
	}
	ss := must[[]base.Slice](t)(m.ReadChunk(ctx, f, 1))
	if !slices.Equal(ss, []base.Slice{s1, {Pos: 100, Len: 900}}) {
		t.Fatalf("chunk 1 %v", ss)
	}
	if got := pendingIDs(t, m); !slices.Equal(got, []uint64{s2.ID}) {
		t.Fatalf("pending %v", got)
	}
	// extend again: the zero slice makes the old tail read as zeros
	a = must[base.Attr](t)(m.SetAttr(ctx, root, f, SetAttrRequest{Valid: SetSize, Size: 3 * base.ChunkSize}))
	if a.Length != 3*base.ChunkSize {
		t.Fatal("grow")
	}
	if ss := must[[]base.Slice](t)(m.ReadChunk(ctx, f, 1)); len(ss) != 2 {
		t.Fatalf("grow changed chunks %v", ss)
	}
	if u := must[Usage](t)(m.Usage(ctx)); u.Bytes != 3*base.ChunkSize {
		t.Fatalf("usage %+v", u)
	}
	// truncate at a chunk boundary drops that chunk
	_, err := m.SetAttr(ctx, root, f, SetAttrRequest{Valid: SetSize, Size: base.ChunkSize})
	ok(t, err)
	if ss := must[[]base.Slice](t)(m.ReadChunk(ctx, f, 1)); ss != nil {
		t.Fatalf("chunk 1 %v", ss)
	}
	if ss := must[[]base.Slice](t)(m.ReadChunk(ctx, f, 0)); !slices.Equal(ss, []base.Slice{s0}) {
		t.Fatalf("chunk 0 %v", ss)
	}
	_, err = m.SetAttr(ctx, root, f, SetAttrRequest{Valid: SetSize, Size: 0})
	ok(t, err)
	if cs := must[[]ChunkInfo](t)(m.Chunks(ctx, f)); len(cs) != 0 {
		t.Fatalf("chunks %v", cs)
	}
	if got := pendingIDs(t, m); len(got) != 3 {
		t.Fatalf("pending %v", got)
	}
	if u := must[Usage](t)(m.Usage(ctx)); u.Bytes != 0 {
		t.Fatalf("usage %+v", u)
	}
	d := mkdir(t, m, root, base.RootIno, "d")
	_, err = m.SetAttr(ctx, root, d, SetAttrRequest{Valid: SetSize})
	wantErr(t, err, base.ErrIsDir)
	l, _, err := m.Mknod(ctx, root, base.RootIno, "l", base.TypeSymlink, 0, 0, 0, "x")
	ok(t, err)
	_, err = m.SetAttr(ctx, root, l, SetAttrRequest{Valid: SetSize})
	wantErr(t, err, base.ErrInvalid)
}

func TestUnlinkOpenFile(t *testing.T) {
	m := newTestMeta(t)
	f := create(t, m, root, base.RootIno, "f")
	s := newSlice(t, m, 0, 10)
	_, err := m.WriteSlice(ctx, f, 0, s, 1)
	ok(t, err)
	must[base.Attr](t)(m.OpenFile(ctx, f))
	must[base.Attr](t)(m.OpenFile(ctx, f))
	ok(t, m.Unlink(ctx, root, base.RootIno, "f"))
	a := attr(t, m, f)
	if a.Nlink != 0 || a.Length != 10 {
		t.Fatalf("orphan %+v", a)
	}
	// still writable and readable while open
	_, err = m.WriteSlice(ctx, f, 0, newSlice(t, m, 10, 10), 2)
	ok(t, err)
	_, err = m.Link(ctx, root, f, base.RootIno, "again")
	wantErr(t, err, base.ErrNotFound)
	ok(t, m.CloseFile(ctx, f))
	if _, err := m.GetAttr(ctx, f); err != nil {
		t.Fatal("freed with a handle open")
	}
	if len(pendingIDs(t, m)) != 0 {
		t.Fatal("slices freed early")
	}
	ok(t, m.CloseFile(ctx, f))
	_, err = m.GetAttr(ctx, f)
	wantErr(t, err, base.ErrNotFound)
	if got := pendingIDs(t, m); len(got) != 2 {
		t.Fatalf("pending %v", got)
	}
	wantErr(t, m.CloseFile(ctx, f), base.ErrBadFD)
	if u := must[Usage](t)(m.Usage(ctx)); u.Bytes != 0 || u.Inodes != 1 {
		t.Fatalf("usage %+v", u)
	}
}

func TestCapacity(t *testing.T) {
	store := newStore(t, Settings{Name: "v", Capacity: 8192, Inodes: 3})
	m := must[*Meta](t)(Open(ctx, store, Options{}))
	checkOnCleanup(t, m)
	f := create(t, m, root, base.RootIno, "f")
	_, err := m.WriteSlice(ctx, f, 0, newSlice(t, m, 0, 8192), 1)
	ok(t, err)
	_, err = m.WriteSlice(ctx, f, 0, newSlice(t, m, 8192, 1), 1)
	wantErr(t, err, base.ErrNoSpace)
	create(t, m, root, base.RootIno, "g")
	_, _, err = m.Mknod(ctx, root, base.RootIno, "h", base.TypeFile, 0o644, 0, 0, "")
	wantErr(t, err, base.ErrNoSpace)
	st := must[StatFS](t)(m.StatFS(ctx))
	if st.TotalBytes != 8192 || st.AvailBytes != 0 || st.AvailFiles != 0 {
		t.Fatalf("statfs %+v", st)
	}
}

func TestInFlightSlices(t *testing.T) {
	m := newTestMeta(t)
	f := create(t, m, root, base.RootIno, "f")
	s := newSlice(t, m, 0, 10)
	s2 := newSlice(t, m, 0, 10)
	if fl := m.InFlightSlices(); !fl[s.ID] || !fl[s2.ID] {
		t.Fatalf("in flight %v", fl)
	}
	_, err := m.WriteSlice(ctx, f, 0, s, 1)
	ok(t, err)
	m.ForgetSlice(s2.ID)
	if fl := m.InFlightSlices(); len(fl) != 0 {
		t.Fatalf("in flight %v", fl)
	}
}

// TestUnlinkChunkLayouts unlinks files whose chunk records take each shape
// the unlink's prefetch tells apart (no chunk; chunk 0 alone, which it
// reads whole; chunk 0 and another; a hole at chunk 0; chunk 0 kept by a
// snapshot; chunk 0 deleted after one) and checks that exactly the slices
// no view needs any more are queued for deletion.
func TestUnlinkChunkLayouts(t *testing.T) {
	type layout struct {
		name  string
		setup func(t *testing.T, m *Meta, f base.Ino) (freed []uint64)
	}
	for _, l := range []layout{
		{"none", func(*testing.T, *Meta, base.Ino) []uint64 { return nil }},
		{"chunk0", func(t *testing.T, m *Meta, f base.Ino) []uint64 {
			return []uint64{writeSlice(t, m, f, 0, 4096), writeSlice(t, m, f, 100, 10)}
		}},
		{"chunk0and2", func(t *testing.T, m *Meta, f base.Ino) []uint64 {
			return []uint64{writeSlice(t, m, f, 0, 4096), writeSlice(t, m, f, 2*base.ChunkSize+5, 10)}
		}},
		{"chunk1only", func(t *testing.T, m *Meta, f base.Ino) []uint64 {
			return []uint64{writeSlice(t, m, f, base.ChunkSize, 10)}
		}},
		{"snapshot", func(t *testing.T, m *Meta, f base.Ino) []uint64 {
			writeSlice(t, m, f, 0, 4096)
			must[Snapshot](t)(m.CreateSnapshot(ctx, "s"))
			return []uint64{writeSlice(t, m, f, 8192, 10)} // the snapshot keeps the first
		}},
		{"truncated-after-snapshot", func(t *testing.T, m *Meta, f base.Ino) []uint64 {
			writeSlice(t, m, f, 0, 4096)
			must[Snapshot](t)(m.CreateSnapshot(ctx, "s"))
			must[base.Attr](t)(m.SetAttr(ctx, root, f, SetAttrRequest{Valid: SetSize, Size: 0}))
			return nil
		}},
	} {
		t.Run(l.name, func(t *testing.T) {
			m := newTestMeta(t)
			d := mkdir(t, m, root, base.RootIno, "d")
			f := create(t, m, root, d, "f")
			freed := l.setup(t, m, f)
			before := pendingIDs(t, m)
			lookup(t, m, d, "f") // the unlink finds the entry and inode cached
			ok(t, m.Unlink(ctx, root, d, "f"))
			_, err := m.GetAttr(ctx, f)
			wantErr(t, err, base.ErrNotFound)
			got := slices.Sorted(slices.Values(pendingIDs(t, m)))
			want := slices.Sorted(slices.Values(append(before, freed...)))
			if !slices.Equal(got, want) {
				t.Fatalf("pending %v, want %v", got, want)
			}
			if u := must[Usage](t)(m.Usage(ctx)); u.Bytes != 0 {
				t.Fatalf("usage %+v after the unlink", u)
			}
		})
	}
}
