package meta

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/kv/counted"
	"github.com/cairnfs/cairn/internal/kv/postgres"
	"github.com/cairnfs/cairn/internal/testenv/pgtest"
)

// TestSharedContendedDirectory: a change of a directory's entries that
// conflicts and runs again marks the directory contended on its client
// (and only there); then clients that have it marked create and unlink
// files in it all at once, each change queued in the store, and none
// runs again; every file is there, then gone, and the counters agree.
func TestSharedContendedDirectory(t *testing.T) {
	url := pgtest.NewDatabase(t)
	const clients, workers, files = 3, 3, 40
	var ms []*Meta
	var stores []*counted.Store
	for i := range clients {
		inner, err := postgres.Open(ctx, url, postgres.Options{})
		ok(t, err)
		t.Cleanup(func() { _ = inner.Close() })
		s := counted.New(inner)
		if i == 0 {
			ok(t, Format(ctx, s, Settings{Name: "pg"}, false))
		}
		m, err := Open(ctx, s, Options{})
		ok(t, err)
		t.Cleanup(func() { _ = m.Close() })
		must[uint64](t)(m.NewSession(ctx, SessionInfo{Host: fmt.Sprint("c", i)}))
		ms, stores = append(ms, m), append(stores, s)
	}
	checkOnCleanup(t, ms[0])
	a, b := ms[0], ms[1]

	// An entry change of d on a that runs again, because b changed d's
	// entries between its read of d and its commit.
	d := mkdir(t, a, root, base.RootIno, "d")
	runs := 0
	err := a.update(changingEntries(ctx, d), func(tx *wtx) error {
		runs++
		o := a.newOp(tx)
		p, err := o.dirAttr(d)
		if err != nil {
			return err
		}
		if runs == 1 {
			create(t, b, root, d, "by-b")
		}
		o.touchDir(d, p)
		return o.flush()
	})
	ok(t, err)
	if runs != 2 {
		t.Fatalf("the conflicting change ran %d times", runs)
	}
	if !a.contention.has(d) || b.contention.has(d) {
		t.Fatalf("after a's change ran again: contended on a %v, on b %v", a.contention.has(d), b.contention.has(d))
	}

	// Every client has d2 marked: their changes of its entries queue.
	d2 := mkdir(t, a, root, base.RootIno, "d2")
	for _, m := range ms {
		m.contention.mark(d2)
	}
	var before int64
	for _, s := range stores {
		before += s.Stats().Total().Retries
	}
	var wg sync.WaitGroup
	for c, m := range ms {
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := range files {
					name := fmt.Sprintf("f%d-%d-%d", c, w, k)
					if _, _, err := m.Lookup(ctx, root, d2, name); !errors.Is(err, base.ErrNotFound) {
						t.Errorf("lookup of %s: %v", name, err)
						return
					}
					if err := createClose(m, d2, name); err != nil {
						t.Error(err)
						return
					}
				}
				for k := range files {
					if k%2 == 0 {
						if err := m.Unlink(ctx, root, d2, fmt.Sprintf("f%d-%d-%d", c, w, k)); err != nil {
							t.Error(err)
							return
						}
					}
				}
			}()
		}
	}
	wg.Wait()
	var after int64
	for _, s := range stores {
		after += s.Stats().Total().Retries
	}
	if n := after - before; n != 0 {
		t.Errorf("%d creates and %d unlinks in a contended directory by %d clients ran %d transactions again",
			clients*workers*files, clients*workers*files/2, clients, n)
	}
	es, err := b.Readdir(ctx, root, d2, "", 0, false)
	ok(t, err)
	if len(es) != clients*workers*files/2 {
		t.Fatalf("%d entries left, want %d", len(es), clients*workers*files/2)
	}
	u := must[Usage](t)(a.Usage(ctx))
	if want := uint64(1 + 2 + 1 + clients*workers*files/2); u.Inodes != want {
		t.Fatalf("usage counts %d inodes, want %d", u.Inodes, want)
	}
}

