package chunk

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/object/mem"
	"github.com/cairnfs/cairn/internal/object/split"
)

// inlineCommitter is a memCommitter that stores the blocks of inline
// slices in blobs, the side of the test's split store, as vfs stores them
// in meta: only when the commit succeeds.
type inlineCommitter struct {
	*memCommitter
	blobs object.Store
}

func (c inlineCommitter) CommitsInlineBlocks() {}

func (c inlineCommitter) CommitSlices(ctx context.Context, commits []Commit) error {
	c.mu.Lock()
	if c.failN > 0 {
		c.failN--
		c.mu.Unlock()
		return errInjected
	}
	c.mu.Unlock()
	for _, cm := range commits {
		if cm.Block != nil {
			if cm.Slice.ID&base.InlineBit == 0 {
				return errors.New("block given for a slice that is not inline")
			}
			if err := c.blobs.Put(ctx, BlockKey(cm.Slice.ID, 0, int(cm.Slice.Size)), cm.Block); err != nil {
				return err
			}
		}
		if err := c.CommitSlice(ctx, cm.Chunk, cm.Slice); err != nil {
			return err
		}
	}
	return nil
}

// TestInlineCommit: with an InlineCommitter, a small slice at the start of
// a file is held in the buffer and committed with its block (no object
// put), survives a failed commit, and reads back through the store; a
// small slice further into the file and a larger one go to the object
// store as before.
func TestInlineCommit(t *testing.T) {
	ctx := context.Background()
	const limit = 4096
	objects, blobs := mem.New(), mem.New()
	s := newTestStore(t, split.New(objects, blobs, InlineBlock), nil, Options{BlockSize: 64 << 10, InlineMax: limit})
	c := inlineCommitter{newCommitter(), blobs}
	w := s.NewWriter(c)
	defer w.Close()

	head := bytes.Repeat([]byte("h"), 1000)
	if err := w.Write(ctx, 0, head); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.failN = 1
	c.mu.Unlock()
	if err := w.Flush(ctx); !errors.Is(err, errInjected) {
		t.Fatalf("Flush with a failing commit: %v", err)
	}
	if !w.Pending() || countKeys(t, blobs) != 0 || countKeys(t, objects) != 0 {
		t.Fatalf("after a failed commit: pending %v, %d blobs, %d objects", w.Pending(), countKeys(t, blobs), countKeys(t, objects))
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if countKeys(t, blobs) != 1 || countKeys(t, objects) != 0 || s.Stats().ObjectPuts != 0 || s.Stats().InlineCommits != 1 {
		t.Fatalf("after the commit: %d blobs, %d objects, stats %+v", countKeys(t, blobs), countKeys(t, objects), s.Stats())
	}
	if got := c.chunk(0); len(got) != 1 || got[0].ID&base.InlineBit == 0 {
		t.Fatalf("committed %+v, want one inline slice", got)
	}
	if s.Stats().Buffered != 0 {
		t.Fatalf("buffer not released: %d bytes", s.Stats().Buffered)
	}

	// Past the limit: a small write at 8 KiB, and a write of 5000 bytes
	// at 0 in a new slice; both are objects.
	tail := bytes.Repeat([]byte("t"), 100)
	if err := w.Write(ctx, 8192, tail); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("b"), 5000)
	if err := w.Write(ctx, 0, big); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if countKeys(t, blobs) != 1 || countKeys(t, objects) != 2 {
		t.Fatalf("%d blobs and %d objects, want 1 and 2", countKeys(t, blobs), countKeys(t, objects))
	}
	want := make([]byte, 8192+100)
	copy(want, head)
	copy(want, big)
	copy(want[8192:], tail)
	// A new store: nothing in memory, the inline block read from blobs.
	s2 := newTestStore(t, split.New(objects, blobs, InlineBlock), nil, Options{BlockSize: 64 << 10, InlineMax: limit})
	if got := readFile(t, s2, c.memCommitter, 0, len(want)); !bytes.Equal(got, want) {
		t.Fatal("read back differs")
	}
	// The head slice, overwritten by big, reads back alone too.
	first := c.chunk(0)[0]
	buf := make([]byte, first.Len)
	if _, err := s2.ReadChunk(ctx, []base.Slice{first}, 0, buf); err != nil || !bytes.Equal(buf, head) {
		t.Fatalf("inline slice read: %v", err)
	}
}

