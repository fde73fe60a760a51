package nfs

import (
	"testing"

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
