package meta

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// Directory leases (design/0002-shared-mode.md, "Directory leases: a
// create in one round trip").
//
// On a shared engine, the kernel's lookup of a name about to be created
// costs a round trip: the client cannot know from memory that no other
// client has just created the name. A directory lease lets it know. The
// lease of directory D is a record ("J" D: the holder's session) that
// every change of D's entries or attribute reads in its transaction
// (wtx.checkLease): a transaction of another session that finds the
// record fails with a leasedError, asks the holder to give the lease back
// (a recall record, "U" holder D, and a notification), waits for the
// release, and runs again. So while the record exists only the holder
// changes D, and the holder, which read every entry of D when it took the
// lease, answers lookups of names D does not hold from memory.
//
// The holder takes a lease when lookups in D keep finding nothing in the
// store (leaseTrigger within leaseWindow: files being created). Its
// transaction reads the record, D's attribute and every entry of D, and
// writes the record and D's attribute (unchanged), so it conflicts with any
// concurrent change of D (kv.Txn: materialized conflict). Its own commits
// then add the names they write to the set: the set may hold names no
// longer there (a lookup of one goes to the store), never miss one. It
// also keeps D's attribute, from its own commits, for the search
// permission check of the lookups it answers.
//
// The holder trusts its leases only while its session is surely alive:
// until half the session timeout after the start of its last successful
// heartbeat. A client that declares it dead (after the whole timeout)
// deletes its leases with its locks and holds, so no lease is trusted by a
// holder once another client may change the directory. A holder gives a
// lease back when recalled (notification, or the recall record its next
// heartbeat finds), when unused for leaseIdle, when its name set grows
// past leaseMaxNames, and when its session ends; a recalled directory is
// not leased again for a while (leaseBackoff, doubling).
//
// Creates in a leased directory run speculatively (speculative.go): one round
// trip instead of the lookup's and the create's.
const (
	leaseTrigger    = 2
	leaseWindow     = time.Second
	leaseMaxNames   = 1 << 16
	leaseMaxTotal   = 1 << 20 // names in all the leases of a client
	leaseMaxDirs    = 4096
	leaseIdle       = 30 * time.Second
	leaseBackoff    = time.Second
	leaseMaxBackoff = time.Minute
	// recallMaxWait bounds one wait of a recall before the waiter's
	// transaction looks again (the holder may be dead, or the
	// notification lost).
	recallMaxWait = time.Second
)

// leaseChannel carries "recall SID DIR" (to the holder) and "released
// DIR" (to the waiters).
const leaseChannel = "cairn_leases"

// leasedError is the failure of a transaction that would change a
// directory another session holds the lease of.
type leasedError struct {
	dir    base.Ino
	holder uint64
}

func (e *leasedError) Error() string {
	return fmt.Sprintf("directory %d is leased by session %d", e.dir, e.holder)
}

type dirLease struct {
	names map[string]struct{} // every entry of the directory, and maybe more
	attr  base.Attr           // the directory's attribute
	used  time.Time
	// spoiled: an acquisition's own commits meanwhile left the
	// attribute unknown.
	spoiled bool
}

type missCount struct {
	n     int
	since time.Time
}

type leaseState struct {
	// mu is a leaf: nothing else is locked while it is held. Callers
	// hold other locks around it (CloseFile holds Meta.mu around freshIn),
	// so a lock taken under it can deadlock: an acquisition that read the
	// session id (Meta.mu) under it once waited for such a close, which
	// waited for it.
	mu   sync.Mutex
	dirs map[base.Ino]*dirLease
	gen  map[base.Ino]uint64 // moves at every release: an acquisition begun before does not install
	busy map[base.Ino]bool   // acquisition running
	// releasing counts the releases in flight per directory: none may
	// overlap an acquisition, whose record a late release would delete.
	releasing map[base.Ino]int
	noted     map[base.Ino]*dirLease
	miss      map[base.Ino]*missCount
	back      map[base.Ino]backoff
	total     int // names in the sets of dirs
	// fresh are the inodes this client made in a directory it leases,
	// leased ever since (dir -> inodes; freshDir: inode -> dir): no other
	// client can reach one without a lookup there, which recalls the
	// lease first. Their changes may be written back (writeback.go).
	fresh    map[base.Ino]map[base.Ino]bool
	freshDir map[base.Ino]base.Ino
	// until is when the holder stops trusting its leases (session alive).
	until   time.Time
	timeout time.Duration // session timeout; 0: no leases
	backoff time.Duration // first back-off after a recall (leaseBackoff; tests shorten it)
	stopSub func()
	// acquireHook, if set (tests only, before the first lease), runs in
	// every acquisition's transaction after it read the entries.
	acquireHook func(dir base.Ino)
	// installHook, if set (tests only, before the first lease), runs with
	// mu held where an acquisition decides whether to install its lease.
	installHook func(dir base.Ino)

	acquired, released, recalls, answered atomic.Int64
}

