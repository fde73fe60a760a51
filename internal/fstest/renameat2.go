package fstest

import "golang.org/x/sys/unix"

func renameat2Raw(from, to string, flags uint) error {
	return unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, flags)
}
