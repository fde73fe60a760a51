package counted_test

import (
	"context"
	"errors"
	"testing"

	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/kv/counted"
	"github.com/cairnfs/cairn/internal/kv/memkv"
)

// guarding is memkv with kv.GuardedWriter, counting the calls of its
// WriteIf.
type guarding struct {
	*memkv.Store
	calls int
}

func (g *guarding) WriteIf(ctx context.Context, guards []kv.Guard, writes []kv.Write) error {
	g.calls++
	return kv.WriteIf(ctx, g.Store, guards, writes)
}

// WriteIf is passed on to the wrapped store's ability and counts as an
// Update: committed, aborted when a guard does not hold (the caller's
// refusal). kv.WriteIf refuses a bad range before it reaches the wrapper.
func TestWriteIf(t *testing.T) {
	ctx := context.Background()
	inner := &guarding{Store: memkv.New()}
	s := counted.New(inner)
	defer s.Close()
	k := []byte("k")
	guard := func(v string) []kv.Guard {
		w := kv.Pair{}
		if v != "" {
			w = kv.Pair{Key: k, Value: []byte(v)}
		}
		return []kv.Guard{{Range: kv.Range{Start: k, End: []byte("k\x00")}, Want: w}}
	}
	write := func(v string) []kv.Write { return []kv.Write{{Key: k, Value: []byte(v)}} }
	if err := kv.WriteIf(ctx, s, guard(""), write("1")); err != nil {
		t.Fatal(err)
	}
	if err := kv.WriteIf(ctx, s, guard("1"), write("2")); err != nil {
		t.Fatal(err)
	}
	if err := kv.WriteIf(ctx, s, guard("1"), write("3")); !errors.Is(err, kv.ErrGuard) {
		t.Fatalf("WriteIf with a stale guard: %v, want kv.ErrGuard", err)
	}
	bad := []kv.Guard{{Range: kv.Range{Start: k}}}
	if err := kv.WriteIf(ctx, s, bad, write("4")); err == nil || errors.Is(err, kv.ErrGuard) {
		t.Fatalf("WriteIf with an unbounded guard: %v, want a refusal", err)
	}
	if inner.calls != 3 {
		t.Errorf("the wrapped store's WriteIf ran %d times, want 3", inner.calls)
	}
	check(t, s, counted.Update, want{ok: 2, aborted: 1})
}
