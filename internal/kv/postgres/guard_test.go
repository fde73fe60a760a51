package postgres_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/kv/postgres"
	"github.com/cairnfs/cairn/internal/testenv/pgtest"
)

// guardOn wants key's value to be value.
func guardOn(key, value string) kv.Guard {
	return kv.Guard{
		Range: kv.Range{Start: []byte(key), End: []byte(key + "\x00")},
		Want:  kv.Pair{Key: []byte(key), Value: []byte(value)},
	}
}

// TestNilArrayElementsAreNull: the guard statement learns "the range must
// be empty" from a NULL element of its array of wanted keys, which pgx
// sends for a nil []byte (and only for nil: an empty key is a key).
func TestNilArrayElementsAreNull(t *testing.T) {
	ctx := context.Background()
	c, err := pgx.Connect(ctx, pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var nulls []bool
	err = c.QueryRow(ctx, "SELECT array_agg(x IS NULL ORDER BY i) FROM unnest($1::bytea[]) WITH ORDINALITY AS u(x, i)",
		[][]byte{nil, {}, {1}, nil}).Scan(&nulls)
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{true, false, false, true}; !slices.Equal(nulls, want) {
		t.Errorf("nil, empty, one byte, nil sent as NULL: %v, want %v", nulls, want)
	}
}

// TestWriteIfOneRoundTrip counts the round trips between the store and
// the server: WriteIf, with guards or without, writes of each kind or
// none, costs one (on a connection that has prepared its statements), and
// its guards one reading statement.
func TestWriteIfOneRoundTrip(t *testing.T) {
	srv := pgtest.Shared(t)
	u := srv.NewDatabase(t)
	p := newTripCounter(t, srv)
	s := openClosed(t, proxied(u, &proxy{dir: p.dir}), postgres.Options{MaxConns: 1}) // proxied needs only the directory
	ctx := context.Background()
	put(t, s, "a", "1", "b", "2")
	all := []kv.Write{
		{Key: []byte("a"), Value: []byte("1")}, // an UPDATE: a guard wants it
		{Key: []byte("b"), Delete: true},
		{Key: []byte("c"), Value: []byte("3")}, // an upsert
	}
	for _, tc := range []struct {
		name   string
		guards []kv.Guard
		writes []kv.Write
		reads  int64
	}{
		{"guards and writes", []kv.Guard{guardOn("a", "1"), guardOn("b", "2")}, all, 1},
		{"guards only", []kv.Guard{guardOn("a", "1")}, nil, 1},
		{"writes only", nil, all[1:], 0},
	} {
		// The first run prepares the statements new to the connection.
		for try := range 2 {
			put(t, s, "a", "1", "b", "2")
			trips, reads := p.trips.Load(), postgres.Reads(s)
			if err := kv.WriteIf(ctx, s, tc.guards, tc.writes); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if try == 0 {
				continue
			}
			if n := p.trips.Load() - trips; n != 1 {
				t.Errorf("%s: %d round trips, want 1", tc.name, n)
			}
			if n := postgres.Reads(s) - reads; n != tc.reads {
				t.Errorf("%s: %d reading statements, want %d", tc.name, n, tc.reads)
			}
		}
	}
	if got := lookup(t, s, "c"); got != "3" {
		t.Errorf("c = %q, want 3", got)
	}
	// The count is right: an Update that reads and writes costs two.
	// (The first waits for the View's ROLLBACK, sent in the background.)
	var trips int64
	for range 2 {
		trips = p.trips.Load()
		if _, err := counter(ctx, s, "a"); err != nil {
			t.Fatal(err)
		}
	}
	if n := p.trips.Load() - trips; n != 2 {
		t.Errorf("an Update that reads once: %d round trips counted, want 2", n)
	}
}

// TestWriteIfConcurrentChange holds the row lock of a key the guard wants
// in a concurrent transaction while WriteIf runs: WriteIf's snapshot still
// has the old value, so the guard holds and its write waits. When the
// other transaction commits a change or a deletion of the key, WriteIf
// fails with kv.ErrGuard (a serialization failure, not retried) and writes
// nothing; in particular it does not bring a deleted key back.
func TestWriteIfConcurrentChange(t *testing.T) {
	ctx := context.Background()
	u := pgtest.NewDatabase(t)
	s := openClosed(t, u, postgres.Options{})
	other, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	// pg_stat_activity is read outside other's transaction, which would
	// see one picture of it throughout.
	watch, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close(ctx)
	for _, tc := range []struct {
		name, sql, want string
	}{
		{"change", "UPDATE cairn_kv SET v = 'other' WHERE k = 'n'", "other"},
		{"deletion", "DELETE FROM cairn_kv WHERE k = 'n'", ""},
	} {
		put(t, s, "n", "1")
		tx, err := other.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, tc.sql); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			done <- kv.WriteIf(ctx, s, []kv.Guard{guardOn("n", "1")},
				[]kv.Write{{Key: []byte("n"), Value: []byte("2")}, {Key: []byte("m"), Value: []byte("2")}})
		}()
		// Wait for WriteIf to wait for the row lock.
		for deadline := time.Now().Add(10 * time.Second); ; {
			var waiting int
			err := watch.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()").Scan(&waiting)
			if err != nil {
				t.Fatal(err)
			}
			if waiting > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: WriteIf does not wait for the row lock", tc.name)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; !errors.Is(err, kv.ErrGuard) {
			t.Errorf("%s: WriteIf = %v, want kv.ErrGuard", tc.name, err)
		} else {
			t.Logf("%s: %v", tc.name, err)
		}
		if got := lookup(t, s, "n"); got != tc.want {
			t.Errorf("%s: n = %q, want %q", tc.name, got, tc.want)
		}
		if got := lookup(t, s, "m"); got != "" {
			t.Errorf("%s: m = %q, want none (nothing written)", tc.name, got)
		}
	}
}

