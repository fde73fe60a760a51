package nfs

import (
	"bytes"
	"net"
	"sync"
	"testing"

	"github.com/cairnfs/cairn/internal/nfs/proto"
)

// writeCall builds a decoded WRITE call of fh at off, as the reader
// hands it on.
func writeCall(t *testing.T, fh []byte, off uint64) proto.Call {
	w := &proto.Writer{}
	w.Opaque(fh)
	w.Uint64(off)
	w.Uint32(1)
	w.Uint32(proto.Unstable)
	w.Opaque([]byte{0})
	return mustCall(t, callRecord(1, proto.RPCVersion, proto.ProgNFS, proto.NFSVersion, proto.NFSProcWrite, proto.AuthNone, w.B)[4:])
}

func mustCall(t *testing.T, rec []byte) proto.Call {
	t.Helper()
	call, err := proto.ParseCall(rec)
	if err != nil {
		t.Fatal(err)
	}
	return call
}

// TestWriteOrder: handlers of registered WRITEs of one file are served
// smallest offset first, whatever order their goroutines start in; other
// files and other calls do not wait.
func TestWriteOrder(t *testing.T) {
	var o writeOrder
	var turns []*turn
	for _, off := range []uint64{0, 100, 200, 300} {
		turns = append(turns, o.register(writeCall(t, []byte("fileA"), off)))
	}
	other := o.register(writeCall(t, []byte("fileB"), 500))
	if o.register(mustCall(t, callRecord(1, proto.RPCVersion, proto.ProgNFS, proto.NFSVersion, proto.NFSProcGetAttr, proto.AuthNone, nil)[4:])) != nil {
		t.Fatal("a GETATTR was registered as a write")
	}
	other.wait() // another file: no wait
	other.done()
	var mu sync.Mutex
	var served []uint64
	var wg sync.WaitGroup
	for i := len(turns) - 1; i >= 0; i-- { // start the last first
		wg.Add(1)
		go func(t *turn) {
			defer wg.Done()
			t.wait()
			mu.Lock()
			served = append(served, t.off)
			mu.Unlock()
			t.done()
		}(turns[i])
	}
	wg.Wait()
	for i, off := range served {
		if off != uint64(i*100) {
			t.Fatalf("served in order %v", served)
		}
	}
	if len(o.files) != 0 {
		t.Fatalf("%d files left registered", len(o.files))
	}
}

// TestStreamWithWritesInFlight: a file written sequentially with many
// WRITEs in flight on one connection (as a kernel client pipelines them)
// becomes a few large slices, not one per write served out of order, and
// reads back intact.
func TestStreamWithWritesInFlight(t *testing.T) {
	e := newEnv(t)
	c, root := e.client(t)
	fh := createFile(t, c, root, "stream", 0o644)
	const window, bs, total = 8, 32 << 10, 4 << 20
	conn, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	data := randBytes(total, 7)
	// A sliding window: send WRITEs in offset order, keeping up to
	// window unanswered.
	replies := make(chan error, total/bs)
	go func() {
		for i := 0; i < total/bs; i++ {
			_, err := proto.ReadRecord(conn, 1<<20)
			replies <- err
		}
	}()
	sent, answered := 0, 0
	for off := 0; off < total; off += bs {
		for sent-answered >= window {
			if err := <-replies; err != nil {
				t.Fatal(err)
			}
			answered++
		}
		w := &proto.Writer{}
		w.Opaque(fh)
		w.Uint64(uint64(off))
		w.Uint32(bs)
		w.Uint32(proto.Unstable)
		w.Opaque(data[off : off+bs])
		rec := callRecord(uint32(off/bs+1), proto.RPCVersion, proto.ProgNFS, proto.NFSVersion, proto.NFSProcWrite, proto.AuthSys, w.B)
		if _, err := conn.Write(rec); err != nil {
			t.Fatal(err)
		}
		sent++
	}
	for answered < sent {
		if err := <-replies; err != nil {
			t.Fatal(err)
		}
		answered++
	}
	if _, err := c.Commit(fh); err != nil {
		t.Fatal(err)
	}
	ino := mustLookup(t, e, "stream")
	cs, err := e.m.Chunks(ctx, ino)
	if err != nil {
		t.Fatal(err)
	}
	slices := 0
	for _, ch := range cs {
		slices += len(ch.Slices)
	}
	// Served in order, the stream is one slice (a few if flushes cut it);
	// out of order it was tens of slices.
	if slices > 4 {
		t.Errorf("%d slices for a %d-byte stream of %d-byte writes", slices, total, bs)
	}
	got := make([]byte, 0, total)
	for len(got) < total {
		p, eof, err := c.Read(fh, uint64(len(got)), 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p...)
		if eof || len(p) == 0 {
			break
		}
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes, differ", len(got))
	}
}