type backoff struct {
	until time.Time
	next  time.Duration
}

// LeaseStats counts directory leases.
type LeaseStats struct {
	Held     int   `json:"held"`     // leases held now
	Acquired int64 `json:"acquired"` // leases taken
	Released int64 `json:"released"` // leases given back
	Recalls  int64 `json:"recalls"`  // recalls this client sent (it waited for another's lease)
	Answered int64 `json:"answered"` // lookups answered from a lease's name set
}

func newLeaseState() *leaseState {
	return &leaseState{
		dirs: make(map[base.Ino]*dirLease), gen: make(map[base.Ino]uint64),
		busy: make(map[base.Ino]bool), noted: make(map[base.Ino]*dirLease),
		releasing: make(map[base.Ino]int),
		miss:      make(map[base.Ino]*missCount), back: make(map[base.Ino]backoff),
		backoff: leaseBackoff,
		fresh:   make(map[base.Ino]map[base.Ino]bool), freshDir: make(map[base.Ino]base.Ino),
	}
}

// LeaseStats returns the counters; ok is false when leases are off.
func (m *Meta) LeaseStats() (s LeaseStats, ok bool) {
	l := m.leases
	if l == nil {
		return s, false
	}
	l.mu.Lock()
	held := len(l.dirs)
	l.mu.Unlock()
	return LeaseStats{Held: held, Acquired: l.acquired.Load(), Released: l.released.Load(),
		Recalls: l.recalls.Load(), Answered: l.answered.Load()}, true
}

// trusted reports whether leases may answer now. Called with l.mu held.
func (l *leaseState) trusted(now time.Time) bool {
	return l.timeout > 0 && now.Before(l.until)
}

// alive records that the session was alive at at (a heartbeat or the
// session's start that began then succeeded).
func (l *leaseState) alive(at time.Time) {
	l.mu.Lock()
	if u := at.Add(l.timeout / 2); u.After(l.until) {
		l.until = u
	}
	l.mu.Unlock()
}

// lookup answers a lookup of name in dir from dir's lease: hit false if it
// cannot; else err is base.ErrNotFound, or the search permission's error.
func (l *leaseState) lookup(c *Caller, dir base.Ino, name string) (hit bool, err error) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	d := l.dirs[dir]
	if d == nil || !l.trusted(now) {
		return false, nil
	}
	if _, ok := d.names[name]; ok {
		return false, nil
	}
	d.used = now
	l.answered.Add(1)
	// As lookupAt answers, in its order.
	if err := access(c, &d.attr, MayExec); err != nil {
		return true, fmt.Errorf("lookup %q in %d: %w", name, dir, err)
	}
	if err := validName(name); err != nil {
		return true, err
	}
	return true, fmt.Errorf("%q in %d: %w", name, dir, base.ErrNotFound)
}

// held returns dir's lease if this client trusts it now. Called with
// l.mu held.
func (l *leaseState) held(dir base.Ino, now time.Time) *dirLease {
	if d := l.dirs[dir]; d != nil && l.trusted(now) {
		return d
	}
	return nil
}

// absent reports whether name is surely not in dir now (its lease).
func (l *leaseState) absent(dir base.Ino, name string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	d := l.held(dir, time.Now())
	if d == nil {
		return false
	}
	_, ok := d.names[name]
	return !ok
}

