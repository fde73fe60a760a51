package directio

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// writeDirect writes p at offset off of f with O_DIRECT and returns
// len(p). p must be Aligned, and len(p) and off multiples of Align. It
// returns 0 and no error when the file system refuses direct I/O (EINVAL:
// not supported, or a stricter alignment); the caller then writes p the
// usual way, over whatever part of it was written. f is left as it was
// (without O_DIRECT) in every case.
func writeDirect(f *os.File, p []byte, off int64) (int, error) {
	fd := f.Fd()
	fl, err := unix.FcntlInt(fd, unix.F_GETFL, 0)
	if err != nil {
		return 0, nil
	}
	if _, err := unix.FcntlInt(fd, unix.F_SETFL, fl|unix.O_DIRECT); err != nil {
		return 0, nil
	}
	n, err := f.WriteAt(p, off)
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
