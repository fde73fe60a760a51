// Package counted wraps a kv.Store in a decorator that counts its
// transactions by kind and outcome, the times their function was re-run
// after a conflict, and their latency, so that every engine (memkv,
// pebble, postgres) is measured the same way without touching any of
// them. It keeps no global state: the composition root installs it and
// exports what Stats returns.
package counted

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/metrics"
)

// Kind is a kind of transaction.
type Kind int

// Transaction kinds. LooseView counts only the ViewLoose calls that the
// wrapped store serves as loose views; on a store without the ability
// they run, and count, as Views.
const (
	View Kind = iota
	LooseView
	Update
	Exclusive // kv.UpdateExclusive
	numKinds
)

var kindNames = [numKinds]string{"view", "loose_view", "update", "exclusive"}

func (k Kind) String() string { return kindNames[k] }

// Kinds lists every kind, in order.
func Kinds() []Kind { return []Kind{View, LooseView, Update, Exclusive} }

// Outcome is how a transaction ended.
type Outcome int

// Outcomes. Aborted is the caller's own refusal (its function returned the
// error that ended the transaction: a name that exists, a missing file),
// not a fault of the engine. Conflict means the engine gave up after its
// retries (kv.ErrConflict); Failed is any other error of the engine or the
// context (closed store, I/O, unknown outcome, cancellation).
const (
	OK Outcome = iota // committed (updates) or read (views)
	Aborted
	Conflict
	Failed
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"ok", "aborted", "conflict", "failed"}

func (o Outcome) String() string { return outcomeNames[o] }

// Outcomes lists every outcome, in order.
func Outcomes() []Outcome { return []Outcome{OK, Aborted, Conflict, Failed} }

// Store is a kv.Store that counts what goes through it. It forwards the
// optional abilities of the store it wraps: kv.LooseViewer, kv.Exclusive,
// kv.BlindWriter and kv.GuardedWriter (through kv.UpdateExclusive,
// kv.FirstsAndWrite and kv.WriteIf, so a store without them runs the same
// transactions it would unwrapped) and kv.Notifier (a store without it
// gets an in-process kv.Hub, as memkv and pebble have). The transactions
// handed to callers are the wrapped store's own, with their abilities
// (kv.FirstReader). It is safe for concurrent use.
type Store struct {
	inner kv.Store
	hub   kv.Hub // Notifier when inner has none
	kinds [numKinds]kindStats
	sync  metrics.Histogram
}

type kindStats struct {
	outcomes [numOutcomes]atomic.Int64
	retries  atomic.Int64
	latency  metrics.Histogram
}

var (
	_ kv.Store         = (*Store)(nil)
	_ kv.LooseViewer   = (*Store)(nil)
	_ kv.Exclusive     = (*Store)(nil)
	_ kv.Starter       = (*Store)(nil)
	_ kv.BlindWriter   = (*Store)(nil)
	_ kv.GuardedWriter = (*Store)(nil)
	_ kv.Notifier      = (*Store)(nil)
	_ kv.Observable    = (*Store)(nil)
)

// New wraps inner.
func New(inner kv.Store) *Store { return &Store{inner: inner} }

// Observe passes kv.Observable on from the wrapped store.
func (s *Store) Observe(o kv.CommitObserver) (func(), bool) {
	if ob, ok := s.inner.(kv.Observable); ok {
		return ob.Observe(o)
	}
	return nil, false
}

// Touch passes kv.Toucher on from the wrapped store; an error without it
// (see Touches).
func (s *Store) Touch(ctx context.Context, keys [][]byte) error {
	if t, ok := s.inner.(kv.Toucher); ok {
		return t.Touch(ctx, keys)
	}
	return fmt.Errorf("%s: the store cannot order changes made outside it (kv.Toucher)", s.inner.Name())
}

// Touches reports whether the wrapped store has kv.Toucher (kv.CanTouch).
func (s *Store) Touches() bool {
	_, ok := s.inner.(kv.Toucher)
	return ok
}

