package nfs

// The Network Lock Manager, version 4 (program 100021): NFSv3 clients'
// fcntl locks. They are the volume's POSIX locks in meta, the same ones
// FUSE clients take, so a lock taken over NFS conflicts with a lock taken
// on any mount of the volume and the other way round. vfs.SetInodeLock
// locks by inode: an NLM lock belongs to no open file and lasts until the
// client unlocks it, frees all its locks (FREE_ALL), says it rebooted
// (NSM NOTIFY, nsm.go), or the gateway stops (Close releases them all).
//
// A lock owner is a client process: the hash of the client's caller_name,
// the svid and the owner handle it sends, with vfs.RemoteOwner set (the
// FUSE adapter clears that bit), so two processes of one client are two
// owners and a process's locks over NFS and over FUSE never merge.
//
// A client host that rebooted holds nothing: it says so with NSM NOTIFY
// (nsm.go) or FREE_ALL, or it is seen in the NSM state number its LOCKs
// carry: a host whose LOCK comes with another state than its earlier
// LOCKs has rebooted (or had its statd restarted, which tells its
// servers the same), and its earlier locks are released first. This
// covers the clients whose NOTIFY cannot reach the gateway (it serves NSM
// over UDP, which Linux's sm-notify uses, only as the portmapper).
//
// A blocking LOCK that conflicts waits in the gateway for up to
// Options.LockWait and is GRANTED if the lock comes in time. Otherwise it
// is answered BLOCKED and a waiter goes on waiting in the background; the
// client, which gets no GRANTED callback from this gateway (it sends
// none), asks again with the same LOCK (a Linux client does every 30 s),
// and that call finds the lock taken for it and is GRANTED, or waits
// again. Calls waiting at once are at most half of Options.MaxInFlight
// (further ones are answered BLOCKED at once, their waiters started), so
// that blocked lockers do not keep a connection's UNLOCKs from being
// read; background waiters are at most maxWaiters (beyond, a blocking
// LOCK is DENIED_NOLOCKS). CANCEL stops a waiter and releases what it got; a waiter whose
// client has not asked for it within waiterIdle is cancelled the same way,
// so a client that went away without CANCEL does not keep a lock it
// never learned it had.
//
// Not built: GRANTED callbacks, the asynchronous _MSG and _RES procedures
// (6 to 15, answered PROC_UNAVAIL: Linux clients do not send them), a
// grace period with reclaims after a gateway restart (a restarted
// gateway has none of its clients' locks, and says so to no one), DOS share
// reservations (SHARE and UNSHARE are granted and nothing is recorded:
// no Unix client relies on them), deadlock detection (meta has none), and
// file permission checks (locks are advisory; knfsd's insecure_locks).

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/nfs/proto"
	"github.com/cairnfs/cairn/internal/vfs"
)

// waiterIdle is how long a background waiter lives without its client
// asking for the lock again (Linux clients ask every 30 s).
const waiterIdle = 2 * time.Minute

// maxWaiters bounds the background waiters (each a goroutine waiting in
// meta); a blocking LOCK beyond it is answered DENIED_NOLOCKS.
const maxWaiters = 4096

var nlmProcs = []procedure{
	proto.NLMProcNull:    nlmNull,
	proto.NLMProcTest:    nlmTest,
	proto.NLMProcLock:    nlmLock,
	proto.NLMProcCancel:  nlmCancel,
	proto.NLMProcUnlock:  nlmUnlock,
	proto.NLMProcShare:   nlmShare,
	proto.NLMProcUnshare: nlmShare,
	proto.NLMProcNMLock:  nlmLock,
	proto.NLMProcFreeAll: nlmFreeAll,
}

