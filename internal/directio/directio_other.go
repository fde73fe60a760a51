//go:build !linux

package directio

import (
	"errors"
	"os"
)

// writeDirect writes nothing here: WriteAt writes the usual way.
func writeDirect(*os.File, []byte, int64) (int, error) { return 0, nil }

// CachedPages is not available here.
func CachedPages(*os.File, int) (int, error) { return 0, errors.ErrUnsupported }
