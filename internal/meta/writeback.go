package meta

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// Metadata write-back (docs/design/0011-write-back.md).
//
// A client that holds the lease of a directory (lease.go) is the only one
// that changes it. With write-back on (Options.WriteBack), its creates and
// unlinks there do not wait for the store: each runs over predicted reads
// (as a speculative create does, speculative.go), its outcome is returned
// at once, and its writes join a log that is committed in one guarded
// write (kv.GuardedWriter) when it holds wbMaxOps changes or wbMaxWrites
// records, when its oldest change is wbMaxAge old, or before anything
// that must see it:
//
//   - every other transaction of this client (updateIn, a group commit,
//     a speculative write): they may read or write what the log writes;
//   - a read of an inode the log changes (wbRead): a lookup or readdir
//     of a directory, a getattr or open of an inode;
//   - StatFS, Sync (fsync, fsyncdir), the end of the session;
//   - the release of a lease: when another client recalls it, the holder
//     commits the log before it deletes the lease record. Other clients'
//     lookups and readdirs in a directory leased with write-back recall
//     the lease first (lookupLoose, Readdir), so they see every change
//     the holder made there before the recall.
//
// Reads a change makes come from, in order: the log's own writes; the
// value the store had before the log, as a guard of the log already
// says, or the change itself read loosely from the store (only this
// client writes what the log writes, and the log holds w.mu while it
// reads, so the store shows the state before the log); the predictions of
// earlier committed speculations. Each range read from the store's state
// becomes a guard of the log's commit, on that state before the log. So
// the commit is right exactly when every guard holds, and the changes
// commute with nothing: they run one after the other under w.mu, each
// seeing the ones before it.
//
// If a guard does not hold at commit (another client changed something
// a change read: an inode's attribute through another name, a snapshot's
// epoch record), nothing is written and the log's changes run again, one
// transaction each, in order (their replay functions): their outcome is
// then the store's. One that now fails (rare: its reads changed under
// it) is counted lost, logged, and fails the next Sync.
//
// A client that crashes loses the log: the changes acknowledged since
// the last commit, never part of one (the guarded write is one
// transaction).

const (
	wbMaxOps    = 512
	wbMaxWrites = 8192
	wbMaxAge    = 50 * time.Millisecond
	// wbVerifyTries bounds the checks of a commit whose outcome is unknown.
	wbVerifyTries = 8
)

// errWbFlush: a change read a range whose state the log cannot tell
// without committing first.
var errWbFlush = errors.New("meta: write-back needs a commit first")

// wbOp is one change in the log.
type wbOp struct {
	replay func(o *op) error // runs the change again, its outcome unused
	now    int64             // the change's time (op.now), kept by a replay
	dirs   []base.Ino        // the leased directories it changes
	after  func()            // if set, runs once the change committed (or was replayed)
}

// wbLog is the write-back log.
type wbLog struct {
	mu     sync.Mutex // held while a change runs over the log and while the log commits
	ops    []*wbOp
	guards []kv.Guard
	gidx   map[string]int // rangeID -> index in guards
	writes wbWrites
	dmu    sync.Mutex        // guards dirty (also held under mu): reads check it without waiting for a commit
	dirty  map[base.Ino]bool // inodes whose records the log writes
	queued bool              // a change queued slice deletes
	shard  byte              // the usage shard of the log's changes, held while ops exist
	timer  *time.Timer
	// commits moves at every commit of the log: a read made without mu
	// held is the store's state before the log only if it did not move.
	commits uint64

	// fresh holds what committed logs wrote in the key spaces of fresh
	// inodes (lease.go): the store holds exactly that there, since no
	// other client writes them. Cleared by wbForget (a transaction that
	// did not go through the log may have written there too).
	fmu   sync.Mutex
	fresh map[base.Ino]*wbWrites

	n atomic.Int64 // len(ops), read without mu

	ops0, batches, replays, replayed, lost, waits, viewed, commitNanos atomic.Int64
	stickyErr                                                          atomic.Pointer[error]
}

// WriteBackStats counts the write-back log's work.
type WriteBackStats struct {
	Pending  int64 `json:"pending"`  // changes in the log now
	Changes  int64 `json:"changes"`  // changes acknowledged before their commit
	Batches  int64 `json:"batches"`  // guarded writes that committed a log
	Replays  int64 `json:"replays"`  // logs whose guards failed: their changes ran again
	Replayed int64 `json:"replayed"` // changes run again
	Lost     int64 `json:"lost"`     // acknowledged changes that failed when run again
	Waits    int64 `json:"waits"`    // operations that committed the log before they ran
	Viewed   int64 `json:"viewed"`   // reads answered over the log, without committing it
	// CommitNanos is the time spent committing logs (the log is held
	// meanwhile: changes wait).
	CommitNanos int64 `json:"commit_ns"`
}

