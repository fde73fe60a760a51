package meta

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cairnfs/cairn/internal/kv"
)

// Speculative mutations (design/0002-shared-mode.md, "Directory leases:
// a create in one round trip").
//
// A create in a directory this client holds the lease of (lease.go) reads
// records whose values the client can predict: the directory's attribute
// and entries (only this client changes them), the epoch records, its
// usage shard (only its own transactions in flight use a shard). It runs
// the mutation over those predictions, then sends its writes with the
// predictions as guards (kv.GuardedWriter): one round trip, BEGIN, the
// check of every read, the writes, COMMIT. If any read differs (a
// snapshot was taken, another client changed a counter shard), nothing is
// written and the mutation runs again as usual.
//
// The predictions are the first pairs of the ranges earlier speculative
// mutations read, updated with what they wrote (specCache), and the new
// entry's name, which the lease says is absent. A range never seen is
// read once, loosely, before the speculation. The guards, not the
// predictions, make the outcome right: a wrong prediction costs a second
// try, never a wrong write.

// specMaxRanges bounds the predictions kept.
const specMaxRanges = 1024

var (
	// errSpecMiss: the speculation read a range it has no prediction of.
	errSpecMiss = errors.New("meta: speculation needs a range it does not know")
	// errNoSpec: the mutation reads in a way speculation does not predict.
	errNoSpec = errors.New("meta: mutation cannot run speculatively")
)

type specEntry struct {
	r kv.Range
	p kv.Pair // Key nil: the range is empty
}

// specCache holds the predicted first pairs of ranges.
type specCache struct {
	mu     sync.Mutex
	m      map[string]specEntry
	shards []byte // usage shards of committed speculations, latest last
	group  specGroup
	// term moves, with every prediction forgotten, when this client takes
	// or gives back a directory lease (newTerm): predictions of a
	// directory's records hold only while the lease that kept others out
	// is the one under which they were read. What a mutation learns is
	// kept only if the term did not move since it began (its reads may
	// predate a change another client made between two leases).
	term uint64

	ok, missed, failed, fallback atomic.Int64
}

// SpecStats counts speculative mutations.
type SpecStats struct {
	Committed int64 `json:"committed"` // committed in one round trip
	Missed    int64 `json:"missed"`    // needed a read of unknown ranges first
	Failed    int64 `json:"failed"`    // a guard failed: ran again as usual
	Fallback  int64 `json:"fallback"`  // could not run speculatively
}

func newSpecCache() *specCache { return &specCache{m: make(map[string]specEntry)} }

func rangeID(r kv.Range) string {
	b := binary.AppendUvarint(make([]byte, 0, 2+len(r.Start)+len(r.End)), uint64(len(r.Start)))
	return string(append(append(b, r.Start...), r.End...))
}

func inRange(key []byte, r kv.Range) bool {
	return bytes.Compare(key, r.Start) >= 0 && bytes.Compare(key, r.End) < 0
}

func (c *specCache) get(r kv.Range) (kv.Pair, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[rangeID(r)]
	return e.p, ok
}

// curTerm returns the term, to be taken before the reads a put, learn
// or learnBatch records.
func (c *specCache) curTerm() uint64 {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.term
}

// newTerm forgets every prediction and moves the term: a lease of this
// client was taken or given back.
func (c *specCache) newTerm() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.m)
	c.term++
}

// put records first pairs read (ps[i] of ranges[i]) in term.
func (c *specCache) put(term uint64, ranges []kv.Range, ps []kv.Pair) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.term != term {
		return
	}
	if len(c.m)+len(ranges) > specMaxRanges {
		clear(c.m)
	}
	for i, r := range ranges {
		c.m[rangeID(r)] = specEntry{r: cloneRange(r), p: kv.Pair{Key: bytes.Clone(ps[i].Key), Value: bytes.Clone(ps[i].Value)}}
	}
}

// drop forgets the ranges of guards (one of them failed).
func (c *specCache) drop(guards []kv.Guard) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, g := range guards {
		delete(c.m, rangeID(g.Range))
	}
}

// learn records the state a committed speculation left: its guards held,
// then its writes applied. skip are ranges not worth keeping (the new
// entry: read once). term is the one the speculation began in.
func (c *specCache) learn(term uint64, guards []kv.Guard, writes []kv.Write, skip map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.term != term {
		return
	}
	if len(c.m)+len(guards) > specMaxRanges {
		clear(c.m)
	}
	for _, g := range guards {
		if id := rangeID(g.Range); !skip[id] {
			c.m[id] = specEntry{r: g.Range, p: g.Want}
		}
	}
	for _, w := range writes {
		for id, e := range c.m {
			if !inRange(w.Key, e.r) {
				continue
			}
			switch {
			case w.Delete:
				if e.p.Key != nil && bytes.Equal(e.p.Key, w.Key) {
					delete(c.m, id) // the next pair is unknown
				}
			case e.p.Key == nil || bytes.Compare(w.Key, e.p.Key) <= 0:
				e.p = kv.Pair{Key: w.Key, Value: w.Value}
				c.m[id] = e
			}
		}
	}
	for id := range skip {
		delete(c.m, id)
	}
}

