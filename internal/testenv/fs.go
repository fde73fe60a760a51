package testenv

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Tmpfs mounts a tmpfs of size (as mount's size= option, e.g. "48m") on a
// new directory and unmounts it when the test ends. It skips the test
// without root or when the mount fails.
func Tmpfs(t testing.TB, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
			_ = syscall.Unmount(dir, syscall.MNT_DETACH)
		}
	})
	return dir
}

// Tree lists everything at and under root, with modes, sizes and times
// (of directories too with dirTimes: they change when an entry is added
// or removed); "absent" if root does not exist. Two listings are equal
// when nothing under root was created, removed or changed.
func Tree(t testing.TB, root string, dirTimes bool) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		b.WriteString(p + " " + fi.Mode().String())
		if !d.IsDir() {
			b.WriteString(" " + strconv.FormatInt(fi.Size(), 10))
		}
		if !d.IsDir() || dirTimes {
			b.WriteString(" " + fi.ModTime().String())
		}
		b.WriteString("\n")
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return "absent"
	}
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
