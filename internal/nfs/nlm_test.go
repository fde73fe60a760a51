package nfs

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/nfs/nfsclient"
	"github.com/cairnfs/cairn/internal/nfs/proto"
	"github.com/cairnfs/cairn/internal/vfs"
)

// testOwner is one client process as an NLM client names it.
type testOwner struct {
	host string
	svid int32
}

func (o testOwner) lock(fh []byte, off, length uint64) proto.NLM4Lock {
	return proto.NLM4Lock{CallerName: o.host, FH: fh, OH: []byte(o.host + "-" + string(rune('0'+o.svid))),
		Svid: o.svid, Offset: off, Len: length}
}

var (
	ownerA  = testOwner{"hosta", 1}
	ownerA2 = testOwner{"hosta", 2} // another process of host A
	ownerB  = testOwner{"hostb", 7}
	ownerC  = testOwner{"hostc", 9}
)

// nlmT drives the NLM program of a gateway with one client connection.
type nlmT struct {
	t      *testing.T
	c      *nfsclient.Client
	cookie atomic.Uint32
}

func newNLM(t *testing.T, o Options) (*env, *nlmT, []byte) {
	t.Helper()
	e := newEnvWith(t, o)
	c, root := e.client(t)
	return e, &nlmT{t: t, c: c}, root
}

func (n *nlmT) newCookie() []byte {
	return []byte{'c', byte(n.cookie.Add(1))}
}

// lock calls LOCK (from a client whose NSM state is 3) and returns its
// status.
func (n *nlmT) lock(o testOwner, fh []byte, exclusive, block bool, off, length uint64) uint32 {
	n.t.Helper()
	return n.lockState(o, fh, exclusive, block, off, length, 3)
}

func (n *nlmT) lockState(o testOwner, fh []byte, exclusive, block bool, off, length uint64, state int32) uint32 {
	n.t.Helper()
	st, err := n.c.NLMLock(proto.NLMProcLock, proto.NLM4LockArgs{Cookie: n.newCookie(), Block: block, Exclusive: exclusive,
		Lock: o.lock(fh, off, length), State: state})
	if err != nil {
		n.t.Fatalf("LOCK: %v", err)
	}
	return st
}

func (n *nlmT) unlock(o testOwner, fh []byte, off, length uint64) uint32 {
	n.t.Helper()
	st, err := n.c.NLMUnlock(n.newCookie(), o.lock(fh, off, length))
	if err != nil {
		n.t.Fatalf("UNLOCK: %v", err)
	}
	return st
}

func (n *nlmT) test(o testOwner, fh []byte, exclusive bool, off, length uint64) (uint32, proto.NLM4Holder) {
	n.t.Helper()
	st, h, err := n.c.NLMTest(n.newCookie(), exclusive, o.lock(fh, off, length))
	if err != nil {
		n.t.Fatalf("TEST: %v", err)
	}
	return st, h
}

func (n *nlmT) cancel(o testOwner, fh []byte, exclusive bool, off, length uint64) uint32 {
	n.t.Helper()
	st, err := n.c.NLMCancel(proto.NLM4CancArgs{Cookie: n.newCookie(), Block: true, Exclusive: exclusive, Lock: o.lock(fh, off, length)})
	if err != nil {
		n.t.Fatalf("CANCEL: %v", err)
	}
	return st
}

func (n *nlmT) create(root []byte, name string) []byte {
	n.t.Helper()
	fh, err := n.c.Create(root, name, proto.CreateGuarded, proto.Sattr3{Mode: u32(0o644)}, [8]byte{})
	if err != nil {
		n.t.Fatal(err)
	}
	return fh
}

// waiting returns the number of background waiters.
func (lm *lockManager) waiting() int {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	return len(lm.waiters)
}

func want(t *testing.T, what string, got, want uint32) {
	t.Helper()
	if got != want {
		t.Errorf("%s: status %d, want %d", what, got, want)
	}
}

