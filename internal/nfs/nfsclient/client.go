// Package nfsclient is a small NFSv3 client over ONC RPC on TCP, enough to
// drive Cairn's NFS gateway from tests and tools: one connection, calls
// pipelined on it, AUTH_SYS credentials. It is not a general-purpose
// client: no retransmission, no portmapper, no caching.
package nfsclient

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/cairnfs/cairn/internal/nfs/proto"
)

// ErrClosed is returned by calls made after Close, and (wrapped) by calls
// pending when the client was closed or the connection broke.
var ErrClosed = errors.New("nfsclient: connection closed")

// maxReply bounds a reply record.
const maxReply = 4 << 20

// Client is one connection to a gateway. Safe for concurrent use: calls
// are pipelined on the connection. Each call's record is written whole
// under a send lock, so calls are sent in the order they reach it (and
// calls sent from one goroutine, in that goroutine's order); one reader
// goroutine hands each reply to its call by xid, in whatever order the
// server answers.
type Client struct {
	conn net.Conn

	sendMu sync.Mutex // serialises sends; guards xid and Auth
	xid    uint32
	// Auth is the credential sent with every call (default: AUTH_SYS
	// uid 0, gid 0). Set it with SetUser once calls may be running.
	Auth proto.Auth
	// Timeout bounds each call from its send to its reply (default 30 s;
	// zero or less: no bound). A call that times out is abandoned: its
	// late reply is dropped.
	Timeout time.Duration

	mu      sync.Mutex // guards pending and err
	pending map[uint32]*Pending
	err     error         // why the connection is unusable; set once
	done    chan struct{} // closed when the reader has returned

	// bufs holds large reply records given back by ReadCall.Release,
	// which the reader fills again instead of allocating (and zeroing)
	// a record per READ.
	bufs sync.Pool // of *[]byte, capacity at least largeReply
}

// largeReply is the size from which a reply record keeps the buffer it
// was read into (and may give it back with ReadCall.Release); smaller
// ones are copied out of it.
const largeReply = 64 << 10

// Dial connects to addr (host:port of the gateway).
func Dial(addr string) (*Client, error) {
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	c := &Client{
		conn:    conn,
		xid:     uint32(time.Now().UnixNano()),
		Timeout: 30 * time.Second,
		pending: make(map[uint32]*Pending),
		done:    make(chan struct{}),
	}
	c.SetUser(0, 0)
	go c.readReplies()
	return c, nil
}

// SetUser makes later calls use AUTH_SYS with these ids.
func (c *Client) SetUser(uid, gid uint32, gids ...uint32) {
	var w proto.Writer
	proto.AuthSysParams{Machine: "nfsclient", Uid: uid, Gid: gid, Gids: gids}.Encode(&w)
	c.sendMu.Lock()
	c.Auth = proto.Auth{Flavor: proto.AuthSys, Body: w.B}
	c.sendMu.Unlock()
}

// Close closes the connection and waits for the reader to stop; calls
// still waiting for a reply fail with ErrClosed.
func (c *Client) Close() error {
	c.fail(ErrClosed)
	err := c.conn.Close()
	<-c.done
	return err
}

// fail records why the connection cannot be used (the first reason
// wins), fails the pending calls and closes the connection.
func (c *Client) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	err = c.err
	pending := c.pending
	c.pending = nil
	c.mu.Unlock()
	for _, p := range pending {
		p.finish(nil, err)
	}
	_ = c.conn.Close()
}

// readReplies hands each reply record to the call with its xid; replies
// to abandoned calls are dropped. It returns when the connection fails.
func (c *Client) readReplies() {
	defer close(c.done)
	br := bufio.NewReaderSize(c.conn, 64<<10)
	var buf []byte // a released record to read into, or nil
	for {
		if buf == nil {
			if b, ok := c.bufs.Get().(*[]byte); ok {
				buf = *b
			}
		}
		rec, err := proto.ReadRecordTo(br, maxReply, buf)
		if err != nil {
			c.fail(fmt.Errorf("%w: %w", ErrClosed, err))
			return
		}
		switch {
		case len(rec) >= largeReply:
			buf = nil // the call has it now
		case buf != nil:
			rec = bytes.Clone(rec) // keep buf for the next record
		}
		now := time.Now()
		xid := proto.NewReader(rec).Uint32()
		c.mu.Lock()
		p := c.pending[xid]
		delete(c.pending, xid)
		c.mu.Unlock()
		if p != nil {
			p.recv = now
			p.finish(rec, nil)
		}
	}
}

// RPCError is a call the server did not accept (or denied).
type RPCError struct {
	Denied bool
	Stat   uint32 // accept_stat, or reject_stat when Denied
}

func (e *RPCError) Error() string {
	if e.Denied {
		return fmt.Sprintf("rpc: call denied (reject_stat %d)", e.Stat)
	}
	return fmt.Sprintf("rpc: call not accepted (accept_stat %d)", e.Stat)
}

// Pending is a call that was sent; Wait takes its reply.
type Pending struct {
	c    *Client
	xid  uint32
	sent time.Time
	recv time.Time // set by the reader before done is closed
	rec  []byte
	err  error
	done chan struct{}
}

func (p *Pending) finish(rec []byte, err error) {
	p.rec, p.err = rec, err
	close(p.done)
}

// Done is closed when the reply has arrived or the call has failed
// (Wait then returns at once).
func (p *Pending) Done() <-chan struct{} { return p.done }

// RoundTrip is the time from just before the call was sent to the
// arrival of its reply (zero if no reply arrived). Valid after Wait.
func (p *Pending) RoundTrip() time.Duration {
	if p.recv.IsZero() {
		return 0
	}
	return p.recv.Sub(p.sent)
}

