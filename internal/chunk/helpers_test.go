package chunk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/object/mem"
)

// memCommitter is an in-memory Committer: a file's chunk maps.
type memCommitter struct {
	nextID  atomic.Uint64
	mu      sync.Mutex
	chunks  map[uint32][]base.Slice
	commits []base.Slice
	failN   int // fail the next failN commits
	// onCommit, if set, is called with each slice committed (under mu).
	onCommit func(base.Slice)
}

func newCommitter() *memCommitter {
	return &memCommitter{chunks: make(map[uint32][]base.Slice)}
}

func (c *memCommitter) NewSliceID(ctx context.Context) (uint64, error) {
	return c.nextID.Add(1), nil
}

var errInjected = errors.New("injected fault")

func (c *memCommitter) CommitSlice(ctx context.Context, idx uint32, s base.Slice) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.refuse(s); err != nil {
		return err
	}
	c.add(idx, s)
	return nil
}

// refuse consumes an injected failure, or rejects a malformed slice.
// Called with mu held.
func (c *memCommitter) refuse(ss ...base.Slice) error {
	if c.failN > 0 {
		c.failN--
		return errInjected
	}
	for _, s := range ss {
		if s.ID == 0 || s.Len == 0 || s.Off+s.Len > s.Size {
			return fmt.Errorf("bad commit %+v", s)
		}
	}
	return nil
}

// add appends s to chunk idx. Called with mu held.
func (c *memCommitter) add(idx uint32, s base.Slice) {
	c.chunks[idx] = append(c.chunks[idx], s)
	c.commits = append(c.commits, s)
	if c.onCommit != nil {
		c.onCommit(s)
	}
}

// batchCommitter is a memCommitter that commits in batches (a
// BatchCommitter, as vfs's is) and records them.
type batchCommitter struct {
	*memCommitter
	batches [][]base.Slice // under mu
}

func newBatchCommitter() *batchCommitter {
	return &batchCommitter{memCommitter: newCommitter()}
}

func (c *batchCommitter) CommitSlices(ctx context.Context, commits []Commit) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	batch := make([]base.Slice, len(commits))
	for i, cm := range commits {
		batch[i] = cm.Slice
	}
	if err := c.refuse(batch...); err != nil {
		return err
	}
	for _, cm := range commits {
		c.add(cm.Chunk, cm.Slice)
	}
	c.batches = append(c.batches, batch)
	return nil
}

func (c *memCommitter) chunk(idx uint32) []base.Slice {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.chunks[idx])
}

func (c *memCommitter) indexes() []uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(maps.Keys(c.chunks))
}

// mapCache is an unbounded BlockCache.
type mapCache struct {
	mu sync.Mutex
	m  map[string][]byte
}

func newMapCache() *mapCache { return &mapCache{m: make(map[string][]byte)} }

func (c *mapCache) Get(key string) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.m[key]
	return d, ok
}

func (c *mapCache) Put(key string, data []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[key] = data
}

func (c *mapCache) Delete(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, key)
}

func (c *mapCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// testStore wraps a store: counts calls, injects delays and Put failures.
type testStore struct {
	object.Store
	gets, puts, syncs atomic.Int64
	getDelay          time.Duration
	putDelay          time.Duration
	failPuts          atomic.Bool
	failOver          atomic.Int64 // if > 0, fail the Puts of more bytes
	// putHook, if set, sees every Put's arguments (before failPuts).
	putHook func(ctx context.Context, key string, data []byte)
}

func (t *testStore) Get(ctx context.Context, key string, off, n int64) ([]byte, error) {
	t.gets.Add(1)
	if t.getDelay > 0 {
		time.Sleep(t.getDelay)
	}
	return t.Store.Get(ctx, key, off, n)
}

func (t *testStore) Put(ctx context.Context, key string, data []byte) error {
	t.puts.Add(1)
	if t.putHook != nil {
		t.putHook(ctx, key, data)
	}
	if t.putDelay > 0 {
		time.Sleep(t.putDelay)
	}
	if t.failPuts.Load() {
		return errInjected
	}
	if n := t.failOver.Load(); n > 0 && int64(len(data)) > n {
		return errInjected
	}
	return t.Store.Put(ctx, key, data)
}

// syncStore adds object.Syncer.
type syncStore struct{ *testStore }

func (s syncStore) Sync(ctx context.Context) error { s.syncs.Add(1); return nil }

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

func newTestStore(t testing.TB, obj object.Store, cache BlockCache, opts Options) *Store {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	s, err := New(obj, cache, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func memStore() *testStore { return &testStore{Store: mem.New()} }

// readFile reads [off, off+n) of the file described by c.
func readFile(t testing.TB, s *Store, c *memCommitter, off int64, n int) []byte {
	t.Helper()
	out := make([]byte, n)
	for done := 0; done < n; {
		pos := off + int64(done)
		idx := uint32(pos / base.ChunkSize)
		cpos := uint32(pos % base.ChunkSize)
		m := min(n-done, base.ChunkSize-int(cpos))
		got, err := s.ReadChunk(context.Background(), c.chunk(idx), cpos, out[done:done+m])
		if err != nil {
			t.Fatalf("read %d+%d: %v", pos, m, err)
		}
		if got != m {
			t.Fatalf("read %d+%d: got %d bytes", pos, m, got)
		}
		done += m
	}
	return out
}
