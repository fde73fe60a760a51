package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cairnfs/cairn/internal/kv"
)

// ErrUnreachable is wrapped by the errors of Open, Update and View that come
// from a server that cannot be reached or a connection that broke: by Open
// at once, by Update and View once the outage has lasted
// Options.OutageTimeout. Their message starts "cannot reach PostgreSQL at
// ADDRESS" (or "lost the connection to PostgreSQL at ADDRESS").
var ErrUnreachable = errors.New("postgres: server unreachable")

// unreachableError reports a server that could not be reached, for waited
// (zero in Open) in all.
type unreachableError struct {
	where  string
	waited time.Duration
	err    error
}

func (e *unreachableError) Error() string {
	if e.waited > 0 {
		return fmt.Sprintf("cannot reach PostgreSQL at %s (gave up after %v): %v", e.where, e.waited.Round(time.Millisecond), e.err)
	}
	return fmt.Sprintf("cannot reach PostgreSQL at %s: %v", e.where, e.err)
}

func (e *unreachableError) Unwrap() []error {
	return []error{ErrUnreachable, kv.ErrUnavailable, e.err}
}

// lostError is the failure of a transaction whose connection broke, or
// that could not get one: Update waits for the server and retries it. Only
// a View that had already read something returns it to its caller.
type lostError struct {
	where string
	err   error
	// full: no connection broke, the server refused a new one because
	// it has max_connections already (too_many_connections, 53300): many
	// clients, each with its pool. The call waits as through an outage,
	// for one of its pool's connections or a place on the server.
	full bool
}

func (e *lostError) Error() string {
	return fmt.Sprintf("lost the connection to PostgreSQL at %s: %v", e.where, e.err)
}

func (e *lostError) Unwrap() []error { return []error{ErrUnreachable, kv.ErrUnavailable, e.err} }

// Store is a kv.Store on a PostgreSQL table. Open one with Open.
type Store struct {
	opts  Options
	log   *slog.Logger
	pool  *pgxpool.Pool
	name  string // "postgres:HOST:PORT/DB", for Name and error messages
	where string // the server's address, for errors about reaching it
	sql   statements
	lis   listener
	hub   kv.Hub // delivers what lis receives to local subscribers

	done     chan struct{} // closed by Close: ends waits for the server
	mu       sync.Mutex    // guards closed and adding to inflight
	closed   bool
	inflight sync.WaitGroup // operations and background rollbacks; Close waits

	outage      atomic.Bool  // an outage was logged and its end not yet
	outageSince atomic.Int64 // when the logged outage began (UnixNano)
	fullWarned  atomic.Int64 // when a refusal for too many clients was last logged (UnixNano)

	reads atomic.Int64 // statements that read inside transactions (tests)
}

var (
	_ kv.Store    = (*Store)(nil)
	_ kv.Notifier = (*Store)(nil)
)

// statements are the SQL texts of the store's queries on its table. pgx
// prepares each once per connection (its statement cache).
type statements struct {
	get              string
	scan, scanOpen   string // forward, with and without an upper bound
	rscan, rscanOpen string // the same, in reverse
	upsert, del      string
	update           string // rows the transaction read: conflicts with a concurrent DELETE
	touch            string // kv.Write.Touch: every row under each prefix written back as it is
	lock             string // UpdateExclusive: create and write-lock keys, in key order
	firsts           string // the first row of each of several ranges
	firstsFollow     string // the same, each with an optional dependent read
	guard            string // WriteIf: fails unless each range's first row is the one wanted
}