// holds reports whether this client trusts its lease of dir now.
func (l *leaseState) holds(dir base.Ino) bool {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	d := l.held(dir, now)
	if d != nil {
		d.used = now
	}
	return d != nil
}

// missed counts a lookup in dir that the store answered with no entry and
// reports whether a lease of dir should be taken now.
func (l *leaseState) missed(dir base.Ino) bool {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.timeout == 0 || l.dirs[dir] != nil || l.busy[dir] || l.releasing[dir] > 0 || len(l.dirs)+len(l.busy) >= leaseMaxDirs {
		return false
	}
	if b, ok := l.back[dir]; ok && now.Before(b.until) {
		return false
	}
	mc := l.miss[dir]
	if mc == nil || now.Sub(mc.since) > leaseWindow {
		if len(l.miss) >= 4*leaseMaxDirs {
			clear(l.miss)
		}
		mc = &missCount{since: now}
		l.miss[dir] = mc
	}
	mc.n++
	if mc.n < leaseTrigger {
		return false
	}
	delete(l.miss, dir)
	l.busy[dir] = true
	l.noted[dir] = &dirLease{names: make(map[string]struct{})}
	return true
}

// committed updates the leases after a commit of this client (err: its
// outcome, which may be unknown) that wrote entries names and attributes
// of inos (written: the directory attributes it wrote). It returns the
// leases to give back.
func (l *leaseState) committed(names []dirName, inos []base.Ino, written map[base.Ino]base.Attr, err error) []base.Ino {
	unknown := errors.Is(err, kv.ErrUnknownOutcome)
	l.mu.Lock()
	defer l.mu.Unlock()
	var drop []base.Ino
	for _, n := range names {
		if d := l.noted[n.dir]; d != nil {
			d.names[n.name] = struct{}{}
		}
		if d := l.dirs[n.dir]; d != nil {
			if _, ok := d.names[n.name]; !ok {
				d.names[n.name] = struct{}{}
				l.total++
			}
			if len(d.names) > leaseMaxNames || l.total > leaseMaxTotal {
				drop = append(drop, n.dir)
			}
		}
	}
	for _, ino := range inos {
		d, n := l.dirs[ino], l.noted[ino]
		if d == nil && n == nil {
			continue
		}
		a, ok := written[ino]
		switch {
		case unknown || (err == nil && (!ok || a.Nlink == 0)):
			// The attribute is not known (or the directory is gone).
			if d != nil {
				drop = append(drop, ino)
			}
			if n != nil {
				n.spoiled = true
			}
		case err == nil:
			for _, x := range []*dirLease{d, n} {
				if x != nil && a.Ctime >= x.attr.Ctime {
					x.attr = a
				}
			}
		}
	}
	return drop
}

// drop stops trusting the lease of dir (it is being given back). Called
// with l.mu held.
func (l *leaseState) drop(dir base.Ino) {
	if d := l.dirs[dir]; d != nil {
		l.total -= len(d.names)
		delete(l.dirs, dir)
	}
	l.gen[dir]++
	l.dropFresh(dir)
}

// dropFresh forgets the fresh inodes made in dir. Called with l.mu held.
func (l *leaseState) dropFresh(dir base.Ino) {
	for ino := range l.fresh[dir] {
		delete(l.freshDir, ino)
	}
	delete(l.fresh, dir)
}

// roomFor reports whether n more leases may be taken now.
func (l *leaseState) roomFor(n int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.dirs)+len(l.busy)+n <= leaseMaxDirs
}

// installNew installs the lease of dir, a directory this client just made
// (with its lease record) in a directory it leases: its entries are
// known, none.
func (l *leaseState) installNew(dir base.Ino, a base.Attr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dirs[dir] != nil {
		return
	}
	l.dirs[dir] = &dirLease{names: make(map[string]struct{}), attr: a, used: time.Now()}
	l.acquired.Add(1)
}

// forget stops trusting the lease of dir, whose record is gone already.
func (l *leaseState) forget(dir base.Ino) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.drop(dir)
}

