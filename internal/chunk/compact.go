package chunk

import (
	"context"
	"fmt"

	"github.com/cairnfs/cairn/internal/base"
)

// Compact reads the chunk range covered by slices (from the lowest Pos to
// the highest Pos+Len, holes and ID-0 slices included as zeros) and stores
// it as the new slice newID. It returns the reference that replaces slices:
// Pos = lowest Pos, ID = newID, Off = 0, Len = Size = range length. The
// caller commits it through meta (replacing exactly the slices it passed)
// and deletes the new slice with DeleteSlice if that commit fails. On error
// Compact deletes the blocks it wrote. Its memory use is bounded by
// Options.UploadConcurrency blocks; it does not count against BufferLimit.
func (s *Store) Compact(ctx context.Context, slices []base.Slice, newID uint64) (base.Slice, error) {
	if newID == 0 {
		return base.Slice{}, fmt.Errorf("chunk: compact into slice id 0: %w", base.ErrInvalid)
	}
	lo, hi := uint64(base.ChunkSize), uint64(0)
	for _, sl := range slices {
		if sl.Len == 0 {
			continue
		}
		lo = min(lo, uint64(sl.Pos))
		hi = max(hi, uint64(sl.Pos)+uint64(sl.Len))
	}
	if hi <= lo {
		return base.Slice{}, fmt.Errorf("chunk: compact: no data in %d slices: %w", len(slices), base.ErrInvalid)
	}
	return s.CompactRange(ctx, slices, uint32(lo), uint32(hi), newID)
}

// CompactRange is Compact limited to chunk positions [lo, hi): it stores
// what slices resolve to in that range as the new slice newID and returns
// its reference (Pos = lo, Len = Size = hi-lo). Slices lying entirely
// inside the range may then be dropped by the caller; slices reaching
// outside it stay, and the new slice, committed after them, overrides
// them inside the range.
func (s *Store) CompactRange(ctx context.Context, slices []base.Slice, lo, hi uint32, newID uint64) (base.Slice, error) {
	if newID == 0 {
		return base.Slice{}, fmt.Errorf("chunk: compact into slice id 0: %w", base.ErrInvalid)
	}
	if hi <= lo {
		return base.Slice{}, fmt.Errorf("chunk: compact: empty range [%d,%d): %w", lo, hi, base.ErrInvalid)
	}
	if uint64(hi) > base.ChunkSize {
		return base.Slice{}, fmt.Errorf("chunk: compact: slices end at %d, past the chunk: %w", hi, base.ErrIO)
	}
	size := uint32(hi - lo)
	bs := s.opts.BlockSize
	n := s.numBlocks(size)
	// What is read here is replaced by what is written: only the new
	// block goes to the caches.
	rctx := withoutFill(ctx)
	errs := make([]error, n)
	parallel(n, s.opts.UploadConcurrency, func(i int) {
		if ctx.Err() != nil {
			errs[i] = ctx.Err()
			return
		}
		blen := s.blockLen(size, i)
		buf := make([]byte, blen, EncodedLen(blen))
		if _, err := s.ReadChunk(rctx, slices, uint32(lo)+uint32(i*bs), buf); err != nil {
			errs[i] = err
			return
		}
		// The range is being rewritten by small writes: it is hot, and
		// the new block replaces what readers had cached of it in
		// memory. Like any write it goes to the disk tier only with
		// CacheWrites (putBlock): a small read that misses memory
		// fills the disk tier with it, and a block rewritten again
		// before anyone reads it costs no disk write (measured: 4K
		// random writes 15-25% slower when every compaction output
		// went to disk; docs/design/0005-caches.md). On a remote store
		// that fill starts with reads from the object store, so there
		// CacheRandomWrites sends it to the disk tier at once.
		key := BlockKey(newID, i, blen)
		if errs[i] = s.putBlock(ctx, key, buf, true, false); errs[i] == nil {
			s.cacheRandomWrite(key, buf[:blen:blen], false)
		}
	})
	for _, err := range errs {
		if err != nil {
			if derr := s.DeleteSlice(context.WithoutCancel(ctx), newID, size); derr != nil {
				s.log.Warn("compact: deleting partial slice", "slice", newID, "err", derr)
			}
			return base.Slice{}, fmt.Errorf("chunk: compact into slice %d: %w", newID, err)
		}
	}
	s.st.compactions.Add(1)
	s.st.compactBytes.Add(int64(size))
	return base.Slice{Pos: uint32(lo), ID: newID, Size: size, Off: 0, Len: size}, nil
}
