package nfs

import (
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/nfs/proto"
)

// A connection that keeps calling outlives the idle timeout many times
// over (the read deadline moves with its calls, if lazily); one that falls
// silent is closed after about the timeout.
func TestIdleTimeout(t *testing.T) {
	const idle = 300 * time.Millisecond
	e := newEnvWith(t, Options{IdleTimeout: idle})
	busy, root := e.client(t)
	quiet, qroot := e.client(t)
	for end := time.Now().Add(4 * idle); time.Now().Before(end); {
		if _, err := busy.GetAttr(root); err != nil {
			t.Fatalf("GETATTR on a busy connection: %v", err)
		}
		time.Sleep(idle / 5)
	}
	// quiet has been silent for 4 x idle since its MOUNT.
	if _, err := quiet.GetAttr(qroot); err == nil {
		t.Fatal("GETATTR succeeded on a connection idle for 4x the timeout")
	}
	if _, err := busy.GetAttr(root); err != nil {
		t.Fatalf("busy connection closed: %v", err)
	}
}

// A client that floods calls and never reads the replies is disconnected
// once a reply write has waited about the write timeout, and the gateway
// goes on serving others.
func TestWriteTimeout(t *testing.T) {
	const wt = 300 * time.Millisecond
	e := newEnvWith(t, Options{WriteTimeout: wt})
	// READs of 1 MiB: a few replies fill the socket buffers. With NULL
	// calls the gateway had to answer hundreds of thousands first, and on
	// a loaded machine it had not within the test's wait.
	c, root := e.client(t)
	fh, err := c.Create(root, "big", proto.CreateUnchecked, proto.Sattr3{}, [8]byte{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(fh, 0, make([]byte, 1<<20), proto.FileSync); err != nil {
		t.Fatal(err)
	}
	var args proto.Writer
	args.Opaque(fh)
	args.Uint64(0)
	args.Uint32(1 << 20)
	c.Close()
	conn := flood(t, e.addr, 100000, callRecord(1, 2, proto.ProgNFS, 3, proto.NFSProcRead, proto.AuthSys, args.B))
	defer conn.Close()
	conns := func() int {
		e.srv.mu.Lock()
		defer e.srv.mu.Unlock()
		return len(e.srv.conns)
	}
	deadline := time.Now().Add(10 * wt)
	for conns() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections left %v after the flood; the stuck one was not closed", conns(), 10*wt)
		}
		time.Sleep(wt / 10)
	}
	c, root = e.client(t)
	if _, err := c.GetAttr(root); err != nil {
		t.Fatalf("GETATTR after the flooding client was cut: %v", err)
	}
}
