package meta

import (
	"bytes"
	"errors"
	"slices"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// The reads of a change in write-back (writeback.go): over its own
// writes, the log's (the batch being committed, fl, and the one after it,
// cur), and the store's state before the log.

// wbWrites is the log's writes, the last per key, in sorted key order
// for the range reads and in first-write order for the commit.
type wbWrites struct {
	keys  []string // sorted
	vals  map[string]kv.Write
	order []string
}

// newWbWrites returns an empty set; its map is made by the first put (a
// change's set, made for every change, often stays empty or small).
func newWbWrites() wbWrites { return wbWrites{} }

func (w *wbWrites) put(x kv.Write) {
	k := string(x.Key)
	if w.vals == nil {
		w.vals = make(map[string]kv.Write)
	}
	if _, ok := w.vals[k]; !ok {
		i, _ := slices.BinarySearch(w.keys, k)
		w.keys = slices.Insert(w.keys, i, k)
		w.order = append(w.order, k)
	}
	w.vals[k] = x
}

func (w *wbWrites) get(key []byte) (kv.Write, bool) {
	x, ok := w.vals[string(key)]
	return x, ok
}

// firstSet returns the smallest key in [start, end) that w sets, and
// whether there is one.
func (w *wbWrites) firstSet(start, end []byte) (kv.Write, bool) {
	i, _ := slices.BinarySearch(w.keys, string(start))
	for ; i < len(w.keys) && w.keys[i] < string(end); i++ {
		if x := w.vals[w.keys[i]]; !x.Delete {
			return x, true
		}
	}
	return kv.Write{}, false
}

// firstAny returns the smallest key in [start, end) that w sets or
// deletes, and whether there is one.
func (w *wbWrites) firstAny(start, end []byte) (kv.Write, bool) {
	i, _ := slices.BinarySearch(w.keys, string(start))
	if i < len(w.keys) && w.keys[i] < string(end) {
		return w.vals[w.keys[i]], true
	}
	return kv.Write{}, false
}

func (w *wbWrites) list() []kv.Write {
	out := make([]kv.Write, len(w.order))
	for i, k := range w.order {
		out[i] = w.vals[k]
	}
	return out
}

func (w *wbWrites) len() int { return len(w.order) }

// wbTxn is the kv.Txn a change runs over in write-back: reads as the log
// and the store's state before it give them, writes collected.
type wbTxn struct {
	m   *Meta
	log *wbLog
	// inherit are the ranges read through the guards of the batch being
	// committed: once it commits, the next batch guards them itself.
	inherit map[string]kv.Range
	cache   *specCache
	absent  map[string]bool     // ranges the lease says are empty in the store
	extra   map[string]kv.Pair  // first pairs this change read loosely
	guards  []kv.Guard          // new guards of this change
	gidx    map[string]bool     // rangeID of guards
	writes  wbWrites            // this change's writes
	missed  []kv.Range          // ranges to read loosely before running again
	missID  map[string]struct{} // rangeID of missed
	// grantUsed is what this change charged of the log's grants (grant.go).
	grantUsed [2]uint64
	// failed is the first read that could not be answered (errSpecMiss,
	// errNoSpec, errWbFlush): the run is void even if the change's code
	// took the error for an answer (destroyIfOrphan reads a missing
	// attribute as "already gone").
	failed error
}

// fail records err, a read's failure, and returns it.
func (s *wbTxn) fail(err error) error {
	if err != nil && s.failed == nil {
		s.failed = err
	}
	return err
}

// outcome is the change's outcome err, or the first failed read.
func (s *wbTxn) outcome(err error) error {
	if s.failed != nil {
		return s.failed
	}
	return err
}

func newWbTxn(m *Meta, w *wbLog, c *specCache, absent map[string]bool, extra map[string]kv.Pair) *wbTxn {
	// Its maps are made when first written.
	return &wbTxn{m: m, log: w, cache: c, absent: absent, extra: extra}
}

// stored returns the first pair of r in the store before the log, and
// guards it; ok false if unknown (recorded in s.missed).
func (s *wbTxn) stored(r kv.Range) (kv.Pair, bool) {
	id := rangeID(r)
	if fl := s.log.fl; fl != nil {
		if i, ok := fl.gidx[id]; ok {
			if _, own := s.log.cur.gidx[id]; !own {
				if s.inherit == nil {
					s.inherit = make(map[string]kv.Range)
				}
				s.inherit[id] = cloneRange(r)
			}
			return fl.guards[i].Want, true
		}
	}
	if i, ok := s.log.cur.gidx[id]; ok {
		return s.log.cur.guards[i].Want, true
	}
	var p kv.Pair
	switch x, extra := s.extra[id]; {
	case s.gidx[id]:
		for _, g := range s.guards {
			if rangeID(g.Range) == id {
				return g.Want, true
			}
		}
	case s.absent[id]:
	case extra:
		p = x
	default:
		if fp, ok := s.freshFirst(r); ok {
			p = fp
			break
		}
		c, ok := s.cache.get(r)
		if !ok {
			if _, seen := s.missID[id]; !seen {
				if s.missID == nil {
					s.missID = make(map[string]struct{})
				}
				s.missID[id] = struct{}{}
				s.missed = append(s.missed, cloneRange(r))
			}
			return kv.Pair{}, false
		}
		p = c
	}
	if s.gidx == nil {
		s.gidx = make(map[string]bool)
	}
	s.gidx[id] = true
	s.guards = append(s.guards, kv.Guard{Range: kv.Range{Start: bytes.Clone(r.Start), End: bytes.Clone(r.End)},
		Want: kv.Pair{Key: bytes.Clone(p.Key), Value: bytes.Clone(p.Value)}})
	return p, true
}

// freshPrefixes are the key kinds of an inode's own records that only
// the client that made a fresh inode writes. Its lease record too: no
// other client can name a fresh inode to lease it (it would have looked
// it up in a directory this client leases, recalling that lease, which
// ends the inode's freshness). A change reads the lease record of every
// inode whose attribute it reads (wtx.withLeases); answered here, a
// fresh file's costs no read of the store (one loose read per file of a
// tar -x before).
var freshPrefixes = [256]bool{pAttr: true, pDentry: true, pSymlink: true, pXattr: true, pChunk: true, pOrphan: true, pHold: true, pLease: true}

// freshFirst returns the first pair of r in the store if r lies in the
// records of a fresh inode whose store state the log knows.
func (s *wbTxn) freshFirst(r kv.Range) (kv.Pair, bool) {
	if len(r.Start) < 9 || !freshPrefixes[r.Start[0]] || bytes.Compare(r.End, kv.PrefixEnd(r.Start[:9])) > 0 {
		return kv.Pair{}, false
	}
	ino, _ := keyIno(r.Start)
	if _, ok := s.m.leases.freshIn(ino); !ok {
		return kv.Pair{}, false
	}
	w := s.log
	w.fmu.Lock()
	defer w.fmu.Unlock()
	ws := w.fresh[ino]
	if ws == nil {
		return kv.Pair{}, false // forgotten (wbForget)
	}
	if x, ok := ws.firstSet(r.Start, r.End); ok {
		return pairOf(x), true
	}
	return kv.Pair{}, true
}

// freshAll returns every pair of r, which lies in the records of a fresh
// inode whose store state the log knows, as the log leaves it; ok false
// otherwise. The range's first pair in the store becomes a guard.
func (s *wbTxn) freshAll(r kv.Range) ([]kv.Pair, bool) {
	if _, ok := s.freshFirst(r); !ok {
		return nil, false
	}
	s.stored(r) // the guard
	ino, _ := keyIno(r.Start)
	w := s.log
	merged := newWbWrites()
	w.fmu.Lock()
	if ws := w.fresh[ino]; ws != nil {
		i, _ := slices.BinarySearch(ws.keys, string(r.Start))
		for ; i < len(ws.keys) && ws.keys[i] < string(r.End); i++ {
			merged.put(ws.vals[ws.keys[i]])
		}
	}
	w.fmu.Unlock()
	ls := s.layers()
	for k := len(ls) - 1; k >= 0; k-- { // oldest first: newer writes replace them
		ws := ls[k]
		i, _ := slices.BinarySearch(ws.keys, string(r.Start))
		for ; i < len(ws.keys) && ws.keys[i] < string(r.End); i++ {
			merged.put(ws.vals[ws.keys[i]])
		}
	}
	var out []kv.Pair
	for _, k := range merged.keys {
		if x := merged.vals[k]; !x.Delete {
			out = append(out, pairOf(x))
		}
	}
	return out, true
}

// noteFresh records the writes of a committed log in fresh inodes' records.
func (w *wbLog) noteFresh(m *Meta, writes []kv.Write) {
	w.fmu.Lock()
	defer w.fmu.Unlock()
	for _, x := range writes {
		if len(x.Key) < 9 || !freshPrefixes[x.Key[0]] {
			continue
		}
		ino, _ := keyIno(x.Key)
		if _, ok := m.leases.freshIn(ino); !ok {
			delete(w.fresh, ino)
			continue
		}
		if ws := w.fresh[ino]; ws != nil { // else forgotten: unknown
			ws.put(x)
		}
	}
}

// markFresh records that ino was made by the log: the store holds
// nothing of it yet.
func (w *wbLog) markFresh(m *Meta, ino base.Ino) {
	w.fmu.Lock()
	defer w.fmu.Unlock()
	if len(w.fresh) >= maxFresh {
		// Forget the inodes no longer fresh (their lease went).
		for x := range w.fresh {
			if _, ok := m.leases.freshIn(x); !ok {
				delete(w.fresh, x)
			}
		}
	}
	if _, ok := w.fresh[ino]; !ok && len(w.fresh) < maxFresh {
		v := newWbWrites()
		w.fresh[ino] = &v
	}
}

// layers are the writes over the store's state, the newest first: this
// change's, the log's next batch's, the batch being committed.
func (s *wbTxn) layers() []*wbWrites {
	ls := []*wbWrites{&s.writes, &s.log.cur.writes}
	if fl := s.log.fl; fl != nil {
		ls = append(ls, &fl.writes)
	}
	return ls
}

// write returns the newest write of key by this change or the log.
func (s *wbTxn) write(key []byte) (kv.Write, bool) {
	for _, ws := range s.layers() {
		if x, ok := ws.get(key); ok {
			return x, true
		}
	}
	return kv.Write{}, false
}

// first returns the first pair of [start, end) as the log leaves it.
func (s *wbTxn) first(start, end []byte) (kv.Pair, error) {
	if end == nil || bytes.Compare(start, end) >= 0 {
		return kv.Pair{}, errNoSpec
	}
	st, ok := s.stored(kv.Range{Start: start, End: end})
	// The smallest key set by this change or the log (a key the change
	// deleted that the log set is not set).
	var set *kv.Write
	for _, ws := range s.layers() {
		i, _ := slices.BinarySearch(ws.keys, string(start))
		for ; i < len(ws.keys) && ws.keys[i] < string(end); i++ {
			x, _ := s.write([]byte(ws.keys[i]))
			if !x.Delete {
				if set == nil || bytes.Compare(x.Key, set.Key) < 0 {
					set = &x
				}
				break
			}
		}
	}
	for hops := 0; ok && st.Key != nil; hops++ {
		x, w := s.write(st.Key)
		if !w || !x.Delete {
			break
		}
		// The store's first pair is deleted: a key set before it comes
		// first, or the store's next one, after it.
		if set != nil && bytes.Compare(set.Key, st.Key) < 0 {
			return pairOf(*set), nil
		}
		if hops == 64 {
			return kv.Pair{}, errWbFlush // many deleted in a row: commit them first
		}
		next := append(bytes.Clone(st.Key), 0)
		if bytes.Compare(next, end) >= 0 {
			st = kv.Pair{} // nothing after it in the range
			break
		}
		st, ok = s.stored(kv.Range{Start: next, End: end})
	}
	if !ok {
		return kv.Pair{}, errSpecMiss // learn the store's state first
	}
	if st.Key != nil {
		if set == nil || bytes.Compare(st.Key, set.Key) < 0 {
			return kv.Pair{Key: bytes.Clone(st.Key), Value: nonNil(st.Value)}, nil
		}
	}
	if set == nil {
		return kv.Pair{}, nil
	}
	return pairOf(*set), nil
}

func pairOf(x kv.Write) kv.Pair {
	return kv.Pair{Key: bytes.Clone(x.Key), Value: nonNil(x.Value)}
}

func nonNil(v []byte) []byte {
	if v == nil {
		return []byte{}
	}
	return bytes.Clone(v)
}

// Firsts implements kv.FirstReader.
func (s *wbTxn) Firsts(ranges []kv.Range) ([]kv.Pair, error) {
	var miss bool
	out, err := kv.FirstsWith(ranges, func(start, end []byte) (kv.Pair, error) {
		p, err := s.first(start, end)
		if errors.Is(err, errSpecMiss) {
			// Collect every range this read needs, not one per run.
			miss = true
			return kv.Pair{}, nil
		}
		return p, err
	})
	if err != nil {
		return nil, s.fail(err)
	}
	if miss {
		return nil, s.fail(errSpecMiss)
	}
	return out, nil
}

// Get implements kv.Reader.
func (s *wbTxn) Get(key []byte) ([]byte, error) {
	p, err := s.first(key, append(bytes.Clone(key), 0))
	if err != nil || p.Key == nil {
		return nil, s.fail(err)
	}
	return p.Value, nil
}

// Scan implements kv.Reader: scans of a fresh inode's records (whose
// store state the log knows whole), and scans elsewhere that stop at
// their first pair.
func (s *wbTxn) Scan(start, end []byte, reverse bool, fn func(key, value []byte) bool) error {
	if reverse || end == nil {
		return s.fail(errNoSpec)
	}
	if ps, ok := s.freshAll(kv.Range{Start: start, End: end}); ok {
		for _, p := range ps {
			if !fn(p.Key, p.Value) {
				break
			}
		}
		return nil
	}
	p, err := s.first(start, end)
	if err != nil {
		return s.fail(err)
	}
	if p.Key == nil || !fn(p.Key, p.Value) {
		return nil
	}
	return s.fail(errNoSpec) // it wants more than the first pair
}

func (s *wbTxn) Set(key, value []byte) {
	s.writes.put(kv.Write{Key: bytes.Clone(key), Value: bytes.Clone(value)})
}

func (s *wbTxn) Delete(key []byte) { s.writes.put(kv.Write{Key: bytes.Clone(key), Delete: true}) }

// firstAfter returns the first pair of r once writes are applied to a
// state whose first pair there is first; ok false if that is unknown (the
// first pair deleted, and no key set before it).
func firstAfter(r kv.Range, first kv.Pair, writes *wbWrites) (kv.Pair, bool) {
	set, isSet := writes.firstSet(r.Start, r.End)
	if first.Key != nil {
		if x, ok := writes.get(first.Key); ok && x.Delete {
			if isSet && bytes.Compare(set.Key, first.Key) < 0 {
				return pairOf(set), true
			}
			return kv.Pair{}, false
		}
		if !isSet || bytes.Compare(first.Key, set.Key) < 0 {
			return first, true
		}
	}
	if !isSet {
		return kv.Pair{}, true
	}
	return pairOf(set), true
}

// learnBatch records the state a committed write-back batch left (its
// guards held, then writes applied): the ranges it read, as they are
// after it; predictions of other ranges it wrote into are dropped. Its
// cost follows the cache's size and the batch's guards, not their
// product with its writes (learn's).
func (c *specCache) learnBatch(term uint64, guards []kv.Guard, writes *wbWrites) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.term != term {
		clear(c.m) // what the batch wrote may be predicted wrong now
		return
	}
	if len(c.m)+len(guards) > specMaxRanges {
		clear(c.m)
	}
	for id, e := range c.m {
		if _, ok := writes.firstAny(e.r.Start, e.r.End); ok {
			delete(c.m, id)
		}
	}
	if len(guards) > specMaxRanges {
		guards = guards[:specMaxRanges]
	}
	for _, g := range guards {
		if p, ok := firstAfter(g.Range, g.Want, writes); ok {
			c.m[rangeID(g.Range)] = specEntry{r: g.Range, p: p}
		}
	}
}