func newStatements(table string) statements {
	t := pgx.Identifier{table}.Sanitize()
	return statements{
		get:       "SELECT v FROM " + t + " WHERE k = $1",
		scan:      "SELECT k, v FROM " + t + " WHERE k >= $1 AND k < $2 ORDER BY k LIMIT $3",
		scanOpen:  "SELECT k, v FROM " + t + " WHERE k >= $1 ORDER BY k LIMIT $2",
		rscan:     "SELECT k, v FROM " + t + " WHERE k >= $1 AND k < $2 ORDER BY k DESC LIMIT $3",
		rscanOpen: "SELECT k, v FROM " + t + " WHERE k >= $1 ORDER BY k DESC LIMIT $2",
		upsert: "INSERT INTO " + t + " (k, v) SELECT * FROM unnest($1::bytea[], $2::bytea[]) " +
			"ON CONFLICT (k) DO UPDATE SET v = excluded.v",
		del: "DELETE FROM " + t + " WHERE k = ANY($1::bytea[])",
		lock: "INSERT INTO " + t + " AS c (k, v) SELECT x.k, ''::bytea FROM unnest($1::bytea[]) AS x(k) ORDER BY x.k " +
			"ON CONFLICT (k) DO UPDATE SET v = c.v",
		update: "UPDATE " + t + " SET v = x.v FROM unnest($1::bytea[], $2::bytea[]) AS x(k, v) " +
			"WHERE " + t + ".k = x.k",
		touch: "UPDATE " + t + " SET v = " + t + ".v FROM unnest($1::bytea[], $2::bytea[]) AS r(s, e) " +
			"WHERE " + t + ".k >= r.s AND " + t + ".k < r.e",
		firsts: "SELECT r.i, f.k, f.v FROM unnest($1::bytea[], $2::bytea[]) WITH ORDINALITY AS r(s, e, i) " +
			"CROSS JOIN LATERAL (SELECT k, v FROM " + t + " WHERE k >= r.s AND k < r.e ORDER BY k LIMIT 1) f",
		// g reads [pfx || x || ss, pfx || x || es) with x the bytes
		// [off, off+len) of f's value (substring is 1-based).
		firstsFollow: "SELECT r.i, f.k, f.v, g.k, g.v FROM unnest($1::bytea[], $2::bytea[], $3::int[], $4::int[], $5::bytea[], $6::bytea[], $7::bytea[]) " +
			"WITH ORDINALITY AS r(s, e, off, len, pfx, ss, es, i) " +
			"CROSS JOIN LATERAL (SELECT k, v FROM " + t + " WHERE k >= r.s AND k < r.e ORDER BY k LIMIT 1) f " +
			"LEFT JOIN LATERAL (SELECT k, v FROM " + t + " WHERE r.len > 0 AND length(f.v) >= r.off + r.len " +
			"AND k >= r.pfx || substring(f.v from r.off + 1 for r.len) || r.ss " +
			"AND k < r.pfx || substring(f.v from r.off + 1 for r.len) || r.es ORDER BY k LIMIT 1) g ON true",
		// Divides by zero (22012) unless the first row of every range
		// [s, e) is (wk, wv), or there is none and wk is NULL. The
		// divisor is an aggregate of the rows read, which the planner
		// cannot fold into a constant; no guards divide by one.
		guard: "SELECT 1 / CASE WHEN coalesce(bool_and(f.k IS NOT DISTINCT FROM g.wk AND (g.wk IS NULL OR f.v = g.wv)), true) " +
			"THEN 1 ELSE 0 END FROM unnest($1::bytea[], $2::bytea[], $3::bytea[], $4::bytea[]) AS g(s, e, wk, wv) " +
			"LEFT JOIN LATERAL (SELECT k, v FROM " + t + " WHERE k >= g.s AND k < g.e ORDER BY k LIMIT 1) f ON true",
	}
}

// Transaction control statements.
const (
	// Snapshot isolation: a write-write conflict fails with 40001 and the
	// transaction runs again. SERIALIZABLE would add predicate locks on
	// every index page a read visits, and concurrent creates in
	// different directories abort each other through them (one retry per
	// create, measured); meta materializes the conflicts it needs instead
	// (kv.Txn).
	beginUpdate = "BEGIN ISOLATION LEVEL REPEATABLE READ"
	beginView   = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
	// UpdateExclusive: each statement reads the latest committed state,
	// and the first one waits for the locks it takes instead of failing.
	beginExclusive = "BEGIN ISOLATION LEVEL READ COMMITTED"
	commitSQL      = "COMMIT"
	rollbackSQL    = "ROLLBACK"
	// kv.Serialize: the session-level advisory lock of an update's key,
	// taken before its BEGIN (so its snapshot is taken once the lock is
	// held), and every lock of the connection given back after COMMIT or
	// ROLLBACK.
	serialLockSQL   = "SELECT pg_advisory_lock($1)"
	serialUnlockSQL = "SELECT pg_advisory_unlock_all()"
)

