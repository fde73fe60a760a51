package s3test

import "syscall"

// dieWithParent makes the server get SIGKILL when the test binary exits.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// xattrs reports whether the file system of dir keeps user extended
// attributes.
func xattrs(dir string) bool {
	return syscall.Setxattr(dir, "user.cairn.probe", []byte("1"), 0) == nil
}