func newWbLog() *wbLog {
	return &wbLog{gidx: make(map[string]int), dirty: make(map[base.Ino]bool), writes: newWbWrites(),
		fresh: make(map[base.Ino]*wbWrites)}
}

// WriteBackStats returns the counters; ok is false when write-back is off.
func (m *Meta) WriteBackStats() (s WriteBackStats, ok bool) {
	w := m.wb
	if w == nil {
		return s, false
	}
	return WriteBackStats{Pending: w.n.Load(), Changes: w.ops0.Load(), Batches: w.batches.Load(),
		Replays: w.replays.Load(), Replayed: w.replayed.Load(), Lost: w.lost.Load(), Waits: w.waits.Load(), Viewed: w.viewed.Load(), CommitNanos: w.commitNanos.Load()}, true
}

// wbWrites is the log's writes, the last per key, in sorted key order
// for the range reads and in first-write order for the commit.
type wbWrites struct {
	keys  []string // sorted
	vals  map[string]kv.Write
	order []string
}

func newWbWrites() wbWrites { return wbWrites{vals: make(map[string]kv.Write)} }

func (w *wbWrites) put(x kv.Write) {
	k := string(x.Key)
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
	m      *Meta
	log    *wbLog
	cache  *specCache
	absent map[string]bool     // ranges the lease says are empty in the store
	extra  map[string]kv.Pair  // first pairs this change read loosely
	guards []kv.Guard          // new guards of this change
	gidx   map[string]bool     // rangeID of guards
	writes wbWrites            // this change's writes
	missed []kv.Range          // ranges to read loosely before running again
	missID map[string]struct{} // rangeID of missed
}

func newWbTxn(m *Meta, w *wbLog, c *specCache, absent map[string]bool, extra map[string]kv.Pair) *wbTxn {
	return &wbTxn{m: m, log: w, cache: c, absent: absent, extra: extra, gidx: make(map[string]bool),
		writes: newWbWrites(), missID: make(map[string]struct{})}
}

// stored returns the first pair of r in the store before the log, and
// guards it; ok false if unknown (recorded in s.missed).
func (s *wbTxn) stored(r kv.Range) (kv.Pair, bool) {
	id := rangeID(r)
	if i, ok := s.log.gidx[id]; ok {
		return s.log.guards[i].Want, true
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
				s.missID[id] = struct{}{}
				s.missed = append(s.missed, cloneRange(r))
			}
			return kv.Pair{}, false
		}
		p = c
	}
	s.gidx[id] = true
	s.guards = append(s.guards, kv.Guard{Range: kv.Range{Start: bytes.Clone(r.Start), End: bytes.Clone(r.End)},
		Want: kv.Pair{Key: bytes.Clone(p.Key), Value: bytes.Clone(p.Value)}})
	return p, true
}

// freshPrefixes are the key kinds of an inode's own records that only
// the client that made a fresh inode writes.
var freshPrefixes = [256]bool{pAttr: true, pDentry: true, pSymlink: true, pXattr: true, pChunk: true, pOrphan: true, pHold: true}