// Open connects to the PostgreSQL database at url and creates the store's
// table if it is missing. url is a libpq connection URL or keyword/value
// string, as pgx accepts: "postgres://USER:PASSWORD@HOST:PORT/DB",
// "postgres://USER@/DB?host=/run/postgresql" (a Unix socket directory), or
// "host=/run/postgresql dbname=DB user=USER". Libpq's environment
// variables (PGHOST, PGPASSWORD, …) and ~/.pgpass fill in what it leaves
// out.
//
// Open does not wait for a server that is down: it fails at once with an
// error wrapping ErrUnreachable. Errors name the server and say what went
// wrong: unreachable, credentials refused, no such database, no right to
// create the table.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err) // pgx redacts the password
	}
	if opts.MaxConns == 0 && strings.Contains(url, "pool_max_conns") {
		opts.MaxConns = cfg.MaxConns
	}
	opts = opts.withDefaults()
	cfg.MaxConns = opts.MaxConns
	if cfg.MinConns > cfg.MaxConns {
		cfg.MinConns = cfg.MaxConns
	}
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = "cairn"
	}
	// Every statement of the store reads or writes keys through the
	// primary key. By default the server plans each execution again,
	// because the statements' arrays make a generic plan look dearer than
	// a custom one: a third of its CPU in a create-heavy run. Generic
	// plans are kept instead, and made without sequential scans, hash or
	// merge joins: a plan made while the table is small would otherwise
	// keep scanning the whole table once it is large. Measured in
	// docs/design/0002-shared-mode.md, "Group commit of creates". A
	// setting given in the URL is kept.
	for name, value := range map[string]string{
		"plan_cache_mode":  "force_generic_plan",
		"enable_seqscan":   "off",
		"enable_hashjoin":  "off",
		"enable_mergejoin": "off",
	} {
		if cfg.ConnConfig.RuntimeParams[name] == "" {
			cfg.ConnConfig.RuntimeParams[name] = value
		}
	}
	cfg.AfterConnect = requireSyncCommit
	s := &Store{
		opts: opts,
		log:  opts.Logger,
		sql:  newStatements(opts.Table),
		done: make(chan struct{}),
	}
	s.where, s.name = describe(cfg.ConnConfig)
	s.lis.init(s, cfg.ConnConfig.Config.Copy())
	if s.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", s.name, err)
	}
	if err := s.setup(ctx, cfg.ConnConfig); err != nil {
		s.pool.Close()
		return nil, err
	}
	return s, nil
}

// requireSyncCommit turns synchronous_commit on for a new connection where
// the server's default is off, so that every commit the store reports is
// durable (see the package doc). A stronger setting (remote_apply, …) is
// kept.
func requireSyncCommit(ctx context.Context, c *pgx.Conn) error {
	_, err := c.Exec(ctx, "SELECT set_config('synchronous_commit', 'on', false) "+
		"WHERE current_setting('synchronous_commit') = 'off'")
	return err
}

// describe returns the server's address for messages, "HOST:PORT" or "unix
// socket DIR/.s.PGSQL.PORT", and the store's name.
func describe(cc *pgx.ConnConfig) (where, name string) {
	port := strconv.Itoa(int(cc.Port))
	if strings.HasPrefix(cc.Host, "/") {
		where = "unix socket " + filepath.Join(cc.Host, ".s.PGSQL."+port)
		return where, "postgres:" + cc.Host + ":" + port + "/" + cc.Database
	}
	hostPort := net.JoinHostPort(cc.Host, port)
	return hostPort, "postgres:" + hostPort + "/" + cc.Database
}

// setup makes the first connection, checks the server's durability
// settings and creates the table.
func (s *Store) setup(ctx context.Context, cc *pgx.ConnConfig) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return s.openError(err, cc)
	}
	defer conn.Release()
	var fsync string
	if err := conn.QueryRow(ctx, "SELECT current_setting('fsync')").Scan(&fsync); err != nil {
		return s.openError(err, cc)
	}
	if fsync != "on" {
		s.log.Warn("PostgreSQL runs with fsync off: a crash of its machine can lose or corrupt committed metadata",
			"server", s.where)
	}
	table := pgx.Identifier{s.opts.Table}.Sanitize()
	if s.opts.MustExist {
		var found *string
		if err := conn.QueryRow(ctx, "SELECT to_regclass($1)::text", table).Scan(&found); err != nil {
			return s.openError(err, cc)
		}
		if found == nil {
			return fmt.Errorf("%s: database has no table %s: %w", s.name, s.opts.Table, kv.ErrNotExist)
		}
	}
	create := "CREATE TABLE IF NOT EXISTS " + table + " (k bytea PRIMARY KEY, v bytea NOT NULL)"
	for try := 0; try < 2 && !s.opts.MustExist; try++ {
		_, err = conn.Exec(ctx, create)
		var pe *pgconn.PgError
		// Two clients creating the table at once: one of them fails on
		// the catalog's unique index; the table is there now.
		if try == 0 && errors.As(err, &pe) && (pe.Code == "23505" || pe.Code == "42P07") {
			continue
		}
		break
	}
	if err != nil {
		return s.openError(err, cc)
	}
	// An existing table must have the shape the queries expect.
	rows, err := conn.Query(ctx, "SELECT k, v FROM "+table+" LIMIT 0")
	if err != nil {
		return s.openError(err, cc)
	}
	fields := rows.FieldDescriptions()
	rows.Close()
	if len(fields) != 2 || fields[0].DataTypeOID != pgtype.ByteaOID || fields[1].DataTypeOID != pgtype.ByteaOID {
		return fmt.Errorf("%s: table %s is not a Cairn key-value table: want columns k and v of type bytea", s.name, s.opts.Table)
	}
	return nil
}

