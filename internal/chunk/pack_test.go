package chunk

import (
	"bytes"
	"context"
	"testing"

	"github.com/cairnfs/cairn/internal/base"
)

// scatter writes n writes of size bytes in chunk idx, each its own slice
// (descending offsets, gaps between them), and returns them in a model of
// the chunk's first 64 MiB.
func scatter(t *testing.T, w *Writer, idx uint32, n, size int, fill byte, m []byte) {
	t.Helper()
	for i := n - 1; i >= 0; i-- {
		p := bytes.Repeat([]byte{fill + byte(i)}, size)
		off := int64(idx)*base.ChunkSize + int64(i)*int64(2*size)
		if err := w.Write(context.Background(), off, p); err != nil {
			t.Fatal(err)
		}
		copy(m[off:], p)
	}
}

// TestPackSmallSlices: small slices sealed together are uploaded as one
// object per chunk, committed as parts of it, and read back right; a
// pack bigger than packTarget is split. (The auto-flush at MaxChunkSlices
// would cut packs at 33 slices: it is raised here.)
func TestPackSmallSlices(t *testing.T) {
	obj := memStore()
	s := newTestStore(t, obj, newMapCache(), Options{MaxChunkSlices: 1000})
	c := newBatchCommitter()
	w := s.NewWriter(c)
	defer w.Close()
	model := make([]byte, 2*base.ChunkSize)
	scatter(t, w, 0, 100, 4096, 'a', model)
	scatter(t, w, 1, 10, 1000, 'A', model)
	if err := w.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := obj.puts.Load(); got != 2 {
		t.Errorf("%d puts for 110 small slices in two chunks, want 2 (one pack each)", got)
	}
	for idx, want := range map[uint32]int{0: 100, 1: 10} {
		ss := c.chunk(idx)
		if len(ss) != want {
			t.Fatalf("chunk %d: %d slices committed, want %d", idx, len(ss), want)
		}
		offs := map[uint32]bool{}
		for _, sl := range ss {
			if sl.ID != ss[0].ID || sl.Size != ss[0].Size {
				t.Fatalf("chunk %d: slice %+v is not in the pack of %+v", idx, sl, ss[0])
			}
			if offs[sl.Off] {
				t.Fatalf("chunk %d: two slices at pack offset %d", idx, sl.Off)
			}
			offs[sl.Off] = true
		}
	}
	if c.chunk(0)[0].ID == c.chunk(1)[0].ID {
		t.Error("one pack spans two chunks")
	}
	if got := readFile(t, s, c.memCommitter, 0, len(model)); !bytes.Equal(got, model) {
		t.Fatal("content differs after the pack was committed")
	}

	// 300 writes of 4 KiB: more than packTarget, so more than one pack.
	before := obj.puts.Load()
	w2 := s.NewWriter(newBatchCommitter())
	defer w2.Close()
	scatter(t, w2, 0, 300, 4096, 'x', make([]byte, base.ChunkSize))
	if err := w2.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := obj.puts.Load() - before; got != 2 {
		t.Errorf("%d puts for 300 slices of 4 KiB, want 2 packs of at most %d bytes", got, packTarget)
	}
}

// TestPackUploadFails: when a pack's upload fails, Flush reports it and
// the next Flush uploads the slices one by one, with the data intact.
func TestPackUploadFails(t *testing.T) {
	obj := memStore()
	s := newTestStore(t, obj, newMapCache(), Options{})
	c := newBatchCommitter()
	w := s.NewWriter(c)
	defer w.Close()
	model := make([]byte, base.ChunkSize)
	scatter(t, w, 0, 10, 3000, 'a', model)
	obj.failPuts.Store(true)
	if err := w.Flush(context.Background()); err == nil {
		t.Fatal("Flush succeeded with every put failing")
	}
	if n := len(c.chunk(0)); n != 0 {
		t.Fatalf("%d slices committed after a failed flush", n)
	}
	obj.failPuts.Store(false)
	before := obj.puts.Load()
	if err := w.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := obj.puts.Load() - before; got != 10 {
		t.Errorf("%d puts on retry, want 10 (one per slice)", got)
	}
	if got := len(c.batches); got != 1 {
		t.Errorf("%d commits, want 1 batch", got)
	}
	ids := map[uint64]bool{}
	for _, sl := range c.chunk(0) {
		if sl.Off != 0 || sl.Size != sl.Len {
			t.Errorf("retried slice %+v is still a part of a pack", sl)
		}
		ids[sl.ID] = true
	}
	if len(ids) != 10 {
		t.Errorf("%d distinct ids for 10 retried slices", len(ids))
	}
	if got := readFile(t, s, c.memCommitter, 0, len(model)); !bytes.Equal(got, model) {
		t.Fatal("content differs after the retry")
	}
}

