package proto

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// ONC RPC message constants (RFC 5531).
const (
	RPCVersion = 2

	MsgCall  = 0
	MsgReply = 1

	MsgAccepted = 0
	MsgDenied   = 1

	Success      = 0 // accept_stat
	ProgUnavail  = 1
	ProgMismatch = 2
	ProcUnavail  = 3
	GarbageArgs  = 4
	SystemErr    = 5

	RPCMismatch = 0 // reject_stat
	AuthError   = 1

	AuthBadCred      = 1 // auth_stat
	AuthRejectedCred = 2
	AuthBadVerf      = 3
	AuthTooWeak      = 5

	AuthNone = 0 // auth flavors
	AuthSys  = 1

	// MaxAuthBody is the largest credential or verifier body.
	MaxAuthBody = 400
	// MaxAuthSysGids is the most supplementary groups AUTH_SYS carries.
	MaxAuthSysGids = 16
	// MaxMachineName bounds AUTH_SYS's machine name.
	MaxMachineName = 255
)

// lastFragment marks the final fragment of a record.
const lastFragment = 1 << 31

// ErrRecordTooLarge is returned by ReadRecord when a record exceeds its
// bound; the stream cannot be resynchronised and should be closed.
var ErrRecordTooLarge = errors.New("rpc: record exceeds size limit")

// maxFragments bounds the fragments of one record, so a stream of empty
// fragments cannot keep a reader busy forever.
const maxFragments = 1024

// ReadRecord reads one record (RFC 5531 §11: fragments, the last one
// flagged) of at most max bytes. Memory is allocated as fragment data
// arrives, never from an unchecked length. io.EOF means the stream ended
// cleanly between records.
func ReadRecord(r io.Reader, max int) ([]byte, error) {
	return ReadRecordTo(r, max, nil)
}