// maxFresh bounds the fresh inodes a client keeps (lease.go's fresh).
const maxFresh = 1 << 18

// heldGen returns the generation of dir's lease if this client trusts it
// now (for addFresh).
func (l *leaseState) heldGen(dir base.Ino) (gen uint64, ok bool) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held(dir, now) == nil {
		return 0, false
	}
	return l.gen[dir], true
}

// addFresh records ino, made in dir while this client held its lease of
// generation gen, as fresh, if the lease was not given back since.
func (l *leaseState) addFresh(dir, ino base.Ino, gen uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dirs[dir] == nil || l.gen[dir] != gen || len(l.freshDir) >= maxFresh {
		return
	}
	if l.fresh[dir] == nil {
		l.fresh[dir] = make(map[base.Ino]bool)
	}
	l.fresh[dir][ino] = true
	l.freshDir[ino] = dir
}

// freshIn returns the directory fresh inode ino was made in, if it is
// fresh and its lease trusted now.
func (l *leaseState) freshIn(ino base.Ino) (base.Ino, bool) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	dir, ok := l.freshDir[ino]
	if !ok || !l.trusted(now) {
		return 0, false
	}
	return dir, true
}

// unfreshDir forgets the fresh inodes made in dir.
func (l *leaseState) unfreshDir(dir base.Ino) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dropFresh(dir)
}

// unfresh forgets that ino is fresh: it got a name elsewhere.
func (l *leaseState) unfresh(ino base.Ino) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if dir, ok := l.freshDir[ino]; ok {
		delete(l.freshDir, ino)
		delete(l.fresh[dir], ino)
	}
}

// forgetAll stops trusting every lease (the session ended or was declared
// dead: its leases are gone from the store).
func (l *leaseState) forgetAll() {
	l.mu.Lock()
	for d := range l.dirs {
		l.drop(d)
	}
	for d := range l.busy {
		l.gen[d]++
	}
	l.until = time.Time{}
	l.mu.Unlock()
}

// idle returns the leases unused for leaseIdle.
func (l *leaseState) idle(now time.Time) []base.Ino {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []base.Ino
	for dir, d := range l.dirs {
		if now.Sub(d.used) > leaseIdle {
			out = append(out, dir)
		}
	}
	return out
}

// startLeases turns leases on for session sid with the given timeout.
func (m *Meta) startLeases(timeout time.Duration, at time.Time) {
	l := m.leases
	if l == nil || timeout <= 0 {
		return
	}
	l.mu.Lock()
	l.timeout = timeout
	start := l.stopSub == nil
	l.mu.Unlock()
	l.alive(at)
	if n, ok := m.store.(kv.Notifier); ok && start {
		ch, stop := n.Subscribe(leaseChannel)
		done := make(chan struct{})
		l.mu.Lock()
		l.stopSub = func() { stop(); close(done) }
		l.mu.Unlock()
		go m.serveRecalls(ch, done)
	}
}

