package chunk

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/cache"
)

// slowWholeGets delays Gets of whole objects (block fetches), not ranged
// ones (partial reads), until release is closed.
type slowWholeGets struct {
	*testStore
	release chan struct{}
}

func (s slowWholeGets) Get(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if off == 0 && n < 0 {
		<-s.release
	}
	return s.testStore.Get(ctx, key, off, n)
}

// TestRandomReadsFillDisk: a small read of a block in neither cache tier
// reads only its segments from the object store, without waiting for
// anything else, and schedules one background fetch of the whole block
// into the disk tier, one file. Concurrent misses of the block schedule
// one fill; at most Options.DiskFills run at once. Afterwards a Store with
// an empty memory tier serves small reads anywhere in the block from the
// disk tier without the object store, each reading one segment of the
// file, and DeleteSlice drops the files.
func TestRandomReadsFillDisk(t *testing.T) {
	ctx := context.Background()
	const bs = 1 << 20
	const segs = bs / SegmentSize
	inner := memStore()
	data := fill(3 * bs)
	c := newCommitter()
	{
		w := newTestStore(t, inner, nil, Options{BlockSize: bs}).NewWriter(c)
		writeFlush(t, w, 0, data)
		w.Close()
	}
	obj := slowWholeGets{inner, make(chan struct{})}
	disk := openDiskCache(t, t.TempDir())
	s := newTestStore(t, obj, cache.NewMemory(64<<20), Options{BlockSize: bs, DiskCache: disk, DiskFills: 1, ReadAhead: -1})

	// Small reads of blocks 0 and 1 while whole-block fetches hang: the
	// reads return (they fetch segments only); block 0, missed first, gets
	// the one fill slot, its other misses no second fill, block 1 none.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, offs := range [][]int{{100}, {3*SegmentSize + 5, 7 * SegmentSize, bs + 4096, bs + 9*SegmentSize}} {
			var wg sync.WaitGroup
			for _, off := range offs {
				wg.Go(func() {
					p := make([]byte, 4096)
					if _, err := s.ReadChunk(ctx, c.chunk(0), uint32(off), p); err != nil || !bytes.Equal(p, data[off:off+4096]) {
						t.Errorf("read at %d: %v", off, err)
					}
				})
			}
			wg.Wait()
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("small reads waited for the background fill")
	}
	if st := s.Stats(); st.DiskFills != 1 {
		t.Fatalf("%d disk fills for two blocks missed with one fill slot, want 1", st.DiskFills)
	}
	close(obj.release)
	waitDisk(t, disk, 1)

	// A new Store (empty memory tier) reads all of block 0 by small reads
	// from the disk tier alone.
	r := newTestStore(t, obj, cache.NewMemory(64<<20), Options{BlockSize: bs, DiskCache: disk, ReadAhead: -1})
	inner.gets.Store(0)
	for off := 0; off < bs; off += 8192 {
		p := make([]byte, 8192)
		if _, err := r.ReadChunk(ctx, c.chunk(0), uint32(off), p); err != nil || !bytes.Equal(p, data[off:off+8192]) {
			t.Fatalf("read at %d: %v", off, err)
		}
	}
	if g, st := inner.gets.Load(), r.Stats(); g != 0 || st.DiskHits != segs || st.CacheHits != bs/8192-segs {
		t.Fatalf("block 0 after its fill: %d object gets, %+v", g, st)
	}
	if ds := disk.Stats(); ds.Hits != segs || ds.HitBytes != bs {
		t.Fatalf("the disk tier served %d reads, %d bytes: want %d segments", ds.Hits, ds.HitBytes, segs)
	}

	// Block 1's slot is free now: its next miss fills it.
	p := make([]byte, 4096)
	if _, err := r.ReadChunk(ctx, c.chunk(0), bs+20*SegmentSize, p); err != nil {
		t.Fatal(err)
	}
	waitDisk(t, disk, 2)

	ref := c.chunk(0)[0]
	if err := s.DeleteSlice(ctx, ref.ID, ref.Size); err != nil {
		t.Fatal(err)
	}
	if n := disk.Stats().Items; n != 0 {
		t.Errorf("%d disk cache entries left after DeleteSlice", n)
	}
}

