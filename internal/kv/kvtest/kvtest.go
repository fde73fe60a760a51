// Package kvtest is the conformance suite every kv.Store backend must pass.
//
// A backend's test calls Run with a constructor for fresh, empty stores:
//
//	func TestConformance(t *testing.T) {
//		kvtest.Run(t, func(t *testing.T) kv.Store { return memkv.New() })
//	}
//
// The suite closes each store it creates itself (and checks that closing
// again reports kv.ErrClosed), so constructors should not register their own
// Close with t.Cleanup. It only tests the kv contract; backend-specific
// behaviour (persistence, locking) belongs in the backend's own tests.
package kvtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/kv"
)

// Run runs the conformance suite against stores made by newStore.
func Run(t *testing.T, newStore func(t *testing.T) kv.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s kv.Store)
	}{
		{"GetSetDelete", testGetSetDelete},
		{"EmptyValue", testEmptyValue},
		{"BinaryKeys", testBinaryKeys},
		{"Scan", testScan},
		{"ReadYourWrites", testReadYourWrites},
		{"ErrorDiscardsWrites", testErrorDiscardsWrites},
		{"ViewSnapshot", testViewSnapshot},
		{"ConcurrentCounter", testConcurrentCounter},
		{"BankTransfers", testBankTransfers},
		{"CancelledContext", testCancelledContext},
		{"ValuesAreCopies", testValuesAreCopies},
		{"Notifier", testNotifier},
		{"Firsts", testFirsts},
		{"FirstsAndWrite", testFirstsAndWrite},
		{"WriteIf", testWriteIf},
		{"WriteIfCounter", testWriteIfCounter},
		{"SetAfterConcurrentDelete", testSetAfterConcurrentDelete},
		{"UpdateExclusive", testUpdateExclusive},
		{"Observe", testObserve},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			t.Cleanup(func() { _ = s.Close() })
			tc.fn(t, s)
		})
	}
	t.Run("Close", func(t *testing.T) { testClose(t, newStore(t)) })
	t.Run("PrefixEnd", testPrefixEnd)
}

