package chunk

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/cache"
)

func openDiskCache(t *testing.T, dir string) *cache.Disk {
	t.Helper()
	d, err := cache.OpenDisk(cache.DiskOptions{Dirs: []string{dir}, MaxBytes: 64 << 20, FreeRatio: -1, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	for d.Scanning() {
		time.Sleep(time.Millisecond)
	}
	return d
}

func waitDisk(t *testing.T, d *cache.Disk, items int64) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); d.Stats().Items < items; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("disk cache holds %d blocks, want %d", d.Stats().Items, items)
		}
	}
}

// writeBlocks writes data at the start of a file through a store with no
// caches over obj, and returns the committer that holds its slices.
func writeBlocks(t *testing.T, obj *testStore, data []byte) *memCommitter {
	t.Helper()
	c := newCommitter()
	s := newTestStore(t, obj, nil, Options{BlockSize: testBS})
	w := s.NewWriter(c)
	writeFlush(t, w, 0, data)
	w.Close()
	return c
}

// TestDiskTier reads through memory → disk → object store: a cold read
// fills the disk cache, a later Store (a restart: empty memory cache)
// reads from it without touching the object store, concurrent misses
// fetch once, and a damaged cache file is re-fetched, never served.
func TestDiskTier(t *testing.T) {
	ctx := context.Background()
	obj := memStore()
	dir := t.TempDir()
	const nblocks = 4
	data := fill(nblocks * testBS)
	c := writeBlocks(t, obj, data)
	disk := openDiskCache(t, dir)
	s1 := newTestStore(t, obj, cache.NewMemory(1<<30), Options{BlockSize: testBS, DiskCache: disk, ReadAhead: -1})
	obj.gets.Store(0)
	if got := readFile(t, s1, c, 0, len(data)); !bytes.Equal(got, data) {
		t.Fatal("wrong data on a cold read")
	}
	waitDisk(t, disk, nblocks)
	if g, st := obj.gets.Load(), s1.Stats(); g != nblocks || st.DiskMisses != nblocks || st.DiskHits != 0 {
		t.Fatalf("cold read: %d object gets, %+v", g, st)
	}

	// A new Store over the same disk cache: an empty memory tier.
	s2 := newTestStore(t, obj, cache.NewMemory(1<<30), Options{BlockSize: testBS, DiskCache: disk, ReadAhead: -1})
	obj.gets.Store(0)
	obj.getDelay = 20 * time.Millisecond
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			p := make([]byte, testBS)
			if _, err := s2.ReadChunk(ctx, c.chunk(0), 0, p); err != nil || !bytes.Equal(p, data[:testBS]) {
				t.Errorf("concurrent read: %v", err)
			}
		})
	}
	wg.Wait()
	if got := readFile(t, s2, c, 0, len(data)); !bytes.Equal(got, data) {
		t.Fatal("wrong data from the disk tier")
	}
	if g, st := obj.gets.Load(), s2.Stats(); g != 0 || st.DiskHits != nblocks {
		t.Fatalf("warm read: %d object gets, %+v", g, st)
	}

	// Damage every cache file: reads still return the right data,
	// fetched again from the object store.
	var files []string
	_ = filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err == nil && !de.IsDir() {
			files = append(files, p)
		}
		return err
	})
	for _, f := range files {
		b, _ := os.ReadFile(f)
		b[len(b)/2] ^= 0xff
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s3 := newTestStore(t, obj, cache.NewMemory(1<<30), Options{BlockSize: testBS, DiskCache: disk, ReadAhead: -1})
	if got := readFile(t, s3, c, 0, len(data)); !bytes.Equal(got, data) {
		t.Fatal("wrong data after cache files were damaged")
	}
	if g, ds := obj.gets.Load(), disk.Stats(); g != nblocks || ds.Corrupt != nblocks {
		t.Fatalf("after damage: %d object gets, disk %+v", g, ds)
	}
}

