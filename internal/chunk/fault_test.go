package chunk

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/object"
)

func writeFlush(t *testing.T, w *Writer, off int64, p []byte) {
	t.Helper()
	ctx := context.Background()
	if err := w.Write(ctx, off, p); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

func fill(n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*7 + i/251)
	}
	return p
}

func TestCorruptBlock(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		corrupt func([]byte) []byte
	}{
		{"data", func(b []byte) []byte { b[100] ^= 1; return b }},
		{"last-segment", func(b []byte) []byte { b[SegmentSize+5] ^= 0x80; return b }},
		{"crc-table", func(b []byte) []byte { b[len(b)-6] ^= 1; return b }},
		{"trailer", func(b []byte) []byte { b[len(b)-1] = 9; return b }},
		{"truncated", func(b []byte) []byte { return b[:len(b)-1] }},
		{"empty", func(b []byte) []byte { return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := memStore()
			s := newTestStore(t, obj, newMapCache(), Options{BlockSize: testBS})
			c := newCommitter()
			w := s.NewWriter(c)
			defer w.Close()
			data := fill(testBS + 1000)
			writeFlush(t, w, 0, data)
			key := BlockKey(c.chunk(0)[0].ID, 0, testBS)
			b, err := object.ReadAll(ctx, obj, key)
			if err != nil {
				t.Fatal(err)
			}
			if err := obj.Store.Put(ctx, key, tc.corrupt(b)); err != nil {
				t.Fatal(err)
			}
			p := make([]byte, 200)
			n, err := s.ReadChunk(ctx, c.chunk(0), 0, p)
			if !errors.Is(err, base.ErrChecksum) || n != 0 {
				t.Fatalf("read of corrupt block: n=%d err=%v, want ErrChecksum", n, err)
			}
			if s.Stats().ChecksumErrors == 0 {
				t.Fatal("checksum error not counted")
			}
			// The intact second block still reads.
			if _, err := s.ReadChunk(ctx, c.chunk(0), testBS, p); err != nil || !bytes.Equal(p, data[testBS:testBS+200]) {
				t.Fatalf("intact block: %v", err)
			}
		})
	}
}

func TestMissingBlock(t *testing.T) {
	ctx := context.Background()
	obj := memStore()
	s := newTestStore(t, obj, nil, Options{BlockSize: testBS})
	c := newCommitter()
	w := s.NewWriter(c)
	defer w.Close()
	writeFlush(t, w, 0, fill(1000))
	if err := s.DeleteSlice(ctx, c.chunk(0)[0].ID, 1000); err != nil {
		t.Fatal(err)
	}
	_, err := s.ReadChunk(ctx, c.chunk(0), 0, make([]byte, 10))
	if !errors.Is(err, base.ErrIO) || !errors.Is(err, object.ErrNotFound) {
		t.Fatalf("read of deleted block: %v", err)
	}
}

func TestUploadFailureAndRetry(t *testing.T) {
	ctx := context.Background()
	obj := memStore()
	s := newTestStore(t, obj, nil, Options{BlockSize: testBS})
	c := newCommitter()
	w := s.NewWriter(c)
	defer w.Close()
	data := fill(3*testBS + 77)
	obj.failPuts.Store(true)
	if err := w.Write(ctx, 0, data); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); !errors.Is(err, errInjected) {
		t.Fatalf("Flush with failing store = %v, want injected fault", err)
	}
	if !w.Pending() || len(c.commits) != 0 {
		t.Fatal("data dropped or committed after a failed upload")
	}
	if err := w.Flush(ctx); !errors.Is(err, errInjected) {
		t.Fatalf("second Flush = %v, want the fault again", err)
	}
	obj.failPuts.Store(false)
	if err := w.Flush(ctx); err != nil {
		t.Fatalf("Flush after the fault cleared: %v", err)
	}
	if w.Pending() || len(c.commits) != 1 {
		t.Fatalf("pending %v, %d commits", w.Pending(), len(c.commits))
	}
	if got := readFile(t, s, c, 0, len(data)); !bytes.Equal(got, data) {
		t.Fatal("content differs after retry")
	}
	if s.Stats().Buffered != 0 {
		t.Fatal("buffer not released")
	}
}