// TestPackCommitsWhole: the parts of a pack are committed in one batch,
// even where the batch would otherwise be cut (maxBatch slices, or an
// upload that failed). A pack split across two commits lets a compaction
// between them free its object while later parts still refer to it.
func TestPackCommitsWhole(t *testing.T) {
	ctx := context.Background()
	obj := memStore()
	s := newTestStore(t, obj, newMapCache(), Options{MaxChunkSlices: 10000})
	c := newBatchCommitter()
	w := s.NewWriter(c)
	defer w.Close()
	model := make([]byte, 3*base.ChunkSize)
	// 3 KiB slices: 341 to a pack, so packs do not end at maxBatch; two
	// chunks written in turns interleave their packs' parts in the
	// commit order.
	for i := 599; i >= 0; i-- {
		for idx := range uint32(2) {
			p := bytes.Repeat([]byte{byte(i) + byte(idx)}, 3072)
			off := int64(idx)*base.ChunkSize + int64(i)*8192
			if err := w.Write(ctx, off, p); err != nil {
				t.Fatal(err)
			}
			copy(model[off:], p)
		}
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	checkWholePacks(t, c)
	if len(c.batches) < 2 {
		t.Errorf("%d batches for 1200 slices: the test does not cross maxBatch", len(c.batches))
	}
	if got := readFile(t, s, c.memCommitter, 0, len(model)); !bytes.Equal(got, model) {
		t.Fatal("content differs after the flush")
	}

	// A slice that failed to upload, between two parts of a pack: the
	// commit stops before the pack, not inside it.
	c2 := newBatchCommitter()
	w2 := s.NewWriter(c2)
	defer w2.Close()
	model2 := make([]byte, 3*base.ChunkSize)
	for i := 19; i >= 0; i-- {
		p := bytes.Repeat([]byte{'a' + byte(i)}, 3072)
		off := int64(i) * 8192
		if err := w2.Write(ctx, off, p); err != nil {
			t.Fatal(err)
		}
		copy(model2[off:], p)
		if i == 10 {
			// A big slice in chunk 2, uploaded on its own, fails.
			big := bytes.Repeat([]byte{'Z'}, 3*packMember)
			obj.failOver.Store(packMember)
			if err := w2.Write(ctx, 2*base.ChunkSize, big); err != nil {
				t.Fatal(err)
			}
			copy(model2[2*base.ChunkSize:], big)
		}
	}
	if err := w2.Flush(ctx); err == nil {
		t.Fatal("Flush succeeded with a failed upload")
	}
	if n := len(c2.batches); n != 0 {
		t.Errorf("%d batches committed before the failed slice, want 0 (the pack straddles it)", n)
	}
	obj.failOver.Store(0)
	if err := w2.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	checkWholePacks(t, c2)
	if got := readFile(t, s, c2.memCommitter, 0, len(model2)); !bytes.Equal(got, model2) {
		t.Fatal("content differs after the retry")
	}
}

// checkWholePacks fails if the parts of one object were committed in
// more than one batch.
func checkWholePacks(t *testing.T, c *batchCommitter) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	batchOf := map[uint64]int{}
	for b, batch := range c.batches {
		for _, s := range batch {
			if prev, ok := batchOf[s.ID]; ok && prev != b {
				t.Fatalf("object %d has parts in batches %d and %d", s.ID, prev, b)
			}
			batchOf[s.ID] = b
		}
	}
}
