package nfs

import (
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/nfs/proto"
)

// FuzzRecord feeds arbitrary records to a gateway over a real (memory)
// volume: whatever the bytes, a call must be answered or dropped, never
// panic (the gateway recovers panics, so the fuzz target checks that none
// happened).
func FuzzRecord(f *testing.F) {
	v, _, _ := newVFS(f)
	srv, err := New(v, Options{VolumeUUID: testUUID})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { srv.Close(ctx) })
	root := srv.fh.encode(kindLive, 0, 1)
	var fh proto.Writer
	fh.Opaque(root)
	for proc := uint32(0); proc < 23; proc++ {
		f.Add(callRecord(1, 2, proto.ProgNFS, 3, proc, proto.AuthSys, fh.B)[4:])
		f.Add(callRecord(1, 2, proto.ProgNFS, 3, proc, proto.AuthSys, append(append([]byte(nil), fh.B...), 0, 0, 0, 1, 'a', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2))[4:])
	}
	for proc := uint32(0); proc < 6; proc++ {
		f.Add(callRecord(1, 2, proto.ProgMount, 3, proc, proto.AuthSys, []byte{0, 0, 0, 1, '/', 0, 0, 0})[4:])
	}
	f.Fuzz(func(t *testing.T, rec []byte) {
		srv.handleRecord("fuzz:1", true, rec)
		srv.handleRecord("fuzz:1", false, rec) // a client outside the allowed networks
		if n := srv.panics.Load(); n > 0 {
			t.Fatalf("%d panics serving %x", n, rec)
		}
	})
}

// FuzzNLMRecord is FuzzRecord for the lock programs: NLM and NSM calls of
// every procedure, from seeds that decode, over a gateway whose blocking
// LOCKs wait a moment only.
func FuzzNLMRecord(f *testing.F) {
	v, _, _ := newVFS(f)
	srv, err := New(v, Options{VolumeUUID: testUUID, LockWait: time.Millisecond})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { srv.Close(ctx) })
	root := srv.fh.encode(kindLive, 0, 1)
	l := proto.NLM4Lock{CallerName: "h", FH: root, OH: []byte("o"), Svid: 1, Len: 10}
	var test, lock, canc, unlock, share, notify, mon, stat proto.Writer
	(&proto.NLM4TestArgs{Cookie: []byte("c"), Exclusive: true, Lock: l}).Encode(&test)
	(&proto.NLM4LockArgs{Cookie: []byte("c"), Block: true, Exclusive: true, Lock: l, State: 1}).Encode(&lock)
	(&proto.NLM4CancArgs{Cookie: []byte("c"), Block: true, Lock: l}).Encode(&canc)
	(&proto.NLM4UnlockArgs{Cookie: []byte("c"), Lock: l}).Encode(&unlock)
	(&proto.NLM4ShareArgs{Cookie: []byte("c"), CallerName: "h", FH: root, OH: []byte("o")}).Encode(&share)
	(&proto.NLM4Notify{Name: "h", State: 3}).Encode(&notify)
	(&proto.NSMMon{MonName: "h", MyID: proto.NSMMyID{MyName: "m", MyProg: 100021, MyVers: 4, MyProc: 16}}).Encode(&mon)
	stat.String("h")
	for proc, args := range map[uint32][]byte{0: nil, 1: test.B, 2: lock.B, 3: canc.B, 4: unlock.B, 20: share.B, 21: share.B, 22: lock.B, 23: notify.B} {
		f.Add(callRecord(1, 2, proto.ProgNLM, 4, proc, proto.AuthSys, args)[4:])
	}
	for proc, args := range map[uint32][]byte{0: nil, 1: stat.B, 2: mon.B, 3: mon.B[:len(mon.B)-16], 4: mon.B[8 : len(mon.B)-16], 5: nil, 6: notify.B} {
		f.Add(callRecord(1, 2, proto.ProgNSM, 1, proc, proto.AuthSys, args)[4:])
	}
	f.Fuzz(func(t *testing.T, rec []byte) {
		srv.handleRecord("127.0.0.1:1", true, rec)
		srv.handleRecord("192.0.2.1:1", false, rec)
		if n := srv.panics.Load(); n > 0 {
			t.Fatalf("%d panics serving %x", n, rec)
		}
	})
}
