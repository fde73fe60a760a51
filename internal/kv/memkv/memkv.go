// Package memkv is an in-memory kv.Store for tests and tools.
//
// It owns nothing but an ordered map of keys to values; it must not learn
// anything about file systems. Update transactions run one at a time (a
// single writer), so they are trivially serializable and never conflict;
// View transactions read a copy-on-write clone of the tree taken when they
// start, so they never block writers and never see later commits.
//
// Scan hands fn keys and values in scratch buffers that are overwritten on
// the next call, so code that keeps a Scan slice past its callback breaks
// here as it would on a real backend. Nothing is durable: Sync is a no-op.
package memkv

import (
	"context"
	"strings"
	"sync"

	"github.com/RaduBerinde/btreemap"

	"github.com/cairnfs/cairn/internal/kv"
)

// degree of the B-tree; 32 keeps nodes around a cache line of pointers.
const degree = 32

type tree = btreemap.BTreeMap[string, []byte]

// Store is an in-memory kv.Store. The zero value is not usable; call New.
type Store struct {
	kv.Hub // Notifier within this process

	// writer admits one Update at a time; a channel so waiting for it
	// honours the context.
	writer chan struct{}

	observe kv.Observers

	mu     sync.Mutex // guards the fields below and every Clone of tree
	tree   *tree      // committed state; values are never modified in place
	closed bool
}

var (
	_ kv.Store      = (*Store)(nil)
	_ kv.Notifier   = (*Store)(nil)
	_ kv.Observable = (*Store)(nil)
	_ kv.Toucher    = (*Store)(nil)
)

// Observe implements kv.Observable: the store lives in this process.
func (s *Store) Observe(o kv.CommitObserver) (func(), bool) { return s.observe.Add(o), true }

// New returns an empty Store.
func New() *Store {
	return &Store{
		writer: make(chan struct{}, 1),
		tree:   btreemap.New[string, []byte](degree, strings.Compare),
	}
}

// snapshot returns a private clone of the committed tree, or ErrClosed.
func (s *Store) snapshot() (*tree, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, kv.ErrClosed
	}
	return s.tree.Clone(), nil
}

// Update implements kv.Store. Transactions never conflict, so fn runs once.
func (s *Store) Update(ctx context.Context, fn func(tx kv.Txn) error) error {
	if err := s.acquire(ctx); err != nil {
		return err
	}
	defer func() { <-s.writer }()

	base, err := s.snapshot()
	if err != nil {
		return err
	}
	tx := &txn{reader: reader{t: base}, writes: btreemap.New[string, write](degree, strings.Compare)}
	if err := fn(tx); err != nil {
		return err
	}
	if tx.writes.Len() == 0 {
		return nil
	}
	// base is private to this transaction and no other writer can run, so
	// applying the writes to it and publishing it is an atomic commit.
	obs := s.observe.Active()
	var ws []kv.Write
	for k, w := range tx.writes.Ascend(btreemap.Min[string](), btreemap.Max[string]()) {
		if w.deleted {
			base.Delete(k)
		} else {
			base.ReplaceOrInsert(k, w.value)
		}
		if obs != nil {
			ws = append(ws, kv.Write{Key: []byte(k), Value: w.value, Delete: w.deleted})
		}
	}
	kv.Committing(obs, ws)
	s.mu.Lock()
	closed := s.closed
	if !closed {
		s.tree = base
	}
	s.mu.Unlock()
	kv.Committed(obs, ws, !closed)
	if closed {
		return kv.ErrClosed
	}
	return nil
}

// acquire takes the writer slot, honouring ctx.
func (s *Store) acquire(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case s.writer <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Touch implements kv.Toucher. Updates run one at a time, each on the
// state as of its start, so waiting for the one running is enough.
func (s *Store) Touch(ctx context.Context, keys [][]byte) error {
	if err := s.acquire(ctx); err != nil {
		return err
	}
	<-s.writer
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return kv.ErrClosed
	}
	return nil
}

// View implements kv.Store.
func (s *Store) View(ctx context.Context, fn func(r kv.Reader) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	snap, err := s.snapshot()
	if err != nil {
		return err
	}
	return fn(&reader{t: snap})
}

// Sync implements kv.Store; there is nothing to make durable.
func (s *Store) Sync(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return kv.ErrClosed
	}
	return ctx.Err()
}

// Name implements kv.Store.
func (s *Store) Name() string { return "memkv" }