// TestNoDiskFills: with DiskFills negative, small reads leave the disk
// tier empty (the behaviour before fills).
func TestNoDiskFills(t *testing.T) {
	ctx := context.Background()
	const bs = 1 << 20
	obj := memStore()
	data := fill(bs)
	c := newCommitter()
	w := newTestStore(t, obj, nil, Options{BlockSize: bs}).NewWriter(c)
	writeFlush(t, w, 0, data)
	w.Close()
	disk := openDiskCache(t, t.TempDir())
	s := newTestStore(t, obj, cache.NewMemory(64<<20), Options{BlockSize: bs, DiskCache: disk, DiskFills: -1, ReadAhead: -1})
	p := make([]byte, 4096)
	if _, err := s.ReadChunk(ctx, c.chunk(0), 5000, p); err != nil || !bytes.Equal(p, data[5000:5000+4096]) {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if n, st := disk.Stats().Items, s.Stats(); n != 0 || st.DiskFills != 0 {
		t.Fatalf("disk tier holds %d entries, %d fills", n, st.DiskFills)
	}
}

// TestMemoryOnWrite: blocks shorter than a full block (small writes) and
// blocks written by compaction go into the memory tier when uploaded, so
// reading them back needs no object get; full blocks of a stream do not.
func TestMemoryOnWrite(t *testing.T) {
	ctx := context.Background()
	const bs = 256 << 10
	obj := memStore()
	mc := cache.NewMemory(64 << 20)
	s := newTestStore(t, obj, mc, Options{BlockSize: bs, ReadAhead: -1})
	c := newCommitter()
	w := s.NewWriter(c)
	defer w.Close()
	data := fill(4 * bs)
	writeFlush(t, w, 0, data)
	if n := mc.Stats().Items; n != 0 {
		t.Fatalf("a stream of full blocks left %d blocks in the memory tier", n)
	}
	small := fill(8192)
	for i := range small {
		small[i] ^= 0x5a
	}
	writeFlush(t, w, bs+4096, small)
	copy(data[bs+4096:], small)
	obj.gets.Store(0)
	if got := readFile(t, s, c, bs+4096, len(small)); !bytes.Equal(got, small) || obj.gets.Load() != 0 {
		t.Fatalf("reading a small write back: %d object gets", obj.gets.Load())
	}

	sl := c.chunk(0)
	ns, err := s.Compact(ctx, sl, 1000)
	if err != nil {
		t.Fatal(err)
	}
	obj.gets.Store(0)
	if got := readFile(t, s, &memCommitter{chunks: map[uint32][]base.Slice{0: {ns}}}, 0, len(data)); !bytes.Equal(got, data) || obj.gets.Load() != 0 {
		t.Fatalf("reading the compacted slice: %d object gets", obj.gets.Load())
	}
}

// TestCompactionDoesNotFillCaches: the blocks a compaction reads (which
// it replaces) go to neither cache tier; the block it writes goes to the
// memory tier only, and reads through the tiers still fill them.
func TestCompactionDoesNotFillCaches(t *testing.T) {
	ctx := context.Background()
	const bs = 256 << 10
	obj := memStore()
	mc := newMapCache()
	disk := openDiskCache(t, t.TempDir())
	s := newTestStore(t, obj, mc, Options{BlockSize: bs, ReadAhead: -1, DiskCache: disk})
	c := newCommitter()
	w := s.NewWriter(c)
	defer w.Close()
	data := fill(bs)
	writeFlush(t, w, 0, data) // one full block: not kept on write
	small := []byte("small write")
	writeFlush(t, w, 1000, small)
	copy(data[1000:], small)
	sl := c.chunk(0)
	old := BlockKey(sl[0].ID, 0, bs)
	mc.Delete(BlockKey(sl[1].ID, 0, len(small)))
	ns, err := s.CompactRange(ctx, sl, 0, bs, 99)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := mc.Get(old); ok {
		t.Fatal("the block compaction replaced went to the memory tier")
	}
	if _, ok := mc.Get(BlockKey(ns.ID, 0, bs)); !ok {
		t.Fatal("the compacted block is not in the memory tier")
	}
	time.Sleep(50 * time.Millisecond) // the disk tier writes in the background
	if n := disk.Stats().Items; n != 0 {
		t.Fatalf("compaction put %d blocks in the disk tier", n)
	}
	got := make([]byte, bs)
	if _, err := s.ReadChunk(ctx, []base.Slice{ns}, 0, got); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("compacted content differs (%v)", err)
	}
	// An ordinary read still fills both tiers.
	mc.Delete(BlockKey(ns.ID, 0, bs))
	if _, err := s.ReadChunk(ctx, sl[:1], 0, got); err != nil {
		t.Fatal(err)
	}
	if _, ok := mc.Get(old); !ok {
		t.Fatal("an ordinary read did not fill the memory tier")
	}
	waitDisk(t, disk, 1)
}