// stopLeases ends the recall subscription.
func (m *Meta) stopLeases() {
	l := m.leases
	if l == nil {
		return
	}
	l.forgetAll()
	l.mu.Lock()
	stop := l.stopSub
	l.stopSub = nil
	l.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// serveRecalls gives back the leases other clients recall, until done
// is closed.
func (m *Meta) serveRecalls(ch <-chan string, done <-chan struct{}) {
	for {
		var p string
		select {
		case p = <-ch:
		case <-done:
			return
		}
		f := strings.Fields(p)
		if len(f) != 3 || f[0] != "recall" {
			continue
		}
		sid, err1 := strconv.ParseUint(f[1], 10, 64)
		dir, err2 := strconv.ParseUint(f[2], 10, 64)
		if err1 != nil || err2 != nil || sid == 0 || sid != m.sessionID() {
			continue
		}
		go m.releaseLease(context.Background(), base.Ino(dir), true)
	}
}

// acquireLease takes the lease of dir (leaseState.missed said to).
func (m *Meta) acquireLease(dir base.Ino) {
	l := m.leases
	l.mu.Lock()
	gen := l.gen[dir]
	l.mu.Unlock()
	sid := m.sessionID()
	var names map[string]struct{}
	var attr base.Attr
	err := errLeaseBusy
	if sid != 0 && !m.isClosed() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = m.rawUpdate(ctx, func(t *wtx) error {
			names = make(map[string]struct{})
			if err := t.prefetch([][]byte{attrKey(dir)}, [][]byte{leaseKey(dir), sessionKey(sid)}); err != nil {
				return err
			}
			v, err := t.Get(leaseKey(dir))
			if err != nil {
				return err
			}
			if v != nil {
				return errLeaseBusy // another's (or a stale one of ours: released soon)
			}
			o := m.newOp(t)
			a, err := o.dirAttr(dir)
			if err != nil {
				return err
			}
			n := 0
			var derr error
			if err := vscan(t, dentryPrefix(dir), nil, latestEpoch, func(logical, _ []byte) bool {
				_, name, err := decodeDentryKey(logical)
				if err != nil {
					derr = err
					return false
				}
				names[string(name)] = struct{}{}
				n++
				return n <= leaseMaxNames
			}); err != nil {
				return err
			}
			if derr != nil {
				return derr
			}
			if n > leaseMaxNames {
				return errLeaseBusy
			}
			if hook := l.acquireHook; hook != nil {
				hook(dir)
			}
			// Write the directory's attribute, unchanged, at the live
			// epoch, as every change of the directory does (op.flush):
			// a concurrent one conflicts with this (kv.Txn). Rewriting
			// the newest version where it lies is not enough: when a
			// kept snapshot holds that version, a change writes a new
			// one of the live epoch instead.
			o.put(dir, a)
			if err := o.flush(); err != nil {
				return err
			}
			// The session's record, written back: a sweep that declares
			// this session dead (and deletes its leases) conflicts with
			// this, so no record of a dead session is left behind.
			s, err := t.Get(sessionKey(sid))
			if err != nil {
				return err
			}
			if s == nil {
				return errLeaseBusy
			}
			t.Set(sessionKey(sid), s)
			t.Set(leaseKey(dir), leaseValue(sid, m.wb != nil))
			attr = *a
			return nil
		})
		cancel()
	}
	// Before the lease is trusted: no prediction read before it (another
	// client may have changed dir since) is used or learned under it.
	m.spec.newTerm()
	cur := m.sessionID() // not under l.mu, a leaf
	l.mu.Lock()
	if hook := l.installHook; hook != nil {
		hook(dir)
	}
	noted := l.noted[dir]
	delete(l.noted, dir)
	delete(l.busy, dir)
	install := err == nil && l.gen[dir] == gen && cur == sid && noted != nil && !noted.spoiled
	if install {
		for n := range noted.names {
			names[n] = struct{}{}
		}
		install = l.total+len(names) <= leaseMaxTotal
	}
	if install {
		l.total += len(names)
		if noted.attr.Ctime >= attr.Ctime && noted.attr.Ctime != 0 {
			attr = noted.attr
		}
		l.dirs[dir] = &dirLease{names: names, attr: attr, used: time.Now()}
		l.acquired.Add(1)
	}
	l.mu.Unlock()
	if !install && !errors.Is(err, errLeaseBusy) && (err == nil || errors.Is(err, kv.ErrUnknownOutcome)) {
		// The record may be written: give it back.
		m.releaseLease(context.Background(), dir, false)
	}
}

var errLeaseBusy = errors.New("meta: directory not leased")

