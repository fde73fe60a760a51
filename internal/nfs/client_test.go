package nfs

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/nfs/nfsclient"
	"github.com/cairnfs/cairn/internal/nfs/proto"
)

// TestSharedClient: goroutines sharing one client (one connection, their
// calls pipelined on it) each get their own replies: every goroutine
// streams a file with WRITEs in flight, mixes in blocking calls, and
// reads its file back through READs in flight.
func TestSharedClient(t *testing.T) {
	e := newEnv(t)
	c, root := e.client(t)
	const workers, window, bs, size = 6, 4, 8 << 10, 256 << 10
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if err := sharedClientWorker(c, root, fmt.Sprintf("f%d", i), randBytes(size, int64(i)), window, bs); err != nil {
				errs <- fmt.Errorf("worker %d: %w", i, err)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	names, err := c.ReadDir(root, 4096)
	if err != nil || len(names) != workers+2 { // with . and ..
		t.Fatalf("readdir: %v %v", names, err)
	}
}

func sharedClientWorker(c *nfsclient.Client, root []byte, name string, data []byte, window, bs int) error {
	fh, err := c.Create(root, name, proto.CreateGuarded, proto.Sattr3{Mode: u32(0o644)}, [8]byte{})
	if err != nil {
		return err
	}
	var inflight []*nfsclient.WriteCall
	reap := func() error {
		res, err := inflight[0].Wait()
		inflight = inflight[1:]
		if err == nil && int(res.Count) != bs {
			err = fmt.Errorf("short write %d", res.Count)
		}
		return err
	}
	for off := 0; off < len(data); off += bs {
		if len(inflight) == window {
			if err := reap(); err != nil {
				return err
			}
		}
		k, err := c.SendWrite(fh, uint64(off), data[off:off+bs], proto.Unstable)
		if err != nil {
			return err
		}
		inflight = append(inflight, k)
		if off%(8*bs) == 0 { // a blocking call amid the stream
			if _, _, err := c.Lookup(root, name); err != nil {
				return fmt.Errorf("lookup: %w", err)
			}
		}
	}
	for len(inflight) > 0 {
		if err := reap(); err != nil {
			return err
		}
	}
	if _, err := c.Commit(fh); err != nil {
		return err
	}
	a, err := c.GetAttr(fh)
	if err != nil || a.Size != uint64(len(data)) {
		return fmt.Errorf("getattr: size %d, %v", a.Size, err)
	}
	var reads []*nfsclient.ReadCall
	for off := 0; off < len(data); off += bs {
		k, err := c.SendRead(fh, uint64(off), uint32(bs))
		if err != nil {
			return err
		}
		reads = append(reads, k)
	}
	var got []byte
	for _, k := range reads {
		p, _, err := k.Wait()
		if err != nil {
			return err
		}
		if k.RoundTrip() <= 0 {
			return errors.New("no round trip time")
		}
		got = append(got, p...)
	}
	if !bytes.Equal(got, data) {
		return fmt.Errorf("read back %d bytes, differ", len(got))
	}
	return nil
}

// silentServer accepts connections and reads them without ever replying.
func silentServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	t.Cleanup(func() { l.Close(); conns.Wait() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer conns.Done()
				defer conn.Close()
				buf := make([]byte, 4096)
				for {
					if _, err := conn.Read(buf); err != nil {
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}

// TestClientCloseAndTimeout: Close fails the calls waiting for replies
// and later calls with ErrClosed; a call with no reply times out without
// breaking the connection for others.
func TestClientCloseAndTimeout(t *testing.T) {
	addr := silentServer(t)
	c, err := nfsclient.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Timeout = 50 * time.Millisecond
	if _, err := c.Call(proto.ProgNFS, proto.NFSVersion, proto.NFSProcNull, nil); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("call to a silent server: %v, want a deadline error", err)
	}
	c.Timeout = 0
	var pending []*nfsclient.Pending
	for i := 0; i < 5; i++ {
		p, err := c.Send(proto.ProgNFS, proto.NFSVersion, proto.NFSProcNull, nil)
		if err != nil {
			t.Fatalf("send after a timed-out call: %v", err)
		}
		pending = append(pending, p)
	}
	var wg sync.WaitGroup
	for _, p := range pending {
		wg.Add(1)
		go func(p *nfsclient.Pending) {
			defer wg.Done()
			if _, err := p.Wait(); !errors.Is(err, nfsclient.ErrClosed) {
				t.Errorf("pending call at close: %v, want ErrClosed", err)
			}
		}(p)
	}
	c.Close()
	wg.Wait()
	if _, err := c.Call(proto.ProgNFS, proto.NFSVersion, proto.NFSProcNull, nil); !errors.Is(err, nfsclient.ErrClosed) {
		t.Fatalf("call after close: %v, want ErrClosed", err)
	}
}
