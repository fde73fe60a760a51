package local

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// startWriteback asks the kernel to start writing f's dirty pages now,
// without waiting: Sync, later, then mostly waits for writes already done
// (as the once-a-second background sync did when it was a syncfs).
// Best effort: an error only means Sync writes them.
func startWriteback(f *os.File) {
	_ = unix.SyncFileRange(int(f.Fd()), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
}

// openUnnamed opens an unnamed regular file for writing in directory dir
// (O_TMPFILE), to be linked into place once written.
func openUnnamed(dir string) (int, error) {
	return unix.Open(dir, unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
}

// writeDirect writes p, a whole number of directAlign blocks from an
// aligned buffer, at offset 0 of f with O_DIRECT, and returns len(p). It
// returns 0 and no error when the file system refuses direct I/O (EINVAL:
// not supported, or stricter alignment than directAlign); the caller then
// writes p the usual way, over whatever part of it was written.
func writeDirect(f *os.File, p []byte) (int, error) {
	fd := f.Fd()
	fl, err := unix.FcntlInt(fd, unix.F_GETFL, 0)
	if err != nil {
		return 0, nil
	}
	if _, err := unix.FcntlInt(fd, unix.F_SETFL, fl|unix.O_DIRECT); err != nil {
		return 0, nil
	}
	n, err := f.WriteAt(p, 0)
	// The tail that follows is not aligned: direct I/O off again.
	if _, ferr := unix.FcntlInt(fd, unix.F_SETFL, fl); ferr != nil {
		return 0, fmt.Errorf("turn direct I/O off: %w", ferr)
	}
	if errors.Is(err, unix.EINVAL) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return n, nil
}
