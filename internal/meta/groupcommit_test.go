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
	"github.com/cairnfs/cairn/internal/kv/memkv"
	"github.com/cairnfs/cairn/internal/kv/postgres"
	"github.com/cairnfs/cairn/internal/testenv/pgtest"
)

// slowStore holds each transaction for a while, so that mutations arriving
// meanwhile queue into groups, and makes the first commits fail with a
// conflict after their function ran (a fault the server would report), so
// that whole groups run again.
type slowStore struct {
	kv.Store
	delay     time.Duration
	conflicts atomic.Int64
}

func (s *slowStore) Update(ctx context.Context, fn func(tx kv.Txn) error) error {
	return kv.RunWithRetry(ctx, func() error {
		return s.Store.Update(ctx, func(tx kv.Txn) error {
			time.Sleep(s.delay)
			if err := fn(tx); err != nil {
				return err
			}
			if s.conflicts.Add(-1) >= 0 {
				return kv.ErrConflict
			}
			return nil
		})
	})
}

// TestGroupCommit: concurrent creates and unlinks share transactions; a
// member that fails (the name exists) leaves none of its writes, the
// others commit; conflicts run whole groups again; the result is that of
// the operations run one at a time.
// On PostgreSQL the members' first reads are read ahead in one statement
// (kv.Prereader), and members that create the same name must still see
// each other's writes.
func TestGroupCommit(t *testing.T) {
	t.Run("memkv", func(t *testing.T) { testGroupCommit(t, memkv.New()) })
	t.Run("postgres", func(t *testing.T) {
		s, err := postgres.Open(ctx, pgtest.NewDatabase(t), postgres.Options{})
		ok(t, err)
		t.Cleanup(func() { _ = s.Close() })
		testGroupCommit(t, s)
	})
}

func testGroupCommit(t *testing.T, backend kv.Store) {
	store := &slowStore{Store: backend, delay: time.Millisecond}
	if err := Format(ctx, store, Settings{Name: "test"}, false); err != nil {
		t.Fatal(err)
	}
	m, err := Open(ctx, store, Options{LatestCacheEntries: -1})
	if err != nil {
		t.Fatal(err)
	}
	checkOnCleanup(t, m)
	if m.group == nil {
		t.Fatal("group commit is off without the latest-version cache")
	}
	if _, err := m.NewSession(ctx, SessionInfo{Host: "test"}); err != nil {
		t.Fatal(err)
	}
	store.conflicts.Store(5)
	a := mkdir(t, m, root, base.RootIno, "a")
	b := mkdir(t, m, root, base.RootIno, "b")

	// Workers 2k and 2k+1 create the same names in a (one of each pair
	// wins), and their own names in b, removing every other one again.
	const workers, files = 8, 25
	var wins [workers]int
	var mu sync.Mutex
	opened := map[base.Ino]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range files {
				ino, _, err := m.Create(ctx, root, a, fmt.Sprintf("f%d.%d", w/2, i), 0o644, 0)
				switch {
				case err == nil:
					wins[w]++
					mu.Lock()
					opened[ino] = true
					mu.Unlock()
				case !errors.Is(err, base.ErrExist):
					errs <- err
					return
				}
				name := fmt.Sprintf("g%d.%d", w, i)
				if _, _, err := m.Mknod(ctx, root, b, name, base.TypeFile, 0o644, 0, 0, ""); err != nil {
					errs <- err
					return
				}
				if i%2 == 1 {
					if err := m.Unlink(ctx, root, b, name); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for w := 0; w < workers; w += 2 {
		if wins[w]+wins[w+1] != files {
			t.Errorf("workers %d and %d created %d and %d of %d names", w, w+1, wins[w], wins[w+1], files)
		}
	}
	if got, want := len(names(t, m, a)), workers/2*files; got != want {
		t.Errorf("%d entries in a, want %d", got, want)
	}
	if got, want := len(names(t, m, b)), workers*(files+1)/2; got != want {
		t.Errorf("%d entries in b, want %d", got, want)
	}
	// Only the creates that won left a hold.
	holds := 0
	if err := store.View(ctx, func(r kv.Reader) error {
		return r.Scan([]byte{pHold}, []byte{pHold + 1}, false, func(k, _ []byte) bool {
			holds++
			return true
		})
	}); err != nil {
		t.Fatal(err)
	}
	if holds != len(opened) {
		t.Errorf("%d open-file holds, want %d", holds, len(opened))
	}
	u, err := m.Usage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(1 + 2 + workers/2*files + workers*(files+1)/2); u.Inodes != want {
		t.Errorf("usage: %d inodes, want %d", u.Inodes, want)
	}
	gs, on := m.GroupStats()
	if !on || gs.Groups == 0 || gs.Members < 2*gs.Groups {
		t.Errorf("group stats %+v (on %v): no mutation ran in a group", gs, on)
	}
	if store.conflicts.Load() >= 0 {
		t.Error("the injected conflicts were not all used")
	}
	t.Logf("%d of %d mutations ran in %d groups", gs.Members, workers*files*5/2, gs.Groups)
	for ino := range opened {
		ok(t, m.CloseFile(ctx, ino))
	}
}
