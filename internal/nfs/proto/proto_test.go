package proto

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"testing"
)

func TestReadRecord(t *testing.T) {
	frag := func(last bool, p string) []byte {
		h := uint32(len(p))
		if last {
			h |= lastFragment
		}
		return append(binary.BigEndian.AppendUint32(nil, h), p...)
	}
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	cases := []struct {
		name string
		in   []byte
		want string
		err  error
	}{
		{"one fragment", frag(true, "hello"), "hello", nil},
		{"three fragments", cat(frag(false, "he"), frag(false, ""), frag(true, "llo")), "hello", nil},
		{"empty stream", nil, "", io.EOF},
		{"cut in a header", []byte{0x80, 0}, "", io.ErrUnexpectedEOF},
		{"cut in data", frag(true, "hello")[:6], "", io.ErrUnexpectedEOF},
		{"no last fragment", frag(false, "he"), "", io.ErrUnexpectedEOF},
		{"too large", frag(true, "0123456789a"), "", ErrRecordTooLarge},
		{"too large in pieces", cat(frag(false, "012345"), frag(true, "6789a")), "", ErrRecordTooLarge},
	}
	for _, tc := range cases {
		got, err := ReadRecord(bytes.NewReader(tc.in), 10)
		if !errors.Is(err, tc.err) || string(got) != tc.want {
			t.Errorf("%s: %q, %v; want %q, %v", tc.name, got, err, tc.want, tc.err)
		}
	}
}

func TestReaderLimits(t *testing.T) {
	var w Writer
	w.Uint32(5)
	w.Fixed([]byte("abcde"))
	w.Uint32(1 << 30)
	r := NewReader(w.B)
	if s := r.String(10); s != "abcde" || r.Err() != nil {
		t.Fatalf("string %q %v", s, r.Err())
	}
	if r.Count(1<<31, 4) != 0 || !errors.Is(r.Err(), ErrShort) {
		t.Fatalf("a count the message cannot hold: %v", r.Err())
	}
	r = NewReader([]byte{0, 0, 0, 20})
	if r.Opaque(10); !errors.Is(r.Err(), ErrTooLong) {
		t.Fatalf("opaque over its limit: %v", r.Err())
	}
	r = NewReader([]byte{0, 0, 0, 2})
	if r.Bool(); r.Err() == nil {
		t.Fatal("bool 2 accepted")
	}
}

// FuzzDecode checks that decoding a call and its credential never panics
// and that what decodes re-encodes to bytes that decode to the same value
// (padding bytes are not checked, as most XDR decoders do not).
func FuzzDecode(f *testing.F) {
	var w Writer
	AuthSysParams{Machine: "m", Uid: 1, Gid: 2, Gids: []uint32{3, 4}}.Encode(&w)
	f.Add(w.B)
	f.Add([]byte{0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 1, 0x86, 0xa3, 0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		if a, err := ParseAuthSys(b); err == nil {
			var w Writer
			a.Encode(&w)
			a2, err := ParseAuthSys(w.B)
			if err != nil || len(w.B) != len(b) || fmt.Sprint(a2) != fmt.Sprint(a) {
				t.Fatalf("AUTH_SYS %x re-encodes as %x (%v)", b, w.B, err)
			}
		}
		_, _ = ParseCall(b)
		rec, rerr := ReadRecord(bytes.NewReader(b), 1<<16)
		if n, ok := PeekRecordSize(bufio.NewReader(bytes.NewReader(b))); ok && rerr == nil && b[0]&0x80 != 0 && n != len(rec) {
			t.Fatalf("peeked a record of %d bytes, read %d", n, len(rec))
		}
		r := NewReader(b)
		DecodeSattr3(r)
		DecodeFattr3(r)
	})
}

// TestOpaqueSpace fills opaque data in place, in small and pooled
// buffers, and decodes it back with its padding.
func TestOpaqueSpace(t *testing.T) {
	for _, tc := range []struct{ room, filled int }{{0, 0}, {10, 7}, {10, 10}, {100 << 10, 5}, {1 << 20, 1<<20 - 1}} {
		for round := 0; round < 2; round++ { // the second round reuses a pooled buffer
			w := Writer{B: []byte{9, 9, 9, 9}}
			room := w.OpaqueSpace(tc.room)
			if len(room) != tc.room {
				t.Fatalf("room %d, want %d", len(room), tc.room)
			}
			for i := range room[:tc.filled] {
				room[i] = byte(i)
			}
			w.OpaqueDone(room, tc.filled)
			w.Uint32(0xdeadbeef)
			if len(w.B)%4 != 0 {
				t.Fatalf("room %d filled %d: %d bytes, not padded", tc.room, tc.filled, len(w.B))
			}
			r := NewReader(w.B[4:])
			got := r.Opaque(1 << 21)
			if len(got) != tc.filled || r.Uint32() != 0xdeadbeef || r.Err() != nil {
				t.Fatalf("room %d filled %d: decoded %d bytes, err %v", tc.room, tc.filled, len(got), r.Err())
			}
			for i, b := range got {
				if b != byte(i) {
					t.Fatalf("byte %d = %d", i, b)
				}
			}
			Recycle(w.B)
		}
	}
}

// FuzzNLMDecode decodes every NLM and NSM argument and result type from
// the same bytes: never a panic, and what decodes re-encodes to the bytes
// it came from (all these types are made of fields whose encoding is
// unique but for padding, which the seeds keep zero).
func FuzzNLMDecode(f *testing.F) {
	l := NLM4Lock{CallerName: "host", FH: []byte("0123456789abcdef0123456789abcdef"), OH: []byte("7@host"), Svid: 7, Offset: 1, Len: 2}
	var w Writer
	(&NLM4LockArgs{Cookie: []byte{1, 2, 3}, Block: true, Exclusive: true, Lock: l, State: 3}).Encode(&w)
	f.Add(w.B)
	w = Writer{}
	(&NSMMon{MonName: "h", MyID: NSMMyID{MyName: "m", MyProg: 1, MyVers: 2, MyProc: 3}}).Encode(&w)
	f.Add(w.B)
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 1})
	type codec interface {
		Decode(*Reader)
		Encode(*Writer)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, newV := range []func() codec{
			func() codec { return &NLM4Lock{} },
			func() codec { return &NLM4TestArgs{} },
			func() codec { return &NLM4LockArgs{} },
			func() codec { return &NLM4CancArgs{} },
			func() codec { return &NLM4UnlockArgs{} },
			func() codec { return &NLM4ShareArgs{} },
			func() codec { return &NLM4Notify{} },
			func() codec { return &NLM4Holder{} },
			func() codec { return &NSMMon{} },
			func() codec { return &NSMMyID{} },
			func() codec { return &NSMStatChge{} },
		} {
			v := newV()
			r := NewReader(b)
			v.Decode(r)
			if r.Err() != nil {
				continue
			}
			var w Writer
			v.Encode(&w)
			v2 := newV()
			r2 := NewReader(w.B)
			v2.Decode(r2)
			if r2.Err() != nil || r2.Len() != 0 || fmt.Sprint(v2) != fmt.Sprint(v) || len(w.B) != len(b)-r.Len() {
				t.Fatalf("%T %x re-encodes as %x (%v)", v, b, w.B, r2.Err())
			}
		}
	})
}
