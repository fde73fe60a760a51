package base

import "fmt"

// The vocabulary of requests that the front ends (fuse, nfs) pass through
// vfs to meta: who asks, what a setattr changes, lock requests, rename and
// xattr flags, statfs answers. It lives here, not in meta, so that the
// front ends need not import meta.

// Caller identifies who performs an operation, for permission checks and
// ownership of new inodes.
type Caller struct {
	Uid  uint32
	Gid  uint32
	Gids []uint32 // supplementary groups (may be empty)
	Pid  uint32
	// KernelChecked says the front end already enforced access permissions
	// (FUSE default_permissions): meta skips rwx access checks but still
	// applies semantic rules (sticky bit, ownership for chmod/chown/utimes,
	// setgid inheritance and clearing).
	KernelChecked bool
}

// RootCaller is a caller with every permission, for admin tools.
var RootCaller = &Caller{}

// Permits applies POSIX rwx rules: whether c may access a file of
// attributes a with mask (MayRead, MayWrite, MayExec), whatever
// KernelChecked says.
func Permits(c *Caller, a *Attr, mask uint32) bool {
	mask &= 7
	if c.Uid == 0 {
		// root bypasses rw; execute needs some x bit except on directories.
		return mask&MayExec == 0 || a.Type == TypeDir || a.Mode&0o111 != 0
	}
	var bits uint32
	switch {
	case c.Uid == a.Uid:
		bits = a.Mode >> 6
	case c.InGroup(a.Gid):
		bits = a.Mode >> 3
	default:
		bits = a.Mode
	}
	return bits&mask == mask
}

// InGroup reports whether gid is c's primary or a supplementary group.
func (c *Caller) InGroup(gid uint32) bool {
	if c.Gid == gid {
		return true
	}
	for _, g := range c.Gids {
		if g == gid {
			return true
		}
	}
	return false
}

// Access masks, as in access(2).
const (
	MayExec  = 1
	MayWrite = 2
	MayRead  = 4
)

// SetAttr flags select the fields of SetAttrRequest that apply.
const (
	SetMode = 1 << iota
	SetUid
	SetGid
	SetSize
	SetAtime
	SetMtime
	SetAtimeNow
	SetMtimeNow
	SetCtime // explicit ctime (used by restore/load)
	// SetKillSuidgid drops setuid, and setgid if group-execute is set, from
	// a non-directory: what a write or truncation by a process without
	// CAP_FSETID drops (FUSE leaves it to the file system once
	// HANDLE_KILLPRIV_V2 is negotiated). It needs no permission of its own.
	SetKillSuidgid
)

// SetAttrRequest changes attributes of an inode.
type SetAttrRequest struct {
	Valid int // bitmask of Set* flags
	Mode  uint32
	Uid   uint32
	Gid   uint32
	Size  uint64
	Atime int64 // ns
	Mtime int64 // ns
	Ctime int64 // ns
}

// Rename flags, as in renameat2(2).
const (
	RenameNoReplace = 1 << 0
	RenameExchange  = 1 << 1
)

// Xattr flags, as in setxattr(2).
const (
	XattrCreate  = 1
	XattrReplace = 2
)

// StatFS is the answer to statfs.
type StatFS struct {
	TotalBytes uint64
	AvailBytes uint64
	UsedBytes  uint64
	Files      uint64 // inodes in use
	AvailFiles uint64
	// QuotaBytes: the bytes are a directory quota's (StatFS of an inode
	// in its tree), not the volume's.
	QuotaBytes bool
}

// LockType is the type of a lock or lock request.
type LockType uint8

// Lock types.
const (
	Unlock LockType = iota
	ReadLock
	WriteLock
)

func (t LockType) String() string {
	switch t {
	case Unlock:
		return "unlock"
	case ReadLock:
		return "read"
	case WriteLock:
		return "write"
	}
	return fmt.Sprintf("locktype(%d)", t)
}

// LockEOF is the End of a POSIX lock that extends to the end of the file
// and beyond.
const LockEOF = 1<<63 - 1

// Lock is a lock held or requested. Ranges are inclusive; flock locks
// cover the whole file (Start 0, End LockEOF).
type Lock struct {
	Type       LockType
	Start, End uint64
	// Pid is the process that took the lock, as seen by its client. Locks
	// reported from another client carry Pid 0: the number would name no
	// process here.
	Pid uint32
	// Session and Owner identify the holder (filled in by GetLock).
	Session, Owner uint64
}
