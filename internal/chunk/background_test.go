package chunk

import (
	"bytes"
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/object/faulty"
	"github.com/cairnfs/cairn/internal/object/mem"
)

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func (c *memCommitter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.commits)
}

// TestWriteNotBlockedByStalledFlush: the flush a Write starts by itself
// (a chunk with too many slices) runs in the background; while its uploads
// hang in the object store, later writes still return at once. Flush then
// waits for it and commits everything in order. Before, Write flushed in
// the foreground and waited for the stalled uploads.
func TestWriteNotBlockedByStalledFlush(t *testing.T) {
	ctx := context.Background()
	const stall = 3 * time.Second
	obj := faulty.New(mem.New(), 1)
	fault := obj.Inject(faulty.Rule{Ops: faulty.OpPut, Prefix: "chunks/", Latency: stall})
	s := newTestStore(t, obj, newMapCache(), Options{BlockSize: testBS, MaxChunkSlices: 4})
	c := newCommitter()
	w := s.NewWriter(c)
	defer w.Close()
	model := make([]byte, 64<<10)
	start := time.Now()
	for i := range 40 {
		// Backwards and apart: each write is a new slice.
		off := int64(39-i) * 1500
		p := bytes.Repeat([]byte{byte(i + 1)}, 1000)
		if err := w.Write(ctx, off, p); err != nil {
			t.Fatal(err)
		}
		copy(model[off:], p)
	}
	if took := time.Since(start); took > stall/2 {
		t.Fatalf("40 writes took %v with uploads stalled for %v: writes waited for a flush", took, stall)
	}
	waitFor(t, "the uploads to start (and stall)", func() bool { return fault.Fired() > 0 })
	if n := c.count(); n != 0 {
		t.Fatalf("%d commits while every upload is stalled", n)
	}
	fault.Remove()
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if time.Since(start) < stall {
		t.Fatal("Flush returned before the stalled uploads ended")
	}
	if w.Pending() || c.count() != 40 {
		t.Fatalf("after Flush: pending %v, %d commits, want 40", w.Pending(), c.count())
	}
	for i, sl := range c.commits {
		if want := uint32(39-i) * 1500; sl.Pos != want {
			t.Fatalf("commit %d at %d, want %d: out of order", i, sl.Pos, want)
		}
	}
	if got := readFile(t, s, c, 0, len(model)); !bytes.Equal(got, model) {
		t.Fatal("content differs")
	}
}

