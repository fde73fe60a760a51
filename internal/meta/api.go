package meta

// This file fixes the API that vfs, chunk users and the admin tools program
// against. Bodies live in the other files of the package.

import (
	"context"
	"time"

	"github.com/cairnfs/cairn/internal/base"
)

// Settings is the volume's settings record, written by Format and read by
// every client. Stored as JSON under the settings key (see keys.go).
type Settings struct {
	Name          string `json:"name"`
	UUID          string `json:"uuid"`
	FormatVersion int    `json:"format_version"`
	BlockSize     int    `json:"block_size"` // bytes, max size of one object
	ChunkSize     int    `json:"chunk_size"` // always base.ChunkSize for now
	DataURL       string `json:"data_url"`
	Capacity      uint64 `json:"capacity,omitempty"`   // bytes; 0 = unlimited
	Inodes        uint64 `json:"inodes,omitempty"`     // 0 = unlimited
	TrashDays     int    `json:"trash_days,omitempty"` // removed files wait this long in /.trash (trash.go); 0: no trash
	// InlineMax: slices of at most this many bytes at the start of a file
	// keep their block in the metadata engine rather than the object store
	// (blob.go, chunk.Options.InlineMax); 0: none. Changes after format
	// (ChangeSettings) apply to the slices written after them.
	// Needs format version 2.
	InlineMax int       `json:"inline_max,omitempty"`
	Created   time.Time `json:"created"`
}

// CurrentFormatVersion is written by Format; Open refuses newer versions.
// Version 2 added Settings.InlineMax: a version 1 client would look for
// the inline blocks in the object store. Version 3 binds every block
// object to its identity (Settings.BoundBlocks): a version 2 client would
// reject its blocks as corrupt.
const CurrentFormatVersion = 3

// BoundBlocks reports whether the volume's block objects are bound to
// their identity, slice id, block index and length, so that an object
// read under another block's key fails its check (chunk.BlockFormat2):
// volumes of format version 3 and later. Older volumes keep writing and
// reading blocks checksummed alone (chunk.BlockFormat1), which clients
// of their own version can still read; see docs/design/0001-core.md.
func (s Settings) BoundBlocks() bool { return s.FormatVersion >= 3 }

// SessionInfo describes a client session (one mount or one admin process).
type SessionInfo struct {
	ID         uint64    `json:"id"`
	Host       string    `json:"host"`
	Pid        int       `json:"pid"`
	MountPoint string    `json:"mount_point"`
	Version    string    `json:"version"`
	Started    time.Time `json:"started"`
	Heartbeat  time.Time `json:"heartbeat"`
	// Timeout is how long the session may go without a heartbeat before
	// other clients declare it dead; zero leaves it to their default.
	Timeout time.Duration `json:"timeout,omitempty"`
}

// Usage is the volume's usage counters.
type Usage struct {
	Bytes  uint64 // logical bytes of regular files (sum of lengths, rounded to 4 KiB)
	Inodes uint64
}

// ChunkInfo describes one chunk of a file (for cairn info).
type ChunkInfo struct {
	Index  uint32
	Slices []base.Slice
}

// Problem is one inconsistency found by Check.
type Problem struct {
	Kind   string   `json:"kind"`           // short machine-friendly kind, e.g. "dangling-dentry"
	Ino    base.Ino `json:"ino,omitempty"`  // inode concerned, if any
	Path   string   `json:"path,omitempty"` // a path name of Ino, if it has one
	Detail string   `json:"detail"`
}

// SliceUse is reported by ForEachSlice: a slice referenced by a chunk.
type SliceUse struct {
	Ino   base.Ino
	Chunk uint32
	ID    uint64
	Size  uint32
}

