// Package pebble is the embedded kv.Store backend, on CockroachDB's Pebble
// LSM engine. It owns one Pebble directory and nothing about file systems.
//
// # Transactions
//
// Update transactions run one at a time behind a writer lock, each in an
// indexed batch over the database, so they are serializable, see their own
// writes, and never conflict. View reads a Pebble snapshot, so all reads of
// one View are consistent and never block writers.
//
// # Durability
//
// By default an Update returns once its batch is applied to the memtable
// and appended to the write-ahead log's in-memory buffer, without fsync
// (pebble.NoSync). Sync fsyncs the WAL, after which every Update that
// returned before Sync was called survives a machine crash.
//
// A process crash (kill -9, a panic that kills the process) can lose
// recently committed Updates too, not only a machine crash. Pebble's WAL
// writer (record.LogWriter, v2.1.7) copies a NoSync record into its current
// 32 KiB block in process memory and wakes its flush goroutine only when the
// block fills or a synced write asks for it; nothing writes a partial block
// to the OS on a timer. So the Updates committed since the last Sync (or
// since the last full block) can be lost on kill -9: up to about 32 KiB of
// WAL records, plus whatever full blocks the flusher had not yet written.
// What is lost is always a suffix of the commit order and each Update is
// atomic, so the store recovers to the state after some earlier Update.
// Pebble has no option that writes a NoSync commit to the OS without also
// fsyncing it.
//
// Options.SyncCommits makes every Update durable against both kinds of
// crash before it returns: its batch is committed with pebble.Sync, and the
// writer lock is released before waiting for the fsync so that concurrent
// Updates share fsyncs (group commit).
package pebble