// openError explains why Open failed.
func (s *Store) openError(err error, cc *pgx.ConnConfig) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("connecting to PostgreSQL at %s: %w", s.where, err)
		}
		return &unreachableError{where: s.where, err: err}
	}
	switch {
	case pe.Code == "28P01" || pe.Code == "28000":
		return fmt.Errorf("PostgreSQL at %s refused the credentials for user %q: %w", s.where, cc.User, err)
	case pe.Code == "3D000":
		return fmt.Errorf("PostgreSQL at %s has no database %q (create it first): %w", s.where, cc.Database, err)
	case pe.Code == "42501":
		return fmt.Errorf("PostgreSQL at %s: user %q may not create or use table %q in database %q: %w",
			s.where, cc.User, s.opts.Table, cc.Database, err)
	case isOutageCode(pe.Code):
		return &unreachableError{where: s.where, err: err}
	}
	return fmt.Errorf("PostgreSQL at %s: %w", s.where, err)
}

// isOutageCode reports whether a server error means that the connection is
// gone or unusable for a while, not that the statement was wrong.
func isOutageCode(code string) bool {
	switch code {
	case "57P01", // admin_shutdown (fast shutdown, pg_terminate_backend)
		"57P02", // crash_shutdown
		"57P03", // cannot_connect_now (starting up, shutting down)
		"57P05", // idle_session_timeout
		"25P03": // idle_in_transaction_session_timeout
		return true
	}
	return strings.HasPrefix(code, "08") // connection_exception
}

// tooManyConnections is the SQLSTATE of a connection refused because the
// server has max_connections already.
const tooManyConnections = "53300"

// failure turns err, from acquiring a connection (conn nil) or from a
// statement on conn, into the error a transaction fails with: one wrapping
// kv.ErrConflict for a serialization failure or deadlock, a *lostError
// for a broken connection, the context's error if ctx ended, else err
// itself.
func (s *Store) failure(ctx context.Context, err error, conn *pgxpool.Conn) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("%s: %w", s.name, cerr)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "40001" || pe.Code == "40P01":
			return fmt.Errorf("%s: %w (%s)", s.name, kv.ErrConflict, pe.Message)
		case isOutageCode(pe.Code):
			return &lostError{where: s.where, err: err}
		case pe.Code == tooManyConnections && conn == nil:
			return &lostError{where: s.where, err: err, full: true}
		}
		return fmt.Errorf("%s: %w", s.name, err)
	}
	if conn == nil || conn.Conn().IsClosed() {
		return &lostError{where: s.where, err: err}
	}
	return fmt.Errorf("%s: %w", s.name, err)
}

// enter registers an operation, or returns ErrClosed.
func (s *Store) enter() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return kv.ErrClosed
	}
	s.inflight.Add(1)
	return nil
}

// op is one Update or View call, waiting for the server through outages.
type op struct {
	s     *Store
	ctx   context.Context
	since time.Time // when the outage this call is waiting through began
	waits int
	// gaveUp: a wait for the server ended the call (the outage lasted
	// OutageTimeout, ctx ended, the store closed); the server did not
	// answer it, whatever error fn made of that.
	gaveUp bool
}

// Back-off between tries to reach the server during an outage.
const (
	outageFirstWait = 25 * time.Millisecond
	outageMaxWait   = time.Second
)