// freshFirst returns the first pair of r in the store if r lies in the
// records of a fresh inode whose store state the log knows.
func (s *wbTxn) freshFirst(r kv.Range) (kv.Pair, bool) {
	if len(r.Start) < 9 || !freshPrefixes[r.Start[0]] || bytes.Compare(r.End, kv.PrefixEnd(r.Start[:9])) > 0 {
		return kv.Pair{}, false
	}
	ino := base.Ino(binary.BigEndian.Uint64(r.Start[1:9]))
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
	ino := base.Ino(binary.BigEndian.Uint64(r.Start[1:9]))
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
	for _, ws := range []*wbWrites{&w.writes, &s.writes} {
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
		ino := base.Ino(binary.BigEndian.Uint64(x.Key[1:9]))
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
func (w *wbLog) markFresh(ino base.Ino) {
	w.fmu.Lock()
	defer w.fmu.Unlock()
	if _, ok := w.fresh[ino]; !ok && len(w.fresh) < maxFresh {
		v := newWbWrites()
		w.fresh[ino] = &v
	}
}

// write returns the write of key by this change or the log, the change's
// first.
func (s *wbTxn) write(key []byte) (kv.Write, bool) {
	if x, ok := s.writes.get(key); ok {
		return x, true
	}
	return s.log.writes.get(key)
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
	for _, ws := range []*wbWrites{&s.writes, &s.log.writes} {
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
	if !ok {
		if set != nil || s.anyWrite(start, end) {
			return kv.Pair{}, errSpecMiss // learn the store's state first
		}
		return kv.Pair{}, errSpecMiss
	}
	if st.Key != nil {
		if x, w := s.write(st.Key); w && x.Delete {
			// The store's first pair is gone; the next one is unknown
			// unless a key set before it comes first.
			if set != nil && bytes.Compare(set.Key, st.Key) < 0 {
				return pairOf(*set), nil
			}
			return kv.Pair{}, errWbFlush
		}
		if set == nil || bytes.Compare(st.Key, set.Key) < 0 {
			return kv.Pair{Key: bytes.Clone(st.Key), Value: nonNil(st.Value)}, nil
		}
	}
	if set == nil {
		return kv.Pair{}, nil
	}
	return pairOf(*set), nil
}

func (s *wbTxn) anyWrite(start, end []byte) bool {
	for _, ws := range []*wbWrites{&s.writes, &s.log.writes} {
		i, _ := slices.BinarySearch(ws.keys, string(start))
		if i < len(ws.keys) && ws.keys[i] < string(end) {
			return true
		}
	}
	return false
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
		return nil, err
	}
	if miss {
		return nil, errSpecMiss
	}
	return out, nil
}

// Get implements kv.Reader.
func (s *wbTxn) Get(key []byte) ([]byte, error) {
	p, err := s.first(key, append(bytes.Clone(key), 0))
	if err != nil || p.Key == nil {
		return nil, err
	}
	return p.Value, nil
}

// Scan implements kv.Reader: scans of a fresh inode's records (whose
// store state the log knows whole), and scans elsewhere that stop at
// their first pair.
func (s *wbTxn) Scan(start, end []byte, reverse bool, fn func(key, value []byte) bool) error {
	if reverse || end == nil {
		return errNoSpec
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
		return err
	}
	if p.Key == nil || !fn(p.Key, p.Value) {
		return nil
	}
	return errNoSpec // it wants more than the first pair
}

func (s *wbTxn) Set(key, value []byte) {
	s.writes.put(kv.Write{Key: bytes.Clone(key), Value: bytes.Clone(value)})
}

func (s *wbTxn) Delete(key []byte) { s.writes.put(kv.Write{Key: bytes.Clone(key), Delete: true}) }

// wbFlusherKey marks the context of the log's own commit and replays:
// they must not wait for the log.
type wbFlusherKey struct{}

func isWbFlusher(ctx context.Context) bool { return ctx.Value(wbFlusherKey{}) != nil }

// writeBack runs the change fn of the directories dirs, which this client
// leases, into the write-back log: done false when it cannot (write-back
// off, a lease not held, a read it cannot predict, or fn failed on the
// predictions), and the caller then runs fn as usual; done true when
// fn's outcome is final and its writes are in the log. replay is fn
// again with outputs nobody reads; absent are ranges the lease says are
// empty; after, if set, runs once the change is committed.
func (m *Meta) writeBack(ctx context.Context, dirs []base.Ino, absent []kv.Range, fn, replay func(o *op) error, after func()) (done bool, err error) {
	w := m.wb
	if w == nil || m.isClosed() {
		return false, nil
	}
	if _, ok := m.store.(kv.GuardedWriter); !ok {
		return false, nil
	}
	abs := make(map[string]bool, len(absent))
	for _, r := range absent {
		abs[rangeID(r)] = true
	}
	extra := make(map[string]kv.Pair)
	var own bool // myShard is this change's to give back
	var myShard byte
	w.mu.Lock()
	locked := true
	defer func() {
		if own {
			m.shards.put(myShard)
		}
		if locked {
			w.mu.Unlock()
		}
	}()
	for try := 0; try < 6; try++ {
		// Checked under w.mu: a lease given back after this holds waits
		// for the log (releaseLease commits it first).
		for _, d := range dirs {
			if !m.leases.holds(d) {
				return false, nil
			}
		}
		// The log's usage shard, or, for its first change, one of its
		// own, kept across tries (each try reads its records).
		shard := w.shard
		if len(w.ops) == 0 {
			if !own {
				own, myShard = true, m.shards.getOf(m.spec.knownShards())
			}
			shard = myShard
		}
		st := newWbTxn(m, w, m.spec, abs, extra)
		touched := m.newTouchLog()
		t := m.newWtx(st, shard, nil, touched)
		o := m.newOp(t)
		err := fn(o)
		if err == nil {
			err = o.flush()
		}
		switch {
		case errors.Is(err, errSpecMiss):
			if debugWB {
				fmt.Println("wb miss:", len(st.missed), "try", try)
				for _, r := range st.missed {
					fmt.Printf("   %q\n", r.Start)
				}
			}
			// Read what it needs without holding the log: a read is
			// the store's state before the log if no commit came
			// between (the log's writes are not in the store).
			commits := w.commits
			w.mu.Unlock()
			locked = false
			var ps []kv.Pair
			rerr := m.looseView(ctx, func(r kv.Reader) (err error) {
				ps, err = kv.Firsts(r, st.missed)
				return err
			})
			w.mu.Lock()
			locked = true
			if rerr != nil {
				return false, nil
			}
			if w.commits != commits {
				clear(extra)
				continue
			}
			for i, r := range st.missed {
				extra[rangeID(r)] = kv.Pair{Key: ps[i].Key, Value: ps[i].Value}
				if f := ps[i].Followed; f != nil && r.Follow != nil && ps[i].Key != nil {
					// What the follow read, next try's read.
					if start, end, ok := r.Follow.Bounds(ps[i].Value); ok {
						extra[rangeID(kv.Range{Start: start, End: end})] = kv.Pair{Key: f.Key, Value: f.Value}
					}
				}
			}
			continue
		case errors.Is(err, errWbFlush):
			if err := m.wbCommitLocked(ctx); err != nil {
				return true, err
			}
			clear(extra)
			continue
		case err != nil:
			if debugWB {
				fmt.Println("wb fallback:", err, "try", try)
			}
			// Unpredictable, or an error computed from predictions that
			// may be stale: the usual path decides, after the log.
			return false, nil
		}
		if len(w.ops) == 0 {
			w.shard, own = myShard, false // the log's now
		}
		w.ops = append(w.ops, &wbOp{replay: replay, now: o.now, dirs: dirs, after: after})
		w.n.Store(int64(len(w.ops)))
		w.ops0.Add(1)
		for _, g := range st.guards {
			w.gidx[rangeID(g.Range)] = len(w.guards)
			w.guards = append(w.guards, g)
		}
		for _, k := range st.writes.order {
			w.writes.put(st.writes.vals[k])
		}
		w.dmu.Lock()
		if touched != nil {
			for _, ino := range touched.inos {
				w.dirty[ino] = true
			}
			for _, n := range touched.names {
				w.dirty[n.dir] = true
			}
		}
		for _, d := range dirs {
			w.dirty[d] = true
		}
		w.dmu.Unlock()
		w.queued = w.queued || t.deletesQueued
		// As if committed: the leases learn the names, the listings the
		// directory attributes.
		m.updated(touched, t.dirAttrs, false, nil)
		if len(w.ops) >= wbMaxOps || w.writes.len() >= wbMaxWrites {
			if err := m.wbCommitLocked(ctx); err != nil {
				m.log.Warn("write-back: committing the log", "err", err)
			}
		} else if len(w.ops) == 1 {
			w.timer = time.AfterFunc(wbMaxAge, func() {
				if err := m.wbBarrier(context.Background()); err != nil {
					m.log.Warn("write-back: committing the log", "err", err)
				}
			})
		}
		return true, nil
	}
	return false, nil
}

// wbBarrier commits the write-back log, if any, before an operation that
// may depend on it.
func (m *Meta) wbBarrier(ctx context.Context) error {
	w := m.wb
	if w == nil || w.n.Load() == 0 || isWbFlusher(ctx) {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.ops) > 0 {
		w.waits.Add(1)
	}
	return m.wbCommitLocked(ctx)
}

// wbView runs the read fn, which reads inos, over the log and the store's
// state before it when the log changes one of inos; handled false if it
// changes none (the caller reads the store as usual), or if fn read what
// the log cannot tell, in which case the log is committed first. A read
// the log does not write is read from the store, without the log held.
func (m *Meta) wbView(ctx context.Context, inos []base.Ino, fn func(r kv.Reader) error) (handled bool, err error) {
	w := m.wb
	if w == nil || w.n.Load() == 0 || isWbFlusher(ctx) {
		return false, nil
	}
	if !w.changes(inos) {
		return false, nil
	}
	extra := make(map[string]kv.Pair)
	w.mu.Lock()
	defer w.mu.Unlock()
	for try := 0; try < 4; try++ {
		if !w.changes(inos) {
			return false, nil
		}
		st := newWbTxn(m, w, m.spec, nil, extra)
		err := fn(st)
		if !errors.Is(err, errSpecMiss) {
			if errors.Is(err, errNoSpec) || errors.Is(err, errWbFlush) {
				break
			}
			w.viewed.Add(1)
			return true, err
		}
		commits := w.commits
		w.mu.Unlock()
		var ps []kv.Pair
		rerr := m.looseView(ctx, func(r kv.Reader) (err error) {
			ps, err = kv.Firsts(r, st.missed)
			return err
		})
		w.mu.Lock()
		if rerr != nil {
			return true, rerr
		}
		if w.commits != commits {
			clear(extra)
			continue
		}
		for i, r := range st.missed {
			extra[rangeID(r)] = kv.Pair{Key: ps[i].Key, Value: ps[i].Value}
			if f := ps[i].Followed; f != nil && r.Follow != nil && ps[i].Key != nil {
				if start, end, ok := r.Follow.Bounds(ps[i].Value); ok {
					extra[rangeID(kv.Range{Start: start, End: end})] = kv.Pair{Key: f.Key, Value: f.Value}
				}
			}
		}
	}
	w.waits.Add(1)
	return false, m.wbCommitLocked(ctx)
}

// changes reports whether the log writes records of one of inos.
func (w *wbLog) changes(inos []base.Ino) bool {
	w.dmu.Lock()
	defer w.dmu.Unlock()
	return slices.ContainsFunc(inos, func(ino base.Ino) bool { return w.dirty[ino] })
}

// wbRead commits the log before a read of inos if the log changes one.
func (m *Meta) wbRead(ctx context.Context, inos ...base.Ino) error {
	w := m.wb
	if w == nil || w.n.Load() == 0 || isWbFlusher(ctx) || !w.changes(inos) {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.changes(inos) {
		return nil
	}
	w.waits.Add(1)
	return m.wbCommitLocked(ctx)
}

// wbCommitLocked commits the log (w.mu held). On an error the store
// gives (it could not be reached), the log is kept for the next try.
func (m *Meta) wbCommitLocked(ctx context.Context) error {
	w := m.wb
	if len(w.ops) == 0 {
		return nil
	}
	gw := m.store.(kv.GuardedWriter)
	start := time.Now()
	defer func() { w.commitNanos.Add(int64(time.Since(start))) }()
	ctx = context.WithValue(context.WithoutCancel(ctx), wbFlusherKey{}, true)
	guards, writes := w.guards, w.writes.list()
	err := gw.WriteIf(ctx, guards, writes)
	for try := 0; errors.Is(err, kv.ErrUnknownOutcome) && try < wbVerifyTries; try++ {
		// Committed or not: the writes are all in the store, or (the
		// guards held before) none is.
		var in bool
		in, err = m.wbVerify(ctx, writes)
		switch {
		case err != nil:
			time.Sleep(time.Duration(try+1) * 100 * time.Millisecond)
			err = kv.ErrUnknownOutcome
		case in:
			err = nil
		default:
			err = gw.WriteIf(ctx, guards, writes)
		}
	}
	switch {
	case err == nil:
		w.batches.Add(1)
		m.spec.learn(guards, writes, nil)
		m.spec.usedShard(w.shard)
		w.noteFresh(m, writes)
	case errors.Is(err, kv.ErrGuard):
		m.spec.drop(guards)
		w.replays.Add(1)
		m.wbReplay(ctx, w.ops)
	default:
		return fmt.Errorf("write-back: committing %d changes: %w", len(w.ops), err)
	}
	w.commits++
	var after []func()
	for _, x := range w.ops {
		if x.after != nil {
			after = append(after, x.after)
		}
	}
	if len(after) > 0 {
		// Not under w.mu: a hook may take locks held by callers that
		// wait for the log (ForgetSlice's, by an id allocation).
		go func() {
			for _, f := range after {
				f()
			}
		}()
	}
	if w.queued {
		m.signalDeletes()
	}
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
	m.shards.put(w.shard)
	w.ops, w.guards = nil, nil
	w.n.Store(0)
	clear(w.gidx)
	w.dmu.Lock()
	clear(w.dirty)
	w.dmu.Unlock()
	w.writes = newWbWrites()
	w.queued = false
	return nil
}

// wbVerify reports whether every write of writes is in the store.
func (m *Meta) wbVerify(ctx context.Context, writes []kv.Write) (bool, error) {
	ranges := make([]kv.Range, len(writes))
	for i, x := range writes {
		ranges[i] = kv.Range{Start: x.Key, End: append(bytes.Clone(x.Key), 0)}
	}
	var ps []kv.Pair
	if err := m.looseView(ctx, func(r kv.Reader) (err error) {
		ps, err = kv.Firsts(r, ranges)
		return err
	}); err != nil {
		return false, err
	}
	for i, x := range writes {
		if x.Delete != (ps[i].Key == nil) || (!x.Delete && !bytes.Equal(x.Value, ps[i].Value)) {
			return false, nil
		}
	}
	return true, nil
}

// wbReplay runs the changes of ops again, in order, one transaction each.
func (m *Meta) wbReplay(ctx context.Context, ops []*wbOp) {
	w := m.wb
	for _, x := range ops {
		w.replayed.Add(1)
		err := m.retryLeased(ctx, func() error {
			return m.updateIn(ctx, nil, 0, func(t *wtx) error {
				o := m.newOp(t)
				o.now = x.now
				if err := x.replay(o); err != nil {
					return err
				}
				return o.flush()
			})
		})
		if err != nil {
			w.lost.Add(1)
			err = fmt.Errorf("an acknowledged change in directory %v could not be committed: %w", x.dirs, err)
			w.stickyErr.Store(&err)
			m.log.Error("write-back: a change is lost", "dirs", x.dirs, "err", err)
		}
	}
}

// wbTakeError returns (once) the error of a change lost since the last call.
func (m *Meta) wbTakeError() error {
	if m.wb == nil {
		return nil
	}
	if p := m.wb.stickyErr.Swap(nil); p != nil {
		return fmt.Errorf("%w: %w", *p, base.ErrIO)
	}
	return nil
}

// recallWriteBacksWait bounds how long recallWriteBacks waits for holders
// that do not answer (a dead one's leases go when its session expires).
const recallWriteBacksWait = 30 * time.Second

// recallWriteBacks recalls every directory lease another session holds
// with write-back, and waits until none is left (or recallWriteBacksWait
// passed): each holder commits its log before it gives a lease back.
// A snapshot calls it, so that it includes every change acknowledged
// before it began.
func (m *Meta) recallWriteBacks(ctx context.Context) error {
	if m.lc != nil {
		return nil // a store only this process writes
	}
	deadline := time.Now().Add(recallWriteBacksWait)
	for attempt := 0; ; attempt++ {
		var held []*leasedError
		if err := m.view(ctx, func(r kv.Reader) error {
			held = held[:0]
			return r.Scan(prefixOnly(pLease), kv.PrefixEnd(prefixOnly(pLease)), false, func(k, v []byte) bool {
				h, wb, ok := leaseHolder(v)
				if ok && wb && h != m.sessionID() && len(k) == 9 {
					held = append(held, &leasedError{dir: base.Ino(binary.BigEndian.Uint64(k[1:])), holder: h})
				}
				return true
			})
		}); err != nil {
			return err
		}
		if len(held) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			m.log.Warn("write-back leases not given back in time; going on without their changes",
				"leases", len(held), "waited", recallWriteBacksWait)
			return nil
		}
		for _, le := range held {
			if err := m.recallLease(ctx, le, attempt); err != nil {
				return err
			}
		}
	}
}

// wbForget drops the predictions of speculations after a transaction of
// this client that did not go through them (it may have changed what
// they predict, a usage shard or a directory's attribute), and what the
// log knows of the fresh inodes whose records it wrote (touched.owned;
// all of them without touched): with write-back, a wrong prediction found
// at commit costs a replay of the whole log, a missing one only a read.
func (m *Meta) wbForget(touched *touchLog) {
	w := m.wb
	if w == nil {
		return
	}
	m.spec.invalidate()
	w.fmu.Lock()
	defer w.fmu.Unlock()
	if touched == nil {
		clear(w.fresh)
		return
	}
	touched.mu.Lock()
	defer touched.mu.Unlock()
	for _, ino := range touched.owned {
		delete(w.fresh, ino)
	}
}

// freshDir returns the directory of ino if write-back is on and ino is
// fresh (lease.go): its changes may be written back.
func (m *Meta) freshDir(ino base.Ino) (base.Ino, bool) {
	if m.wb == nil {
		return 0, false
	}
	return m.leases.freshIn(ino)
}

var debugWB = false
