package meta

import (
	"bytes"
	"context"
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
// write (kv.GuardedWriter): in batches, one in flight at a time while the
// next fills (a batch starts when the one before ends, when it holds
// wbMaxOps changes or wbMaxWrites records, or wbMaxAge after its first
// change), and at once before anything that must see it:
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
// Reads a change makes come from, in order: the log's own writes (the
// batch in flight, then the next); the value the store had before the
// log, as a guard of the log already says, or the change itself read
// loosely from the store (only this client writes what the log writes:
// the store shows the state before the log, unless the read overlaps the
// writes of a batch in flight, which it then waits for); what the
// log's fresh inodes hold in the store (only this client writes them);
// the predictions of earlier committed speculations. Each range read
// from the store's state becomes a guard, on that state before the log.
// When a batch commits, the next one's guards move to the state after it
// (firstAfter), so each commit is right exactly when its guards hold.
// The changes run one after the other under w.mu, each seeing the ones
// before it.
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

// wbBatch is a part of the log: the changes being committed (wbLog.fl),
// or those after them (wbLog.cur).
type wbBatch struct {
	ops    []*wbOp
	guards []kv.Guard
	gidx   map[string]int // rangeID -> index in guards
	writes wbWrites
	dirty  map[base.Ino]bool // inodes whose records it writes; wbLog.dmu
	queued bool              // a change queued slice deletes
	shards []byte            // usage shards its changes use, held until it commits
	// inherit are ranges its changes read through fl's guards: once fl
	// commits, this batch guards them itself (cur only).
	inherit map[string]kv.Range
	started time.Time
	err     error  // a commit that could not reach the store (fl)
	term    uint64 // the predictions' term when its flight began (fl)
	// id numbers the batches in the order they are made (wbLog.newBatch):
	// they end in that order.
	id uint64
}

// newBatch returns the log's next batch (w.dmu held, or the log not
// shared yet).
func (w *wbLog) newBatch() *wbBatch {
	b := newWbBatch()
	w.lastID++
	b.id = w.lastID
	return b
}

func newWbBatch() *wbBatch {
	return &wbBatch{gidx: make(map[string]int), writes: newWbWrites(), dirty: make(map[base.Ino]bool),
		inherit: make(map[string]kv.Range)}
}

// wbLog is the write-back log.
type wbLog struct {
	mu    sync.Mutex // held while a change runs over the log, and to start or end a commit
	ended *sync.Cond // on mu: a commit ended
	cur   *wbBatch
	fl    *wbBatch // being committed; nil if none
	dmu   sync.Mutex
	timer *time.Timer
	// commits moves at the end of every commit: a read made without mu
	// held is the store's state before the log only if it did not move
	// (and overlaps no write of a batch in flight).
	commits uint64
	// seq moves, like commits, at the end of every commit, but before the
	// batch's inodes stop being dirty and without mu: a reader that took
	// it before a read of the store and finds it unmoved after, with the
	// inode not dirty, read no state a commit changed meanwhile (wbAttr).
	seq atomic.Uint64

	// fresh holds what committed logs wrote in the key spaces of fresh
	// inodes (lease.go): the store holds exactly that there, since no
	// other client writes them. wbForget drops an inode's (a transaction
	// that did not go through the log wrote there too).
	fmu   sync.Mutex
	fresh map[base.Ino]*wbWrites
	// deciding counts, per inode, the transactions outside the log that
	// read whether it is held (op.held) and have not ended (wbForget):
	// they may destroy it, and what fresh says of it may be about to
	// change. An open over the log leaves such an inode to the store,
	// where the two conflict (openHeld).
	deciding map[base.Ino]int
	// decided holds, per inode, the batch until whose end a transaction
	// that decided outside the log whether it is held still counts as
	// deciding (endDecidingLocked): the log's batches read before that
	// transaction committed, and a change over the log would read what
	// they knew of the inode (their guards), not what it left. ndecide
	// counts the inodes of deciding and decided, read without fmu.
	decided map[base.Ino]uint64
	ndecide atomic.Int64
	lastID  uint64 // the newest batch's id (dmu)

	n atomic.Int64 // changes not committed, read without mu
	// busy counts the changes running over the log (writeBack), read
	// without mu: a change may have read this client's memory (an open
	// count) and not yet joined the log, so a read or a transaction
	// that must come after it takes mu instead of trusting n (quiet).
	busy atomic.Int64

	// flyHook, if set (tests only, before the first change), runs in
	// wbFly before the batch is written, without mu.
	flyHook func()
	// replayHook, if set (tests only), runs with mu held before the
	// changes of a batch whose guard failed run again.
	replayHook func()
	// attrHook, if set (tests only), runs in wbAttr before it looks at
	// the log, after the store's attribute was read.
	attrHook func()
	// ranHook, if set (tests only), runs in writeBack with mu held once
	// a change ran over the log, before it joins the batch.
	ranHook func()
	// skipHook, if set (tests only), makes writeBack decline a change
	// when it returns true: the change runs outside the log.
	skipHook func() bool
	// decideHook, if set (tests only), runs in op.held of a transaction
	// outside the log once it read ino's open count n.
	decideHook func(ino base.Ino, n int)
	// markHook, if set (tests only), runs in op.decidingHeld of a
	// transaction outside the log before it marks ino.
	markHook func(ino base.Ino)

	// grants are this client's shares of the volume's limits (grant.go).
	grants wbGrants

	ops0, batches, replays, replayed, lost, waits, viewed, commitNanos, granted atomic.Int64
	stickyErr                                                                   atomic.Pointer[error]
}

// WriteBackStats counts the write-back log's work.
type WriteBackStats struct {
	Pending  int64 `json:"pending"`  // changes acknowledged and not committed now
	Changes  int64 `json:"changes"`  // changes acknowledged before their commit
	Batches  int64 `json:"batches"`  // guarded writes that committed a batch
	Replays  int64 `json:"replays"`  // batches whose guards failed: their changes ran again
	Replayed int64 `json:"replayed"` // changes run again
	Lost     int64 `json:"lost"`     // acknowledged changes that failed when run again
	Waits    int64 `json:"waits"`    // operations that waited for the log's commit before they ran
	Viewed   int64 `json:"viewed"`   // reads answered over the log, without committing it
	Grants   int64 `json:"grants"`   // grants of the volume's limits taken (grant.go)
	// CommitNanos is the time batches spent in flight.
	CommitNanos int64 `json:"commit_ns"`
}

func newWbLog() *wbLog {
	w := &wbLog{fresh: make(map[base.Ino]*wbWrites), deciding: make(map[base.Ino]int), decided: make(map[base.Ino]uint64)}
	w.cur = w.newBatch()
	w.ended = sync.NewCond(&w.mu)
	return w
}

// WriteBackStats returns the counters; ok is false when write-back is off.
func (m *Meta) WriteBackStats() (s WriteBackStats, ok bool) {
	w := m.wb
	if w == nil {
		return s, false
	}
	return WriteBackStats{Pending: w.n.Load(), Changes: w.ops0.Load(), Batches: w.batches.Load(),
		Replays: w.replays.Load(), Replayed: w.replayed.Load(), Lost: w.lost.Load(), Waits: w.waits.Load(),
		Viewed: w.viewed.Load(), Grants: w.granted.Load(), CommitNanos: w.commitNanos.Load()}, true
}

// pending counts the changes not committed (mu held).
func (w *wbLog) pending() int {
	n := len(w.cur.ops)
	if w.fl != nil {
		n += len(w.fl.ops)
	}
	return n
}

// wbFlusherKey marks the context of the log's own commit and replays:
// they must not wait for the log.
type wbFlusherKey struct{}

func isWbFlusher(ctx context.Context) bool { return ctx.Value(wbFlusherKey{}) != nil }

// wbNoBarrierKey marks the context of a transaction that reads and writes
// no record the log writes (an id counter's): it need not wait for the
// log's commit.
type wbNoBarrierKey struct{}

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
	if w.skipHook != nil && w.skipHook() {
		return false, nil
	}
	abs := make(map[string]bool, len(absent))
	for _, r := range absent {
		abs[rangeID(r)] = true
	}
	extra := make(map[string]kv.Pair)
	var own bool // myShard is this change's to give back
	var myShard byte
	var granted bool // the grants were taken anew for this change
	w.mu.Lock()
	w.busy.Add(1)
	defer func() {
		if own {
			m.shards.put(myShard)
		}
		w.busy.Add(-1)
		w.mu.Unlock()
	}()
	for try := 0; try < 6; try++ {
		// Checked under w.mu: a lease given back after this holds waits
		// for the log (releaseLease commits it first).
		for _, d := range dirs {
			if !m.leases.holds(d) {
				return false, nil
			}
		}
		// The batch's usage shard, or, for its first change, one of its
		// own, kept across tries (each try reads its records).
		var shard byte
		if len(w.cur.shards) > 0 {
			shard = w.cur.shards[0]
		} else {
			if !own {
				own, myShard = true, m.wbFirstShard()
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
		err = st.outcome(err)
		switch {
		case errors.Is(err, errSpecMiss):
			if err := m.wbReadMissed(ctx, st.missed, extra); err != nil {
				return false, nil
			}
			continue
		case errors.Is(err, errWbFlush):
			if err := m.wbCommitLocked(ctx); err != nil {
				return true, err
			}
			clear(extra)
			continue
		case errors.Is(err, errWbGrant):
			// A volume limit's grant is short: take it anew (after the
			// log's commit), once; else the usual path checks the store.
			if granted || !m.wbGrantLocked(ctx) {
				return false, nil
			}
			granted = true
			clear(extra)
			continue
		case err != nil:
			// Unpredictable, or an error computed from predictions that
			// may be stale: the usual path decides, after the log.
			return false, nil
		}
		if w.ranHook != nil {
			w.ranHook()
		}
		// A transaction outside the log deciding whether an inode this
		// change wrote is held: the change runs outside the log too,
		// where the two conflict (decidingHeld). Checked, and the change
		// marked in the log, under fmu.
		w.fmu.Lock()
		if w.decidingAny(touched) {
			w.fmu.Unlock()
			return false, nil
		}
		b := w.cur
		if len(b.shards) == 0 {
			b.shards, own = append(b.shards, myShard), false // the batch's now
		}
		if len(b.ops) == 0 {
			b.started = time.Now()
		}
		b.ops = append(b.ops, &wbOp{replay: replay, now: o.now, dirs: dirs, after: after})
		w.grants.charged(st.grantUsed)
		w.n.Store(int64(w.pending()))
		w.ops0.Add(1)
		for _, g := range st.guards {
			b.gidx[rangeID(g.Range)] = len(b.guards)
			b.guards = append(b.guards, g)
		}
		for id, r := range st.inherit {
			b.inherit[id] = r
		}
		for _, k := range st.writes.order {
			b.writes.put(st.writes.vals[k])
		}
		w.dmu.Lock()
		if touched != nil {
			for _, ino := range touched.inos {
				b.dirty[ino] = true
			}
			for _, n := range touched.names {
				b.dirty[n.dir] = true
			}
		}
		for _, d := range dirs {
			b.dirty[d] = true
		}
		w.dmu.Unlock()
		w.fmu.Unlock()
		b.queued = b.queued || t.deletesQueued
		// As if committed: the leases learn the names, the listings the
		// directory attributes.
		m.updated(touched, t.dirAttrs, false, nil)
		m.wbKick()
		return true, nil
	}
	return false, nil
}

// wbFirstShard takes the usage shard of a batch's first change (w.mu
// held): the shard of the batch in flight, if any, whose record the log
// knows as that batch leaves it (read through its guard and writes, no
// read of the store: before, a shard of its own, often not predicted,
// cost the first change after every start of a commit a loose read, and
// while the store was away that change waited for it); else a shard whose
// record is predicted. The two batches commit one after the other, so
// they do not conflict on it; each gives it back when it ends.
func (m *Meta) wbFirstShard() byte {
	if fl := m.wb.fl; fl != nil && len(fl.shards) > 0 {
		m.shards.take(fl.shards[0])
		return fl.shards[0]
	}
	return m.shards.getOf(m.spec.knownShards())
}

// wbReadMissed reads the ranges a change or a read over the log missed,
// loosely and without w.mu (held on entry and on return), into extra: a
// read is the store's state before the log if no commit ended meanwhile
// and it overlaps no write of the batch in flight; else extra is
// cleared (after that batch ended) and the caller runs again.
func (m *Meta) wbReadMissed(ctx context.Context, missed []kv.Range, extra map[string]kv.Pair) error {
	w := m.wb
	commits, term := w.commits, m.spec.curTerm()
	w.mu.Unlock()
	var ps []kv.Pair
	err := m.looseView(ctx, func(r kv.Reader) (err error) {
		ps, err = kv.Firsts(r, missed)
		return err
	})
	w.mu.Lock()
	if err != nil {
		return err
	}
	if w.commits != commits || m.spec.curTerm() != term {
		// A commit ended, or a lease was given back or taken (another
		// client may have changed what was read before it).
		clear(extra)
		return nil
	}
	if fl := w.fl; fl != nil && slices.ContainsFunc(missed, func(r kv.Range) bool {
		_, ok := fl.writes.firstAny(r.Start, r.End)
		return ok
	}) {
		for w.fl == fl {
			w.ended.Wait()
		}
		clear(extra)
		return nil
	}
	for i, r := range missed {
		extra[rangeID(r)] = kv.Pair{Key: ps[i].Key, Value: ps[i].Value}
		if f := ps[i].Followed; f != nil && r.Follow != nil && ps[i].Key != nil {
			// What the follow read, the next run's read.
			if start, end, ok := r.Follow.Bounds(ps[i].Value); ok {
				extra[rangeID(kv.Range{Start: start, End: end})] = kv.Pair{Key: f.Key, Value: f.Value}
			}
		}
	}
	return nil
}

// wbKick starts a commit of the next batch if none is in flight and it is
// full, or arms the timer for its age (w.mu held).
func (m *Meta) wbKick() {
	w := m.wb
	b := w.cur
	if w.fl != nil || len(b.ops) == 0 {
		return // the commit in flight starts the next when it ends
	}
	if len(b.ops) >= wbMaxOps || b.writes.len() >= wbMaxWrites || time.Since(b.started) >= wbMaxAge {
		m.wbStartLocked()
		return
	}
	if w.timer == nil {
		w.timer = time.AfterFunc(wbMaxAge-time.Since(b.started), func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.timer = nil
			m.wbKick()
		})
	}
}

// wbBarrier commits the write-back log, if any, before an operation that
// may depend on it.
func (m *Meta) wbBarrier(ctx context.Context) error { return m.wbBarrierFreeing(ctx, nil) }

// wbBarrierFreeing is wbBarrier that calls free, if set, before it waits
// for the log (and only then): to give back what the log's commit may
// need, as a started transaction's connection (updateIn).
func (m *Meta) wbBarrierFreeing(ctx context.Context, free func()) error {
	w := m.wb
	if w == nil || w.quiet(nil) || isWbFlusher(ctx) || ctx.Value(wbNoBarrierKey{}) != nil {
		return nil
	}
	if free != nil {
		free()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pending() > 0 {
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
	if w == nil || w.n.Load() == 0 || isWbFlusher(ctx) || !w.changes(inos) {
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
		err := st.outcome(fn(st))
		if !errors.Is(err, errSpecMiss) {
			if errors.Is(err, errNoSpec) || errors.Is(err, errWbFlush) {
				break
			}
			w.viewed.Add(1)
			return true, err
		}
		if err := m.wbReadMissed(ctx, st.missed, extra); err != nil {
			return true, err
		}
	}
	w.waits.Add(1)
	return false, m.wbCommitLocked(ctx)
}

// quiet reports, without mu, that the log writes no record of inos (of
// any inode if inos is nil) and that no change is running over it: what
// the caller did before (an open counted, a handle closed) is seen by
// every change that has not joined the log yet. The order of the loads
// matters: a change counted in busy joins the log before it leaves busy.
func (w *wbLog) quiet(inos []base.Ino) bool {
	if w.busy.Load() != 0 {
		return false
	}
	return w.n.Load() == 0 || inos != nil && !w.changes(inos)
}

// changes reports whether the log writes records of one of inos.
func (w *wbLog) changes(inos []base.Ino) bool {
	w.dmu.Lock()
	defer w.dmu.Unlock()
	return slices.ContainsFunc(inos, func(ino base.Ino) bool {
		return w.cur.dirty[ino] || (w.fl != nil && w.fl.dirty[ino])
	})
}

// wbRemovesIn reports whether a change that removes or renames names in
// dir (unlink, rmdir, a rename within dir) may be written back: the log
// is on, dir is leased, and no trash is kept (a removal would move the
// name into the trash, another directory).
func (m *Meta) wbRemovesIn(dir base.Ino) bool {
	return m.wb != nil && m.Settings().TrashDays == 0 && m.leases.holds(dir)
}

// wbSeq returns the log's commit sequence (wbLog.seq), to be taken
// before a read of the store whose attributes wbAttr then checks.
func (m *Meta) wbSeq() uint64 {
	if m.wb == nil {
		return 0
	}
	return m.wb.seq.Load()
}

// wbAttr sets *a to ino's attribute as the log leaves it, if the log
// changes ino: for an attribute read from the store by a read of another
// inode (a lookup's target, a listing's entries), which the log does not
// change. An unlink written back in one directory changes the link count
// of a file that a name in another directory shows. seq is wbSeq taken
// before *a was read: a batch that committed since may have changed ino
// after the read (and its inodes are no longer dirty), so ino is read
// again from the store.
func (m *Meta) wbAttr(ctx context.Context, ino base.Ino, a *base.Attr, seq uint64) error {
	w := m.wb
	if w == nil || isWbFlusher(ctx) {
		return nil
	}
	if w.attrHook != nil {
		w.attrHook()
	}
	read := func(r kv.Reader) (err error) {
		*a, err = getAttr(r, ino)
		return err
	}
	if w.n.Load() != 0 && w.changes([]base.Ino{ino}) {
		if done, err := m.wbView(ctx, []base.Ino{ino}, read); done {
			return err
		}
		return m.looseView(ctx, read) // the log committed first
	}
	if w.seq.Load() != seq {
		return m.looseView(ctx, read)
	}
	return nil
}

// wbRead commits the log before a read of inos if the log changes one,
// or will once the changes running over it join: an open calls it once
// counted (OpenFileChunk), so that a change that found the file not open
// and destroyed it is in the store before the open reads there.
func (m *Meta) wbRead(ctx context.Context, inos ...base.Ino) error {
	w := m.wb
	if w == nil || w.quiet(inos) || isWbFlusher(ctx) {
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

// wbCommitLocked commits every change acknowledged so far and waits for
// it (w.mu held, released while waiting). An error the store gives (it
// could not be reached) keeps the changes in the log for the next try.
func (m *Meta) wbCommitLocked(ctx context.Context) error {
	w := m.wb
	for {
		for w.fl != nil {
			w.ended.Wait()
		}
		if len(w.cur.ops) == 0 {
			return nil
		}
		f := m.wbStartLocked()
		for w.fl == f {
			w.ended.Wait()
		}
		if f.err != nil {
			return f.err
		}
	}
}

// wbStartLocked makes the next batch the one in flight and commits it in
// the background (w.mu held; no batch in flight).
func (m *Meta) wbStartLocked() *wbBatch {
	w := m.wb
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
	f := w.cur
	f.term = m.spec.curTerm()
	w.dmu.Lock()
	w.fl, w.cur = f, w.newBatch()
	w.dmu.Unlock()
	go m.wbFly(f)
	return f
}

// wbFly commits batch f, in flight, and ends its flight.
func (m *Meta) wbFly(f *wbBatch) {
	w := m.wb
	gw := m.store.(kv.GuardedWriter)
	start := time.Now()
	ctx := context.WithValue(context.Background(), wbFlusherKey{}, true)
	writes := f.writes.list()
	if w.flyHook != nil {
		w.flyHook()
	}
	err := gw.WriteIf(ctx, f.guards, writes)
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
			err = gw.WriteIf(ctx, f.guards, writes)
		}
	}
	w.commitNanos.Add(int64(time.Since(start)))
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case err == nil:
		w.batches.Add(1)
		m.spec.learnBatch(f.term, f.guards, &f.writes)
		for _, s := range f.shards {
			m.spec.usedShard(s)
		}
		w.noteFresh(m, writes)
		m.wbRebase(ctx, f)
	case errors.Is(err, kv.ErrGuard):
		m.spec.drop(f.guards)
		w.replays.Add(1)
		// The next batch was computed over this one's predicted effect:
		// its changes run again too, after these. Its inodes stay dirty
		// in f until the replays end: a read of one waits for them (its
		// records are not in the store yet).
		b := w.cur
		w.dmu.Lock()
		for ino := range b.dirty {
			f.dirty[ino] = true
		}
		w.cur = w.newBatch()
		w.dmu.Unlock()
		if w.replayHook != nil {
			w.replayHook()
		}
		m.wbReplay(ctx, f.ops)
		m.wbReplay(ctx, b.ops)
		w.wbDropGrants() // the replays charged the store's
		m.wbDone(b)
		w.endDecided(b.id)
	default:
		// Not committed: back in front of the next batch, whose guards
		// are on the same state (before this one).
		f.err = fmt.Errorf("write-back: committing %d changes: %w", len(f.ops), err)
		m.log.Warn("write-back: a commit failed; the changes stay in the log", "changes", len(f.ops), "err", err)
		b := w.cur
		for _, g := range b.guards {
			if _, ok := f.gidx[rangeID(g.Range)]; !ok {
				f.gidx[rangeID(g.Range)] = len(f.guards)
				f.guards = append(f.guards, g)
			}
		}
		for _, k := range b.writes.order {
			f.writes.put(b.writes.vals[k])
		}
		f.ops = append(f.ops, b.ops...)
		f.queued = f.queued || b.queued
		f.shards = append(f.shards, b.shards...)
		w.dmu.Lock()
		for ino := range b.dirty {
			f.dirty[ino] = true
		}
		merged := *f
		merged.err, merged.inherit = nil, make(map[string]kv.Range)
		merged.id = b.id // it ends both
		w.cur, w.fl = &merged, nil
		w.dmu.Unlock()
		w.commits++
		w.ended.Broadcast()
		if w.timer == nil {
			// Try again a second later, or at the next barrier.
			w.timer = time.AfterFunc(time.Second, func() {
				w.mu.Lock()
				defer w.mu.Unlock()
				w.timer = nil
				m.wbKick()
			})
		}
		return
	}
	m.wbDone(f)
	w.endDecided(f.id)
	w.dmu.Lock()
	w.seq.Add(1)
	w.fl = nil
	w.dmu.Unlock()
	w.commits++
	w.n.Store(int64(w.pending()))
	w.ended.Broadcast()
	m.wbKick()
}

// wbRebase moves the guards of the next batch to the state after f, which
// committed (w.mu held): each is on the state before f, as the next
// batch's changes read it; with f's writes applied, it is what the store
// holds now. A range whose state after f cannot be told so is read.
func (m *Meta) wbRebase(ctx context.Context, f *wbBatch) {
	b := m.wb.cur
	var unknown []int
	for i := range b.guards {
		g := &b.guards[i]
		p, ok := firstAfter(g.Range, g.Want, &f.writes)
		if !ok {
			unknown = append(unknown, i)
			continue
		}
		g.Want = p
	}
	for id, r := range b.inherit {
		if _, ok := b.gidx[id]; ok {
			continue
		}
		base := f.guards[f.gidx[id]].Want
		p, ok := firstAfter(r, base, &f.writes)
		b.gidx[id] = len(b.guards)
		b.guards = append(b.guards, kv.Guard{Range: r, Want: p})
		if !ok {
			unknown = append(unknown, len(b.guards)-1)
		}
	}
	b.inherit = make(map[string]kv.Range)
	if len(unknown) == 0 {
		return
	}
	ranges := make([]kv.Range, len(unknown))
	for i, gi := range unknown {
		ranges[i] = b.guards[gi].Range
	}
	var ps []kv.Pair
	err := m.looseView(ctx, func(r kv.Reader) (err error) {
		ps, err = kv.Firsts(r, ranges)
		return err
	})
	for i, gi := range unknown {
		if err != nil {
			// Unknowable now: a guard that cannot hold makes the batch
			// run again, change by change.
			b.guards[gi].Want = kv.Pair{Key: []byte{0xff, 0xff}, Value: []byte("unknown")}
			continue
		}
		b.guards[gi].Want = kv.Pair{Key: ps[i].Key, Value: ps[i].Value}
	}
}

// wbDone ends batch b, committed or replayed (w.mu held): its hooks, its
// deletes, its shards.
func (m *Meta) wbDone(b *wbBatch) {
	var after []func()
	for _, x := range b.ops {
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
	if b.queued {
		m.signalDeletes()
	}
	for _, s := range b.shards {
		m.shards.put(s)
	}
}

// wbVerify reports whether every write of writes is in the store.
func (m *Meta) wbVerify(ctx context.Context, writes []kv.Write) (bool, error) {
	ranges := make([]kv.Range, len(writes))
	for i, x := range writes {
		ranges[i] = exactRange(x.Key)
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
//
// A change of an inode's own records (its attributes, its data) that
// finds the inode gone when it runs again succeeds with nothing to do:
// the destroy came after it. Either a change before it in the log found
// the file not open any more when it ran again (a rename over it made an
// orphan of a file then open, closed since), or a transaction outside
// the log that destroyed it had begun deciding before the change joined
// the log (freshDir: no change of an inode so decided joins the log
// after), so the change may be ordered first.
func (m *Meta) wbReplay(ctx context.Context, ops []*wbOp) {
	w := m.wb
	for _, x := range ops {
		w.replayed.Add(1)
		err := m.retryLeased(ctx, func() error {
			return m.updateIn(ctx, nil, 0, func(t *wtx) error {
				o := m.newOp(t)
				o.now, o.replaying = x.now, true
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
				if dir, isDir := keyIno(k); ok && isDir && wb && h != m.sessionID() && len(k) == 9 {
					held = append(held, &leasedError{dir: dir, holder: h})
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
	// Ended: what it wrote of them is forgotten above.
	w.endDecidingLocked(touched)
}

// endDeciding ends the reads of holds outside the log that touched
// recorded (decidingHeld), for a transaction that ended without wbForget
// (a speculation that did not commit). Idempotent.
func (m *Meta) endDeciding(touched *touchLog) {
	w := m.wb
	if w == nil || touched == nil {
		return
	}
	w.fmu.Lock()
	defer w.fmu.Unlock()
	touched.mu.Lock()
	defer touched.mu.Unlock()
	w.endDecidingLocked(touched)
}

// endDecidingLocked is endDeciding with fmu and touched.mu held.
func (w *wbLog) endDecidingLocked(touched *touchLog) {
	if len(touched.deciding) == 0 {
		return
	}
	// The batches made before this transaction ended may hold what the
	// store had of its inodes before it committed (a guard read then):
	// the inodes stay decided until the newest such batch ended. A
	// change running over the log (busy) joins the current batch.
	var until uint64
	w.dmu.Lock()
	if len(w.cur.dirty) > 0 || w.busy.Load() > 0 {
		until = w.cur.id
	} else if w.fl != nil {
		until = w.fl.id
	}
	w.dmu.Unlock()
	for _, ino := range touched.deciding {
		if w.deciding[ino]--; w.deciding[ino] > 0 {
			continue
		}
		delete(w.deciding, ino)
		prev, was := w.decided[ino]
		switch {
		case until > prev:
			w.decided[ino] = until
		case !was:
			w.ndecide.Add(-1) // in neither map now
		}
	}
	touched.deciding = nil
}

// endDecided ends the marks of decided that last until batch id, which
// ended (committed, or its changes ran again; w.mu held).
func (w *wbLog) endDecided(id uint64) {
	if w.ndecide.Load() == 0 {
		return
	}
	w.fmu.Lock()
	defer w.fmu.Unlock()
	for ino, until := range w.decided {
		if until <= id {
			delete(w.decided, ino)
			if w.deciding[ino] == 0 {
				w.ndecide.Add(-1)
			}
		}
	}
}

// decidingHeld records that the transaction of o, outside the log,
// reads whether ino is held (before it reads this client's open count),
// or destroys it (an inode without holds): until it ends, and then
// until the log's batches that may have read ino before it committed
// ended (decided), no change of ino joins the log (freshDir; an open
// over the log checks again). Its destroy and an open counted after its
// read then meet in the store, which makes them conflict; over the log
// the open would read what the log knew of ino before this transaction,
// and hold a file it destroys. Reports whether it recorded (a
// transaction outside the log, with write-back on).
//
// A change over the log that ran before, and is not committed, may have
// changed ino in ways this transaction does not see (it read the store):
// a link, whose replay after this transaction destroyed ino would lose
// the new name, or a create in a directory it removes. Then this fails
// with errWbPending, and updateIn runs it again after the log.
// Registering and looking at the log under fmu, against writeBack's
// look at the marks and its joining under fmu, puts each change over
// the log on one side: before (seen here) or after (it sees the mark and
// runs outside the log).
func (o *op) decidingHeld(ino base.Ino) (bool, error) {
	w := o.m.wb
	if w == nil || o.touched == nil || o.flusher {
		return false, nil
	}
	if _, inLog := o.wtx.Txn.(*wbTxn); inLog {
		return false, nil
	}
	if w.markHook != nil {
		w.markHook(ino)
	}
	o.touched.mu.Lock()
	o.touched.deciding = append(o.touched.deciding, ino)
	o.touched.mu.Unlock()
	w.fmu.Lock()
	defer w.fmu.Unlock()
	if w.deciding[ino]++; w.deciding[ino] == 1 {
		if _, ok := w.decided[ino]; !ok {
			w.ndecide.Add(1)
		}
	}
	if w.changes([]base.Ino{ino}) {
		return true, errWbPending
	}
	return true, nil
}

// errWbPending: a transaction outside the write-back log read whether an
// inode the log changes is held, or destroys it (decidingHeld).
var errWbPending = errors.New("meta: the write-back log changes an inode this transaction decides on")

// decidingAny reports whether a transaction outside the log decides
// whether one of the inodes a change over the log wrote is held (fmu
// held).
func (w *wbLog) decidingAny(touched *touchLog) bool {
	if len(w.deciding) == 0 || touched == nil {
		return false
	}
	for _, ino := range touched.inos {
		if w.deciding[ino] > 0 {
			return true
		}
	}
	for _, ino := range touched.owned {
		if w.deciding[ino] > 0 {
			return true
		}
	}
	return false
}

// isDeciding reports whether a transaction outside the log may be
// destroying ino now (decidingHeld), or did so after the log's batches
// read what they know of it (decided).
func (w *wbLog) isDeciding(ino base.Ino) bool {
	if w.ndecide.Load() == 0 {
		return false
	}
	w.fmu.Lock()
	defer w.fmu.Unlock()
	_, decided := w.decided[ino]
	return w.deciding[ino] > 0 || decided
}

// freshDir returns the directory of ino if write-back is on and ino is
// fresh (lease.go): its changes may be written back. Not while a
// transaction outside the log decides or decided whether ino is held
// (isDeciding): it may have destroyed ino after the log read it, and a
// change over the log would act on the inode as it was (an open holding
// a destroyed file, a chmod acknowledged and then lost at the replay).
func (m *Meta) freshDir(ino base.Ino) (base.Ino, bool) {
	if m.wb == nil || m.wb.isDeciding(ino) {
		return 0, false
	}
	return m.leases.freshIn(ino)
}
