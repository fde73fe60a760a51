package vfs

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/chunk"
	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/meta"
)

// pauseAfterWrite is a store that, after a transaction that appended to a
// chunk without freeing anything (a writer's commit), makes the next
// transaction wait: a compaction scheduled by that commit then runs
// before the writer's next batch.
type pauseAfterWrite struct {
	kv.Store
	armed atomic.Bool
}

func (s *pauseAfterWrite) Update(ctx context.Context, fn func(kv.Txn) error) error {
	if s.armed.CompareAndSwap(true, false) {
		time.Sleep(200 * time.Millisecond)
	}
	kinds, err := watchedUpdate(ctx, s.Store, fn)
	if err == nil && kinds["chunk"] && !kinds["pending"] {
		s.armed.Store(true)
	}
	return err
}

// TestPackedWritesSurviveCompaction: small scattered writes in many
// chunks, flushed at once, make more slices than one commit takes, with
// packs (objects shared by several slices) straddling the batch limit.
// Compactions run between the writer's commits. No committed slice may
// refer to an object that is gone, and the data reads back.
func TestPackedWritesSurviveCompaction(t *testing.T) {
	store := &pauseAfterWrite{}
	e := newEnvOver(t, Options{}, func(s kv.Store) kv.Store { store.Store = s; return store })
	ino, fh := e.create(t, "f")
	// 300 slices of 3 KiB in 10 chunks, written in turns: 21 make a 64 KiB
	// pack, so each chunk has a pack of slices 0-20 and one of 21-29,
	// and the first commit (256 slices) ends inside the second. Slices
	// 0-20 lie in the chunk's first three 64 KiB windows, 21-29 closer
	// together in window 10, which a compaction therefore takes first:
	// committed alone, the first parts of the second pack would be
	// compacted away and their object freed.
	const chunks, perChunk, size = 10, 30, 3072
	type span struct {
		off int64
		p   []byte
	}
	var spans []span
	for k := range perChunk {
		pos := int64(k/8)*65536 + int64(k%8)*8192
		if k >= 21 {
			pos = 10*65536 + int64(k-21)*4096
		}
		for c := range chunks {
			off := int64(c)*base.ChunkSize + pos
			p := bytes.Repeat([]byte{byte(1 + k + c)}, size)
			e.write(t, fh, off, p)
			spans = append(spans, span{off, p})
		}
	}
	if en := e.v.Fsync(ctx, fh); en != 0 {
		t.Fatalf("fsync: %v", en)
	}
	time.Sleep(500 * time.Millisecond) // compactions, then the deleter (DeleteDelay 1 ms)
	for _, s := range spans {
		if got := e.read(t, fh, s.off, len(s.p)); !bytes.Equal(got, s.p) {
			t.Fatalf("content at %d differs", s.off)
		}
	}
	e.release(t, fh)
	bs := e.cs.BlockSize()
	err := e.m.ForEachSlice(ctx, func(u meta.SliceUse) error {
		if u.Ino != ino || u.ID&base.InlineBit != 0 {
			return nil
		}
		for i := 0; i*bs < int(u.Size); i++ {
			key := chunk.BlockKey(u.ID, i, min(bs, int(u.Size)-i*bs))
			if _, err := e.obj.Get(ctx, key, 0, 1); err != nil {
				t.Errorf("chunk %d refers to slice %d, whose block %s is gone: %v", u.Chunk, u.ID, key, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
