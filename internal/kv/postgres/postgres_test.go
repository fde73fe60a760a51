package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/kv/kvtest"
	"github.com/cairnfs/cairn/internal/kv/postgres"
	"github.com/cairnfs/cairn/internal/testenv/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testLogger sends the store's log to t.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tbWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tbWriter struct{ tb testing.TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.tb.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func open(t testing.TB, url string, opts postgres.Options) *postgres.Store {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	s, err := postgres.Open(context.Background(), url, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

// openClosed opens a store that t closes when it ends.
func openClosed(t testing.TB, url string, opts postgres.Options) *postgres.Store {
	t.Helper()
	s := open(t, url, opts)
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	srv := pgtest.Shared(t)
	kvtest.Run(t, func(t *testing.T) kv.Store { return open(t, srv.NewDatabase(t), postgres.Options{}) })
}

func put(t testing.TB, s kv.Store, kvs ...string) {
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

func lookup(t testing.TB, s kv.Store, key string) string {
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
	return string(v)
}

// waitValue waits up to 10 s for key to hold want in s, which what (a
// write whose outcome the client could not learn) should have made.
func waitValue(t testing.TB, s kv.Store, key, want, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for lookup(t, s, key) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		opts postgres.Options
		ok   bool
	}{
		{postgres.Options{}, true},
		{postgres.Options{MaxConns: 4, OutageTimeout: time.Second, Table: "fs_1"}, true},
		{postgres.Options{MaxConns: -1}, false},
		{postgres.Options{OutageTimeout: -time.Second}, false},
		{postgres.Options{Table: "Upper"}, false},
		{postgres.Options{Table: "a; DROP TABLE x"}, false},
		{postgres.Options{Table: strings.Repeat("t", 33)}, false},
	}
	for _, tc := range tests {
		if err := tc.opts.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v.Validate() = %v; want ok=%v", tc.opts, err, tc.ok)
		}
	}
}

func TestName(t *testing.T) {
	srv := pgtest.Shared(t)
	u := srv.NewDatabase(t)
	db := strings.TrimPrefix(strings.SplitN(u, "?", 2)[0], "postgres://postgres@/")
	s := openClosed(t, u, postgres.Options{})
	want := fmt.Sprintf("postgres:%s:%d/%s", srv.SocketDir, srv.Port, db)
	if s.Name() != want {
		t.Errorf("Name() = %q; want %q", s.Name(), want)
	}
	// The keyword/value form works too, and a password never shows.
	kw := fmt.Sprintf("host=%s port=%d dbname=%s user=postgres password=secret", srv.SocketDir, srv.Port, db)
	s2 := openClosed(t, kw, postgres.Options{})
	if s2.Name() != want {
		t.Errorf("Name() = %q; want %q", s2.Name(), want)
	}
}

func TestOpenErrors(t *testing.T) {
	srv := pgtest.Shared(t)
	good := srv.NewDatabase(t)
	ctx := context.Background()
	withDB := func(db string) string {
		u, _ := url.Parse(good)
		u.Path = "/" + db
		return u.String()
	}
	withUser := func(user string) string {
		u, _ := url.Parse(good)
		u.User = url.UserPassword(user, "hunter2")
		return u.String()
	}
	nowhere := t.TempDir()
	tests := []struct {
		name, url   string
		opts        postgres.Options
		want        []string
		unreachable bool
	}{
		{
			name:        "no server",
			url:         fmt.Sprintf("postgres://postgres@/x?host=%s&port=5432&connect_timeout=5", nowhere),
			want:        []string{"cannot reach PostgreSQL at unix socket " + nowhere + "/.s.PGSQL.5432"},
			unreachable: true,
		},
		{
			name: "no database",
			url:  withDB("cairn_missing"),
			want: []string{"PostgreSQL at unix socket", `has no database "cairn_missing"`},
		},
		{
			name: "unknown user",
			url:  withUser("mallory"),
			want: []string{"PostgreSQL at unix socket", `refused the credentials for user "mallory"`},
		},
		{
			name: "bad URL",
			url:  "postgres://postgres:hunter2@[::1/x",
			want: []string{"postgres:", "cannot parse"},
		},
		{
			name: "bad options",
			url:  good,
			opts: postgres.Options{Table: "Bad"},
			want: []string{"Table"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := postgres.Open(ctx, tc.url, tc.opts)
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded")
			}
			t.Logf("error: %v", err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error shows the password: %v", err)
			}
			if got := errors.Is(err, postgres.ErrUnreachable); got != tc.unreachable {
				t.Errorf("errors.Is(err, ErrUnreachable) = %v; want %v", got, tc.unreachable)
			}
		})
	}

	t.Run("table of another shape", func(t *testing.T) {
		c, err := pgx.Connect(ctx, good)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "CREATE TABLE other (k text PRIMARY KEY, v text)"); err != nil {
			t.Fatal(err)
		}
		s, err := postgres.Open(ctx, good, postgres.Options{Table: "other"})
		if err == nil {
			s.Close()
			t.Fatal("Open succeeded")
		}
		if !strings.Contains(err.Error(), "not a Cairn key-value table") {
			t.Errorf("error: %v", err)
		}
	})
}

