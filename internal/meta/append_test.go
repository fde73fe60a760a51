package meta

import (
	"slices"
	"testing"

	"github.com/cairnfs/cairn/internal/base"
)

// TestAppendPlacedAtCommit: two clients append to one file, each having
// buffered its bytes where it saw the end (offset 0): the commits place
// them one after the other, where the file ends as of each commit, and
// a retried commit that had taken effect is not placed twice.
func TestAppendPlacedAtCommit(t *testing.T) {
	a, store := newTestMetaStore(t, Options{})
	b, err := Open(ctx, store, Options{})
	ok(t, err)
	t.Cleanup(func() { b.Close() })
	f := create(t, a, root, base.RootIno, "log")
	s1 := newSlice(t, a, 0, 100)
	s2 := newSlice(t, b, 0, 50)
	must[[]uint32](t)(a.WriteSlices(ctx, f, []SliceWrite{{Slice: s1, Append: true}}, 1))
	must[[]uint32](t)(b.WriteSlices(ctx, f, []SliceWrite{{Slice: s2, Append: true}}, 2))
	at := s2
	at.Pos = 100
	if ss := must[[]base.Slice](t)(a.ReadChunk(ctx, f, 0)); !slices.Equal(ss, []base.Slice{s1, at}) {
		t.Fatalf("chunk %v, want %v then %v", ss, s1, at)
	}
	if n := attr(t, a, f).Length; n != 150 {
		t.Fatalf("length %d, want 150", n)
	}
	// The same commit again, marked as a retry: already there.
	must[[]uint32](t)(b.WriteSlices(ctx, f, []SliceWrite{{Slice: s2, Append: true, Retry: true}}, 3))
	if n := attr(t, a, f).Length; n != 150 {
		t.Fatalf("length %d after a retried commit, want 150", n)
	}
	if ss := must[[]base.Slice](t)(a.ReadChunk(ctx, f, 0)); len(ss) != 2 {
		t.Fatalf("chunk %v after a retried commit, want 2 slices", ss)
	}
}

// TestAppendAcrossChunks: an append the end puts across a chunk boundary
// is cut in two references of one object, with an extra owner; removing
// the file frees the object exactly once and leaves no owner record
// (Check runs at cleanup).
func TestAppendAcrossChunks(t *testing.T) {
	m := newTestMeta(t)
	f := create(t, m, root, base.RootIno, "log")
	tail := newSlice(t, m, base.ChunkSize-20, 10) // the file ends 10 bytes before chunk 1
	must[[]uint32](t)(m.WriteSlices(ctx, f, []SliceWrite{{Slice: tail}}, 1))
	s := newSlice(t, m, 0, 30)
	must[[]uint32](t)(m.WriteSlices(ctx, f, []SliceWrite{{Slice: s, Append: true}}, 2))
	head, rest := s, s
	head.Pos, head.Len = base.ChunkSize-10, 10
	rest.Pos, rest.Off, rest.Len = 0, 10, 20
	if ss := must[[]base.Slice](t)(m.ReadChunk(ctx, f, 0)); !slices.Equal(ss, []base.Slice{tail, head}) {
		t.Fatalf("chunk 0 %v, want %v then %v", ss, tail, head)
	}
	if ss := must[[]base.Slice](t)(m.ReadChunk(ctx, f, 1)); !slices.Equal(ss, []base.Slice{rest}) {
		t.Fatalf("chunk 1 %v, want %v", ss, rest)
	}
	if n := attr(t, m, f).Length; n != base.ChunkSize+20 {
		t.Fatalf("length %d, want %d", n, base.ChunkSize+20)
	}
	probs, err := m.Check(ctx, false)
	ok(t, err)
	if len(probs) != 0 {
		t.Fatalf("check after the cut append: %v", probs)
	}
	ok(t, m.Unlink(ctx, root, base.RootIno, "log"))
	var freed []uint64
	for {
		got := must[[]base.Slice](t)(m.TakeDeletes(ctx, 10))
		if len(got) == 0 {
			break
		}
		for _, g := range got {
			freed = append(freed, g.ID)
		}
		ids := make([]uint64, len(got))
		for i, g := range got {
			ids[i] = g.ID
		}
		ok(t, m.FinishDeletes(ctx, ids))
	}
	slices.Sort(freed)
	want := []uint64{s.ID, tail.ID}
	slices.Sort(want)
	if !slices.Equal(freed, want) {
		t.Fatalf("freed %v, want %v (each once)", freed, want)
	}
}