func TestCommitFailureKeepsOrder(t *testing.T) {
	ctx := context.Background()
	s := newTestStore(t, memStore(), nil, Options{BlockSize: testBS})
	c := newCommitter()
	w := s.NewWriter(c)
	defer w.Close()
	// Three slices of chunk 0, each overwriting the previous one.
	for i := range 3 {
		if err := w.Write(ctx, 1000-int64(i)*100, bytes.Repeat([]byte{byte('a' + i)}, 500)); err != nil {
			t.Fatal(err)
		}
	}
	c.failN = 1
	if err := w.Flush(ctx); !errors.Is(err, errInjected) {
		t.Fatalf("Flush = %v, want commit fault", err)
	}
	if len(c.commits) != 0 {
		t.Fatal("committed past a failed commit")
	}
	if err := w.Write(ctx, 0, []byte("z")); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if len(c.commits) != 4 {
		t.Fatalf("%d commits, want 4", len(c.commits))
	}
	for i := range 3 {
		if c.commits[i].Pos != uint32(1000-i*100) {
			t.Fatalf("commit %d is %+v: out of order", i, c.commits[i])
		}
	}
	got := readFile(t, s, c, 0, 1500)
	// 'a' [1000,1500), then 'b' [900,1400), then 'c' [800,1300): newest wins.
	if got[0] != 'z' || got[500] != 0 || got[800] != 'c' || got[1299] != 'c' || got[1300] != 'b' || got[1399] != 'b' || got[1400] != 'a' || got[1499] != 'a' {
		t.Fatalf("wrong winner: %q", got[795:1500])
	}
}