// TestCacheOnWrite: with CacheWrites, uploaded blocks land in the disk
// cache, and another Store reads them without the object store.
func TestCacheOnWrite(t *testing.T) {
	for _, on := range []bool{false, true} {
		t.Run(map[bool]string{false: "off", true: "on"}[on], func(t *testing.T) {
			obj := memStore()
			disk := openDiskCache(t, t.TempDir())
			s := newTestStore(t, obj, nil, Options{BlockSize: testBS, DiskCache: disk, CacheWrites: on})
			c := newCommitter()
			w := s.NewWriter(c)
			defer w.Close()
			data := fill(3*testBS + 100)
			writeFlush(t, w, 0, data)
			if !on {
				time.Sleep(20 * time.Millisecond)
				if n := disk.Stats().Items; n != 0 {
					t.Fatalf("%d blocks cached on write with CacheWrites off", n)
				}
				return
			}
			waitDisk(t, disk, 4)
			r := newTestStore(t, obj, nil, Options{BlockSize: testBS, DiskCache: disk})
			obj.gets.Store(0)
			if got := readFile(t, r, c, 0, len(data)); !bytes.Equal(got, data) {
				t.Fatal("wrong data")
			}
			if g := obj.gets.Load(); g != 0 {
				t.Fatalf("%d object gets after cache-on-write", g)
			}
		})
	}
}

// TestCacheSmallWrites: with CacheSmallWrites (and not CacheWrites) only
// the uploaded blocks shorter than a full block land in the disk cache:
// a file's short last block, not its full ones. Another Store then reads
// that block without the object store.
func TestCacheSmallWrites(t *testing.T) {
	obj := memStore()
	disk := openDiskCache(t, t.TempDir())
	s := newTestStore(t, obj, nil, Options{BlockSize: testBS, DiskCache: disk, CacheSmallWrites: true})
	c := newCommitter()
	w := s.NewWriter(c)
	defer w.Close()
	data := fill(3*testBS + 100)
	writeFlush(t, w, 0, data)
	waitDisk(t, disk, 1)
	time.Sleep(20 * time.Millisecond)
	if n := disk.Stats().Items; n != 1 {
		t.Fatalf("%d blocks cached on write, want 1 (the short last one)", n)
	}
	r := newTestStore(t, obj, nil, Options{BlockSize: testBS, DiskCache: disk})
	obj.gets.Store(0)
	if got := readFile(t, r, c, 3*testBS, 100); !bytes.Equal(got, data[3*testBS:]) {
		t.Fatal("wrong data")
	}
	if g := obj.gets.Load(); g != 0 {
		t.Fatalf("%d object gets for the short block cached on write", g)
	}
	if got := readFile(t, r, c, 0, testBS); !bytes.Equal(got, data[:testBS]) {
		t.Fatal("wrong data")
	}
	if g := obj.gets.Load(); g == 0 {
		t.Fatal("a full block came from the disk cache: cached on write without CacheWrites")
	}
}

