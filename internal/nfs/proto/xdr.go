// Package proto holds the wire formats the NFS gateway and its test client
// share: an XDR encoder and a strict decoder (RFC 4506), ONC RPC record
// marking and message headers (RFC 5531), and the program, procedure and
// status numbers of NFSv3 and MOUNTv3 (RFC 1813), and the types of NLMv4
// and NSMv1 (nlm.go). It knows nothing of
// Cairn: no vfs, no meta, no policy.
//
// The decoder never trusts a count: every length is checked against its
// protocol limit and against the bytes left in the message before anything
// is allocated, and the first error sticks (later reads return zero
// values), so handlers decode a whole argument list and check Err once.
package proto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
)

// ErrShort is returned when a message ends before its fields do.
var ErrShort = errors.New("xdr: message truncated")

// ErrTooLong is returned when a length or count exceeds its limit.
var ErrTooLong = errors.New("xdr: length exceeds limit")

// Reader decodes XDR from a byte slice it does not copy: byte slices it
// returns alias the input and are valid as long as the input is. Not safe
// for concurrent use.
type Reader struct {
	b   []byte
	off int
	err error
}

// NewReader returns a Reader over b.
func NewReader(b []byte) *Reader { return &Reader{b: b} }

// Err returns the first decoding error, or nil.
func (r *Reader) Err() error { return r.err }

// Len returns the number of bytes not yet read.
func (r *Reader) Len() int { return len(r.b) - r.off }

// Rest returns the bytes not yet read.
func (r *Reader) Rest() []byte { return r.b[r.off:] }

func (r *Reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

func (r *Reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > r.Len() {
		r.fail(ErrShort)
		return nil
	}
	p := r.b[r.off : r.off+n]
	r.off += n
	return p
}

// Uint32 reads an unsigned int.
func (r *Reader) Uint32() uint32 {
	p := r.take(4)
	if p == nil {
		return 0
	}
	return binary.BigEndian.Uint32(p)
}

// Uint64 reads an unsigned hyper.
func (r *Reader) Uint64() uint64 {
	p := r.take(8)
	if p == nil {
		return 0
	}
	return binary.BigEndian.Uint64(p)
}

// Bool reads a bool; values other than 0 and 1 are an error.
func (r *Reader) Bool() bool {
	v := r.Uint32()
	if v > 1 {
		r.fail(fmt.Errorf("xdr: bool value %d", v))
		return false
	}
	return v == 1
}

// Fixed reads fixed-length opaque data of n bytes (and its padding).
func (r *Reader) Fixed(n int) []byte {
	p := r.take(n)
	r.take(pad(n))
	if r.err != nil {
		return nil
	}
	return p
}

// Opaque reads variable-length opaque data of at most max bytes.
func (r *Reader) Opaque(max int) []byte {
	n := r.Uint32()
	if r.err != nil {
		return nil
	}
	if uint64(n) > uint64(max) {
		r.fail(fmt.Errorf("%w: %d bytes > %d", ErrTooLong, n, max))
		return nil
	}
	if int(n) > r.Len() {
		r.fail(ErrShort)
		return nil
	}
	return r.Fixed(int(n))
}

// String reads a string of at most max bytes.
func (r *Reader) String(max int) string { return string(r.Opaque(max)) }

// Count reads an array length of at most max elements, each taking at
// least minSize bytes on the wire: a count that the rest of the message
// cannot hold is an error before the caller allocates anything.
func (r *Reader) Count(max, minSize int) int {
	n := r.Uint32()
	if r.err != nil {
		return 0
	}
	if uint64(n) > uint64(max) {
		r.fail(fmt.Errorf("%w: %d elements > %d", ErrTooLong, n, max))
		return 0
	}
	if uint64(n)*uint64(minSize) > uint64(r.Len()) {
		r.fail(ErrShort)
		return 0
	}
	return int(n)
}

func pad(n int) int { return (4 - n%4) % 4 }

// Writer appends XDR to a byte slice. The zero value is ready to use.
type Writer struct {
	B []byte
}

// Uint32 appends an unsigned int.
func (w *Writer) Uint32(v uint32) { w.B = binary.BigEndian.AppendUint32(w.B, v) }

// Uint64 appends an unsigned hyper.
func (w *Writer) Uint64(v uint64) { w.B = binary.BigEndian.AppendUint64(w.B, v) }

// Bool appends a bool.
func (w *Writer) Bool(v bool) {
	if v {
		w.Uint32(1)
	} else {
		w.Uint32(0)
	}
}

// Fixed appends fixed-length opaque data with its padding.
func (w *Writer) Fixed(p []byte) {
	w.B = append(w.B, p...)
	w.B = append(w.B, make([]byte, pad(len(p)))...)
}

// Opaque appends variable-length opaque data.
func (w *Writer) Opaque(p []byte) {
	w.Uint32(uint32(len(p)))
	w.Fixed(p)
}

// OpaqueSpace appends the length and room for up to n bytes of opaque
// data, and returns that room for the caller to fill (it holds whatever
// the buffer held before, not zeros); OpaqueDone then sets how many bytes
// were filled. Large replies (READ) fill it in place instead of copying
// their data in, in a buffer from the pool (Recycle) when it must grow.
func (w *Writer) OpaqueSpace(n int) []byte {
	w.Uint32(uint32(n))
	at := len(w.B)
	if need := at + n + 3; need > cap(w.B) {
		var b []byte
		if need >= poolMin {
			b = getBuffer(need)
		} else {
			b = make([]byte, 0, need)
		}
		w.B = append(b, w.B...)
	}
	w.B = w.B[:at+n]
	return w.B[at:]
}

// OpaqueDone ends data OpaqueSpace made room for, of which the first
// filled bytes hold data: it sets the length and pads.
func (w *Writer) OpaqueDone(room []byte, filled int) {
	end := len(w.B) - len(room) // start of the data
	binary.BigEndian.PutUint32(w.B[end-4:end], uint32(filled))
	w.B = w.B[:end+filled]
	w.B = append(w.B, make([]byte, pad(filled))...)
}

// poolMin is the smallest buffer OpaqueSpace takes from the pool.
const poolMin = 64 << 10

var buffers sync.Pool // of *[]byte, cap at least poolMin

func getBuffer(n int) []byte {
	if p, ok := buffers.Get().(*[]byte); ok && cap(*p) >= n {
		return (*p)[:0]
	}
	return make([]byte, 0, max(n, 1<<20+4096))
}

// RecordBuffer returns an empty buffer of at least n bytes' capacity
// from the pool that replies use, for reading a large record into
// (ReadRecordTo); give it back with Recycle once nothing refers to it.
func RecordBuffer(n int) []byte { return getBuffer(n) }

// Recycle gives a reply buffer back to the pool once it has been sent
// (and is not used any more); small ones are left to the collector.
func Recycle(b []byte) {
	if cap(b) >= poolMin {
		b = b[:0]
		buffers.Put(&b)
	}
}

// String appends a string.
func (w *Writer) String(s string) {
	w.Uint32(uint32(len(s)))
	w.B = append(w.B, s...)
	w.B = append(w.B, make([]byte, pad(len(s)))...)
}