// lockManager is the gateway's NLM and NSM state: which client hosts hold
// locks on what, the owners' identities for TEST, the background waiters
// and the NSM monitor list. The locks themselves are in meta.
type lockManager struct {
	v    *vfs.VFS
	wait time.Duration // guarded by mu (tests change it)
	// inCall counts LOCK calls waiting for their waiter, at most maxInCall.
	inCall     atomic.Int32
	maxInCall  int32
	maxWaiters int // guarded by mu (tests change it)

	ctx    context.Context // ends at Close: waiters stop
	cancel context.CancelFunc
	wg     sync.WaitGroup // waiters

	mu       sync.Mutex
	hosts    map[string]*nlmHost  // by lower-case caller name
	states   map[string]int32     // each host's NSM state, as its LOCKs last said
	owners   map[uint64]*nlmOwner // owners holding locks
	waiters  map[waitKey]*lockWaiter
	state    int32                             // NSM state number: odd while up
	monitors map[string]map[proto.NSMMyID]bool // NSM MON records, by host
}

// nlmHost is what one client host holds.
type nlmHost struct {
	held map[heldLock]bool // (inode, owner) pairs that may hold locks
}

type heldLock struct {
	ino   base.Ino
	owner uint64
}

// nlmOwner is an owner's identity as its client gave it, for the holder
// of a TEST; refs counts its heldLock entries.
type nlmOwner struct {
	svid int32
	oh   []byte
	refs int
}

// waitKey is one blocked request: the same owner asking for the same
// lock again is the same request.
type waitKey struct {
	ino        base.Ino
	owner      uint64
	typ        base.LockType
	start, end uint64
}

// lockWaiter waits for a lock in the background.
type lockWaiter struct {
	host   string
	stop   context.CancelFunc
	done   chan struct{} // closed, under lockManager.mu, when it returned
	err    syscall.Errno // its result, once done
	asked  time.Time     // the last LOCK that asked for it; guarded by mu
	cancel bool          // CANCEL, expiry or FREE_ALL: release what it gets
}

func newLockManager(v *vfs.VFS, wait time.Duration, maxInFlight int) *lockManager {
	ctx, cancel := context.WithCancel(context.Background())
	return &lockManager{
		v: v, wait: wait, ctx: ctx, cancel: cancel,
		maxInCall: int32(max(1, maxInFlight/2)), maxWaiters: maxWaiters,
		hosts:    map[string]*nlmHost{},
		states:   map[string]int32{},
		owners:   map[uint64]*nlmOwner{},
		waiters:  map[waitKey]*lockWaiter{},
		monitors: map[string]map[proto.NSMMyID]bool{},
		// Odd, and larger at every start (in seconds) without anything
		// kept on disk: clients see the gateway restarted.
		state: int32(time.Now().Unix()&0x7FFFFFFE | 1),
	}
}

// hostKey is the key of a client host: host names are case-insensitive.
func hostKey(name string) string { return strings.ToLower(name) }

// lockOwner is the owner of the locks of (caller_name, svid, oh).
func lockOwner(l *proto.NLM4Lock) uint64 {
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint32(n[:4], uint32(len(l.CallerName)))
	binary.BigEndian.PutUint32(n[4:], uint32(l.Svid))
	h.Write(n[:])
	h.Write([]byte(l.CallerName))
	h.Write(l.OH)
	var sum [sha256.Size]byte
	return binary.BigEndian.Uint64(h.Sum(sum[:0])) | vfs.RemoteOwner
}

// lockRange turns an NLM offset and length (0: to the end of the file)
// into a lock's inclusive range; false when the offset is beyond what a
// lock can start at (FBIG). A range that would end past the largest
// offset ends there, as fcntl's does.
func lockRange(off, length uint64) (start, end uint64, ok bool) {
	if off > base.LockEOF {
		return 0, 0, false
	}
	end = base.LockEOF
	if length != 0 && length-1 <= base.LockEOF-off {
		end = off + length - 1
	}
	return off, end, true
}