func TestWarm(t *testing.T) {
	ctx := context.Background()
	obj := memStore()
	mc := cache.NewMemory(1 << 30)
	disk := openDiskCache(t, t.TempDir())
	s := newTestStore(t, obj, mc, Options{BlockSize: testBS, DiskCache: disk})
	c := newCommitter()
	w := s.NewWriter(c)
	defer w.Close()
	data := fill(5*testBS + 7)
	writeFlush(t, w, 0, data)
	written := mc.Stats().Items // the short last block, kept on write
	for _, tc := range []struct {
		name           string
		fetched, cache int
	}{
		{"cold", 6, 0},
		{"again", 0, 6},
	} {
		var mu sync.Mutex
		var fetched, cached, bytesN int
		err := s.Warm(ctx, c.chunk(0), func(n int, hit bool) {
			mu.Lock()
			defer mu.Unlock()
			bytesN += n
			if hit {
				cached++
			} else {
				fetched++
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if fetched != tc.fetched || cached != tc.cache || bytesN != len(data) {
			t.Errorf("%s: %d fetched, %d cached, %d bytes", tc.name, fetched, cached, bytesN)
		}
	}
	if ms := mc.Stats(); ms.Items != written {
		t.Errorf("warmup filled the memory cache: %+v", ms)
	}
	obj.gets.Store(0)
	r := newTestStore(t, obj, nil, Options{BlockSize: testBS, DiskCache: disk})
	if got := readFile(t, r, c, 0, len(data)); !bytes.Equal(got, data) || obj.gets.Load() != 0 {
		t.Fatalf("read after warmup: %d object gets", obj.gets.Load())
	}
	if err := newTestStore(t, obj, nil, Options{BlockSize: testBS}).Warm(ctx, c.chunk(0), nil); err != ErrNoDiskCache {
		t.Errorf("Warm without a disk cache: %v", err)
	}
}

// TestDiskTierPartial: a small random read of a block the disk tier holds
// whole (a sequential read or a warmup put it there) reads only the
// segment holding it, and puts that segment, not the block, into the
// memory tier; a sequential read of the block still reads it whole.
func TestDiskTierPartial(t *testing.T) {
	ctx := context.Background()
	obj := memStore()
	const bs = 1 << 20
	data := fill(2 * bs)
	c := newCommitter()
	{
		w := newTestStore(t, obj, nil, Options{BlockSize: bs}).NewWriter(c)
		writeFlush(t, w, 0, data)
		w.Close()
	}
	disk := openDiskCache(t, t.TempDir())
	if err := newTestStore(t, obj, nil, Options{BlockSize: bs, DiskCache: disk}).Warm(ctx, c.chunk(0), nil); err != nil {
		t.Fatal(err)
	}
	mc := newMapCache()
	s := newTestStore(t, obj, mc, Options{BlockSize: bs, DiskCache: disk, ReadAhead: -1})
	obj.gets.Store(0)
	for _, off := range []int{100, 5*SegmentSize - 10, bs + 3*SegmentSize + 77} {
		p := make([]byte, 8192)
		if _, err := s.ReadChunk(ctx, c.chunk(0), uint32(off), p); err != nil || !bytes.Equal(p, data[off:off+8192]) {
			t.Fatalf("read at %d: %v", off, err)
		}
	}
	// The middle read spans segments 4 and 5.
	if ds := disk.Stats(); obj.gets.Load() != 0 || ds.Hits != 3 || ds.HitBytes != 4*SegmentSize {
		t.Fatalf("%d object gets; disk tier served %d reads, %d bytes, want 4 segments", obj.gets.Load(), ds.Hits, ds.HitBytes)
	}
	if _, ok := mc.Get(BlockKey(c.chunk(0)[0].ID, 0, bs)); ok {
		t.Fatal("a small read put the whole block into the memory tier")
	}
	if _, ok := mc.Get(segKey(BlockKey(c.chunk(0)[0].ID, 0, bs), 4)); !ok {
		t.Fatal("the segment read from disk is not in the memory tier")
	}
	if got := readFile(t, s, c, 0, len(data)); !bytes.Equal(got, data) || obj.gets.Load() != 0 {
		t.Fatalf("whole read: %d object gets", obj.gets.Load())
	}
	if ds := disk.Stats(); ds.HitBytes != 4*SegmentSize+2*bs {
		t.Fatalf("a sequential read took %d bytes from the disk tier, want the 2 blocks", ds.HitBytes-4*SegmentSize)
	}
}

// TestReadFillsWarm: the whole blocks a reader fetches go to the disk
// tier through the page cache (not cold: their device writes then wait
// for writeback instead of competing with the reads still to come), with
// their segment checksums.
func TestReadFillsWarm(t *testing.T) {
	obj := memStore()
	const nblocks = 3
	data := fill(nblocks * testBS)
	c := writeBlocks(t, obj, data)
	disk := &coldDisk{}
	s := newTestStore(t, obj, cache.NewMemory(1<<30), Options{BlockSize: testBS, DiskCache: disk, ReadAhead: -1})
	if got := readFile(t, s, c, 0, len(data)); !bytes.Equal(got, data) {
		t.Fatal("wrong data on a cold read")
	}
	disk.mu.Lock()
	defer disk.mu.Unlock()
	if len(disk.warm) != nblocks || len(disk.cold) != 0 || len(disk.badSums) != 0 {
		t.Fatalf("read fills: %d warm, %d cold, %d with wrong sums; want %d warm", len(disk.warm), len(disk.cold), len(disk.badSums), nblocks)
	}
}
