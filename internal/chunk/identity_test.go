package chunk

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/testenv"
)

// writeFile writes data as a new file (its own committer, whose slice
// ids start after firstID) and returns the file's chunk 0.
func writeFile(t *testing.T, s *Store, firstID uint64, data []byte) []base.Slice {
	t.Helper()
	c := newCommitter()
	c.nextID.Store(firstID)
	w := s.NewWriter(c)
	defer w.Close()
	writeFlush(t, w, 0, data)
	return c.chunk(0)
}

// TestSwappedBlock: the object of one file's block copied over another
// block of the same length (a misplaced or swapped object) passes every
// segment check in format 1, and returns the other file's bytes; in
// format 2 a read of it fails with ErrChecksum, whole or in part, and
// is logged.
func TestSwappedBlock(t *testing.T) {
	ctx := context.Background()
	for _, f := range []BlockFormat{BlockFormat1, BlockFormat2} {
		obj := memStore()
		const bs = 4 * SegmentSize // large enough for partial reads
		opts := Options{BlockSize: bs, BlockFormat: f, DiskFills: -1}
		s := newTestStore(t, obj, nil, opts)
		a, b := fill(bs), bytes.Repeat([]byte("B"), bs)
		fa, fb := writeFile(t, s, 100, a), writeFile(t, s, 200, b)
		keyA, keyB := BlockKey(fa[0].ID, 0, bs), BlockKey(fb[0].ID, 0, bs)
		objA, err := object.ReadAll(ctx, obj, keyA)
		if err != nil {
			t.Fatal(err)
		}
		if err := obj.Put(ctx, keyB, objA); err != nil {
			t.Fatal(err)
		}
		var logs testenv.LogBuffer
		opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		// A fresh store: nothing of B is cached.
		s = newTestStore(t, obj, newMapCache(), opts)
		whole := make([]byte, bs)
		_, errWhole := s.ReadChunk(ctx, fb, 0, whole)
		s = newTestStore(t, obj, newMapCache(), opts)
		part := make([]byte, 4096) // a small read: segments only (readRange)
		_, errPart := s.ReadChunk(ctx, fb, 2*SegmentSize+100, part)
		if f == BlockFormat1 {
			if errWhole != nil || !bytes.Equal(whole, a) || errPart != nil || !bytes.Equal(part, a[2*SegmentSize+100:][:4096]) {
				t.Fatalf("format 1: %v %v; want the other file's bytes, which format 1 cannot tell", errWhole, errPart)
			}
			continue
		}
		for _, err := range []error{errWhole, errPart} {
			if !errors.Is(err, base.ErrChecksum) {
				t.Fatalf("read of a block holding another block's object: %v, want ErrChecksum", err)
			}
		}
		if n := strings.Count(logs.String(), `msg="block checksum mismatch" key=`+keyB); n != 2 || !strings.Contains(logs.String(), "segment 2") {
			t.Fatalf("want one line per store naming %s, got:\n%s", keyB, logs.String())
		}
		// File A still reads.
		if _, err := s.ReadChunk(ctx, fa, 0, whole); err != nil || !bytes.Equal(whole, a) {
			t.Fatalf("intact file: %v", err)
		}
	}
}