// nlmStatus converts an errno from vfs into an nlm4_stats.
func nlmStatus(e syscall.Errno) uint32 {
	switch e {
	case 0:
		return proto.NLM4Granted
	case syscall.EAGAIN:
		return proto.NLM4Denied
	case syscall.EDEADLK:
		return proto.NLM4Deadlock
	case syscall.EROFS:
		return proto.NLM4ROFS
	case syscall.ESTALE, syscall.ENOENT, syscall.EBADF:
		return proto.NLM4StaleFH
	case syscall.EFBIG:
		return proto.NLM4FBig
	case syscall.ENOLCK:
		return proto.NLM4DeniedNoLocks
	}
	return proto.NLM4Failed
}

// nlmTarget resolves a lock's file handle and range: the inode and the
// lock request, or the status to answer.
func (s *Server) nlmTarget(ctx context.Context, l *proto.NLM4Lock, typ base.LockType) (base.Ino, base.Lock, uint32) {
	ino, st := s.inoOf(ctx, l.FH)
	switch st {
	case proto.NFS3OK:
	case proto.NFS3ErrBadHandle, proto.NFS3ErrStale:
		return 0, base.Lock{}, proto.NLM4StaleFH
	default:
		return 0, base.Lock{}, proto.NLM4Failed
	}
	start, end, ok := lockRange(l.Offset, l.Len)
	if !ok {
		return 0, base.Lock{}, proto.NLM4FBig
	}
	return ino, base.Lock{Type: typ, Start: start, End: end}, proto.NLM4Granted
}

func lockType(exclusive bool) base.LockType {
	if exclusive {
		return base.WriteLock
	}
	return base.ReadLock
}

// nlmRes appends an nlm4_res.
func nlmRes(w *proto.Writer, cookie []byte, st uint32) {
	w.Opaque(cookie)
	w.Uint32(st)
}

func nlmNull(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	return true
}

func nlmTest(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	var a proto.NLM4TestArgs
	if a.Decode(args); args.Err() != nil {
		return false
	}
	if !req.allowed {
		nlmRes(w, a.Cookie, proto.NLM4Failed)
		return true
	}
	ino, l, st := s.nlmTarget(ctx, &a.Lock, lockType(a.Exclusive))
	if st != proto.NLM4Granted {
		nlmRes(w, a.Cookie, st)
		return true
	}
	got, e := s.v.GetInodeLock(ctx, ino, lockOwner(&a.Lock), l)
	if e != 0 || got.Type == base.Unlock {
		nlmRes(w, a.Cookie, nlmStatus(e))
		return true
	}
	nlmRes(w, a.Cookie, proto.NLM4Denied)
	h := proto.NLM4Holder{Exclusive: got.Type == base.WriteLock, Svid: int32(got.Pid), Offset: got.Start}
	if got.End != base.LockEOF {
		h.Len = got.End - got.Start + 1
	}
	if got.Owner&vfs.RemoteOwner != 0 {
		s.locks.mu.Lock()
		if o := s.locks.owners[got.Owner]; o != nil {
			h.Svid, h.OH = o.svid, o.oh
		}
		s.locks.mu.Unlock()
	}
	h.Encode(w)
	return true
}

func nlmLock(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	var a proto.NLM4LockArgs
	if a.Decode(args); args.Err() != nil {
		return false
	}
	if !req.allowed {
		nlmRes(w, a.Cookie, proto.NLM4Failed)
		return true
	}
	if a.State != 0 {
		s.locks.noteState(ctx, a.Lock.CallerName, a.State)
	}
	if a.Exclusive && s.opts.Export.ReadOnly {
		// A write lock needs a file open for writing, which a read-only
		// export does not give.
		nlmRes(w, a.Cookie, proto.NLM4ROFS)
		return true
	}
	ino, l, st := s.nlmTarget(ctx, &a.Lock, lockType(a.Exclusive))
	if st == proto.NLM4Granted {
		// NM_LOCK has no block field of its own meaning: it is LOCK
		// without monitoring, and this gateway monitors no one.
		st = s.locks.lock(ctx, &a.Lock, ino, l, a.Block && req.call.Proc == proto.NLMProcLock)
	}
	nlmRes(w, a.Cookie, st)
	return true
}

