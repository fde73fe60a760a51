package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/kv/postgres"
	"github.com/cairnfs/cairn/internal/testenv/pgtest"
)

// TestServerFull: with the server at max_connections (many clients, each
// with its pool), a transaction that needs a new connection is refused
// (SQLSTATE 53300). It waits and retries, as through an outage, until a
// connection of its own pool is free or the server takes a new one; none
// fails, and nothing waits longer than the outage timeout.
func TestServerFull(t *testing.T) {
	u := pgtest.NewDatabase(t)
	s := openClosed(t, u, postgres.Options{MaxConns: 8, OutageTimeout: 20 * time.Second})
	put := func(i int) error {
		return s.Update(context.Background(), func(tx kv.Txn) error {
			time.Sleep(20 * time.Millisecond) // hold the connection a while
			tx.Set([]byte(fmt.Sprintf("k%03d", i)), []byte("v"))
			return nil
		})
	}
	if err := put(0); err != nil { // the pool has one connection now
		t.Fatal(err)
	}

	// Take every connection the server has left.
	var held []*pgx.Conn
	defer func() {
		for _, c := range held {
			c.Close(context.Background())
		}
	}()
	for len(held) < 1000 {
		c, err := pgx.Connect(context.Background(), u)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "53300" {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	t.Logf("server full after %d more connections", len(held))

	// 16 transactions at once on a pool of one connection, then the
	// server frees two connections half way through.
	const n = 16
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := 1; i <= n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i-1] = put(i)
		}()
	}
	time.Sleep(150 * time.Millisecond)
	for _, c := range held[len(held)-2:] {
		c.Close(context.Background())
	}
	held = held[:len(held)-2]
	wg.Wait()
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
			t.Errorf("transaction failed: %v", err)
		}
	}
	t.Logf("%d transactions on a full server: %d failed, all done in %v", n, failed, time.Since(start).Round(time.Millisecond))
	if err := s.View(context.Background(), func(tx kv.Reader) error {
		for i := 0; i <= n; i++ {
			if v, err := tx.Get([]byte(fmt.Sprintf("k%03d", i))); err != nil || string(v) != "v" {
				return fmt.Errorf("k%03d: %q, %v", i, v, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestURLPoolMaxConns: pool_max_conns in the URL bounds the store's pool
// when Options.MaxConns is zero, so that many clients of one server can
// be given small pools from their URL alone.
func TestURLPoolMaxConns(t *testing.T) {
	u := pgtest.NewDatabase(t)
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	q := pu.Query()
	q.Set("pool_max_conns", "2")
	pu.RawQuery = q.Encode()
	s := openClosed(t, pu.String(), postgres.Options{})
	probe, err := pgx.Connect(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close(context.Background())
	var wg sync.WaitGroup
	peak := 0
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Update(context.Background(), func(tx kv.Txn) error {
				time.Sleep(100 * time.Millisecond)
				tx.Set([]byte(fmt.Sprintf("p%d", i)), []byte("v"))
				return nil
			}); err != nil {
				t.Error(err)
			}
		}()
	}
	for i := 0; i < 6; i++ {
		time.Sleep(50 * time.Millisecond)
		var n int
		if err := probe.QueryRow(context.Background(), "SELECT count(*) FROM pg_stat_activity "+
			"WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name = 'cairn'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		peak = max(peak, n)
	}
	wg.Wait()
	if peak == 0 || peak > 2 {
		t.Fatalf("the store held up to %d connections, want 1 or 2 (pool_max_conns=2)", peak)
	}
}
