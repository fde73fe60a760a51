package fstest

import "golang.org/x/sys/unix"

func msync(b []byte) error { return unix.Msync(b, unix.MS_SYNC) }

// populateWrite faults a shared mapping in for writing inside one
// madvise(MADV_POPULATE_WRITE) call (Linux 5.14 and later). A test whose
// FUSE server runs in its own process must not take those faults in Go
// code: a goroutine stopped in a page fault that waits for the server
// cannot reach a safe point, and a garbage collection the server starts
// meanwhile waits for it forever. In a system call it does not hold the
// collector up.
func populateWrite(b []byte) error { return unix.Madvise(b, unix.MADV_POPULATE_WRITE) }

func renameat2(from, to string, flags uint) error {
	return unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, flags)
}
