package nfs

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/nfs/nfsclient"
	"github.com/cairnfs/cairn/internal/nfs/proto"
)

// callRecord builds a call record (with its mark) with AUTH_SYS root.
func callRecord(xid, rpcv, prog, vers, proc, flavor uint32, args []byte) []byte {
	w := proto.Writer{B: make([]byte, 4)}
	w.Uint32(xid)
	w.Uint32(proto.MsgCall)
	w.Uint32(rpcv)
	w.Uint32(prog)
	w.Uint32(vers)
	w.Uint32(proc)
	w.Uint32(flavor)
	var cred proto.Writer
	if flavor == proto.AuthSys {
		proto.AuthSysParams{Machine: "t"}.Encode(&cred)
	}
	w.Opaque(cred.B)
	w.Uint32(proto.AuthNone)
	w.Opaque(nil)
	w.B = append(w.B, args...)
	return proto.AppendRecordMark(w.B)
}

// TestRPCErrors: every malformed or unsupported call gets its RPC error
// reply, and the connection goes on serving.
func TestRPCErrors(t *testing.T) {
	e := newEnv(t)
	conn, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	type reply struct {
		denied bool
		stat   uint32
		rest   []byte
	}
	roundTrip := func(rec []byte, xid uint32) reply {
		t.Helper()
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := conn.Write(rec); err != nil {
			t.Fatal(err)
		}
		got, err := proto.ReadRecord(conn, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		r := proto.NewReader(got)
		if x := r.Uint32(); x != xid {
			t.Fatalf("reply xid %d, want %d", x, xid)
		}
		r.Uint32()
		if r.Uint32() == proto.MsgDenied {
			return reply{denied: true, stat: r.Uint32(), rest: r.Rest()}
		}
		r.Uint32()
		r.Opaque(400)
		return reply{stat: r.Uint32(), rest: r.Rest()}
	}
	fh := e.srv.fh.encode(kindLive, 0, 1)
	var getattr proto.Writer
	getattr.Opaque(fh)
	cases := []struct {
		name   string
		rec    []byte
		denied bool
		stat   uint32
	}{
		{"NFS NULL", callRecord(1, 2, proto.ProgNFS, 3, 0, proto.AuthNone, nil), false, proto.Success},
		{"MOUNT NULL", callRecord(2, 2, proto.ProgMount, 3, 0, proto.AuthSys, nil), false, proto.Success},
		{"unknown program", callRecord(3, 2, 100099, 1, 0, proto.AuthSys, nil), false, proto.ProgUnavail},
		{"NFS version 4", callRecord(4, 2, proto.ProgNFS, 4, 0, proto.AuthSys, nil), false, proto.ProgMismatch},
		{"MOUNT version 1", callRecord(5, 2, proto.ProgMount, 1, 0, proto.AuthSys, nil), false, proto.ProgMismatch},
		{"procedure 22", callRecord(6, 2, proto.ProgNFS, 3, 22, proto.AuthSys, nil), false, proto.ProcUnavail},
		{"procedure 2^32-1", callRecord(7, 2, proto.ProgNFS, 3, 1<<32-1, proto.AuthSys, nil), false, proto.ProcUnavail},
		{"GETATTR without arguments", callRecord(8, 2, proto.ProgNFS, 3, 1, proto.AuthSys, nil), false, proto.GarbageArgs},
		{"GETATTR with a 1 GiB handle length", callRecord(9, 2, proto.ProgNFS, 3, 1, proto.AuthSys, []byte{0x40, 0, 0, 0}), false, proto.GarbageArgs},
		{"WRITE with a bad stable_how", callRecord(10, 2, proto.ProgNFS, 3, 7, proto.AuthSys, append(append([]byte(nil), getattr.B...), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 9, 0, 0, 0, 0)), false, proto.GarbageArgs},
		{"GETATTR", callRecord(11, 2, proto.ProgNFS, 3, 1, proto.AuthSys, getattr.B), false, proto.Success},
		{"RPC version 3", callRecord(12, 3, proto.ProgNFS, 3, 0, proto.AuthSys, nil), true, proto.RPCMismatch},
		{"RPCSEC_GSS", callRecord(13, 2, proto.ProgNFS, 3, 1, 6, getattr.B), true, proto.AuthError},
	}
	for i, tc := range cases {
		got := roundTrip(tc.rec, uint32(i+1))
		if got.denied != tc.denied || got.stat != tc.stat {
			t.Errorf("%s: denied %v stat %d, want %v %d", tc.name, got.denied, got.stat, tc.denied, tc.stat)
		}
	}
	// A bad AUTH_SYS body is AUTH_BADCRED.
	bad := callRecord(99, 2, proto.ProgNFS, 3, 0, proto.AuthNone, nil)
	binary.BigEndian.PutUint32(bad[4+24:], proto.AuthSys)
	binary.BigEndian.PutUint32(bad[4+28:], 4) // a 4-byte body: too short
	bad = append(bad[:4+32], append([]byte{0, 0, 0, 0}, bad[4+32:]...)...)
	bad = proto.AppendRecordMark(bad)
	if got := roundTrip(bad, 99); !got.denied || got.stat != proto.AuthError || binary.BigEndian.Uint32(got.rest) != proto.AuthBadCred {
		t.Errorf("bad AUTH_SYS body: %+v", got)
	}
}

// TestBrokenStreams: oversized, truncated and garbage records close the
// connection; the gateway keeps serving others.
func TestBrokenStreams(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		name string
		data []byte
	}{
		{"record mark of 2 GiB", []byte{0xff, 0xff, 0xff, 0xff}},
		{"fragments adding up past the limit", func() []byte {
			var b []byte
			for i := 0; i < 40; i++ {
				b = binary.BigEndian.AppendUint32(b, 64<<10)
				b = append(b, make([]byte, 64<<10)...)
			}
			return b
		}()},
		{"empty fragments forever", make([]byte, 4*2000)},
		{"not a call", proto.AppendRecordMark([]byte{0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1})},
		{"a record of 3 bytes", proto.AppendRecordMark([]byte{0, 0, 0, 0, 1, 2, 3})},
		{"a call header cut short", callRecord(1, 2, proto.ProgNFS, 3, 0, proto.AuthSys, nil)[:20]},
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	alloc0 := ms.TotalAlloc
	for _, tc := range cases {
		conn, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = conn.Write(tc.data)
		if c, ok := conn.(*net.TCPConn); ok && tc.name == "a call header cut short" {
			c.CloseWrite()
		}
		_, err = io.ReadAll(conn)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("%s: the connection stayed open", tc.name)
		}
		conn.Close()
	}
	// Nothing was allocated for what a record mark claims past the bound.
	runtime.ReadMemStats(&ms)
	if n := ms.TotalAlloc - alloc0; n > 256<<20 {
		t.Errorf("%d MiB allocated while serving the broken streams", n>>20)
	}
	c, err := nfsclient.Dial(e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Mount("/"); err != nil {
		t.Fatalf("gateway after broken streams: %v", err)
	}
}

// TestInFlightBound: a client that sends many calls without reading
// replies is bounded and does not wedge other connections.
func TestInFlightBound(t *testing.T) {
	e := newEnv(t)
	conn := flood(t, e.addr, 200000, nil)
	defer conn.Close()
	c, err := nfsclient.Dial(e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Mount("/"); err != nil {
		t.Fatalf("another client while one floods: %v", err)
	}
}

// flood connects to addr and sends up to n copies of the call record rec
// (nil: a NULL call) without reading a reply, for at most 2 s (the
// gateway stops reading once its replies are stuck: back-pressure). The
// caller closes the connection.
//
// Its receive buffer is fixed small before it connects: a loopback
// receive buffer may otherwise grow to tens of MiB (tcp_rmem), enough to
// take every reply, and then no reply write of the gateway ever waits.
func flood(t *testing.T, addr string, n int, rec []byte) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 16<<10)
		}); err != nil {
			return err
		}
		return serr
	}}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if rec == nil {
		rec = callRecord(1, 2, proto.ProgNFS, 3, 0, proto.AuthSys, nil)
	}
	conn.SetWriteDeadline(time.Now().Add(2 * time.Second))
	for range n {
		if _, err := conn.Write(rec); err != nil {
			break
		}
	}
	return conn
}
