package postgres_test

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/cairnfs/cairn/internal/testenv/pgtest"
)

// proxy forwards connections from a Unix socket of its own to the test
// server, and breaks them on request: the faults a real network or a dying
// server cause, at chosen moments.
type proxy struct {
	dir    string // socket directory, the host of URLs through the proxy
	target string // the server's socket

	mu    sync.Mutex
	conns []*proxyConn
	// cutAfterSend, when set, makes the next client write be forwarded
	// to the server, after which the connection is cut before any answer
	// reaches the client.
	cutAfterSend bool
}

type proxyConn struct {
	client, server net.Conn
}

func (c *proxyConn) close() {
	c.client.Close()
	c.server.Close()
}

// listenBeside listens on a PostgreSQL socket of srv's port in a new
// directory under /tmp (socket paths must stay short), named from
// prefix; target is srv's own socket.
func listenBeside(t *testing.T, srv *pgtest.Server, prefix string) (dir string, l net.Listener, target string) {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(srv.Port)
	l, err = net.Listen("unix", filepath.Join(dir, ".s.PGSQL."+port))
	if err != nil {
		t.Fatal(err)
	}
	return dir, l, filepath.Join(srv.SocketDir, ".s.PGSQL."+port)
}

// newProxy starts a proxy in front of srv, stopped when t ends.
func newProxy(t *testing.T, srv *pgtest.Server) *proxy {
	dir, l, target := listenBeside(t, srv, "cairn-pgproxy-")
	p := &proxy{dir: dir, target: target}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { p.serve(c) })
		}
	})
	t.Cleanup(func() {
		l.Close()
		p.cutAll()
		wg.Wait()
		os.RemoveAll(dir)
	})
	return p
}

func (p *proxy) serve(client net.Conn) {
	server, err := net.Dial("unix", p.target)
	if err != nil {
		client.Close()
		return
	}
	c := &proxyConn{client: client, server: server}
	p.mu.Lock()
	p.conns = append(p.conns, c)
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Go(func() { // server to client
		io.Copy(client, server)
		c.close()
	})
	buf := make([]byte, 64<<10)
	for {
		n, err := client.Read(buf)
		if err != nil {
			break
		}
		p.mu.Lock()
		cut := p.cutAfterSend
		p.cutAfterSend = false
		p.mu.Unlock()
		if cut {
			// Stop the answer: close the client side first, then let
			// the server have the request.
			client.Close()
		}
		if _, err := server.Write(buf[:n]); err != nil {
			break
		}
		if cut {
			break
		}
	}
	// Half-close towards the server: it reads the whole request, then
	// the end of the connection, and hangs up; the copy of its answer,
	// which fails if the client side is closed, then ends.
	client.Close()
	server.(*net.UnixConn).CloseWrite()
	wg.Wait()
	server.Close()
}

// cutAll breaks every connection through the proxy.
func (p *proxy) cutAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.close()
	}
	p.conns = nil
}

// cutAfterNextSend arranges for the next request of any client to reach the
// server and its answer to be lost.
func (p *proxy) cutAfterNextSend() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutAfterSend = true
}
