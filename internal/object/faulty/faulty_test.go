package faulty_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/object/faulty"
	"github.com/cairnfs/cairn/internal/object/local"
	"github.com/cairnfs/cairn/internal/object/mem"
	"github.com/cairnfs/cairn/internal/object/objtest"
)

func TestConformance(t *testing.T) {
	t.Run("mem", func(t *testing.T) {
		objtest.Run(t, func(*testing.T) object.Store { return faulty.New(mem.New(), 1) })
	})
	t.Run("local", func(t *testing.T) {
		objtest.Run(t, func(t *testing.T) object.Store {
			s, err := local.Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return faulty.New(s, 1)
		})
	})
}

func newStore(t *testing.T) *faulty.Store {
	s := faulty.New(mem.New(), 42)
	for _, k := range []string{"a/1", "a/2", "b/1"} {
		if err := s.Put(t.Context(), k, []byte("data-"+k)); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func getErr(s object.Store, key string) error {
	_, err := s.Get(context.Background(), key, 0, -1)
	return err
}

func TestNextN(t *testing.T) {
	s := newStore(t)
	f := s.Inject(faulty.Rule{Ops: faulty.OpGet, Prefix: "a/", Times: 2, Err: faulty.ErrInjected})
	if err := getErr(s, "b/1"); err != nil {
		t.Fatalf("Get outside the prefix: %v", err)
	}
	if _, err := s.Head(t.Context(), "a/1"); err != nil {
		t.Fatalf("Head is not in Ops: %v", err)
	}
	for i := range 2 {
		if err := getErr(s, "a/1"); !errors.Is(err, faulty.ErrInjected) {
			t.Fatalf("Get %d: err = %v, want injected", i, err)
		}
	}
	if err := getErr(s, "a/1"); err != nil {
		t.Fatalf("Get after Times ran out: %v", err)
	}
	if f.Fired() != 2 || f.Matched() != 3 {
		t.Fatalf("Fired, Matched = %d, %d; want 2, 3", f.Fired(), f.Matched())
	}
}

func TestAfterN(t *testing.T) {
	s := newStore(t)
	s.Inject(faulty.Rule{Ops: faulty.OpPut | faulty.OpDelete, After: 3, Err: faulty.ErrInjected})
	ctx := t.Context()
	for i, k := range []string{"c/1", "c/2", "c/3"} {
		if err := s.Put(ctx, k, nil); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if err := s.Delete(ctx, "c/1"); !errors.Is(err, faulty.ErrInjected) {
		t.Fatalf("4th call: err = %v, want injected", err)
	}
	if err := s.Put(ctx, "c/4", nil); !errors.Is(err, faulty.ErrInjected) {
		t.Fatalf("5th call: err = %v, want injected", err)
	}
	if _, err := s.Inner().Head(ctx, "c/4"); !errors.Is(err, object.ErrNotFound) {
		t.Fatalf("failed Put was performed: %v", err)
	}
	if _, err := s.Inner().Head(ctx, "c/1"); err != nil {
		t.Fatalf("failed Delete was performed: %v", err)
	}
}

func TestApplied(t *testing.T) {
	s := newStore(t)
	s.Inject(faulty.Rule{Ops: faulty.OpPut, Times: 1, Err: faulty.ErrInjected, Applied: true})
	if err := s.Put(t.Context(), "x", []byte("v")); !errors.Is(err, faulty.ErrInjected) {
		t.Fatalf("err = %v, want injected", err)
	}
	if got, err := object.ReadAll(t.Context(), s, "x"); err != nil || string(got) != "v" {
		t.Fatalf("applied Put not performed: %q, %v", got, err)
	}
}

func TestProbability(t *testing.T) {
	count := func(seed uint64) int {
		s := faulty.New(mem.New(), seed)
		s.Put(t.Context(), "k", []byte("v"))
		s.Inject(faulty.Rule{Ops: faulty.OpGet, Probability: 0.3, Err: faulty.ErrInjected})
		n := 0
		for range 1000 {
			if getErr(s, "k") != nil {
				n++
			}
		}
		return n
	}
	n := count(7)
	if n < 220 || n > 380 {
		t.Fatalf("%d of 1000 failed at probability 0.3", n)
	}
	if m := count(7); m != n {
		t.Fatalf("same seed gave %d then %d failures", n, m)
	}
}

func TestCorrupt(t *testing.T) {
	s := newStore(t)
	s.Inject(faulty.Rule{Ops: faulty.OpGet, Corrupt: true, Times: 1})
	want := []byte("data-a/1")
	got, err := object.ReadAll(t.Context(), s, "a/1")
	if err != nil {
		t.Fatal(err)
	}
	diff := 0
	for i := range got {
		if got[i] != want[i] {
			diff++
		}
	}
	if len(got) != len(want) || diff != 1 {
		t.Fatalf("corrupted read %q: %d bytes differ, want 1", got, diff)
	}
	if got, _ := object.ReadAll(t.Context(), s, "a/1"); !bytes.Equal(got, want) {
		t.Fatalf("stored data was corrupted: %q", got)
	}
}

func TestLatency(t *testing.T) {
	s := newStore(t)
	s.Inject(faulty.Rule{Ops: faulty.OpHead, Latency: 50 * time.Millisecond})
	start := time.Now()
	if _, err := s.Head(t.Context(), "a/1"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Fatalf("Head took %v, want >= 50ms", d)
	}
	s.Reset()
	s.Inject(faulty.Rule{Ops: faulty.OpHead, Latency: time.Hour})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	if _, err := s.Head(ctx, "a/1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want deadline exceeded", err)
	}
}

func TestListAndSync(t *testing.T) {
	s := newStore(t)
	f := s.Inject(faulty.Rule{Ops: faulty.OpList | faulty.OpSync, Prefix: "a/", Err: faulty.ErrInjected})
	ctx := t.Context()
	each := func(object.Info) bool { return true }
	if err := s.List(ctx, "b", each); err != nil {
		t.Fatalf("List(b): %v", err)
	}
	for _, p := range []string{"", "a", "a/", "a/1"} {
		if err := s.List(ctx, p, each); !errors.Is(err, faulty.ErrInjected) {
			t.Fatalf("List(%q): err = %v, want injected", p, err)
		}
	}
	if err := s.Sync(ctx); !errors.Is(err, faulty.ErrInjected) {
		t.Fatalf("Sync: err = %v, want injected", err)
	}
	f.Remove()
	if err := s.Sync(ctx); err != nil {
		t.Fatalf("Sync after Remove: %v", err)
	}
}

func TestConcurrentRules(t *testing.T) {
	s := newStore(t)
	f := s.Inject(faulty.Rule{Ops: faulty.OpGet, Times: 100, Err: faulty.ErrInjected})
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	for range 8 {
		wg.Go(func() {
			for range 50 {
				if getErr(s, "a/1") != nil {
					mu.Lock()
					failed++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if failed != 100 || f.Fired() != 100 {
		t.Fatalf("failed %d, fired %d; want 100", failed, f.Fired())
	}
}