// Profile implements kv.Profiler: the wrapped store's profile (every
// ability is passed on).
func (s *Store) Profile() kv.Profile { return kv.ProfileOf(s.inner) }

var _ kv.Profiler = (*Store)(nil)

// Unwrap returns the wrapped store.
func (s *Store) Unwrap() kv.Store { return s.inner }

// attempts counts the runs of a transaction's function and remembers what
// the last one returned.
type attempts struct {
	n       int64
	lastErr error
}

// run calls fn once, counting it. A backend may call it again after a
// conflict, never concurrently.
func (a *attempts) run(fn func() error) error {
	a.n++
	a.lastErr = fn()
	return a.lastErr
}

func (s *Store) done(k Kind, start time.Time, a *attempts, err error) {
	ks := &s.kinds[k]
	ks.latency.Since(start)
	if a.n > 1 {
		ks.retries.Add(a.n - 1)
	}
	ks.outcomes[outcome(a, err)].Add(1)
}

func outcome(a *attempts, err error) Outcome {
	switch {
	case err == nil:
		return OK
	case errors.Is(err, kv.ErrConflict):
		return Conflict
	case a.lastErr != nil && errors.Is(err, a.lastErr) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) &&
		!errors.Is(err, kv.ErrClosed) && !errors.Is(err, kv.ErrUnknownOutcome):
		return Aborted
	default:
		return Failed
	}
}

// Update implements kv.Store. Each run of fn after the first counts as a
// retry.
func (s *Store) Update(ctx context.Context, fn func(tx kv.Txn) error) error {
	start := time.Now()
	var a attempts
	err := s.inner.Update(ctx, func(tx kv.Txn) error { return a.run(func() error { return fn(tx) }) })
	s.done(Update, start, &a, err)
	return err
}

// UpdateExclusive implements kv.Exclusive through kv.UpdateExclusive on
// the wrapped store.
func (s *Store) UpdateExclusive(ctx context.Context, keys [][]byte, fn func(tx kv.Txn) error) error {
	start := time.Now()
	var a attempts
	err := kv.UpdateExclusive(ctx, s.inner, keys, func(tx kv.Txn) error { return a.run(func() error { return fn(tx) }) })
	s.done(Exclusive, start, &a, err)
	return err
}

// StartUpdate implements kv.Starter through the wrapped store's ability;
// an error wrapping errors.ErrUnsupported if it has none. The Started's
// Update counts as an Update.
func (s *Store) StartUpdate(ctx context.Context, ranges []kv.Range) (kv.Started, error) {
	st, ok := s.inner.(kv.Starter)
	if !ok {
		return nil, fmt.Errorf("%s: starting an update ahead: %w", s.inner.Name(), errors.ErrUnsupported)
	}
	inner, err := st.StartUpdate(ctx, ranges)
	if err != nil {
		return nil, err
	}
	return &started{Started: inner, s: s}, nil
}

type started struct {
	kv.Started
	s *Store
}

func (st *started) Update(ctx context.Context, fn func(tx kv.Txn) error) error {
	start := time.Now()
	var a attempts
	err := st.Started.Update(ctx, func(tx kv.Txn) error { return a.run(func() error { return fn(tx) }) })
	st.s.done(Update, start, &a, err)
	return err
}

// FirstsAndWrite implements kv.BlindWriter through kv.FirstsAndWrite on
// the wrapped store, and counts as an update (the wrapped store's
// retries, if any, are not seen).
func (s *Store) FirstsAndWrite(ctx context.Context, ranges []kv.Range, writes []kv.Write) ([]kv.Pair, error) {
	start := time.Now()
	a := attempts{n: 1}
	ps, err := kv.FirstsAndWrite(ctx, s.inner, ranges, writes)
	s.done(Update, start, &a, err)
	return ps, err
}

