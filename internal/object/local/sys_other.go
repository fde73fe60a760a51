//go:build !linux

package local

import (
	"os"

	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/internal/object"
)

// startWriteback does nothing here: Sync writes the pages.
func startWriteback(*os.File) {}

// openUnnamed fails here: Put renames named temporary files.
func openUnnamed(string) (int, error) { return -1, unix.ENOTSUP }

// statfsSpace returns the room of the file system holding dir.
func statfsSpace(dir string) (object.Space, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return object.Space{}, err
	}
	bs := uint64(st.Bsize)
	return object.Space{Total: st.Blocks * bs, Free: st.Bfree * bs, Avail: uint64(st.Bavail) * bs}, nil
}