// TestTables checks that two stores on different tables of one database
// are independent, notifications included.
func TestTables(t *testing.T) {
	u := pgtest.NewDatabase(t)
	a := openClosed(t, u, postgres.Options{})
	b := openClosed(t, u, postgres.Options{Table: "other_fs"})
	put(t, a, "k", "a")
	put(t, b, "k", "b")
	if got := lookup(t, a, "k"); got != "a" {
		t.Errorf("a: k = %q", got)
	}
	if got := lookup(t, b, "k"); got != "b" {
		t.Errorf("b: k = %q", got)
	}
	ca, stopA := a.Subscribe("c")
	defer stopA()
	cb, stopB := b.Subscribe("c")
	defer stopB()
	ctx := context.Background()
	if err := a.Notify(ctx, "c", "for a"); err != nil {
		t.Fatal(err)
	}
	if err := b.Notify(ctx, "c", "for b"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ch   <-chan string
		want string
	}{{ca, "for a"}, {cb, "for b"}} {
		select {
		case got := <-c.ch:
			if got != c.want {
				t.Errorf("received %q; want %q", got, c.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("nothing received; want %q", c.want)
		}
	}
	if err := a.Notify(ctx, strings.Repeat("c", 60), "x"); err == nil {
		t.Errorf("Notify on a channel name too long succeeded")
	}
}

// TestNotifierAcrossStores sends notifications between two clients of one
// database, and checks that a subscriber hears again after the server
// restarts.
func TestNotifierAcrossStores(t *testing.T) {
	srv := pgtest.Shared(t)
	u := srv.NewDatabase(t)
	a := openClosed(t, u, postgres.Options{})
	b := openClosed(t, u, postgres.Options{})
	ctx := context.Background()
	c, stop := a.Subscribe("wake")
	defer stop()
	if err := b.Notify(ctx, "wake", "hello"); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-c:
		if got != "hello" {
			t.Errorf("received %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("nothing received")
	}

	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	// The listener reconnects in the background: send until it hears.
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; ; i++ {
		if err := b.Notify(ctx, "wake", fmt.Sprint("again ", i)); err != nil {
			t.Logf("Notify: %v", err) // b's pool may still hold a dead connection
		}
		select {
		case got := <-c:
			t.Logf("received %q after the restart", got)
			return
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("nothing received after the server restarted")
		}
	}
}

// TestScanModel compares scans inside transactions, whose buffered writes
// merge with the server's rows, and in Views, against a model, with enough
// keys to need several pages.
func TestScanModel(t *testing.T) {
	s := openClosed(t, pgtest.NewDatabase(t), postgres.Options{})
	rng := rand.New(rand.NewPCG(1, 2))
	key := func() string {
		b := make([]byte, 1+rng.IntN(3))
		for i := range b {
			b[i] = "\x00ab\xff"[rng.IntN(4)]
		}
		return string(b)
	}
	model := map[string]string{}
	ctx := context.Background()
	for round := range 30 {
		// Writes, then scans that must see them.
		pending := map[string]*string{}
		err := s.Update(ctx, func(tx kv.Txn) error {
			clear(pending)
			for range rng.IntN(300) {
				k := key()
				if rng.IntN(3) == 0 {
					tx.Delete([]byte(k))
					pending[k] = nil
				} else {
					v := fmt.Sprint(round, k)
					tx.Set([]byte(k), []byte(v))
					pending[k] = &v
				}
			}
			want := maps(model, pending)
			checkScans(t, tx, want, rng, key, fmt.Sprintf("round %d in txn", round))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		model = maps(model, pending)
		err = s.View(ctx, func(r kv.Reader) error {
			checkScans(t, r, model, rng, key, fmt.Sprintf("round %d in View", round))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if t.Failed() {
			return
		}
	}
}

// maps returns base with changes applied (nil deletes).
func maps(base map[string]string, changes map[string]*string) map[string]string {
	out := make(map[string]string, len(base))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range changes {
		if v == nil {
			delete(out, k)
		} else {
			out[k] = *v
		}
	}
	return out
}

func checkScans(t *testing.T, r kv.Reader, model map[string]string, rng *rand.Rand, key func() string, where string) {
	t.Helper()
	keys := make([]string, 0, len(model))
	for k := range model {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for range 20 {
		var start, end []byte
		if rng.IntN(4) > 0 {
			start = []byte(key())
		}
		if rng.IntN(4) > 0 {
			end = []byte(key())
		}
		reverse := rng.IntN(2) == 0
		limit := 0
		if rng.IntN(2) == 0 {
			limit = 1 + rng.IntN(40)
		}
		var want []string
		for _, k := range keys {
			if k >= string(start) && (end == nil || k < string(end)) {
				want = append(want, k+"="+model[k])
			}
		}
		if reverse {
			slices.Reverse(want)
		}
		if limit > 0 && len(want) > limit {
			want = want[:limit]
		}
		var got []string
		err := r.Scan(start, end, reverse, func(k, v []byte) bool {
			got = append(got, string(k)+"="+string(v))
			return limit == 0 || len(got) < limit
		})
		if err != nil {
			t.Fatalf("%s: Scan: %v", where, err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s: Scan(%q, %q, reverse=%v, limit=%d):\n got %q\nwant %q", where, start, end, reverse, limit, got, want)
		}
	}
	for range 20 {
		k := key()
		v, err := r.Get([]byte(k))
		if err != nil {
			t.Fatal(err)
		}
		if w, ok := model[k]; string(v) != w || (v != nil) != ok {
			t.Fatalf("%s: Get(%q) = %q; want %q, %v", where, k, v, w, ok)
		}
	}
}

// TestScanCallsGet checks that fn may read the transaction during a Scan.
func TestScanCallsGet(t *testing.T) {
	s := openClosed(t, pgtest.NewDatabase(t), postgres.Options{})
	for i := range 100 {
		put(t, s, fmt.Sprintf("k%03d", i), fmt.Sprint(i))
	}
	err := s.Update(context.Background(), func(tx kv.Txn) error {
		n := 0
		err := tx.Scan([]byte("k"), nil, false, func(k, v []byte) bool {
			other, err := tx.Get([]byte(fmt.Sprintf("k%03d", 99-n)))
			if err != nil || string(other) != fmt.Sprint(99-n) {
				t.Errorf("Get inside Scan = %q, %v", other, err)
			}
			if want := fmt.Sprintf("k%03d", n); string(k) != want {
				t.Errorf("Scan key %q; want %q", k, want)
			}
			n++
			return true
		})
		if n != 100 {
			t.Errorf("Scan saw %d keys", n)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestPreread: Firsts answers ranges read ahead by Preread without a
// statement, as a statement would (also for ranges with nothing in them
// and for follows), until the transaction writes in them or in what they
// follow.
func TestPreread(t *testing.T) {
	ctx := context.Background()
	s := openClosed(t, pgtest.NewDatabase(t), postgres.Options{})
	put(t, s, "a1", "x", "a2", "y", "d1", "b1", "ib1", "z") // d1 names "inode" b1
	follow := &kv.Follow{Offset: 0, Length: 2, Prefix: []byte("i"), EndSuffix: []byte{0}}
	ranges := []kv.Range{
		{Start: []byte("a"), End: []byte("b")},
		{Start: []byte("c"), End: []byte("d")}, // empty
		{Start: []byte("d1"), End: []byte("d2"), Follow: follow},
	}
	var want []kv.Pair
	if err := s.Update(ctx, func(tx kv.Txn) error {
		var err error
		want, err = kv.Firsts(tx, ranges)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	show := func(ps []kv.Pair) string {
		out := ""
		for _, p := range ps {
			out += fmt.Sprintf("%q=%q", p.Key, p.Value)
			if p.Followed != nil {
				out += fmt.Sprintf("->%q=%q", p.Followed.Key, p.Followed.Value)
			}
			out += " "
		}
		return out
	}
	if got := show(want); got != `"a1"="x" ""="" "d1"="b1"->"ib1"="z" ` {
		t.Fatalf("Firsts = %s", got)
	}
	err := s.Update(ctx, func(tx kv.Txn) error {
		pr, ok := tx.(kv.Prereader)
		if !ok {
			t.Fatal("a postgres transaction is no kv.Prereader")
		}
		if err := pr.Preread(ranges); err != nil {
			return err
		}
		before := postgres.Reads(s)
		got, err := kv.Firsts(tx, ranges)
		if err != nil {
			return err
		}
		if n := postgres.Reads(s) - before; n != 0 {
			t.Errorf("Firsts of pre-read ranges sent %d statements", n)
		}
		if show(got) != show(want) {
			t.Errorf("Firsts after Preread = %s, want %s", show(got), show(want))
		}
		got[0].Value[0] = 'X' // the caller owns what it gets
		// Writes in a range, and in what a follow reads, are seen.
		tx.Set([]byte("a0"), []byte("w"))
		tx.Set([]byte("ib1"), []byte("v"))
		if got, err = kv.Firsts(tx, ranges); err != nil {
			return err
		}
		if s, w := show(got), `"a0"="w" ""="" "d1"="b1"->"ib1"="v" `; s != w {
			t.Errorf("Firsts after writes = %s, want %s", s, w)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestStartUpdate: a started transaction's reads (a range read with a
// Follow also answers the same range without one) cost no statement, its
// Update commits in the snapshot the start took, a conflict with a commit
// made meanwhile runs fn again in a new transaction, and an abandoned one
// neither commits nor keeps Close waiting.
func TestStartUpdate(t *testing.T) {
	ctx := context.Background()
	s := open(t, pgtest.NewDatabase(t), postgres.Options{})
	put(t, s, "a1", "x", "d1", "b1", "ib1", "z", "n", "0")
	follow := &kv.Follow{Offset: 0, Length: 2, Prefix: []byte("i"), EndSuffix: []byte{0}}
	ranges := []kv.Range{
		{Start: []byte("a"), End: []byte("b")},
		{Start: []byte("d1"), End: []byte("d2"), Follow: follow},
		{Start: []byte("d1"), End: []byte("d2")}, // the same, plain
		{Start: []byte("n"), End: []byte("n\x00")},
	}
	before := postgres.Reads(s)
	st, err := s.StartUpdate(ctx, ranges)
	if err != nil {
		t.Fatal(err)
	}
	if n := postgres.Reads(s) - before; n != 1 {
		t.Errorf("StartUpdate sent %d reading statements, want 1", n)
	}
	// A commit after the start: the started transaction does not see it.
	put(t, s, "a2", "later")
	before = postgres.Reads(s)
	ps, err := kv.Firsts(st.Reader(), ranges)
	if err != nil {
		t.Fatal(err)
	}
	if n := postgres.Reads(s) - before; n != 0 {
		t.Errorf("reading the started ranges sent %d statements", n)
	}
	if string(ps[0].Key) != "a1" || string(ps[1].Followed.Value) != "z" || string(ps[2].Value) != "b1" || string(ps[3].Value) != "0" {
		t.Errorf("started reads: %q %q %q %q", ps[0].Key, ps[1].Followed.Value, ps[2].Value, ps[3].Value)
	}
	runs := 0
	err = st.Update(ctx, func(tx kv.Txn) error {
		runs++
		v, err := tx.Get([]byte("a2"))
		if err != nil {
			return err
		}
		if runs == 1 && v != nil {
			t.Errorf("the first attempt sees %q, committed after the start", v)
		}
		tx.Set([]byte("c"), []byte(fmt.Sprint(runs)))
		return nil
	})
	if err != nil || runs != 1 {
		t.Fatalf("Update: %v after %d runs", err, runs)
	}
	if got := lookup(t, s, "c"); got != "1" {
		t.Errorf("c = %q", got)
	}
	if err := st.Update(ctx, func(kv.Txn) error { return nil }); !errors.Is(err, kv.ErrClosed) {
		t.Errorf("a second Update of a started transaction: %v, want kv.ErrClosed", err)
	}

	// A key the started transaction read and writes, changed meanwhile:
	// the first attempt conflicts, the second sees the change.
	st, err = s.StartUpdate(ctx, ranges)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Firsts(st.Reader(), ranges); err != nil {
		t.Fatal(err)
	}
	put(t, s, "n", "1")
	runs = 0
	err = st.Update(ctx, func(tx kv.Txn) error {
		runs++
		v, err := tx.Get([]byte("n"))
		if err != nil {
			return err
		}
		tx.Set([]byte("n"), append(v, '+'))
		return nil
	})
	if err != nil || runs != 2 {
		t.Fatalf("Update after a conflicting commit: %v after %d runs, want 2", err, runs)
	}
	if got := lookup(t, s, "n"); got != "1+" {
		t.Errorf("n = %q, want 1+", got)
	}

	// Abandoned: its connection is freed, so Close does not wait.
	st, err = s.StartUpdate(ctx, ranges)
	if err != nil {
		t.Fatal(err)
	}
	st.Abandon()
	st.Abandon() // once is enough; twice is harmless
	if err := st.Update(ctx, func(kv.Txn) error { return nil }); !errors.Is(err, kv.ErrClosed) {
		t.Errorf("Update after Abandon: %v, want kv.ErrClosed", err)
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close waits after every started transaction ended")
	}
	if _, err := s.StartUpdate(ctx, ranges); !errors.Is(err, kv.ErrClosed) {
		t.Errorf("StartUpdate after Close: %v, want kv.ErrClosed", err)
	}
}

// TestDurableAcrossCrash commits, crashes the server (immediate shutdown),
// and finds every commit after the restart.
func TestDurableAcrossCrash(t *testing.T) {
	srv := pgtest.Shared(t)
	u := srv.NewDatabase(t)
	s := openClosed(t, u, postgres.Options{})
	for i := range 50 {
		put(t, s, fmt.Sprint("k", i), fmt.Sprint(i))
	}
	if err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	s2 := openClosed(t, u, postgres.Options{})
	for i := range 50 {
		if got := lookup(t, s2, fmt.Sprint("k", i)); got != fmt.Sprint(i) {
			t.Fatalf("k%d = %q after crash", i, got)
		}
	}
}

// TestSyncCommit checks that the store's connections commit synchronously
// even where the database's default is off, and keep a stronger setting.
func TestSyncCommit(t *testing.T) {
	u := pgtest.NewDatabase(t)
	ctx := context.Background()
	db := strings.TrimPrefix(strings.SplitN(u, "?", 2)[0], "postgres://postgres@/")
	for _, tc := range []struct{ dflt, want string }{{"off", "on"}, {"local", "local"}, {"on", "on"}} {
		c, err := pgx.Connect(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Exec(ctx, "ALTER DATABASE "+db+" SET synchronous_commit = "+tc.dflt)
		c.Close(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s := open(t, u, postgres.Options{})
		got, err := postgres.SyncCommit(ctx, s)
		s.Close()
		if err != nil || got != tc.want {
			t.Errorf("database default %s: store's synchronous_commit = %q, %v; want %q", tc.dflt, got, err, tc.want)
		}
	}
}

// counter increments key in a read-modify-write Update, as metadata
// operations do.
func counter(ctx context.Context, s kv.Store, key string) (int, error) {
	var n int
	err := s.Update(ctx, func(tx kv.Txn) error {
		v, err := tx.Get([]byte(key))
		if err != nil {
			return err
		}
		n = 0
		if v != nil {
			fmt.Sscan(string(v), &n)
		}
		n++
		tx.Set([]byte(key), []byte(fmt.Sprint(n)))
		return nil
	})
	return n, err
}

// TestOutage takes the server away for two seconds, twice, while Updates
// and Views run: they wait for it and succeed once it is back, and no
// Update is lost or applied twice. The first outage is a clean shutdown,
// the second a crash, after which an Update whose commit was cut off may
// report kv.ErrUnknownOutcome; the worker then finds out by reading.
// Serialized, the Updates all queue on one advisory lock (kv.Serialize),
// which the outage takes away with the connections that held or awaited
// it; afterwards no connection holds one.
func TestOutage(t *testing.T) {
	for _, serial := range []bool{false, true} {
		t.Run(map[bool]string{false: "optimistic", true: "serialized"}[serial], func(t *testing.T) { testOutage(t, serial) })
	}
}

func testOutage(t *testing.T, serial bool) {
	srv := pgtest.Shared(t)
	url := srv.NewDatabase(t)
	s := openClosed(t, url, postgres.Options{MaxConns: 4})
	ctx := context.Background()
	if serial {
		ctx = kv.Serialize(ctx, []byte("queue"))
	}
	var stop atomic.Bool
	var done, unknown atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 3 {
		wg.Go(func() {
			key := fmt.Sprint("counter", w)
			want := 0 // the counter's value
			for !stop.Load() {
				n, err := counter(ctx, s, key)
				if errors.Is(err, kv.ErrUnknownOutcome) {
					unknown.Add(1)
					var v string
					err := s.View(ctx, func(r kv.Reader) error {
						b, err := r.Get([]byte(key))
						v = string(b)
						return err
					})
					if err != nil {
						errs <- fmt.Errorf("View after an unknown outcome: %w", err)
						return
					}
					if v != fmt.Sprint(want) && v != fmt.Sprint(want+1) {
						errs <- fmt.Errorf("%s = %s after an unknown outcome; want %d or %d", key, v, want, want+1)
						return
					}
					fmt.Sscan(v, &want)
					continue
				}
				if err == nil && n != want+1 {
					err = fmt.Errorf("%s = %d; want %d (an Update was lost or applied twice)", key, n, want+1)
				}
				if err != nil {
					errs <- err
					return
				}
				want = n
				done.Add(1)
			}
		})
	}
	wg.Go(func() {
		for !stop.Load() {
			err := s.View(ctx, func(r kv.Reader) error {
				_, err := r.Get([]byte("counter0"))
				return err
			})
			if err != nil {
				errs <- fmt.Errorf("View: %w", err)
				return
			}
		}
	})
	for _, outage := range []struct {
		name string
		stop func() error
	}{{"shutdown", srv.Stop}, {"crash", srv.Kill}} {
		time.Sleep(300 * time.Millisecond)
		if err := outage.stop(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // let the last Updates in flight finish
		before := done.Load()
		time.Sleep(2 * time.Second)
		if during := done.Load() - before; during > 0 {
			t.Errorf("%s: %d Updates succeeded while the server was down", outage.name, during)
		}
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		restarted := time.Now()
		for done.Load() < before+30 && time.Since(restarted) < 20*time.Second {
			time.Sleep(10 * time.Millisecond)
		}
		if after := done.Load() - before; after < 30 {
			t.Errorf("%s: only %d Updates after the restart", outage.name, after)
		}
		t.Logf("%s: %d Updates so far, %d outcomes unknown", outage.name, done.Load(), unknown.Load())
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if serial {
		noAdvisoryLocks(t, url)
	}
}

// TestOutageTimeout checks that with the server down an Update and a View
// give up after OutageTimeout with a clear error.
func TestOutageTimeout(t *testing.T) {
	srv := pgtest.Shared(t)
	s := openClosed(t, srv.NewDatabase(t), postgres.Options{OutageTimeout: time.Second})
	put(t, s, "a", "1")
	// A store whose outage clock has not run out, for the context test.
	patient := openClosed(t, srv.NewDatabase(t), postgres.Options{OutageTimeout: time.Minute})
	put(t, patient, "a", "1")
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		if got := lookup(t, s, "a"); got != "1" {
			t.Errorf("after restart a = %q", got)
		}
	}()
	ctx := context.Background()
	ops := map[string]func() error{
		"Update": func() error { _, err := counter(ctx, s, "a"); return err },
		"blind Update": func() error {
			return s.Update(ctx, func(tx kv.Txn) error { tx.Set([]byte("b"), nil); return nil })
		},
		"View": func() error {
			return s.View(ctx, func(r kv.Reader) error { _, err := r.Get([]byte("a")); return err })
		},
	}
	first := true
	for name, op := range ops {
		start := time.Now()
		err := op()
		took := time.Since(start)
		t.Logf("%s: %v after %v", name, err, took)
		want := "cannot reach PostgreSQL at unix socket " + srv.SocketDir
		if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, postgres.ErrUnreachable) {
			t.Errorf("%s with the server down = %v; want an error wrapping ErrUnreachable containing %q", name, err, want)
		}
		// The first call waits out the timeout; the outage has lasted
		// that long when the next ones start, and they fail at once.
		if first && (took < time.Second || took > 5*time.Second) {
			t.Errorf("%s gave up after %v; want about 1s", name, took)
		}
		if !first && took > 500*time.Millisecond {
			t.Errorf("%s, started after the outage had lasted the timeout, gave up after %v; want at once", name, took)
		}
		first = false
	}
	// A context that ends first ends the wait.
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	err := patient.Update(cctx, func(tx kv.Txn) error { _, err := tx.Get([]byte("a")); return err })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Update with a 200ms context = %v; want DeadlineExceeded", err)
	}
}

// TestOutageClockOutlivesEndedContexts: a call whose context ends while it
// waits for the server does not end the outage. It did (the Update took
// the context's error for an answer from the server), so the next call
// started a clock of its own and waited a whole timeout again: a gateway's
// CREATE took twice the 30 s timeout (meta's directory lease calls run
// with a 10 s context).
func TestOutageClockOutlivesEndedContexts(t *testing.T) {
	srv := pgtest.Shared(t)
	const timeout = 2 * time.Second
	s := openClosed(t, srv.NewDatabase(t), postgres.Options{OutageTimeout: timeout})
	put(t, s, "a", "1")
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		if got := lookup(t, s, "a"); got != "1" {
			t.Errorf("after restart a = %q", got)
		}
	}()
	ctx := context.Background()
	down := time.Now()
	// In order: a View does not end the outage on a failure, and must
	// not hide an Update that does.
	ended := []struct {
		name string
		op   func(ctx context.Context) error
	}{
		{"View", func(ctx context.Context) error {
			return s.View(ctx, func(r kv.Reader) error { _, err := r.Get([]byte("a")); return err })
		}},
		{"Update", func(ctx context.Context) error { _, err := counter(ctx, s, "a"); return err }},
	}
	for _, c := range ended {
		cctx, cancel := context.WithTimeout(ctx, timeout/4)
		err := c.op(cctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s with a short context = %v; want DeadlineExceeded", c.name, err)
		}
	}
	// The outage began at down: the next call fails when it has lasted
	// the timeout, not a timeout after the call's start.
	start := time.Now()
	_, err := counter(ctx, s, "a")
	took := time.Since(start)
	t.Logf("Update after two ended contexts: %v after %v (outage %v)", err, took, time.Since(down))
	if !errors.Is(err, postgres.ErrUnreachable) {
		t.Errorf("Update = %v; want ErrUnreachable", err)
	}
	if want := timeout - start.Sub(down) + timeout/4; took > want {
		t.Errorf("Update started %v into the outage gave up after %v; want at most %v (the outage's timeout)",
			start.Sub(down).Round(time.Millisecond), took.Round(time.Millisecond), want.Round(time.Millisecond))
	}
}

// TestOutageWaitForever: with WaitForever an Update waits through an
// outage longer than OutageTimeout and succeeds when the server returns;
// its context still ends the wait.
func TestOutageWaitForever(t *testing.T) {
	srv := pgtest.Shared(t)
	s := openClosed(t, srv.NewDatabase(t), postgres.Options{OutageTimeout: 500 * time.Millisecond, WaitForever: true})
	put(t, s, "a", "1")
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	restarted := make(chan error, 1)
	go func() {
		time.Sleep(2 * time.Second)
		restarted <- srv.Start()
	}()
	start := time.Now()
	n, err := counter(context.Background(), s, "a")
	if err != nil || n != 2 {
		t.Errorf("Update through a 2 s outage with WaitForever = %d, %v; want 2, nil", n, err)
	}
	if took := time.Since(start); took < 1500*time.Millisecond {
		t.Errorf("Update returned after %v, before the server was back", took)
	}
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
}

// TestConnectionCut breaks the connection of a running Update before its
// commit: the Update runs fn again and commits once.
func TestConnectionCut(t *testing.T) {
	srv := pgtest.Shared(t)
	u := srv.NewDatabase(t)
	p := newProxy(t, srv)
	s := openClosed(t, proxied(u, p), postgres.Options{})
	put(t, s, "n", "0")
	runs := 0
	err := s.Update(context.Background(), func(tx kv.Txn) error {
		runs++
		v, err := tx.Get([]byte("n"))
		if err != nil {
			return err
		}
		if runs == 1 {
			p.cutAll()
		}
		if _, err := tx.Get([]byte("other")); err != nil {
			return err
		}
		var n int
		fmt.Sscan(string(v), &n)
		tx.Set([]byte("n"), []byte(fmt.Sprint(n+1)))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if runs != 2 {
		t.Errorf("fn ran %d times; want 2", runs)
	}
	if got := lookup(t, s, "n"); got != "1" {
		t.Errorf("n = %q; want 1", got)
	}

	// A View that has read something does not run fn again.
	runs = 0
	err = s.View(context.Background(), func(r kv.Reader) error {
		runs++
		if _, err := r.Get([]byte("n")); err != nil {
			return err
		}
		p.cutAll()
		_, err := r.Get([]byte("n"))
		return err
	})
	if !errors.Is(err, postgres.ErrUnreachable) || runs != 1 {
		t.Errorf("View with its connection cut = %v after %d runs; want ErrUnreachable after 1", err, runs)
	}
}

// TestUnknownOutcome loses the answer to a commit that reached the server:
// Update fails with kv.ErrUnknownOutcome and does not run fn again, and
// the transaction did commit.
func TestUnknownOutcome(t *testing.T) {
	srv := pgtest.Shared(t)
	u := srv.NewDatabase(t)
	p := newProxy(t, srv)
	// One connection, which has prepared the commit's statements: the
	// cut hits the commit itself.
	s := openClosed(t, proxied(u, p), postgres.Options{MaxConns: 1})
	direct := openClosed(t, u, postgres.Options{})
	put(t, s, "warm", "up")
	runs := 0
	err := s.Update(context.Background(), func(tx kv.Txn) error {
		runs++
		if _, err := tx.Get([]byte("k")); err != nil {
			return err
		}
		tx.Set([]byte("k"), []byte("created"))
		p.cutAfterNextSend() // the commit
		return nil
	})
	if !errors.Is(err, kv.ErrUnknownOutcome) {
		t.Errorf("Update = %v; want ErrUnknownOutcome", err)
	}
	if runs != 1 {
		t.Errorf("fn ran %d times; want 1", runs)
	}
	t.Logf("error: %v", err)
	waitValue(t, direct, "k", "created", "the commit whose answer was lost")
	// The store recovers.
	put(t, s, "k2", "v")
	if got := lookup(t, s, "k2"); got != "v" {
		t.Errorf("k2 = %q", got)
	}
}

// proxied returns u with its host replaced by the proxy's socket directory.
func proxied(u string, p *proxy) string {
	parsed, _ := url.Parse(u)
	q := parsed.Query()
	q.Set("host", p.dir)
	parsed.RawQuery = q.Encode()
	return parsed.String()
}

// TestErrorsFromReads checks that a transaction whose read failed (here,
// on a cancelled context) does not commit, even if fn ignores the error.
func TestErrorsFromReads(t *testing.T) {
	s := openClosed(t, pgtest.NewDatabase(t), postgres.Options{})
	put(t, s, "a", "1")
	ctx, cancel := context.WithCancel(context.Background())
	err := s.Update(ctx, func(tx kv.Txn) error {
		if _, err := tx.Get([]byte("a")); err != nil {
			return err
		}
		cancel()
		_, err := tx.Get([]byte("a"))
		tx.Set([]byte("a"), []byte("2"))
		return err
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Update with a read after cancel = %v; want Canceled", err)
	}
	if got := lookup(t, s, "a"); got != "1" {
		t.Errorf("a = %q; want 1", got)
	}
	// fn ignoring a failed read does not commit.
	ctx, cancel = context.WithCancel(context.Background())
	err = s.Update(ctx, func(tx kv.Txn) error {
		cancel()
		tx.Get([]byte("a"))
		tx.Set([]byte("a"), []byte("3"))
		return nil
	})
	if err == nil {
		t.Errorf("Update whose read failed committed")
	}
	if got := lookup(t, s, "a"); got != "1" {
		t.Errorf("a = %q; want 1", got)
	}
}

func benchStore(b *testing.B) *postgres.Store {
	s := openClosed(b, pgtest.NewDatabase(b), postgres.Options{Logger: slog.New(slog.DiscardHandler)})
	err := s.Update(context.Background(), func(tx kv.Txn) error {
		for i := range 1000 {
			tx.Set(fmt.Appendf(nil, "key%04d", i), bytes.Repeat([]byte{'v'}, 100))
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkUpdate measures a metadata-like transaction: three reads and two
// writes.
func BenchmarkUpdate(b *testing.B) {
	s := benchStore(b)
	ctx := context.Background()
	value := bytes.Repeat([]byte{'w'}, 100)
	i := 0
	for b.Loop() {
		i++
		err := s.Update(ctx, func(tx kv.Txn) error {
			for j := range 3 {
				if _, err := tx.Get(fmt.Appendf(nil, "key%04d", (i*3+j)%1000)); err != nil {
					return err
				}
			}
			tx.Set(fmt.Appendf(nil, "key%04d", i%1000), value)
			tx.Set(fmt.Appendf(nil, "new%08d", i), value)
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkView measures a View of three reads.
func BenchmarkView(b *testing.B) {
	s := benchStore(b)
	ctx := context.Background()
	i := 0
	for b.Loop() {
		i++
		err := s.View(ctx, func(r kv.Reader) error {
			for j := range 3 {
				if _, err := r.Get(fmt.Appendf(nil, "key%04d", (i*3+j)%1000)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUpdateWriteOnly measures an Update of two writes and no reads:
// one round trip, whose commit waits for the WAL flush.
func BenchmarkUpdateWriteOnly(b *testing.B) {
	s := benchStore(b)
	ctx := context.Background()
	value := bytes.Repeat([]byte{'w'}, 100)
	i := 0
	for b.Loop() {
		i++
		err := s.Update(ctx, func(tx kv.Txn) error {
			tx.Set(fmt.Appendf(nil, "key%04d", i%1000), value)
			tx.Set(fmt.Appendf(nil, "new%08d", i), value)
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUpdateParallel runs BenchmarkUpdate's transaction from 8
// goroutines per CPU on distinct keys: the throughput of many clients,
// whose commits share WAL flushes.
func BenchmarkUpdateParallel(b *testing.B) {
	s := benchStore(b)
	ctx := context.Background()
	value := bytes.Repeat([]byte{'w'}, 100)
	var next atomic.Int64
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := int(next.Add(1))
			err := s.Update(ctx, func(tx kv.Txn) error {
				for j := range 3 {
					if _, err := tx.Get(fmt.Appendf(nil, "key%04d", (i*3+j)%1000)); err != nil {
						return err
					}
				}
				tx.Set(fmt.Appendf(nil, "new%08d", i), value)
				tx.Set(fmt.Appendf(nil, "new%08d", -i), value)
				return nil
			})
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// TestPlanSettings: the store's connections keep generic plans that use
// the primary key even when made on a small table (a fresh volume), where
// the server would otherwise keep a sequential scan and a hash join for
// every later execution; a setting given in the URL is kept.
func TestPlanSettings(t *testing.T) {
	ctx := context.Background()
	u := pgtest.NewDatabase(t)
	s := open(t, u, postgres.Options{})
	for name, want := range map[string]string{"plan_cache_mode": "force_generic_plan", "enable_seqscan": "off", "enable_hashjoin": "off"} {
		if got, err := postgres.Setting(ctx, s, name); err != nil || got != want {
			t.Errorf("%s = %q, %v; want %q", name, got, err, want)
		}
	}
	if err := s.Update(ctx, func(tx kv.Txn) error {
		for i := range 20 {
			tx.Set([]byte(fmt.Sprint("k", i)), []byte("v"))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	plan, err := postgres.ExplainUpdate(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan, "Index Scan") || strings.Contains(plan, "Seq Scan") {
		t.Errorf("update plan on a small table:\n%s", plan)
	}
	s.Close()

	s = open(t, u+"&plan_cache_mode=auto&enable_seqscan=on", postgres.Options{})
	defer s.Close()
	for name, want := range map[string]string{"plan_cache_mode": "auto", "enable_seqscan": "on", "enable_hashjoin": "off"} {
		if got, err := postgres.Setting(ctx, s, name); err != nil || got != want {
			t.Errorf("with the URL's settings: %s = %q, %v; want %q", name, got, err, want)
		}
	}
}
