package meta

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/kv/memkv"
)

func keyRange(k string) kv.Range {
	return kv.Range{Start: []byte(k), End: append([]byte(k), 0)}
}

func TestSpecCacheLearn(t *testing.T) {
	c := newSpecCache()
	wide := kv.Range{Start: []byte("b"), End: []byte("d")}
	c.put(0, []kv.Range{keyRange("a"), wide, keyRange("x")},
		[]kv.Pair{{Key: []byte("a"), Value: []byte("1")}, {Key: []byte("c"), Value: []byte("3")}, {}})
	skip := map[string]bool{rangeID(keyRange("x")): true}
	c.learn(0, []kv.Guard{{Range: keyRange("x")}}, []kv.Write{
		{Key: []byte("a"), Value: []byte("2")},  // overwritten
		{Key: []byte("bb"), Value: []byte("4")}, // now first in wide
		{Key: []byte("x"), Value: []byte("5")},  // skipped range
	}, skip)
	check := func(r kv.Range, want kv.Pair, known bool) {
		t.Helper()
		p, ok := c.get(r)
		if ok != known || ok && (!bytes.Equal(p.Key, want.Key) || !bytes.Equal(p.Value, want.Value)) {
			t.Fatalf("[%q, %q): %q=%q known %v, want %q=%q known %v", r.Start, r.End, p.Key, p.Value, ok, want.Key, want.Value, known)
		}
	}
	check(keyRange("a"), kv.Pair{Key: []byte("a"), Value: []byte("2")}, true)
	check(wide, kv.Pair{Key: []byte("bb"), Value: []byte("4")}, true)
	check(keyRange("x"), kv.Pair{}, false)
	// Deleting the first pair of a range makes the next one unknown.
	c.learn(0, nil, []kv.Write{{Key: []byte("bb"), Delete: true}}, nil)
	check(wide, kv.Pair{}, false)
	c.learn(0, nil, []kv.Write{{Key: []byte("a"), Delete: true}}, nil)
	check(keyRange("a"), kv.Pair{}, false)

	// A lease taken or given back since a mutation's reads began (the
	// term moved): every prediction is gone and what it read or wrote
	// is not learned.
	c.put(0, []kv.Range{keyRange("a")}, []kv.Pair{{Key: []byte("a"), Value: []byte("6")}})
	old := c.curTerm()
	c.newTerm()
	check(keyRange("a"), kv.Pair{}, false)
	one := kv.Pair{Key: []byte("a"), Value: []byte("7")}
	c.put(old, []kv.Range{keyRange("a")}, []kv.Pair{one})
	c.learn(old, []kv.Guard{{Range: keyRange("a"), Want: one}}, nil, nil)
	ws := newWbWrites()
	c.learnBatch(old, []kv.Guard{{Range: keyRange("a"), Want: one}}, &ws)
	check(keyRange("a"), kv.Pair{}, false)
	c.put(c.curTerm(), []kv.Range{keyRange("a")}, []kv.Pair{one})
	check(keyRange("a"), one, true)
}

// gatedWriter is kv.WriteIf on a memkv store whose first calls wait for
// open to close, so that the calls after them queue.
type gatedWriter struct {
	s     kv.Store
	open  chan struct{}
	mu    sync.Mutex
	gated int
	calls int
	most  int // guards of the largest call
}

func (g *gatedWriter) WriteIf(ctx context.Context, guards []kv.Guard, writes []kv.Write) error {
	g.mu.Lock()
	g.calls++
	g.most = max(g.most, len(guards))
	wait := g.gated > 0
	if wait {
		g.gated--
	}
	g.mu.Unlock()
	if wait {
		<-g.open
	}
	return kv.WriteIf(ctx, g.s, guards, writes)
}

func TestSpecGroup(t *testing.T) {
	s := memkv.New()
	gw := &gatedWriter{s: s, open: make(chan struct{}), gated: groupSlots}
	var g specGroup
	req := func(i int, wantOld string) ([]kv.Guard, []kv.Write) {
		k := fmt.Sprint("k", i)
		want := kv.Pair{}
		if wantOld != "" {
			want = kv.Pair{Key: []byte(k), Value: []byte(wantOld)}
		}
		return []kv.Guard{{Range: keyRange(k), Want: want}, {Range: keyRange("shared"), Want: kv.Pair{}}},
			[]kv.Write{{Key: []byte(k), Value: []byte("new")}}
	}
	ok(t, s.Update(ctx, func(tx kv.Txn) error { tx.Set([]byte("k4"), []byte("old")); return nil }))
	errs := make([]error, 8)
	var wg sync.WaitGroup
	run := func(i int, gs []kv.Guard, ws []kv.Write) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = g.writeIf(ctx, gw, gs, ws)
		}()
	}
	// Two in flight, held; the others queue behind them.
	for i := range groupSlots {
		gs, ws := req(i, "")
		run(i, gs, ws)
	}
	waitFor(t, func() bool { gw.mu.Lock(); defer gw.mu.Unlock(); return gw.calls == groupSlots })
	for i := groupSlots; i < 8; i++ {
		old := ""
		switch i {
		case 4:
			old = "old" // holds
		case 5:
			old = "stale" // fails
		}
		gs, ws := req(i, old)
		if i == 7 { // writes a key member 6 reads: not in its group
			ws = append(ws, kv.Write{Key: []byte("k6"), Value: []byte("from7")})
		}
		run(i, gs, ws)
	}
	waitFor(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return len(g.queue) == 8-groupSlots })
	close(gw.open)
	wg.Wait()
	for i, err := range errs {
		switch {
		case i == 5:
			if !errors.Is(err, kv.ErrGuard) {
				t.Fatalf("member 5, whose guard fails: %v", err)
			}
		case i == 6 && errors.Is(err, kv.ErrGuard):
			// 7, not grouped with it, ran first.
		default:
			ok(t, err)
		}
	}
	ok(t, s.View(ctx, func(r kv.Reader) error {
		for i := range 8 {
			v, err := r.Get([]byte(fmt.Sprint("k", i)))
			ok(t, err)
			want := "new"
			switch i {
			case 5:
				want = ""
			case 6:
				want = "from7" // 7 ran after 6, or 6 failed
			}
			if string(v) != want {
				t.Errorf("k%d = %q, want %q", i, v, want)
			}
		}
		return nil
	}))
	if gw.most <= 2 {
		t.Fatalf("no WriteIf call had more than one member's guards (%d calls)", gw.calls)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(time.Millisecond)
	}
}