// TestContentionExpires: a directory is contended for contendedFor after
// its last mark, and a change not of entries is never queued.
func TestContentionExpires(t *testing.T) {
	var c contention
	c.mark(7)
	if !c.has(7) || c.has(8) {
		t.Fatal("marked directory not contended, or another one is")
	}
	c.mu.Lock()
	c.until[7] = c.until[7].Add(-contendedFor - 1)
	c.mu.Unlock()
	if c.has(7) {
		t.Fatal("contended after contendedFor")
	}
	m := &Meta{}
	m.contention.mark(9)
	if qctx, ch := m.queueOnDir(changingEntries(context.Background(), 9)); !ch.ok || ch.dir != 9 {
		t.Fatal("the change of 9's entries is not seen as one")
	} else if _, queued := kv.SerializeKey(qctx); !queued {
		t.Fatal("a change of a contended directory's entries is not queued")
	}
	if qctx, _ := m.queueOnDir(changingEntries(context.Background(), 10)); func() bool { _, q := kv.SerializeKey(qctx); return q }() {
		t.Fatal("a change of a directory not contended is queued")
	}
	if qctx, ch := m.queueOnDir(context.Background()); ch.ok {
		t.Fatal("an update not of entries is seen as a change of entries")
	} else if _, q := kv.SerializeKey(qctx); q {
		t.Fatal("an update not of entries is queued")
	}
	m.contention.mark(9) // again while contended: not a new contention
	m.contention.mark(11)
	if s, ok := m.ContentionStats(); !ok || s != (ContentionStats{Directories: 2, Marked: 2, Queued: 1}) {
		t.Fatalf("stats %+v (ok %v), want 2 contended, 2 marked, 1 queued", s, ok)
	}
}

// TestSharedContendedDirectoryOutage: two clients create files in a
// directory both have marked contended (their creates queued on the
// store's advisory lock) while PostgreSQL shuts down, stays down for a
// second and comes back, then crashes and comes back. Every create
// acknowledged is there afterwards, on a client that did not make it,
// and nothing else is (but creates whose outcome was unknown); fsck is
// clean (checkOnCleanup).
func TestSharedContendedDirectoryOutage(t *testing.T) {
	srv := pgtest.Shared(t)
	ms, _ := leaseClients(t, 2, 30*time.Second)
	d := mkdir(t, ms[0], root, base.RootIno, "d")
	for _, m := range ms {
		m.contention.mark(d)
	}
	var mu sync.Mutex
	acked, unknown := map[string]bool{}, map[string]bool{}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for c, m := range ms {
		for w := range 2 {
			wg.Go(func() {
				for k := 0; !stop.Load(); k++ {
					name := fmt.Sprintf("f%d-%d-%d", c, w, k)
					err := createClose(m, d, name)
					mu.Lock()
					switch {
					case err == nil:
						acked[name] = true
					case errors.Is(err, kv.ErrUnknownOutcome):
						unknown[name] = true
					default:
						t.Errorf("create %s: %v", name, err)
						stop.Store(true)
					}
					mu.Unlock()
				}
			})
		}
	}
	for _, outage := range []func() error{srv.Stop, srv.Kill} {
		time.Sleep(300 * time.Millisecond)
		ok(t, outage())
		time.Sleep(time.Second)
		ok(t, srv.Start())
		time.Sleep(500 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	es, err := ms[1].Readdir(ctx, root, d, "", 0, false)
	ok(t, err)
	listed := map[string]bool{}
	for _, e := range es {
		listed[e.Name] = true
		if !acked[e.Name] && !unknown[e.Name] {
			t.Errorf("%s listed but never created", e.Name)
		}
	}
	for name := range acked {
		if !listed[name] {
			t.Errorf("acknowledged create of %s lost", name)
		}
	}
	if len(acked) < 20 {
		t.Fatalf("only %d creates acknowledged", len(acked))
	}
	t.Logf("%d creates acknowledged, %d of unknown outcome, %d listed", len(acked), len(unknown), len(es))
}
