// Package faulty wraps an object.Store and injects faults for tests:
// errors, latency, lost acknowledgements and corrupted reads, chosen by
// rules matched on operation and key prefix. It is meant for tests; the
// daemon uses it for one thing only, the latency of cairn mount
// --object-latency (benchmarks and fault tests: a local store made to
// answer like a remote one).
//
// A Store without rules behaves exactly like the store it wraps. Random
// choices come from a source seeded by New, so a failing test can be
// replayed with the same seed (as long as the order of calls is the same).
//
//	s := faulty.New(mem.New(), 1)
//	f := s.Inject(faulty.Rule{Ops: faulty.OpGet, Prefix: "chunks/", Times: 2, Err: faulty.ErrInjected})
//	... the next two Gets below chunks/ fail ...
//	f.Remove()
package faulty

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cairnfs/cairn/internal/object"
)

var (
	_ object.Store  = (*Store)(nil)
	_ object.Syncer = (*Store)(nil)
	_ object.Spacer = (*Store)(nil)
	_ io.Closer     = (*Store)(nil)
)

// ErrInjected is a convenient error for Rule.Err.
var ErrInjected = errors.New("faulty: injected fault")

// Op is a set of operations, one bit per Store method.
type Op uint8

// Operations a rule can match.
const (
	OpPut Op = 1 << iota
	OpGet
	OpHead
	OpDelete
	OpList
	OpSync
	OpAll Op = 1<<iota - 1
)

