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
	obj := memStore()
	s := newTestStore(t, obj, newMapCache(), Options{BlockSize: testBS, BufferLimit: 64 << 20, MaxChunkSlices: 1 << 20})
	c := newCommitter()
	w := s.NewWriter(c)
	defer w.Close()
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
	var keys []string
	err := obj.List(ctx, "chunks/", func(i object.Info) bool {
		keys = append(keys, i.Key)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	short := 0
	for _, k := range keys {
		if _, _, n, err := ParseBlockKey(k); err != nil {
			t.Fatal(err)
		} else if n != testBS {
			short++
		}
	}
	if len(keys) != len(want)/testBS || short != 0 {
		t.Errorf("%d blocks, %d of them short; want %d full blocks", len(keys), short, len(want)/testBS)
	}
	if n := len(c.chunk(0)); n != 1 {
		t.Errorf("%d slices committed; want 1", n)
	}
}
