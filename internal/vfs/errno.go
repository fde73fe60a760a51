package vfs

import (
	"context"
	"errors"
	"syscall"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/object"
)

var errnoTable = []struct {
	err   error
	errno syscall.Errno
}{
	{base.ErrNotFound, syscall.ENOENT},
	{base.ErrExist, syscall.EEXIST},
	{base.ErrNotDir, syscall.ENOTDIR},
	{base.ErrIsDir, syscall.EISDIR},
	{base.ErrNotEmpty, syscall.ENOTEMPTY},
	{base.ErrPermission, syscall.EPERM},
	{base.ErrAccess, syscall.EACCES},
	{base.ErrInvalid, syscall.EINVAL},
	{base.ErrNameTooLong, syscall.ENAMETOOLONG},
	{base.ErrNoAttr, syscall.ENODATA},
	{base.ErrRange, syscall.ERANGE},
	{base.ErrNoSpace, syscall.ENOSPC},
	{base.ErrQuota, syscall.EDQUOT},
	{base.ErrReadOnly, syscall.EROFS},
	{base.ErrCrossDevice, syscall.EXDEV},
	{base.ErrStale, syscall.ESTALE},
	{base.ErrIO, syscall.EIO},
	{base.ErrTooManyLinks, syscall.EMLINK},
	{base.ErrFileTooBig, syscall.EFBIG},
	{base.ErrNotSupported, syscall.ENOTSUP},
	{base.ErrBusy, syscall.EBUSY},
	{base.ErrLoop, syscall.ELOOP},
	{base.ErrBadFD, syscall.EBADF},
	{base.ErrWouldBlock, syscall.EAGAIN},
	{base.ErrDeadlock, syscall.EDEADLK},
	{base.ErrInterrupted, syscall.EINTR},
	{base.ErrChecksum, syscall.EIO},
}

// networkErrno are the errnos of sockets, which a store's error may wrap
// and a file system never returns: Errno makes them EIO.
var networkErrno = map[syscall.Errno]bool{
	syscall.ECONNREFUSED: true, syscall.ECONNRESET: true, syscall.ECONNABORTED: true,
	syscall.ETIMEDOUT: true, syscall.EHOSTUNREACH: true, syscall.ENETUNREACH: true,
	syscall.ENETDOWN: true, syscall.ENETRESET: true, syscall.EHOSTDOWN: true,
	syscall.EPIPE: true, syscall.ENOTCONN: true, syscall.ESHUTDOWN: true,
	syscall.EADDRNOTAVAIL: true, syscall.EADDRINUSE: true, syscall.ENOTSOCK: true,
	syscall.EPROTO: true, syscall.ECOMM: true,
}

// Errno converts an error from meta, chunk or a backend into the errno a
// POSIX caller sees. Unknown errors are EIO; the caller logs them.
func Errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	if errors.Is(err, kv.ErrUnavailable) || errors.Is(err, object.ErrUnavailable) || errors.Is(err, kv.ErrUnknownOutcome) {
		// A store that could not be reached (or lost the answer to a
		// commit): EIO, not the socket's errno inside (a stopped
		// PostgreSQL's missing Unix socket is ENOENT).
		return syscall.EIO
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		if networkErrno[en] {
			// A server's socket error (a store that could not be
			// reached): not an answer a file system gives.
			return syscall.EIO
		}
		return en
	}
	for _, e := range errnoTable {
		if errors.Is(err, e.err) {
			return e.errno
		}
	}
	if errors.Is(err, context.Canceled) {
		return syscall.EINTR
	}
	return syscall.EIO
}
