package chunk

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cairnfs/cairn/internal/base"
)

// model is the expected content of a window [base, base+len(data)) of a
// file; everything outside is never written.
type model struct {
	base int64
	data []byte
	end  int64 // highest written end offset
}

func (m *model) write(off int64, p []byte) {
	copy(m.data[off-m.base:], p)
	m.end = max(m.end, off+int64(len(p)))
}

type write struct {
	off int64
	n   int
}

type pattern struct {
	name   string
	base   int64 // model window
	size   int
	writes func(r *rand.Rand) []write
}

const testBS = 128 << 10 // two CRC segments per block

func patterns() []pattern {
	const mib = 1 << 20
	return []pattern{
		{"sequential", 0, 3 * mib, func(r *rand.Rand) []write {
			var ws []write
			for off := 0; off < 3*mib-7000; off += 7000 {
				ws = append(ws, write{int64(off), 7000})
			}
			return ws
		}},
		{"sequential-big", 0, 3 * mib, func(r *rand.Rand) []write {
			return []write{{0, mib + 5}, {mib + 5, mib}, {2*mib + 5, mib - 5}}
		}},
		{"random-overlapping", 0, mib, func(r *rand.Rand) []write {
			var ws []write
			for range 300 {
				n := 1 + r.IntN(50<<10)
				ws = append(ws, write{int64(r.IntN(mib - n)), n})
			}
			return ws
		}},
		{"sparse-holes", 0, 8 * mib, func(r *rand.Rand) []write {
			var ws []write
			for i := range 20 {
				ws = append(ws, write{int64(i)*400<<10 + int64(r.IntN(100<<10)), 1 + r.IntN(60<<10)})
			}
			return ws
		}},
		{"sequential-reordered", 0, 3 * mib, func(r *rand.Rand) []write {
			// 32 KiB pieces, each pair swapped or a few shuffled, as the
			// kernel's concurrent writeback requests arrive.
			var ws []write
			for off := 0; off < 3*mib; off += 4 * 32 << 10 {
				group := []write{{int64(off), 32 << 10}, {int64(off + 32<<10), 32 << 10},
					{int64(off + 64<<10), 32 << 10}, {int64(off + 96<<10), 32 << 10}}
				r.Shuffle(len(group), func(i, j int) { group[i], group[j] = group[j], group[i] })
				ws = append(ws, group...)
			}
			return ws
		}},
		{"reordered-overlapping", 0, mib, func(r *rand.Rand) []write {
			// Late writes that continue an older slice but overlap a newer
			// one: they must not go under it.
			var ws []write
			for i := range 60 {
				base := int64(i%8) * 100 << 10
				ws = append(ws, write{base + 50<<10, 40 << 10}, write{base, 70 << 10},
					write{base + 70<<10, 10 << 10}, write{base + 60<<10, 30 << 10})
			}
			return ws
		}},
		{"rewrite-same-range", 0, mib, func(r *rand.Rand) []write {
			var ws []write
			for range 40 {
				ws = append(ws, write{300 << 10, 200 << 10})
			}
			return ws
		}},
		{"block-and-chunk-boundaries", base.ChunkSize - mib, 2 * mib, func(r *rand.Rand) []write {
			c := int64(base.ChunkSize)
			ws := []write{
				{c - 300<<10, 600 << 10}, // crosses the chunk boundary and blocks
				{c - 1, 2},               // one byte each side
				{c - testBS - 10, 20},    // crosses a block boundary
				{c + testBS - 10, 20},
				{c - 5, 10},
			}
			for range 100 {
				n := 1 + r.IntN(300<<10)
				ws = append(ws, write{c - mib + int64(r.IntN(2*mib-n)), n})
			}
			return ws
		}},
		{"one-byte", 0, 300 << 10, func(r *rand.Rand) []write {
			var ws []write
			for i := range 2000 { // sequential single bytes across a block boundary
				ws = append(ws, write{testBS - 1000 + int64(i), 1})
			}
			for range 1000 {
				ws = append(ws, write{int64(r.IntN(300 << 10)), 1})
			}
			return ws
		}},
	}
}

func TestWritePatterns(t *testing.T) {
	for _, pt := range patterns() {
		for _, flushEvery := range []int{0, 7} {
			t.Run(fmt.Sprintf("%s/flush%d", pt.name, flushEvery), func(t *testing.T) {
				testPattern(t, pt, flushEvery)
			})
		}
	}
}

