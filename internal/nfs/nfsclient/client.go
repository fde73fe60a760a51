// Package nfsclient is a small NFSv3 client over ONC RPC on TCP, enough to
// drive Cairn's NFS gateway from tests and tools: one call at a time on
// one connection, AUTH_SYS credentials. It is not a general-purpose
// client: no retransmission, no portmapper, no caching.
package nfsclient

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/cairnfs/cairn/internal/nfs/proto"
)

// Client is one connection to a gateway. Safe for concurrent use (calls
// are serialised).
type Client struct {
	mu   sync.Mutex
	conn net.Conn
	xid  uint32
	// Auth is the credential sent with every call (default: AUTH_SYS
	// uid 0, gid 0).
	Auth proto.Auth
	// Timeout bounds each call (default 30 s).
	Timeout time.Duration
}

// Dial connects to addr (host:port of the gateway).
func Dial(addr string) (*Client, error) {
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	c := &Client{conn: conn, xid: uint32(time.Now().UnixNano()), Timeout: 30 * time.Second}
	c.SetUser(0, 0)
	return c, nil
}

// SetUser makes later calls use AUTH_SYS with these ids.
func (c *Client) SetUser(uid, gid uint32, gids ...uint32) {
	var w proto.Writer
	proto.AuthSysParams{Machine: "nfsclient", Uid: uid, Gid: gid, Gids: gids}.Encode(&w)
	c.mu.Lock()
	c.Auth = proto.Auth{Flavor: proto.AuthSys, Body: w.B}
	c.mu.Unlock()
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

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

// Call sends one call and returns the procedure's results.
func (c *Client) Call(prog, vers, proc uint32, args []byte) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.xid++
	xid := c.xid
	w := proto.Writer{B: make([]byte, 4, 128+len(args))}
	w.Uint32(xid)
	w.Uint32(proto.MsgCall)
	w.Uint32(proto.RPCVersion)
	w.Uint32(prog)
	w.Uint32(vers)
	w.Uint32(proc)
	w.Uint32(c.Auth.Flavor)
	w.Opaque(c.Auth.Body)
	w.Uint32(proto.AuthNone)
	w.Opaque(nil)
	w.B = append(w.B, args...)
	_ = c.conn.SetDeadline(time.Now().Add(c.Timeout))
	if _, err := c.conn.Write(proto.AppendRecordMark(w.B)); err != nil {
		return nil, err
	}
	for {
		rec, err := proto.ReadRecord(c.conn, 4<<20)
		if err != nil {
			return nil, err
		}
		r := proto.NewReader(rec)
		if r.Uint32() != xid {
			continue // a reply to an abandoned call
		}
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
