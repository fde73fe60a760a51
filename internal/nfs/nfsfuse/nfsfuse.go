// Package nfsfuse mounts an NFSv3 export through FUSE, forwarding every
// file system operation to the server with the project's own client
// (nfsclient). It is used only by tests: the kernels the tests run on
// have no NFS client, so this bridge plays the part of one, and the
// POSIX suites (package fstest) can run against the NFS gateway through
// a real mount.
//
// It behaves as a Linux NFSv3 client mounted with these choices:
//
//   - No caching of its own: the kernel's attribute and entry timeouts
//     are Options (zero by default, so every use asks the server again),
//     and files are opened without FOPEN_KEEP_CACHE, so each open drops
//     the pages the kernel kept (close-to-open).
//   - Writes are UNSTABLE, and COMMIT follows at every close (FUSE
//     flush), fsync and release, as a Linux client flushes on close: the
//     gateway buffers writes in its open file, so FILE_SYNC writes would
//     cost a commit each. A COMMIT whose verifier differs from the one
//     the writes got (the server restarted in between) fails with EIO:
//     the bridge keeps no copy of the data to send again.
//   - A file unlinked, or renamed over, while it is open here is
//     renamed to .nfs<fileid>.<n> in its directory instead ("silly
//     rename"), and removed at its last release; NFSv3 has no open state
//     that would keep it alive on the server. While hidden, the file's
//     link count leaves the hidden name out, so an unlinked file shows
//     nlink 0 as POSIX asks. Unlike a Linux client, the bridge does not
//     see the kernel's references to a name, only open FUSE handles: a
//     file replaced between the kernel's lookup and its open is gone, and
//     the open fails with ESTALE (the kernel looks the name up once more).
//   - Locks stay in the kernel (as with mount -o nolock): the bridge does
//     not speak NLM, which the gateway serves (nfsclient's NLM calls do).
//   - No extended attributes (NFSv3 has none), no fallocate, no O_TMPFILE,
//     no rename flags (RENAME_NOREPLACE, RENAME_EXCHANGE): EINVAL.
//   - Every call carries the client's credential (nfsclient's SetUser),
//     whoever the calling process is; the kernel checks permissions from
//     the attributes (default_permissions).
//
// It must not be imported by non-test code.
package nfsfuse

