package split_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/object/faulty"
	"github.com/cairnfs/cairn/internal/object/mem"
	"github.com/cairnfs/cairn/internal/object/objtest"
	"github.com/cairnfs/cairn/internal/object/split"
)

// oddKeys sends keys of odd length to the side store, so that the
// conformance suite's keys are spread over both stores and every listing
// merges.
func oddKeys(key string) bool { return len(key)%2 == 1 }

func TestConformance(t *testing.T) {
	objtest.Run(t, func(t *testing.T) object.Store {
		return split.New(mem.New(), mem.New(), oddKeys)
	})
}

// TestRouting checks that each key reaches only the store its rule picks,
// and that listings interleave both stores in key order.
func TestRouting(t *testing.T) {
	ctx := t.Context()
	main, side := mem.New(), mem.New()
	s := split.New(main, side, oddKeys)
	var want []string
	for i := range 300 {
		key := fmt.Sprintf("k/%d", i)
		want = append(want, key)
		if err := s.Put(ctx, key, []byte(key)); err != nil {
			t.Fatal(err)
		}
		home, other := main, side
		if oddKeys(key) {
			home, other = side, main
		}
		if _, err := home.Head(ctx, key); err != nil {
			t.Fatalf("%s not in its store: %v", key, err)
		}
		if _, err := other.Head(ctx, key); !errors.Is(err, object.ErrNotFound) {
			t.Fatalf("%s in the other store too: %v", key, err)
		}
	}
	var got []string
	if err := s.List(ctx, "k/", func(info object.Info) bool {
		got = append(got, info.Key)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("listed %d keys, want %d", len(got), len(want))
	}
	for i := 1; i < len(got); i++ {
		if got[i-1] >= got[i] {
			t.Fatalf("listing out of order at %d: %q then %q", i, got[i-1], got[i])
		}
	}
	// Stopping early, at every position, leaves no goroutine blocked and
	// reports no error.
	for stop := 1; stop < 20; stop++ {
		n := 0
		if err := s.List(ctx, "", func(object.Info) bool { n++; return n < stop }); err != nil {
			t.Fatal(err)
		}
		if n != stop {
			t.Fatalf("listing went on after fn returned false: %d calls, want %d", n, stop)
		}
	}
}

// TestListErrors checks that a failing listing of either store fails the
// merged listing.
func TestListErrors(t *testing.T) {
	ctx := t.Context()
	boom := errors.New("boom")
	for _, failSide := range []bool{false, true} {
		main, side := faulty.New(mem.New(), 1), faulty.New(mem.New(), 1)
		s := split.New(main, side, oddKeys)
		for i := range 50 {
			if err := s.Put(ctx, fmt.Sprintf("k/%d", i), []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
		bad := main
		if failSide {
			bad = side
		}
		bad.Inject(faulty.Rule{Ops: faulty.OpList, Err: boom})
		err := s.List(ctx, "", func(object.Info) bool { return true })
		if !errors.Is(err, boom) {
			t.Errorf("failing list of side=%v: err = %v, want boom", failSide, err)
		}
	}
}