// WriteIf implements kv.GuardedWriter through kv.WriteIf on the wrapped
// store, and counts as an update (the wrapped store's retries, if any,
// are not seen). A guard that does not hold is the caller's refusal: it
// counts as aborted.
func (s *Store) WriteIf(ctx context.Context, guards []kv.Guard, writes []kv.Write) error {
	start := time.Now()
	a := attempts{n: 1, lastErr: kv.ErrGuard}
	err := kv.WriteIf(ctx, s.inner, guards, writes)
	s.done(Update, start, &a, err)
	return err
}

// View implements kv.Store.
func (s *Store) View(ctx context.Context, fn func(r kv.Reader) error) error {
	start := time.Now()
	var a attempts
	err := s.inner.View(ctx, func(r kv.Reader) error { return a.run(func() error { return fn(r) }) })
	s.done(View, start, &a, err)
	return err
}

// ViewLoose implements kv.LooseViewer: the wrapped store's ViewLoose, or
// its View if it has no such ability.
func (s *Store) ViewLoose(ctx context.Context, fn func(r kv.Reader) error) error {
	lv, ok := s.inner.(kv.LooseViewer)
	if !ok {
		return s.View(ctx, fn)
	}
	start := time.Now()
	var a attempts
	err := lv.ViewLoose(ctx, func(r kv.Reader) error { return a.run(func() error { return fn(r) }) })
	s.done(LooseView, start, &a, err)
	return err
}

// Sync implements kv.Store; its latency is counted apart from the
// transactions'.
func (s *Store) Sync(ctx context.Context) error {
	start := time.Now()
	err := s.inner.Sync(ctx)
	s.sync.Since(start)
	return err
}

// Name implements kv.Store.
func (s *Store) Name() string { return s.inner.Name() }

// Close implements kv.Store.
func (s *Store) Close() error { return s.inner.Close() }

// Notify implements kv.Notifier.
func (s *Store) Notify(ctx context.Context, channel, payload string) error {
	if n, ok := s.inner.(kv.Notifier); ok {
		return n.Notify(ctx, channel, payload)
	}
	return s.hub.Notify(ctx, channel, payload)
}

// Subscribe implements kv.Notifier.
func (s *Store) Subscribe(channel string) (<-chan string, func()) {
	if n, ok := s.inner.(kv.Notifier); ok {
		return n.Subscribe(channel)
	}
	return s.hub.Subscribe(channel)
}

// KindStats are the counters of one kind of transaction. Transactions
// counts every call, whatever its outcome; Retries the runs of the
// transaction's function after its first: conflicts the engine retried
// (and, on a server, connections lost before the commit was sent).
// Latency is of whole calls, retries included.
type KindStats struct {
	Transactions int64                     `json:"transactions"`
	Outcomes     map[string]int64          `json:"outcomes"` // by Outcome.String()
	Retries      int64                     `json:"retries"`
	Latency      metrics.HistogramSnapshot `json:"latency"`
}

// Stats are the counters of a Store.
type Stats struct {
	Kinds map[string]KindStats      `json:"kinds"` // by Kind.String()
	Sync  metrics.HistogramSnapshot `json:"sync"`  // Sync calls
}

// Total returns the transactions, retries and latency of every kind
// together.
func (st Stats) Total() KindStats {
	t := KindStats{Outcomes: map[string]int64{}}
	for _, ks := range st.Kinds {
		t.Transactions += ks.Transactions
		t.Retries += ks.Retries
		for o, n := range ks.Outcomes {
			t.Outcomes[o] += n
		}
		t.Latency = t.Latency.Add(ks.Latency)
	}
	return t
}

// Stats returns the counters now. Each is read atomically, not all at
// one instant.
func (s *Store) Stats() Stats {
	st := Stats{Kinds: make(map[string]KindStats, numKinds), Sync: s.sync.Snapshot()}
	for _, k := range Kinds() {
		ks := &s.kinds[k]
		out := KindStats{Outcomes: make(map[string]int64, numOutcomes), Retries: ks.retries.Load(), Latency: ks.latency.Snapshot()}
		for _, o := range Outcomes() {
			n := ks.outcomes[o].Load()
			out.Outcomes[o.String()] = n
			out.Transactions += n
		}
		st.Kinds[k.String()] = out
	}
	return st
}
