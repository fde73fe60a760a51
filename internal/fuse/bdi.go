package fuse

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// bdiDir is the kernel's settings directory for the backing device of the
// file system mounted at mp: FUSE names it after the mount's device
// number (MAJOR:MINOR of st_dev).
func bdiDir(mp string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(mp, &st); err != nil {
		return "", err
	}
	return fmt.Sprintf("/sys/class/bdi/%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev)), nil
}

// setReadAhead sets the kernel's read-ahead window for files of the mount
// at mp to n bytes (rounded down to KiB). The FUSE INIT reply can only
// lower the kernel's default of 128 KiB; a larger window is set through
// the backing device, which needs root.
func setReadAhead(mp string, n int) error {
	dir, err := bdiDir(mp)
	if err != nil {
		return err
	}
	return os.WriteFile(dir+"/read_ahead_kb", []byte(strconv.Itoa(n>>10)), 0o644)
}
