// Package meta owns the POSIX metadata semantics of Cairn — namespace,
// attributes, permissions, hard links, rename, extended attributes, file
// maps (chunks and slices), sessions and open-file holds, usage, and the
// consistency check — written once over the narrow transactional kv.Store.
// It must not do data I/O, convert errors to errno, or know any backend.
//
// # Model
//
// Every operation is one kv transaction (Store.Update retries conflicts,
// so operation bodies have no side effects outside the transaction).
// Transactions may be only snapshot-isolated (kv.Txn): an operation that
// depends on a key it only reads also writes a key every conflicting
// operation writes — usually the attributes it changes anyway; see the
// lock guard, the directory-move counter and checkReserved. All key
// encoding lives in keys.go; record values in codec.go.
//
// Records are versioned by epoch (versioned.go): a logical key has one
// physical key per epoch in which it was written, newest first. The volume
// has a live epoch (starts at 1) and a list of frozen snapshot epochs
// (empty until snapshots exist). Writes go to the live epoch; an older
// version is kept only while a snapshot can still see it, so without
// snapshots every record has exactly one version and deletes remove keys.
//
// Inodes: the root is 1. Directories have nlink 2 + subdirectories and a
// parent pointer (the root is its own parent). Dentries carry the type of
// their target. Regular files are cut into base.ChunkSize chunks, each an
// ordered list of slice references (later wins); truncation covers cut
// tails with zero slices (ID 0). Slices no record references any more are
// queued as pending deletes for the data layer (TakeDeletes,
// FinishDeletes, DeletesPending).
//
// Unlinked files that are open stay as orphans (nlink 0) until the last
// CloseFile, or until their holding session is closed or found dead; see
// session.go.
//
// Permissions (perm.go) follow Linux: see Caller. Meta never updates atime
// on reads; that policy belongs to the caller (SetAttr with SetAtime*).
//
// Errors are base sentinels wrapped with context; decoding bad stored data
// yields base.ErrIO, never a panic.
package meta
