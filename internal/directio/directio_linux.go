package directio

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

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

// CachedPages reports how many of the first n pages (of Align bytes) of f
// are in the page cache (mincore(2)): how tests see that a write went past
// it.
func CachedPages(f *os.File, n int) (int, error) {
	if n <= 0 {
		return 0, nil
	}
	m, err := unix.Mmap(int(f.Fd()), 0, n*Align, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, err
	}
	defer unix.Munmap(m)
	vec := make([]byte, n)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		return 0, e
	}
	count := 0
	for _, v := range vec {
		count += int(v & 1)
	}
	return count, nil
}
