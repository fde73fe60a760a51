package meta

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// Creates started by their lookup (design/0002-shared-mode.md, "A lookup
// that starts the create").
//
// Before it creates a name, the kernel looks it up. On a database server
// the lookup is one round trip and the create two: the transaction's
// reads (with BEGIN), then its writes with COMMIT. The create reads again
// what the lookup has just read (the parent and the entry), plus the
// epoch records and a usage shard. Where most lookups that reach the
// server end in a create, a lookup begins the create's transaction
// instead (kv.Starter): BEGIN, and one statement reading everything the
// lookup and the create read; the lookup answers from it. If the name is
// absent, the transaction waits, parked, for a create of that name, which
// then needs only its commit. A parked transaction no create takes within
// aheadWait is rolled back, and so is one whose lookup found the name.
//
// The create then runs in a snapshot taken at the lookup, a little older
// than its own would be: a concurrent change of what it writes (the
// parent's attributes) makes it conflict and run again in a new
// transaction, as it would have anyway had the change come between its
// BEGIN and its COMMIT.

// aheadWait is how long a parked transaction waits for its create. The
// kernel sends the create as soon as the lookup's answer arrives.
const aheadWait = 20 * time.Millisecond

// aheadMax bounds the parked transactions (each holds a connection).
const aheadMax = 16

// Score of the lookups that reach the store: the share of them followed
// by a create of the name, with a weight of 1/16 for the latest, in units
// of aheadScale. Lookups start transactions while it is above half.
const (
	aheadScale = 1 << 16
	aheadStep  = aheadScale / 16
)

type aheadKey struct {
	parent base.Ino
	name   string
}

type parked struct {
	st    kv.Started
	shard byte // the usage shard whose record the transaction read (held)
}

type aheadState struct {
	starter kv.Starter
	shards  *shardPool
	mu      sync.Mutex
	score   int
	waiting map[aheadKey]*parked
	// absent are names that loose lookups found missing lately, so that
	// a create of one counts for the score while nothing is started.
	absent map[aheadKey]bool
	off    bool // the store refused (errors.ErrUnsupported)

	started, used, abandoned, retried atomic.Int64
}

// AheadStats counts the transactions lookups started for creates.
type AheadStats struct {
	Started   int64 `json:"started"`   // transactions lookups began
	Used      int64 `json:"used"`      // taken by the create that followed
	Abandoned int64 `json:"abandoned"` // rolled back: the name existed, or no create came
	Retried   int64 `json:"retried"`   // used, but the create conflicted and ran again
	Score     int   `json:"score"`     // percent of recent server lookups followed by a create
}

// AheadStats returns the counters; ok is false when lookups never start
// transactions (a store without kv.Starter, or with the latest-version
// cache).
func (m *Meta) AheadStats() (s AheadStats, ok bool) {
	a := m.ahead
	if a == nil {
		return s, false
	}
	a.mu.Lock()
	score := a.score
	a.mu.Unlock()
	return AheadStats{Started: a.started.Load(), Used: a.used.Load(), Abandoned: a.abandoned.Load(),
		Retried: a.retried.Load(), Score: score * 100 / aheadScale}, true
}

// wantStart counts a lookup that reaches the store and reports whether it
// should start a transaction.
func (a *aheadState) wantStart() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.score -= a.score / 16
	return !a.off && a.score > aheadScale/2 && len(a.waiting) < aheadMax
}

// noteAbsent records that a loose lookup found name missing.
func (a *aheadState) noteAbsent(k aheadKey) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.absent) >= 256 {
		clear(a.absent)
	}
	a.absent[k] = true
}

// park keeps st for a create of k, for aheadWait.
func (a *aheadState) park(k aheadKey, p *parked) {
	a.mu.Lock()
	if a.off { // closed meanwhile
		a.mu.Unlock()
		a.abandon(p)
		return
	}
	old := a.waiting[k]
	a.waiting[k] = p
	a.mu.Unlock()
	if old != nil {
		a.abandon(old)
	}
	time.AfterFunc(aheadWait, func() {
		a.mu.Lock()
		mine := a.waiting[k] == p
		if mine {
			delete(a.waiting, k)
		}
		a.mu.Unlock()
		if mine {
			a.abandon(p)
		}
	})
}

// take returns the transaction parked for a create of k, if any, and
// counts the create for the score.
func (a *aheadState) take(k aheadKey) *parked {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.waiting[k]
	if p != nil || a.absent[k] {
		a.score = min(a.score+aheadStep, aheadScale)
	}
	delete(a.waiting, k)
	delete(a.absent, k)
	return p
}

// conflicted lowers the score after a create in a started transaction had
// to run again: in a directory many processes of this client create in,
// the lookup's snapshot is often too old.
func (a *aheadState) conflicted() {
	a.retried.Add(1)
	a.mu.Lock()
	a.score = max(a.score-2*aheadStep, 0)
	a.mu.Unlock()
}

