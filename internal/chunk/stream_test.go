package chunk

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/object/mem"
)

// TestStreamBlocks: a stream's full blocks are put as cold objects and
// their buffers, once uploaded, serve the next blocks; its short last
// block is neither. What is read back is what was written.
func TestStreamBlocks(t *testing.T) {
	obj := memStore()
	var mu sync.Mutex
	buffers := map[*byte]int{} // full blocks put from each buffer
	cold := map[int]int{}      // cold puts by object size
	puts := map[int]int{}
	obj.putHook = func(ctx context.Context, key string, data []byte) {
		mu.Lock()
		defer mu.Unlock()
		puts[len(data)]++
		if object.Cold(ctx) {
			cold[len(data)]++
		}
		buffers[&data[0]]++
	}
	s := newTestStore(t, obj, newMapCache(), Options{})
	bs := s.opts.BlockSize
	c := newCommitter()
	w := s.NewWriter(c)
	defer w.Close()
	const blocks = 12
	model := make([]byte, blocks*bs+1000)
	for i := range model {
		model[i] = byte(i*7 + i>>20)
	}
	ctx := context.Background()
	for off := 0; off < len(model); off += 1 << 20 {
		if err := w.Write(ctx, int64(off), model[off:min(off+1<<20, len(model))]); err != nil {
			t.Fatal(err)
		}
		if (off+1<<20)%(2*bs) == 0 {
			// Let the uploads end, so that their buffers come back.
			if err := w.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	full, short := EncodedLen(bs), EncodedLen(1000)
	if puts[full] != blocks || cold[full] != blocks {
		t.Errorf("%d full blocks put, %d of them cold; want %d, all", puts[full], cold[full], blocks)
	}
	if puts[short] != 1 || cold[short] != 0 {
		t.Errorf("%d short blocks put, %d of them cold; want 1, none", puts[short], cold[short])
	}
	if len(buffers) >= blocks+1 {
		t.Errorf("%d puts from %d buffers: no buffer was used twice", blocks+1, len(buffers))
	}
	if got := readFile(t, s, c, 0, len(model)); !bytes.Equal(got, model) {
		t.Fatal("content read back differs from what was written")
	}
}

// coldDisk records which blocks reach the disk tier as cold.
type coldDisk struct {
	DiskCache
	mu                  sync.Mutex
	cold, warm, badSums []string
}

// It holds nothing: every read misses.
func (d *coldDisk) Get(string) ([]byte, bool)                 { return nil, false }
func (d *coldDisk) ReadRange(string, int, int) ([]byte, bool) { return nil, false }
func (d *coldDisk) Has(string) bool                           { return false }

func (d *coldDisk) Put(key string, data []byte) {
	d.mu.Lock()
	d.warm = append(d.warm, key)
	d.mu.Unlock()
}

func (d *coldDisk) PutSums(key string, data, sums []byte, cold bool) {
	d.mu.Lock()
	if cold {
		d.cold = append(d.cold, key)
	} else {
		d.warm = append(d.warm, key)
	}
	want := EncodeBlock(bytes.Clone(data), BlockID{}, BlockFormat1) // untagged sums
	if !bytes.Equal(sums, want[len(data):len(want)-4]) {
		d.badSums = append(d.badSums, key)
	}
	d.mu.Unlock()
}

// TestCacheWritesCold: with CacheWrites, a stream's full blocks go to the
// disk tier as cold blocks (written past the page cache), its short last
// block the usual way.
func TestCacheWritesCold(t *testing.T) {
	disk := &coldDisk{}
	s := newTestStore(t, memStore(), newMapCache(), Options{BlockSize: testBS, DiskCache: disk, CacheWrites: true, ReadAhead: -1})
	w := s.NewWriter(newCommitter())
	defer w.Close()
	ctx := context.Background()
	if err := w.Write(ctx, 0, make([]byte, 2*testBS+1000)); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	disk.mu.Lock()
	defer disk.mu.Unlock()
	if len(disk.cold) != 2 || len(disk.warm) != 1 {
		t.Errorf("cold puts %v, others %v: want the 2 full blocks cold, the last one not", disk.cold, disk.warm)
	}
	if len(disk.badSums) != 0 {
		t.Errorf("blocks given with checksums that are not their segments': %v", disk.badSums)
	}
}

// A short file written by one large write gets a whole block buffer (it
// looks like the start of a stream). The memory tier must not keep that
// buffer behind the block: it counts blocks' lengths, and such buffers
// held three times its bound after a tar -x. memoryCopy gives it a copy
// of the block's length (and the writer takes the buffer back for the
// next file); a block that fills most of its buffer is kept as it is.
func TestShortStreamBlockNotKeptWhole(t *testing.T) {
	const bs = 4 << 20
	short := make([]byte, 300<<10, EncodedLen(bs))
	short[0] = 7
	got := memoryCopy(short)
	if &got[0] == &short[0] || oversized(got) || got[0] != 7 {
		t.Fatalf("a %d-byte block in a %d-byte buffer: kept in place (cap %d)", len(short), cap(short), cap(got))
	}
	long := make([]byte, 3<<20, EncodedLen(bs))
	if got := memoryCopy(long); &got[0] != &long[0] || cap(got) != len(long) {
		t.Fatalf("a %d-byte block in a %d-byte buffer: copied", len(long), cap(long))
	}
	s := newTestStore(t, mem.New(), newMapCache(), Options{BlockSize: bs})
	if !s.recyclesShort(short) || s.recyclesShort(long) {
		t.Fatal("the writer takes back the wrong buffers")
	}
	// The whole path: what the tier holds reads back right.
	ctx := context.Background()
	cache := newMapCache()
	s = newTestStore(t, mem.New(), cache, Options{BlockSize: bs})
	w := s.NewWriter(newCommitter())
	defer w.Close()
	p := bytes.Repeat([]byte{7}, 300<<10)
	if err := w.Write(ctx, 0, p); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	cache.mu.Lock()
	defer cache.mu.Unlock()
	for _, d := range cache.m {
		if !bytes.Equal(d, p) {
			t.Fatal("the memory tier holds other bytes than the block written")
		}
	}
	if len(cache.m) != 1 {
		t.Fatalf("the memory tier holds %d blocks, want 1", len(cache.m))
	}
}
