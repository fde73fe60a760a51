package pebble_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/kv/kvtest"
	"github.com/cairnfs/cairn/internal/kv/pebble"
)

// The conformance suite with every Update under the writer slot, as before
// optimistic transactions: the fallback path on its own.
func TestConformancePessimistic(t *testing.T) {
	kvtest.Run(t, func(t *testing.T) kv.Store {
		return open(t, t.TempDir(), pebble.Pessimistic(pebble.Options{}))
	})
}

func openOCC(t *testing.T) *pebble.Store {
	t.Helper()
	s := open(t, t.TempDir(), pebble.Options{})
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// wait returns an error if c is not closed within a few seconds.
func wait(c <-chan struct{}, what string) error {
	select {
	case <-c:
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("timed out waiting for %s", what)
	}
}

func getInt(r kv.Reader, key string) (int, error) {
	v, err := r.Get([]byte(key))
	if err != nil || v == nil {
		return 0, err
	}
	return strconv.Atoi(string(v))
}

func setInt(tx kv.Txn, key string, n int) { tx.Set([]byte(key), []byte(strconv.Itoa(n))) }

// Two Updates on different keys run their functions at the same time:
// the first waits inside its function until the second has run its own
// and committed. With one Update at a time this times out.
func TestOptimisticUpdatesOverlap(t *testing.T) {
	s := openOCC(t)
	ctx := context.Background()
	inside, secondDone := make(chan struct{}), make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		errc <- s.Update(ctx, func(tx kv.Txn) error {
			if _, err := tx.Get([]byte("a")); err != nil {
				return err
			}
			select {
			case <-inside:
			default:
				close(inside)
			}
			if err := wait(secondDone, "the second Update"); err != nil {
				return err
			}
			tx.Set([]byte("a"), []byte("1"))
			return nil
		})
	}()
	if err := wait(inside, "the first Update to start"); err != nil {
		t.Fatal(err)
	}
	err := s.Update(ctx, func(tx kv.Txn) error {
		if _, err := tx.Get([]byte("b")); err != nil {
			return err
		}
		tx.Set([]byte("b"), []byte("2"))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	close(secondDone)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if a, b := lookup(t, s, "a"), lookup(t, s, "b"); string(a) != "1" || string(b) != "2" {
		t.Errorf("a=%q b=%q; want 1 and 2", a, b)
	}
	if st := s.OCCStats(); st.Conflicts != 0 || st.Optimistic < 2 {
		t.Errorf("stats %+v; want 2 optimistic, no conflict", st)
	}
}

// interrupted runs, in the background, an Update of fn whose first run is
// held at its call of pause until the returned function is called; that
// function runs between, as a concurrent commit, then returns the held
// Update's error and how many times fn ran. A re-run does not pause.
func interrupted(t *testing.T, s kv.Store, fn func(tx kv.Txn, pause func() error) error) func(between func()) (int32, error) {
	t.Helper()
	var runs atomic.Int32
	first, resumed := make(chan struct{}), make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		errc <- s.Update(context.Background(), func(tx kv.Txn) error {
			pause := func() error { return nil }
			if runs.Add(1) == 1 {
				pause = func() error {
					close(first)
					return wait(resumed, "the concurrent commit")
				}
			}
			return fn(tx, pause)
		})
	}()
	if err := wait(first, "the first run"); err != nil {
		t.Fatal(err)
	}
	return func(between func()) (int32, error) {
		between()
		close(resumed)
		err := <-errc
		return runs.Load(), err
	}
}

// A transaction whose read is overwritten by a commit made while its
// function runs runs again and computes from the new value: no lost
// update.
func TestOptimisticConflictReruns(t *testing.T) {
	s := openOCC(t)
	put(t, s, "n", "1")
	resume := interrupted(t, s, func(tx kv.Txn, pause func() error) error {
		n, err := getInt(tx, "n")
		if err != nil {
			return err
		}
		if err := pause(); err != nil {
			return err
		}
		setInt(tx, "n", n+1)
		setInt(tx, "copy", n)
		return nil
	})
	runs, err := resume(func() { put(t, s, "n", "10") })
	if err != nil {
		t.Fatal(err)
	}
	if n, c := string(lookup(t, s, "n")), string(lookup(t, s, "copy")); n != "11" || c != "10" {
		t.Errorf("n=%s copy=%s; want 11 and 10 (the increment ran on the new value)", n, c)
	}
	if runs != 2 {
		t.Errorf("function ran %d times; want 2", runs)
	}
	if st := s.OCCStats(); st.Conflicts != 1 {
		t.Errorf("stats %+v; want 1 conflict", st)
	}
}

// race runs two Updates whose functions both finish reading before either
// commits, so that each commits against reads the other may invalidate.
func race(t *testing.T, s kv.Store, fn func(i int, tx kv.Txn) error) {
	t.Helper()
	var arrived atomic.Int32
	both := make(chan struct{})
	var once [2]sync.Once
	errc := make(chan error, 2)
	for i := range 2 {
		go func() {
			errc <- s.Update(context.Background(), func(tx kv.Txn) error {
				if err := fn(i, tx); err != nil {
					return err
				}
				var err error
				once[i].Do(func() { // a re-run, under the writer slot, does not wait
					if arrived.Add(1) == 2 {
						close(both)
					}
					err = wait(both, "the other transaction's reads")
				})
				return err
			})
		}()
	}
	for range 2 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
}

// Write skew: each transaction sets its own flag only if no flag is set.
// Under snapshot isolation both would; serializable allows one.
func TestOptimisticNoWriteSkew(t *testing.T) {
	for round := range 20 {
		s := openOCC(t)
		race(t, s, func(i int, tx kv.Txn) error {
			x, err := getInt(tx, "x")
			if err != nil {
				return err
			}
			y, err := getInt(tx, "y")
			if err != nil {
				return err
			}
			if x+y == 0 {
				setInt(tx, []string{"x", "y"}[i], 1)
			}
			return nil
		})
		x, _ := strconv.Atoi(string(lookup(t, s, "x")))
		y, _ := strconv.Atoi(string(lookup(t, s, "y")))
		if x+y != 1 {
			t.Fatalf("round %d: x=%d y=%d; want exactly one flag set", round, x, y)
		}
	}
}

// Phantoms: each transaction adds a member to a group only if the group,
// read by a scan, is empty. A key inserted into a scanned range conflicts.
func TestOptimisticNoPhantom(t *testing.T) {
	for round := range 20 {
		s := openOCC(t)
		race(t, s, func(i int, tx kv.Txn) error {
			n := 0
			err := tx.Scan([]byte("g/"), kv.PrefixEnd([]byte("g/")), false, func(_, _ []byte) bool {
				n++
				return true
			})
			if err != nil {
				return err
			}
			if n == 0 {
				tx.Set([]byte(fmt.Sprintf("g/%d", i)), nil)
			}
			return nil
		})
		n := 0
		err := s.View(context.Background(), func(r kv.Reader) error {
			return r.Scan([]byte("g/"), kv.PrefixEnd([]byte("g/")), false, func(_, _ []byte) bool {
				n++
				return true
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Fatalf("round %d: group has %d members; want 1", round, n)
		}
	}
}

// The same through Firsts, which metadata uses for versioned records: a
// transaction that found no first key in a range conflicts with one that
// inserts into it.
func TestOptimisticFirstsPhantom(t *testing.T) {
	for round := range 20 {
		s := openOCC(t)
		race(t, s, func(i int, tx kv.Txn) error {
			ps, err := kv.Firsts(tx, []kv.Range{{Start: []byte("v/"), End: []byte("v0")}})
			if err != nil {
				return err
			}
			if ps[0].Key == nil {
				tx.Set([]byte(fmt.Sprintf("v/%d", i)), nil)
			}
			return nil
		})
		var ps []kv.Pair
		err := s.View(context.Background(), func(r kv.Reader) error {
			var err error
			ps, err = kv.Firsts(r, []kv.Range{{Start: []byte("v/1"), End: []byte("v0")}})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if a, b := lookup(t, s, "v/0"), lookup(t, s, "v/1"); (a == nil) == (ps[0].Key == nil) {
			t.Fatalf("round %d: v/0 %v, v/1 %v; want exactly one", round, a != nil, b != nil)
		}
	}
}

// A scan that stopped early read only up to where it stopped: a write
// beyond that point does not make its transaction run again.
func TestOptimisticScanStopsEarly(t *testing.T) {
	s := openOCC(t)
	put(t, s, "r/1", "x")
	race(t, s, func(i int, tx kv.Txn) error {
		if i == 1 {
			tx.Set([]byte("r/9"), []byte("y"))
			return nil
		}
		var first []byte
		err := tx.Scan([]byte("r/"), kv.PrefixEnd([]byte("r/")), false, func(k, _ []byte) bool {
			first = append([]byte{}, k...)
			return false
		})
		if err != nil {
			return err
		}
		tx.Set([]byte("first"), first)
		return nil
	})
	if st := s.OCCStats(); st.Conflicts != 0 {
		t.Errorf("stats %+v; want no conflict", st)
	}
	if got := string(lookup(t, s, "first")); got != "r/1" {
		t.Errorf("first = %q; want r/1", got)
	}
}

// A transaction that fails because what it read was inconsistent (another
// commit landed between two of its reads) is run again, not failed: the
// caller only sees errors of consistent runs.
func TestOptimisticInconsistentReadRetried(t *testing.T) {
	s := openOCC(t)
	errInconsistent := errors.New("a and b differ")
	put(t, s, "a", "0")
	put(t, s, "b", "0")
	resume := interrupted(t, s, func(tx kv.Txn, pause func() error) error {
		a, err := getInt(tx, "a")
		if err != nil {
			return err
		}
		if err := pause(); err != nil {
			return err
		}
		b, err := getInt(tx, "b")
		if err != nil {
			return err
		}
		if a != b {
			return errInconsistent
		}
		return nil // read-only
	})
	runs, err := resume(func() {
		err := s.Update(context.Background(), func(tx kv.Txn) error { // keeps a == b
			setInt(tx, "a", 5)
			setInt(tx, "b", 5)
			return nil
		})
		if err != nil {
			t.Error(err)
		}
	})
	if err != nil {
		t.Fatalf("Update returned %v; want the re-run's nil", err)
	}
	if runs != 2 {
		t.Errorf("function ran %d times; want 2", runs)
	}
}

// Touch makes an optimistic Update that read a touched key run again, and
// leaves one that read other keys alone; it writes nothing.
func TestTouchRerunsReaders(t *testing.T) {
	s := openOCC(t)
	ctx := context.Background()
	for _, tc := range []struct {
		read     string
		wantRuns int
	}{{"touched", 2}, {"other", 1}} {
		runs := 0
		err := s.Update(ctx, func(tx kv.Txn) error {
			runs++
			if _, err := tx.Get([]byte(tc.read)); err != nil {
				return err
			}
			if runs == 1 {
				// Not under the writer slot: the first run is optimistic.
				if err := s.Touch(ctx, [][]byte{[]byte("touched")}); err != nil {
					return err
				}
			}
			tx.Set([]byte("out"), []byte("1"))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if runs != tc.wantRuns {
			t.Errorf("Update that read %q ran %d times, want %d", tc.read, runs, tc.wantRuns)
		}
	}
	if err := s.View(ctx, func(r kv.Reader) error {
		v, err := r.Get([]byte("touched"))
		if err == nil && v != nil {
			err = fmt.Errorf("touched key holds %q; Touch must write nothing", v)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Touch(ctx, nil); !errors.Is(err, kv.ErrClosed) {
		t.Fatalf("Touch after Close = %v; want ErrClosed", err)
	}
}
