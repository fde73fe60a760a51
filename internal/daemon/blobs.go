package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/chunk"
	"github.com/cairnfs/cairn/internal/meta"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/object/counted"
	"github.com/cairnfs/cairn/internal/object/split"
)

// DefaultInlineMax is the inline limit format gives a volume by default
// (FormatOptions.InlineMax); see docs/design/0005-caches.md, "Small
// files".
const DefaultInlineMax = 16 << 10

// metaBlobs is an object.Store over the blobs of the metadata engine
// (meta.PutBlob and friends): where a volume with an inline limit keeps
// the blocks of its small slices.
type metaBlobs struct {
	m *meta.Meta
	// dirty says a blob was put since the last Sync: Sync costs the
	// engine a log flush, and chunk's fsync path calls it just before
	// meta's own Sync.
	dirty atomic.Bool
}

var (
	_ object.Store        = (*metaBlobs)(nil)
	_ object.Syncer       = (*metaBlobs)(nil)
	_ object.BatchDeleter = (*metaBlobs)(nil)
)

// withInlineBlocks returns objs joined with the metadata engine's blobs
// for the blocks of inline slices (chunk.InlineBlock), and the counters
// of the blob requests; or objs itself and nil when the volume's format
// has no blobs (version 1). The join does not follow the inline limit:
// it may change while the volume is mounted (cairn config --inline-max),
// and blocks written under an earlier limit stay where they went.
func withInlineBlocks(objs object.Store, m *meta.Meta, s meta.Settings) (object.Store, *counted.Store) {
	if s.FormatVersion < 2 {
		return objs, nil
	}
	blobs := counted.New(&metaBlobs{m: m})
	return split.New(objs, blobs, chunk.InlineBlock), blobs
}

func (b *metaBlobs) String() string      { return "metadata engine blobs" }
func (b *metaBlobs) AllowsNesting() bool { return true }

func blobErr(err error) error {
	if errors.Is(err, base.ErrNotFound) {
		return fmt.Errorf("%w: %v", object.ErrNotFound, err)
	}
	return err
}

func (b *metaBlobs) Put(ctx context.Context, key string, data []byte) error {
	if err := object.ValidKey(key); err != nil {
		return err
	}
	if err := b.m.PutBlob(ctx, key, data); err != nil {
		return err
	}
	b.dirty.Store(true)
	return nil
}

func (b *metaBlobs) Get(ctx context.Context, key string, off, length int64) ([]byte, error) {
	if err := object.ValidKey(key); err != nil {
		return nil, err
	}
	if off < 0 {
		return nil, fmt.Errorf("get %s at offset %d: negative offset", key, off)
	}
	data, err := b.m.GetBlob(ctx, key)
	if err != nil {
		return nil, blobErr(err)
	}
	if off >= int64(len(data)) {
		return []byte{}, nil
	}
	data = data[off:]
	if length >= 0 && length < int64(len(data)) {
		data = data[:length]
	}
	return data, nil
}

func (b *metaBlobs) Head(ctx context.Context, key string) (object.Info, error) {
	if err := object.ValidKey(key); err != nil {
		return object.Info{}, err
	}
	data, err := b.m.GetBlob(ctx, key)
	if err != nil {
		return object.Info{}, blobErr(err)
	}
	return object.Info{Key: key, Size: int64(len(data))}, nil
}

func (b *metaBlobs) Delete(ctx context.Context, key string) error {
	if err := object.ValidKey(key); err != nil {
		return err
	}
	return b.m.DeleteBlobs(ctx, key)
}

// DeleteMany deletes the blobs under keys in one transaction.
func (b *metaBlobs) DeleteMany(ctx context.Context, keys []string) error {
	for _, k := range keys {
		if err := object.ValidKey(k); err != nil {
			return err
		}
	}
	return b.m.DeleteBlobs(ctx, keys...)
}

func (b *metaBlobs) List(ctx context.Context, prefix string, fn func(object.Info) bool) error {
	return b.m.ListBlobs(ctx, prefix, func(key string, size int64) bool {
		return fn(object.Info{Key: key, Size: size})
	})
}

// Sync makes the blobs put so far durable: the engine's Sync.
func (b *metaBlobs) Sync(ctx context.Context) error {
	if !b.dirty.Swap(false) {
		return nil
	}
	if err := b.m.Sync(ctx); err != nil {
		b.dirty.Store(true)
		return err
	}
	return nil
}
