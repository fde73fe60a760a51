package pebble

import (
	"bytes"
	"slices"
	"sync"
	"sync/atomic"
)

// Optimistic transactions (see the package doc, "Transactions").
//
// An optimistic Update runs its function without the writer slot, reading
// the database's latest state through its own indexed batch and noting
// every key and key range it read (a readSet). Every commit, optimistic or
// not, appends the keys it wrote to the commitLog, numbered in commit
// order, after its batch is visible. To commit, an optimistic Update takes
// the writer slot and checks the log: if no transaction committed since
// it began wrote a key it read, every read it made saw the state as of its
// start (a later commit would have had to write the key), so committing
// it now is serializable. Otherwise it re-runs its function under the
// slot, where nothing else commits, and cannot fail again.

// keyRange is a range of keys read, [start, end); a nil end has no bound.
type keyRange struct{ start, end []byte }

// readSet records what an optimistic transaction read. Keys are copies.
type readSet struct {
	points [][]byte
	ranges []keyRange
}

func (rs *readSet) point(key []byte) {
	rs.points = append(rs.points, bytes.Clone(key))
}

// scanned records a forward or reverse scan of [start, end) that stopped
// at key last (nil: it ran to the end of the range). Only the part up to
// last was read: keys beyond it do not change what the scan returned.
func (rs *readSet) scanned(start, end []byte, reverse bool, last []byte) {
	switch {
	case last == nil:
		rs.ranges = append(rs.ranges, keyRange{bytes.Clone(start), bytes.Clone(end)})
	case reverse:
		rs.ranges = append(rs.ranges, keyRange{bytes.Clone(last), bytes.Clone(end)})
	default:
		// [start, last] is [start, last+"\x00").
		rs.ranges = append(rs.ranges, keyRange{bytes.Clone(start), append(bytes.Clone(last), 0)})
	}
}

// commitEntry is one committed transaction's written keys, sorted.
type commitEntry struct {
	seq   uint64
	keys  [][]byte
	bytes int // key bytes
}

// conflicts reports whether the transaction that wrote e.keys changed
// something rs read.
func (e *commitEntry) conflicts(rs *readSet) bool {
	for _, p := range rs.points {
		if _, found := slices.BinarySearchFunc(e.keys, p, bytes.Compare); found {
			return true
		}
	}
	for _, r := range rs.ranges {
		i, _ := slices.BinarySearchFunc(e.keys, r.start, bytes.Compare)
		if i < len(e.keys) && (r.end == nil || bytes.Compare(e.keys[i], r.end) < 0) {
			return true
		}
	}
	return false
}

// commitLogSize is how many recent commits the log keeps. An optimistic
// transaction that began before the oldest of them cannot be checked and
// re-runs under the writer slot; at tens of thousands of commits per
// second this is a few tens of milliseconds, far longer than a metadata
// transaction runs.
const commitLogSize = 1024

// commitLogBytes bounds the key bytes the log keeps: big transactions
// (a dump being loaded, a snapshot being pruned) would otherwise pin
// hundreds of megabytes. The oldest entries go first; transactions that
// began before them re-run under the slot.
const commitLogBytes = 16 << 20

// commitLog holds the keys written by the last commitLogSize commits.
type commitLog struct {
	seq atomic.Uint64 // number of the last commit logged

	mu      sync.Mutex
	entries []commitEntry // oldest first, consecutive seqs ending at seq
	bytes   int           // key bytes in entries
}

// add logs a commit that wrote keys (not sorted, may repeat); the caller
// holds the writer slot and its batch is already visible.
func (l *commitLog) add(keys [][]byte) {
	slices.SortFunc(keys, bytes.Compare)
	keys = slices.CompactFunc(keys, bytes.Equal)
	l.mu.Lock()
	defer l.mu.Unlock()
	e := commitEntry{keys: keys}
	for _, k := range keys {
		e.bytes += len(k)
	}
	l.bytes += e.bytes
	drop := 0
	for drop < len(l.entries) && (len(l.entries)-drop >= commitLogSize || l.bytes > commitLogBytes) {
		l.bytes -= l.entries[drop].bytes
		drop++
	}
	if drop > 0 {
		clear(l.entries[:drop]) // let the dropped keys be collected
		l.entries = l.entries[drop:]
		if cap(l.entries) > 2*commitLogSize {
			l.entries = append(make([]commitEntry, 0, commitLogSize+1), l.entries...)
		}
	}
	e.seq = l.seq.Load() + 1
	l.entries = append(l.entries, e)
	l.seq.Store(e.seq)
}

// valid reports whether no commit after number start wrote a key rs read.
func (l *commitLog) valid(start uint64, rs *readSet) bool {
	if l.seq.Load() == start {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.entries) == 0 || l.entries[0].seq > start+1 {
		return false // commits after start are no longer logged
	}
	for i := int(start + 1 - l.entries[0].seq); i < len(l.entries); i++ {
		if l.entries[i].conflicts(rs) {
			return false
		}
	}
	return true
}

// occGate turns optimism off while it mostly fails: each conflict adds
// gateConflict to a score, each success takes one off, and while the score
// is above gateOff Updates wait for the writer slot instead (each taking
// one off, so that optimism is tried again). Optimism therefore stays on
// while fewer than about one optimistic Update in nine conflicts: beyond
// that, the wasted runs cost more than the overlap gains.
type occGate struct{ score atomic.Int32 }

const (
	gateConflict = 8
	gateOff      = 64
	gateMax      = 2 * gateOff
)

func (g *occGate) try() bool {
	if g.score.Load() > gateOff {
		g.score.Add(-1)
		return false
	}
	return true
}

func (g *occGate) succeeded() {
	if g.score.Load() > 0 {
		g.score.Add(-1)
	}
}

func (g *occGate) conflicted() {
	if g.score.Load() < gateMax {
		g.score.Add(gateConflict)
	}
}

// OCCStats counts how Updates ran.
type OCCStats struct {
	// Optimistic is the number of Updates whose optimistic run held:
	// committed, or (nothing to write) returned what they read.
	Optimistic uint64
	// Conflicts is the number of optimistic runs whose reads had changed,
	// so that the Update ran again under the writer slot.
	Conflicts uint64
	// Locked is the number of Updates run under the writer slot from the
	// start, because optimism was off.
	Locked uint64
}

type occCounters struct{ optimistic, conflicts, locked atomic.Uint64 }

// OCCStats returns how the store's Updates ran so far.
func (s *Store) OCCStats() OCCStats {
	return OCCStats{
		Optimistic: s.occCount.optimistic.Load(),
		Conflicts:  s.occCount.conflicts.Load(),
		Locked:     s.occCount.locked.Load(),
	}
}