func testPattern(t *testing.T, pt pattern, flushEvery int) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(1, uint64(len(pt.name))))
	obj := memStore()
	cache := newMapCache()
	s := newTestStore(t, obj, cache, Options{BlockSize: testBS, BufferLimit: 2 << 20, MaxChunkSlices: 1 << 20})
	c := newCommitter()
	w := s.NewWriter(c)
	defer w.Close()
	m := &model{base: pt.base, data: make([]byte, pt.size)}
	for i, wr := range pt.writes(r) {
		p := make([]byte, wr.n)
		for j := range p {
			p[j] = byte(r.Uint32()) | 1 // never zero, so holes show
		}
		if err := w.Write(ctx, wr.off, p); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		m.write(wr.off, p)
		if got := w.Len(); got > m.end || (got != m.end && flushEvery == 0) {
			t.Fatalf("Len = %d, want %d", got, m.end)
		}
		if flushEvery > 0 && i%flushEvery == flushEvery-1 {
			if err := w.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !w.Pending() && flushEvery == 0 {
		t.Fatal("nothing pending before Flush")
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if w.Pending() || w.Len() != 0 {
		t.Fatalf("after Flush: Pending %v Len %d", w.Pending(), w.Len())
	}
	if b := s.Stats().Buffered; b != 0 {
		t.Fatalf("buffered after Flush = %d", b)
	}
	check := func(when string) {
		t.Helper()
		got := readFile(t, s, c, m.base, len(m.data))
		if i := firstDiff(got, m.data); i >= 0 {
			t.Fatalf("%s: content differs at offset %d: got %d want %d", when, m.base+int64(i), got[i], m.data[i])
		}
		for range 50 { // random sub-range reads
			a := r.IntN(len(m.data))
			n := 1 + r.IntN(min(len(m.data)-a, 400<<10))
			got := readFile(t, s, c, m.base+int64(a), n)
			if !bytes.Equal(got, m.data[a:a+n]) {
				t.Fatalf("%s: sub-range %d+%d differs", when, m.base+int64(a), n)
			}
		}
	}
	check("written")
	// Compact every chunk and read again, without the cache's help.
	for _, idx := range c.indexes() {
		old := c.chunk(idx)
		id, _ := c.NewSliceID(ctx)
		ns, err := s.Compact(ctx, old, id)
		if err != nil {
			t.Fatal(err)
		}
		if ns.ID != id || ns.Off != 0 || ns.Len != ns.Size {
			t.Fatalf("compacted ref %+v", ns)
		}
		c.mu.Lock()
		c.chunks[idx] = []base.Slice{ns}
		c.mu.Unlock()
		for _, sl := range old {
			if err := s.DeleteSlice(ctx, sl.ID, sl.Size); err != nil {
				t.Fatal(err)
			}
		}
	}
	clear(cache.m)
	check("compacted")
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// TestRandomModel runs random writes, flushes and compactions of one file
// against a model, with several writers sharing a small buffer.
func TestRandomModel(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(7, 7))
	s := newTestStore(t, memStore(), newMapCache(), Options{BlockSize: MinBlockSize * 4, BufferLimit: 64 << 10, MaxChunkSlices: 8})
	const size = 512 << 10
	c := newCommitter()
	w := s.NewWriter(c)
	defer w.Close()
	m := &model{data: make([]byte, size)}
	for i := range 2000 {
		switch op := r.IntN(100); {
		case op < 90:
			n := 1 + r.IntN(20<<10)
			off := int64(r.IntN(size - n))
			if r.IntN(3) == 0 { // append-ish
				off = min(m.end, int64(size-n))
			}
			p := make([]byte, n)
			for j := range p {
				p[j] = byte(r.Uint32())
			}
			if err := w.Write(ctx, off, p); err != nil {
				t.Fatal(err)
			}
			m.write(off, p)
		case op < 97:
			if err := w.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			a := r.IntN(size)
			n := 1 + r.IntN(size-a)
			if got := readFile(t, s, c, int64(a), n); !bytes.Equal(got, m.data[a:a+n]) {
				t.Fatalf("op %d: read %d+%d differs at %d", i, a, n, a+firstDiff(got, m.data[a:a+n]))
			}
		default:
			if err := w.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			old := c.chunk(0)
			if len(old) < 2 {
				continue
			}
			id, _ := c.NewSliceID(ctx)
			ns, err := s.Compact(ctx, old, id)
			if err != nil {
				t.Fatal(err)
			}
			c.mu.Lock()
			c.chunks[0] = []base.Slice{ns}
			c.mu.Unlock()
		}
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, s, c, 0, size); !bytes.Equal(got, m.data) {
		t.Fatalf("final content differs at %d", firstDiff(got, m.data))
	}
}

// TestReadChunkFillsGarbage: a read writes every byte of its buffer,
// whatever the buffer held before (the FUSE layer reuses its buffers):
// data where slices hold it, zeros in holes, under ID-0 slices and past
// the last slice. Reads go through whole blocks (with a memory tier) and
// through the segments of blocks a small read needs (without one).
func TestReadChunkFillsGarbage(t *testing.T) {
	ctx := context.Background()
	const bs = 1 << 20 // 16 segments: small reads of an uncached block read segments
	obj := memStore()
	c := newCommitter()
	w := newTestStore(t, obj, nil, Options{BlockSize: bs}).NewWriter(c)
	defer w.Close()
	rng := rand.New(rand.NewPCG(4, 2))
	const span = 3 * bs
	want := make([]byte, span+bs) // the last block: never written
	for range 10 {
		off := rng.IntN(span - 1)
		data := make([]byte, 1+rng.IntN(min(span-off, bs)))
		for i := range data {
			data[i] = byte(1 + rng.IntN(255))
		}
		writeFlush(t, w, int64(off), data)
		copy(want[off:], data)
	}
	sl := c.chunk(0)
	for range 3 {
		pos := rng.IntN(span - 1)
		n := 1 + rng.IntN(min(span-pos, bs/2))
		sl = append(sl, base.Slice{Pos: uint32(pos), Len: uint32(n)})
		clear(want[pos : pos+n])
	}
	for name, cache := range map[string]BlockCache{"memory tier": newMapCache(), "segments": nil} {
		s := newTestStore(t, obj, cache, Options{BlockSize: bs})
		for i := range 300 {
			off := rng.IntN(len(want) - 1)
			n := 1 + rng.IntN(min(len(want)-off, []int{4 << 10, 64 << 10, 1 << 20}[i%3]))
			p := bytes.Repeat([]byte{0xAA}, n)
			got, err := s.ReadChunk(ctx, sl, uint32(off), p)
			if err != nil {
				t.Fatalf("%s: read of %d at %d: %v", name, n, off, err)
			}
			if got != n || !bytes.Equal(p, want[off:off+n]) {
				i := max(firstDiff(p, want[off:off+n]), 0)
				t.Fatalf("%s: read of %d at %d returned %d, first wrong byte at %d: %#x, want %#x", name, n, off, got, off+i, p[i], want[off+i])
			}
		}
	}
}
