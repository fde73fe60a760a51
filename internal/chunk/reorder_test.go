package chunk

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/cairnfs/cairn/internal/object"
)

// A sequential stream whose writes arrive slightly out of order (the
// kernel's writeback requests are served concurrently) still becomes whole
// blocks: the late writes continue the slice they belong to and the slice
// started early is merged into it. Before, every reordering sealed a slice
// and left short blocks (a 256 MiB file through FUSE made 105-140 objects
// instead of 64).
func TestReorderedWritesMakeFullBlocks(t *testing.T) {
	ctx := context.Background()
	obj, s, c, w := newReorderWriter(t)
	const piece, pieces = 16 << 10, 256 // 4 MiB: 32 blocks of 128 KiB
	r := rand.New(rand.NewPCG(3, 4))
	order := make([]int, pieces)
	for i := range order {
		order[i] = i
	}
	for i := 0; i+1 < pieces; i += 2 { // swap about half of the neighbours
		if r.IntN(2) == 0 {
			order[i], order[i+1] = order[i+1], order[i]
		}
	}
	want := make([]byte, piece*pieces)
	for i := range want {
		want[i] = byte(i/piece) | 1
	}
	for _, i := range order {
		if err := w.Write(ctx, int64(i*piece), want[i*piece:(i+1)*piece]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, s, c, 0, len(want)); firstDiff(got, want) >= 0 {
		t.Fatalf("content differs at %d", firstDiff(got, want))
	}
	sizes := blockSizes(t, obj)
	if short := shortBlocks(sizes); len(sizes) != len(want)/testBS || short != 0 {
		t.Errorf("%d blocks, %d of them short; want %d full blocks", len(sizes), short, len(want)/testBS)
	}
	if n := len(c.chunk(0)); n != 1 {
		t.Errorf("%d slices committed; want 1", n)
	}
}

// TestLateWritesBeforeAFullBlock: a write that arrives after the data
// behind it already filled a block's worth still joins one slice with full
// blocks: the later slice's blocks wait for the gap to close instead of
// being uploaded with boundaries of their own.
func TestLateWritesBeforeAFullBlock(t *testing.T) {
	ctx := context.Background()
	obj, s, c, w := newReorderWriter(t)
	want := make([]byte, 8*testBS)
	for i := range want {
		want[i] = byte(i/1000) | 1
	}
	at := func(a, b int) {
		t.Helper()
		if err := w.Write(ctx, int64(a), want[a:b]); err != nil {
			t.Fatal(err)
		}
	}
	// [0, 1.5 blocks), then [2.5, 8 blocks): five and a half blocks'
	// worth, then the gap [1.5, 2.5).
	at(0, 3*testBS/2)
	at(5*testBS/2, len(want))
	at(3*testBS/2, 5*testBS/2)
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, s, c, 0, len(want)); firstDiff(got, want) >= 0 {
		t.Fatalf("content differs at %d", firstDiff(got, want))
	}
	sizes := blockSizes(t, obj)
	if len(sizes) != 8 || shortBlocks(sizes) != 0 {
		t.Errorf("block sizes %v: want 8 full blocks", sizes)
	}
}

// blockSizes lists the lengths of the block objects in obj.
func blockSizes(t *testing.T, obj object.Store) []int {
	t.Helper()
	var sizes []int
	err := obj.List(context.Background(), "chunks/", func(i object.Info) bool {
		_, _, n, err := ParseBlockKey(i.Key)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, n)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return sizes
}

// shortBlocks counts the sizes below a full test block.
func shortBlocks(sizes []int) int {
	short := 0
	for _, n := range sizes {
		if n != testBS {
			short++
		}
	}
	return short
}

// newReorderWriter is a Writer over an in-memory store with room for a
// whole test file and no auto-flush, so that only the write order decides
// the blocks.
func newReorderWriter(t *testing.T) (*testStore, *Store, *memCommitter, *Writer) {
	obj := memStore()
	s := newTestStore(t, obj, newMapCache(), Options{BlockSize: testBS, BufferLimit: 64 << 20, MaxChunkSlices: 1 << 20})
	c := newCommitter()
	w := s.NewWriter(c)
	t.Cleanup(w.Close)
	return obj, s, c, w
}