// TestBackgroundFlushErrorReported: a failed background flush is reported
// to the next Write (which buffers nothing), the data stays buffered, and
// the next Flush retries it: an error while the fault lasts, everything
// committed once it is gone.
func TestBackgroundFlushErrorReported(t *testing.T) {
	ctx := context.Background()
	s := newTestStore(t, memStore(), nil, Options{BlockSize: testBS, MaxChunkSlices: 2})
	c := newCommitter()
	w := s.NewWriter(c)
	defer w.Close()
	c.mu.Lock()
	// Commits fail until the fault is lifted below: the writes in the
	// wait loop may start more than one background flush, and each must
	// fail.
	c.failN = math.MaxInt
	c.mu.Unlock()
	for i := range 3 {
		if err := w.Write(ctx, int64(2-i)*100, []byte{byte('a' + i)}); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	waitFor(t, "the background flush's error", func() bool {
		err = w.Write(ctx, 1000, []byte{'x'})
		return err != nil
	})
	if !errors.Is(err, errInjected) {
		t.Fatalf("Write after a failed background flush = %v, want the injected fault", err)
	}
	// The write that reported the fault was not buffered, and it may have
	// been the first of the loop: write 'x' once more, now that the fault
	// is reported.
	if err := w.Write(ctx, 1000, []byte{'x'}); err != nil && !errors.Is(err, errInjected) {
		t.Fatal(err)
	} else if err != nil {
		if err := w.Write(ctx, 1000, []byte{'x'}); err != nil {
			t.Fatalf("second write after the fault was reported: %v", err)
		}
	}
	if !w.Pending() || c.count() != 0 {
		t.Fatal("data dropped or committed after a failed background flush")
	}
	if err := w.Flush(ctx); !errors.Is(err, errInjected) {
		t.Fatalf("Flush while commits fail = %v", err)
	}
	c.mu.Lock()
	c.failN = 0
	c.mu.Unlock()
	if err := w.Flush(ctx); err != nil {
		t.Fatalf("Flush after the fault: %v", err)
	}
	if w.Pending() {
		t.Fatal("still pending after a good Flush")
	}
	got := readFile(t, s, c, 0, 1001)
	if got[0] != 'c' || got[100] != 'b' || got[200] != 'a' || got[1000] != 'x' {
		t.Fatalf("content after retry: %q %q %q %q", got[0], got[100], got[200], got[1000])
	}
	// Reported once: the next write goes through.
	if err := w.Write(ctx, 0, []byte{'d'}); err != nil {
		t.Fatal(err)
	}
}

// TestBackgroundUploadErrorAtFlush: uploads of a background flush fail
// (the object store refuses them); a Flush that finds the store still
// failing returns the error, and one after the store recovers commits
// everything. No error is lost between them.
func TestBackgroundUploadErrorAtFlush(t *testing.T) {
	ctx := context.Background()
	obj := faulty.New(mem.New(), 1)
	fault := obj.Inject(faulty.Rule{Ops: faulty.OpPut, Prefix: "chunks/", Err: faulty.ErrInjected})
	s := newTestStore(t, obj, nil, Options{BlockSize: testBS, MaxChunkSlices: 2})
	c := newCommitter()
	w := s.NewWriter(c)
	defer w.Close()
	for i := range 3 {
		if err := w.Write(ctx, int64(2-i)*100, []byte{byte('a' + i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(ctx); !errors.Is(err, faulty.ErrInjected) {
		t.Fatalf("Flush with the store failing = %v", err)
	}
	fault.Remove()
	if err := w.Flush(ctx); err != nil {
		t.Fatalf("Flush after the store recovered: %v", err)
	}
	if w.Pending() || c.count() != 3 {
		t.Fatalf("pending %v, %d commits", w.Pending(), c.count())
	}
}

// overlayRead reads [off, off+n) of chunk 0 as vfs does for a file with
// buffered writes: committed map and overlay taken together, committed
// content clamped to the committed length, overlay applied.
func overlayRead(t *testing.T, s *Store, w *Writer, c *memCommitter, committedLen func() int, off, n int) []byte {
	t.Helper()
	ctx := context.Background()
	var sl []base.Slice
	var ov *Overlay
	var clen int
	_ = w.HoldCommits(func() error {
		sl, clen = c.chunk(0), committedLen()
		ov = w.Overlay(0, uint32(off), n)
		return nil
	})
	p := make([]byte, n)
	if _, err := s.ReadChunk(ctx, sl, uint32(off), p); err != nil {
		t.Fatal(err)
	}
	if clen < off+n {
		clear(p[max(clen-off, 0):])
	}
	if err := ov.Apply(ctx, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestOverlayModel: random writes (overwrites, extensions, whole blocks
// uploaded while their slice grows, sealed slices) with background and
// explicit flushes running, and reads through HoldCommits and Overlay
// checked against a byte model after every write. Reads must see every
// completed write whether it is buffered, uploaded or committed.
func TestOverlayModel(t *testing.T) {
	ctx := context.Background()
	for seed := range uint64(4) {
		rng := rand.New(rand.NewPCG(seed, 7))
		obj := faulty.New(mem.New(), seed)
		// Uploads take a little while, so reads find blocks in every state.
		obj.Inject(faulty.Rule{Ops: faulty.OpPut, Probability: 0.5, Latency: time.Millisecond})
		s := newTestStore(t, obj, newMapCache(), Options{BlockSize: MinBlockSize, MaxChunkSlices: 3, BufferLimit: 64 << 10})
		c := newCommitter()
		w := s.NewWriter(c)
		const size = 48 << 10
		model := make([]byte, size)
		var mu sync.Mutex // committed length, as the committer extends it
		length := 0
		c.onCommit = func(s base.Slice) {
			mu.Lock()
			length = max(length, int(s.Pos+s.Len))
			mu.Unlock()
		}
		committedLen := func() int { mu.Lock(); defer mu.Unlock(); return length }
		for i := range 400 {
			off := rng.IntN(size - 1)
			n := 1 + rng.IntN(min(size-off, 3*MinBlockSize))
			if rng.IntN(3) == 0 && i > 0 {
				off = min(off, size-n)
			}
			p := make([]byte, n)
			for j := range p {
				p[j] = byte(rng.IntN(255) + 1)
			}
			if err := w.Write(ctx, int64(off), p); err != nil {
				t.Fatal(err)
			}
			copy(model[off:], p)
			if rng.IntN(40) == 0 {
				if err := w.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
			ro := rng.IntN(size - 1)
			rn := 1 + rng.IntN(size-ro)
			if got := overlayRead(t, s, w, c, committedLen, ro, rn); !bytes.Equal(got, model[ro:ro+rn]) {
				t.Fatalf("seed %d step %d: read %d+%d differs from the model", seed, i, ro, rn)
			}
		}
		if err := w.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if got := readFile(t, s, c, 0, size); !bytes.Equal(got, model) {
			t.Fatalf("seed %d: committed content differs from the model", seed)
		}
		w.Close()
	}
}

// TestHoldCommitsHoldsCommits: a commit waits while HoldCommits runs, and
// a write does not.
func TestHoldCommitsHoldsCommits(t *testing.T) {
	ctx := context.Background()
	s := newTestStore(t, memStore(), nil, Options{BlockSize: testBS})
	c := newCommitter()
	w := s.NewWriter(c)
	defer w.Close()
	if err := w.Write(ctx, 0, []byte("a")); err != nil {
		t.Fatal(err)
	}
	inside, release := make(chan struct{}), make(chan struct{})
	go func() {
		_ = w.HoldCommits(func() error {
			close(inside)
			<-release
			return nil
		})
	}()
	<-inside
	flushed := make(chan error)
	go func() { flushed <- w.Flush(ctx) }()
	if err := w.Write(ctx, 10, []byte("b")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-flushed:
		t.Fatal("a commit ran inside HoldCommits")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	if c.count() == 0 {
		t.Fatal("nothing committed")
	}
}
