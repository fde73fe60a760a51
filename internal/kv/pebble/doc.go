// Package pebble is the embedded kv.Store backend, on CockroachDB's Pebble
// LSM engine. It owns one Pebble directory and nothing about file systems.
//
// # Transactions
//
// Updates are serializable, see their own writes, and never fail with
// kv.ErrConflict. Each runs in an indexed batch over the database, first
// optimistically: its function runs beside other Updates, reading the
// latest committed state and noting the keys and key ranges it read. One
// writer slot admits one commit at a time; the committing Update checks
// that no transaction committed since it began wrote a key it read (the
// keys written by recent commits are kept in memory, see occ.go), and
// otherwise runs its function again under the slot, where no other commit
// can interfere. So the function runs at most twice. While more than about
// one optimistic Update in nine needs the second run, Updates go straight
// to the slot, as they all did before: the embedded engine serves one
// process, and concurrent transactions there are few and mostly touch
// different files (NFS REMOVEs from four clients overlapped their reads
// instead of queueing behind one another).
//
// View reads a Pebble snapshot, so all reads of one View are consistent
// and never block writers.
//
// # Durability
//
// By default an Update commits its batch with pebble.NoSync and then, before
// returning, appends a copy of the batch to a redo log, cairn-redo.log in
// the Pebble directory, with one write(2) and no fsync. What survives:
//
//   - A crash of the process (kill -9, a panic, the OOM killer): every
//     Update that returned. The write(2) put its record in the kernel's page
//     cache, which outlives the process; Open re-applies the records
//     Pebble lacks.
//   - A crash of the machine or the kernel: every Update that returned
//     before the last Sync began. The daemon calls Sync every second and on
//     fsync and fsyncdir, so at most about a second of Updates is lost.
//     Later Updates may survive too, but only as a prefix of the commit
//     order: the store recovers to the state after some Update.
//
// The redo log is needed because Pebble alone does not protect NoSync
// commits from a process crash: its WAL writer (record.LogWriter, v2.1.7)
// keeps a NoSync record in its current 32 KiB block in process memory and
// writes the block to the OS only when it fills or a synced write asks, so
// kill -9 can lose the Updates in the last block (hundreds of small ones).
//
// Each record holds a sequence number N and the batch; the batch itself
// also stores N under a reserved key, so the database says which records it
// holds. Open replays, in order, the records numbered after the database's
// N, stopping at the first record that is short or fails its CRC-32C (a
// write cut off by the crash, so never acknowledged) or breaks the
// numbering; then it syncs and empties the log. Sync fsyncs Pebble's WAL
// and then truncates the log, holding the writer lock throughout so that no
// record is appended between the two; Close does the same, so a cleanly
// closed store has an empty log. An Update that takes the log past 64 MiB
// syncs it the same way. A record costs about 2 µs (see BenchmarkUpdate).
//
// A read-only Open cannot replay; it fails if the log holds records the
// database lacks, telling the user to open the store read-write once.
//
// Options.SyncCommits makes every Update durable against both kinds of
// crash before it returns: its batch is committed with pebble.Sync, and the
// writer lock is released before waiting for the fsync so that concurrent
// Updates share fsyncs (group commit). Such Updates do not use the redo log.
// An fsync costs about 200 µs here, against about 3 µs for a default Update.
//
// # A full disk
//
// Pebble cannot survive a failed write of its WAL or MANIFEST: it calls its
// logger's Fatalf ("pebble: fatal commit error … no space left on
// device"), and it retries a failed flush at once and forever, logging
// each failure. So the store keeps Pebble from ever meeting a full disk
// (space.go):
//
//   - Options.FreeSpaceReserve (default 64 MiB, or 4 × MemTableSize if
//     more) is kept free on the file system holding the store, for
//     Pebble's own writes: flushing the memtables it holds, a new WAL
//     (preallocated to 1.1 × MemTableSize), MANIFEST edits, compactions
//     (which Pebble keeps to half the free space when it can).
//   - While less is free, an Update that writes fails with an error
//     wrapping base.ErrNoSpace ("metadata disk DIR is nearly full (X free,
//     writes need Y): free space and retry"), which vfs returns as ENOSPC.
//     Reads, and Updates that write nothing, go on.
//   - Deletes go on down to a hard floor, half the reserve: an Update
//     whose context is marked kv.Freeing (meta marks unlink, rmdir and the
//     last close of a file) is refused only below the floor, so that a
//     user can make room through a mount that is still up, as on a disk
//     shared with the data directory. Below the floor nothing is written.
//     The records of deleted objects (meta's FinishDeletes) are not
//     marked: the objects are deleted first, and their records go once
//     writes resume.
//   - The free space is measured with statfs(2) under the writer slot,
//     at most every 100 ms, sooner once the Updates admitted since could
//     have used an eighth of the room left above the reserve, and again
//     before any refusal (deletes and compactions free space unseen), so
//     writes resume as soon as space returns. Each admitted Update is
//     counted twice its batch size (the WAL and the redo log).
//   - Open (read-write) fails at once when less than the reserve is free:
//     "metadata disk DIR is full (X free, need Y): free space and retry".
//     Opening writes (a WAL, a MANIFEST, a flush of what the last WAL
//     held), and a failed flush there used to spin forever.
//   - Pebble's background errors (a failed flush or compaction, retried
//     at once) are logged once every 10 s, with a count of those left out.
//
// The guard protects against the store's own writes and against anything
// slower than its measurements; another writer that fills the same disk
// within 100 ms (or takes the last 32 MiB) can still get Pebble to a
// failed write. Then Fatalf logs the error and marks the store failed;
// when the failing call is the store's own (a commit, a sync, Open) its
// panic is recovered and returned as an error wrapping base.ErrIO, reads
// go on and every later write fails with base.ErrIO until the process
// restarts (the redo log keeps what was acknowledged). When it is one of
// Pebble's background goroutines (a flush or compaction writing the
// MANIFEST), nothing outside Pebble can recover it: the process ends, after
// the log line. A ballast file released on ENOSPC (Pebble's
// vfs.OnDiskFull) would close that gap; it is not done.
//
// # Reserved keys
//
// Keys starting with 0xff 0xff "cairn/" belong to the store (the sequence
// number above lives at 0xff 0xff "cairn/applied-seq"). Get and Scan never
// return them, and an Update that writes or deletes one fails with
// ErrReservedKey. Package meta's keys start with ASCII letters.
package pebble
