// Package kv defines the narrow transactional key-value interface that the
// metadata layer is written over, and the retry policy shared by backends.
//
// A backend stores ordered byte-string keys inside transactions and knows
// nothing about file systems. All file-system semantics live in package meta;
// all key encoding lives in meta/keys.go.
//
// Backends: kv/memkv (tests), kv/pebble (embedded default), kv/postgres
// (shared mode). Every backend passes kv/kvtest.Run.
package kv

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// ErrConflict is returned by a backend's commit (or any operation inside a
// transaction) when the transaction conflicted with a concurrent one and must
// be retried. Store.Update retries such transactions itself; callers only see
// it if retries are exhausted.
var ErrConflict = errors.New("kv: transaction conflict")

// ErrClosed is returned by operations on a closed Store.
var ErrClosed = errors.New("kv: store closed")

// ErrUnknownOutcome is returned by Update of a backend on a server (kv/postgres)
// when the connection was lost after the commit was sent, so the
// transaction may or may not have committed. Update does not retry it: fn,
// re-run against a store where its first run committed, would see its own
// effects (a create would find its name taken). The caller may re-read the
// state to find out; a file-system operation that gets it fails with EIO.
var ErrUnknownOutcome = errors.New("kv: transaction outcome unknown (connection lost during commit)")

// ErrUnavailable is wrapped by the errors of a backend on a server whose
// server could not be reached for as long as its outage policy allows
// (kv/postgres: ErrUnreachable). The backend already waited and retried;
// a file-system operation that gets it fails with EIO, whatever socket
// error (ECONNREFUSED, or ENOENT for a missing Unix socket) it wraps.
var ErrUnavailable = errors.New("kv: store unavailable")

// ErrNotExist is returned, wrapped, by an Open function told to open
// only an existing store (pebble and postgres Options.MustExist) where
// there is none; it created nothing.
var ErrNotExist = errors.New("no metadata database")

// ErrGuard is returned by WriteIf when a guard found another pair than the
// one it wants, or when a concurrent transaction changed a key the writes
// touch; nothing was written. The caller reads again and decides anew.
var ErrGuard = errors.New("kv: guarded write: the store changed since it was read")

// ErrLocked is returned by Open functions when another process holds the
// store exclusively (embedded engines).
var ErrLocked = errors.New("kv: store is locked by another process")

// Reader reads a consistent view of the store.
//
// Keys and values passed to callbacks or returned are owned by the caller
// only until the callback returns / the transaction ends for Scan; values
// returned by Get are owned by the caller (backends return copies).
type Reader interface {
	// Get returns the value of key, or (nil, nil) if the key does not exist.
	Get(key []byte) ([]byte, error)
	// Scan calls fn for each key in [start, end) in ascending order (or
	// descending order if reverse is true) until fn returns false. A nil end
	// means no upper bound. The key and value slices passed to fn are only
	// valid during the call.
	Scan(start, end []byte, reverse bool, fn func(key, value []byte) bool) error
}

// Txn is a read-write transaction. Its reads see one consistent snapshot
// and its writes commit atomically. Two transactions that write a common
// key never both commit (first committer wins); a backend may be stricter
// (memkv runs one at a time; pebble checks reads, both serializable) but callers may not
// rely on more: a transaction whose correctness depends on keys it only
// reads staying unchanged must also write a key that every transaction
// changing them writes (materialize the conflict). Writes are visible to the
// transaction's own reads. A Txn must not be used after its function returns
// and must not be shared between goroutines.
type Txn interface {
	Reader
	// Set stores value under key. The store copies both slices.
	Set(key, value []byte)
	// Delete removes key; deleting a missing key is not an error.
	Delete(key []byte)
}

// Store is a transactional ordered key-value store. It is safe for
// concurrent use by many goroutines.
type Store interface {
	// Update runs fn in a read-write transaction (see Txn) and commits it
	// if fn returns nil. If the commit (or a read) conflicts with another
	// transaction, Update retries fn from the start, so fn must have no side
	// effects outside the transaction other than ones it can repeat. An error
	// returned by fn aborts the transaction and is returned unchanged.
	Update(ctx context.Context, fn func(tx Txn) error) error
	// View runs fn against a read-only consistent snapshot.
	View(ctx context.Context, fn func(r Reader) error) error
	// Sync makes every transaction committed so far durable on stable
	// storage. Update may return before its transaction is durable against
	// a machine crash (see docs/durability.md); it is always durable against
	// a crash of the calling process once committed, to the extent the
	// backend documents.
	Sync(ctx context.Context) error
	// Name returns a short description of the backend ("pebble:/path").
	Name() string
	// Close releases the store. Calls after Close return ErrClosed.
	Close() error
}