func nlmCancel(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	var a proto.NLM4CancArgs
	if a.Decode(args); args.Err() != nil {
		return false
	}
	if !req.allowed {
		nlmRes(w, a.Cookie, proto.NLM4Failed)
		return true
	}
	ino, l, st := s.nlmTarget(ctx, &a.Lock, lockType(a.Exclusive))
	if st == proto.NLM4Granted {
		// Granted whether or not a waiter was found, as knfsd answers: the
		// client only needs to know nothing waits any more.
		s.locks.cancelWaiter(ctx, waitKey{ino, lockOwner(&a.Lock), l.Type, l.Start, l.End})
	}
	nlmRes(w, a.Cookie, st)
	return true
}

func nlmUnlock(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	var a proto.NLM4UnlockArgs
	if a.Decode(args); args.Err() != nil {
		return false
	}
	if !req.allowed {
		nlmRes(w, a.Cookie, proto.NLM4Failed)
		return true
	}
	ino, l, st := s.nlmTarget(ctx, &a.Lock, base.Unlock)
	if st == proto.NLM4Granted {
		st = s.locks.unlock(ctx, &a.Lock, ino, l)
	}
	nlmRes(w, a.Cookie, st)
	return true
}

// nlmShare answers SHARE and UNSHARE: DOS share reservations are granted
// and nothing is recorded, so they exclude no one.
func nlmShare(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	var a proto.NLM4ShareArgs
	if a.Decode(args); args.Err() != nil {
		return false
	}
	st := uint32(proto.NLM4Granted)
	if !req.allowed {
		st = proto.NLM4Failed
	}
	nlmRes(w, a.Cookie, st)
	w.Uint32(0) // sequence
	return true
}

func nlmFreeAll(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	var a proto.NLM4Notify
	if a.Decode(args); args.Err() != nil {
		return false
	}
	if req.allowed {
		s.locks.freeHost(ctx, a.Name, a.State)
	}
	return true
}

// lock takes l on ino for the owner of nl (waiting, with block, as the
// package comment says) and returns the status to answer.
func (lm *lockManager) lock(ctx context.Context, nl *proto.NLM4Lock, ino base.Ino, l base.Lock, block bool) uint32 {
	owner := lockOwner(nl)
	host := hostKey(nl.CallerName)
	key := waitKey{ino, owner, l.Type, l.Start, l.End}
	e := lm.v.SetInodeLock(ctx, ino, owner, l, false)
	if e == 0 {
		lm.mu.Lock()
		lm.noteHeldLocked(host, ino, owner, nl)
		if wt := lm.waiters[key]; wt != nil {
			// A waiter of this very request got it (or is about to: no
			// one else holds it now). The lock is the client's: the
			// waiter only has to stop.
			delete(lm.waiters, key)
			wt.stop()
		}
		lm.mu.Unlock()
		return proto.NLM4Granted
	}
	if e != syscall.EAGAIN || !block {
		return nlmStatus(e)
	}
	lm.mu.Lock()
	wt := lm.waiters[key]
	if wt == nil && len(lm.waiters) >= lm.maxWaiters {
		lm.mu.Unlock()
		return proto.NLM4DeniedNoLocks
	}
	if wt == nil {
		wt = lm.startWaiterLocked(key, host, nl, l)
	}
	wt.asked = time.Now()
	wait := lm.wait
	lm.mu.Unlock()

	if lm.inCall.Add(1) > lm.maxInCall {
		lm.inCall.Add(-1)
		return proto.NLM4Blocked
	}
	defer lm.inCall.Add(-1)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-wt.done:
	case <-timer.C:
	case <-ctx.Done():
	case <-lm.ctx.Done():
	}
	lm.mu.Lock()
	defer lm.mu.Unlock()
	select {
	case <-wt.done:
		// Claimed: the waiter is done with, whatever it got.
		if lm.waiters[key] == wt {
			delete(lm.waiters, key)
		}
		if wt.cancel {
			return proto.NLM4Denied // cancelled meanwhile: it released what it got
		}
		if wt.err == syscall.EINTR {
			return proto.NLM4Denied // the gateway is closing
		}
		return nlmStatus(wt.err)
	default:
		return proto.NLM4Blocked
	}
}

