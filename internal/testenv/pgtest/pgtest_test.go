package pgtest_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/cairnfs/cairn/internal/testenv/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func exec(t *testing.T, c *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := c.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func count(t *testing.T, c *pgx.Conn) int {
	t.Helper()
	var n int
	if err := c.QueryRow(context.Background(), "SELECT count(*) FROM t").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestDatabases(t *testing.T) {
	s := pgtest.Shared(t)
	a, b := s.NewDatabase(t), pgtest.NewDatabase(t)
	if a == b {
		t.Fatalf("two databases with the same URL %s", a)
	}
	ca, cb := connect(t, a), connect(t, b)
	exec(t, ca, "CREATE TABLE t (k int)")
	exec(t, ca, "INSERT INTO t VALUES (1)")
	exec(t, cb, "CREATE TABLE t (k int)")
	if n := count(t, cb); n != 0 {
		t.Errorf("new database sees %d rows of another", n)
	}
	var fsync, sync, listen string
	err := ca.QueryRow(context.Background(),
		"SELECT current_setting('fsync'), current_setting('synchronous_commit'), current_setting('listen_addresses')").
		Scan(&fsync, &sync, &listen)
	if err != nil {
		t.Fatal(err)
	}
	if fsync != "on" || sync != "on" || listen != "" {
		t.Errorf("fsync=%s synchronous_commit=%s listen_addresses=%q; want on, on, empty", fsync, sync, listen)
	}
	socket := filepath.Join(s.SocketDir, ".s.PGSQL."+strconv.Itoa(s.Port))
	if _, err := os.Stat(socket); err != nil {
		t.Errorf("socket: %v", err)
	}
}

func TestDropAtCleanup(t *testing.T) {
	s := pgtest.Shared(t)
	var url string
	t.Run("sub", func(t *testing.T) {
		url = s.NewDatabase(t)
		connect(t, url) // still open when the database is dropped
	})
	_, err := pgx.Connect(context.Background(), url)
	if err == nil {
		t.Fatalf("database %s still exists after its test ended", url)
	}
}

// TestStopStart must not run in parallel with the other tests.
func TestStopStart(t *testing.T) {
	s := pgtest.Shared(t)
	url := s.NewDatabase(t)
	ctx := context.Background()
	c := connect(t, url)
	exec(t, c, "CREATE TABLE t (k int)")
	exec(t, c, "INSERT INTO t VALUES (1)")
	socket := filepath.Join(s.SocketDir, ".s.PGSQL."+strconv.Itoa(s.Port))
	for i, stop := range []func() error{s.Stop, s.Kill} {
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if err := stop(); err != nil {
			t.Fatalf("stopping a stopped server: %v", err)
		}
		if _, err := os.Stat(socket); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("socket after stop %d: %v", i, err)
		}
		if _, err := pgx.Connect(ctx, url); err == nil {
			t.Errorf("connected to a stopped server")
		}
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		if err := s.Start(); err != nil {
			t.Fatalf("starting a running server: %v", err)
		}
		c := connect(t, url)
		if n := count(t, c); n != i+1 {
			t.Errorf("after restart %d: %d rows, want %d", i, n, i+1)
		}
		exec(t, c, "INSERT INTO t VALUES (2)")
	}
}
