package nfs

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/nfs/nfsclient"
	"github.com/cairnfs/cairn/internal/nfs/proto"
)

// readGate is an Options.OnCall that can stall READs: OnCall runs in the
// goroutine serving the call, after the procedure and before the reply
// is written, so a stalled READ keeps its slot of MaxInFlight and its
// reply back.
type readGate struct {
	mode    atomic.Int32                  // gateOff, gateAll or gateFirst
	stalled atomic.Int32                  // READs stalled now
	most    atomic.Int32                  // most READs stalled at once
	first   atomic.Bool                   // gateFirst: a READ has been stalled
	release atomic.Pointer[chan struct{}] // closed to let stalled READs go
	failed  atomic.Bool                   // a stalled READ gave up waiting
}

const (
	gateOff   = iota // READs pass
	gateAll          // every READ waits for release
	gateFirst        // the first READ waits for release, the others pass
)

func (g *readGate) onCall(prog, proc uint32, _ time.Duration) {
	if prog != proto.ProgNFS || proc != proto.NFSProcRead {
		return
	}
	switch g.mode.Load() {
	case gateOff:
		return
	case gateFirst:
		if !g.first.CompareAndSwap(false, true) {
			return
		}
	}
	n := g.stalled.Add(1)
	for {
		m := g.most.Load()
		if n <= m || g.most.CompareAndSwap(m, n) {
			break
		}
	}
	select {
	case <-*g.release.Load():
	case <-time.After(10 * time.Second):
		// Nothing released it: the calls behind it were not served.
		g.failed.Store(true)
	}
	g.stalled.Add(-1)
}

// TestPipelinedReads: READs pipelined on one connection are served
// concurrently, at most MaxInFlight at once, and answered as they
// complete: a READ held back does not hold back the replies of the READs
// sent after it, and every reply carries its own range's data.
func TestPipelinedReads(t *testing.T) {
	const inflight, bs, blocks = 4, 64 << 10, 64
	g := &readGate{}
	e := newEnvWith(t, Options{MaxInFlight: inflight, OnCall: g.onCall})
	c, root := e.client(t)
	fh, err := c.Create(root, "pipelined", proto.CreateGuarded, proto.Sattr3{Mode: u32(0o644)}, [8]byte{})
	if err != nil {
		t.Fatal(err)
	}
	data := randBytes(bs*blocks, 11)
	for off := 0; off < len(data); off += 1 << 20 {
		if _, err := c.Write(fh, uint64(off), data[off:min(off+1<<20, len(data))], proto.Unstable); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Commit(fh); err != nil {
		t.Fatal(err)
	}
	// send pipelines a READ of each block in order (of varied sizes, so
	// replies differ in length) on c's one connection.
	send := func(n int) []*nfsclient.ReadCall {
		ks := make([]*nfsclient.ReadCall, n)
		for i := range ks {
			k, err := c.SendRead(fh, uint64(i%blocks*bs), uint32(bs-i%3*4096))
			if err != nil {
				t.Fatal(err)
			}
			ks[i] = k
		}
		return ks
	}
	check := func(i int, k *nfsclient.ReadCall) {
		t.Helper()
		got, _, err := k.Wait()
		if err != nil {
			t.Fatalf("READ %d: %v", i, err)
		}
		off := i % blocks * bs
		if want := data[off : off+bs-i%3*4096]; !bytes.Equal(got, want) {
			t.Fatalf("READ %d: %d bytes, want %d of offset %d, differ", i, len(got), len(want), off)
		}
	}

	// 1. Every READ stalls: MaxInFlight of them are being served, no more.
	release := make(chan struct{})
	g.release.Store(&release)
	g.mode.Store(gateAll)
	ks := send(4 * inflight)
	deadline := time.Now().Add(10 * time.Second)
	for g.stalled.Load() < inflight && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // room for a call past the bound
	if n, m := g.stalled.Load(), g.most.Load(); n != inflight || m != inflight {
		t.Errorf("%d READs served at once (most %d), want MaxInFlight = %d", n, m, inflight)
	}
	close(release)
	for i, k := range ks {
		check(i, k)
	}

	// 2. The first READ stalls until the replies of all the others have
	// arrived: they are served past it and answered before it.
	release = make(chan struct{})
	g.release.Store(&release)
	g.mode.Store(gateFirst)
	const n = 2 * blocks
	ks = send(n)
	var mu sync.Mutex
	var order []int // indexes in the order replies arrived
	var wg sync.WaitGroup
	for i, k := range ks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-k.Done()
			mu.Lock()
			defer mu.Unlock()
			order = append(order, i)
			if len(order) == n-1 {
				close(release) // all but the stalled one
			}
		}()
	}
	wg.Wait()
	if g.failed.Load() {
		t.Fatal("the stalled READ was never released: READs sent after it were not answered")
	}
	// The stalled READ was among the first MaxInFlight sent (the
	// connection's reader takes no more records until one is answered)
	// and its reply came last.
	if last := order[n-1]; last >= inflight {
		t.Errorf("reply order %v: the last is READ %d, want one of the first %d", order, last, inflight)
	}
	for i, k := range ks {
		check(i, k)
	}
}

// TestReadRelease: READ replies read into buffers that earlier READs
// gave back (ReadCall.Release) carry their own data, and a reply not
// released is never overwritten by later ones.
func TestReadRelease(t *testing.T) {
	const bs, size, window = 256 << 10, 4 << 20, 8
	e := newEnv(t)
	c, root := e.client(t)
	fh, err := c.Create(root, "released", proto.CreateGuarded, proto.Sattr3{Mode: u32(0o644)}, [8]byte{})
	if err != nil {
		t.Fatal(err)
	}
	data := randBytes(size, 12)
	for off := 0; off < size; off += 1 << 20 {
		if _, err := c.Write(fh, uint64(off), data[off:off+1<<20], proto.Unstable); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Commit(fh); err != nil {
		t.Fatal(err)
	}
	var kept []byte // the first block's reply, never released
	for pass := 0; pass < 3; pass++ {
		var queue []*nfsclient.ReadCall
		next := 0
		for off := 0; off < size; off += bs {
			for ; len(queue) < window && next < size; next += bs {
				k, err := c.SendRead(fh, uint64(next), bs)
				if err != nil {
					t.Fatal(err)
				}
				queue = append(queue, k)
			}
			k := queue[0]
			queue = queue[1:]
			got, _, err := k.Wait()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, data[off:off+bs]) {
				t.Fatalf("pass %d: READ at %d differs", pass, off)
			}
			if pass == 0 && off == 0 {
				kept = got
				continue
			}
			k.Release()
		}
	}
	if !bytes.Equal(kept, data[:bs]) {
		t.Fatal("a reply that was not released was overwritten")
	}
}