// ReadRecordTo is ReadRecord into buf's space: the record is appended to
// buf[:0], which is grown (as ReadRecord allocates) only when its
// capacity is short, so a caller that reuses large buffers reads large
// records without allocating or zeroing memory. buf's contents are lost
// even on error.
func ReadRecordTo(r io.Reader, max int, buf []byte) ([]byte, error) {
	rec := buf[:0]
	var hdr [4]byte
	for i := 0; ; i++ {
		if i == maxFragments {
			return nil, fmt.Errorf("%w: more than %d fragments", ErrRecordTooLarge, maxFragments)
		}
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if err == io.EOF && i > 0 {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		h := binary.BigEndian.Uint32(hdr[:])
		n := int(h &^ lastFragment)
		if len(rec)+n > max {
			return nil, fmt.Errorf("%w: %d bytes > %d", ErrRecordTooLarge, len(rec)+n, max)
		}
		start := len(rec)
		rec = slices.Grow(rec, n)[:start+n]
		if _, err := io.ReadFull(r, rec[start:]); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if h&lastFragment != 0 {
			return rec, nil
		}
	}
}

// PeekRecordSize returns the length of the next record's first fragment
// (the whole record if it has one), without consuming it; ok is false if
// the mark cannot be read yet.
func PeekRecordSize(br *bufio.Reader) (n int, ok bool) {
	hdr, err := br.Peek(4)
	if err != nil {
		return 0, false
	}
	return int(binary.BigEndian.Uint32(hdr) &^ lastFragment), true
}

// AppendRecordMark returns b (which starts with 4 bytes reserved for the
// mark) with the mark of a one-fragment record filled in.
func AppendRecordMark(b []byte) []byte {
	binary.BigEndian.PutUint32(b[:4], uint32(len(b)-4)|lastFragment)
	return b
}

// Auth is an opaque_auth: a flavor and its body (aliasing the message).
type Auth struct {
	Flavor uint32
	Body   []byte
}

// Call is a decoded call header; Args are the procedure's arguments.
type Call struct {
	Xid   uint32
	Prog  uint32
	Vers  uint32
	Proc  uint32
	Cred  Auth
	Verf  Auth
	Args  []byte
	RPCV  uint32 // the RPC version asked for; RPCVersion when valid
	Valid bool   // false: the header was a call but with a wrong RPC version
}

// ErrNotCall is returned by ParseCall for a message that is not a call.
var ErrNotCall = errors.New("rpc: not a call")

// ParseCall decodes a call header. A message too short to hold an xid, or
// not a call, is an error (nothing can be replied). A call with an RPC
// version other than 2 is returned with Valid false so the caller can
// send RPC_MISMATCH.
func ParseCall(rec []byte) (Call, error) {
	r := NewReader(rec)
	var c Call
	c.Xid = r.Uint32()
	typ := r.Uint32()
	if r.Err() != nil {
		return c, r.Err()
	}
	if typ != MsgCall {
		return c, fmt.Errorf("%w: message type %d", ErrNotCall, typ)
	}
	c.RPCV = r.Uint32()
	if r.Err() != nil {
		return c, r.Err()
	}
	if c.RPCV != RPCVersion {
		return c, nil
	}
	c.Prog = r.Uint32()
	c.Vers = r.Uint32()
	c.Proc = r.Uint32()
	c.Cred = Auth{Flavor: r.Uint32(), Body: r.Opaque(MaxAuthBody)}
	c.Verf = Auth{Flavor: r.Uint32(), Body: r.Opaque(MaxAuthBody)}
	if r.Err() != nil {
		return c, r.Err()
	}
	c.Args = r.Rest()
	c.Valid = true
	return c, nil
}

// AuthSysParams is the body of an AUTH_SYS credential.
type AuthSysParams struct {
	Stamp   uint32
	Machine string
	Uid     uint32
	Gid     uint32
	Gids    []uint32
}

// ParseAuthSys decodes an AUTH_SYS credential body.
func ParseAuthSys(body []byte) (AuthSysParams, error) {
	r := NewReader(body)
	var a AuthSysParams
	a.Stamp = r.Uint32()
	a.Machine = r.String(MaxMachineName)
	a.Uid = r.Uint32()
	a.Gid = r.Uint32()
	n := r.Count(MaxAuthSysGids, 4)
	if n > 0 {
		a.Gids = make([]uint32, n)
		for i := range a.Gids {
			a.Gids[i] = r.Uint32()
		}
	}
	if r.Err() != nil {
		return AuthSysParams{}, fmt.Errorf("AUTH_SYS credential: %w", r.Err())
	}
	if r.Len() != 0 {
		return AuthSysParams{}, fmt.Errorf("AUTH_SYS credential: %d trailing bytes", r.Len())
	}
	return a, nil
}

// Encode appends the AUTH_SYS body.
func (a AuthSysParams) Encode(w *Writer) {
	w.Uint32(a.Stamp)
	w.String(a.Machine)
	w.Uint32(a.Uid)
	w.Uint32(a.Gid)
	w.Uint32(uint32(len(a.Gids)))
	for _, g := range a.Gids {
		w.Uint32(g)
	}
}

// NewReply starts a record holding an accepted reply with status stat
// (AUTH_NONE verifier); the results follow. Four bytes are reserved for
// the record mark (AppendRecordMark).
func NewReply(xid, stat uint32) *Writer {
	w := &Writer{B: make([]byte, 4, 512)}
	w.Uint32(xid)
	w.Uint32(MsgReply)
	w.Uint32(MsgAccepted)
	w.Uint32(AuthNone)
	w.Uint32(0)
	w.Uint32(stat)
	return w
}

// NewDenied starts a record holding a denied reply.
func NewDenied(xid, rejectStat uint32) *Writer {
	w := &Writer{B: make([]byte, 4, 64)}
	w.Uint32(xid)
	w.Uint32(MsgReply)
	w.Uint32(MsgDenied)
	w.Uint32(rejectStat)
	return w
}
