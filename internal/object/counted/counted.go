// Package counted wraps an object.Store in a decorator that counts its
// requests by kind, the bytes they move and their latency, so that every
// backend is measured the same way without touching any of them.
package counted

import (
	"context"
	"io"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/internal/metrics"
	"github.com/cairnfs/cairn/internal/object"
)

// Kind is a kind of request.
type Kind int

// Request kinds. A Get with off == 0 and length < 0 is a Get; any other
// Get is a RangeGet.
const (
	Get Kind = iota
	RangeGet
	Put
	Delete
	List
	Head
	numKinds
)

var kindNames = [numKinds]string{"get", "range_get", "put", "delete", "list", "head"}

func (k Kind) String() string { return kindNames[k] }

// Kinds lists every kind, in order.
func Kinds() []Kind { return []Kind{Get, RangeGet, Put, Delete, List, Head} }

// Store is an object.Store that counts what goes through it. It forwards
// the optional abilities of the store it wraps (object.Syncer, io.Closer,
// AllowsNesting, object.Spacer, object.StreamPutter). It is safe for concurrent use.
type Store struct {
	inner object.Store
	kinds [numKinds]kindStats
}

type kindStats struct {
	requests, errors, bytes atomic.Int64
	latency                 metrics.Histogram
}

var (
	_ object.Store        = (*Store)(nil)
	_ object.Syncer       = (*Store)(nil)
	_ io.Closer           = (*Store)(nil)
	_ object.BatchDeleter = (*Store)(nil)
	_ object.Spacer       = (*Store)(nil)
	_ object.StreamPutter = (*Store)(nil)
)

// New wraps inner.
func New(inner object.Store) *Store { return &Store{inner: inner} }

// Unwrap returns the wrapped store.
func (s *Store) Unwrap() object.Store { return s.inner }

// Space implements object.Spacer: the wrapped store's, uncounted.
func (s *Store) Space(ctx context.Context) (object.Space, error) {
	return object.SpaceOf(ctx, s.inner)
}

func (s *Store) done(k Kind, start time.Time, n int, err error) {
	ks := &s.kinds[k]
	ks.requests.Add(1)
	ks.bytes.Add(int64(n))
	if err != nil {
		ks.errors.Add(1)
	}
	ks.latency.Since(start)
}

// Put implements object.Store.
func (s *Store) Put(ctx context.Context, key string, data []byte) error {
	start := time.Now()
	err := s.inner.Put(ctx, key, data)
	s.done(Put, start, len(data), err)
	return err
}

// PutStream implements object.StreamPutter through the wrapped store
// (object.PutStream): one put, of the bytes read.
func (s *Store) PutStream(ctx context.Context, key string, r io.Reader) error {
	start := time.Now()
	cr := &countingReader{r: r}
	err := object.PutStream(ctx, s.inner, key, cr)
	s.done(Put, start, int(cr.n), err)
	return err
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// Get implements object.Store.
func (s *Store) Get(ctx context.Context, key string, off, length int64) ([]byte, error) {
	start := time.Now()
	data, err := s.inner.Get(ctx, key, off, length)
	k := RangeGet
	if off == 0 && length < 0 {
		k = Get
	}
	s.done(k, start, len(data), err)
	return data, err
}

// Head implements object.Store.
func (s *Store) Head(ctx context.Context, key string) (object.Info, error) {
	start := time.Now()
	info, err := s.inner.Head(ctx, key)
	s.done(Head, start, 0, err)
	return info, err
}

// Delete implements object.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	start := time.Now()
	err := s.inner.Delete(ctx, key)
	s.done(Delete, start, 0, err)
	return err
}

// DeleteMany implements object.BatchDeleter over a store that has it (one
// delete request for the batch, as the store sends it), and deletes one
// key at a time otherwise (one request each).
func (s *Store) DeleteMany(ctx context.Context, keys []string) error {
	if _, ok := s.inner.(object.BatchDeleter); !ok {
		for _, k := range keys {
			if err := s.Delete(ctx, k); err != nil {
				return err
			}
		}
		return nil
	}
	start := time.Now()
	err := object.DeleteAll(ctx, s.inner, keys)
	s.done(Delete, start, 0, err)
	return err
}

// List implements object.Store. One List call counts as one request,
// however many pages the backend needs.
func (s *Store) List(ctx context.Context, prefix string, fn func(object.Info) bool) error {
	start := time.Now()
	err := s.inner.List(ctx, prefix, fn)
	s.done(List, start, 0, err)
	return err
}

// String implements object.Store.
func (s *Store) String() string { return s.inner.String() }

// Sync syncs the wrapped store if it is an object.Syncer (else its Puts
// are durable already and Sync does nothing).
func (s *Store) Sync(ctx context.Context) error {
	if sy, ok := s.inner.(object.Syncer); ok {
		return sy.Sync(ctx)
	}
	return nil
}

// Close closes the wrapped store if it is an io.Closer.
func (s *Store) Close() error {
	if c, ok := s.inner.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// AllowsNesting forwards the wrapped store's answer (see object.Store).
func (s *Store) AllowsNesting() bool {
	n, ok := s.inner.(interface{ AllowsNesting() bool })
	return ok && n.AllowsNesting()
}

// KindStats are the counters of one kind of request.
type KindStats struct {
	Requests int64                     `json:"requests"`
	Errors   int64                     `json:"errors"`
	Bytes    int64                     `json:"bytes"` // sent (put) or received (get)
	Latency  metrics.HistogramSnapshot `json:"latency"`
}

// Stats returns the counters of every kind, by Kind.String().
func (s *Store) Stats() map[string]KindStats {
	out := make(map[string]KindStats, numKinds)
	for _, k := range Kinds() {
		ks := &s.kinds[k]
		out[k.String()] = KindStats{
			Requests: ks.requests.Load(),
			Errors:   ks.errors.Load(),
			Bytes:    ks.bytes.Load(),
			Latency:  ks.latency.Snapshot(),
		}
	}
	return out
}
