//go:build !linux

package s3test

import "syscall"

// dieWithParent returns nil: only Linux can tie the server's life to the
// test binary's, elsewhere Main alone stops it.
func dieWithParent() *syscall.SysProcAttr { return nil }

// xattrs reports false: use the sidecar directory.
func xattrs(string) bool { return false }