// knownShards returns the usage shards recent speculations used, most
// recent first.
func (c *specCache) knownShards() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]byte, len(c.shards))
	for i, s := range c.shards {
		out[len(out)-1-i] = s
	}
	return out
}

// usedShard records that a speculation committed with shard s.
func (c *specCache) usedShard(s byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.shards = slices.DeleteFunc(c.shards, func(x byte) bool { return x == s })
	c.shards = append(c.shards, s)
	if len(c.shards) > 16 {
		c.shards = c.shards[1:]
	}
}

// invalidate forgets every prediction (the session changed).
func (c *specCache) invalidate() {
	c.mu.Lock()
	clear(c.m)
	c.shards = nil
	c.mu.Unlock()
}

// specTxn is the kv.Txn a speculative mutation runs over: reads come from
// predictions and become guards, writes are collected.
type specTxn struct {
	cache   *specCache
	overlay map[string]kv.Pair // predictions of this mutation only
	guards  []kv.Guard
	guarded map[string]bool
	writes  []kv.Write
	wrote   map[string]int // key -> index in writes
	missing []kv.Range
}

func (s *specTxn) predict(r kv.Range) (kv.Pair, bool) {
	if p, ok := s.overlay[rangeID(r)]; ok {
		return p, true
	}
	return s.cache.get(r)
}

func (s *specTxn) overlapsWrite(r kv.Range) bool {
	for k := range s.wrote {
		if inRange([]byte(k), r) {
			return true
		}
	}
	return false
}

// Firsts implements kv.FirstReader.
func (s *specTxn) Firsts(ranges []kv.Range) ([]kv.Pair, error) {
	out := make([]kv.Pair, len(ranges))
	for i, r := range ranges {
		if r.Follow != nil || r.End == nil || s.overlapsWrite(r) {
			return nil, errNoSpec
		}
		p, ok := s.predict(r)
		if !ok {
			s.missing = append(s.missing, cloneRange(r))
			continue
		}
		if id := rangeID(r); !s.guarded[id] {
			s.guarded[id] = true
			s.guards = append(s.guards, kv.Guard{Range: cloneRange(r), Want: p})
		}
		out[i] = kv.Pair{Key: bytes.Clone(p.Key), Value: bytes.Clone(p.Value)}
		if p.Key != nil && out[i].Value == nil {
			out[i].Value = []byte{}
		}
	}
	if len(s.missing) > 0 {
		return nil, errSpecMiss
	}
	return out, nil
}

// Get implements kv.Reader.
func (s *specTxn) Get(key []byte) ([]byte, error) {
	ps, err := s.Firsts([]kv.Range{exactRange(key)})
	if err != nil {
		return nil, err
	}
	if ps[0].Key == nil {
		return nil, nil
	}
	return ps[0].Value, nil
}

// Scan implements kv.Reader for scans that stop at their first pair.
func (s *specTxn) Scan(start, end []byte, reverse bool, fn func(key, value []byte) bool) error {
	if reverse || end == nil {
		return errNoSpec
	}
	ps, err := s.Firsts([]kv.Range{{Start: start, End: end}})
	if err != nil {
		return err
	}
	if ps[0].Key == nil || !fn(ps[0].Key, ps[0].Value) {
		return nil
	}
	return errNoSpec // it wants more than the first pair
}

func (s *specTxn) Set(key, value []byte) {
	s.write(kv.Write{Key: bytes.Clone(key), Value: bytes.Clone(value)})
}
func (s *specTxn) Delete(key []byte) { s.write(kv.Write{Key: bytes.Clone(key), Delete: true}) }

func (s *specTxn) write(w kv.Write) {
	if i, ok := s.wrote[string(w.Key)]; ok {
		s.writes[i] = w
		return
	}
	s.wrote[string(w.Key)] = len(s.writes)
	s.writes = append(s.writes, w)
}

// SpecStats returns the counters of speculative mutations; ok is false
// when they are off.
func (m *Meta) SpecStats() (s SpecStats, ok bool) {
	c := m.spec
	if c == nil {
		return s, false
	}
	return SpecStats{Committed: c.ok.Load(), Missed: c.missed.Load(), Failed: c.failed.Load(),
		Fallback: c.fallback.Load()}, true
}