// Wait waits for the reply (or the client's Timeout since the send, or
// Close) and returns the procedure's results. Call it once per Pending.
func (p *Pending) Wait() ([]byte, error) {
	if d := p.c.Timeout; d > 0 {
		t := time.NewTimer(d - time.Since(p.sent))
		select {
		case <-p.done:
			t.Stop()
		case <-t.C:
			p.c.mu.Lock()
			_, mine := p.c.pending[p.xid]
			delete(p.c.pending, p.xid)
			p.c.mu.Unlock()
			if mine {
				return nil, fmt.Errorf("rpc: xid %d: no reply in %v: %w", p.xid, d, os.ErrDeadlineExceeded)
			}
			<-p.done // delivered or failed meanwhile
		}
	} else {
		<-p.done
	}
	if p.err != nil {
		return nil, p.err
	}
	r := proto.NewReader(p.rec)
	r.Uint32() // xid
	if r.Uint32() != proto.MsgReply {
		return nil, errors.New("rpc: not a reply")
	}
	if r.Uint32() == proto.MsgDenied {
		return nil, &RPCError{Denied: true, Stat: r.Uint32()}
	}
	r.Uint32()
	r.Opaque(proto.MaxAuthBody)
	if st := r.Uint32(); st != proto.Success {
		return nil, &RPCError{Stat: st}
	}
	if r.Err() != nil {
		return nil, r.Err()
	}
	return r.Rest(), nil
}

// Send sends one call and returns without waiting for the reply. The
// record is written before Send returns, so calls sent one after the
// other from one goroutine reach the server in that order. args are not
// kept.
func (c *Client) Send(prog, vers, proc uint32, args []byte) (*Pending, error) {
	return c.send(prog, vers, proc, len(args), func(w *proto.Writer) { w.B = append(w.B, args...) })
}

// send is Send with the arguments appended by args (about size bytes)
// straight into the record, which large WRITEs need not copy twice.
func (c *Client) send(prog, vers, proc uint32, size int, args func(w *proto.Writer)) (*Pending, error) {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	c.xid++
	p := &Pending{c: c, xid: c.xid, done: make(chan struct{})}
	w := proto.Writer{B: make([]byte, 4, 128+size)}
	w.Uint32(p.xid)
	w.Uint32(proto.MsgCall)
	w.Uint32(proto.RPCVersion)
	w.Uint32(prog)
	w.Uint32(vers)
	w.Uint32(proc)
	w.Uint32(c.Auth.Flavor)
	w.Opaque(c.Auth.Body)
	w.Uint32(proto.AuthNone)
	w.Opaque(nil)
	args(&w)

	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	c.pending[p.xid] = p // before the write: the reply may beat Write's return
	c.mu.Unlock()

	p.sent = time.Now()
	var deadline time.Time // none
	if c.Timeout > 0 {
		deadline = p.sent.Add(c.Timeout)
	}
	_ = c.conn.SetWriteDeadline(deadline)
	if _, err := c.conn.Write(proto.AppendRecordMark(w.B)); err != nil {
		// A record cut short breaks the stream for every call.
		c.fail(fmt.Errorf("%w: %w", ErrClosed, err))
		return nil, err
	}
	return p, nil
}

// Call sends one call and returns the procedure's results.
func (c *Client) Call(prog, vers, proc uint32, args []byte) ([]byte, error) {
	p, err := c.Send(prog, vers, proc, args)
	if err != nil {
		return nil, err
	}
	return p.Wait()
}

// MountStatusError is a mountstat3 other than MNT3_OK.
type MountStatusError uint32

func (e MountStatusError) Error() string { return fmt.Sprintf("mount status %d", uint32(e)) }

// Mount calls MNT and returns the handle of path; a refusal is a
// MountStatusError.
func (c *Client) Mount(path string) ([]byte, error) {
	var w proto.Writer
	w.String(path)
	res, err := c.Call(proto.ProgMount, proto.MountVers3, proto.MountProcMnt, w.B)
	if err != nil {
		return nil, err
	}
	r := proto.NewReader(res)
	if st := r.Uint32(); st != proto.MntOK {
		return nil, fmt.Errorf("mount %s: %w", path, MountStatusError(st))
	}
	fh := r.Opaque(proto.MaxFHSize)
	return append([]byte(nil), fh...), r.Err()
}

// ExportEntry is one export listed by EXPORT: its path and the client
// groups (networks, host names) it is served to; none means every client.
type ExportEntry struct {
	Dir    string
	Groups []string
}

// Exports calls the MOUNT procedure EXPORT (what showmount -e shows).
func (c *Client) Exports() ([]ExportEntry, error) {
	res, err := c.Call(proto.ProgMount, proto.MountVers3, proto.MountProcExport, nil)
	if err != nil {
		return nil, err
	}
	r := proto.NewReader(res)
	var out []ExportEntry
	for r.Bool() {
		e := ExportEntry{Dir: r.String(proto.MaxMountPath)}
		for r.Bool() {
			e.Groups = append(e.Groups, r.String(proto.MaxMountName))
		}
		out = append(out, e)
		if r.Err() != nil || len(out) > 1024 {
			break
		}
	}
	return out, r.Err()
}

// MountAt connects to the MOUNT program at mountAddr (host:port), calls
// MNT for path and returns the handle; for servers that serve MOUNT on
// another port than NFS.
func MountAt(mountAddr, path string) ([]byte, error) {
	c, err := Dial(mountAddr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Mount(path)
}
