package nfs

import (
	"crypto/sha256"
	"encoding/binary"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/nfs/proto"
)

// File handles. A handle names an inode without any state in the gateway,
// so it stays valid across gateway restarts, across renames, and between
// gateways of one volume. It is 32 bytes:
//
//	[0]      version (1)
//	[1]      kind: 0 = an inode of the live volume
//	[2:4]    zero (reserved)
//	[4:12]   volume id: the first 8 bytes of SHA-256(volume UUID)
//	[12:20]  inode number (big-endian)
//	[20:28]  zero (reserved for a snapshot's epoch)
//	[28:32]  check: the first 4 bytes of SHA-256(volume UUID || bytes 0..27)
//
// A handle of the wrong size, version or kind, or whose check does not
// match, is NFS3ERR_BADHANDLE (forged or damaged); one of another volume,
// or whose inode no longer exists, is NFS3ERR_STALE. Cairn never reuses
// inode numbers (meta allocates them from a counter), so the number alone
// is a generation. Snapshot trees (/.snapshots) have no handles yet.
const (
	handleSize    = 32
	handleVersion = 1
	kindLive      = 0
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

// encode returns the handle of a live inode.
func (h handles) encode(ino base.Ino) []byte {
	b := make([]byte, handleSize)
	b[0] = handleVersion
	b[1] = kindLive
	copy(b[4:12], h.volID[:])
	binary.BigEndian.PutUint64(b[12:20], uint64(ino))
	c := h.check(b)
	copy(b[28:], c[:])
	return b
}

// decode returns the inode a handle names, or an NFS status.
func (h handles) decode(b []byte) (base.Ino, uint32) {
	if len(b) != handleSize || b[0] != handleVersion || b[1] != kindLive ||
		b[2] != 0 || b[3] != 0 {
		return 0, proto.NFS3ErrBadHandle
	}
	for _, c := range b[20:28] {
		if c != 0 {
			return 0, proto.NFS3ErrBadHandle
		}
	}
	if string(b[4:12]) != string(h.volID[:]) {
		return 0, proto.NFS3ErrStale
	}
	if c := h.check(b); string(c[:]) != string(b[28:]) {
		return 0, proto.NFS3ErrBadHandle
	}
	ino := base.Ino(binary.BigEndian.Uint64(b[12:20]))
	if ino == 0 || ino>>48 != 0 {
		return 0, proto.NFS3ErrBadHandle
	}
	return ino, proto.NFS3OK
}