// outageDelay is the wait before retry number waits (1 and up) during an
// outage: outageFirstWait doubling up to outageMaxWait. It doubles step by
// step instead of shifting, so no number of retries can overflow it into
// a negative or zero wait (a shift by the retry count did, around the 40th
// retry of a 25 s outage, and rand.N panicked on it).
func outageDelay(waits int) time.Duration {
	d := outageFirstWait
	for i := 1; i < waits && d < outageMaxWait; i++ {
		d *= 2
	}
	return min(d, outageMaxWait)
}

// untilReached runs attempt again, after wait, while it fails because
// the server could not be reached; once it reached the server, the
// outage (if any) is over (reached).
func (o *op) untilReached(attempt func() error) error {
	for {
		err := attempt()
		var lost *lostError
		if !errors.As(err, &lost) {
			if err == nil {
				o.reached()
			}
			return err
		}
		if werr := o.wait(lost); werr != nil {
			return werr
		}
	}
}

// wait is called after a connection failure, lost: it waits before the
// next try and returns nil, or returns the error to fail with once the
// outage has lasted OutageTimeout (or ctx ended, or the store was closed).
// The first retry is immediate: a connection broken by a server restart
// is usually followed by a good one.
func (o *op) wait(lost *lostError) (err error) {
	defer func() { o.gaveUp = err != nil }()
	s := o.s
	now := time.Now()
	if o.since.IsZero() && lost.full {
		// The server answers: nothing to reset, no outage to declare.
		o.since = now
		if last := s.fullWarned.Load(); now.UnixNano()-last > int64(time.Minute) && s.fullWarned.CompareAndSwap(last, now.UnixNano()) {
			s.log.Warn("PostgreSQL refuses new connections: too many clients (raise its max_connections, "+
				"or lower pool_max_conns in the clients' URLs); transactions wait for a free connection",
				"server", s.where, "pool", s.pool.Stat().TotalConns(), "timeout", s.opts.OutageTimeout, "err", lost.err)
		}
	}
	if o.since.IsZero() {
		o.since = now
		// The pool's idle connections are likely broken too.
		s.pool.Reset()
		if s.outage.CompareAndSwap(false, true) {
			s.outageSince.Store(now.UnixNano())
			timeout := s.opts.OutageTimeout.String()
			if s.opts.WaitForever {
				timeout = "none (wait forever)"
			}
			s.log.Warn("PostgreSQL unreachable; transactions wait for it",
				"server", s.where, "timeout", timeout, "err", lost.err)
		}
	}
	// The outage's length, not this call's: calls that start late in a
	// long outage fail at once rather than each waiting a full timeout.
	since := o.since
	if t := s.outageSince.Load(); !lost.full && s.outage.Load() && t != 0 && t < since.UnixNano() {
		since = time.Unix(0, t)
	}
	waited := now.Sub(since)
	if !s.opts.WaitForever && waited >= s.opts.OutageTimeout {
		return &unreachableError{where: s.where, waited: waited, err: lost.err}
	}
	var d time.Duration
	if o.waits > 0 {
		d = outageDelay(o.waits)
		d = d/2 + rand.N(d/2+1)
		if !s.opts.WaitForever {
			d = min(d, s.opts.OutageTimeout-waited)
		}
	}
	o.waits++
	if d == 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-o.ctx.Done():
		return fmt.Errorf("%s: waiting for the server: %w (%v)", s.name, o.ctx.Err(), lost)
	case <-s.done:
		return kv.ErrClosed
	case <-t.C:
		return nil
	}
}

// reached records that the server answered this call, ending the outage
// in the log.
func (o *op) reached() {
	if o.s.outage.Load() && o.s.outage.CompareAndSwap(true, false) {
		o.s.log.Info("PostgreSQL reachable again", "server", o.s.where,
			"after", time.Since(time.Unix(0, o.s.outageSince.Load())).Round(time.Millisecond))
	}
}

// Update implements kv.Store. fn runs in a REPEATABLE READ (snapshot
// isolation) transaction and is
// run again after a serialization failure or deadlock (as kv.RunWithRetry
// does), and after a connection failure before the commit was sent, for as
// long as Options.OutageTimeout allows. A connection lost after the commit
// was sent fails with an error wrapping kv.ErrUnknownOutcome.
func (s *Store) Update(ctx context.Context, fn func(tx kv.Txn) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.inflight.Done()
	return s.update(&op{s: s, ctx: ctx}, nil, fn)
}

