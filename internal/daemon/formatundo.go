package daemon

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"

	"github.com/cairnfs/cairn/internal/kv/pebble"
)

// A format that fails leaves the machine as it found it: what it created
// for the volume's embedded metadata and local data store is removed, and
// nothing that was there before (formatUndo).

// formatUndo removes what a failed format created.
type formatUndo []func() error

// run undoes, last created first, and returns the first error.
func (u formatUndo) run() error {
	var first error
	for _, f := range slices.Backward(u) {
		if err := f(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// noteMeta records what format may create for the embedded store of loc:
// its directory and missing parents, or, in a directory that holds no
// database yet, the files the database adds. A database that exists is
// never touched.
func (u *formatUndo) noteMeta(loc MetaLocation) error {
	if loc.Scheme != "pebble" {
		return nil
	}
	exists, err := pebble.Exists(loc.Path)
	if err != nil || exists {
		return err
	}
	return u.noteDir(loc.Path, true)
}

// noteData records what format may create for a file:// data store: its
// directory and missing parents. A directory that existed keeps all it
// holds, even what is added meanwhile (another volume's mount may be
// writing there).
func (u *formatUndo) noteData(dataURL string) error {
	d, err := url.Parse(dataURL)
	if err != nil || d.Scheme != "file" || d.Host != "" || !filepath.IsAbs(d.Path) {
		return nil // not a local directory, or refused before anything is created
	}
	return u.noteDir(filepath.Clean(d.Path), false)
}

// noteDir records how to undo the creation of directory dir: remove the
// topmost of dir and its parents that does not exist now; if dir exists
// and entries is set, remove the entries added to it (only those).
func (u *formatUndo) noteDir(dir string, entries bool) error {
	top := ""
	for p := dir; ; p = filepath.Dir(p) {
		_, err := os.Lstat(p)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%s: %w", p, err)
		}
		top = p
		if filepath.Dir(p) == p {
			break
		}
	}
	if top != "" {
		*u = append(*u, func() error { return os.RemoveAll(top) })
		return nil
	}
	if !entries {
		return nil
	}
	before, err := names(dir)
	if err != nil {
		return err
	}
	*u = append(*u, func() error {
		now, err := names(dir)
		if err != nil {
			return err
		}
		for _, n := range now {
			if !slices.Contains(before, n) {
				if err := os.RemoveAll(filepath.Join(dir, n)); err != nil {
					return err
				}
			}
		}
		return nil
	})
	return nil
}

// names lists directory dir; a file or nothing at dir lists as empty.
func names(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.IsDir() {
		return nil, err
	}
	return f.Readdirnames(-1)
}