// startWaiterLocked starts a background waiter for key.
func (lm *lockManager) startWaiterLocked(key waitKey, host string, nl *proto.NLM4Lock, l base.Lock) *lockWaiter {
	ctx, stop := context.WithCancel(lm.ctx)
	wt := &lockWaiter{host: host, stop: stop, done: make(chan struct{})}
	lm.waiters[key] = wt
	owner := &proto.NLM4Lock{Svid: nl.Svid, OH: bytes.Clone(nl.OH)}
	lm.wg.Add(1)
	go func() {
		defer lm.wg.Done()
		defer stop()
		e := lm.v.SetInodeLock(ctx, key.ino, key.owner, l, true)
		lm.mu.Lock()
		wt.err = e
		release := e == 0 && wt.cancel
		if e == 0 && !wt.cancel {
			// Held now, claimed or not: FREE_ALL must find it.
			lm.noteHeldLocked(host, key.ino, key.owner, owner)
		}
		close(wt.done)
		lm.mu.Unlock()
		if release {
			lm.release(context.Background(), key)
		}
	}()
	return wt
}

// cancelWaiter stops the waiter of key, if any, and releases the lock if
// it got it and no LOCK has claimed it.
func (lm *lockManager) cancelWaiter(ctx context.Context, key waitKey) {
	lm.mu.Lock()
	wt := lm.waiters[key]
	release := wt != nil && lm.cancelLocked(key, wt)
	lm.mu.Unlock()
	if release {
		lm.release(ctx, key)
	}
}

// cancelLocked cancels waiter wt of key and reports whether it holds the
// lock already, which the caller releases (after unlocking mu); a waiter
// that gets the lock later releases it itself. The owner stays among the
// host's holders: it may hold other locks of the file.
func (lm *lockManager) cancelLocked(key waitKey, wt *lockWaiter) bool {
	delete(lm.waiters, key)
	wt.cancel = true
	wt.stop()
	select {
	case <-wt.done:
		return wt.err == 0
	default:
	}
	return false
}

// release gives back the range a cancelled waiter got.
func (lm *lockManager) release(ctx context.Context, key waitKey) {
	_ = lm.v.SetInodeLock(ctx, key.ino, key.owner, base.Lock{Type: base.Unlock, Start: key.start, End: key.end}, false)
}

// unlock releases l on ino for the owner of nl.
func (lm *lockManager) unlock(ctx context.Context, nl *proto.NLM4Lock, ino base.Ino, l base.Lock) uint32 {
	owner := lockOwner(nl)
	e := lm.v.SetInodeLock(ctx, ino, owner, l, false)
	if e == syscall.EROFS {
		e = 0 // nothing was recorded in a snapshot
	}
	if e == 0 && l.Start == 0 && l.End == base.LockEOF {
		// The whole file (what a client sends at close): the owner holds
		// nothing on it any more.
		lm.mu.Lock()
		lm.dropHeldLocked(hostKey(nl.CallerName), ino, owner)
		lm.mu.Unlock()
	}
	return nlmStatus(e)
}

// noteHeldLocked records that host's owner may hold locks on ino.
func (lm *lockManager) noteHeldLocked(host string, ino base.Ino, owner uint64, nl *proto.NLM4Lock) {
	h := lm.hosts[host]
	if h == nil {
		h = &nlmHost{held: map[heldLock]bool{}}
		lm.hosts[host] = h
	}
	k := heldLock{ino, owner}
	if h.held[k] {
		return
	}
	h.held[k] = true
	o := lm.owners[owner]
	if o == nil {
		o = &nlmOwner{svid: nl.Svid, oh: bytes.Clone(nl.OH)}
		lm.owners[owner] = o
	}
	o.refs++
}

