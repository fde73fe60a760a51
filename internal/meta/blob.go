package meta

import (
	"bytes"
	"context"
	"fmt"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// Blobs: small immutable objects kept in the metadata engine.
//
// A volume formatted with Settings.InlineMax > 0 keeps the block of every
// slice of at most that many bytes at the start of a file (a small file)
// here, under its object key, instead of in the object store: a small file
// then costs one metadata transaction rather than an object PUT (a round
// trip to S3, or a file and its fsync in a local store). Package meta only
// stores them; which keys go here is decided above it (the slice id's
// base.InlineBit, chunk.InlineBlock), and a blob's life follows its
// slice exactly as an object's does: written before the slice is
// committed, deleted when the slice is freed, listed by gc. Blobs are not
// versioned: like objects, they never change once written, and snapshots
// keep them alive through the slices they reference.

// PutBlob stores data under key, replacing any blob there. The blob is
// committed when PutBlob returns and durable after the next Sync, like
// every other transaction.
func (m *Meta) PutBlob(ctx context.Context, key string, data []byte) error {
	if m.opts.ReadOnly {
		return base.ErrReadOnly
	}
	if m.isClosed() {
		return kv.ErrClosed
	}
	return m.store.Update(ctx, func(tx kv.Txn) error {
		tx.Set(blobKey(key), data)
		return nil
	})
}

// GetBlob returns the blob under key, or an error wrapping
// base.ErrNotFound. The returned slice belongs to the caller.
func (m *Meta) GetBlob(ctx context.Context, key string) ([]byte, error) {
	var data []byte
	err := m.singleView(ctx, func(r kv.Reader) error {
		v, err := r.Get(blobKey(key))
		data = v
		return err
	})
	if err != nil {
		return nil, err
	}
	if data == nil {
		return nil, fmt.Errorf("blob %s: %w", key, base.ErrNotFound)
	}
	return data, nil
}

// DeleteBlobs removes the blobs under keys, in one transaction. Missing
// keys are not an error.
func (m *Meta) DeleteBlobs(ctx context.Context, keys ...string) error {
	if m.opts.ReadOnly {
		return base.ErrReadOnly
	}
	if m.isClosed() {
		return kv.ErrClosed
	}
	return m.store.Update(ctx, func(tx kv.Txn) error {
		for _, k := range keys {
			tx.Delete(blobKey(k))
		}
		return nil
	})
}

// ListBlobs calls fn with the key and size of every blob whose key starts
// with prefix, in ascending key order, until fn returns false. It reads in
// pages of separate views: blobs put or deleted meanwhile may or may not
// be seen.
func (m *Meta) ListBlobs(ctx context.Context, prefix string, fn func(key string, size int64) bool) error {
	const page = 1000
	start := blobKey(prefix)
	end := kv.PrefixEnd(start)
	type entry struct {
		key  string
		size int64
	}
	for {
		var got []entry
		err := m.view(ctx, func(r kv.Reader) error {
			got = got[:0]
			var derr error
			err := r.Scan(start, end, false, func(k, v []byte) bool {
				key, err := decodeBlobKey(k)
				if err != nil {
					derr = err
					return false
				}
				got = append(got, entry{string(key), int64(len(v))})
				return len(got) < page
			})
			if err != nil {
				return err
			}
			return derr
		})
		if err != nil {
			return err
		}
		for _, e := range got {
			if !fn(e.key, e.size) {
				return nil
			}
		}
		if len(got) < page {
			return nil
		}
		start = blobAfter(got[len(got)-1].key)
		if end != nil && bytes.Compare(start, end) >= 0 {
			return nil
		}
	}
}

// singleView runs fn, which reads one record (or a second only to explain
// the first's absence), without a snapshot where the engine has a cheaper
// way (kv.LooseViewer): on PostgreSQL one statement instead of BEGIN, the
// read and a ROLLBACK. It bypasses the latest-version cache, which holds
// no blobs or chunk maps.
func (m *Meta) singleView(ctx context.Context, fn func(r kv.Reader) error) error {
	if m.isClosed() {
		return kv.ErrClosed
	}
	if lv, ok := m.store.(kv.LooseViewer); ok {
		return lv.ViewLoose(ctx, fn)
	}
	return m.store.View(ctx, fn)
}
