package base

import "errors"

// Sentinel errors returned by meta, chunk and the backends. Wrap them with
// %w to add context; the vfs layer maps them to errno with errors.Is. Each
// corresponds to exactly one POSIX errno (see vfs/errno.go).
var (
	ErrNotFound     = errors.New("no such file or directory")         // ENOENT
	ErrExist        = errors.New("file exists")                       // EEXIST
	ErrNotDir       = errors.New("not a directory")                   // ENOTDIR
	ErrIsDir        = errors.New("is a directory")                    // EISDIR
	ErrNotEmpty     = errors.New("directory not empty")               // ENOTEMPTY
	ErrPermission   = errors.New("operation not permitted")           // EPERM
	ErrAccess       = errors.New("permission denied")                 // EACCES
	ErrInvalid      = errors.New("invalid argument")                  // EINVAL
	ErrNameTooLong  = errors.New("file name too long")                // ENAMETOOLONG
	ErrNoAttr       = errors.New("no such attribute")                 // ENODATA
	ErrRange        = errors.New("result too large")                  // ERANGE
	ErrNoSpace      = errors.New("no space left on volume")           // ENOSPC
	ErrQuota        = errors.New("disk quota exceeded")               // EDQUOT
	ErrReadOnly     = errors.New("read-only file system")             // EROFS
	ErrCrossDevice  = errors.New("cross-device link")                 // EXDEV
	ErrStale        = errors.New("stale file handle")                 // ESTALE
	ErrIO           = errors.New("input/output error")                // EIO
	ErrTooManyLinks = errors.New("too many links")                    // EMLINK
	ErrFileTooBig   = errors.New("file too large")                    // EFBIG
	ErrNotSupported = errors.New("operation not supported")           // ENOTSUP
	ErrBusy         = errors.New("device or resource busy")           // EBUSY
	ErrLoop         = errors.New("too many levels of symbolic links") // ELOOP
	ErrBadFD        = errors.New("bad file descriptor")               // EBADF
	ErrWouldBlock   = errors.New("resource temporarily unavailable")  // EAGAIN
	ErrDeadlock     = errors.New("resource deadlock avoided")         // EDEADLK
	ErrInterrupted  = errors.New("interrupted")                       // EINTR
	ErrChecksum     = errors.New("block checksum mismatch")           // EIO
)
