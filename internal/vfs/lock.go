package vfs

import (
	"context"
	"syscall"

	"github.com/cairnfs/cairn/internal/base"
)

// File locks. They live in meta, shared by every client of the volume, so
// a lock taken through one mount (or gateway) conflicts with locks taken
// through any other. owner is the lock owner the front end identifies the
// holder by (FUSE: the kernel's lock owner id). Locks on snapshot files
// are granted without being recorded (see snapshot.go).

// GetLock returns a lock of another owner that conflicts with l, or a Lock
// of type base.Unlock if l could be taken now.
func (v *VFS) GetLock(ctx context.Context, fh, owner uint64, l base.Lock) (base.Lock, syscall.Errno) {
	h := v.handle(fh)
	if h == nil {
		return base.Lock{}, syscall.EBADF
	}
	if h.t.ro {
		return base.Lock{Type: base.Unlock}, 0
	}
	got, err := v.m.GetPosixLock(ctx, h.ino, owner, l)
	if err != nil {
		return base.Lock{}, v.errno("getlk", err)
	}
	return got, 0
}

// SetLock takes, converts or releases a lock: a flock lock on the whole
// file when flock is set, else a POSIX lock on [l.Start, l.End]. With wait
// it blocks until granted or ctx ends (EINTR); without, a conflict is
// EAGAIN.
func (v *VFS) SetLock(ctx context.Context, fh, owner uint64, l base.Lock, flock, wait bool) syscall.Errno {
	h := v.handle(fh)
	if h == nil {
		return syscall.EBADF
	}
	if h.t.ro {
		return 0
	}
	var err error
	if flock {
		err = v.m.Flock(ctx, h.ino, owner, l.Type, l.Pid, wait)
	} else {
		if l.Type != base.Unlock {
			v.lockMu.Lock()
			if v.lockOwners == nil {
				v.lockOwners = make(map[lockRef]bool)
			}
			v.lockOwners[lockRef{h.ino, owner}] = true
			v.lockMu.Unlock()
		}
		err = v.m.SetPosixLock(ctx, h.ino, owner, l, wait)
	}
	if err != nil {
		return v.errno("setlk", err)
	}
	return 0
}

// ReleaseFlock drops the flock lock owner holds through handle fh (the
// kernel asks for it when the last reference to a flocked file closes).
func (v *VFS) ReleaseFlock(ctx context.Context, fh, owner uint64) syscall.Errno {
	return v.SetLock(ctx, fh, owner, base.Lock{Type: base.Unlock}, true, false)
}

// lockRef is an (inode, owner) pair that took POSIX locks through this
// client.
type lockRef struct {
	ino   base.Ino
	owner uint64
}

// ReleasePosixLocks drops every POSIX lock owner holds on the inode of
// fh. The kernel asks for it at each close (FUSE flush): closing any
// descriptor of a file releases the process's locks on it. Owners that
// never locked the file through this client cost nothing.
func (v *VFS) ReleasePosixLocks(ctx context.Context, fh, owner uint64) syscall.Errno {
	h := v.handle(fh)
	if h == nil {
		return syscall.EBADF
	}
	ref := lockRef{h.ino, owner}
	v.lockMu.Lock()
	had := v.lockOwners[ref]
	delete(v.lockOwners, ref)
	v.lockMu.Unlock()
	if !had {
		return 0
	}
	if err := v.m.SetPosixLock(ctx, h.ino, owner, base.Lock{Type: base.Unlock, End: base.LockEOF}, false); err != nil {
		return v.errno("release-locks", err)
	}
	return 0
}

// RemoteOwner is the bit set in the lock owners of the NFS gateway's lock
// manager (NLM), whose clients' locks are held without an open file. The
// FUSE adapter clears it in the kernel's owner ids, so an NLM owner and a
// kernel owner are never the same owner, and a process's locks taken over
// NFS and over a FUSE mount of the same host never merge.
const RemoteOwner = 1 << 63

// GetInodeLock is GetLock for a front end that holds no open handle: ino
// is a front-end inode number. A file of a snapshot has no recorded locks
// (Unlock); an inode that does not exist is ENOENT, a snapshot that is
// gone ESTALE.
func (v *VFS) GetInodeLock(ctx context.Context, ino base.Ino, owner uint64, l base.Lock) (base.Lock, syscall.Errno) {
	t, real, e := v.lockTarget(ctx, ino)
	if e != 0 {
		return base.Lock{}, e
	}
	if t.ro {
		return base.Lock{Type: base.Unlock}, 0
	}
	got, err := v.m.GetPosixLock(ctx, real, owner, l)
	if err != nil {
		return base.Lock{}, v.errno("getlk", err)
	}
	return got, 0
}

// SetInodeLock is SetLock of a POSIX lock for a front end that holds no
// open handle (the NFS gateway's lock manager): ino is a front-end inode
// number, and the lock stays until owner releases it, whatever handles
// open or close. In a snapshot, a read lock is granted without being
// recorded (nothing there can be written, so nothing conflicts) and a
// write lock is EROFS: it needs write access, which a snapshot never
// grants. Waiting as for SetLock.
func (v *VFS) SetInodeLock(ctx context.Context, ino base.Ino, owner uint64, l base.Lock, wait bool) syscall.Errno {
	t, real, e := v.lockTarget(ctx, ino)
	if e != 0 {
		return e
	}
	if t.ro {
		if l.Type == base.WriteLock {
			return syscall.EROFS
		}
		return 0
	}
	if err := v.m.SetPosixLock(ctx, real, owner, l, wait); err != nil {
		return v.errno("setlk", err)
	}
	return 0
}

// lockTarget resolves a front-end inode number for GetInodeLock and
// SetInodeLock and checks that the inode exists, so that no lock is
// recorded for an inode that is gone (a stale NFS handle).
func (v *VFS) lockTarget(ctx context.Context, ino base.Ino) (*tree, base.Ino, syscall.Errno) {
	t, real, e := v.resolve(ino)
	if e != 0 {
		return nil, 0, e
	}
	if t == v.snapsDir {
		return t, real, 0 // /.snapshots: read-only, nothing recorded
	}
	if _, err := t.r.GetAttr(ctx, real); err != nil {
		return nil, 0, v.errno("lock", err)
	}
	return t, real, 0
}