// releaseLease gives back this client's lease of dir (recalled: another
// client asked for it).
func (m *Meta) releaseLease(ctx context.Context, dir base.Ino, recalled bool) {
	l := m.leases
	l.mu.Lock()
	_, held := l.dirs[dir]
	l.drop(dir)
	l.releasing[dir]++
	defer func() {
		l.mu.Lock()
		if l.releasing[dir]--; l.releasing[dir] == 0 {
			delete(l.releasing, dir)
		}
		l.mu.Unlock()
	}()
	if recalled {
		b := l.back[dir]
		b.next = min(max(2*b.next, l.backoff), leaseMaxBackoff)
		b.until = time.Now().Add(b.next)
		if len(l.back) >= 4*leaseMaxDirs {
			clear(l.back)
		}
		l.back[dir] = b
	}
	l.mu.Unlock()
	if held {
		l.released.Add(1)
	}
	sid := m.sessionID()
	if sid == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if w := m.wb; w != nil && held {
		// A change that found the lease held before l.drop may be
		// running over the log now, which may be empty (rawUpdate's
		// barrier would then not wait for it): the log commits it
		// before the record goes, or others would change dir under it.
		w.mu.Lock()
		err := m.wbCommitLocked(ctx)
		w.mu.Unlock()
		if err != nil {
			m.log.Warn("giving back a directory lease: committing the write-back log", "dir", dir, "err", err)
			return
		}
	}
	err := m.rawUpdate(ctx, func(t *wtx) error {
		v, err := t.Get(leaseKey(dir))
		if err != nil {
			return err
		}
		if h, _, ok := leaseHolder(v); ok && h == sid {
			t.Delete(leaseKey(dir))
		}
		t.Delete(recallKey(sid, dir))
		return nil
	})
	// Others may change dir from now on: predictions of it go.
	m.spec.newTerm()
	if err != nil {
		m.log.Warn("giving back a directory lease", "dir", dir, "err", err)
		return
	}
	if n, ok := m.store.(kv.Notifier); ok {
		_ = n.Notify(ctx, leaseChannel, "released "+strconv.FormatUint(uint64(dir), 10))
	}
}

// releaseLeases gives back the leases recalled by records (found by the
// heartbeat) and the idle ones.
func (m *Meta) releaseLeases(ctx context.Context, recalled []base.Ino) {
	l := m.leases
	if l == nil {
		return
	}
	for _, d := range recalled {
		m.releaseLease(ctx, d, true)
	}
	for _, d := range l.idle(time.Now()) {
		m.releaseLease(ctx, d, false)
	}
}

