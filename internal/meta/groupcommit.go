package meta

import (
	"bytes"
	"context"
	"errors"
	"sync"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// Group commit (design/0002-shared-mode.md, "Group commit of creates").
//
// On a database server each transaction costs statements, a commit and a
// log flush, whatever it writes, and the server's CPU bounds how many
// creates a second the clients get. Mutations that arrive while
// groupSlots transactions of this client are in flight wait for one to
// end, then run together in one transaction: each as if
// alone (its own op and wtx over a kv.Sub, in arrival order, each seeing
// the ones before it), and one commit for all. A mutation that fails (the
// name exists, no permission) drops its own writes and the others go on;
// a failed read or commit fails them all, and a conflict runs them all
// again, as kv.Store.Update does for one.
//
// A mutation that finds a slot free runs at once, alone: group commit
// never delays a lone client.

// maxGroup bounds how many mutations share one transaction.
const maxGroup = 64

// member is what a request of a group commit waits on.
type member struct {
	err  error
	lead bool          // set before done: this request runs the next group
	done chan struct{} // receives once: the result is in, or lead
}

func newMember() member { return member{done: make(chan struct{}, 1)} }

func (m *member) base() *member { return m }

// slots hold the groups of requests R that run at once (at most
// groupSlots) and the requests that wait for one to end.
type slots[R interface{ base() *member }] struct {
	mu      sync.Mutex
	running int // groups running
	queue   []R
}

// join returns true when r is to lead a group, with g.mu held (the
// leader takes its members from g.queue, then unlocks); false when r ran
// in another's group, whose leader set r's err.
func (g *slots[R]) join(r R) bool {
	g.mu.Lock()
	if g.running < groupSlots {
		g.running++
		return true
	}
	g.queue = append(g.queue, r)
	g.mu.Unlock()
	<-r.base().done
	if !r.base().lead {
		return false
	}
	g.mu.Lock()
	return true
}

// finish wakes the members of a group (batch; its leader first) and ends
// the slot's run: the first queued request leads the next group in it.
func (g *slots[R]) finish(batch []R) {
	for _, q := range batch[1:] {
		q.base().done <- struct{}{}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.queue) > 0 {
		next := g.queue[0]
		g.queue = g.queue[1:]
		next.base().lead = true
		next.base().done <- struct{}{}
	} else {
		g.running--
	}
}

type groupReq struct {
	member
	fn func(o *op) error
}

type committer struct {
	slots[*groupReq]
	groups  int64 // transactions run for more than one mutation
	members int64 // mutations that ran in those
}

// GroupStats counts group commit's work.
type GroupStats struct {
	Groups  int64 `json:"groups"`  // transactions that ran more than one mutation
	Members int64 `json:"members"` // mutations that ran in those
}

// GroupStats returns group commit's counters; ok is false when it is off.
func (m *Meta) GroupStats() (s GroupStats, ok bool) {
	g := m.group
	if g == nil {
		return s, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return GroupStats{Groups: g.groups, Members: g.members}, true
}

// groupSlots is how many groups may run at once: a request that finds
// fewer running starts one at once. One slot made four processes' creates
// slower in some runs (a group's members read one after the other); four
// slots grouped too little at sixteen (docs/performance-history.md).
const groupSlots = 2

// mutateGrouped is mutate, sharing a transaction with concurrent callers
// where group commit is on (Options.NoGroupCommit; stores without the
// latest-version cache). fn must not depend on running alone: it sees the
// writes of the mutations before it in its group, as it would had they
// committed just before. Its first read must come before any effect
// outside its op: firstReads runs it up to that read to learn what it
// reads.
func (m *Meta) mutateGrouped(ctx context.Context, fn func(o *op) error) error {
	err := m.retryLeased(ctx, func() error { return m.mutateGroupedOnce(ctx, fn) })
	if errors.Is(err, errWbPending) {
		// Failed in a group (op.decidingHeld): alone, where updateIn
		// runs it again after the write-back log.
		return m.mutate(ctx, fn)
	}
	return err
}

// mutateGroupedOnce is mutateGrouped without the wait for a leased
// directory.
func (m *Meta) mutateGroupedOnce(ctx context.Context, fn func(o *op) error) error {
	g := m.group
	if g == nil {
		return m.mutate(ctx, fn)
	}
	if err := m.wbBarrier(ctx); err != nil {
		return err
	}
	if m.opts.ReadOnly {
		return base.ErrReadOnly
	}
	if m.isClosed() {
		return kv.ErrClosed
	}
	r := &groupReq{member: newMember(), fn: fn}
	if !g.join(r) {
		return r.err
	}
	n := min(len(g.queue), maxGroup-1)
	batch := append([]*groupReq{r}, g.queue[:n]...)
	g.queue = g.queue[n:]
	if len(batch) > 1 {
		g.groups++
		g.members += int64(len(batch))
	}
	g.mu.Unlock()

	// The group runs to its end for every member even if this caller
	// gives up: the others wait for it.
	m.runGroup(context.WithoutCancel(ctx), batch)
	g.finish(batch)
	return r.err
}

// runGroup runs the mutations of batch in one transaction and sets each
// one's err.
func (m *Meta) runGroup(ctx context.Context, batch []*groupReq) {
	if len(batch) == 1 {
		batch[0].err = m.mutate(ctx, batch[0].fn)
		return
	}
	touched := m.newTouchLog()
	errs := make([]error, len(batch))
	var queued bool
	var dirAttrs map[base.Ino]base.Attr
	lease := shardLease{p: &m.shards}
	ctx, change := m.queueOnDir(ctx) // the leader's
	err := m.store.Update(ctx, func(tx kv.Txn) error {
		change.attempt()
		queued, dirAttrs = false, nil
		shard := lease.next()
		if pr, ok := tx.(kv.Prereader); ok {
			// The members' first reads in one round trip, not one each.
			var ranges []kv.Range
			for _, r := range batch {
				ranges = append(ranges, m.firstReads(r.fn, shard)...)
			}
			if err := pr.Preread(ranges); err != nil {
				return err
			}
		}
		for i, r := range batch {
			sub := kv.NewSub(tx)
			// No latest-version cache: it cannot see the writes of the
			// mutations before this one, which are not committed.
			t := m.newWtx(sub, shard, nil, touched)
			o := m.newOp(t)
			err := r.fn(o)
			if err == nil {
				err = o.flush()
			}
			if ferr := sub.Failed(); ferr != nil {
				return ferr // the transaction is void: every member fails or runs again
			}
			if errors.Is(err, kv.ErrConflict) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return err
			}
			errs[i] = err
			if err != nil {
				continue // its writes are dropped with sub
			}
			sub.Apply()
			queued = queued || t.deletesQueued
			for ino, a := range t.dirAttrs {
				if dirAttrs == nil {
					dirAttrs = make(map[base.Ino]base.Attr)
				}
				dirAttrs[ino] = a
			}
		}
		return nil
	})
	lease.done()
	m.updated(touched, dirAttrs, queued, err)
	m.wbForget(touched)
	for i, r := range batch {
		r.err = errs[i]
		if err != nil {
			r.err = err
		}
	}
}

// errProbe stops a mutation at its first read (firstReads).
var errProbe = errors.New("meta: probe read")

// firstReads returns the ranges that fn's first read asks for, found by
// running fn over a transaction that fails every read. Mutations begin
// with one batched read of everything they can name before reading
// (prefetch), and the rest of fn never runs, so this has no effect
// beyond the ranges it returns.
func (m *Meta) firstReads(fn func(o *op) error, shard byte) []kv.Range {
	p := &probeTxn{}
	_ = fn(m.newOp(m.newWtx(p, shard, nil, nil)))
	return p.ranges
}

// probeTxn records the ranges of the first Firsts call and fails every
// read.
type probeTxn struct {
	ranges []kv.Range
	done   bool
}

func (p *probeTxn) Get(key []byte) ([]byte, error) {
	p.done = true
	return nil, errProbe
}

func (p *probeTxn) Scan(start, end []byte, reverse bool, fn func(key, value []byte) bool) error {
	p.done = true
	return errProbe
}

func (p *probeTxn) Firsts(ranges []kv.Range) ([]kv.Pair, error) {
	if !p.done {
		p.done = true
		for _, r := range ranges {
			p.ranges = append(p.ranges, cloneRange(r))
		}
	}
	return nil, errProbe
}

func (p *probeTxn) Set(key, value []byte) {}
func (p *probeTxn) Delete(key []byte)     {}

// exactRange is the range of exactly the plain record key.
func exactRange(key []byte) kv.Range {
	return kv.Range{Start: key, End: append(bytes.Clone(key), 0)}
}

// cloneRange returns a deep copy of r.
func cloneRange(r kv.Range) kv.Range {
	c := kv.Range{Start: bytes.Clone(r.Start), End: bytes.Clone(r.End)}
	if f := r.Follow; f != nil {
		c.Follow = &kv.Follow{Offset: f.Offset, Length: f.Length,
			Prefix: bytes.Clone(f.Prefix), StartSuffix: bytes.Clone(f.StartSuffix), EndSuffix: bytes.Clone(f.EndSuffix)}
	}
	return c
}
