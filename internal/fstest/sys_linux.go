package fstest

import (
	"syscall"
	"unsafe"
)

func msync(b []byte) error {
	_, _, e := syscall.Syscall(syscall.SYS_MSYNC, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), 4 /* MS_SYNC */)
	if e != 0 {
		return e
	}
	return nil
}

func renameat2(from, to string, flags uint) error {
	return renameat2Raw(from, to, flags)
}
