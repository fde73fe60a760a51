package counted_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/kv/counted"
	"github.com/cairnfs/cairn/internal/kv/kvtest"
	"github.com/cairnfs/cairn/internal/kv/memkv"
)

// The wrapper is a store like any other.
func TestConformance(t *testing.T) {
	kvtest.Run(t, func(t *testing.T) kv.Store { return counted.New(memkv.New()) })
}

// conflicting is memkv whose commits fail with kv.ErrConflict while
// fail is positive, retried as a server backend retries them
// (kv.RunWithRetry): fn runs to the end, the commit is refused and
// nothing is written, and fn runs again.
type conflicting struct {
	*memkv.Store
	mu   sync.Mutex
	fail int
}

func (c *conflicting) Update(ctx context.Context, fn func(tx kv.Txn) error) error {
	return kv.RunWithRetry(ctx, func() error {
		return c.Store.Update(ctx, func(tx kv.Txn) error {
			if err := fn(tx); err != nil {
				return err
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.fail > 0 {
				c.fail--
				return kv.ErrConflict
			}
			return nil
		})
	})
}

func (c *conflicting) setFail(n int) {
	c.mu.Lock()
	c.fail = n
	c.mu.Unlock()
}

// want is what one kind's counters should be.
type want struct {
	ok, aborted, conflict, failed, retries int64
}

func check(t *testing.T, s *counted.Store, kind counted.Kind, w want) {
	t.Helper()
	ks := s.Stats().Kinds[kind.String()]
	got := want{ks.Outcomes["ok"], ks.Outcomes["aborted"], ks.Outcomes["conflict"], ks.Outcomes["failed"], ks.Retries}
	if got != w {
		t.Errorf("%s: got %+v, want %+v", kind, got, w)
	}
	if n := w.ok + w.aborted + w.conflict + w.failed; ks.Transactions != n || ks.Latency.Count != n {
		t.Errorf("%s: %d transactions, %d latencies, want %d", kind, ks.Transactions, ks.Latency.Count, n)
	}
}

func TestCountsCommitsRetriesAndFailures(t *testing.T) {
	// Give up after exactly kv.MaxRetries retries, however fast they are.
	old := kv.MinRetryTime
	kv.MinRetryTime = 0
	t.Cleanup(func() { kv.MinRetryTime = old })
	ctx := context.Background()
	inner := &conflicting{Store: memkv.New()}
	s := counted.New(inner)
	set := func(k, v string) error {
		return s.Update(ctx, func(tx kv.Txn) error { tx.Set([]byte(k), []byte(v)); return nil })
	}

	// Two plain commits.
	for _, k := range []string{"a", "b"} {
		if err := set(k, "1"); err != nil {
			t.Fatal(err)
		}
	}
	check(t, s, counted.Update, want{ok: 2})

	// A commit that conflicts twice, then goes through: one transaction,
	// two retries, its function run three times.
	inner.setFail(2)
	runs := 0
	err := s.Update(ctx, func(tx kv.Txn) error { runs++; tx.Set([]byte("c"), []byte("1")); return nil })
	if err != nil || runs != 3 {
		t.Fatalf("update after 2 conflicts: %v, fn ran %d times, want 3", err, runs)
	}
	check(t, s, counted.Update, want{ok: 3, retries: 2})

	// One that keeps conflicting until the backend gives up.
	inner.setFail(kv.MaxRetries + 1)
	if err := set("d", "1"); !errors.Is(err, kv.ErrConflict) {
		t.Fatalf("update conflicting %d times: %v, want ErrConflict", kv.MaxRetries+1, err)
	}
	check(t, s, counted.Update, want{ok: 3, conflict: 1, retries: 2 + kv.MaxRetries})

	// The caller's refusal aborts; it is not an engine failure.
	refused := errors.New("name exists")
	if err := s.Update(ctx, func(tx kv.Txn) error { return refused }); err != refused {
		t.Fatalf("aborted update: %v", err)
	}
	check(t, s, counted.Update, want{ok: 3, aborted: 1, conflict: 1, retries: 2 + kv.MaxRetries})

	// Views, loose views (memkv has no such ability: they run, and
	// count, as views) and exclusive updates.
	var v []byte
	if err := s.View(ctx, func(r kv.Reader) (err error) { v, err = r.Get([]byte("c")); return err }); err != nil || string(v) != "1" {
		t.Fatalf("view: %q %v", v, err)
	}
	if err := s.ViewLoose(ctx, func(r kv.Reader) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.View(ctx, func(r kv.Reader) error { return refused }); err != refused {
		t.Fatal(err)
	}
	check(t, s, counted.View, want{ok: 2, aborted: 1})
	check(t, s, counted.LooseView, want{})
	if err := kv.UpdateExclusive(ctx, s, [][]byte{[]byte("x")}, func(tx kv.Txn) error { return nil }); err != nil {
		t.Fatal(err)
	}
	check(t, s, counted.Exclusive, want{ok: 1})
	check(t, s, counted.Update, want{ok: 3, aborted: 1, conflict: 1, retries: 2 + kv.MaxRetries})

	tot := s.Stats().Total()
	if tot.Transactions != 9 || tot.Retries != 2+kv.MaxRetries || tot.Latency.Count != 9 || tot.Outcomes["ok"] != 6 {
		t.Errorf("total: %+v", tot)
	}

	// A closed engine fails.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := set("e", "1"); !errors.Is(err, kv.ErrClosed) {
		t.Fatalf("update after close: %v", err)
	}
	if err := s.View(ctx, func(r kv.Reader) error { return nil }); !errors.Is(err, kv.ErrClosed) {
		t.Fatalf("view after close: %v", err)
	}
	check(t, s, counted.Update, want{ok: 3, aborted: 1, conflict: 1, failed: 1, retries: 2 + kv.MaxRetries})
	check(t, s, counted.View, want{ok: 2, aborted: 1, failed: 1})
}

// The wrapper passes the store's notifications on.
func TestNotifierForwarded(t *testing.T) {
	s := counted.New(memkv.New())
	defer s.Close()
	c, cancel := s.Subscribe("ch")
	defer cancel()
	if err := s.Notify(context.Background(), "ch", "hello"); err != nil {
		t.Fatal(err)
	}
	if got := <-c; got != "hello" {
		t.Fatalf("got %q", got)
	}
}

// starting is memkv with kv.Starter: a started update is an Update begun
// at Update (memkv runs one transaction at a time).
type starting struct{ *memkv.Store }

type startedMem struct {
	s    *memkv.Store
	done bool
}

func (s starting) StartUpdate(ctx context.Context, ranges []kv.Range) (kv.Started, error) {
	return &startedMem{s: s.Store}, nil
}

func (st *startedMem) Reader() kv.Reader { return nil }
func (st *startedMem) Abandon()          { st.done = true }
func (st *startedMem) Update(ctx context.Context, fn func(tx kv.Txn) error) error {
	st.done = true
	return st.s.Update(ctx, fn)
}

// StartUpdate is passed on, and the started Update counts as an Update;
// a store without the ability says so with errors.ErrUnsupported.
func TestStartUpdate(t *testing.T) {
	ctx := context.Background()
	if _, err := counted.New(memkv.New()).StartUpdate(ctx, nil); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("StartUpdate on memkv: %v, want errors.ErrUnsupported", err)
	}
	s := counted.New(starting{memkv.New()})
	st, err := s.StartUpdate(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Update(ctx, func(tx kv.Txn) error { tx.Set([]byte("k"), []byte("v")); return nil }); err != nil {
		t.Fatal(err)
	}
	st, err = s.StartUpdate(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	st.Abandon()
	u := s.Stats().Kinds[counted.Update.String()]
	if u.Transactions != 1 || u.Outcomes["ok"] != 1 {
		t.Fatalf("update stats after one started update and one abandoned: %+v", u)
	}
}

// kv.Toucher passes through only from a store that has it.
func TestTouchForwarded(t *testing.T) {
	ctx := context.Background()
	with := counted.New(memkv.New())
	if !kv.CanTouch(with) {
		t.Fatal("CanTouch false over memkv")
	}
	if err := with.Touch(ctx, [][]byte{[]byte("k")}); err != nil {
		t.Fatal(err)
	}
	without := counted.New(struct{ kv.Store }{memkv.New()})
	if kv.CanTouch(without) {
		t.Fatal("CanTouch true over a store without Touch")
	}
	if err := without.Touch(ctx, nil); err == nil {
		t.Fatal("Touch over a store without it succeeded")
	}
}
