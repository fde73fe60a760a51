package fuse

import (
	"strconv"
	"time"
)

// Op is a kind of FUSE request Cairn serves, for Options.OnRequest.
type Op uint8

// The requests counted, one per method of the adapter.
const (
	OpLookup Op = iota
	OpForget
	OpGetAttr
	OpSetAttr
	OpMknod
	OpMkdir
	OpSymlink
	OpReadlink
	OpUnlink
	OpRmdir
	OpRename
	OpLink
	OpAccess
	OpGetXAttr
	OpListXAttr
	OpSetXAttr
	OpRemoveXAttr
	OpCreate
	OpOpen
	OpRead
	OpWrite
	OpFlush
	OpFsync
	OpRelease
	OpFallocate
	OpOpenDir
	OpReadDir
	OpReadDirPlus
	OpReleaseDir
	OpFsyncDir
	OpStatFs
	OpGetLk
	OpSetLk
	OpSetLkw
	NumOps // the number of kinds
)

var opNames = [NumOps]string{
	"lookup", "forget", "getattr", "setattr", "mknod", "mkdir", "symlink",
	"readlink", "unlink", "rmdir", "rename", "link", "access", "getxattr",
	"listxattr", "setxattr", "removexattr", "create", "open", "read",
	"write", "flush", "fsync", "release", "fallocate", "opendir", "readdir",
	"readdirplus", "releasedir", "fsyncdir", "statfs", "getlk", "setlk",
	"setlkw",
}

// OpNames returns the names of the kinds, indexed by Op; the caller must
// not modify it.
func OpNames() []string { return opNames[:] }

// String is the request's name in lower case, as in the kernel's FUSE
// opcodes ("lookup", "readdirplus").
func (o Op) String() string {
	if o < NumOps {
		return opNames[o]
	}
	return "op" + strconv.Itoa(int(o))
}

// done reports a request that began at start to Options.OnRequest.
func (fs *rawFS) done(op Op, start time.Time) {
	if fs.opts.OnRequest != nil {
		fs.opts.OnRequest(op, time.Since(start))
	}
}