// TestWriteIfConnectionLost: a connection broken before WriteIf sends its
// batch is replaced and the write made once; one lost after the batch was
// sent fails with kv.ErrUnknownOutcome, and the batch is not sent again
// (a second run would fail its guard).
func TestWriteIfConnectionLost(t *testing.T) {
	srv := pgtest.Shared(t)
	u := srv.NewDatabase(t)
	p := newProxy(t, srv)
	// One connection, which has prepared the statements: the cut hits
	// the batch itself.
	s := openClosed(t, proxied(u, p), postgres.Options{MaxConns: 1})
	direct := openClosed(t, u, postgres.Options{})
	ctx := context.Background()
	put(t, s, "n", "0")
	incr := func(from, to string) error {
		return kv.WriteIf(ctx, s, []kv.Guard{guardOn("n", from)}, []kv.Write{{Key: []byte("n"), Value: []byte(to)}})
	}
	if err := incr("0", "1"); err != nil {
		t.Fatal(err)
	}
	p.cutAll()
	if err := incr("1", "2"); err != nil {
		t.Fatalf("WriteIf after its connection broke: %v", err)
	}
	if got := lookup(t, direct, "n"); got != "2" {
		t.Fatalf("n = %q, want 2", got)
	}
	p.cutAfterNextSend()
	err := incr("2", "3")
	if !errors.Is(err, kv.ErrUnknownOutcome) {
		t.Errorf("WriteIf whose answer was lost = %v, want kv.ErrUnknownOutcome", err)
	}
	t.Logf("error: %v", err)
	waitValue(t, direct, "n", "3", "the guarded write whose answer was lost")
	// The store recovers.
	if err := incr("3", "4"); err != nil {
		t.Fatal(err)
	}
}

// tripCounter forwards connections from a Unix socket of its own to the
// test server and counts round trips: requests from a client that follow
// an answer of the server (or open the connection).
type tripCounter struct {
	dir   string
	trips atomic.Int64
}

func newTripCounter(t *testing.T, srv *pgtest.Server) *tripCounter {
	dir, l, target := listenBeside(t, srv, "cairn-pgtrips-")
	p := &tripCounter{dir: dir}
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			client, err := l.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("unix", target)
			if err != nil {
				client.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, client, server)
			mu.Unlock()
			var answered atomic.Bool // the server spoke last
			answered.Store(true)
			wg.Go(func() {
				io.Copy(writerFunc(func(b []byte) (int, error) {
					answered.Store(true)
					return client.Write(b)
				}), server)
				client.Close()
			})
			wg.Go(func() {
				io.Copy(writerFunc(func(b []byte) (int, error) {
					if answered.Swap(false) {
						p.trips.Add(1)
					}
					return server.Write(b)
				}), client)
				server.Close()
			})
		}
	})
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
		os.RemoveAll(dir)
	})
	return p
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }
