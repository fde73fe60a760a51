package meta

// This file fixes the API that vfs, chunk users and the admin tools program
// against. Bodies live in the other files of the package.

import (
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
	Capacity      uint64 `json:"capacity,omitempty"` // bytes; 0 = unlimited
	Inodes        uint64 `json:"inodes,omitempty"`   // 0 = unlimited
	TrashDays     int    `json:"trash_days,omitempty"`
	// InlineMax: slices of at most this many bytes at the start of a file
	// keep their block in the metadata engine rather than the object store
	// (blob.go, chunk.Options.InlineMax); 0: none. Fixed at format time.
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
	Kind   string   // short machine-friendly kind, e.g. "dangling-dentry"
	Ino    base.Ino // inode concerned, if any
	Detail string
}

// SliceUse is reported by ForEachSlice: a slice referenced by a chunk.
type SliceUse struct {
	Ino   base.Ino
	Chunk uint32
	ID    uint64
	Size  uint32
}
