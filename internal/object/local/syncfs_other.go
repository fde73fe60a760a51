//go:build unix && !linux

package local

import (
	"os"
	"syscall"
)

// syncfs falls back to sync(2), which syncs every file system; it cannot
// report write-back errors.
func syncfs(*os.File) error {
	syscall.Sync()
	return nil
}