// TestBlockFormatsDoNotMix: a Store reads only its own block format, so
// a block of the other format (an old volume's object copied into a new
// one) fails, and the inline blocks a writer commits are of the Store's
// format.
func TestBlockFormatsDoNotMix(t *testing.T) {
	ctx := context.Background()
	obj := memStore()
	old := newTestStore(t, obj, nil, Options{BlockSize: testBS, BlockFormat: BlockFormat1})
	sl := writeFile(t, old, 0, fill(1000))
	if _, err := old.ReadChunk(ctx, sl, 0, make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	s := newTestStore(t, obj, nil, Options{BlockSize: testBS})
	if _, err := s.ReadChunk(ctx, sl, 0, make([]byte, 1000)); !errors.Is(err, base.ErrChecksum) {
		t.Fatalf("format 1 block read by a format 2 store: %v", err)
	}
	if err := (&Options{BlockFormat: 3}).Validate(); !errors.Is(err, base.ErrInvalid) {
		t.Fatalf("block format 3 accepted: %v", err)
	}
}

// TestBadBlockLogged: a pass over a damaged file in 4 KiB reads logs one
// line, naming the file and the object, whether the reads fetch whole
// blocks or only segments; past the interval the next failure logs
// again, with the count of those left out.
func TestBadBlockLogged(t *testing.T) {
	ctx := context.Background()
	for _, random := range []bool{false, true} {
		obj := memStore()
		var logs testenv.LogBuffer
		log := slog.New(slog.NewTextHandler(&logs, nil))
		const bs = 4 * SegmentSize // large enough for partial reads
		s := newTestStore(t, obj, newMapCache(), Options{BlockSize: bs, Logger: log, DiskFills: -1})
		data := fill(4 * bs)
		sl := writeFile(t, s, 0, data)
		key := BlockKey(sl[0].ID, 1, bs)
		b, err := object.ReadAll(ctx, obj, key)
		if err != nil {
			t.Fatal(err)
		}
		for seg := range bs / SegmentSize {
			b[seg*SegmentSize+10] ^= 1
		}
		if err := obj.Put(ctx, key, b); err != nil {
			t.Fatal(err)
		}
		now := time.Unix(1000, 0)
		s.bad.now = func() time.Time { return now }
		rctx := WithInode(ctx, 4242)
		pass := func() (failed int) {
			r := s.NewReader()
			p := make([]byte, 4096)
			for off := 0; off < len(data); off += len(p) {
				var err error
				if random {
					_, err = s.ReadChunk(rctx, sl, uint32(off), p)
				} else {
					_, err = r.ReadChunk(rctx, 0, sl, uint32(off), p)
				}
				if err != nil {
					if !errors.Is(err, base.ErrChecksum) || !Logged(err) {
						t.Fatalf("read at %d: %v, want a logged ErrChecksum", off, err)
					}
					failed++
				}
			}
			return failed
		}
		lines := func() []string {
			var out []string
			for l := range strings.Lines(logs.String()) {
				if strings.Contains(l, `msg="block checksum mismatch"`) {
					out = append(out, l)
				}
			}
			return out
		}
		failed := pass()
		if failed != bs/4096 {
			t.Fatalf("random=%v: %d reads failed, want the %d of the bad block", random, failed, bs/4096)
		}
		got := lines()
		if len(got) != 1 || !strings.Contains(got[0], "key="+key) || !strings.Contains(got[0], "ino=4242") || !strings.Contains(got[0], "level=ERROR") {
			t.Fatalf("random=%v: a pass logged %d lines, want one with the key and the inode:\n%s", random, len(got), logs.String())
		}
		pass()
		if n := len(lines()); n != 1 {
			t.Fatalf("random=%v: a second pass within the minute logged %d lines in all", random, n)
		}
		now = now.Add(badBlockInterval)
		pass()
		got = lines()
		// Every failed read since the first line is counted (and the
		// read-ahead's, which vary).
		_, n, _ := strings.Cut(got[len(got)-1], "suppressed=")
		if k, _ := strconv.Atoi(strings.TrimSpace(n)); len(got) != 2 || k < 2*failed-1 {
			t.Fatalf("random=%v: after the interval, want a second line with suppressed >= %d:\n%s", random, 2*failed-1, logs.String())
		}
		if s.Stats().ChecksumErrors < int64(2*failed) {
			t.Fatalf("random=%v: %d checksum errors counted, want every failure", random, s.Stats().ChecksumErrors)
		}
	}
}

// TestBadBlockNamedLater: a bad block met first without a file
// (read-ahead, a background fill) is logged again when a read names the
// file, once.
func TestBadBlockNamedLater(t *testing.T) {
	var logs testenv.LogBuffer
	b := newBadBlocks(slog.New(slog.NewTextHandler(&logs, nil)))
	ctx := context.Background()
	err := errors.New("bad")
	for _, c := range []context.Context{ctx, ctx, WithInode(ctx, 7), WithInode(ctx, 7), ctx} {
		if got := b.report(c, "k", "block checksum mismatch", err); !Logged(got) || !errors.Is(got, err) {
			t.Fatalf("report returned %v", got)
		}
	}
	if n := strings.Count(logs.String(), "block checksum mismatch"); n != 2 || !strings.Contains(logs.String(), "ino=7 err=bad suppressed=1") {
		t.Fatalf("want 2 lines, the second naming the file:\n%s", logs.String())
	}
	// The table stays bounded.
	for i := range 3 * badBlockMax {
		b.report(ctx, strconv.Itoa(i), "m", err)
	}
	if len(b.seen) > badBlockMax {
		t.Fatalf("%d blocks remembered", len(b.seen))
	}
}