// TestDeleteSlices deletes the blocks of many slices with a batching store
// (split is an object.BatchDeleter) and with one that is not.
func TestDeleteSlices(t *testing.T) {
	ctx := context.Background()
	for _, batch := range []bool{true, false} {
		objects, blobs := mem.New(), mem.New()
		var store object.Store = objects
		if batch {
			store = split.New(objects, blobs, InlineBlock)
		}
		cache := newMapCache()
		s := newTestStore(t, store, cache, Options{BlockSize: 64 << 10})
		c := newCommitter()
		w := s.NewWriter(c)
		for i := range 20 {
			// 20 slices, some of several blocks
			if err := w.Write(ctx, int64(i)*(1<<20), bytes.Repeat([]byte{byte(i)}, 1000+i*10_000)); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		w.Close()
		var all []base.Slice
		for _, idx := range c.indexes() {
			all = append(all, c.chunk(idx)...)
		}
		if len(all) != 20 || countKeys(t, objects) <= 20 || cache.len() == 0 {
			t.Fatalf("%d slices, %d objects, %d cached", len(all), countKeys(t, objects), cache.len())
		}
		if err := s.DeleteSlices(ctx, append(all, base.Slice{})); err != nil {
			t.Fatal(err)
		}
		if n := countKeys(t, objects); n != 0 {
			t.Fatalf("batch %v: %d objects left", batch, n)
		}
		if cache.len() != 0 {
			t.Fatalf("batch %v: %d blocks left in the cache", batch, cache.len())
		}
		// Again: the blocks are gone, which is fine.
		if err := s.DeleteSlices(ctx, all); err != nil {
			t.Fatal(err)
		}
	}
}

func countKeys(t *testing.T, s object.Store) int {
	t.Helper()
	n := 0
	if err := s.List(context.Background(), KeyPrefix, func(object.Info) bool { n++; return true }); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestInlineLimitChanges: with Options.InlineLimit, each slice follows the
// limit in force when it is sealed; a lowered limit sends new small files
// to the object store, a raised one to the blobs, and the blocks written
// before stay where they are and read back.
func TestInlineLimitChanges(t *testing.T) {
	ctx := context.Background()
	var limit atomic.Int64
	objects, blobs := mem.New(), mem.New()
	s := newTestStore(t, split.New(objects, blobs, InlineBlock), nil,
		Options{BlockSize: 64 << 10, InlineLimit: func() int { return int(limit.Load()) }})
	c := inlineCommitter{newCommitter(), blobs}
	w := s.NewWriter(c)
	defer w.Close()
	small := bytes.Repeat([]byte("s"), 1000)
	write := func(off int64) {
		t.Helper()
		if err := w.Write(ctx, off, small); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	write(0) // limit 0: an object
	if countKeys(t, blobs) != 0 || countKeys(t, objects) != 1 {
		t.Fatalf("limit 0: %d blobs, %d objects; want 0 and 1", countKeys(t, blobs), countKeys(t, objects))
	}
	limit.Store(4096)
	write(0) // a blob now
	if countKeys(t, blobs) != 1 || countKeys(t, objects) != 1 {
		t.Fatalf("limit 4096: %d blobs, %d objects; want 1 and 1", countKeys(t, blobs), countKeys(t, objects))
	}
	limit.Store(1 << 20) // out of bounds: none
	write(0)
	if countKeys(t, blobs) != 1 || countKeys(t, objects) != 2 {
		t.Fatalf("limit out of bounds: %d blobs, %d objects; want 1 and 2", countKeys(t, blobs), countKeys(t, objects))
	}
	for _, sl := range c.chunk(0) {
		buf := make([]byte, sl.Len)
		if _, err := s.ReadChunk(ctx, []base.Slice{sl}, 0, buf); err != nil || !bytes.Equal(buf, small) {
			t.Fatalf("slice %d read back: %v", sl.ID, err)
		}
	}
}
