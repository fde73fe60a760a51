// Package postgres is the shared kv.Store backend: the keys of one Cairn
// file system in one table of a PostgreSQL database (pgx v5, a pgxpool
// pool), which any number of clients use at once. It owns that table and
// its notification channels and nothing about file systems.
//
// # Table
//
// Open creates the table if it is missing (Options.Table, "cairn_kv" by
// default):
//
//	CREATE TABLE cairn_kv (k bytea PRIMARY KEY, v bytea NOT NULL)
//
// bytea compares byte-wise, which is the order kv requires, whatever the
// database's collation.
//
// # Transactions
//
// Update runs fn in a REPEATABLE READ (snapshot isolation) transaction, as
// the kv.Txn contract allows, and runs it again after a
// serialization failure (40001) or deadlock (40P01), as kv.RunWithRetry
// does. View runs fn in a REPEATABLE READ READ ONLY transaction, one
// snapshot of the database.
//
// Every metadata operation is one Update, so round trips are what a
// transaction costs, and the store spends as few as it can:
//
//   - The server transaction starts with the first read, whose statement is
//     sent together with BEGIN: a transaction that reads nothing costs no
//     round trip until its commit, and one that does nothing costs none.
//   - Set and Delete are buffered in the transaction; Get and Scan see them
//     (Scan merges them with the server's rows, in both directions). At
//     commit they are sent in one round trip with COMMIT: one multi-row
//     upsert (INSERT … SELECT unnest … ON CONFLICT (k) DO UPDATE) and one
//     DELETE … WHERE k = ANY($1).
//   - An Update that wrote nothing still sends COMMIT, since PostgreSQL may
//     reject even a read-only serializable transaction. A View ends with a
//     ROLLBACK sent in the background after View returns.
//   - Scan reads rows in pages of 16, 32, … up to 256 (ORDER BY k [DESC]
//     LIMIT n), so a scan that fn stops after a few keys reads few rows.
//   - Statements are prepared once per connection (pgx's statement cache).
//
// So an Update that reads r times costs r+1 round trips, and a View that
// reads r times costs r (BenchmarkUpdate, BenchmarkView).
//
// FirstsAndWrite (kv.BlindWriter) is a transaction whose writes do not
// depend on its reads: BEGIN, one statement of reads, the writes and
// COMMIT go in one round trip. A kv.Write.Touch is an UPDATE that sets
// every row under the prefix to its own value: a new row version, so a
// concurrent transaction that updates or deletes one of those rows
// conflicts with it (40001) whichever commits first. WriteIf (kv.GuardedWriter) is one whose
// writes depend on reads the caller predicted: BEGIN, a statement that
// fails (division by zero) unless each predicted first pair is there,
// the writes and COMMIT, also in one round trip.
//
// # Outages
//
// When the server cannot be reached or a connection breaks (a restart, the
// socket gone, pg_terminate_backend), Update waits and tries again with
// back-off (25 ms doubling to 1 s) for up to Options.OutageTimeout (30 s by
// default), then fails with an error wrapping ErrUnreachable that says
// "cannot reach PostgreSQL at ADDRESS". An Update whose connection broke
// before its commit was sent is run again from the start, as after a
// conflict. A View runs fn only once: a connection that breaks before fn
// has read anything is replaced the same way, but one that breaks later
// ends the View with an error wrapping ErrUnreachable, since fn may not be
// repeatable.
//
// A connection that breaks after the commit was sent, with no answer from
// the server, leaves the outcome unknown: the transaction may have
// committed. Update then fails with an error wrapping kv.ErrUnknownOutcome
// and does not run fn again, since a second run would see the first one's
// effects (a create would find its name taken) and report a wrong result.
// An answer from the server (an error, or the FATAL message of a shutting
// down server) means the transaction did not commit, and Update runs it
// again. A fast or smart shutdown of the server always answers; only a
// crash of the server or a broken network between the commit and its
// answer leaves the outcome unknown. The commit is not cancelled by the
// caller's context (that would leave the outcome unknown too); it waits
// for the answer for at most OutageTimeout. The pool pings a connection
// idle for more than a second before handing it out, and the first failure
// of an outage empties the pool, so a transaction that only writes rarely
// sends its commit on a connection that is already broken.
//
// # Durability
//
// PostgreSQL reports a commit only once its WAL is flushed, as long as
// synchronous_commit is not off; the store turns it on for its own
// connections where the server's default is off (and keeps stronger
// settings such as remote_apply). So every Update that returned nil is on
// the server's stable storage, Sync has nothing to do, and it does
// nothing. Open logs a warning if the server runs with fsync off.
//
// # Notifications
//
// Store implements kv.Notifier with LISTEN/NOTIFY. Notify is SELECT
// pg_notify(channel, payload) on a pooled connection. Subscribe registers
// with a kv.Hub and, for the first subscriber of a channel, LISTENs on it
// through one connection outside the pool, opened with the first
// subscription. That connection is re-established after a failure and
// LISTENs again on every channel; notifications sent meanwhile are lost,
// as the Notifier contract allows. The PostgreSQL channel is the table
// name, a dot, and the channel, so that file systems sharing a database do
// not wake each other, and must fit in 63 bytes.
package postgres
