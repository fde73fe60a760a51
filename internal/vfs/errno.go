package vfs

import (
	"context"
	"errors"
	"syscall"

	"github.com/cairnfs/cairn/internal/base"
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

// Errno converts an error from meta, chunk or a backend into the errno a
// POSIX caller sees. Unknown errors are EIO; the caller logs them.
func Errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var en syscall.Errno
	if errors.As(err, &en) {
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