// PrefixEnd returns the smallest key greater than every key with the given
// prefix, or nil if there is none (prefix is all 0xff).
func PrefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// Notifier is an optional ability of a Store shared by several processes:
// a best-effort wake-up sent to every client of the store, used so that
// waiters (for example on a lock) need not poll. Stores used by one process
// only (memkv, pebble) implement it in memory.
//
// Delivery is best effort and may be coalesced: a subscriber may miss a
// notification (a dropped connection, a full buffer), so waiters must also
// re-check after a timeout. Notifications are never delivered before Notify
// is called; Notify should be called after the transaction whose effect it
// announces has committed.
type Notifier interface {
	// Notify sends payload on channel to every subscriber of every client,
	// including this one. channel is a short ASCII identifier; payload at
	// most 1000 bytes.
	Notify(ctx context.Context, channel, payload string) error
	// Subscribe returns a channel that receives the payloads sent on
	// channel from now on, and a function that ends the subscription. The
	// returned channel is buffered; when the buffer is full, notifications
	// are dropped for that subscriber.
	Subscribe(channel string) (<-chan string, func())
}

// LooseViewer is an optional ability of a Store on a server
// (kv/postgres): ViewLoose runs fn with reads that are each atomic but not
// one snapshot (no server transaction), which costs the server and the
// client less than View. For lookups that tolerate changes between their
// reads, as if each read were its own View.
type LooseViewer interface {
	ViewLoose(ctx context.Context, fn func(r Reader) error) error
}

// Exclusive is an optional ability of a Store whose transactions run
// concurrently (kv/postgres). UpdateExclusive is Update for a transaction
// that conflicts with many small concurrent ones (taking a snapshot
// conflicts with every writer), which would otherwise keep aborting it:
// before fn, it takes the write locks of keys, creating the missing ones
// with an empty value, and waits for the transactions that hold them
// rather than failing. fn's reads then see the latest committed state
// (the locked keys cannot change under it); concurrent transactions that
// write a locked key wait for it, then fail with a conflict and are
// retried.
type Exclusive interface {
	UpdateExclusive(ctx context.Context, keys [][]byte, fn func(tx Txn) error) error
}

// Starter is an optional ability of a Store on a server (kv/postgres):
// StartUpdate begins an update transaction before the function that will
// run in it is known, and reads the first pairs of ranges (as Prereader)
// in the same round trip as the BEGIN. Meta starts one for a lookup that
// a create is likely to follow: the lookup reads in it, and the create
// then finds everything it reads already there and needs one round trip,
// its commit, instead of two.
type Starter interface {
	StartUpdate(ctx context.Context, ranges []Range) (Started, error)
}

// Started is an update transaction begun by StartUpdate. Exactly one of
// Update and Abandon must be called, once; Reader is for use before that.
type Started interface {
	// Reader reads in the transaction's snapshot; the ranges StartUpdate
	// read cost no round trip.
	Reader() Reader
	// Update is Store.Update whose first attempt runs fn in this
	// transaction (seeing what Reader read, and its snapshot); an attempt
	// after a conflict runs in a new transaction, as Update's would.
	Update(ctx context.Context, fn func(tx Txn) error) error
	// Abandon ends the transaction without committing.
	Abandon()
}

// BlindWriter is an optional ability of a Store on a server
// (kv/postgres): FirstsAndWrite reads the first pairs of ranges (as
// Firsts) and makes writes in one transaction, in one round trip. The
// writes are blind: they cannot depend on what is read, and the reads see
// the store as it was before them. Meta records a file's open this way:
// it reads the attributes and writes the open-file hold at once.
//
// A conflict runs the transaction again, as Update would; so does a
// connection lost once it was sent, since its outcome cannot be learned:
// writes may therefore be made twice, and each must be one that can (set
// a key to a given value, delete a key, touch a prefix: Write.Touch).
type BlindWriter interface {
	FirstsAndWrite(ctx context.Context, ranges []Range, writes []Write) ([]Pair, error)
}

