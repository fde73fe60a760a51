package postgres_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/kv/postgres"
	"github.com/cairnfs/cairn/internal/testenv/pgtest"
)

// TestSerialize: updates marked by kv.Serialize with one key, from two
// stores (two clients) at once, each a read-modify-write of one record,
// follow one another: none aborts and runs again, and none is lost.
// Without the advisory lock each would read the counter before the
// others' commits and most would run again (logged, not checked: the
// number depends on timing).
func TestSerialize(t *testing.T) {
	url := pgtest.NewDatabase(t)
	stores := []*postgres.Store{openClosed(t, url, postgres.Options{}), openClosed(t, url, postgres.Options{})}
	const workers, each = 8, 25
	run := func(serial bool) (runs int64, final int) {
		key := []byte("counter-" + strconv.FormatBool(serial))
		var n atomic.Int64
		var wg sync.WaitGroup
		for w := range workers {
			s := stores[w%len(stores)]
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx := context.Background()
				if serial {
					ctx = kv.Serialize(ctx, key)
				}
				for range each {
					err := s.Update(ctx, func(tx kv.Txn) error {
						n.Add(1)
						v, err := tx.Get(key)
						if err != nil {
							return err
						}
						c, _ := strconv.Atoi(string(v))
						tx.Set(key, []byte(strconv.Itoa(c+1)))
						return nil
					})
					if err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		var v []byte
		if err := stores[0].View(context.Background(), func(r kv.Reader) (err error) {
			v, err = r.Get(key)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		final, _ = strconv.Atoi(string(v))
		return n.Load(), final
	}
	runs, final := run(false)
	t.Logf("not serialized: %d updates ran %d times", workers*each, runs)
	if final != workers*each {
		t.Fatalf("not serialized: counter %d after %d increments", final, workers*each)
	}
	runs, final = run(true)
	if final != workers*each {
		t.Fatalf("serialized: counter %d after %d increments", final, workers*each)
	}
	if runs != workers*each {
		t.Fatalf("serialized: %d updates ran %d times: some aborted", workers*each, runs)
	}
	noAdvisoryLocks(t, url)
}

// TestSerializeGivesBack: the advisory lock of a serialized update is
// given back however the update ends (its function fails, its commit
// conflicts and it runs again, its context ends while it waits for the
// lock), so that the next update queued on the key goes on, and no
// connection the pool hands out holds one.
func TestSerializeGivesBack(t *testing.T) {
	url := pgtest.NewDatabase(t)
	a, b := openClosed(t, url, postgres.Options{}), openClosed(t, url, postgres.Options{})
	key := []byte("dir")
	sctx := kv.Serialize(context.Background(), key)
	within := func(what string, fn func(ctx context.Context) error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(sctx, 10*time.Second)
		defer cancel()
		if err := fn(ctx); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// fn fails after its first read (the lock is held by then).
	boom := errors.New("boom")
	if err := a.Update(sctx, func(tx kv.Txn) error {
		if _, err := tx.Get(key); err != nil {
			return err
		}
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("failing update: %v", err)
	}
	within("an update after a failed one", func(ctx context.Context) error {
		return b.Update(ctx, func(tx kv.Txn) error {
			_, err := tx.Get(key)
			tx.Set(key, []byte("1"))
			return err
		})
	})
	// The commit conflicts with an update that is not serialized: it
	// runs again, taking the lock again.
	runs := 0
	within("a conflicting update", func(ctx context.Context) error {
		return a.Update(ctx, func(tx kv.Txn) error {
			runs++
			if _, err := tx.Get(key); err != nil {
				return err
			}
			if runs == 1 {
				if err := b.Update(context.Background(), func(tx kv.Txn) error {
					tx.Set(key, []byte("other"))
					return nil
				}); err != nil {
					return err
				}
			}
			tx.Set(key, []byte("2"))
			return nil
		})
	})
	if runs < 2 {
		t.Fatalf("the conflicting update ran %d times", runs)
	}
	within("an update after a conflict", func(ctx context.Context) error {
		return b.Update(ctx, func(tx kv.Txn) error {
			_, err := tx.Get(key)
			return err
		})
	})
	// One update holds the lock (it waits in fn); another, queued on
	// it, gives up when its context ends.
	hold, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- a.Update(sctx, func(tx kv.Txn) error {
			if _, err := tx.Get(key); err != nil {
				return err
			}
			close(hold)
			<-release
			return nil
		})
	}()
	<-hold
	ctx, cancel := context.WithTimeout(sctx, 300*time.Millisecond)
	err := b.Update(ctx, func(tx kv.Txn) error {
		_, err := tx.Get(key)
		return err
	})
	cancel()
	if err == nil {
		t.Fatal("an update queued behind a held lock went on")
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	within("an update after one gave up waiting", func(ctx context.Context) error {
		return b.Update(ctx, func(tx kv.Txn) error {
			_, err := tx.Get(key)
			return err
		})
	})
	noAdvisoryLocks(t, url)
}

// noAdvisoryLocks fails t if a connection to url's database still holds an
// advisory lock once the stores' background rollbacks have had their time.
func noAdvisoryLocks(t *testing.T, url string) {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var n int
	for deadline := time.Now().Add(10 * time.Second); ; {
		if err := c.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d advisory locks still held", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