// update runs fn as Update does; its first attempt in first if that is
// not nil (a transaction StartUpdate began).
func (s *Store) update(o *op, first *txn, fn func(tx kv.Txn) error) error {
	for {
		err := kv.RunWithRetry(o.ctx, func() error {
			tx := first
			if tx == nil {
				if err := o.ctx.Err(); err != nil {
					return err
				}
				tx = &txn{s: s, o: o, rw: true}
			}
			first = nil
			return s.attempt(tx, fn)
		})
		var lost *lostError
		if !errors.As(err, &lost) {
			// Only an answer from the server ends the outage, not
			// the end of a wait for it: a call whose context ended
			// while it waited restarted the store's outage clock, and
			// the next call waited a whole OutageTimeout again.
			if err == nil || !o.gaveUp && o.ctx.Err() == nil && !errors.Is(err, ErrUnreachable) {
				o.reached()
			}
			return err
		}
		if werr := o.wait(lost); werr != nil {
			return werr
		}
	}
}

var _ kv.Starter = (*Store)(nil)

// StartUpdate implements kv.Starter: BEGIN and one statement reading the
// first pairs of ranges go in one round trip. The transaction holds a
// connection until Update or Abandon.
func (s *Store) StartUpdate(ctx context.Context, ranges []kv.Range) (kv.Started, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := s.enter(); err != nil {
		return nil, err
	}
	tx := &txn{s: s, o: &op{s: s, ctx: ctx}, rw: true}
	if err := tx.Preread(ranges); err != nil {
		tx.drop()
		s.inflight.Done()
		return nil, err
	}
	tx.o.reached()
	return &started{tx: tx}, nil
}

// started is a kv.Started: a transaction StartUpdate began, holding the
// store's inflight count until it ends.
type started struct {
	tx   *txn
	once sync.Once
}

func (st *started) Reader() kv.Reader { return st.tx }

func (st *started) Update(ctx context.Context, fn func(tx kv.Txn) error) error {
	err := kv.ErrClosed // the transaction already ended
	st.once.Do(func() {
		tx := st.tx
		s := tx.s
		defer s.inflight.Done()
		// The attempt runs under the caller's context and outage
		// wait, not the starter's.
		tx.o = &op{s: s, ctx: ctx}
		err = s.update(tx.o, tx, fn)
	})
	return err
}

func (st *started) Abandon() {
	st.once.Do(func() {
		st.tx.drop()
		st.tx.s.inflight.Done()
	})
}

var _ kv.BlindWriter = (*Store)(nil)

