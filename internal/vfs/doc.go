// Package vfs is Cairn's POSIX operation layer, shared by every front end
// (the FUSE adapter, the NFS gateway later). It owns open files and handles,
// the write buffers of open files, open-time access checks, the background
// work that follows writes (compaction, deletion of freed slices), and it is
// the only place where Cairn errors become syscall.Errno. It also shows
// the volume's snapshots, read-only, under the virtual directory
// /.snapshots, and can serve one snapshot at the root (snapshot.go).
//
// Namespace permission checks are made by package meta inside the same
// transaction as the operation they guard, so they cannot race with it; vfs
// passes the caller along.
//
// vfs must not know about FUSE or NFS wire types: front ends translate.
package vfs
