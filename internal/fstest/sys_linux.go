package fstest

import "golang.org/x/sys/unix"

func msync(b []byte) error { return unix.Msync(b, unix.MS_SYNC) }

func renameat2(from, to string, flags uint) error {
	return unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, flags)
}