// dropHeldLocked forgets that host's owner holds locks on ino.
func (lm *lockManager) dropHeldLocked(host string, ino base.Ino, owner uint64) {
	h := lm.hosts[host]
	k := heldLock{ino, owner}
	if h == nil || !h.held[k] {
		return
	}
	delete(h.held, k)
	if len(h.held) == 0 {
		delete(lm.hosts, host)
	}
	if o := lm.owners[owner]; o != nil {
		if o.refs--; o.refs == 0 {
			delete(lm.owners, owner)
		}
	}
}

// freeHost releases every lock of a client host and stops its waiters
// (FREE_ALL, NSM NOTIFY: the client rebooted and holds nothing now); a
// state other than 0 is the host's new NSM state, which its next LOCKs
// carry.
func (lm *lockManager) freeHost(ctx context.Context, name string, state int32) {
	host := hostKey(name)
	lm.mu.Lock()
	held := lm.takeHostLocked(host)
	if state != 0 {
		lm.states[host] = state
	}
	lm.mu.Unlock()
	lm.releaseAll(ctx, held)
}

// noteState records the NSM state number a LOCK of host name carries; a
// change from the one its earlier LOCKs carried means the host rebooted,
// and the locks it held before are released.
func (lm *lockManager) noteState(ctx context.Context, name string, state int32) {
	host := hostKey(name)
	lm.mu.Lock()
	old, seen := lm.states[host]
	lm.states[host] = state
	var held []heldLock
	if seen && old != state {
		held = lm.takeHostLocked(host)
	}
	lm.mu.Unlock()
	lm.releaseAll(ctx, held)
}

// takeHostLocked stops host's waiters and forgets its locks, which it
// returns for releaseAll. A waiter that got its lock has noted it among
// the host's.
func (lm *lockManager) takeHostLocked(host string) []heldLock {
	for key, wt := range lm.waiters {
		if wt.host == host {
			lm.cancelLocked(key, wt)
		}
	}
	h := lm.hosts[host]
	if h == nil {
		return nil
	}
	held := make([]heldLock, 0, len(h.held))
	for k := range h.held {
		held = append(held, k)
	}
	for _, k := range held {
		lm.dropHeldLocked(host, k.ino, k.owner)
	}
	return held
}

// releaseAll releases every lock of the (inode, owner) pairs.
func (lm *lockManager) releaseAll(ctx context.Context, held []heldLock) {
	for _, k := range held {
		_ = lm.v.SetInodeLock(ctx, k.ino, k.owner, base.Lock{Type: base.Unlock, End: base.LockEOF}, false)
	}
}

// expire cancels the waiters no client asked for within waiterIdle.
func (lm *lockManager) expire(ctx context.Context, now time.Time) {
	lm.mu.Lock()
	var release []waitKey
	for key, wt := range lm.waiters {
		if now.Sub(wt.asked) >= waiterIdle && lm.cancelLocked(key, wt) {
			release = append(release, key)
		}
	}
	lm.mu.Unlock()
	for _, key := range release {
		lm.release(ctx, key)
	}
}

// close stops the waiters and releases every lock clients took through
// this gateway: once it stops, no client could release them (a restarted
// gateway knows none of them).
func (lm *lockManager) close(ctx context.Context) {
	lm.mu.Lock()
	for key, wt := range lm.waiters {
		lm.cancelLocked(key, wt) // what they got is among the hosts' locks
	}
	lm.mu.Unlock()
	lm.cancel()
	lm.wg.Wait()
	lm.mu.Lock()
	var names []string
	for host := range lm.hosts {
		names = append(names, host)
	}
	lm.mu.Unlock()
	for _, host := range names {
		lm.freeHost(ctx, host, 0)
	}
}
