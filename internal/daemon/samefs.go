package daemon

import (
	"os"
	"path/filepath"
	"syscall"
)

// sameFS reports whether path (or, if it does not exist yet, its nearest
// existing parent: a cache directory is created on first use) and dir are
// on one file system. An error answers false: the directory is then kept.
func sameFS(path, dir string) bool {
	a, ok := deviceOf(path)
	if !ok {
		return false
	}
	b, ok := deviceOf(dir)
	return ok && a == b
}

// deviceOf returns the device number of the file system holding path or
// its nearest existing parent.
func deviceOf(path string) (uint64, bool) {
	p := filepath.Clean(path)
	for {
		fi, err := os.Stat(p)
		if err == nil {
			st, ok := fi.Sys().(*syscall.Stat_t)
			if !ok {
				return 0, false
			}
			return uint64(st.Dev), true
		}
		parent := filepath.Dir(p)
		if parent == p {
			return 0, false
		}
		p = parent
	}
}
