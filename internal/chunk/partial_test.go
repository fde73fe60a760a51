package chunk

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/cache"
	"github.com/cairnfs/cairn/internal/object"
)

// Small reads of uncached large blocks read only the covering segments,
// whether their checksums are read at the same time (a remote store) or
// after them (Options.LocalStore).
func TestPartialBlockReads(t *testing.T) {
	for _, local := range []bool{false, true} {
		t.Run(map[bool]string{false: "remote", true: "local"}[local], func(t *testing.T) { testPartialBlockReads(t, local) })
	}
}

func testPartialBlockReads(t *testing.T, local bool) {
	ctx := context.Background()
	const bs = 1 << 20
	obj := memStore()
	cache := newMapCache()
	s := newTestStore(t, obj, cache, Options{BlockSize: bs, ReadAhead: -1, LocalStore: local})
	c := newCommitter()
	w := s.NewWriter(c)
	defer w.Close()
	data := fill(2*bs + 5000)
	writeFlush(t, w, 0, data)
	for k := range cache.m {
		cache.Delete(k)
	}
	before := s.Stats().BytesFetched
	for _, off := range []int{0, 4096, SegmentSize - 100, 3*SegmentSize + 7, bs - 10, bs + 12345, 2*bs + 4000} {
		n := 4096
		if off+n > len(data) {
			n = len(data) - off
		}
		got := readFile(t, s, c, int64(off), n)
		if !bytes.Equal(got, data[off:off+n]) {
			t.Fatalf("partial read at %d differs", off)
		}
	}
	if fetched := s.Stats().BytesFetched - before; fetched > 12*SegmentSize {
		t.Fatalf("small reads fetched %d bytes: whole blocks were read", fetched)
	}
	// Corrupt one segment: reads touching it fail, others still work.
	key := BlockKey(c.chunk(0)[0].ID, 0, bs)
	b, err := object.ReadAll(ctx, obj, key)
	if err != nil {
		t.Fatal(err)
	}
	b[5*SegmentSize+10] ^= 1
	if err := obj.Store.Put(ctx, key, b); err != nil {
		t.Fatal(err)
	}
	for k := range cache.m {
		cache.Delete(k)
	}
	p := make([]byte, 100)
	if n, err := s.ReadChunk(ctx, c.chunk(0), 5*SegmentSize, p); !errors.Is(err, base.ErrChecksum) || n != 0 {
		t.Fatalf("corrupt segment: n=%d err=%v", n, err)
	}
	if _, err := s.ReadChunk(ctx, c.chunk(0), 6*SegmentSize, p); err != nil || !bytes.Equal(p, data[6*SegmentSize:6*SegmentSize+100]) {
		t.Fatalf("intact segment: %v", err)
	}
}

// TestSequentialReadsSmallMemoryTier: a sequential reader with no disk
// tier fetches each byte about once, whatever the memory tier's size:
//   - one too small to keep a block (cache.Memory keeps nothing above a
//     quarter of its size): before, each 128 KiB read of a 4 MiB block
//     fetched the whole block again, and read-ahead fetched blocks no
//     tier kept (33 times the file's bytes here);
//   - one smaller than the read-ahead window: the blocks fetched ahead
//     evicted the ones not yet read, which were fetched again.
func TestSequentialReadsSmallMemoryTier(t *testing.T) {
	const bs = 4 << 20
	for _, tc := range []struct {
		name          string
		mem, size     int
		readAhead     int
		wantReadAhead bool
	}{
		{"tier smaller than a block", 8 << 20, 4 * bs, 16, false},
		{"tier smaller than the window", 32 << 20, 12 * bs, 16, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestStore(t, memStore(), cache.NewMemory(int64(tc.mem)), Options{BlockSize: bs, ReadAhead: tc.readAhead})
			c := newCommitter()
			w := s.NewWriter(c)
			defer w.Close()
			data := fill(tc.size)
			writeFlush(t, w, 0, data)
			before := s.Stats()
			readSequentially(t, s.NewReader(), c, data, 128<<10)
			st := s.Stats()
			fetched, ahead := st.BytesFetched-before.BytesFetched, st.Prefetches-before.Prefetches
			if fetched > int64(len(data))*5/4 {
				t.Fatalf("a sequential read of %d bytes fetched %d from the object store (%d prefetches)", len(data), fetched, ahead)
			}
			if (ahead > 0) != tc.wantReadAhead {
				t.Fatalf("%d blocks read ahead", ahead)
			}
		})
	}
}