func (o Op) String() string {
	var names []string
	for i, n := range []string{"Put", "Get", "Head", "Delete", "List", "Sync"} {
		if o&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	return strings.Join(names, "|")
}

// Rule says which calls to disturb and how. A call matches a rule when its
// operation is in Ops and its key starts with Prefix (for List: when the
// listed prefix and Prefix overlap, that is one starts with the other; Sync
// has no key and matches any Prefix). Among matching calls, the rule fires
// on those that pass the gates, in this order:
//
//   - After: the first After matching calls are let through;
//   - Probability: then each fires with this chance (0 means always);
//   - Times: the rule fires at most Times times (0 means no limit).
//
// So "fail the next 3 calls" is {Times: 3}, "fail every call after the
// 10th" is {After: 10}, "fail 1% of calls" is {Probability: 0.01}.
//
// A firing rule first sleeps Latency (or until the call's context ends),
// then acts: with Err set it returns Err without performing the operation,
// or, if Applied is set, performs it and then returns Err (a lost
// acknowledgement). With Corrupt set, a Get returns its data with one byte
// flipped. A rule with no Err and no Corrupt only adds latency.
//
// When several rules fire on one call, their latencies add up, data is
// corrupted if any asks it, and the first rule injected that has an Err
// supplies the error.
type Rule struct {
	Ops         Op // 0 means OpAll
	Prefix      string
	After       int
	Probability float64
	Times       int

	Latency time.Duration
	Err     error
	Applied bool
	Corrupt bool
}

// Fault is an injected rule. Its methods are safe for concurrent use.
type Fault struct {
	s       *Store
	rule    Rule
	matched int // guarded by s.mu
	fired   int // guarded by s.mu
}

// Fired returns how many times the rule has fired.
func (f *Fault) Fired() int {
	f.s.mu.Lock()
	defer f.s.mu.Unlock()
	return f.fired
}

// Matched returns how many calls have matched the rule, fired or not.
func (f *Fault) Matched() int {
	f.s.mu.Lock()
	defer f.s.mu.Unlock()
	return f.matched
}

// Remove stops the rule; calls in progress are not affected.
func (f *Fault) Remove() {
	f.s.mu.Lock()
	defer f.s.mu.Unlock()
	f.s.faults = slices.DeleteFunc(f.s.faults, func(g *Fault) bool { return g == f })
}

// Store is an object.Store that passes calls to an inner store, disturbed
// by the rules injected. It is safe for concurrent use.
//
// Store always implements object.Syncer. If the inner store does too, Sync
// is passed on; otherwise the inner Put is durable already and Sync only
// applies OpSync rules. Close, AllowsNesting and Space are passed on
// undisturbed.
type Store struct {
	inner object.Store

	mu     sync.Mutex
	rnd    *rand.Rand
	faults []*Fault
}

// New wraps inner; seed seeds the random choices (Probability, and which
// byte Corrupt flips).
func New(inner object.Store, seed uint64) *Store {
	return &Store{inner: inner, rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Inject adds a rule and returns its handle.
func (s *Store) Inject(r Rule) *Fault {
	if r.Ops == 0 {
		r.Ops = OpAll
	}
	f := &Fault{s: s, rule: r}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, f)
	return f
}

// Reset removes every rule.
func (s *Store) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
}

// Space implements object.Spacer: the inner store's, undisturbed.
func (s *Store) Space(ctx context.Context) (object.Space, error) {
	return object.SpaceOf(ctx, s.inner)
}

// Inner returns the wrapped store, for checking what really happened.
func (s *Store) Inner() object.Store { return s.inner }

// String implements object.Store.
func (s *Store) String() string { return "faulty:" + s.inner.String() }

// effect is what the firing rules do to one call.
type effect struct {
	latency time.Duration
	err     error
	applied bool
	corrupt bool
	flip    uint64 // random value choosing the byte Corrupt flips
}

func (s *Store) match(op Op, key string) effect {
	var e effect
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.faults {
		r := &f.rule
		if r.Ops&op == 0 {
			continue
		}
		if op == OpList {
			if !strings.HasPrefix(key, r.Prefix) && !strings.HasPrefix(r.Prefix, key) {
				continue
			}
		} else if op != OpSync && !strings.HasPrefix(key, r.Prefix) {
			continue
		}
		f.matched++
		if f.matched <= r.After {
			continue
		}
		if r.Probability > 0 && s.rnd.Float64() >= r.Probability {
			continue
		}
		if r.Times > 0 && f.fired >= r.Times {
			continue
		}
		f.fired++
		e.latency += r.Latency
		if r.Corrupt && op == OpGet {
			e.corrupt = true
			e.flip = s.rnd.Uint64()
		}
		if e.err == nil && r.Err != nil {
			e.err = fmt.Errorf("%s %q: %w", op, key, r.Err)
			e.applied = r.Applied
		}
	}
	return e
}

// before applies latency and reports whether the operation should run.
func (e *effect) before(ctx context.Context) error {
	if e.latency > 0 {
		t := time.NewTimer(e.latency)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if e.err != nil && !e.applied {
		return e.err
	}
	return nil
}

// after combines the operation's own error with the injected one.
func (e *effect) after(err error) error {
	if err != nil {
		return err
	}
	if e.applied {
		return e.err
	}
	return nil
}

// Put implements object.Store.
func (s *Store) Put(ctx context.Context, key string, data []byte) error {
	e := s.match(OpPut, key)
	if err := e.before(ctx); err != nil {
		return err
	}
	return e.after(s.inner.Put(ctx, key, data))
}

// Get implements object.Store.
func (s *Store) Get(ctx context.Context, key string, off, length int64) ([]byte, error) {
	e := s.match(OpGet, key)
	if err := e.before(ctx); err != nil {
		return nil, err
	}
	data, err := s.inner.Get(ctx, key, off, length)
	if err == nil && e.corrupt && len(data) > 0 {
		data[e.flip%uint64(len(data))] ^= 0xff // the caller owns data
	}
	if err = e.after(err); err != nil {
		return nil, err
	}
	return data, nil
}

// Head implements object.Store.
func (s *Store) Head(ctx context.Context, key string) (object.Info, error) {
	e := s.match(OpHead, key)
	if err := e.before(ctx); err != nil {
		return object.Info{}, err
	}
	info, err := s.inner.Head(ctx, key)
	if err = e.after(err); err != nil {
		return object.Info{}, err
	}
	return info, nil
}

// Delete implements object.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	e := s.match(OpDelete, key)
	if err := e.before(ctx); err != nil {
		return err
	}
	return e.after(s.inner.Delete(ctx, key))
}

// List implements object.Store. With Rule.Applied the listing runs (fn sees
// objects) and the error comes after it.
func (s *Store) List(ctx context.Context, prefix string, fn func(object.Info) bool) error {
	e := s.match(OpList, prefix)
	if err := e.before(ctx); err != nil {
		return err
	}
	return e.after(s.inner.List(ctx, prefix, fn))
}

// Sync implements object.Syncer.
func (s *Store) Sync(ctx context.Context) error {
	e := s.match(OpSync, "")
	if err := e.before(ctx); err != nil {
		return err
	}
	var err error
	if sy, ok := s.inner.(object.Syncer); ok {
		err = sy.Sync(ctx)
	}
	return e.after(err)
}

// Close closes the inner store if it is an io.Closer; no rule applies.
func (s *Store) Close() error {
	if c, ok := s.inner.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// AllowsNesting forwards the inner store's answer (see object.Store).
func (s *Store) AllowsNesting() bool {
	n, ok := s.inner.(interface{ AllowsNesting() bool })
	return ok && n.AllowsNesting()
}