// abandon rolls p's transaction back and gives its shard back.
func (a *aheadState) abandon(p *parked) {
	a.abandoned.Add(1)
	p.st.Abandon()
	a.shards.put(p.shard)
}

// close rolls back every parked transaction.
func (a *aheadState) close() {
	a.mu.Lock()
	ps := make([]*parked, 0, len(a.waiting))
	for k, p := range a.waiting {
		ps = append(ps, p)
		delete(a.waiting, k)
	}
	a.off = true
	a.mu.Unlock()
	for _, p := range ps {
		a.abandon(p)
	}
}

// createReads are the ranges the first read of a create of name in parent
// asks for (mknod's createRead), with usage shard shard.
func (m *Meta) createReads(parent base.Ino, name string, shard byte) []kv.Range {
	return m.firstReads(func(o *op) error { return o.createRead(parent, name) }, shard)
}

// createRead is the first read of a create: the parent and the entry, the
// epoch records and the usage shard, and the usage shards of the quotas
// the last create in parent charged (quotaHints).
func (o *op) createRead(parent base.Ino, name string) error {
	logicals := [][]byte{attrKey(parent), dentryKey(parent, name)}
	plains := append(o.opPlains(), o.m.quotaHints.shardKeys(parent, o.shard)...)
	return o.prefetch(logicals, o.prefetchPlains(plains, logicals))
}

// lookupAhead is LookupDir's read of the store in a transaction it starts
// for a create of name; done is false if none could be started (the
// caller looks up as usual).
func (m *Meta) lookupAhead(ctx context.Context, c *Caller, parent base.Ino, name string, lease *[]byte) (ino base.Ino, a, p base.Attr, done bool, err error) {
	ah := m.ahead
	shard := ah.shards.get()
	ranges := append(m.firstReads(func(o *op) error { return o.prefetchEntry(parent, name) }, shard),
		m.createReads(parent, name, shard)...)
	st, err := ah.starter.StartUpdate(ctx, ranges)
	if err != nil {
		ah.shards.put(shard)
		if errors.Is(err, errors.ErrUnsupported) {
			ah.mu.Lock()
			ah.off = true
			ah.mu.Unlock()
		}
		return 0, a, p, false, nil
	}
	ah.started.Add(1)
	r := &wtx{Txn: readTxn{st.Reader()}}
	r.leaseOut = lease
	if err = r.prefetchEntry(parent, name); err == nil {
		ino, a, err = lookupAt(r, c, parent, name, latestEpoch)
	}
	if err == nil {
		p, err = getAttr(r, parent)
	}
	if errors.Is(err, base.ErrNotFound) && !m.isClosed() {
		// Park it only if it is the entry that is missing.
		if pa, perr := getAttr(r, parent); perr == nil && pa.Type == base.TypeDir && pa.Nlink > 0 {
			ah.park(aheadKey{parent, name}, &parked{st: st, shard: shard})
			return 0, a, p, true, err
		}
	}
	ah.abandon(&parked{st: st, shard: shard})
	return ino, a, p, true, err
}

// mutateAhead runs a create's fn in the transaction its lookup parked, if
// there is one; else as mutateGrouped.
// replay, if not nil, is fn with outputs nobody reads: with it, a create
// in a leased directory may be written back (writeback.go). ino is the
// inode the create makes, a number never used before: it has no lease
// record (a new directory's create reads that record).
func (m *Meta) mutateAhead(ctx context.Context, parent base.Ino, name string, ino base.Ino, fn, replay func(o *op) error) error {
	ah := m.ahead
	var p *parked
	if ah != nil {
		p = ah.take(aheadKey{parent, name})
	}
	if p != nil && m.wb != nil && m.leases.absent(parent, name) {
		// Written back, the create needs no transaction.
		ah.abandon(p)
		p = nil
	}
	if p == nil {
		// In a directory this client leases, the name is known absent:
		// the create may run in one round trip (speculative.go), or none.
		if m.leases != nil && m.leases.absent(parent, name) {
			absent := []kv.Range{newestRange(dentryKey(parent, name)), exactRange(leaseKey(ino))}
			if replay != nil {
				if done, err := m.writeBack(ctx, []base.Ino{parent}, absent, fn, replay, nil); done {
					return err
				}
			}
			if done, err := m.speculate(ctx, fn, absent); done {
				return err
			}
		}
		return m.mutateGrouped(ctx, fn)
	}
	if m.isClosed() {
		ah.abandon(p)
		return kv.ErrClosed
	}
	defer ah.shards.put(p.shard)
	ah.used.Add(1)
	attempts := 0
	err := m.updateIn(ctx, p.st, p.shard, func(t *wtx) error {
		attempts++
		o := m.newOp(t)
		if err := fn(o); err != nil {
			return err
		}
		return o.flush()
	})
	if attempts > 1 {
		ah.conflicted()
	}
	if le := (*leasedError)(nil); errors.As(err, &le) {
		// Another client leases the directory: wait for it as usual.
		return m.mutateGrouped(ctx, fn)
	}
	return err
}