// FirstsAndWrite runs ranges' reads and writes through s's BlindWriter
// ability, or else as an Update that reads with Firsts, then writes.
// Every range must be bounded and not empty.
func FirstsAndWrite(ctx context.Context, s Store, ranges []Range, writes []Write) ([]Pair, error) {
	for _, r := range ranges {
		if r.End == nil || bytes.Compare(r.Start, r.End) >= 0 {
			return nil, fmt.Errorf("kv: FirstsAndWrite of range [%x, %x): it must be bounded and not empty", r.Start, r.End)
		}
	}
	if b, ok := s.(BlindWriter); ok {
		return b.FirstsAndWrite(ctx, ranges, writes)
	}
	var out []Pair
	err := s.Update(ctx, func(tx Txn) error {
		ps, err := Firsts(tx, ranges)
		if err != nil {
			return err
		}
		for _, w := range writes {
			switch {
			case w.Touch:
				var pairs []Pair
				if err := tx.Scan(w.Key, PrefixEnd(w.Key), false, func(k, v []byte) bool {
					pairs = append(pairs, Pair{Key: append([]byte(nil), k...), Value: append([]byte(nil), v...)})
					return true
				}); err != nil {
					return err
				}
				for _, p := range pairs {
					tx.Set(p.Key, p.Value)
				}
			case w.Delete:
				tx.Delete(w.Key)
			default:
				tx.Set(w.Key, w.Value)
			}
		}
		out = ps
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Guard is a condition of WriteIf: the first pair of Range, as Firsts reads
// it, must be Want (Want.Key nil: the range must be empty). Keys and values
// compare byte for byte, a nil value equal to an empty one; Want.Followed
// is ignored. Range must be bounded and not empty, and Range.Follow nil.
type Guard struct {
	Range Range
	Want  Pair
}

// holds reports whether p, the first pair of g.Range, is the one g wants.
func (g Guard) holds(p Pair) bool {
	if g.Want.Key == nil || p.Key == nil {
		return g.Want.Key == nil && p.Key == nil
	}
	return bytes.Equal(g.Want.Key, p.Key) && bytes.Equal(g.Want.Value, p.Value)
}

// showPair describes p for an error message.
func showPair(p Pair) string {
	if p.Key == nil {
		return "none"
	}
	return fmt.Sprintf("%x=%x", p.Key, p.Value)
}

// GuardedWriter is an optional ability of a Store on a server
// (kv/postgres): WriteIf checks that the first pairs of ranges are still
// what the caller read earlier and makes writes, in one transaction and
// one round trip. It is how a read-modify-write whose reads were made
// outside the transaction (a cache, a loose view) commits: if a guard does
// not hold, or the transaction conflicts with a concurrent one, nothing is
// written and WriteIf fails with an error wrapping ErrGuard, without
// trying again, since the writes were computed from reads that are now
// stale.
//
// The guards are checked in the transaction's snapshot, as Update's reads
// are, so the Txn contract applies: a concurrent change of a key that a
// guard reads but no write touches is not seen once the snapshot is taken.
// A guard whose wanted key is written, or a range the writes fill, is
// safe; otherwise materialize the conflict. A connection lost once the
// transaction was sent fails with an error wrapping ErrUnknownOutcome and
// is not sent again. Writes of one key take the last one's effect. The
// caller keeps ownership of guards and writes.
type GuardedWriter interface {
	WriteIf(ctx context.Context, guards []Guard, writes []Write) error
}

// WriteIf makes writes if every guard holds, through s's GuardedWriter
// ability, or else as an Update that reads the guards' ranges with Firsts
// and fails with ErrGuard, writing nothing, if one does not hold (Update
// may run it again after a conflict; it then checks the guards again).
// A guard whose range is unbounded, empty or has a Follow is refused with
// an error that does not wrap ErrGuard, and nothing is written. No guards
// make writes an atomic batch; no writes make WriteIf a check.
func WriteIf(ctx context.Context, s Store, guards []Guard, writes []Write) error {
	for _, g := range guards {
		r := g.Range
		if r.End == nil || bytes.Compare(r.Start, r.End) >= 0 || r.Follow != nil {
			return fmt.Errorf("kv: WriteIf guard on range [%x, %x): it must be bounded, not empty and without Follow", r.Start, r.End)
		}
	}
	if w, ok := s.(GuardedWriter); ok {
		return w.WriteIf(ctx, guards, writes)
	}
	ranges := make([]Range, len(guards))
	for i, g := range guards {
		ranges[i] = g.Range
	}
	return s.Update(ctx, func(tx Txn) error {
		ps, err := Firsts(tx, ranges)
		if err != nil {
			return err
		}
		for i, g := range guards {
			if !g.holds(ps[i]) {
				return fmt.Errorf("%w: the first pair of [%x, %x) is %s, not %s",
					ErrGuard, g.Range.Start, g.Range.End, showPair(ps[i]), showPair(g.Want))
			}
		}
		for _, w := range writes {
			if w.Delete {
				tx.Delete(w.Key)
			} else {
				tx.Set(w.Key, w.Value)
			}
		}
		return nil
	})
}

// UpdateExclusive runs fn through s's Exclusive ability, or else as an
// Update that first creates the missing keys with an empty value (stores
// without the ability run transactions one at a time and need no locks).
func UpdateExclusive(ctx context.Context, s Store, keys [][]byte, fn func(tx Txn) error) error {
	if x, ok := s.(Exclusive); ok {
		return x.UpdateExclusive(ctx, keys, fn)
	}
	return s.Update(ctx, func(tx Txn) error {
		for _, k := range keys {
			v, err := tx.Get(k)
			if err != nil {
				return err
			}
			if v == nil {
				tx.Set(k, []byte{})
			}
		}
		return fn(tx)
	})
}

// Range is a key range [Start, End); a nil End has no upper bound.
// Follow, if set, asks Firsts for a second read that depends on the first.
type Range struct {
	Start, End []byte
	Follow     *Follow
}

// Follow describes a read that depends on the value of a first one: with
// v the value of the first pair of a range and x = v[Offset:Offset+Length],
// it is the first pair of [Prefix+x+StartSuffix, Prefix+x+EndSuffix).
// (Meta follows a directory entry to its inode's attributes.) Nothing is
// read if v is shorter than Offset+Length.
type Follow struct {
	Offset, Length                 int
	Prefix, StartSuffix, EndSuffix []byte
}

// Bounds returns the range a follow reads after value v, or ok false.
func (f *Follow) Bounds(v []byte) (start, end []byte, ok bool) {
	if f.Offset < 0 || f.Length <= 0 || len(v) < f.Offset+f.Length {
		return nil, nil, false
	}
	x := v[f.Offset : f.Offset+f.Length]
	start = append(append(append([]byte{}, f.Prefix...), x...), f.StartSuffix...)
	end = append(append(append([]byte{}, f.Prefix...), x...), f.EndSuffix...)
	return start, end, true
}

// Pair is a key and its value; a nil Key means none. Followed is the
// result of the range's Follow (nil if the range had none).
type Pair struct {
	Key, Value []byte
	Followed   *Pair
}

// FirstReader is an optional ability of a Reader or Txn (kv/postgres):
// it reads the first pair of each of several ranges at once, in one round
// trip to a server, as Scan of each range stopped after one pair would.
type FirstReader interface {
	Firsts(ranges []Range) ([]Pair, error)
}

// Prereader is an optional ability of a Txn (kv/postgres): Preread reads
// the first pairs of ranges (as Firsts) in one round trip and keeps them,
// so that later Firsts calls of the transaction for the same ranges need
// no round trip while the transaction has written nothing in them. A
// group commit reads what all its members will read at once this way.
type Prereader interface {
	Preread(ranges []Range) error
}

// RangeKey identifies a Range (with its Follow) as a map key.
func RangeKey(r Range) string {
	var b []byte
	add := func(p []byte) {
		b = binary.AppendUvarint(b, uint64(len(p)))
		b = append(b, p...)
	}
	add(r.Start)
	if r.End == nil {
		b = append(b, 0)
	} else {
		b = append(b, 1)
		add(r.End)
	}
	if f := r.Follow; f != nil {
		b = append(b, 1)
		b = binary.AppendVarint(b, int64(f.Offset))
		b = binary.AppendVarint(b, int64(f.Length))
		add(f.Prefix)
		add(f.StartSuffix)
		add(f.EndSuffix)
	}
	return string(b)
}

// Firsts returns the first pair of each range, through r's FirstReader
// ability if it has one, else one Scan per range. The pairs are owned by
// the caller.
func Firsts(r Reader, ranges []Range) ([]Pair, error) {
	if f, ok := r.(FirstReader); ok {
		return f.Firsts(ranges)
	}
	return FirstsWith(ranges, func(start, end []byte) (Pair, error) { return first(r, start, end) })
}

// FirstsWith is Firsts through first, which returns the first pair of
// [start, end) (owned by the caller), for an engine whose FirstReader
// makes each read cheaper rather than all of them one round trip.
func FirstsWith(ranges []Range, first func(start, end []byte) (Pair, error)) ([]Pair, error) {
	out := make([]Pair, len(ranges))
	for i, rg := range ranges {
		p, err := first(rg.Start, rg.End)
		if err != nil {
			return nil, err
		}
		out[i] = p
		if rg.Follow != nil {
			f := Pair{}
			if start, end, ok := rg.Follow.Bounds(p.Value); ok && p.Key != nil {
				if f, err = first(start, end); err != nil {
					return nil, err
				}
			}
			out[i].Followed = &f
		}
	}
	return out, nil
}

func first(r Reader, start, end []byte) (Pair, error) {
	var p Pair
	err := r.Scan(start, end, false, func(k, v []byte) bool {
		p = Pair{Key: append([]byte{}, k...), Value: append([]byte{}, v...)}
		return false
	})
	return p, err
}

// Write is one key a committed transaction set (Delete false) or deleted.
type Write struct {
	Key, Value []byte
	Delete     bool
	// Touch (FirstsAndWrite only): Key is a prefix, Value unused; every
	// pair whose key starts with Key is written back with its own value
	// (as of the transaction's snapshot), so that the transaction
	// conflicts with any concurrent one that writes or deletes one of
	// those pairs, as if it had written them (a materialized conflict,
	// see Txn).
	Touch bool
}

// CommitObserver sees every transaction a Store commits, for caches of
// committed state kept beside the store. For each commit with writes, the
// store calls Committing just before the writes can become visible to any
// reader and Committed just after they are (ok false: the commit failed
// and they may or may not be visible). The two calls of one commit and
// those of all other commits are serialized, in commit order. The
// observer must not call the store, must not retain ws, and should return
// quickly: commits wait for it.
type CommitObserver interface {
	Committing(ws []Write)
	Committed(ws []Write, ok bool)
}

// Observable is an optional ability of a Store that is the only writer of
// its data (kv/pebble holds its directory's lock; kv/memkv lives in one
// process): Observe registers o for every commit from now on, and the
// returned function unregisters it. ok is false if the store cannot
// (a wrapper over a store without the ability); a Store on a server
// shared by other processes never can, since their commits would be
// missed.
type Observable interface {
	Observe(o CommitObserver) (stop func(), ok bool)
}

// Observers is a set of CommitObservers for backends to embed.
type Observers struct {
	mu   sync.Mutex
	list []*CommitObserver
}

// Add registers o; the returned function removes it.
func (s *Observers) Add(o CommitObserver) func() {
	p := &o
	s.mu.Lock()
	s.list = append(slices.Clone(s.list), p)
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		s.list = slices.DeleteFunc(slices.Clone(s.list), func(q *CommitObserver) bool { return q == p })
		s.mu.Unlock()
	}
}

// Active reports the observers registered now; nil if none.
func (s *Observers) Active() []*CommitObserver {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.list
}

// Committing calls Committing on each of list.
func Committing(list []*CommitObserver, ws []Write) {
	for _, o := range list {
		(*o).Committing(ws)
	}
}

// Committed calls Committed on each of list.
func Committed(list []*CommitObserver, ws []Write, ok bool) {
	for _, o := range list {
		(*o).Committed(ws, ok)
	}
}

// ReadNoter is an optional ability of a Txn of an Observable store: the
// transaction learned, from a cache of committed state kept by a
// CommitObserver, that p is the first pair of [start, end) (p.Key nil:
// none), without reading the store; NoteFirst makes the commit depend on
// that range as if the transaction had read it. Caller's duty: the cached
// state is the latest committed one at the time of the call.
type ReadNoter interface {
	NoteFirst(start, end []byte, p Pair)
}

// Toucher is an optional ability of a Store whose transactions all run in
// this process (kv/pebble, kv/memkv). Touch orders a change made outside
// the store (in the caller's memory) against the store's transactions, as
// if a transaction had written keys, without writing anything: every
// Update that read one of keys and commits after Touch returns runs its
// function again, and an Update that commits before Touch returns is
// visible to reads that start after it. Meta keeps the open-file holds of
// an embedded volume in memory this way (an open touches the hold key an
// unlink reads to decide whether to destroy the inode).
type Toucher interface {
	Touch(ctx context.Context, keys [][]byte) error
}

// CanTouch reports whether s has kv.Toucher; a wrapper that passes the
// ability on only when it wraps a store with it says so with a Touches
// method.
func CanTouch(s Store) bool {
	if w, ok := s.(interface{ Touches() bool }); ok {
		return w.Touches()
	}
	_, ok := s.(Toucher)
	return ok
}
