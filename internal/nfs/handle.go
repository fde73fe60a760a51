package nfs

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"syscall"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/nfs/proto"
	"github.com/cairnfs/cairn/internal/vfs"
)

// File handles. A handle names an inode without any state in the gateway,
// so it stays valid across gateway restarts, across renames, and between
// gateways of one volume. It is 32 bytes:
//
//	[0]      version (1)
//	[1]      kind: 0 = an inode of the live volume,
//	               1 = an inode of a snapshot (under /.snapshots),
//	               2 = the /.snapshots directory
//	[2:4]    zero (reserved)
//	[4:12]   volume id: the first 8 bytes of SHA-256(volume UUID)
//	[12:20]  inode number (big-endian); zero for kind 2
//	[20:28]  kind 1: the snapshot's epoch (big-endian); otherwise zero
//	[28:32]  check: the first 4 bytes of SHA-256(volume UUID || bytes 0..27)
//
// A handle of the wrong size, version or kind, with non-zero reserved
// bytes, or whose check does not match, is NFS3ERR_BADHANDLE (forged or
// damaged); one of another volume, whose inode no longer exists, or of a
// snapshot that was deleted, is NFS3ERR_STALE. Cairn never reuses inode
// numbers (meta allocates them from a counter) nor snapshot epochs, so
// the numbers alone are a generation.
//
// Snapshot inodes are named by (epoch, inode) rather than by vfs's
// front-end number, whose high bits are a slot that each process assigns
// in its own order: vfs.SplitIno and vfs.SnapshotIno convert.
const (
	handleSize    = 32
	handleVersion = 1

	kindLive      = 0
	kindSnapshot  = 1
	kindSnapshots = 2
)

// handles encodes and checks handles of one volume.
type handles struct {
	uuid  []byte
	volID [8]byte
	fsid  uint64
}

func newHandles(uuid string) handles {
	sum := sha256.Sum256([]byte(uuid))
	h := handles{uuid: []byte(uuid)}
	copy(h.volID[:], sum[:8])
	h.fsid = binary.BigEndian.Uint64(sum[:8])
	return h
}

func (h handles) check(b []byte) [4]byte {
	d := sha256.New()
	d.Write(h.uuid)
	d.Write(b[:28])
	var sum [sha256.Size]byte
	var out [4]byte
	copy(out[:], d.Sum(sum[:0]))
	return out
}

// encode returns the handle of (kind, epoch, ino).
func (h handles) encode(kind byte, epoch uint64, ino base.Ino) []byte {
	b := make([]byte, handleSize)
	b[0] = handleVersion
	b[1] = kind
	copy(b[4:12], h.volID[:])
	binary.BigEndian.PutUint64(b[12:20], uint64(ino))
	binary.BigEndian.PutUint64(b[20:28], epoch)
	c := h.check(b)
	copy(b[28:], c[:])
	return b
}

// decode returns what a handle names, or an NFS status.
func (h handles) decode(b []byte) (kind byte, epoch uint64, ino base.Ino, st uint32) {
	if len(b) != handleSize || b[0] != handleVersion || b[1] > kindSnapshots ||
		b[2] != 0 || b[3] != 0 {
		return 0, 0, 0, proto.NFS3ErrBadHandle
	}
	if string(b[4:12]) != string(h.volID[:]) {
		return 0, 0, 0, proto.NFS3ErrStale
	}
	if c := h.check(b); string(c[:]) != string(b[28:]) {
		return 0, 0, 0, proto.NFS3ErrBadHandle
	}
	kind = b[1]
	ino = base.Ino(binary.BigEndian.Uint64(b[12:20]))
	epoch = binary.BigEndian.Uint64(b[20:28])
	switch {
	case kind == kindSnapshots && (ino != 0 || epoch != 0),
		kind == kindLive && epoch != 0,
		kind != kindSnapshots && (ino == 0 || ino>>48 != 0):
		return 0, 0, 0, proto.NFS3ErrBadHandle
	}
	return kind, epoch, ino, proto.NFS3OK
}

// handle returns the handle of a vfs front-end inode number, or nil if
// vfs does not know the number (it gave it out, so this does not happen).
func (s *Server) handle(ino base.Ino) []byte {
	kind, epoch, real, e := s.v.SplitIno(ino)
	if e != 0 {
		s.log.Warn("nfs: no handle for an inode number vfs returned", "ino", ino, "errno", e)
		return nil
	}
	switch kind {
	case vfs.InoSnapshot:
		return s.fh.encode(kindSnapshot, epoch, real)
	case vfs.InoSnapshotsDir:
		return s.fh.encode(kindSnapshots, 0, 0)
	}
	return s.fh.encode(kindLive, 0, real)
}

// inoOf turns a handle into a vfs front-end inode number.
func (s *Server) inoOf(ctx context.Context, b []byte) (base.Ino, uint32) {
	kind, epoch, ino, st := s.fh.decode(b)
	if st != proto.NFS3OK {
		return 0, st
	}
	switch kind {
	case kindSnapshots:
		return vfs.SnapshotsIno, proto.NFS3OK
	case kindSnapshot:
		fino, e := s.v.SnapshotIno(ctx, epoch, ino)
		if e == syscall.EINVAL {
			return 0, proto.NFS3ErrBadHandle
		}
		if e != 0 {
			return 0, nfsStatus(e)
		}
		return fino, proto.NFS3OK
	}
	return ino, proto.NFS3OK
}

// fileid is the NFS file id of a front-end inode number: the same in
// every gateway of the volume (vfs's own numbers for snapshot inodes
// depend on the order a process met the snapshots). Live inodes keep
// their number (below 2^48); an inode of a snapshot puts 1 + the epoch
// modulo 65534 in the high 16 bits (two snapshots share file ids only if
// their epochs are congruent modulo 65534); /.snapshots is
// vfs.SnapshotsIno.
func (s *Server) fileid(ino base.Ino) uint64 {
	kind, epoch, real, e := s.v.SplitIno(ino)
	if e != 0 || kind != vfs.InoSnapshot {
		return uint64(ino)
	}
	return (epoch%0xFFFE+1)<<48 | uint64(real)
}
