package local

import (
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