import (
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/internal/nfs/nfsclient"
	"github.com/cairnfs/cairn/internal/nfs/proto"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Options tune Mount.
type Options struct {
	// AttrTimeout, EntryTimeout and NegativeTimeout are how long the
	// kernel may keep attributes, names and missing names (default 0:
	// it asks the server at every use).
	AttrTimeout, EntryTimeout, NegativeTimeout time.Duration
	// Debug logs every FUSE request and reply.
	Debug bool
}

// Validate reports the first invalid option.
func (o Options) Validate() error {
	if o.AttrTimeout < 0 || o.EntryTimeout < 0 || o.NegativeTimeout < 0 {
		return errors.New("nfsfuse: timeouts must not be negative")
	}
	return nil
}

// Mount mounts the directory with handle root of the server c talks to
// on dir, and serves it until the returned server is unmounted. c must
// stay open until then; the bridge does not close it.
func Mount(dir string, c *nfsclient.Client, root []byte, o Options) (*fuse.Server, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	info, err := c.FSInfo(root)
	if err != nil {
		return nil, fmt.Errorf("nfsfuse: FSINFO: %w", err)
	}
	a, err := c.GetAttr(root)
	if err != nil {
		return nil, fmt.Errorf("nfsfuse: GETATTR of the root: %w", err)
	}
	if a.Type != proto.NF3Dir {
		return nil, fmt.Errorf("nfsfuse: the root handle names a file of type %d, not a directory", a.Type)
	}
	m := &mount{
		c:     c,
		rtmax: transferSize(info.RTMax),
		wtmax: transferSize(info.WTMax),
		open:  map[uint64]*openFile{},
	}
	opts := &fs.Options{
		MountOptions: fuse.MountOptions{
			FsName: "nfsfuse",
			Name:   "nfsfuse",
			// The kernel checks permissions from our attributes; the
			// server checks them again for the client's credential.
			Options:     []string{"default_permissions"},
			MaxWrite:    int(m.wtmax),
			DirectMount: true,
			// Listings carry each entry's type; the kernel looks names up
			// when it needs them, as it must with zero timeouts anyway.
			DisableReadDirPlus: true,
			Debug:              o.Debug,
		},
		AttrTimeout:     &o.AttrTimeout,
		EntryTimeout:    &o.EntryTimeout,
		NegativeTimeout: &o.NegativeTimeout,
		// A mode of 0 is the file's mode, not a missing one.
		NullPermissions: true,
		RootStableAttr:  &fs.StableAttr{Ino: a.Fileid},
	}
	srv, err := fs.Mount(dir, &node{m: m, fh: root, ino: a.Fileid}, opts)
	if err != nil {
		return nil, fmt.Errorf("nfsfuse: mount %s: %w", dir, err)
	}
	return srv, nil
}

// transferSize bounds a server's READ or WRITE size to what one FUSE
// request carries (1 MiB), and gives a server that names none 64 KiB.
func transferSize(n uint32) uint32 {
	switch {
	case n == 0:
		return 64 << 10
	case n < 4096:
		return 4096
	case n > fuse.MAX_KERNEL_WRITE:
		return fuse.MAX_KERNEL_WRITE
	}
	return n
}

// mount is what the nodes of one mount share.
type mount struct {
	c            *nfsclient.Client
	rtmax, wtmax uint32

	// mu guards open and every openFile's fields. It is held across the
	// calls of unlink and rename, from their check for open files to the
	// server's reply, and across the REMOVE of a hidden file: an open is
	// counted either before that check (and the file is hidden) or after
	// the reply (and Open finds the file gone).
	mu     sync.Mutex
	open   map[uint64]*openFile // files with FUSE handles open, by fileid
	hidden uint64               // counter of the names of hidden files
}

// openFile is the state of a file while FUSE handles of it are open,
// shared by every node of its fileid. Fields are guarded by mount.mu.
type openFile struct {
	fh    []byte
	ino   uint64
	opens int
	// hiddenIn and hiddenAs are where the file was renamed when unlinked
	// while open (hiddenIn nil: not hidden).
	hiddenIn []byte
	hiddenAs string
	// unstable is set while WRITEs wait for a COMMIT; verf is the
	// verifier the first of them got, and lost is set when a later one
	// got another (the server restarted: the earlier data may be gone).
	unstable bool
	verf     [8]byte
	lost     bool
}

// errno converts an error of nfsclient into the errno the caller gets.
func errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var st nfsclient.StatusError
	if !errors.As(err, &st) {
		return syscall.EIO // the connection failed, or the call timed out
	}
	switch uint32(st) {
	case proto.NFS3ErrPerm:
		return syscall.EPERM
	case proto.NFS3ErrNoEnt:
		return syscall.ENOENT
	case proto.NFS3ErrNXIO:
		return syscall.ENXIO
	case proto.NFS3ErrAccess:
		return syscall.EACCES
	case proto.NFS3ErrExist:
		return syscall.EEXIST
	case proto.NFS3ErrXDev:
		return syscall.EXDEV
	case proto.NFS3ErrNoDev:
		return syscall.ENODEV
	case proto.NFS3ErrNotDir:
		return syscall.ENOTDIR
	case proto.NFS3ErrIsDir:
		return syscall.EISDIR
	case proto.NFS3ErrInval:
		return syscall.EINVAL
	case proto.NFS3ErrFBig:
		return syscall.EFBIG
	case proto.NFS3ErrNoSpc:
		return syscall.ENOSPC
	case proto.NFS3ErrROFS:
		return syscall.EROFS
	case proto.NFS3ErrMLink:
		return syscall.EMLINK
	case proto.NFS3ErrNameTooLong:
		return syscall.ENAMETOOLONG
	case proto.NFS3ErrNotEmpty:
		return syscall.ENOTEMPTY
	case proto.NFS3ErrDQuot:
		return syscall.EDQUOT
	case proto.NFS3ErrStale, proto.NFS3ErrBadHandle:
		return syscall.ESTALE
	case proto.NFS3ErrNotSupp:
		return syscall.ENOTSUP
	case proto.NFS3ErrJukebox:
		// A kernel client would retry; a test would rather see it.
		return syscall.EAGAIN
	}
	return syscall.EIO
}

// typeMode converts an ftype3 into the S_IFMT bits of a mode.
func typeMode(t uint32) uint32 {
	switch t {
	case proto.NF3Dir:
		return syscall.S_IFDIR
	case proto.NF3Blk:
		return syscall.S_IFBLK
	case proto.NF3Chr:
		return syscall.S_IFCHR
	case proto.NF3Lnk:
		return syscall.S_IFLNK
	case proto.NF3Sock:
		return syscall.S_IFSOCK
	case proto.NF3FIFO:
		return syscall.S_IFIFO
	}
	return syscall.S_IFREG
}

// fuseAttr converts NFS attributes into FUSE's.
func fuseAttr(a *proto.Fattr3, out *fuse.Attr) {
	out.Ino = a.Fileid
	out.Mode = typeMode(a.Type) | a.Mode&0o7777
	out.Nlink = a.Nlink
	out.Uid, out.Gid = a.Uid, a.Gid
	out.Size = a.Size
	out.Blocks = (a.Used + 511) / 512
	out.Blksize = 4096
	out.Rdev = uint32(unix.Mkdev(a.Major, a.Minor))
	out.Atime, out.Atimensec = uint64(a.Atime.Sec), a.Atime.Nsec
	out.Mtime, out.Mtimensec = uint64(a.Mtime.Sec), a.Mtime.Nsec
	out.Ctime, out.Ctimensec = uint64(a.Ctime.Sec), a.Ctime.Nsec
}