func TestBackPressure(t *testing.T) {
	const limit = 256 << 10
	const maxWrite = 20 << 10
	obj := memStore()
	obj.putDelay = 2 * time.Millisecond
	s := newTestStore(t, obj, nil, Options{BlockSize: 16 << 10, BufferLimit: limit, UploadConcurrency: 4})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	var maxSeen atomic.Int64
	stop := make(chan struct{})
	go func() { // sample as well, for the peak counter's sake
		for {
			select {
			case <-stop:
				return
			default:
			}
			if b := s.Stats().Buffered; b > maxSeen.Load() {
				maxSeen.Store(b)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}()
	for i := range 4 {
		wg.Go(func() {
			c := newCommitter()
			w := s.NewWriter(c)
			defer w.Close()
			off := int64(0)
			for j := range 150 {
				n := 1 + (j*7919+i*31)%maxWrite
				if i%2 == 1 { // scattered writes: only sealing frees them
					off = int64((j * 104729) % (8 << 20))
				}
				if err := w.Write(ctx, off, fill(n)); err != nil {
					t.Error(err)
					return
				}
				off += int64(n)
			}
			if err := w.Flush(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	close(stop)
	st := s.Stats()
	t.Logf("peak %d sampled %d puts %d", st.BufferedPeak, maxSeen.Load(), st.ObjectPuts)
	if st.BufferedPeak > limit+maxWrite || maxSeen.Load() > limit+maxWrite {
		t.Fatalf("buffer peaked at %d, limit %d", st.BufferedPeak, limit)
	}
	if st.BufferedPeak < limit/2 {
		t.Fatalf("peak %d: the test did not fill the buffer", st.BufferedPeak)
	}
	if st.Buffered != 0 {
		t.Fatalf("buffered %d at the end", st.Buffered)
	}
}

func TestWriteBlockedHonoursContext(t *testing.T) {
	obj := memStore()
	obj.failPuts.Store(true) // nothing ever drains
	s := newTestStore(t, obj, nil, Options{BlockSize: MinBlockSize, BufferLimit: 2 * MinBlockSize})
	w := s.NewWriter(newCommitter())
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var err error
	for i := 0; err == nil && i < 100; i++ {
		err = w.Write(ctx, int64(i)*MinBlockSize, fill(MinBlockSize))
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Write on a full buffer = %v, want deadline", err)
	}
	w.Close()
	if b := s.Stats().Buffered; b != 0 {
		t.Fatalf("Close left %d bytes accounted", b)
	}
	if err := w.Write(context.Background(), 0, []byte("x")); !errors.Is(err, ErrWriterClosed) {
		t.Fatalf("Write after Close = %v", err)
	}
}

func TestAutoFlushManySlices(t *testing.T) {
	ctx := context.Background()
	s := newTestStore(t, memStore(), nil, Options{BlockSize: testBS, MaxChunkSlices: 5})
	c := newCommitter()
	w := s.NewWriter(c)
	defer w.Close()
	for i := range 12 {
		if err := w.Write(ctx, int64(11-i)*4096, fill(100)); err != nil { // backwards: each a new slice
			t.Fatal(err)
		}
	}
	// The auto-flush runs in the background.
	waitFor(t, "6 slices committed without Flush (auto-flush)", func() bool { return c.count() >= 6 })
}

func TestSingleFlight(t *testing.T) {
	for _, withCache := range []bool{true, false} {
		t.Run(map[bool]string{true: "cache", false: "nocache"}[withCache], func(t *testing.T) {
			ctx := context.Background()
			obj := memStore()
			var cache BlockCache
			if withCache {
				cache = newMapCache()
			}
			s := newTestStore(t, obj, cache, Options{BlockSize: testBS})
			c := newCommitter()
			w := s.NewWriter(c)
			defer w.Close()
			data := fill(testBS)
			writeFlush(t, w, 0, data)
			obj.getDelay = 50 * time.Millisecond
			var wg sync.WaitGroup
			for i := range 16 {
				wg.Go(func() {
					p := make([]byte, 1000)
					if _, err := s.ReadChunk(ctx, c.chunk(0), uint32(i*1000), p); err != nil {
						t.Error(err)
					}
					if !bytes.Equal(p, data[i*1000:i*1000+1000]) {
						t.Error("wrong data")
					}
				})
			}
			wg.Wait()
			if g := obj.gets.Load(); g != 1 {
				t.Fatalf("%d object Gets for one block, want 1", g)
			}
		})
	}
}

func TestConcurrentBlockFetches(t *testing.T) {
	obj := memStore()
	s := newTestStore(t, obj, nil, Options{BlockSize: MinBlockSize})
	c := newCommitter()
	w := s.NewWriter(c)
	defer w.Close()
	data := fill(16 * MinBlockSize)
	writeFlush(t, w, 0, data)
	obj.getDelay = 50 * time.Millisecond
	start := time.Now()
	got := readFile(t, s, c, 0, len(data))
	if !bytes.Equal(got, data) {
		t.Fatal("wrong data")
	}
	// 16 blocks, 8 at a time: two rounds, not sixteen.
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("read of 16 blocks took %v: fetches not concurrent", d)
	}
}

// readSequentially reads data, chunk 0 of c's file, through r in reads of
// n bytes from its start, checking each.
func readSequentially(t *testing.T, r *Reader, c *memCommitter, data []byte, n int) {
	t.Helper()
	p := make([]byte, n)
	for off := 0; off < len(data); off += len(p) {
		if _, err := r.ReadChunk(context.Background(), 0, c.chunk(0), uint32(off), p); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(p, data[off:off+len(p)]) {
			t.Fatalf("wrong data at %d", off)
		}
	}
}

func TestReadAhead(t *testing.T) {
	ctx := context.Background()
	obj := memStore()
	cache := newMapCache()
	s := newTestStore(t, obj, cache, Options{BlockSize: MinBlockSize * 4, ReadAhead: 2})
	c := newCommitter()
	w := s.NewWriter(c)
	defer w.Close()
	data := fill(64 * MinBlockSize)
	writeFlush(t, w, 0, data)

	// Random reads prefetch nothing.
	r := s.NewReader()
	p := make([]byte, 1000)
	for _, off := range []uint32{50000, 3000, 200000, 7} {
		if _, err := r.ReadChunk(ctx, 0, c.chunk(0), off, p); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.Stats().Prefetches; n != 0 {
		t.Fatalf("random reads prefetched %d blocks", n)
	}

	// Sequential reads prefetch, and later reads find the blocks cached.
	clear(cache.m)
	readSequentially(t, s.NewReader(), c, data, 4096)
	st := s.Stats()
	if st.Prefetches == 0 {
		t.Fatal("sequential reads prefetched nothing")
	}
	t.Logf("prefetches %d hits %d misses %d gets %d", st.Prefetches, st.CacheHits, st.CacheMisses, st.ObjectGets)
}

// TestReadAheadNextChunk: a sequential reader near the end of a chunk is
// told which positions of the next chunk its window covers, once, and
// after PrefetchNext the next chunk's first blocks come from the cache.
func TestReadAheadNextChunk(t *testing.T) {
	ctx := context.Background()
	obj := memStore()
	cache := newMapCache()
	const bs = MinBlockSize * 4
	s := newTestStore(t, obj, cache, Options{BlockSize: bs, ReadAhead: 2})
	c := newCommitter()
	w := s.NewWriter(c)
	defer w.Close()
	tail := int64(base.ChunkSize - 4*bs)
	data := fill(8 * bs) // the last 4 blocks of chunk 0, the first 4 of chunk 1
	writeFlush(t, w, tail, data)

	r := s.NewReader()
	p := make([]byte, bs/2)
	read := func(index uint32, pos int) {
		t.Helper()
		if _, err := r.ReadChunk(ctx, index, c.chunk(index), uint32(pos), p); err != nil {
			t.Fatal(err)
		}
		off := int(int64(index)*base.ChunkSize+int64(pos)) - int(tail)
		if !bytes.Equal(p, data[off:off+len(p)]) {
			t.Fatalf("wrong data at chunk %d position %d", index, pos)
		}
	}
	// Far from the end: nothing to report.
	read(0, int(tail))
	read(0, int(tail)+len(p))
	if _, _, _, ok := r.NextChunk(); ok {
		t.Fatal("window 4 blocks before the chunk's end reported the next chunk")
	}
	// A block before the end: the window (2 blocks) reaches a block into
	// chunk 1.
	pos := base.ChunkSize - bs - len(p)
	read(0, pos-len(p))
	read(0, pos)
	index, from, upTo, ok := r.NextChunk()
	if !ok || index != 1 || from != 0 || upTo != bs {
		t.Fatalf("NextChunk = %d [%d, %d) %v, want 1 [0, %d) true", index, from, upTo, ok, bs)
	}
	if _, _, _, ok := r.NextChunk(); ok {
		t.Fatal("the same window reported twice")
	}
	// The window moves by whole blocks: half a block further reports
	// the next block whole, and the next read, inside it, nothing.
	read(0, pos+len(p))
	index, from, upTo, ok = r.NextChunk()
	if !ok || index != 1 || from != bs || upTo != 2*bs {
		t.Fatalf("NextChunk = %d [%d, %d) %v, want 1 [%d, %d) true", index, from, upTo, ok, bs, 2*bs)
	}
	read(0, pos+2*len(p))
	if _, _, _, ok := r.NextChunk(); ok {
		t.Fatal("a read within the reported block reported the next chunk again")
	}
	before := s.Stats()
	r.PrefetchNext(c.chunk(1), 0, upTo)
	if n := s.Stats().Prefetches - before.Prefetches; n != 2 {
		t.Fatalf("%d blocks prefetched in chunk 1, want 2", n)
	}
	waitFetches(t, s)
	// Chunk 1's first two blocks: all from the cache.
	misses := s.Stats().CacheMisses
	for pos := 0; pos < 2*bs; pos += len(p) {
		read(1, pos)
	}
	if n := s.Stats().CacheMisses - misses; n != 0 {
		t.Fatalf("reads of chunk 1's prefetched blocks missed the cache %d times", n)
	}
	// Blocks prefetched in the next chunk are not fetched again when the
	// reader gets there; its own read-ahead fetches blocks 2 and 3.
	waitFetches(t, s)
	if n := s.Stats().ObjectGets - before.ObjectGets; n != 4 {
		t.Fatalf("%d block objects read for chunk 1, want 4 (blocks 0-3, each once)", n)
	}
}

// TestReadAheadSlowStore: against a store slower than the reader, every
// block of a sequential read is fetched by read-ahead, once, and the reader
// starts no fetch itself. Reads smaller than a block find a block still
// being fetched in their window once per read; if each took a read-ahead
// slot, the slots would fill with a few fetches and later blocks of the
// window would be skipped (found with a cold 2 GiB read through a mount:
// 1,157 prefetches for 512 blocks, the slots full 148 times).
func TestReadAheadSlowStore(t *testing.T) {
	ctx := context.Background()
	ts := memStore()
	obj := &readerMarkedStore{testStore: ts}
	const bs = MinBlockSize * 4
	const blocks = 16
	c := newCommitter()
	w := newTestStore(t, obj, nil, Options{BlockSize: bs}).NewWriter(c)
	defer w.Close()
	data := fill(blocks * bs)
	writeFlush(t, w, 0, data)

	s := newTestStore(t, obj, newMapCache(), Options{BlockSize: bs, ReadAhead: 4})
	ts.getDelay = 20 * time.Millisecond
	r := s.NewReader()
	rctx := context.WithValue(ctx, readerKey{}, true)
	p := make([]byte, bs/4)
	for off := 0; off < len(data); off += len(p) {
		if _, err := r.ReadChunk(rctx, 0, c.chunk(0), uint32(off), p); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(p, data[off:off+len(p)]) {
			t.Fatalf("wrong data at %d", off)
		}
	}
	waitFetches(t, s)
	st := s.Stats()
	if n := obj.byReader.Load(); n != 0 {
		t.Errorf("the reader fetched %d blocks itself, want 0 (all by read-ahead)", n)
	}
	if st.Prefetches != blocks || st.ObjectGets != blocks {
		t.Errorf("%d read-ahead fetches and %d object reads, want %d each (every block once)", st.Prefetches, st.ObjectGets, blocks)
	}
}

// readerKey marks the context of a test's reads, so that readerMarkedStore
// can tell the fetches a reader started from those of its read-ahead
// (which run under a context of their own).
type readerKey struct{}

type readerMarkedStore struct {
	*testStore
	byReader atomic.Int64
}

func (m *readerMarkedStore) Get(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if ctx.Value(readerKey{}) != nil {
		m.byReader.Add(1)
	}
	return m.testStore.Get(ctx, key, off, n)
}

// waitFetches waits until no block fetch is in flight.
func waitFetches(t *testing.T, s *Store) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		s.sfMu.Lock()
		n := len(s.inflight)
		s.sfMu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d block fetches still in flight", n)
		}
	}
}

func TestDeleteSlice(t *testing.T) {
	ctx := context.Background()
	obj := memStore()
	cache := newMapCache()
	s := newTestStore(t, obj, cache, Options{BlockSize: testBS})
	c := newCommitter()
	w := s.NewWriter(c)
	defer w.Close()
	writeFlush(t, w, 0, fill(2*testBS+5))
	readFile(t, s, c, 0, 2*testBS+5) // fill the cache
	if cache.len() != 3 {
		t.Fatalf("cache holds %d blocks", cache.len())
	}
	sl := c.chunk(0)[0]
	for range 2 { // repeatable
		if err := s.DeleteSlice(ctx, sl.ID, sl.Size); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	if err := obj.List(ctx, KeyPrefix, func(i object.Info) bool { n++; return true }); err != nil {
		t.Fatal(err)
	}
	if n != 0 || cache.len() != 0 {
		t.Fatalf("%d objects, %d cached after delete", n, cache.len())
	}
}

func TestSyncObjects(t *testing.T) {
	ctx := context.Background()
	plain := memStore()
	s := newTestStore(t, plain, nil, Options{})
	if err := s.SyncObjects(ctx); err != nil {
		t.Fatal(err)
	}
	ss := syncStore{memStore()}
	s = newTestStore(t, ss, nil, Options{})
	w := s.NewWriter(newCommitter())
	defer w.Close()
	writeFlush(t, w, 0, []byte("x"))
	if ss.syncs.Load() != 0 {
		t.Fatal("Flush synced the object store")
	}
	if err := s.SyncObjects(ctx); err != nil || ss.syncs.Load() != 1 {
		t.Fatalf("SyncObjects: %v, %d syncs", err, ss.syncs.Load())
	}
}

func TestOptionsValidate(t *testing.T) {
	var o Options
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if o.BlockSize != DefaultBlockSize || o.BufferLimit != DefaultBufferLimit || o.UploadConcurrency != 16 || o.ReadAhead != 8 || o.Logger == nil {
		t.Fatalf("defaults: %+v", o)
	}
	for _, bad := range []Options{{BlockSize: 100}, {BlockSize: base.ChunkSize * 2}, {BufferLimit: -1}, {UploadConcurrency: -1}} {
		if err := bad.Validate(); !errors.Is(err, base.ErrInvalid) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
	if _, err := New(nil, nil, Options{}); err == nil {
		t.Error("New(nil store) succeeded")
	}
}

func TestReadChunkEdges(t *testing.T) {
	ctx := context.Background()
	s := newTestStore(t, memStore(), nil, Options{BlockSize: testBS})
	p := bytes.Repeat([]byte{9}, 100)
	// Holes and ID-0 slices read as zeros; p is clamped to the chunk.
	n, err := s.ReadChunk(ctx, []base.Slice{{Pos: 0, ID: 0, Len: 50}}, base.ChunkSize-60, p)
	if err != nil || n != 60 || !bytes.Equal(p[:60], make([]byte, 60)) {
		t.Fatalf("n=%d err=%v p=%v", n, err, p[:60])
	}
	// Invalid references are refused.
	_, err = s.ReadChunk(ctx, []base.Slice{{Pos: 0, ID: 5, Size: 10, Off: 5, Len: 10}}, 0, p)
	if err == nil || !strings.Contains(err.Error(), "invalid slice") {
		t.Fatalf("bad ref: %v", err)
	}
}

// TestConcurrentUse drives one Writer from several goroutines while others
// poll Len, Pending and Stats, for the race detector.
func TestConcurrentUse(t *testing.T) {
	ctx := context.Background()
	s := newTestStore(t, memStore(), newMapCache(), Options{BlockSize: MinBlockSize, BufferLimit: 64 << 10, MaxChunkSlices: 4})
	c := newCommitter()
	w := s.NewWriter(c)
	defer w.Close()
	var wg sync.WaitGroup
	done := make(chan struct{})
	for i := range 3 {
		wg.Go(func() {
			for j := range 200 {
				off := int64((i*1000 + j*977) % (256 << 10))
				if err := w.Write(ctx, off, fill(1+j*37%9000)); err != nil {
					t.Error(err)
					return
				}
				if j%50 == 0 {
					if err := w.Flush(ctx); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			_, _, _ = w.Len(), w.Pending(), s.Stats()
			if sl := c.chunk(0); len(sl) > 0 {
				if _, err := s.ReadChunk(ctx, sl, 0, make([]byte, 10000)); err != nil {
					t.Error(err)
				}
			}
		}
	})
	time.AfterFunc(200*time.Millisecond, func() { close(done) })
	wg.Wait()
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if s.Stats().Buffered != 0 {
		t.Fatal("buffer not released")
	}
}
