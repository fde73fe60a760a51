package chunk

import (
	"bytes"
	"context"
	"math/rand/v2"
	"slices"
	"testing"
)

// newSkewWriter is newReorderWriter with blocks of four stream writes, so
// that slices started by large writes out of order are skewed.
func newSkewWriter(t *testing.T) (*testStore, *Store, *memCommitter, *Writer) {
	obj := memStore()
	s := newTestStore(t, obj, newMapCache(), Options{BlockSize: 4 * streamWrite, BufferLimit: 64 << 20, MaxChunkSlices: 1 << 20})
	c := newCommitter()
	w := s.NewWriter(c)
	t.Cleanup(w.Close)
	return obj, s, c, w
}

// checkOverlay compares what w's overlay shows of [a, b) of chunk 0 with
// model, where zero bytes are bytes not written yet.
func checkOverlay(t *testing.T, w *Writer, model []byte, a, b int) {
	t.Helper()
	got := make([]byte, b-a)
	if err := w.Overlay(0, uint32(a), b-a).Apply(context.Background(), got); err != nil {
		t.Fatal(err)
	}
	if i := firstDiff(got, model[a:b]); i >= 0 {
		t.Fatalf("overlay of [%d, %d) differs at %d: %d, want %d", a, b, a+i, got[i], model[a+i])
	}
}

// TestSkewedMerges: a stream of large writes of which every eighth arrives
// five writes late, as the kernel's writeback requests do when served
// concurrently. The writes that come early start slices on the block grid
// of the one they will join, which then takes their blocks: at most half
// a block is copied per late write (the whole early slice was), reads see
// every write at once, and the file is one slice of full blocks.
func TestSkewedMerges(t *testing.T) {
	ctx := context.Background()
	obj, s, c, w := newSkewWriter(t)
	const piece, pieces = streamWrite, 64
	bs := s.opts.BlockSize
	var order []int
	late := 0
	for i := 0; i < pieces; i++ {
		if i%8 == 2 && i+5 < pieces {
			order = append(order, i+1, i+2, i+3, i+4, i+5, i) // i comes late
			i += 5
			late++
			continue
		}
		order = append(order, i)
	}
	want := make([]byte, piece*pieces)
	for i := range want {
		want[i] = byte(i/1000) | 1
	}
	model := make([]byte, len(want))
	r := rand.New(rand.NewPCG(5, 6))
	for _, i := range order {
		a, b := i*piece, (i+1)*piece
		if err := w.Write(ctx, int64(a), want[a:b]); err != nil {
			t.Fatal(err)
		}
		copy(model[a:b], want[a:b])
		x := r.IntN(len(want))
		checkOverlay(t, w, model, x, min(len(want), x+r.IntN(3*bs)+1))
		checkOverlay(t, w, model, max(0, a-bs), min(len(want), b+bs))
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, s, c, 0, len(want)); firstDiff(got, want) >= 0 {
		t.Fatalf("content differs at %d", firstDiff(got, want))
	}
	sizes := blockSizes(t, obj)
	if len(sizes) != len(want)/bs || slices.ContainsFunc(sizes, func(n int) bool { return n != bs }) {
		t.Errorf("block sizes %v: want %d full blocks", sizes, len(want)/bs)
	}
	if n := len(c.chunk(0)); n != 1 {
		t.Errorf("%d slices committed; want 1", n)
	}
	if limit := int64(late * bs / 2); w.copied > limit {
		t.Errorf("merges copied %d bytes for %d late writes; want at most %d (half a block each)", w.copied, late, limit)
	}
}

// TestSkewedSliceSealed: a skewed slice whose gap never closes is moved to
// its own layout when sealed; it and the slice before it read back right.
func TestSkewedSliceSealed(t *testing.T) {
	ctx := context.Background()
	obj, s, c, w := newSkewWriter(t)
	bs := s.opts.BlockSize
	want := make([]byte, 4*bs)
	for i := range want {
		want[i] = byte(i/1000) | 1
	}
	model := make([]byte, len(want))
	for _, r := range [][2]int{{0, 3 * bs / 2}, {9 * bs / 4, 4 * bs}} {
		if err := w.Write(ctx, int64(r[0]), want[r[0]:r[1]]); err != nil {
			t.Fatal(err)
		}
		copy(model[r[0]:r[1]], want[r[0]:r[1]])
		checkOverlay(t, w, model, 0, len(model))
	}
	if w.copied != 0 {
		t.Fatalf("%d bytes copied before the flush", w.copied)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, s, c, 0, len(want)); !bytes.Equal(got, model) {
		t.Fatalf("content differs at %d", firstDiff(got, model))
	}
	if got, want := w.copied, int64(7*bs/4); got != want {
		t.Errorf("%d bytes copied to unskew; want %d (the second slice)", got, want)
	}
	sizes := blockSizes(t, obj)
	slices.Sort(sizes)
	if want := []int{bs / 2, 3 * bs / 4, bs, bs}; !slices.Equal(sizes, want) {
		t.Errorf("block sizes %v, want %v", sizes, want)
	}
}