func set(t *testing.T, s kv.Store, kvs ...string) {
	t.Helper()
	err := s.Update(context.Background(), func(tx kv.Txn) error {
		for i := 0; i+1 < len(kvs); i += 2 {
			tx.Set([]byte(kvs[i]), []byte(kvs[i+1]))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
}

// get reads key in a View; ok is false if the key does not exist.
func get(t *testing.T, s kv.Store, key string) (value string, ok bool) {
	t.Helper()
	var v []byte
	err := s.View(context.Background(), func(r kv.Reader) error {
		var err error
		v, err = r.Get([]byte(key))
		return err
	})
	if err != nil {
		t.Fatalf("View: %v", err)
	}
	return string(v), v != nil
}

func wantGet(t *testing.T, s kv.Store, key, want string, wantOK bool) {
	t.Helper()
	got, ok := get(t, s, key)
	if got != want || ok != wantOK {
		t.Fatalf("Get(%q) = %q, %v; want %q, %v", key, got, ok, want, wantOK)
	}
}

// scan collects "k=v" strings from r.Scan, stopping after limit entries
// if limit > 0.
func scan(t *testing.T, r kv.Reader, start, end []byte, reverse bool, limit int) []string {
	t.Helper()
	var out []string
	err := r.Scan(start, end, reverse, func(k, v []byte) bool {
		out = append(out, string(k)+"="+string(v))
		return limit <= 0 || len(out) < limit
	})
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	return out
}

func viewScan(t *testing.T, s kv.Store, start, end []byte, reverse bool, limit int) []string {
	t.Helper()
	var out []string
	err := s.View(context.Background(), func(r kv.Reader) error {
		out = scan(t, r, start, end, reverse, limit)
		return nil
	})
	if err != nil {
		t.Fatalf("View: %v", err)
	}
	return out
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func testGetSetDelete(t *testing.T, s kv.Store) {
	wantGet(t, s, "a", "", false)
	set(t, s, "a", "1", "b", "2")
	wantGet(t, s, "a", "1", true)
	wantGet(t, s, "b", "2", true)
	set(t, s, "a", "3")
	wantGet(t, s, "a", "3", true)
	err := s.Update(context.Background(), func(tx kv.Txn) error {
		tx.Delete([]byte("a"))
		tx.Delete([]byte("missing"))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	wantGet(t, s, "a", "", false)
	wantGet(t, s, "b", "2", true)
	wantGet(t, s, "missing", "", false)
}

func testEmptyValue(t *testing.T, s kv.Store) {
	set(t, s, "empty", "")
	err := s.View(context.Background(), func(r kv.Reader) error {
		v, err := r.Get([]byte("empty"))
		if err != nil {
			return err
		}
		if v == nil || len(v) != 0 {
			t.Errorf("Get(empty) = %#v; want non-nil empty slice", v)
		}
		v, err = r.Get([]byte("missing"))
		if v != nil || err != nil {
			t.Errorf("Get(missing) = %#v, %v; want nil, nil", v, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The same inside a transaction, for a buffered empty value.
	err = s.Update(context.Background(), func(tx kv.Txn) error {
		tx.Set([]byte("empty2"), nil)
		v, err := tx.Get([]byte("empty2"))
		if v == nil || len(v) != 0 || err != nil {
			t.Errorf("txn Get(empty2) = %#v, %v; want non-nil empty slice", v, err)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	wantGet(t, s, "empty2", "", true)
	if got, want := viewScan(t, s, nil, nil, false, 0), []string{"empty=", "empty2="}; !equal(got, want) {
		t.Errorf("Scan = %q; want %q", got, want)
	}
}

func testBinaryKeys(t *testing.T, s kv.Store) {
	keys := []string{"\x00", "\x00\x00", "\x00\xff", "a\x00", "a\x00b", "a", "\xff", "\xff\x00", "\xff\xff"}
	err := s.Update(context.Background(), func(tx kv.Txn) error {
		for i, k := range keys {
			tx.Set([]byte(k), []byte{byte(i), 0, 0xff})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		if got, _ := get(t, s, k); got != string([]byte{byte(i), 0, 0xff}) {
			t.Errorf("Get(%q) = %q", k, got)
		}
	}
	var got []string
	err = s.View(context.Background(), func(r kv.Reader) error {
		return r.Scan(nil, nil, false, func(k, _ []byte) bool {
			got = append(got, string(k))
			return true
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"\x00", "\x00\x00", "\x00\xff", "a", "a\x00", "a\x00b", "\xff", "\xff\x00", "\xff\xff"}
	if !equal(got, want) {
		t.Errorf("Scan keys = %q; want %q", got, want)
	}
	// Prefix scans around 0x00 and 0xff.
	if got := viewScan(t, s, []byte("a"), kv.PrefixEnd([]byte("a")), false, 0); len(got) != 3 {
		t.Errorf("prefix a: %q", got)
	}
	if got := viewScan(t, s, []byte("\xff"), kv.PrefixEnd([]byte("\xff")), true, 0); len(got) != 3 || got[0][:2] != "\xff\xff" {
		t.Errorf("prefix 0xff reverse: %q", got)
	}
	if got := viewScan(t, s, []byte("\x00"), []byte("\x00\x00"), false, 0); len(got) != 1 {
		t.Errorf("[0x00, 0x0000): %q", got)
	}
}

func testScan(t *testing.T, s kv.Store) {
	set(t, s, "a", "1", "b", "2", "c", "3", "d", "4", "e", "5")
	b := func(s string) []byte { return []byte(s) }
	tests := []struct {
		start, end []byte
		reverse    bool
		limit      int
		want       string
	}{
		{nil, nil, false, 0, "a=1 b=2 c=3 d=4 e=5"},
		{nil, nil, true, 0, "e=5 d=4 c=3 b=2 a=1"},
		{b("b"), b("d"), false, 0, "b=2 c=3"},
		{b("b"), b("d"), true, 0, "c=3 b=2"},
		{b("bb"), b("dd"), false, 0, "c=3 d=4"},
		{b("bb"), b("dd"), true, 0, "d=4 c=3"},
		{b("c"), nil, false, 0, "c=3 d=4 e=5"},
		{b("c"), nil, true, 0, "e=5 d=4 c=3"},
		{nil, b("c"), false, 0, "a=1 b=2"},
		{nil, b("c"), true, 0, "b=2 a=1"},
		{b(""), b("c"), true, 0, "b=2 a=1"},
		{b("c"), b("c"), false, 0, ""},
		{b("d"), b("b"), false, 0, ""},
		{b("d"), b("b"), true, 0, ""},
		{b("f"), nil, false, 0, ""},
		{nil, b("a"), true, 0, ""},
		{nil, nil, false, 2, "a=1 b=2"},
		{nil, nil, true, 2, "e=5 d=4"},
		{b("b"), b("e"), false, 1, "b=2"},
		{b("b"), b("e"), true, 1, "d=4"},
	}
	for _, tc := range tests {
		got := fmt.Sprint(viewScan(t, s, tc.start, tc.end, tc.reverse, tc.limit))
		if want := fmt.Sprint(splitNonEmpty(tc.want)); got != want {
			t.Errorf("Scan(%q, %q, reverse=%v, limit=%d) = %s; want %s", tc.start, tc.end, tc.reverse, tc.limit, got, want)
		}
	}
}

func splitNonEmpty(s string) []string {
	var out []string
	for _, f := range bytes.Fields([]byte(s)) {
		out = append(out, string(f))
	}
	return out
}

func testReadYourWrites(t *testing.T, s kv.Store) {
	set(t, s, "a", "1", "c", "3", "e", "5", "g", "7")
	err := s.Update(context.Background(), func(tx kv.Txn) error {
		tx.Set([]byte("b"), []byte("2"))  // new key between existing ones
		tx.Set([]byte("c"), []byte("33")) // overwrite
		tx.Delete([]byte("e"))            // delete existing
		tx.Delete([]byte("f"))            // delete missing
		tx.Set([]byte("h"), []byte("8"))  // new key after all
		tx.Set([]byte("0"), []byte("0"))  // new key before all
		tx.Set([]byte("x"), []byte("x"))
		tx.Delete([]byte("x")) // set then delete
		tx.Delete([]byte("g"))
		tx.Set([]byte("g"), []byte("77")) // delete then set

		for k, want := range map[string]string{"a": "1", "b": "2", "c": "33", "h": "8", "0": "0", "g": "77"} {
			if v, err := tx.Get([]byte(k)); err != nil || string(v) != want {
				t.Errorf("txn Get(%q) = %q, %v; want %q", k, v, err, want)
			}
		}
		for _, k := range []string{"e", "f", "x"} {
			if v, err := tx.Get([]byte(k)); err != nil || v != nil {
				t.Errorf("txn Get(%q) = %q, %v; want nil", k, v, err)
			}
		}
		all := []string{"0=0", "a=1", "b=2", "c=33", "g=77", "h=8"}
		if got := scan(t, tx, nil, nil, false, 0); !equal(got, all) {
			t.Errorf("txn Scan = %q; want %q", got, all)
		}
		rev := []string{"h=8", "g=77", "c=33", "b=2", "a=1", "0=0"}
		if got := scan(t, tx, nil, nil, true, 0); !equal(got, rev) {
			t.Errorf("txn reverse Scan = %q; want %q", got, rev)
		}
		if got, want := scan(t, tx, []byte("b"), []byte("g"), false, 0), []string{"b=2", "c=33"}; !equal(got, want) {
			t.Errorf("txn Scan[b,g) = %q; want %q", got, want)
		}
		if got, want := scan(t, tx, []byte("b"), []byte("h"), true, 0), []string{"g=77", "c=33", "b=2"}; !equal(got, want) {
			t.Errorf("txn reverse Scan[b,h) = %q; want %q", got, want)
		}
		if got, want := scan(t, tx, nil, nil, false, 3), all[:3]; !equal(got, want) {
			t.Errorf("txn Scan limit 3 = %q; want %q", got, want)
		}
		if got, want := scan(t, tx, nil, nil, true, 2), rev[:2]; !equal(got, want) {
			t.Errorf("txn reverse Scan limit 2 = %q; want %q", got, want)
		}
		// A View running alongside does not see the uncommitted writes.
		if v, ok := get(t, s, "b"); ok {
			t.Errorf("View sees uncommitted b=%q", v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"0=0", "a=1", "b=2", "c=33", "g=77", "h=8"}
	if got := viewScan(t, s, nil, nil, false, 0); !equal(got, want) {
		t.Errorf("after commit Scan = %q; want %q", got, want)
	}
}

func testErrorDiscardsWrites(t *testing.T, s kv.Store) {
	set(t, s, "a", "1", "b", "2")
	errBoom := errors.New("boom")
	err := s.Update(context.Background(), func(tx kv.Txn) error {
		tx.Set([]byte("a"), []byte("changed"))
		tx.Delete([]byte("b"))
		tx.Set([]byte("c"), []byte("new"))
		return errBoom
	})
	if err != errBoom {
		t.Fatalf("Update = %v; want the error fn returned, unchanged", err)
	}
	if got, want := viewScan(t, s, nil, nil, false, 0), []string{"a=1", "b=2"}; !equal(got, want) {
		t.Errorf("after failed Update Scan = %q; want %q", got, want)
	}
	// The store is still usable.
	set(t, s, "c", "3")
	wantGet(t, s, "c", "3", true)
}

func testViewSnapshot(t *testing.T, s kv.Store) {
	set(t, s, "a", "1", "b", "2")
	inView := make(chan struct{})
	committed := make(chan error)
	go func() {
		<-inView
		committed <- s.Update(context.Background(), func(tx kv.Txn) error {
			tx.Set([]byte("a"), []byte("changed"))
			tx.Delete([]byte("b"))
			tx.Set([]byte("c"), []byte("3"))
			return nil
		})
	}()
	err := s.View(context.Background(), func(r kv.Reader) error {
		if v, _ := r.Get([]byte("a")); string(v) != "1" {
			t.Errorf("before commit a = %q", v)
		}
		close(inView)
		if err := <-committed; err != nil {
			t.Errorf("concurrent Update: %v", err)
		}
		if v, _ := r.Get([]byte("a")); string(v) != "1" {
			t.Errorf("View sees later commit: a = %q", v)
		}
		if v, _ := r.Get([]byte("c")); v != nil {
			t.Errorf("View sees later commit: c = %q", v)
		}
		if got, want := scan(t, r, nil, nil, false, 0), []string{"a=1", "b=2"}; !equal(got, want) {
			t.Errorf("View Scan after later commit = %q; want %q", got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := viewScan(t, s, nil, nil, false, 0), []string{"a=changed", "c=3"}; !equal(got, want) {
		t.Errorf("new View Scan = %q; want %q", got, want)
	}
}

// readInt reads a decimal counter, 0 if missing.
func readInt(r kv.Reader, key string) (int, error) {
	v, err := r.Get([]byte(key))
	if err != nil || v == nil {
		return 0, err
	}
	var n int
	_, err = fmt.Sscan(string(v), &n)
	return n, err
}

func writeInt(tx kv.Txn, key string, n int) {
	tx.Set([]byte(key), []byte(fmt.Sprint(n)))
}

// inParallel runs fn(0), …, fn(n-1) in goroutines, rounds times each,
// and fails t with the first error (a goroutine stops at its own first).
func inParallel(t *testing.T, n, rounds int, fn func(g, round int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for g := range n {
		wg.Go(func() {
			for r := range rounds {
				if err := fn(g, r); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func testConcurrentCounter(t *testing.T, s kv.Store) {
	const workers, each = 8, 200
	inParallel(t, workers, each, func(_, _ int) error {
		return s.Update(context.Background(), func(tx kv.Txn) error {
			n, err := readInt(tx, "counter")
			if err != nil {
				return err
			}
			writeInt(tx, "counter", n+1)
			return nil
		})
	})
	if got, _ := get(t, s, "counter"); got != fmt.Sprint(workers*each) {
		t.Errorf("counter = %s; want %d", got, workers*each)
	}
}

func testBankTransfers(t *testing.T, s kv.Store) {
	const accounts, initial, workers, each = 10, 1000, 6, 100
	acct := func(i int) string { return fmt.Sprintf("acct/%02d", i) }
	err := s.Update(context.Background(), func(tx kv.Txn) error {
		for i := range accounts {
			writeInt(tx, acct(i), initial)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	total := func(r kv.Reader) (int, error) {
		sum := 0
		var err error
		scanErr := r.Scan([]byte("acct/"), kv.PrefixEnd([]byte("acct/")), false, func(_, v []byte) bool {
			var n int
			_, err = fmt.Sscan(string(v), &n)
			sum += n
			return err == nil
		})
		return sum, errors.Join(err, scanErr)
	}

	var wg sync.WaitGroup
	errs := make(chan error, workers+1)
	stop := make(chan struct{})
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				from, to := (w+i)%accounts, (w*7+i*3+1)%accounts
				if from == to {
					to = (to + 1) % accounts
				}
				err := s.Update(context.Background(), func(tx kv.Txn) error {
					a, err := readInt(tx, acct(from))
					if err != nil {
						return err
					}
					b, err := readInt(tx, acct(to))
					if err != nil {
						return err
					}
					amount := (i % 17) + 1
					writeInt(tx, acct(from), a-amount)
					writeInt(tx, acct(to), b+amount)
					// The transaction sees its own writes in the sum.
					if sum, err := total(tx); err != nil || sum != accounts*initial {
						return fmt.Errorf("sum inside txn = %d, %v", sum, err)
					}
					return nil
				})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	// A concurrent auditor: every View must see the invariant.
	var auditor sync.WaitGroup
	auditor.Add(1)
	go func() {
		defer auditor.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			err := s.View(context.Background(), func(r kv.Reader) error {
				sum, err := total(r)
				if err == nil && sum != accounts*initial {
					err = fmt.Errorf("auditor saw sum %d", sum)
				}
				return err
			})
			if err != nil {
				errs <- err
				return
			}
		}
	}()
	wg.Wait()
	close(stop)
	auditor.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	err = s.View(context.Background(), func(r kv.Reader) error {
		sum, err := total(r)
		if err == nil && sum != accounts*initial {
			t.Errorf("final sum = %d; want %d", sum, accounts*initial)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func testCancelledContext(t *testing.T, s kv.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ran := false
	err := s.Update(ctx, func(tx kv.Txn) error {
		ran = true
		tx.Set([]byte("a"), []byte("1"))
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Update with cancelled context = %v; want context.Canceled", err)
	}
	if ran {
		t.Errorf("Update ran fn with a cancelled context")
	}
	wantGet(t, s, "a", "", false)
	if err := s.View(ctx, func(kv.Reader) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("View with cancelled context = %v; want context.Canceled", err)
	}
}

func testValuesAreCopies(t *testing.T, s kv.Store) {
	key, value := []byte("k"), []byte("value")
	err := s.Update(context.Background(), func(tx kv.Txn) error {
		tx.Set(key, value)
		key[0], value[0] = 'X', 'X' // the store copied both
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	wantGet(t, s, "k", "value", true)
	err = s.View(context.Background(), func(r kv.Reader) error {
		v, err := r.Get([]byte("k"))
		if err != nil {
			return err
		}
		v[0] = 'X'
		v, err = r.Get([]byte("k"))
		if string(v) != "value" {
			t.Errorf("modifying a Get result changed the store: %q", v)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// recv waits for want on c.
func recv(t *testing.T, c <-chan string, name, want string) {
	t.Helper()
	select {
	case got := <-c:
		if got != want {
			t.Errorf("subscriber %s received %.20q; want %.20q", name, got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("subscriber %s received nothing in 10s; want %.20q", name, want)
	}
}

// testNotifier runs only for stores that implement kv.Notifier. It relies
// on notifications from one sender arriving in the order sent, which the
// contract does not promise but every backend provides.
func testNotifier(t *testing.T, s kv.Store) {
	n, ok := s.(kv.Notifier)
	if !ok {
		t.Skip("the store does not implement kv.Notifier")
	}
	ctx := context.Background()
	a1, stopA1 := n.Subscribe("kvtest_a")
	defer stopA1()
	a2, stopA2 := n.Subscribe("kvtest_a")
	defer stopA2()
	b, stopB := n.Subscribe("kvtest_b")
	defer stopB()
	notify := func(channel, payload string) {
		t.Helper()
		if err := n.Notify(ctx, channel, payload); err != nil {
			t.Fatalf("Notify(%s): %v", channel, err)
		}
	}
	payloads := []string{"1", "", strings.Repeat("x", 1000)}
	for _, p := range payloads {
		notify("kvtest_a", p)
	}
	notify("kvtest_b", "2")
	for _, p := range payloads {
		recv(t, a1, "a1", p)
		recv(t, a2, "a2", p)
	}
	recv(t, b, "b", "2") // and not a's, which were sent before

	// An ended subscription receives nothing more; ending it twice is
	// harmless.
	stopA2()
	stopA2()
	notify("kvtest_a", "3")
	notify("kvtest_b", "4")
	recv(t, b, "b", "4")
	recv(t, a1, "a1", "3")
	select {
	case p := <-a2:
		t.Errorf("ended subscription received %q", p)
	default:
	}
}

func testClose(t *testing.T, s kv.Store) {
	set(t, s, "a", "1")
	if s.Name() == "" {
		t.Error("Name is empty")
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	ctx := context.Background()
	if err := s.Update(ctx, func(kv.Txn) error { return nil }); !errors.Is(err, kv.ErrClosed) {
		t.Errorf("Update after Close = %v; want ErrClosed", err)
	}
	if err := s.View(ctx, func(kv.Reader) error { return nil }); !errors.Is(err, kv.ErrClosed) {
		t.Errorf("View after Close = %v; want ErrClosed", err)
	}
	if err := s.Sync(ctx); !errors.Is(err, kv.ErrClosed) {
		t.Errorf("Sync after Close = %v; want ErrClosed", err)
	}
	if err := s.Close(); !errors.Is(err, kv.ErrClosed) {
		t.Errorf("second Close = %v; want ErrClosed", err)
	}
}

func testPrefixEnd(t *testing.T) {
	tests := []struct{ in, want []byte }{
		{[]byte(""), nil},
		{[]byte("a"), []byte("b")},
		{[]byte("abc"), []byte("abd")},
		{[]byte("a\xff"), []byte("b")},
		{[]byte("a\xff\xff"), []byte("b")},
		{[]byte("\x00"), []byte("\x01")},
		{[]byte("a\x00"), []byte("a\x01")},
		{[]byte("\xfe\xff"), []byte("\xff")},
		{[]byte("\xff"), nil},
		{[]byte("\xff\xff\xff"), nil},
	}
	for _, tc := range tests {
		in := append([]byte(nil), tc.in...)
		got := kv.PrefixEnd(in)
		if !bytes.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
			t.Errorf("PrefixEnd(%q) = %q; want %q", tc.in, got, tc.want)
		}
		if !bytes.Equal(in, tc.in) {
			t.Errorf("PrefixEnd modified its argument: %q", in)
		}
	}
}

// testFirsts checks kv.Firsts (a store's FirstReader, or the Scan
// fallback): the first pair of each range, with the transaction's own
// buffered writes merged in.
func testFirsts(t *testing.T, s kv.Store) {
	set(t, s, "a1", "1", "a2", "2", "b1", "3", "c", "4")
	r := func(start, end string) kv.Range {
		rg := kv.Range{Start: []byte(start)}
		if end != "" {
			rg.End = []byte(end)
		}
		return rg
	}
	show := func(ps []kv.Pair) string {
		var out []string
		for _, p := range ps {
			if p.Key == nil {
				out = append(out, "-")
			} else {
				out = append(out, string(p.Key)+"="+string(p.Value))
			}
		}
		return strings.Join(out, " ")
	}
	ranges := []kv.Range{r("a", "b"), r("a2", "a3"), r("b", "c"), r("bz", "c"), r("c", ""), r("d", "e"), r("a3", "b1")}
	want := "a1=1 a2=2 b1=3 - c=4 - -"
	err := s.View(context.Background(), func(rd kv.Reader) error {
		ps, err := kv.Firsts(rd, ranges)
		if err != nil {
			return err
		}
		if got := show(ps); got != want {
			t.Errorf("Firsts in a View = %q, want %q", got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	discarded(t, s, func(tx kv.Txn) error {
		tx.Delete([]byte("a1"))
		tx.Set([]byte("bz1"), []byte("5"))
		ps, err := kv.Firsts(tx, ranges)
		if err != nil {
			return err
		}
		if got, want := show(ps), "a2=2 a2=2 b1=3 bz1=5 c=4 - -"; got != want {
			t.Errorf("Firsts with buffered writes = %q, want %q", got, want)
		}
		return nil
	})

	// Follow: the value of the first pair names a second range.
	set(t, s, "e1", "#k1", "e2", "#", "tk1", "found", "tk10", "other")
	fol := &kv.Follow{Offset: 1, Length: 2, Prefix: []byte("t"), EndSuffix: []byte{0xff}}
	fr := []kv.Range{{Start: []byte("e1"), End: []byte("e1\x00"), Follow: fol},
		{Start: []byte("e2"), End: []byte("e2\x00"), Follow: fol},
		{Start: []byte("e3"), End: []byte("e3\x00"), Follow: fol},
		r("c", "d")}
	showF := func(ps []kv.Pair) string {
		var out []string
		for _, p := range ps {
			s := show([]kv.Pair{p})
			if p.Followed != nil {
				s += ">" + show([]kv.Pair{*p.Followed})
			}
			out = append(out, s)
		}
		return strings.Join(out, " ")
	}
	wantF := "e1=#k1>tk1=found e2=#>- ->- c=4"
	check := func(rd kv.Reader, what string) error {
		ps, err := kv.Firsts(rd, fr)
		if err != nil {
			return err
		}
		if got := showF(ps); got != wantF {
			t.Errorf("Firsts with Follow %s = %q, want %q", what, got, wantF)
		}
		return nil
	}
	if err := s.View(context.Background(), func(rd kv.Reader) error { return check(rd, "in a View") }); err != nil {
		t.Fatal(err)
	}
	discarded(t, s, func(tx kv.Txn) error {
		tx.Set([]byte("zz"), []byte("1")) // buffered writes: the fallback path
		if err := check(tx, "with buffered writes"); err != nil {
			return err
		}
		return nil
	})
	// Buffered writes inside a followed range, over a followed key, and at
	// the first possible key of a range.
	discarded(t, s, func(tx kv.Txn) error {
		tx.Set([]byte("tk0"), []byte("new")) // sorts before tk1
		tx.Delete([]byte("tk1"))
		tx.Set([]byte("c"), []byte("9"))
		tx.Set([]byte("e2"), []byte("#k1"))
		ps, err := kv.Firsts(tx, fr)
		if err != nil {
			return err
		}
		if got, want := showF(ps), "e1=#k1>tk10=other e2=#k1>tk10=other ->- c=9"; got != want {
			t.Errorf("Firsts with Follow over buffered writes = %q, want %q", got, want)
		}
		tx.Delete([]byte("tk10"))
		tx.Delete([]byte("tk0"))
		ps, err = kv.Firsts(tx, fr[:1])
		if err != nil {
			return err
		}
		if got, want := showF(ps), "e1=#k1>-"; got != want {
			t.Errorf("Firsts with Follow of deleted keys = %q, want %q", got, want)
		}
		return nil
	})
}

// testFirstsAndWrite checks kv.FirstsAndWrite, through the store's
// BlindWriter ability if it has one: the reads see the store before the
// writes, the writes commit together, a bad range writes nothing, and
// concurrent calls writing one key all commit.
func testFirstsAndWrite(t *testing.T, s kv.Store) {
	ctx := context.Background()
	set(t, s, "a1", "1", "b1", "2", "e1", "#k1", "tk1", "found")
	fol := &kv.Follow{Offset: 1, Length: 2, Prefix: []byte("t"), EndSuffix: []byte{0xff}}
	ranges := []kv.Range{
		{Start: []byte("a"), End: []byte("b")},
		{Start: []byte("b"), End: []byte("c")},
		{Start: []byte("e1"), End: []byte("e1\x00"), Follow: fol},
		{Start: []byte("x"), End: []byte("y")},
	}
	writes := []kv.Write{
		{Key: []byte("a1"), Value: []byte("9")},
		{Key: []byte("c1"), Value: nil}, // an empty value
		{Key: []byte("b1"), Delete: true},
		{Key: []byte("tk1"), Value: []byte("changed")},
	}
	show := func(ps []kv.Pair) string {
		var out []string
		for _, p := range ps {
			x := "-"
			if p.Key != nil {
				x = string(p.Key) + "=" + string(p.Value)
			}
			if p.Followed != nil {
				if p.Followed.Key == nil {
					x += ">-"
				} else {
					x += ">" + string(p.Followed.Key) + "=" + string(p.Followed.Value)
				}
			}
			out = append(out, x)
		}
		return strings.Join(out, " ")
	}
	ps, err := kv.FirstsAndWrite(ctx, s, ranges, writes)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := show(ps), "a1=1 b1=2 e1=#k1>tk1=found -"; got != want {
		t.Errorf("FirstsAndWrite read %q, want %q (the store before its writes)", got, want)
	}
	wantGet(t, s, "a1", "9", true)
	wantGet(t, s, "b1", "", false)
	wantGet(t, s, "c1", "", true)
	wantGet(t, s, "tk1", "changed", true)
	// The same writes again: harmless, and the reads see the first ones.
	ps, err = kv.FirstsAndWrite(ctx, s, ranges, writes)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := show(ps), "a1=9 - e1=#k1>tk1=changed -"; got != want {
		t.Errorf("FirstsAndWrite again read %q, want %q", got, want)
	}

	for _, bad := range []kv.Range{{Start: []byte("x")}, {Start: []byte("y"), End: []byte("x")}} {
		_, err := kv.FirstsAndWrite(ctx, s, []kv.Range{bad}, []kv.Write{{Key: []byte("zz"), Value: []byte("1")}})
		if err == nil {
			t.Errorf("FirstsAndWrite of range [%q, %q): no error", bad.Start, bad.End)
		}
	}
	wantGet(t, s, "zz", "", false)

	// Blind writes of one key from many goroutines, beside updates that
	// read and write it: every call commits (conflicts run again).
	const workers, rounds = 6, 15
	inParallel(t, 2*workers, rounds, func(g, i int) error {
		if g%2 == 0 {
			key := fmt.Sprintf("w%d-%d", g/2, i)
			_, err := kv.FirstsAndWrite(ctx, s, []kv.Range{{Start: []byte("w"), End: []byte("w\x00")}},
				[]kv.Write{{Key: []byte("w"), Value: []byte(key)}, {Key: []byte(key), Value: []byte("1")}})
			return err
		}
		return s.Update(ctx, func(tx kv.Txn) error {
			v, err := tx.Get([]byte("w"))
			if err != nil {
				return err
			}
			tx.Set([]byte("w"), append(v, '+'))
			return nil
		})
	})
	for w := range workers {
		for i := range rounds {
			wantGet(t, s, fmt.Sprintf("w%d-%d", w, i), "1", true)
		}
	}

	testTouch(t, s)
}

// testTouch checks kv.Write.Touch: it leaves the values as they are, and
// it orders a blind write against a concurrent update that deletes a
// touched pair. Each round, a FirstsAndWrite reads p (present) and
// writes a mark m, touching p; an Update reads the marks and, finding
// none, deletes p. Both may commit only if the update saw the mark or the
// blind write saw p gone: never "p read, mark written, p deleted anyway".
func testTouch(t *testing.T, s kv.Store) {
	ctx := context.Background()
	set(t, s, "touch/p1", "v1", "touch/p2", "v2")
	if _, err := kv.FirstsAndWrite(ctx, s, []kv.Range{{Start: []byte("touch/"), End: []byte("touch0")}},
		[]kv.Write{{Key: []byte("touch/"), Touch: true}}); err != nil {
		t.Fatal(err)
	}
	wantGet(t, s, "touch/p1", "v1", true)
	wantGet(t, s, "touch/p2", "v2", true)

	for round := range 60 {
		p := []byte(fmt.Sprintf("race%d/p", round))
		mark := []byte(fmt.Sprintf("race%d/m", round))
		set(t, s, string(p), "x")
		var sawP, deleted bool
		var wg sync.WaitGroup
		var errA, errB error
		wg.Add(2)
		go func() {
			defer wg.Done()
			ps, err := kv.FirstsAndWrite(ctx, s, []kv.Range{{Start: p, End: kv.PrefixEnd(p)}},
				[]kv.Write{{Key: mark, Value: []byte("1")}, {Key: p, Touch: true}})
			errA = err
			sawP = err == nil && ps[0].Key != nil
		}()
		go func() {
			defer wg.Done()
			errB = s.Update(ctx, func(tx kv.Txn) error {
				deleted = false
				v, err := tx.Get(mark)
				if err != nil || v != nil {
					return err
				}
				tx.Delete(p)
				deleted = true
				return nil
			})
		}()
		wg.Wait()
		if errA != nil || errB != nil {
			t.Fatalf("round %d: %v, %v", round, errA, errB)
		}
		if sawP && deleted {
			t.Fatalf("round %d: the blind write read p and wrote its mark, and the update deleted p without seeing the mark", round)
		}
	}
}

// testWriteIf checks kv.WriteIf, through the store's GuardedWriter
// ability if it has one: guards that hold let the writes commit together;
// one that does not (another value, another first key, a key where none
// is wanted or none where one is) fails with kv.ErrGuard and writes
// nothing; a nil value equals an empty one; no guards make an atomic
// batch, no writes a check; a bad range is refused and writes nothing.
func testWriteIf(t *testing.T, s kv.Store) {
	ctx := context.Background()
	set(t, s, "a1", "1", "b1", "2", "e", "")
	if err := s.Update(ctx, func(tx kv.Txn) error { tx.Set([]byte("f"), nil); return nil }); err != nil {
		t.Fatal(err)
	}
	rg := func(start, end string) kv.Range { return kv.Range{Start: []byte(start), End: []byte(end)} }
	one := func(k string) kv.Range { return rg(k, k+"\x00") }
	pair := func(k, v string) kv.Pair { return kv.Pair{Key: []byte(k), Value: []byte(v)} }
	holding := []kv.Guard{
		{Range: rg("a", "b"), Want: pair("a1", "1")},
		{Range: one("b1"), Want: pair("b1", "2")},
		{Range: rg("c", "d")},                                               // empty
		{Range: one("e"), Want: kv.Pair{Key: []byte("e")}},                  // nil wants empty
		{Range: one("f"), Want: kv.Pair{Key: []byte("f"), Value: []byte{}}}, // empty wants nil
	}
	writes := []kv.Write{
		{Key: []byte("a1"), Value: []byte("9")},
		{Key: []byte("b1"), Delete: true},
		{Key: []byte("w"), Value: []byte("x")},
	}
	unchanged := func(what string) {
		t.Helper()
		for _, p := range [][2]string{{"a1", "1"}, {"b1", "2"}} {
			if got, _ := get(t, s, p[0]); got != p[1] {
				t.Errorf("%s: %s = %q, want %q (nothing written)", what, p[0], got, p[1])
			}
		}
		if got, ok := get(t, s, "w"); ok {
			t.Errorf("%s: w = %q, want none (nothing written)", what, got)
		}
	}
	for _, tc := range []struct {
		name  string
		guard kv.Guard
	}{
		{"another value", kv.Guard{Range: one("a1"), Want: pair("a1", "2")}},
		{"a key where none is wanted", kv.Guard{Range: rg("a", "b")}},
		{"none where a key is wanted", kv.Guard{Range: rg("c", "d"), Want: pair("c1", "")}},
		{"another first key", kv.Guard{Range: rg("a", "c"), Want: pair("b1", "2")}},
		{"a value where an empty one is wanted", kv.Guard{Range: one("b1"), Want: kv.Pair{Key: []byte("b1")}}},
	} {
		guards := append(slices.Clone(holding), tc.guard)
		if err := kv.WriteIf(ctx, s, guards, writes); !errors.Is(err, kv.ErrGuard) {
			t.Errorf("WriteIf with a guard on %s = %v, want kv.ErrGuard", tc.name, err)
		}
		unchanged(tc.name)
		if err := kv.WriteIf(ctx, s, []kv.Guard{tc.guard}, nil); !errors.Is(err, kv.ErrGuard) {
			t.Errorf("WriteIf of no writes with a guard on %s = %v, want kv.ErrGuard", tc.name, err)
		}
	}
	for _, bad := range []kv.Range{
		{Start: []byte("a")},                   // unbounded
		{Start: []byte("b"), End: []byte("b")}, // empty
		{Start: []byte("c"), End: []byte("a")},
		{Start: []byte("e"), End: []byte("f"), Follow: &kv.Follow{Length: 1}},
	} {
		err := kv.WriteIf(ctx, s, append(slices.Clone(holding), kv.Guard{Range: bad}), writes)
		if err == nil || errors.Is(err, kv.ErrGuard) {
			t.Errorf("WriteIf with a guard on [%q, %q) (Follow %v) = %v, want a refusal", bad.Start, bad.End, bad.Follow != nil, err)
		}
		unchanged("a bad range")
	}

	if err := kv.WriteIf(ctx, s, holding, nil); err != nil {
		t.Fatalf("WriteIf of no writes with guards that hold: %v", err)
	}
	if err := kv.WriteIf(ctx, s, holding, writes); err != nil {
		t.Fatalf("WriteIf with guards that hold: %v", err)
	}
	wantGet(t, s, "a1", "9", true)
	wantGet(t, s, "b1", "", false)
	wantGet(t, s, "w", "x", true)
	// The same again: the guards no longer hold.
	if err := kv.WriteIf(ctx, s, holding, []kv.Write{{Key: []byte("w"), Value: []byte("y")}}); !errors.Is(err, kv.ErrGuard) {
		t.Errorf("WriteIf with guards that held before = %v, want kv.ErrGuard", err)
	}
	wantGet(t, s, "w", "x", true)

	// No guards: an atomic batch, whose last write of a key wins.
	if err := kv.WriteIf(ctx, s, nil, nil); err != nil {
		t.Errorf("WriteIf of nothing: %v", err)
	}
	err := kv.WriteIf(ctx, s, nil, []kv.Write{
		{Key: []byte("n1"), Value: []byte("1")}, {Key: []byte("n1"), Delete: true},
		{Key: []byte("n2"), Delete: true}, {Key: []byte("n2"), Value: []byte("2")},
		{Key: []byte("w"), Value: nil},
	})
	if err != nil {
		t.Fatalf("WriteIf without guards: %v", err)
	}
	wantGet(t, s, "n1", "", false)
	wantGet(t, s, "n2", "2", true)
	wantGet(t, s, "w", "", true)
	// A guarded write of a key the guard wants, and one deleting it.
	err = kv.WriteIf(ctx, s, []kv.Guard{{Range: one("w"), Want: pair("w", "")}}, []kv.Write{{Key: []byte("w"), Value: []byte("z")}})
	if err != nil {
		t.Fatalf("WriteIf of the wanted key: %v", err)
	}
	wantGet(t, s, "w", "z", true)
	err = kv.WriteIf(ctx, s, []kv.Guard{{Range: one("w"), Want: pair("w", "z")}}, []kv.Write{{Key: []byte("w"), Delete: true}})
	if err != nil {
		t.Fatalf("WriteIf deleting the wanted key: %v", err)
	}
	wantGet(t, s, "w", "", false)
}

// testWriteIfCounter increments one counter from many goroutines, each
// reading it in a View and writing it with kv.WriteIf guarded on what it
// read, again after kv.ErrGuard, while another goroutine moves the
// counter's value to a bank and deletes it now and then. No increment is
// lost or undone: counter and bank add up to the increments.
func testWriteIfCounter(t *testing.T, s kv.Store) {
	ctx := context.Background()
	const workers, rounds = 6, 15
	key := []byte("counter")
	var bg sync.WaitGroup
	done := make(chan struct{})
	errs := make(chan error, 1)
	bg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
			err := s.Update(ctx, func(tx kv.Txn) error {
				n, err := readInt(tx, "counter")
				if err != nil || n == 0 {
					return err
				}
				b, err := readInt(tx, "bank")
				if err != nil {
					return err
				}
				writeInt(tx, "bank", b+n)
				tx.Delete(key)
				return nil
			})
			if err != nil {
				errs <- err
				return
			}
		}
	})
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			close(done)
			bg.Wait()
		}
	}
	defer stop() // also if inParallel fails t
	inParallel(t, workers, rounds, func(_, _ int) error {
		for {
			var v []byte
			if err := s.View(ctx, func(r kv.Reader) (err error) { v, err = r.Get(key); return err }); err != nil {
				return err
			}
			n := 0
			want := kv.Pair{}
			if v != nil {
				if _, err := fmt.Sscan(string(v), &n); err != nil {
					return err
				}
				want = kv.Pair{Key: key, Value: v}
			}
			guard := kv.Guard{Range: kv.Range{Start: key, End: append(slices.Clone(key), 0)}, Want: want}
			err := kv.WriteIf(ctx, s, []kv.Guard{guard}, []kv.Write{{Key: key, Value: []byte(fmt.Sprint(n + 1))}})
			if !errors.Is(err, kv.ErrGuard) {
				return err
			}
		}
	})
	stop()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	n, _ := get(t, s, "counter")
	b, _ := get(t, s, "bank")
	var cn, bn int
	fmt.Sscan(n, &cn)
	fmt.Sscan(b, &bn)
	if cn+bn != workers*rounds {
		t.Errorf("counter %d + bank %d = %d, want %d increments", cn, bn, cn+bn, workers*rounds)
	}
}

// discarded runs fn in an Update that is rolled back after it.
func discarded(t *testing.T, s kv.Store, fn func(tx kv.Txn) error) {
	t.Helper()
	discard := errors.New("discard")
	err := s.Update(context.Background(), func(tx kv.Txn) error {
		if err := fn(tx); err != nil {
			return err
		}
		return discard
	})
	if !errors.Is(err, discard) {
		t.Fatal(err)
	}
}

// testSetAfterConcurrentDelete: T1 reads k, T2 deletes k and commits, T1
// then writes k. Both wrote k, so they must not both commit as they ran:
// T1 must re-run and find k gone (or, in a store that runs one
// transaction at a time, T2 runs after T1). Either way k ends absent.
func testSetAfterConcurrentDelete(t *testing.T, s kv.Store) {
	ctx := context.Background()
	set(t, s, "k", "1", "k-old", "o")
	deleted := make(chan struct{})
	go func() {
		defer close(deleted)
		if err := s.Update(ctx, func(tx kv.Txn) error { tx.Delete([]byte("k")); return nil }); err != nil {
			t.Error(err)
		}
	}()
	first := true
	err := s.Update(ctx, func(tx kv.Txn) error {
		v, err := tx.Get([]byte("k"))
		if err != nil {
			return err
		}
		if first {
			first = false
			// Let the delete commit first where the store allows it; a
			// store that serializes transactions runs it after this one.
			select {
			case <-deleted:
			case <-time.After(300 * time.Millisecond):
			}
		}
		if v != nil {
			tx.Set([]byte("k"), append(v, '+'))
		}
		// Writes of other kinds in the same commit (a store may send
		// them together) do not hide the conflict.
		tx.Set([]byte("k-new"), []byte("n"))
		tx.Delete([]byte("k-old"))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	<-deleted
	if v, ok := get(t, s, "k"); ok {
		t.Fatalf("k = %q: a write based on a read of k committed over a concurrent delete of k", v)
	}
	wantGet(t, s, "k-new", "n", true)
	wantGet(t, s, "k-old", "", false)
}

// testUpdateExclusive: kv.UpdateExclusive creates missing lock keys with an
// empty value; exclusive transactions and plain ones that write the locked
// keys never lose each other's updates; and exclusive transactions are
// not starved by a stream of small ones writing the locked keys.
func testUpdateExclusive(t *testing.T, s kv.Store) {
	ctx := context.Background()
	err := kv.UpdateExclusive(ctx, s, [][]byte{[]byte("lk1"), []byte("lk0")}, func(tx kv.Txn) error {
		for _, k := range []string{"lk0", "lk1"} {
			v, err := tx.Get([]byte(k))
			if err != nil {
				return err
			}
			if v == nil || len(v) != 0 {
				return fmt.Errorf("lock key %s = %q, want created empty", k, v)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	set(t, s, "xcount", "0")
	const writers, exclusives = 4, 30
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	plain := 0
	errs := make(chan error, writers+1)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				// Each writer bumps its own key and the shared one.
				err := s.Update(ctx, func(tx kv.Txn) error {
					n, err := readInt(tx, "xcount")
					if err != nil {
						return err
					}
					writeInt(tx, "xcount", n+1)
					tx.Set([]byte(fmt.Sprint("lk", w%2)), []byte("w"))
					return nil
				})
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				plain++
				mu.Unlock()
			}
		}()
	}
	for range exclusives {
		err := kv.UpdateExclusive(ctx, s, [][]byte{[]byte("lk0"), []byte("lk1"), []byte("xcount")}, func(tx kv.Txn) error {
			n, err := readInt(tx, "xcount")
			if err != nil {
				return err
			}
			writeInt(tx, "xcount", n+1000)
			return nil
		})
		if err != nil {
			errs <- fmt.Errorf("UpdateExclusive: %w", err)
			break
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got, _ := get(t, s, "xcount"); got != fmt.Sprint(plain+1000*exclusives) {
		t.Errorf("xcount = %s; want %d", got, plain+1000*exclusives)
	}
}

// recorder is a CommitObserver that checks the call pairs and, at each
// call, whether the commit's first write is visible yet.
type recorder struct {
	s       kv.Store
	mu      sync.Mutex
	inCall  bool
	commits [][]kv.Write
	errs    []string
}

func (r *recorder) visible(ws []kv.Write) bool {
	var v []byte
	_ = r.s.View(context.Background(), func(rd kv.Reader) (err error) {
		v, err = rd.Get(ws[0].Key)
		return err
	})
	return v != nil
}

func (r *recorder) Committing(ws []kv.Write) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inCall {
		r.errs = append(r.errs, "Committing while another commit is between its calls")
	}
	r.inCall = true
	if !ws[0].Delete && r.visible(ws) {
		r.errs = append(r.errs, "writes visible at Committing")
	}
}

func (r *recorder) Committed(ws []kv.Write, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.inCall || !ok {
		r.errs = append(r.errs, fmt.Sprintf("Committed without Committing, or failed (ok %v)", ok))
	}
	r.inCall = false
	if !ws[0].Delete && !r.visible(ws) {
		r.errs = append(r.errs, "writes not visible at Committed")
	}
	c := make([]kv.Write, len(ws))
	for i, w := range ws {
		c[i] = kv.Write{Key: bytes.Clone(w.Key), Value: bytes.Clone(w.Value), Delete: w.Delete}
	}
	r.commits = append(r.commits, c)
}

// testObserve: a kv.Observable store reports each commit's writes, around
// the moment they become visible, one commit at a time; nothing for a
// transaction that failed or wrote nothing; nothing after stop.
func testObserve(t *testing.T, s kv.Store) {
	ob, ok := s.(kv.Observable)
	if !ok {
		t.Skip("not observable")
	}
	r := &recorder{s: s}
	stop, ok := ob.Observe(r)
	if !ok {
		t.Skip("not observable")
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := fmt.Appendf(nil, "k%d", i)
			_ = s.Update(ctx, func(tx kv.Txn) error {
				tx.Set(k, []byte("v"))
				tx.Set(append(k, 'x'), []byte("w"))
				return nil
			})
			_ = s.Update(ctx, func(tx kv.Txn) error { tx.Delete(append(k, 'x')); return nil })
		}()
	}
	wg.Wait()
	_ = s.Update(ctx, func(tx kv.Txn) error { return nil })
	_ = s.Update(ctx, func(tx kv.Txn) error { tx.Set([]byte("z"), nil); return errors.New("abort") })
	stop()
	_ = s.Update(ctx, func(tx kv.Txn) error { tx.Set([]byte("after"), []byte("v")); return nil })
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.errs {
		t.Error(e)
	}
	if len(r.commits) != 16 {
		t.Fatalf("%d commits observed, want 16", len(r.commits))
	}
	sets, dels := 0, 0
	for _, ws := range r.commits {
		for _, w := range ws {
			switch {
			case w.Delete && len(w.Key) == 3 && w.Key[2] == 'x':
				dels++
			case !w.Delete && len(w.Key) == 2 && string(w.Value) == "v",
				!w.Delete && len(w.Key) == 3 && string(w.Value) == "w":
				sets++
			default:
				t.Errorf("unexpected write %+v", w)
			}
		}
	}
	if sets != 16 || dels != 8 {
		t.Fatalf("%d sets and %d deletes observed, want 16 and 8", sets, dels)
	}
}
