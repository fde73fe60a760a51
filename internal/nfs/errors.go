package nfs

import (
	"syscall"

	"github.com/cairnfs/cairn/internal/nfs/proto"
)

// nfsStatus converts an errno from vfs into an nfsstat3. This is the only
// place where the gateway's errors become NFS statuses.
func nfsStatus(e syscall.Errno) uint32 {
	switch e {
	case 0:
		return proto.NFS3OK
	case syscall.EPERM:
		return proto.NFS3ErrPerm
	case syscall.ENOENT:
		return proto.NFS3ErrNoEnt
	case syscall.ENXIO:
		return proto.NFS3ErrNXIO
	case syscall.EACCES:
		return proto.NFS3ErrAccess
	case syscall.EEXIST:
		return proto.NFS3ErrExist
	case syscall.EXDEV:
		return proto.NFS3ErrXDev
	case syscall.ENODEV:
		return proto.NFS3ErrNoDev
	case syscall.ENOTDIR:
		return proto.NFS3ErrNotDir
	case syscall.EISDIR:
		return proto.NFS3ErrIsDir
	case syscall.EINVAL, syscall.ERANGE, syscall.ELOOP:
		return proto.NFS3ErrInval
	case syscall.EFBIG:
		return proto.NFS3ErrFBig
	case syscall.ENOSPC:
		return proto.NFS3ErrNoSpc
	case syscall.EROFS:
		return proto.NFS3ErrROFS
	case syscall.EMLINK:
		return proto.NFS3ErrMLink
	case syscall.ENAMETOOLONG:
		return proto.NFS3ErrNameTooLong
	case syscall.ENOTEMPTY:
		return proto.NFS3ErrNotEmpty
	case syscall.EDQUOT:
		return proto.NFS3ErrDQuot
	case syscall.ESTALE:
		return proto.NFS3ErrStale
	case syscall.ENOTSUP:
		return proto.NFS3ErrNotSupp
	case syscall.EAGAIN, syscall.EINTR, syscall.EBUSY:
		// Worth retrying: the client backs off and sends again.
		return proto.NFS3ErrJukebox
	case syscall.EBADF:
		// An open handle the gateway cached went away under it.
		return proto.NFS3ErrStale
	}
	// EIO, which is also what a store that stayed unreachable for its
	// timeout gives: not JUKEBOX, which Linux clients retry without end
	// (docs/design/0004-nfs-gateway.md, "Store outages").
	return proto.NFS3ErrIO
}

// mountStatus converts an errno into a mountstat3.
func mountStatus(e syscall.Errno) uint32 {
	switch e {
	case 0:
		return proto.MntOK
	case syscall.EPERM:
		return proto.MntErrPerm
	case syscall.ENOENT:
		return proto.MntErrNoEnt
	case syscall.EACCES:
		return proto.MntErrAccess
	case syscall.ENOTDIR:
		return proto.MntErrNotDir
	case syscall.EINVAL:
		return proto.MntErrInval
	case syscall.ENAMETOOLONG:
		return proto.MntErrNameLong
	}
	return proto.MntErrIO
}