// FirstsAndWrite implements kv.BlindWriter: BEGIN, the statement of
// Firsts, the writes and COMMIT go in one round trip. Like Update's, the
// transaction runs again after a serialization failure, and after a
// connection failure for as long as Options.OutageTimeout allows; unlike
// Update's, also after a connection lost once the commit was sent (the
// writes are ones that can be made twice).
func (s *Store) FirstsAndWrite(ctx context.Context, ranges []kv.Range, writes []kv.Write) ([]kv.Pair, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.inflight.Done()
	sql, args, follow := s.firstsStatement(ranges)
	var w writeSet
	for _, x := range writes {
		if x.Touch {
			w.touch(bytes.Clone(x.Key))
			continue
		}
		w.add(bytes.Clone(x.Key), put{value: append([]byte{}, x.Value...), del: x.Delete}, false)
	}
	o := &op{s: s, ctx: ctx}
	out := make([]kv.Pair, len(ranges))
	err := o.untilReached(func() error {
		return kv.RunWithRetry(ctx, func() error {
			if err := ctx.Err(); err != nil {
				return err
			}
			return s.blind(o, sql, args, follow, ranges, &w, out)
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// blind is one attempt of FirstsAndWrite.
func (s *Store) blind(o *op, sql string, args []any, follow bool, ranges []kv.Range, w *writeSet, out []kv.Pair) error {
	s.reads.Add(1)
	tx := &txn{s: s, o: o, rw: true}
	defer tx.drop()
	c, err := s.pool.Acquire(o.ctx)
	if err != nil {
		return s.failure(o.ctx, err, nil)
	}
	tx.conn = c
	// As for a commit: once sent, the answer is awaited whatever the
	// caller's context does.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(o.ctx), s.opts.OutageTimeout)
	defer cancel()
	var b pgx.Batch
	b.Queue(beginUpdate)
	b.Queue(sql, args...)
	n := w.queue(s, &b)
	b.Queue(commitSQL)
	br := c.SendBatch(ctx, &b)
	_, err = br.Exec()
	if err == nil {
		rows, _ := br.Query()
		err = readRows(rows, func(rows pgx.Rows) error { return s.scanFirsts(rows, ranges, follow, out) })
	}
	var tag pgconn.CommandTag
	for i := 0; err == nil && i <= n; i++ {
		tag, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return s.failure(ctx, err, c)
	}
	if tag.String() != "COMMIT" {
		return fmt.Errorf("%s: COMMIT answered %q: the transaction was rolled back", s.name, tag)
	}
	return nil
}

var _ kv.GuardedWriter = (*Store)(nil)

// WriteIf implements kv.GuardedWriter: BEGIN, the guard statement, the
// writes and COMMIT go in one round trip. A guard that does not hold makes
// the guard statement fail, and the server then skips the rest of the
// batch, COMMIT included: the transaction is rolled back (in the
// background, as an abandoned one is). A write of a key a guard wants is
// an UPDATE, as Update's of a key it read is (see txn.seen), so that a
// concurrent DELETE of it makes the transaction fail rather than be
// undone. A serialization failure or deadlock fails with kv.ErrGuard and
// is not retried. A connection that fails before the batch was sent is
// replaced, as Update's is, for as long as Options.OutageTimeout allows;
// one lost after it was sent fails with kv.ErrUnknownOutcome.
func (s *Store) WriteIf(ctx context.Context, guards []kv.Guard, writes []kv.Write) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, g := range guards {
		if r := g.Range; r.End == nil || bytes.Compare(r.Start, r.End) >= 0 || r.Follow != nil {
			return fmt.Errorf("%s: WriteIf guard on range [%x, %x): it must be bounded, not empty and without Follow", s.name, r.Start, r.End)
		}
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.inflight.Done()
	if len(guards) == 0 && len(writes) == 0 {
		return nil
	}
	var guard []any
	wanted := make(map[string]bool)
	if len(guards) > 0 {
		starts, ends := make([][]byte, len(guards)), make([][]byte, len(guards))
		wkeys, wvalues := make([][]byte, len(guards)), make([][]byte, len(guards))
		for i, g := range guards {
			starts[i], ends[i] = append([]byte{}, g.Range.Start...), g.Range.End
			if g.Want.Key != nil { // else NULL: the range must be empty
				wkeys[i] = g.Want.Key
				wanted[string(g.Want.Key)] = true
			}
			wvalues[i] = append([]byte{}, g.Want.Value...) // never NULL
		}
		guard = []any{starts, ends, wkeys, wvalues}
	}
	// The last write of a key wins, as in a transaction; a statement
	// may not write a key twice.
	last := make(map[string]int, len(writes))
	for i, x := range writes {
		last[string(x.Key)] = i
	}
	var w writeSet
	for i, x := range writes {
		if last[string(x.Key)] == i {
			w.add(bytes.Clone(x.Key), put{value: append([]byte{}, x.Value...), del: x.Delete}, wanted[string(x.Key)])
		}
	}
	o := &op{s: s, ctx: ctx}
	return o.untilReached(func() error { return s.guarded(o, guard, &w) })
}

// guarded is one attempt of WriteIf, with guard the arguments of the
// guard statement (nil: no guards).
func (s *Store) guarded(o *op, guard []any, w *writeSet) error {
	if guard != nil {
		s.reads.Add(1)
	}
	tx := &txn{s: s, o: o, rw: true}
	defer tx.drop() // rolls back a transaction the guard made fail
	c, err := s.pool.Acquire(o.ctx)
	if err != nil {
		return s.failure(o.ctx, err, nil)
	}
	tx.conn = c
	// As for a commit: once sent, the answer is awaited whatever the
	// caller's context does.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(o.ctx), s.opts.OutageTimeout)
	defer cancel()
	var b pgx.Batch
	b.Queue(beginUpdate)
	if guard != nil {
		b.Queue(s.sql.guard, guard...)
	}
	w.queue(s, &b)
	b.Queue(commitSQL)
	tag, err := sendAll(ctx, c, &b, b.Len()-1)
	if err == nil {
		if tag.String() != "COMMIT" {
			return fmt.Errorf("%s: COMMIT answered %q: the transaction was rolled back", s.name, tag)
		}
		return nil
	}
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe) && pe.Code == "22012": // only the guard statement divides
		return fmt.Errorf("%s: %w", s.name, kv.ErrGuard)
	case errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01"):
		return fmt.Errorf("%s: %w (%s)", s.name, kv.ErrGuard, pe.Message)
	}
	return s.sendFailure(ctx, err, c, false, "a guarded write")
}

var _ kv.Exclusive = (*Store)(nil)

// UpdateExclusive implements kv.Exclusive: a READ COMMITTED transaction
// whose first statement creates and write-locks keys (in key order, so
// two such transactions cannot deadlock on them). Concurrent
// REPEATABLE READ writers of those keys wait, then fail with a
// serialization error and are retried by their Update.
func (s *Store) UpdateExclusive(ctx context.Context, keys [][]byte, fn func(tx kv.Txn) error) error {
	if len(keys) == 0 {
		return s.Update(ctx, fn)
	}
	keys = slices.Clone(keys)
	return s.Update(ctx, func(tx kv.Txn) error {
		t := tx.(*txn)
		t.exclusive = true
		t.mu.Lock()
		err := t.query(s.sql.lock, []any{keys}, func(rows pgx.Rows) error { return nil })
		t.mu.Unlock()
		if err != nil {
			return err
		}
		return fn(tx)
	})
}

// attempt runs fn once in tx and commits.
func (s *Store) attempt(tx *txn, fn func(tx kv.Txn) error) error {
	defer tx.drop() // also if fn panics
	ferr := fn(tx)
	if tx.err != nil {
		// A statement failed, so the server transaction is void, and so
		// is whatever fn made of it: retry if the failure allows, even if
		// fn turned the error into another or dropped it.
		var lost *lostError
		if ferr == nil || errors.Is(tx.err, kv.ErrConflict) || errors.As(tx.err, &lost) {
			return tx.err
		}
		return ferr
	}
	if ferr != nil {
		return ferr
	}
	return tx.commit()
}

// View implements kv.Store. fn reads a REPEATABLE READ READ ONLY
// transaction: one snapshot. fn runs once: a connection that fails before
// fn has read anything is replaced as Update's would be, but one that
// fails later ends the View with an error wrapping ErrUnreachable.
func (s *Store) View(ctx context.Context, fn func(r kv.Reader) error) error {
	return s.view(ctx, false, fn)
}

var _ kv.LooseViewer = (*Store)(nil)

// ViewLoose implements kv.LooseViewer: like View, but every read is its
// own statement outside a transaction (no BEGIN, no ROLLBACK).
func (s *Store) ViewLoose(ctx context.Context, fn func(r kv.Reader) error) error {
	return s.view(ctx, true, fn)
}

func (s *Store) view(ctx context.Context, loose bool, fn func(r kv.Reader) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.inflight.Done()
	o := &op{s: s, ctx: ctx}
	tx := &txn{s: s, o: o, loose: loose}
	defer tx.drop() // also if fn panics
	err := fn(tx)
	if err == nil {
		err = tx.err // fn may have ignored a failed read; its result is void
	}
	if err == nil {
		o.reached()
	}
	return err
}

// Sync implements kv.Store. PostgreSQL makes a transaction durable before
// it reports the commit (synchronous_commit, which the store turns on for
// its connections if the server's default is off), so there is nothing to
// do: Sync only reports ErrClosed or ctx's error.
func (s *Store) Sync(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	s.inflight.Done()
	return nil
}

// Name implements kv.Store: "postgres:HOST:PORT/DB", or for a Unix socket
// "postgres:SOCKETDIR:PORT/DB". It holds no password.
func (s *Store) Name() string { return s.name }

// Close implements kv.Store. It ends waits for an unreachable server (they
// fail with kv.ErrClosed), waits for running transactions, then closes the
// listener and the pool. Later calls return kv.ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return kv.ErrClosed
	}
	s.closed = true
	close(s.done)
	s.mu.Unlock()
	s.inflight.Wait()
	s.lis.close()
	s.pool.Close()
	return nil
}

var _ kv.Profiler = (*Store)(nil)

// Profile implements kv.Profiler: a server that other clients write.
func (s *Store) Profile() kv.Profile {
	return kv.Profile{Engine: "postgres", SnapshotIsolation: true, Starter: true, GuardedWriter: true, BlindWriter: true,
		LooseViewer: true, Notifier: true, Exclusive: true}
}