// recallLease asks the holder of dir's lease to give it back and waits
// (for the release's notification, or a while: attempt n waits up to
// 10 ms × 2ⁿ, at most recallMaxWait) before the caller's transaction looks
// again.
func (m *Meta) recallLease(ctx context.Context, e *leasedError, attempt int) error {
	var sub <-chan string
	n, ok := m.store.(kv.Notifier)
	if ok {
		ch, stop := n.Subscribe(leaseChannel)
		defer stop()
		sub = ch
	}
	if m.leases != nil {
		m.leases.recalls.Add(1)
	}
	stale := false
	err := m.rawUpdate(ctx, func(t *wtx) error {
		// A holder with no session record ended without giving the
		// lease back (its last acquisition raced its end): the record
		// is stale, and nobody trusts it. Delete it rather than wait.
		s, err := t.Get(sessionKey(e.holder))
		if err != nil {
			return err
		}
		if stale = s == nil; stale {
			v, err := t.Get(leaseKey(e.dir))
			if err != nil {
				return err
			}
			if h, _, ok := leaseHolder(v); ok && h == e.holder {
				t.Delete(leaseKey(e.dir))
			}
			return nil
		}
		t.Set(recallKey(e.holder, e.dir), nil)
		return nil
	})
	if err != nil {
		return err
	}
	if stale {
		m.log.Warn("deleted the directory lease of an ended session", "dir", e.dir, "session", e.holder)
		return nil
	}
	if ok {
		_ = n.Notify(ctx, leaseChannel, fmt.Sprintf("recall %d %d", e.holder, e.dir))
	}
	wait := min(10*time.Millisecond<<min(attempt, 10), recallMaxWait)
	t := time.NewTimer(wait)
	defer t.Stop()
	want := "released " + strconv.FormatUint(uint64(e.dir), 10)
	for {
		select {
		case p := <-sub:
			if p == want {
				return nil
			}
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// retryLeased runs run again, after recalling the lease, while it fails
// on a directory another session leases.
func (m *Meta) retryLeased(ctx context.Context, run func() error) error {
	for attempt := 0; ; attempt++ {
		err := run()
		var le *leasedError
		if !errors.As(err, &le) {
			return err
		}
		if err := m.recallLease(ctx, le, attempt); err != nil {
			return err
		}
	}
}

// checkLease fails with a leasedError if another session than this
// transaction's holds the lease of dir.
func (t *wtx) checkLease(dir base.Ino) error {
	if !t.leaseCheck || t.leaseOK[dir] {
		return nil
	}
	v, err := t.Get(leaseKey(dir))
	if err != nil {
		return err
	}
	if v != nil {
		holder, _, ok := leaseHolder(v)
		if !ok {
			return fmt.Errorf("lease of directory %d: %d bytes: %w", dir, len(v), base.ErrIO)
		}
		if holder != t.leaseSid {
			return &leasedError{dir: dir, holder: holder}
		}
	}
	if t.leaseOK == nil {
		t.leaseOK = make(map[base.Ino]bool)
	}
	t.leaseOK[dir] = true
	return nil
}

// releaseSessionLeases deletes the leases and recalls of the given ended
// sessions.
func (o *op) releaseSessionLeases(dead map[uint64]bool) error {
	var keys [][]byte
	if err := o.Scan(prefixOnly(pLease), kv.PrefixEnd(prefixOnly(pLease)), false, func(k, v []byte) bool {
		if h, _, ok := leaseHolder(v); ok && dead[h] {
			keys = append(keys, append([]byte(nil), k...))
		}
		return true
	}); err != nil {
		return err
	}
	for _, k := range keys {
		o.Delete(k)
	}
	for sid := range dead {
		if err := o.deletePrefix(recallPrefix(sid)); err != nil {
			return err
		}
	}
	return nil
}

// recalledLeases returns the directories whose leases records ask sid to
// give back.
func recalledLeases(r kv.Reader, sid uint64) ([]base.Ino, error) {
	var dirs []base.Ino
	p := recallPrefix(sid)
	err := r.Scan(p, kv.PrefixEnd(p), false, func(k, _ []byte) bool {
		if _, dir, err := decodeRecallKey(k); err == nil {
			dirs = append(dirs, dir)
		}
		return true
	})
	return dirs, err
}

// withLeases adds to plains the lease records (lease.go) of the inodes
// whose attributes or entries logicals are: the directories a mutation
// may change, whose leases it checks.
func (t *wtx) withLeases(plains, logicals [][]byte) [][]byte {
	if !t.leaseCheck {
		return plains
	}
	for _, l := range logicals {
		if ino, ok := keyIno(l); ok && (l[0] == pAttr || l[0] == pDentry) {
			if k := leaseKey(ino); !t.leaseOK[ino] && !slices.ContainsFunc(plains, func(p []byte) bool { return bytes.Equal(p, k) }) {
				plains = append(plains, k)
			}
		}
	}
	return plains
}

// leaseValue is the value of a lease record: the holder's session, then
// a byte 1 if the holder writes changes back (writeback.go): other
// clients' reads of the directory then recall the lease first.
func leaseValue(sid uint64, writeBack bool) []byte {
	v := binary.BigEndian.AppendUint64(nil, sid)
	if writeBack {
		v = append(v, 1)
	}
	return v
}

// leaseHolder decodes a lease record's value.
func leaseHolder(v []byte) (sid uint64, writeBack, ok bool) {
	if len(v) != 8 && len(v) != 9 {
		return 0, false, false
	}
	return binary.BigEndian.Uint64(v), len(v) == 9 && v[8] == 1, true
}

// recallForRead waits, before a read of dir by this client, until no other
// session holds dir's lease with write-back (lease record value v, as
// read), recalling it: the holder commits its log before it gives the
// lease back. again reports whether the read must run again.
func (m *Meta) recallForRead(ctx context.Context, dir base.Ino, v []byte, attempt int) (again bool, err error) {
	holder, wb, ok := leaseHolder(v)
	if !ok || !wb || holder == m.sessionID() {
		return false, nil
	}
	if err := m.recallLease(ctx, &leasedError{dir: dir, holder: holder}, attempt); err != nil {
		return false, err
	}
	return true, nil
}