// waitHeldBy waits until TEST by probe sees the lock of holder (svid) on
// fh's first byte: a background waiter got it.
func (n *nlmT) waitHeldBy(probe testOwner, fh []byte, svid int32) {
	n.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, h := n.test(probe, fh, true, 0, 1)
		if st == proto.NLM4Denied && h.Svid == svid {
			return
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("the lock never went to svid %d: TEST %d, holder %+v", svid, st, h)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestNLMLockSemantics: TEST, LOCK and UNLOCK between owners: byte
// ranges that overlap or not, shared and exclusive, length 0 to the end
// of the file, two processes of one host, and the holder TEST reports.
func TestNLMLockSemantics(t *testing.T) {
	e, n, root := newNLM(t, Options{})
	fh := n.create(root, "f")

	want(t, "NULL", func() uint32 {
		if _, err := n.c.Call(proto.ProgNLM, proto.NLMVersion, proto.NLMProcNull, nil); err != nil {
			t.Fatal(err)
		}
		return 0
	}(), 0)
	want(t, "A locks [0,100) exclusive", n.lock(ownerA, fh, true, false, 0, 100), proto.NLM4Granted)
	st, h := n.test(ownerB, fh, true, 50, 10)
	want(t, "B tests [50,60)", st, proto.NLM4Denied)
	if !h.Exclusive || h.Svid != ownerA.svid || string(h.OH) != "hosta-1" || h.Offset != 0 || h.Len != 100 {
		t.Errorf("holder %+v, want A's exclusive [0,100)", h)
	}
	st, _ = n.test(ownerB, fh, true, 100, 10)
	want(t, "B tests [100,110), disjoint", st, proto.NLM4Granted)
	st, _ = n.test(ownerA, fh, true, 0, 0)
	want(t, "A tests its own range", st, proto.NLM4Granted)
	want(t, "B locks [99,100) shared", n.lock(ownerB, fh, false, false, 99, 1), proto.NLM4Denied)
	want(t, "A2 (another process of host A) locks [0,1)", n.lock(ownerA2, fh, true, false, 0, 1), proto.NLM4Denied)
	want(t, "B locks [100,EOF) shared", n.lock(ownerB, fh, false, false, 100, 0), proto.NLM4Granted)
	st, h = n.test(ownerA, fh, true, 1<<40, 1)
	want(t, "A tests far beyond", st, proto.NLM4Denied)
	if h.Exclusive || h.Svid != ownerB.svid || h.Offset != 100 || h.Len != 0 {
		t.Errorf("holder %+v, want B's shared [100,EOF)", h)
	}
	want(t, "C locks [200,300) shared beside B", n.lock(ownerC, fh, false, false, 200, 100), proto.NLM4Granted)
	want(t, "A locks [150,151) exclusive over two shared", n.lock(ownerA, fh, true, false, 150, 1), proto.NLM4Denied)
	st, _ = n.test(ownerA, fh, false, 150, 1)
	want(t, "A tests shared over shared", st, proto.NLM4Granted)

	// The locks are the volume's: an owner of another front end (a FUSE
	// process) with a handle of the file meets them.
	ino := base.Ino(1)
	if _, _, i, st := e.srv.fh.decode(fh); st == proto.NFS3OK {
		ino = i
	}
	vh, errno := e.v.Open(ctx, base.RootCaller, ino, syscall.O_RDWR)
	if errno != 0 {
		t.Fatal(errno)
	}
	got, errno := e.v.GetLock(ctx, vh, 42, base.Lock{Type: base.WriteLock, Start: 10, End: 10})
	if errno != 0 || got.Type != base.WriteLock || got.Owner&vfs.RemoteOwner == 0 {
		t.Errorf("vfs GetLock by another front end: %+v %v, want A's NLM lock", got, errno)
	}
	if errno := e.v.SetLock(ctx, vh, 42, base.Lock{Type: base.ReadLock, Start: 10, End: 10}, false, false); errno != syscall.EAGAIN {
		t.Errorf("vfs SetLock over an NLM lock: %v, want EAGAIN", errno)
	}
	e.v.Release(ctx, vh)

	want(t, "A unlocks [0,100)", n.unlock(ownerA, fh, 0, 100), proto.NLM4Granted)
	want(t, "B locks [0,100) exclusive", n.lock(ownerB, fh, true, false, 0, 100), proto.NLM4Granted)
	want(t, "B unlocks all", n.unlock(ownerB, fh, 0, 0), proto.NLM4Granted)
	want(t, "C unlocks all", n.unlock(ownerC, fh, 0, 0), proto.NLM4Granted)
	want(t, "A locks the whole file", n.lock(ownerA, fh, true, false, 0, 0), proto.NLM4Granted)
	want(t, "NM_LOCK of B", func() uint32 {
		st, err := n.c.NLMLock(proto.NLMProcNMLock, proto.NLM4LockArgs{Cookie: []byte("nm"), Exclusive: true, Lock: ownerB.lock(fh, 5, 1)})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}(), proto.NLM4Denied)
	want(t, "CANCEL with nothing waiting", n.cancel(ownerB, fh, true, 0, 1), proto.NLM4Granted)
	want(t, "A unlocks all", n.unlock(ownerA, fh, 0, 0), proto.NLM4Granted)
	want(t, "A unlocks what it does not hold", n.unlock(ownerA, fh, 0, 0), proto.NLM4Granted)

	// Handles: forged, and of a file that is gone; an offset past the
	// largest.
	bad := append([]byte(nil), fh...)
	bad[30] ^= 1
	want(t, "LOCK with a forged handle", n.lock(ownerA, bad, true, false, 0, 1), proto.NLM4StaleFH)
	gone := n.create(root, "gone")
	if err := n.c.Remove(root, "gone"); err != nil {
		t.Fatal(err)
	}
	want(t, "LOCK of a removed file", n.lock(ownerA, gone, true, false, 0, 1), proto.NLM4StaleFH)
	st, _ = n.test(ownerA, gone, true, 0, 1)
	want(t, "TEST of a removed file", st, proto.NLM4StaleFH)
	want(t, "LOCK at offset 2^63", n.lock(ownerA, fh, true, false, 1<<63, 1), proto.NLM4FBig)
	want(t, "LOCK of a range past 2^63-1", n.lock(ownerA, fh, true, false, 1<<62, 1<<63), proto.NLM4Granted)
	st, h = n.test(ownerB, fh, false, 1<<62+5, 1)
	if st != proto.NLM4Denied || h.Offset != 1<<62 || h.Len != 0 {
		t.Errorf("a range past the largest offset ends there: %d %+v", st, h)
	}
	want(t, "A unlocks all", n.unlock(ownerA, fh, 0, 0), proto.NLM4Granted)

	// Share reservations are granted and exclude no one.
	for _, proc := range []uint32{proto.NLMProcShare, proto.NLMProcShare, proto.NLMProcUnshare} {
		st, err := n.c.NLMShare(proc, proto.NLM4ShareArgs{Cookie: []byte("s"), CallerName: "hosta", FH: fh, OH: []byte("x"), Mode: 3, Access: 3})
		if err != nil || st != proto.NLM4Granted {
			t.Errorf("share proc %d: %d %v", proc, st, err)
		}
	}
}

// TestNLMBlocking: a blocking LOCK is granted in its call when the holder
// unlocks within the gateway's wait; one that is not gets BLOCKED, its
// waiter takes the lock when it is free, and the client's LOCK sent again
// is GRANTED. CANCEL stops a waiter, and releases what it got.
func TestNLMBlocking(t *testing.T) {
	e, n, root := newNLM(t, Options{LockWait: 5 * time.Second})
	fh := n.create(root, "f")

	want(t, "A locks", n.lock(ownerA, fh, true, false, 0, 0), proto.NLM4Granted)
	time.AfterFunc(300*time.Millisecond, func() { _, _ = n.c.NLMUnlock([]byte("u"), ownerA.lock(fh, 0, 0)) })
	start := time.Now()
	want(t, "B's blocking LOCK", n.lock(ownerB, fh, true, true, 0, 10), proto.NLM4Granted)
	if d := time.Since(start); d < 250*time.Millisecond || d > 4*time.Second {
		t.Errorf("B's blocking LOCK answered after %v: want after A's unlock, within the wait", d)
	}
	st, h := n.test(ownerA, fh, false, 0, 1)
	if st != proto.NLM4Denied || h.Svid != ownerB.svid {
		t.Errorf("after the blocking LOCK: TEST %d %+v, want B's lock", st, h)
	}
	want(t, "B unlocks", n.unlock(ownerB, fh, 0, 0), proto.NLM4Granted)

	// A short wait: BLOCKED, then GRANTED when asked again.
	e.srv.locks.mu.Lock()
	e.srv.locks.wait = 200 * time.Millisecond
	e.srv.locks.mu.Unlock()
	want(t, "A locks", n.lock(ownerA, fh, true, false, 0, 0), proto.NLM4Granted)
	want(t, "B's blocking LOCK while A holds", n.lock(ownerB, fh, true, true, 0, 10), proto.NLM4Blocked)
	want(t, "B asks again while A holds", n.lock(ownerB, fh, true, true, 0, 10), proto.NLM4Blocked)
	want(t, "A unlocks", n.unlock(ownerA, fh, 0, 0), proto.NLM4Granted)
	n.waitHeldBy(ownerC, fh, ownerB.svid) // B's waiter has it, unclaimed
	want(t, "A cannot take it back", n.lock(ownerA, fh, true, false, 0, 1), proto.NLM4Denied)
	want(t, "B's retry", n.lock(ownerB, fh, true, true, 0, 10), proto.NLM4Granted)
	if n := e.srv.locks.waiting(); n != 0 {
		t.Errorf("%d waiters left after the claim", n)
	}
	want(t, "B unlocks", n.unlock(ownerB, fh, 0, 0), proto.NLM4Granted)

	// CANCEL while waiting: the lock does not go to B afterwards.
	want(t, "A locks", n.lock(ownerA, fh, true, false, 0, 0), proto.NLM4Granted)
	want(t, "B blocks", n.lock(ownerB, fh, true, true, 0, 10), proto.NLM4Blocked)
	want(t, "B cancels", n.cancel(ownerB, fh, true, 0, 10), proto.NLM4Granted)
	want(t, "A unlocks", n.unlock(ownerA, fh, 0, 0), proto.NLM4Granted)
	time.Sleep(100 * time.Millisecond)
	want(t, "C locks after the cancelled wait", n.lock(ownerC, fh, true, false, 0, 0), proto.NLM4Granted)
	want(t, "C unlocks", n.unlock(ownerC, fh, 0, 0), proto.NLM4Granted)

	// CANCEL after the waiter got it: released.
	want(t, "A locks", n.lock(ownerA, fh, true, false, 0, 0), proto.NLM4Granted)
	want(t, "B blocks", n.lock(ownerB, fh, false, true, 0, 10), proto.NLM4Blocked)
	want(t, "A unlocks", n.unlock(ownerA, fh, 0, 0), proto.NLM4Granted)
	n.waitHeldBy(ownerC, fh, ownerB.svid)
	want(t, "B cancels", n.cancel(ownerB, fh, false, 0, 10), proto.NLM4Granted)
	want(t, "C locks after the cancel", n.lock(ownerC, fh, true, false, 0, 0), proto.NLM4Granted)
	want(t, "C unlocks", n.unlock(ownerC, fh, 0, 0), proto.NLM4Granted)

	// A waiter no one asks for again is given up, and what it got too.
	want(t, "A locks", n.lock(ownerA, fh, true, false, 0, 0), proto.NLM4Granted)
	want(t, "B blocks", n.lock(ownerB, fh, true, true, 0, 10), proto.NLM4Blocked)
	want(t, "A unlocks", n.unlock(ownerA, fh, 0, 0), proto.NLM4Granted)
	n.waitHeldBy(ownerC, fh, ownerB.svid)
	e.srv.locks.expire(ctx, time.Now().Add(waiterIdle))
	want(t, "C locks after the waiter expired", n.lock(ownerC, fh, true, false, 0, 0), proto.NLM4Granted)
	want(t, "C unlocks", n.unlock(ownerC, fh, 0, 0), proto.NLM4Granted)
}

// TestNLMFreeAllNotify: FREE_ALL and an NSM NOTIFY release every lock of
// one host (both processes, every file, and its waiters), and no other
// host's. The NSM procedures answer with the gateway's odd state.
func TestNLMFreeAllNotify(t *testing.T) {
	e, n, root := newNLM(t, Options{LockWait: 100 * time.Millisecond})
	f1, f2, f3 := n.create(root, "f1"), n.create(root, "f2"), n.create(root, "f3")

	want(t, "A locks f1", n.lock(ownerA, f1, true, false, 0, 10), proto.NLM4Granted)
	want(t, "A2 locks f2", n.lock(ownerA2, f2, false, false, 5, 0), proto.NLM4Granted)
	want(t, "B locks f3", n.lock(ownerB, f3, true, false, 0, 0), proto.NLM4Granted)
	want(t, "A waits for f3", n.lock(ownerA, f3, true, true, 0, 1), proto.NLM4Blocked)
	if err := n.c.NLMFreeAll("HostA", 5); err != nil {
		t.Fatal(err)
	}
	want(t, "C locks f1 after A's FREE_ALL", n.lock(ownerC, f1, true, false, 0, 0), proto.NLM4Granted)
	want(t, "C locks f2 after A's FREE_ALL", n.lock(ownerC, f2, true, false, 0, 0), proto.NLM4Granted)
	st, h := n.test(ownerC, f3, false, 0, 1)
	if st != proto.NLM4Denied || h.Svid != ownerB.svid {
		t.Errorf("B's lock after A's FREE_ALL: TEST %d %+v", st, h)
	}
	if e.srv.locks.waiting() != 0 {
		t.Errorf("A's waiter left after FREE_ALL")
	}

	res, state, err := n.c.NSMStat("hostb")
	if err != nil || res != proto.NSMStatSucc || state%2 != 1 {
		t.Fatalf("STAT: %d %d %v", res, state, err)
	}
	id := proto.NSMMyID{MyName: "localhost", MyProg: proto.ProgNLM, MyVers: 4, MyProc: 16}
	if res, s2, err := n.c.NSMMon(proto.NSMMon{MonName: "hostb", MyID: id}); err != nil || res != proto.NSMStatSucc || s2 != state {
		t.Errorf("MON: %d %d %v", res, s2, err)
	}
	if s2, err := n.c.NSMUnmon("hostb", id); err != nil || s2 != state {
		t.Errorf("UNMON: %d %v", s2, err)
	}
	if s2, err := n.c.NSMUnmonAll(id); err != nil || s2 != state {
		t.Errorf("UNMON_ALL: %d %v", s2, err)
	}
	if err := n.c.NSMNotify("HOSTB", 9); err != nil {
		t.Fatal(err)
	}
	want(t, "C locks f3 after B's NOTIFY", n.lock(ownerC, f3, true, false, 0, 0), proto.NLM4Granted)
	if err := n.c.NSMSimuCrash(); err != nil {
		t.Fatal(err)
	}
	if _, s2, err := n.c.NSMStat("x"); err != nil || s2 != state+2 {
		t.Errorf("state after SIMU_CRASH %d (%v), want %d", s2, err, state+2)
	}
	st, h = n.test(ownerA, f3, false, 0, 1)
	if st != proto.NLM4Denied || h.Svid != ownerC.svid {
		t.Errorf("SIMU_CRASH released C's lock: TEST %d %+v", st, h)
	}
	e.srv.locks.mu.Lock()
	hosts := len(e.srv.locks.hosts)
	e.srv.locks.mu.Unlock()
	if hosts != 1 {
		t.Errorf("%d hosts known, want C only", hosts)
	}
}

// TestNLMExportRules: a read-only export grants shared locks and refuses
// exclusive ones (ROFS); a client outside the allowed networks gets
// FAILED and changes nothing.
func TestNLMExportRules(t *testing.T) {
	e, n, root := newNLM(t, Options{})
	fh := n.create(root, "f")
	ro := e.sibling(t, Options{Export: Export{ReadOnly: true}})
	rc, _ := ro.client(t)
	rn := &nlmT{t: t, c: rc}
	want(t, "exclusive LOCK on a read-only export", rn.lock(ownerA, fh, true, false, 0, 0), proto.NLM4ROFS)
	want(t, "shared LOCK on a read-only export", rn.lock(ownerA, fh, false, false, 0, 0), proto.NLM4Granted)
	want(t, "exclusive LOCK over it", n.lock(ownerB, fh, true, false, 0, 1), proto.NLM4Denied)
	want(t, "UNLOCK on a read-only export", rn.unlock(ownerA, fh, 0, 0), proto.NLM4Granted)

	far := e.sibling(t, Options{Export: Export{Allow: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}}})
	fc, err := nfsclient.Dial(far.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	fn := &nlmT{t: t, c: fc}
	want(t, "LOCK from outside the allowed networks", fn.lock(ownerA, fh, true, false, 0, 0), proto.NLM4Failed)
	want(t, "B locks: nothing was taken", n.lock(ownerB, fh, true, false, 0, 0), proto.NLM4Granted)
	if err := fc.NLMFreeAll("hostb", 1); err != nil {
		t.Fatal(err)
	}
	if err := fc.NSMNotify("hostb", 1); err != nil {
		t.Fatal(err)
	}
	st, _ := n.test(ownerA, fh, false, 0, 1)
	want(t, "B's lock after FREE_ALL and NOTIFY from outside", st, proto.NLM4Denied)
	if res, _, err := fc.NSMMon(proto.NSMMon{MonName: "x"}); err != nil || res != proto.NSMStatFail {
		t.Errorf("MON from outside: %d %v", res, err)
	}
}

// TestNLMGarbageArgs: arguments that do not decode are GARBAGE_ARGS,
// other versions PROG_MISMATCH 4..4 (NSM 1..1), the procedures not served
// PROC_UNAVAIL; the connection goes on serving.
func TestNLMGarbageArgs(t *testing.T) {
	e, n, root := newNLM(t, Options{})
	fh := n.create(root, "f")
	var good proto.Writer
	(&proto.NLM4LockArgs{Cookie: []byte("c"), Exclusive: true, Lock: ownerA.lock(fh, 0, 1)}).Encode(&good)
	badBool := append([]byte(nil), good.B...)
	badBool[4+4+3] = 2 // block = 2 (after the cookie's length and padded byte)
	var long proto.Writer
	long.Opaque([]byte("c"))
	long.Bool(false)
	long.Bool(true)
	long.String(strings.Repeat("h", proto.NLMMaxStr+1))
	for _, tc := range []struct {
		name       string
		prog, proc uint32
		args       []byte
	}{
		{"LOCK cut short", proto.ProgNLM, proto.NLMProcLock, good.B[:len(good.B)-6]},
		{"LOCK with block 2", proto.ProgNLM, proto.NLMProcLock, badBool},
		{"LOCK with a caller name too long", proto.ProgNLM, proto.NLMProcLock, long.B},
		{"TEST empty", proto.ProgNLM, proto.NLMProcTest, nil},
		{"CANCEL cut short", proto.ProgNLM, proto.NLMProcCancel, good.B[:12]},
		{"UNLOCK cut short", proto.ProgNLM, proto.NLMProcUnlock, good.B[:8]},
		{"SHARE empty", proto.ProgNLM, proto.NLMProcShare, nil},
		{"FREE_ALL empty", proto.ProgNLM, proto.NLMProcFreeAll, nil},
		{"NSM STAT empty", proto.ProgNSM, proto.NSMProcStat, nil},
		{"NSM MON cut short", proto.ProgNSM, proto.NSMProcMon, []byte{0, 0, 0, 1, 'h', 0, 0, 0}},
		{"NSM NOTIFY empty", proto.ProgNSM, proto.NSMProcNotify, nil},
	} {
		vers := uint32(proto.NLMVersion)
		if tc.prog == proto.ProgNSM {
			vers = proto.NSMVersion
		}
		_, err := n.c.Call(tc.prog, vers, tc.proc, tc.args)
		var re *nfsclient.RPCError
		if !errors.As(err, &re) || re.Denied || re.Stat != proto.GarbageArgs {
			t.Errorf("%s: %v, want GARBAGE_ARGS", tc.name, err)
		}
	}
	for _, proc := range []uint32{proto.NLMProcGranted, 6, 10, 15, 16, 19, 24} {
		_, err := n.c.Call(proto.ProgNLM, proto.NLMVersion, proc, good.B)
		var re *nfsclient.RPCError
		if !errors.As(err, &re) || re.Stat != proto.ProcUnavail {
			t.Errorf("NLM procedure %d: %v, want PROC_UNAVAIL", proc, err)
		}
	}

	// Other versions: PROG_MISMATCH with the one served.
	conn, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, tc := range []struct{ prog, vers, served uint32 }{{proto.ProgNLM, 3, 4}, {proto.ProgNLM, 1, 4}, {proto.ProgNSM, 2, 1}} {
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := conn.Write(callRecord(5, proto.RPCVersion, tc.prog, tc.vers, 0, proto.AuthNone, nil)); err != nil {
			t.Fatal(err)
		}
		rec, err := proto.ReadRecord(conn, 1<<16)
		if err != nil {
			t.Fatal(err)
		}
		r := proto.NewReader(rec)
		var got []uint32
		for r.Len() > 0 {
			got = append(got, r.Uint32())
		}
		// xid, REPLY, ACCEPTED, verifier, PROG_MISMATCH, low, high
		if len(got) != 8 || got[5] != proto.ProgMismatch || got[6] != tc.served || got[7] != tc.served {
			t.Errorf("program %d version %d: reply %v, want PROG_MISMATCH %d..%d", tc.prog, tc.vers, got, tc.served, tc.served)
		}
	}
	want(t, "LOCK after the garbage", n.lock(ownerA, fh, true, false, 0, 1), proto.NLM4Granted)
}

// TestNLMWaitCap: blocking LOCKs wait in their calls at most half of
// MaxInFlight at once; another one is answered BLOCKED at once, and its
// waiter still gets the lock for its retry.
func TestNLMWaitCap(t *testing.T) {
	e, n, root := newNLM(t, Options{MaxInFlight: 2, LockWait: 5 * time.Second})
	fh := n.create(root, "f")
	want(t, "A locks", n.lock(ownerA, fh, true, false, 0, 0), proto.NLM4Granted)
	first := make(chan uint32, 1)
	go func() {
		st, err := n.c.NLMLock(proto.NLMProcLock, proto.NLM4LockArgs{Cookie: []byte("b"), Block: true, Lock: ownerB.lock(fh, 0, 1)})
		if err != nil {
			st = 1000
		}
		first <- st
	}()
	deadline := time.Now().Add(5 * time.Second)
	for e.srv.locks.inCall.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	c2, _ := e.client(t)
	n2 := &nlmT{t: t, c: c2}
	start := time.Now()
	want(t, "C's blocking LOCK beyond the cap", n2.lock(ownerC, fh, false, true, 0, 1), proto.NLM4Blocked)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the LOCK beyond the cap was answered after %v", d)
	}
	want(t, "A unlocks", n.unlock(ownerA, fh, 0, 0), proto.NLM4Granted)
	if st := <-first; st != proto.NLM4Granted {
		t.Errorf("B's blocking LOCK within the cap: %d, want GRANTED", st)
	}
	want(t, "B unlocks", n.unlock(ownerB, fh, 0, 0), proto.NLM4Granted)
	n2.waitHeldBy(ownerA, fh, ownerC.svid)
	want(t, "C's retry", n2.lock(ownerC, fh, false, true, 0, 1), proto.NLM4Granted)

	// Background waiters are bounded too.
	e.srv.locks.mu.Lock()
	e.srv.locks.maxWaiters, e.srv.locks.wait = 1, 100*time.Millisecond
	e.srv.locks.mu.Unlock()
	want(t, "A's blocking LOCK", n.lock(ownerA, fh, true, true, 0, 1), proto.NLM4Blocked)
	want(t, "B's blocking LOCK beyond the waiters' bound", n.lock(ownerB, fh, true, true, 0, 1), proto.NLM4DeniedNoLocks)
	want(t, "A asks again", n.lock(ownerA, fh, true, true, 0, 1), proto.NLM4Blocked)
}

// TestNSMNotifyUDP: a gateway that is the portmapper gives its datagram
// port for NSM over UDP and serves NOTIFY there (a Linux client's
// sm-notify sends it over UDP only): the rebooted host's locks go.
func TestNSMNotifyUDP(t *testing.T) {
	e, n, root := newNLM(t, Options{PortmapPort: 2049})
	fh := n.create(root, "f")
	if got := getPort(t, n.c, proto.ProgNSM, proto.NSMVersion, IPProtoUDP); got != 111 {
		t.Errorf("GETPORT of NSM over UDP = %d, want 111 (the portmapper's)", got)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = e.srv.ServePortmapUDP(pc) }()
	uc, err := net.Dial("udp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()

	want(t, "B locks", n.lock(ownerB, fh, true, false, 0, 0), proto.NLM4Granted)
	var args proto.Writer
	(&proto.NSMStatChge{MonName: "hostb", State: 11}).Encode(&args)
	if _, err := uc.Write(callRecord(99, proto.RPCVersion, proto.ProgNSM, proto.NSMVersion, proto.NSMProcNotify, proto.AuthSys, args.B)[4:]); err != nil {
		t.Fatal(err)
	}
	_ = uc.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 512)
	nr, err := uc.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	r := proto.NewReader(buf[:nr])
	var got []uint32
	for r.Len() > 0 {
		got = append(got, r.Uint32())
	}
	// xid, REPLY, MSG_ACCEPTED, verifier (flavor, length), SUCCESS; no results
	if len(got) != 6 || got[0] != 99 || got[5] != proto.Success {
		t.Fatalf("NOTIFY over UDP: reply %v", got)
	}
	want(t, "C locks after B's NOTIFY over UDP", n.lock(ownerC, fh, true, false, 0, 0), proto.NLM4Granted)
}

// TestNLMRebootByState: a host whose LOCK carries another NSM state than
// its earlier ones rebooted: what it held before is released, what it
// takes now is held. FREE_ALL's state is the host's new one.
func TestNLMRebootByState(t *testing.T) {
	_, n, root := newNLM(t, Options{LockWait: 100 * time.Millisecond})
	f1, f2 := n.create(root, "f1"), n.create(root, "f2")
	want(t, "B locks f1 (state 3)", n.lockState(ownerB, f1, true, false, 0, 0, 3), proto.NLM4Granted)
	want(t, "B locks f2 (state 3)", n.lockState(ownerB, f2, true, false, 0, 0, 3), proto.NLM4Granted)
	want(t, "C locks f1 under B", n.lock(ownerC, f1, true, false, 0, 0), proto.NLM4Denied)
	want(t, "B, rebooted, locks f2 (state 5)", n.lockState(ownerB, f2, true, false, 0, 10, 5), proto.NLM4Granted)
	want(t, "C locks f1 after B's reboot", n.lock(ownerC, f1, true, false, 0, 0), proto.NLM4Granted)
	want(t, "C locks f2 under B's new lock", n.lock(ownerC, f2, true, false, 0, 1), proto.NLM4Denied)
	want(t, "C locks f2 beyond it: B's old lock is gone", n.lock(ownerC, f2, true, false, 10, 0), proto.NLM4Granted)
	want(t, "B locks again (state 5, no reboot)", n.lockState(ownerB, f1, false, true, 0, 1, 5), proto.NLM4Blocked)

	// NM_LOCK carries state 0: no news.
	st, err := n.c.NLMLock(proto.NLMProcNMLock, proto.NLM4LockArgs{Cookie: []byte("nm"), Exclusive: true, Lock: ownerB.lock(f2, 20, 1)})
	if err != nil || st != proto.NLM4Denied {
		t.Fatalf("NM_LOCK of B: %d %v", st, err)
	}
	want(t, "B still holds f2", n.lock(ownerC, f2, true, false, 0, 1), proto.NLM4Denied)
	if err := n.c.NLMFreeAll("hostb", 7); err != nil {
		t.Fatal(err)
	}
	want(t, "B locks f2 after FREE_ALL (its new state 7)", n.lockState(ownerB, f2, true, false, 0, 10, 7), proto.NLM4Granted)
	want(t, "the lock is held", n.lock(ownerC, f2, true, false, 0, 1), proto.NLM4Denied)
}

// TestNLMSnapshots: in a snapshot a shared lock is granted without being
// recorded (nothing there can be written) and an exclusive one is ROFS;
// the live file's locks are apart.
func TestNLMSnapshots(t *testing.T) {
	f := newSnapshotFixture(t)
	n := &nlmT{t: t, c: f.c}
	live, _, err := f.c.Lookup(f.root, "f")
	if err != nil {
		t.Fatal(err)
	}
	want(t, "exclusive LOCK of a snapshot file", n.lock(ownerA, f.file, true, false, 0, 0), proto.NLM4ROFS)
	want(t, "exclusive LOCK of /.snapshots", n.lock(ownerA, f.snaps, true, false, 0, 0), proto.NLM4ROFS)
	want(t, "shared LOCK of a snapshot file", n.lock(ownerA, f.file, false, false, 0, 0), proto.NLM4Granted)
	st, _ := n.test(ownerB, f.file, true, 0, 1)
	want(t, "TEST exclusive over it: nothing recorded", st, proto.NLM4Granted)
	want(t, "UNLOCK of a snapshot file", n.unlock(ownerA, f.file, 0, 0), proto.NLM4Granted)
	want(t, "B locks the live file", n.lock(ownerB, live, true, false, 0, 0), proto.NLM4Granted)
	want(t, "shared LOCK of the snapshot file beside it", n.lock(ownerA, f.file, false, false, 0, 0), proto.NLM4Granted)
	want(t, "B unlocks", n.unlock(ownerB, live, 0, 0), proto.NLM4Granted)
}
