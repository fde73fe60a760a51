//go:build !linux

package local

import (
	"os"

	"golang.org/x/sys/unix"
)

// startWriteback does nothing here: Sync writes the pages.
func startWriteback(*os.File) {}

// openUnnamed fails here: Put renames named temporary files.
func openUnnamed(string) (int, error) { return -1, unix.ENOTSUP }
