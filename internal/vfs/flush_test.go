package vfs

import (
	"bytes"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/object/faulty"
)

// committedContent reads [0, n) of ino as committed in meta, through a
// fresh chunk map: what another client would read after the fsync.
func (e *env) committedContent(t *testing.T, ino base.Ino, n int) []byte {
	t.Helper()
	slices, err := e.m.ReadChunk(ctx, ino, 0)
	if err != nil {
		t.Fatal(err)
	}
	p := make([]byte, n)
	if _, err := e.cs.ReadChunk(ctx, slices, 0, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// wantCommitted fails the test unless ino's committed content is want.
func (e *env) wantCommitted(t *testing.T, ino base.Ino, want []byte, when string) {
	t.Helper()
	if got := e.committedContent(t, ino, len(want)); !bytes.Equal(got, want) {
		t.Fatalf("committed content %s differs", when)
	}
}

// TestIODuringStalledFlush: while an fsync's uploads hang in the object
// store, a write to the same file and a read of the data being flushed
// return at once (before, the flush held the file's write lock and the
// read committed first, so both waited for the uploads); the fsync
// returns only once the data written before it is committed.
func TestIODuringStalledFlush(t *testing.T) {
	e := newEnv(t)
	ino, fh := e.create(t, "f")
	data := bytes.Repeat([]byte("abcdefgh"), 20000) // 160,000 bytes: blocks 0-2
	e.write(t, fh, 0, data)
	const stall = 3 * time.Second
	fault := e.fobj.Inject(faulty.Rule{Ops: faulty.OpPut, Prefix: "chunks/", Latency: stall})
	start := time.Now()
	fsynced := make(chan syscall.Errno, 1)
	go func() { fsynced <- e.v.Fsync(ctx, fh) }()
	for fault.Fired() == 0 {
		time.Sleep(time.Millisecond)
	}
	e.write(t, fh, 100, []byte("NEW"))
	got := e.read(t, fh, 0, 200)
	if took := time.Since(start); took > stall/2 {
		t.Fatalf("a write and a read took %v while the fsync's uploads stall for %v", took, stall)
	}
	want := bytes.Clone(data[:200])
	copy(want[100:], "NEW")
	if !bytes.Equal(got, want) {
		t.Fatalf("read during the flush: %q", got[96:108])
	}
	select {
	case en := <-fsynced:
		t.Fatalf("fsync returned (%v) while its uploads stall", en)
	default:
	}
	fault.Remove()
	if en := <-fsynced; en != 0 {
		t.Fatal(en)
	}
	if time.Since(start) < stall {
		t.Fatal("fsync returned before its uploads ended")
	}
	if got := e.committedContent(t, ino, len(data)); !bytes.Equal(got[:100], data[:100]) || !bytes.Equal(got[103:], data[103:]) {
		t.Fatal("data written before the fsync is not committed after it")
	}
	if en := e.v.Fsync(ctx, fh); en != 0 {
		t.Fatal(en)
	}
	if got := e.committedContent(t, ino, len(data)); !bytes.Equal(got[:200], want) {
		t.Fatal("the write made during the first fsync is not committed by the second")
	}
	e.release(t, fh)
}

// scattered writes n one-byte writes far apart (each a new slice, so the
// Writer flushes in the background past chunk.Options.MaxChunkSlices) and
// returns the model of the file.
func (e *env) scattered(t *testing.T, fh uint64, n int, b byte) []byte {
	t.Helper()
	model := make([]byte, n*1000)
	for i := range n {
		off := int64(n-1-i) * 1000
		e.write(t, fh, off, []byte{b})
		model[off] = b
	}
	return model
}

// TestFsyncWaitsForBackgroundFlush: writes past the per-chunk slice bound
// start a background flush; an fsync during it returns only when every
// write before the fsync is committed, in order.
func TestFsyncWaitsForBackgroundFlush(t *testing.T) {
	e := newEnv(t)
	ino, fh := e.create(t, "f")
	const stall = time.Second
	fault := e.fobj.Inject(faulty.Rule{Ops: faulty.OpPut, Prefix: "chunks/", Latency: stall})
	start := time.Now()
	model := e.scattered(t, fh, 40, 'a') // MaxChunkSlices is 32
	if took := time.Since(start); took > stall/2 {
		t.Fatalf("writes took %v: they waited for the background flush", took)
	}
	for fault.Fired() < 1 { // the background flush's upload (one pack), stalled
		time.Sleep(time.Millisecond)
	}
	fault.Remove()
	if en := e.v.Fsync(ctx, fh); en != 0 {
		t.Fatal(en)
	}
	if time.Since(start) < stall {
		t.Fatal("fsync returned before the stalled uploads ended")
	}
	e.wantCommitted(t, ino, model, "after fsync")
	e.release(t, fh)
}

// TestBackgroundFlushErrorAtFsync: uploads of a background flush fail;
// the error is not lost: fsync reports EIO while the store fails, and
// once it recovers an fsync commits every write (none was dropped).
func TestBackgroundFlushErrorAtFsync(t *testing.T) {
	e := newEnv(t)
	ino, fh := e.create(t, "f")
	fault := e.fobj.Inject(faulty.Rule{Ops: faulty.OpPut, Prefix: "chunks/", Err: faulty.ErrInjected})
	model := e.scattered(t, fh, 40, 'b')
	if en := e.v.Fsync(ctx, fh); en != syscall.EIO {
		t.Fatalf("fsync with failing uploads = %v, want EIO", en)
	}
	fault.Remove()
	if en := e.v.Fsync(ctx, fh); en != 0 {
		t.Fatalf("fsync after the store recovered: %v", en)
	}
	e.wantCommitted(t, ino, model, "after recovery (a write was dropped)")
	e.release(t, fh)
}

// TestBackgroundFlushErrorAtWrite: a background flush whose uploads fail
// is reported to a later write (EIO), and close after the store recovered
// commits everything.
func TestBackgroundFlushErrorAtWrite(t *testing.T) {
	e := newEnv(t)
	_, fh := e.create(t, "f")
	fault := e.fobj.Inject(faulty.Rule{Ops: faulty.OpPut, Prefix: "chunks/", Err: faulty.ErrInjected})
	e.scattered(t, fh, 40, 'c')
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, en := e.v.Write(ctx, fh, 50000, []byte{'d'})
		if en == syscall.EIO {
			break
		}
		if en != 0 {
			t.Fatal(en)
		}
		if time.Now().After(deadline) {
			t.Fatal("no write reported the failed background flush")
		}
		time.Sleep(10 * time.Millisecond)
	}
	fault.Remove()
	if en := e.v.Release(ctx, fh); en != 0 {
		t.Fatalf("close after the store recovered: %v", en)
	}
}

// TestSetMtimeAfterWrites: a time set after writes stays set, whether the
// writes were still buffered, committed by a background flush, or being
// uploaded by a flush when the time is set; setting it waits for no
// upload, and neither do writes made meanwhile (the writeback cache sends
// the mtime while a file is written); a write after it sets a newer time.
func TestSetMtimeAfterWrites(t *testing.T) {
	e := newEnv(t)
	ino, fh := e.create(t, "f")
	mtime := base.SetAttrRequest{Valid: base.SetMtime, Mtime: 5}
	getMtime := func() int64 {
		t.Helper()
		a, en := e.v.GetAttr(ctx, ino)
		if en != 0 {
			t.Fatal(en)
		}
		return a.Mtime
	}
	check := func(what string) {
		t.Helper()
		if a, en := e.v.SetAttr(ctx, root, ino, mtime); en != 0 || a.Mtime != 5 {
			t.Fatalf("%s: setattr: %v, mtime %d", what, en, a.Mtime)
		}
		if m := getMtime(); m != 5 {
			t.Fatalf("%s: getattr after setattr: mtime %d", what, m)
		}
	}
	e.write(t, fh, 0, []byte("buffered"))
	check("buffered write")
	if en := e.v.Flush(ctx, fh); en != 0 {
		t.Fatal(en)
	}
	if m := getMtime(); m != 5 {
		t.Fatalf("the commit of a write made before the time was set changed it to %d", m)
	}
	// 33 slices: the last write passes MaxChunkSlices (32) and starts a
	// background flush that commits them all (more writes after it would
	// stay buffered until an idle flush, an hour away here).
	e.scattered(t, fh, 33, 'a')
	for e.v.files[ino].w.Pending() {
		time.Sleep(time.Millisecond)
	}
	check("writes committed by a background flush")

	const stall = 2 * time.Second
	e.write(t, fh, 0, []byte("stalled"))
	fault := e.fobj.Inject(faulty.Rule{Ops: faulty.OpPut, Prefix: "chunks/", Latency: stall})
	flushed := make(chan syscall.Errno, 1)
	go func() { flushed <- e.v.Flush(ctx, fh) }()
	for fault.Fired() == 0 {
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	check("writes being uploaded")
	if took := time.Since(start); took > stall/2 {
		t.Fatalf("setting the time waited %v for an upload", took)
	}
	fault.Remove()
	if en := <-flushed; en != 0 {
		t.Fatal(en)
	}
	if m := getMtime(); m != 5 {
		t.Fatalf("the stalled upload's commit changed the time set during it to %d", m)
	}
	e.write(t, fh, 100, []byte("later"))
	e.release(t, fh)
	if m := getMtime(); m <= 5 {
		t.Fatalf("a write after the time was set left mtime at %d", m)
	}
}

// TestReadPastCommittedLength: after a truncation, a buffered write in a
// later chunk extends the file; the range between the committed length
// and that write reads as zeros, not as the truncated data.
func TestReadPastCommittedLength(t *testing.T) {
	e := newEnv(t)
	ino, fh := e.create(t, "f")
	e.write(t, fh, 0, bytes.Repeat([]byte{7}, 100<<10))
	if en := e.v.Flush(ctx, fh); en != 0 {
		t.Fatal(en)
	}
	if _, en := e.v.SetAttr(ctx, root, ino, base.SetAttrRequest{Valid: base.SetSize, Size: 10}); en != 0 {
		t.Fatal(en)
	}
	e.write(t, fh, base.ChunkSize+5, []byte{9})
	got := e.read(t, fh, 0, 100<<10)
	want := make([]byte, 100<<10)
	copy(want, bytes.Repeat([]byte{7}, 10))
	if !bytes.Equal(got, want) {
		t.Fatal("truncated data read back past the committed length")
	}
	if got := e.read(t, fh, base.ChunkSize, 10); !bytes.Equal(got, []byte{0, 0, 0, 0, 0, 9}) {
		t.Fatalf("read of the buffered write in the next chunk: %v", got)
	}
	e.release(t, fh)
}

// TestReadsDuringCommits: a reader never misses a write that completed
// before its read, while the file's buffered writes are being committed
// (reads take the overlay first and hold no commit off). Round r writes
// byte r at scattered positions; after round r is written, every read
// must see at least r everywhere.
//
// Slices replaced by compaction are deleted after a minute here, as after
// DeleteDelay in a mount: the tests' usual millisecond would delete a
// pack a slow (race-detector) read has just resolved.
func TestReadsDuringCommits(t *testing.T) {
	e := newEnvWith(t, Options{DeleteDelay: time.Minute})
	_, fh := e.create(t, "f")
	const n, rounds = 40, 60
	size := n * 3000
	e.write(t, fh, 0, make([]byte, size))
	var done atomic.Int32 // last round fully written
	stop := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		defer close(errc)
		for {
			select {
			case <-stop:
				return
			default:
			}
			floor := byte(done.Load())
			got := make([]byte, size)
			if m, en := e.v.Read(ctx, fh, 0, got); en != 0 || m != size {
				errc <- fmt.Errorf("read: %d bytes, %v", m, en)
				return
			}
			for i := range n {
				if got[i*3000] < floor {
					errc <- fmt.Errorf("position %d reads round %d after round %d was written", i*3000, got[i*3000], floor)
					return
				}
			}
		}
	}()
	for r := 1; r <= rounds; r++ {
		for i := range n {
			e.write(t, fh, int64((n-1-i)*3000), []byte{byte(r)})
		}
		// Every 33 scattered writes start a background commit
		// (MaxChunkSlices) while the reads go on.
		done.Store(int32(r))
	}
	close(stop)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	e.release(t, fh)
}
