package local

import (
	"os"

	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/internal/object"
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

// statfsSpace returns the room of the file system holding dir, whose
// block counts are in units of the fragment size.
func statfsSpace(dir string) (object.Space, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return object.Space{}, err
	}
	bs := uint64(st.Frsize)
	if bs == 0 {
		bs = uint64(st.Bsize)
	}
	return object.Space{Total: st.Blocks * bs, Free: st.Bfree * bs, Avail: st.Bavail * bs}, nil
}
