package chunk

import (
	"context"
	"errors"
	"fmt"

	"github.com/cairnfs/cairn/internal/base"
)

// ErrNoDiskCache is returned by Warm on a Store without a DiskCache.
var ErrNoDiskCache = errors.New("chunk: no disk cache")

// Warm makes the DiskCache hold every block that the slices of one chunk
// reference (the blocks covering each reference's range; ID-0 slices hold
// no block), fetching and verifying the missing ones from the object store
// without going through the BlockCache (warmup must not flush the memory
// tier). Blocks are warmed concurrently (Options.ReadConcurrency).
// progress, if not nil, is called once per block, from several goroutines,
// with the block's length and whether it was cached already. It returns
// the first error; a block the disk cache has no room for wraps the
// cache's error.
func (s *Store) Warm(ctx context.Context, slices []base.Slice, progress func(n int, cached bool)) error {
	if s.disk == nil {
		return ErrNoDiskCache
	}
	type blk struct {
		key    string
		length int
	}
	var blocks []blk
	seen := make(map[string]bool)
	bs := s.opts.BlockSize
	for _, sl := range slices {
		if sl.ID == 0 || sl.Len == 0 {
			continue
		}
		first, last := int(sl.Off)/bs, (int(sl.Off)+int(sl.Len)-1)/bs
		for i := first; i <= last; i++ {
			n := s.blockLen(sl.Size, i)
			key := BlockKey(sl.ID, i, n)
			if !seen[key] {
				seen[key] = true
				blocks = append(blocks, blk{key, n})
			}
		}
	}
	errs := make([]error, len(blocks))
	parallel(len(blocks), s.opts.ReadConcurrency, func(i int) {
		b := blocks[i]
		if ctx.Err() != nil {
			errs[i] = ctx.Err()
			return
		}
		cached := s.disk.Has(b.key)
		if !cached {
			data, _, err := s.fetchObject(ctx, b.key, b.length)
			if err == nil {
				err = s.disk.Write(b.key, data)
			}
			if err != nil {
				errs[i] = fmt.Errorf("chunk: warm block %s: %w", b.key, err)
				return
			}
		}
		if progress != nil {
			progress(b.length, cached)
		}
	})
	return errors.Join(errs...)
}
