package kv_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/kv/memkv"
)

// TestSubMatchesModel runs random writes through a Sub over a transaction
// that has writes of its own, and checks every read against a map of what
// the Sub should see; then that Apply hands exactly the Sub's writes to
// the parent, and that a dropped Sub leaves it untouched.
func TestSubMatchesModel(t *testing.T) {
	for seed := range uint64(200) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { subRound(t, seed) })
	}
}

func subRound(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	key := func() []byte { return []byte{byte('a' + rng.IntN(12))} }
	s := memkv.New()
	ctx := context.Background()
	committed := map[string]string{}
	if err := s.Update(ctx, func(tx kv.Txn) error {
		for range 8 {
			k, v := key(), fmt.Sprint(rng.IntN(100))
			tx.Set(k, []byte(v))
			committed[string(k)] = v
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	apply := seed%2 == 0
	var parentModel map[string]string
	if err := s.Update(ctx, func(tx kv.Txn) error {
		model := maps.Clone(committed)
		// The parent's own writes, before the Sub begins.
		for range 4 {
			k := key()
			if rng.IntN(3) == 0 {
				tx.Delete(k)
				delete(model, string(k))
			} else {
				v := fmt.Sprint("p", rng.IntN(100))
				tx.Set(k, []byte(v))
				model[string(k)] = v
			}
		}
		parentModel = maps.Clone(model)
		sub := kv.NewSub(tx)
		for range 20 {
			switch rng.IntN(4) {
			case 0:
				k := key()
				sub.Delete(k)
				delete(model, string(k))
			case 1, 2:
				k, v := key(), fmt.Sprint("s", rng.IntN(100))
				sub.Set(k, []byte(v))
				model[string(k)] = v
			}
			checkReads(t, sub, model, rng)
		}
		checkReads(t, tx, parentModel, rng) // the parent sees none of it yet
		if apply {
			sub.Apply()
			parentModel = model
		}
		checkReads(t, tx, parentModel, rng)
		return sub.Failed()
	}); err != nil {
		t.Fatal(err)
	}
	checkReads(t, readOnly(t, s), parentModel, rng)
}

// readOnly returns the committed state of s as a map-backed reader.
func readOnly(t *testing.T, s kv.Store) kv.Reader {
	t.Helper()
	got := map[string]string{}
	if err := s.View(context.Background(), func(r kv.Reader) error {
		return r.Scan(nil, nil, false, func(k, v []byte) bool {
			got[string(k)] = string(v)
			return true
		})
	}); err != nil {
		t.Fatal(err)
	}
	return mapReader(got)
}

type mapReader map[string]string

func (m mapReader) Get(key []byte) ([]byte, error) {
	if v, ok := m[string(key)]; ok {
		return []byte(v), nil
	}
	return nil, nil
}

func (m mapReader) Scan(start, end []byte, reverse bool, fn func(k, v []byte) bool) error {
	keys := slices.Sorted(maps.Keys(m))
	if reverse {
		slices.Reverse(keys)
	}
	for _, k := range keys {
		if k < string(start) || end != nil && k >= string(end) {
			continue
		}
		if !fn([]byte(k), []byte(m[k])) {
			break
		}
	}
	return nil
}

// checkReads compares Get, Scan (both ways, stopped early) and Firsts of r
// with model.
func checkReads(t *testing.T, r kv.Reader, model map[string]string, rng *rand.Rand) {
	t.Helper()
	for c := byte('a'); c < 'a'+12; c++ {
		v, err := r.Get([]byte{c})
		if err != nil {
			t.Fatal(err)
		}
		want, ok := model[string(c)]
		if ok != (v != nil) || ok && string(v) != want {
			t.Fatalf("Get(%c) = %q, want %q (present %v)", c, v, want, ok)
		}
	}
	lo := []byte{byte('a' + rng.IntN(12))}
	hi := []byte{byte('a' + rng.IntN(13))}
	if rng.IntN(4) == 0 {
		hi = nil
	}
	var want []string
	for _, k := range slices.Sorted(maps.Keys(model)) {
		if k >= string(lo) && (hi == nil || k < string(hi)) {
			want = append(want, k+"="+model[k])
		}
	}
	for _, reverse := range []bool{false, true} {
		w := slices.Clone(want)
		if reverse {
			slices.Reverse(w)
		}
		limit := rng.IntN(len(w) + 2)
		var got []string
		if err := r.Scan(lo, hi, reverse, func(k, v []byte) bool {
			got = append(got, string(k)+"="+string(v))
			return len(got) < limit
		}); err != nil {
			t.Fatal(err)
		}
		if limit < len(w) {
			w = w[:max(limit, 1)]
		}
		if len(w) == 0 {
			w = nil
		}
		if !slices.Equal(got, w) {
			t.Fatalf("Scan(%s, %s, reverse %v, limit %d) = %v, want %v", lo, hi, reverse, limit, got, w)
		}
	}
	if hi == nil {
		hi = []byte{0xff}
	}
	ps, err := kv.Firsts(r, []kv.Range{{Start: lo, End: hi}})
	if err != nil {
		t.Fatal(err)
	}
	var first string
	if ps[0].Key != nil {
		first = string(ps[0].Key) + "=" + string(ps[0].Value)
	}
	if len(want) > 0 && first != want[0] || len(want) == 0 && ps[0].Key != nil {
		t.Fatalf("Firsts(%s, %s) = %q, want %v", lo, hi, first, want)
	}
}

// TestSubReadFailure: a failed read through the Sub is kept for Failed.
func TestSubReadFailure(t *testing.T) {
	boom := errors.New("boom")
	sub := kv.NewSub(failingTxn{boom})
	if _, err := sub.Get([]byte("k")); !errors.Is(err, boom) {
		t.Fatalf("Get: %v", err)
	}
	sub.Set([]byte("a"), []byte("1"))
	if err := sub.Scan(nil, nil, false, func(_, _ []byte) bool { return true }); !errors.Is(err, boom) {
		t.Fatalf("Scan: %v", err)
	}
	if !errors.Is(sub.Failed(), boom) {
		t.Fatalf("Failed() = %v", sub.Failed())
	}
	if v, err := sub.Get([]byte("a")); err != nil || !bytes.Equal(v, []byte("1")) {
		t.Fatalf("Get of a buffered key = %q, %v", v, err)
	}
}

type failingTxn struct{ err error }

func (f failingTxn) Get([]byte) ([]byte, error) { return nil, f.err }
func (f failingTxn) Scan(_, _ []byte, _ bool, _ func(k, v []byte) bool) error {
	return f.err
}
func (failingTxn) Set(_, _ []byte) {}
func (failingTxn) Delete([]byte)   {}

// TestRangeKey: ranges that differ in any field, a nil End or a Follow
// included, have different keys; equal ones the same.
func TestRangeKey(t *testing.T) {
	f := func(off int, pfx string) *kv.Follow {
		return &kv.Follow{Offset: off, Length: 8, Prefix: []byte(pfx), EndSuffix: []byte{0}}
	}
	ranges := []kv.Range{
		{Start: []byte("a")},
		{Start: []byte("a"), End: []byte{}},
		{Start: []byte("a"), End: []byte("b")},
		{Start: []byte("ab")},
		{Start: []byte("a"), End: []byte("b"), Follow: f(0, "")},
		{Start: []byte("a"), End: []byte("b"), Follow: f(1, "")},
		{Start: []byte("a"), End: []byte("b"), Follow: f(0, "A")},
		{Start: []byte{}, End: []byte("ab")},
	}
	seen := map[string]int{}
	for i, r := range ranges {
		k := kv.RangeKey(r)
		if j, dup := seen[k]; dup {
			t.Errorf("ranges %d and %d have the same key", j, i)
		}
		seen[k] = i
		c := kv.Range{Start: append([]byte{}, r.Start...), End: r.End, Follow: r.Follow}
		if kv.RangeKey(c) != k {
			t.Errorf("range %d: equal ranges, different keys", i)
		}
	}
}