// Close implements kv.Store. Transactions already running finish against
// their own snapshot; an Update that has not yet published its writes
// returns ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return kv.ErrClosed
	}
	s.closed = true
	s.tree = nil
	return nil
}

// reader reads a private clone of the tree.
type reader struct {
	t *tree
	// scratch buffers handed to Scan callbacks.
	kbuf, vbuf []byte
}

func (r *reader) Get(key []byte) ([]byte, error) {
	_, v, ok := r.t.Get(string(key))
	if !ok {
		return nil, nil
	}
	return append([]byte{}, v...), nil
}

func (r *reader) Scan(start, end []byte, reverse bool, fn func(key, value []byte) bool) error {
	scanTree(r.t, start, end, reverse, func(k string, v []byte) bool {
		return r.emit(k, v, fn)
	})
	return nil
}

// emit copies k and v into the scratch buffers and calls fn.
func (r *reader) emit(k string, v []byte, fn func(key, value []byte) bool) bool {
	r.kbuf = append(r.kbuf[:0], k...)
	r.vbuf = append(r.vbuf[:0], v...)
	return fn(r.kbuf, r.vbuf)
}

// scanTree visits the entries of t in [start, end) in the given direction.
func scanTree[V any](t *btreemap.BTreeMap[string, V], start, end []byte, reverse bool, fn func(string, V) bool) {
	lo := btreemap.Min[string]()
	if start != nil {
		lo = btreemap.GE(string(start))
	}
	hi := btreemap.Max[string]()
	if end != nil {
		if string(end) <= string(start) {
			return
		}
		hi = btreemap.LT(string(end))
	}
	if reverse {
		t.DescendFunc(hi, lo, fn)
	} else {
		t.AscendFunc(lo, hi, fn)
	}
}

// write is a buffered write of a transaction.
type write struct {
	value   []byte
	deleted bool
}

// txn reads the base snapshot through its own buffered writes.
type txn struct {
	reader
	writes *btreemap.BTreeMap[string, write]
}

func (tx *txn) Set(key, value []byte) {
	tx.writes.ReplaceOrInsert(string(key), write{value: append([]byte{}, value...)})
}

// NoteFirst implements kv.ReadNoter: transactions run one at a time, so
// what the cache saw stays true until the commit; nothing to record.
func (tx *txn) NoteFirst(_, _ []byte, _ kv.Pair) {}

func (tx *txn) Delete(key []byte) {
	tx.writes.ReplaceOrInsert(string(key), write{deleted: true})
}

func (tx *txn) Get(key []byte) ([]byte, error) {
	if _, w, ok := tx.writes.Get(string(key)); ok {
		if w.deleted {
			return nil, nil
		}
		return append([]byte{}, w.value...), nil
	}
	return tx.reader.Get(key)
}

// Scan merges the base snapshot with the buffered writes: a buffered write
// shadows the base entry with the same key, and a buffered delete hides it.
func (tx *txn) Scan(start, end []byte, reverse bool, fn func(key, value []byte) bool) error {
	type entry struct {
		key string
		write
	}
	var pending []entry
	scanTree(tx.writes, start, end, reverse, func(k string, w write) bool {
		pending = append(pending, entry{k, w})
		return true
	})
	// before reports whether a comes before b in scan order.
	before := func(a, b string) bool {
		if reverse {
			return a > b
		}
		return a < b
	}
	stopped := false
	emit := func(k string, v []byte) bool {
		if !tx.emit(k, v, fn) {
			stopped = true
		}
		return !stopped
	}
	scanTree(tx.t, start, end, reverse, func(k string, v []byte) bool {
		for len(pending) > 0 && before(pending[0].key, k) {
			e := pending[0]
			pending = pending[1:]
			if !e.deleted && !emit(e.key, e.value) {
				return false
			}
		}
		if len(pending) > 0 && pending[0].key == k {
			e := pending[0]
			pending = pending[1:]
			if e.deleted {
				return true
			}
			v = e.value
		}
		return emit(k, v)
	})
	for _, e := range pending {
		if stopped {
			break
		}
		if !e.deleted {
			emit(e.key, e.value)
		}
	}
	return nil
}

var _ kv.Profiler = (*Store)(nil)

// Profile implements kv.Profiler: one process's memory, the only writer.
func (s *Store) Profile() kv.Profile {
	return kv.Profile{Engine: "memkv", SingleWriter: true, Observable: true, Toucher: true, Notifier: true}
}