// FS is what a file-system front end needs of the metadata engine: vfs
// programs against it alone (the admin tools use the rest of *Meta:
// format, sessions, snapshots' creation and deletion, restore, diff,
// blobs, statistics, Check). Its reads (Lookup through Access) are those
// a snapshot's View has too.
type FS interface {
	// Reads of the namespace, attributes, xattrs and file maps.
	Lookup(ctx context.Context, c *Caller, parent base.Ino, name string) (base.Ino, base.Attr, error)
	GetAttr(ctx context.Context, ino base.Ino) (base.Attr, error)
	Readdir(ctx context.Context, c *Caller, dir base.Ino, after string, limit int, plus bool) ([]base.Entry, error)
	Readlink(ctx context.Context, ino base.Ino) (string, error)
	GetXattr(ctx context.Context, c *Caller, ino base.Ino, name string) ([]byte, error)
	ListXattr(ctx context.Context, c *Caller, ino base.Ino) ([]string, error)
	ReadChunk(ctx context.Context, ino base.Ino, index uint32) ([]base.Slice, error)
	Access(ctx context.Context, c *Caller, ino base.Ino, mask uint32) error
	StatFS(ctx context.Context) (StatFS, error)
	// StatFSDir is StatFS as seen from ino: in a directory quota's tree,
	// that quota's limits and usage.
	StatFSDir(ctx context.Context, ino base.Ino) (StatFS, error)
	Settings() Settings

	// Changes of the namespace and attributes.
	Create(ctx context.Context, c *Caller, parent base.Ino, name string, mode, umask uint32) (base.Ino, base.Attr, error)
	Mknod(ctx context.Context, c *Caller, parent base.Ino, name string, typ base.FileType, mode, umask, rdev uint32, target string) (base.Ino, base.Attr, error)
	Link(ctx context.Context, c *Caller, ino, parent base.Ino, name string) (base.Attr, error)
	UnlinkChange(ctx context.Context, c *Caller, parent base.Ino, name string) (DirChange, error)
	Rmdir(ctx context.Context, c *Caller, parent base.Ino, name string) error
	Rename(ctx context.Context, c *Caller, sp base.Ino, sn string, dp base.Ino, dn string, flags uint32) error
	SetAttr(ctx context.Context, c *Caller, ino base.Ino, req SetAttrRequest) (base.Attr, error)
	SetXattr(ctx context.Context, c *Caller, ino base.Ino, name string, value []byte, flags int) error
	RemoveXattr(ctx context.Context, c *Caller, ino base.Ino, name string) error

	// Open files and locks.
	OpenFileChunk(ctx context.Context, ino base.Ino) (a base.Attr, first []base.Slice, ok bool, err error)
	CloseFile(ctx context.Context, ino base.Ino) error
	Flock(ctx context.Context, ino base.Ino, owner uint64, typ LockType, pid uint32, wait bool) error
	GetPosixLock(ctx context.Context, ino base.Ino, owner uint64, l Lock) (Lock, error)
	SetPosixLock(ctx context.Context, ino base.Ino, owner uint64, l Lock, wait bool) error

	// File content: slices, compaction, the delete queue.
	NewSliceID(ctx context.Context) (uint64, error)
	ForgetSlice(id uint64)
	WriteSlice(ctx context.Context, ino base.Ino, index uint32, s base.Slice, mtime int64) (compact bool, err error)
	WriteSlices(ctx context.Context, ino base.Ino, ws []SliceWrite, mtime int64) (compact []uint32, err error)
	CompactThreshold() int
	CompactChunk(ctx context.Context, ino base.Ino, index uint32, old []base.Slice, drop []bool, s base.Slice) error
	TakeDeletes(ctx context.Context, max int) ([]base.Slice, error)
	FinishDeletes(ctx context.Context, ids []uint64) error
	DeletesPending() <-chan struct{}

	// Snapshots, read through a View; durability.
	Snapshots(ctx context.Context) ([]Snapshot, error)
	SnapshotByName(ctx context.Context, name string) (Snapshot, error)
	View(snap Snapshot) *View
	Sync(ctx context.Context) error
}

var _ FS = (*Meta)(nil)