// speculate runs the mutation fn with predicted reads, absent the ranges
// absent (predicted empty), and commits it in one round trip. done false:
// it was not committed (no prediction, or a guard failed) and the caller
// runs fn as usual; otherwise err is its outcome.
func (m *Meta) speculate(ctx context.Context, fn func(o *op) error, absent []kv.Range) (done bool, err error) {
	c := m.spec
	gw, ok := m.store.(kv.GuardedWriter)
	if c == nil || !ok || m.isClosed() {
		return false, nil
	}
	if err := m.wbBarrier(ctx); err != nil {
		return true, err
	}
	shard := m.shards.getOf(c.knownShards())
	defer m.shards.put(shard)
	overlay := make(map[string]kv.Pair, len(absent))
	skip := make(map[string]bool, len(absent))
	for _, r := range absent {
		overlay[rangeID(r)] = kv.Pair{}
		skip[rangeID(r)] = true
	}
	term := c.curTerm()
	var tries []*touchLog
	defer func() {
		for _, touched := range tries {
			m.endDeciding(touched) // a try that did not reach wbForget
		}
	}()
	for try := 0; ; try++ {
		st := &specTxn{cache: c, overlay: overlay, guarded: make(map[string]bool), wrote: make(map[string]int)}
		touched := m.newTouchLog()
		tries = append(tries, touched)
		t := m.newWtx(st, shard, nil, touched)
		o := m.newOp(t)
		err := fn(o)
		if err == nil {
			err = o.flush()
		}
		if errors.Is(err, errSpecMiss) && try == 0 {
			c.missed.Add(1)
			var ps []kv.Pair
			if err := m.looseView(ctx, func(r kv.Reader) (err error) {
				ps, err = kv.Firsts(r, st.missing)
				return err
			}); err != nil {
				return false, nil
			}
			c.put(term, st.missing, ps)
			continue
		}
		if err != nil {
			// No prediction, or an error computed from predictions that
			// may be stale (the name exists, no permission): the usual
			// path decides.
			c.fallback.Add(1)
			return false, nil
		}
		if m.group != nil {
			err = c.group.writeIf(ctx, gw, st.guards, st.writes)
		} else {
			err = gw.WriteIf(ctx, st.guards, st.writes)
		}
		m.updated(touched, t.dirAttrs, t.deletesQueued, err)
		m.wbForget(touched)
		if errors.Is(err, kv.ErrGuard) {
			c.failed.Add(1)
			c.drop(st.guards)
			return false, nil
		}
		if err == nil {
			c.ok.Add(1)
			c.learn(term, st.guards, st.writes, skip)
			c.usedShard(shard)
		}
		return true, err
	}
}

// Group commit of speculative writes (as groupcommit.go's of transactions):
// guarded writes that arrive while groupSlots are in flight wait for one
// to end, then go together in one WriteIf, each one's guards and writes,
// if none writes what another reads or writes (then they commute: one
// transaction is the same as each alone). If a guard of the group fails,
// each member is written alone, to learn whose failed.
type specGroup struct {
	slots[*specReq]
}

type specReq struct {
	member
	guards []kv.Guard
	writes []kv.Write
}

// touches reports whether one of a's writes lands in a range b reads or
// on a key b writes.
func (a *specReq) touches(b *specReq) bool {
	for _, w := range a.writes {
		for _, g := range b.guards {
			if inRange(w.Key, g.Range) {
				return true
			}
		}
		for _, x := range b.writes {
			if bytes.Equal(w.Key, x.Key) {
				return true
			}
		}
	}
	return false
}

func (g *specGroup) writeIf(ctx context.Context, gw kv.GuardedWriter, guards []kv.Guard, writes []kv.Write) error {
	r := &specReq{member: newMember(), guards: guards, writes: writes}
	if !g.join(r) {
		return r.err
	}
	batch := []*specReq{r}
	rest := g.queue[:0]
	for _, q := range g.queue {
		ok := len(batch) < maxGroup
		for _, b := range batch {
			if !ok {
				break
			}
			ok = !q.touches(b) && !b.touches(q)
		}
		if ok {
			batch = append(batch, q)
		} else {
			rest = append(rest, q)
		}
	}
	g.queue = rest
	g.mu.Unlock()

	ctx = context.WithoutCancel(ctx) // the others wait for this
	if len(batch) == 1 {
		r.err = gw.WriteIf(ctx, guards, writes)
	} else {
		var gs []kv.Guard
		var ws []kv.Write
		for _, b := range batch {
			gs, ws = append(gs, b.guards...), append(ws, b.writes...)
		}
		err := gw.WriteIf(ctx, gs, ws)
		for _, b := range batch {
			b.err = err
			if errors.Is(err, kv.ErrGuard) {
				b.err = gw.WriteIf(ctx, b.guards, b.writes)
			}
		}
	}
	g.finish(batch)
	return r.err
}
