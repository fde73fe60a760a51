package bench

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/daemon"
	"github.com/cairnfs/cairn/internal/nfs"
)

// startGateway formats an embedded volume and serves it over NFS with
// READs and WRITEs of at most maxIO bytes; it returns the address.
func startGateway(t *testing.T, maxIO int) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	meta := "pebble://" + t.TempDir() + "/meta"
	if _, err := daemon.Format(ctx, daemon.FormatOptions{MetaURL: meta, Name: "nfsbench"}); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- daemon.Gateway(ctx, daemon.GatewayOptions{
			Volume: daemon.VolumeOptions{MetaURL: meta},
			Listen: "127.0.0.1:0",
			NFS:    nfs.Options{MaxIO: maxIO},
			Ready:  func(addr string) { ready <- addr },
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("gateway: %v", err)
		}
	})
	select {
	case addr := <-ready:
		return addr
	case err := <-done:
		t.Fatalf("gateway: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("gateway not ready")
	}
	return ""
}

// TestNFSTransfer writes and reads one file in application calls of odd
// sizes through every transfer mode and checks the bytes and the number
// of calls: gathered into calls of the server's size (FSINFO), of an
// asked size (capped by the server's), or one per application call.
func TestNFSTransfer(t *testing.T) {
	const maxIO = 64 << 10
	addr := startGateway(t, maxIO)
	data := make([]byte, 1<<20+1234)
	pattern(data)
	for _, tc := range []struct {
		name            string
		transfer        int
		window          int
		wantSize        int // rsize and wsize; 0: per call
		writeBS, readBS int
	}{
		{"server", 0, 4, maxIO, 3000, 5000},
		{"asked", 16 << 10, 2, 16 << 10, 8192, 100_000},
		{"capped", 1 << 20, 1, maxIO, 70_000, 4096},
		{"per-call", PerCall, 4, 0, 8192, 8192},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nt, err := DialNFS(NFSOptions{Addr: addr, Window: tc.window, Transfer: tc.transfer})
			if err != nil {
				t.Fatal(err)
			}
			if nt.rsize != tc.wantSize || nt.wsize != tc.wantSize {
				t.Fatalf("rsize %d wsize %d, want %d", nt.rsize, nt.wsize, tc.wantSize)
			}
			c, err := nt.Conn()
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			path := "f-" + tc.name
			w, err := c.OpenWrite(path)
			if err != nil {
				t.Fatal(err)
			}
			writes := 0
			for off := 0; off < len(data); off += tc.writeBS {
				if err := w.Write(data[off:min(off+tc.writeBS, len(data))]); err != nil {
					t.Fatal(err)
				}
				writes++
			}
			if err := w.Sync(); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			want := writes
			if tc.wantSize > 0 {
				want = (len(data) + tc.wantSize - 1) / tc.wantSize
			}
			if got := w.(*nfsWriter).calls; got != want {
				t.Errorf("%d WRITEs for %d writes, want %d", got, writes, want)
			}
			if n, err := c.Stat(path); err != nil || n != int64(len(data)) {
				t.Fatalf("stat: %d, %v", n, err)
			}

			r, err := c.OpenRead(path)
			if err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			buf := make([]byte, tc.readBS)
			for {
				n, err := r.Read(buf)
				got.Write(buf[:n])
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if got.Len() > len(data) {
					t.Fatalf("read %d bytes of a %d-byte file", got.Len(), len(data))
				}
			}
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Bytes(), data) {
				t.Fatalf("read back %d bytes, not the %d written", got.Len(), len(data))
			}
			if tc.wantSize > 0 {
				// The reads past the end that the window sent are counted.
				if calls, max := r.(*nfsReader).calls, len(data)/tc.wantSize+tc.window; calls > max {
					t.Errorf("%d READs, want at most %d", calls, max)
				}
			}
		})
	}
}