// refuseWriteBack fails the change running over t if it runs in
// write-back: for what the log must not acknowledge before it commits
// (a quota's check).
func (o *op) refuseWriteBack() error {
	if st, ok := o.wtx.Txn.(*wbTxn); ok {
		return st.fail(errNoSpec)
	}
	return nil
}

// writingBack reports whether the change running over o runs in the
// write-back log.
func (o *op) writingBack() bool {
	_, ok := o.wtx.Txn.(*wbTxn)
	return ok
}

// Another client can reach an inode without a lookup in the directory
// whose lease this client writes back under: by its number (a process's
// working directory inside a directory, an NFS file handle, an open
// file). A change it changes there is one the log's guard catches, and
// the change runs again; most changes succeed again whatever it did (an
// unlink, whatever the file's link count), but a change whose success
// depends on it would fail on its replay, after it was acknowledged. The
// two checks below keep such changes out of the log (design 0011, "What
// another client can reach without a lookup").

// wbNeedsOwnLease refuses write-back of a change that decides on
// directory dir's entries or attributes (an rmdir of it, a rename over
// it: is it empty?) unless this client holds dir's own lease too: then
// another client's create in dir recalls that lease, and this client
// commits its log, the removal with it, before the create looks.
func (o *op) wbNeedsOwnLease(dir base.Ino) error {
	if !o.writingBack() || o.m.leases.holds(dir) {
		return nil
	}
	return o.refuseWriteBack()
}

// wbMayDelete is mayDelete, and refuses write-back where a sticky
// directory's rule rests on the owner of victim ino (neither root nor
// the directory's owner asks), which another client may change (a chown
// through a handle) unless ino is fresh (only this client can reach it).
func (o *op) wbMayDelete(c *Caller, dir *base.Attr, ino base.Ino, victim *base.Attr) error {
	if o.writingBack() && stickyOwnerDecides(c, dir) {
		if _, fresh := o.m.leases.freshIn(ino); !fresh {
			return o.refuseWriteBack()
		}
	}
	return mayDelete(c, dir, victim)
}
