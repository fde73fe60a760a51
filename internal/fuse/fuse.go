// Package fuse adapts vfs to the kernel's FUSE protocol through go-fuse's
// raw API: Cairn inode numbers are FUSE node ids, so the adapter keeps no
// tree of nodes in memory. It translates wire types only; every semantic
// decision is made in vfs and meta.
package fuse

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	gofuse "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/vfs"
)

// Options configures a mount.
type Options struct {
	// FsName is shown as the source in /proc/mounts (the meta URL).
	FsName string
	// AllowOther lets users other than the mounting one use the mount.
	AllowOther bool
	// AttrTimeout and EntryTimeout are how long the kernel may cache
	// attributes and names. NegativeTimeout caches failed lookups.
	AttrTimeout, EntryTimeout, NegativeTimeout time.Duration
	// LiveTimeout, if positive, is the attribute and entry timeout of
	// the inodes of the tree at the root (vfs.AtRoot), in place of
	// AttrTimeout and EntryTimeout, which stay for /.snapshots and the
	// snapshots under it. Only for mounts where every change to that
	// tree goes through this kernel (which then updates or drops what it
	// cached itself) or is reported to it with Server.Changed: the
	// daemon sets it on embedded volumes without an NFS gateway.
	LiveTimeout time.Duration
	// MaxWrite is the largest write and read request (default 1 MiB, the
	// kernel's limit). See docs/fuse-tuning.md for this and the others.
	MaxWrite int
	// MaxReadAhead is the kernel's read-ahead window for each file
	// (default 1 MiB). The kernel's own default is 128 KiB and the FUSE
	// INIT reply can only lower it, so Mount raises it through the
	// mount's backing device (/sys/class/bdi/MAJOR:MINOR/read_ahead_kb),
	// which needs root; without root the 128 KiB stay (logged). Reads
	// reach Cairn in requests of up to min(MaxReadAhead, MaxWrite).
	MaxReadAhead int
	// MaxBackground is the number of outstanding background requests
	// (read-ahead, async writes) the kernel may issue (default 64).
	MaxBackground int
	// WritebackCache lets the kernel buffer writes in its page cache and
	// send them in large requests (FUSE writeback cache).
	WritebackCache bool
	// ReadOnly mounts read-only.
	ReadOnly bool
	// CloseToOpen makes every open drop the kernel's cached attributes of
	// the file, so a client sees the size and times another client left at
	// its close (shared volumes), and drop its pages. Without it the
	// kernel may use attributes up to AttrTimeout old.
	CloseToOpen bool
	// KeepCache keeps a file's pages in the kernel's page cache from one
	// open to the next (FOPEN_KEEP_CACHE); without it every open drops
	// them. Only for mounts whose files change through this kernel alone
	// (an embedded volume without an NFS gateway, a snapshot): the kernel
	// still drops a file's pages when it sees the file's size or mtime
	// change at an attribute refresh (AUTO_INVAL_DATA), but a change made
	// elsewhere could be served stale until then. Ignored with
	// CloseToOpen.
	KeepCache bool
	// Debug logs every FUSE request.
	Debug bool
	// OnRequest, if set, is called as each request's handling ends, with
	// its kind and the time Cairn spent on it (from the adapter's method
	// being called to its return; a blocking lock request includes its
	// wait). It must be cheap and safe for concurrent use.
	OnRequest func(op Op, d time.Duration)
	// Logger receives adapter errors.
	Logger *slog.Logger
	// ExtraOptions are passed to the kernel mount as -o options.
	ExtraOptions []string
	// ExtraProcs, if above 0, raises the process's GOMAXPROCS by that many
	// once the FUSE server has started (once per process). go-fuse's
	// readers wait for requests in blocking read(2)s of /dev/fuse, each
	// holding one of the runtime's Ps until its monitor takes it back; on
	// a machine with few cores a request woken by another (a lock's
	// release, a commit's end) then waits for a P while cores are idle.
	// Raised after the server starts, so that go-fuse sizes its readers
	// by the cores (docs/fuse-tuning.md, "Runtime Ps").
	ExtraProcs int
}

// procsOnce raises GOMAXPROCS for the first mount with ExtraProcs only.
var procsOnce sync.Once

func (o *Options) setDefaults() {
	if o.MaxWrite <= 0 {
		o.MaxWrite = 1 << 20
	}
	if o.MaxReadAhead <= 0 {
		o.MaxReadAhead = 1 << 20
	}
	if o.MaxBackground <= 0 {
		o.MaxBackground = 64
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Server is a mounted file system.
type Server struct {
	srv *gofuse.Server
	fs  *rawFS
}

// Mount mounts v at mountpoint and starts serving. It returns once the
// kernel has the mount ready.
func Mount(v *vfs.VFS, mountpoint string, opts Options) (*Server, error) {
	opts.setDefaults()
	fs := &rawFS{RawFileSystem: gofuse.NewDefaultRawFileSystem(), v: v, opts: opts, stopping: make(chan struct{})}
	mo := &gofuse.MountOptions{
		AllowOther:    opts.AllowOther,
		FsName:        opts.FsName,
		Name:          "cairn",
		MaxWrite:      opts.MaxWrite,
		MaxBackground: opts.MaxBackground,
		// The kernel checks access permissions from the attributes we
		// return, with the caller's full group list (which FUSE does not
		// pass to us); meta applies the semantic rules.
		Options:     append([]string{"default_permissions"}, opts.ExtraOptions...),
		Debug:       opts.Debug,
		DirectMount: true,
		// flock and fcntl locks go to Cairn, which shares them with every
		// client of the volume, instead of staying in this kernel.
		EnableLocks: true,
		// Reads return bytes, never a file to splice from, yet go-fuse
		// would still take a pipe, grow it and write each reply's header
		// into it before falling back to writev (and log a line for every
		// 1 MiB reply, too big for a pipe): 17% of the daemon's CPU on
		// sequential reads.
		DisableSplice: true,
	}
	if opts.ReadOnly {
		mo.Options = append(mo.Options, "ro")
	}
	if opts.WritebackCache {
		mo.ExtraCapabilities |= gofuse.CAP_WRITEBACK_CACHE
	}
	// Cairn drops setuid, setgid and security.capability itself on the
	// writes and truncations the kernel marks (rawFS.Write, SetAttr).
	// Without this the kernel asks for security.capability before every
	// write(2): one GETXATTR round trip per write, half the daemon's CPU
	// on 8 KiB sequential writes.
	mo.ExtraCapabilities |= gofuse.CAP_HANDLE_KILLPRIV_V2
	srv, err := gofuse.NewServer(fs, mountpoint, mo)
	if err != nil {
		return nil, fmt.Errorf("mount %s: %w", mountpoint, err)
	}
	fs.srv = srv
	if opts.ExtraProcs > 0 {
		procsOnce.Do(func() { runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + opts.ExtraProcs) })
	}
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		_ = srv.Unmount()
		return nil, fmt.Errorf("mount %s: %w", mountpoint, err)
	}
	if err := setReadAhead(mountpoint, opts.MaxReadAhead); err != nil {
		opts.Logger.Info("cannot set the kernel's read-ahead window; it stays at 128 KiB", "want", opts.MaxReadAhead, "err", err)
	}
	return &Server{srv: srv, fs: fs}, nil
}

// Unmount detaches the mount; it fails with EBUSY while files are in use.
// Lock requests still waiting are interrupted first.
func (s *Server) Unmount() error {
	s.fs.stoppingOnce.Do(func() { close(s.fs.stopping) })
	return s.srv.Unmount()
}

// Wait blocks until the file system is unmounted.
func (s *Server) Wait() { s.srv.Wait() }

// Changed tells the kernel that entry name of directory parent (a
// front-end inode number) was made, removed or replaced behind its back,
// as an admin command does: it drops the entry (and what it cached
// under it) and parent's attributes. Unknown inodes are no error.
func (s *Server) Changed(parent base.Ino, name string) {
	if st := s.srv.EntryNotify(uint64(parent), name); !st.Ok() && st != gofuse.ENOENT {
		s.fs.opts.Logger.Warn("dropping the kernel's cached entry", "parent", parent, "name", name, "status", st)
	}
	s.fs.invalidateAttr(uint64(parent))
}

// invalidateAttr drops the kernel's cached attributes of node id (not
// its pages).
func (fs *rawFS) invalidateAttr(id uint64) {
	if st := fs.srv.InodeNotify(id, -1, 0); !st.Ok() && st != gofuse.ENOENT {
		fs.opts.Logger.Warn("dropping the kernel's cached attributes", "ino", id, "status", st)
	}
}

type rawFS struct {
	gofuse.RawFileSystem
	v    *vfs.VFS
	opts Options
	srv  *gofuse.Server
	// stopping is closed when an unmount starts: blocked lock requests
	// return EINTR so the unmount does not wait for them.
	stopping     chan struct{}
	stoppingOnce sync.Once
}

func (fs *rawFS) String() string { return "cairn" }

func caller(h *gofuse.InHeader) *base.Caller {
	return &base.Caller{Uid: h.Uid, Gid: h.Gid, Pid: h.Pid, KernelChecked: true}
}

func st(e syscall.Errno) gofuse.Status { return gofuse.Status(e) }

func splitNs(ns int64) (uint64, uint32) {
	if ns < 0 {
		s := ns / 1e9
		r := ns % 1e9
		if r < 0 {
			s--
			r += 1e9
		}
		return uint64(s), uint32(r)
	}
	return uint64(ns / 1e9), uint32(ns % 1e9)
}

func fillAttr(ino base.Ino, a *base.Attr, out *gofuse.Attr) {
	out.Ino = uint64(ino)
	out.Size = a.Length
	out.Blocks = (a.Length + 511) / 512
	out.Atime, out.Atimensec = splitNs(a.Atime)
	out.Mtime, out.Mtimensec = splitNs(a.Mtime)
	out.Ctime, out.Ctimensec = splitNs(a.Ctime)
	out.Mode = a.FullMode()
	out.Nlink = a.Nlink
	out.Uid = a.Uid
	out.Gid = a.Gid
	out.Rdev = a.Rdev
	out.Blksize = 1 << 16
}

func timeout(d time.Duration) (uint64, uint32) {
	return uint64(d / time.Second), uint32(d % time.Second)
}

// attrTimeout and entryTimeout are how long the kernel may keep ino's
// attributes and an entry naming it.
func (fs *rawFS) attrTimeout(ino base.Ino) time.Duration {
	if fs.opts.LiveTimeout > 0 && vfs.AtRoot(ino) {
		return fs.opts.LiveTimeout
	}
	return fs.opts.AttrTimeout
}

func (fs *rawFS) entryTimeout(ino base.Ino) time.Duration {
	if fs.opts.LiveTimeout > 0 && vfs.AtRoot(ino) {
		return fs.opts.LiveTimeout
	}
	return fs.opts.EntryTimeout
}

func (fs *rawFS) fillEntry(ino base.Ino, a *base.Attr, out *gofuse.EntryOut) {
	out.NodeId = uint64(ino)
	out.Generation = 1
	out.EntryValid, out.EntryValidNsec = timeout(fs.entryTimeout(ino))
	out.AttrValid, out.AttrValidNsec = timeout(fs.attrTimeout(ino))
	fillAttr(ino, a, &out.Attr)
}

func (fs *rawFS) Lookup(cancel <-chan struct{}, h *gofuse.InHeader, name string, out *gofuse.EntryOut) gofuse.Status {
	defer fs.done(OpLookup, time.Now())
	ino, a, e := fs.v.Lookup(context.Background(), caller(h), base.Ino(h.NodeId), name)
	if e == syscall.ENOENT && fs.opts.NegativeTimeout > 0 {
		out.NodeId = 0
		out.EntryValid, out.EntryValidNsec = timeout(fs.opts.NegativeTimeout)
		return gofuse.OK
	}
	if e != 0 {
		return st(e)
	}
	fs.fillEntry(ino, &a, out)
	return gofuse.OK
}

func (fs *rawFS) Forget(nodeid, nlookup uint64) { fs.done(OpForget, time.Now()) }

func (fs *rawFS) GetAttr(cancel <-chan struct{}, in *gofuse.GetAttrIn, out *gofuse.AttrOut) gofuse.Status {
	defer fs.done(OpGetAttr, time.Now())
	a, e := fs.v.GetAttr(context.Background(), base.Ino(in.NodeId))
	if e != 0 {
		return st(e)
	}
	out.AttrValid, out.AttrValidNsec = timeout(fs.attrTimeout(base.Ino(in.NodeId)))
	fillAttr(base.Ino(in.NodeId), &a, &out.Attr)
	return gofuse.OK
}

func (fs *rawFS) SetAttr(cancel <-chan struct{}, in *gofuse.SetAttrIn, out *gofuse.AttrOut) gofuse.Status {
	defer fs.done(OpSetAttr, time.Now())
	ctx, end := fs.interruptible(cancel)
	defer end()
	var req base.SetAttrRequest
	valid := in.Valid
	if valid&gofuse.FATTR_MODE != 0 {
		req.Valid |= base.SetMode
		req.Mode = in.Mode & 0o7777
	}
	if valid&gofuse.FATTR_UID != 0 {
		req.Valid |= base.SetUid
		req.Uid = in.Uid
	}
	if valid&gofuse.FATTR_GID != 0 {
		req.Valid |= base.SetGid
		req.Gid = in.Gid
	}
	if valid&gofuse.FATTR_SIZE != 0 {
		req.Valid |= base.SetSize
		req.Size = in.Size
	}
	if valid&gofuse.FATTR_ATIME_NOW != 0 {
		req.Valid |= base.SetAtimeNow
	} else if valid&gofuse.FATTR_ATIME != 0 {
		req.Valid |= base.SetAtime
		req.Atime = int64(in.Atime)*1e9 + int64(in.Atimensec)
	}
	if valid&gofuse.FATTR_MTIME_NOW != 0 {
		req.Valid |= base.SetMtimeNow
	} else if valid&gofuse.FATTR_MTIME != 0 {
		req.Valid |= base.SetMtime
		req.Mtime = int64(in.Mtime)*1e9 + int64(in.Mtimensec)
	}
	if valid&gofuse.FATTR_CTIME != 0 {
		req.Valid |= base.SetCtime
		req.Ctime = int64(in.Ctime)*1e9 + int64(in.Ctimensec)
	}
	if valid&gofuse.FATTR_KILL_SUIDGID != 0 {
		// a truncation by a process without CAP_FSETID (HANDLE_KILLPRIV_V2)
		req.Valid |= base.SetKillSuidgid
	}
	a, e := fs.v.SetAttr(ctx, caller(&in.InHeader), base.Ino(in.NodeId), req)
	if e != 0 {
		return st(e)
	}
	out.AttrValid, out.AttrValidNsec = timeout(fs.attrTimeout(base.Ino(in.NodeId)))
	fillAttr(base.Ino(in.NodeId), &a, &out.Attr)
	return gofuse.OK
}

func (fs *rawFS) mknod(ctx context.Context, h *gofuse.InHeader, name string, typ base.FileType, mode, umask, rdev uint32, target string, out *gofuse.EntryOut) gofuse.Status {
	ino, a, e := fs.v.Mknod(ctx, caller(h), base.Ino(h.NodeId), name, typ, mode&0o7777, umask, rdev, target)
	if e != 0 {
		return st(e)
	}
	fs.fillEntry(ino, &a, out)
	return gofuse.OK
}

func (fs *rawFS) Mknod(cancel <-chan struct{}, in *gofuse.MknodIn, name string, out *gofuse.EntryOut) gofuse.Status {
	defer fs.done(OpMknod, time.Now())
	ctx, end := fs.interruptible(cancel)
	defer end()
	typ := base.TypeFromMode(in.Mode)
	if typ == 0 {
		typ = base.TypeFile
	}
	if typ == base.TypeDir || typ == base.TypeSymlink {
		return gofuse.EINVAL
	}
	return fs.mknod(ctx, &in.InHeader, name, typ, in.Mode, in.Umask, in.Rdev, "", out)
}

func (fs *rawFS) Mkdir(cancel <-chan struct{}, in *gofuse.MkdirIn, name string, out *gofuse.EntryOut) gofuse.Status {
	defer fs.done(OpMkdir, time.Now())
	ctx, end := fs.interruptible(cancel)
	defer end()
	return fs.mknod(ctx, &in.InHeader, name, base.TypeDir, in.Mode, in.Umask, 0, "", out)
}

func (fs *rawFS) Symlink(cancel <-chan struct{}, h *gofuse.InHeader, target, name string, out *gofuse.EntryOut) gofuse.Status {
	defer fs.done(OpSymlink, time.Now())
	ctx, end := fs.interruptible(cancel)
	defer end()
	return fs.mknod(ctx, h, name, base.TypeSymlink, 0o777, 0, 0, target, out)
}

func (fs *rawFS) Readlink(cancel <-chan struct{}, h *gofuse.InHeader) ([]byte, gofuse.Status) {
	defer fs.done(OpReadlink, time.Now())
	t, e := fs.v.Readlink(context.Background(), base.Ino(h.NodeId))
	if e != 0 {
		return nil, st(e)
	}
	return []byte(t), gofuse.OK
}

func (fs *rawFS) Unlink(cancel <-chan struct{}, h *gofuse.InHeader, name string) gofuse.Status {
	defer fs.done(OpUnlink, time.Now())
	ctx, end := fs.interruptible(cancel)
	defer end()
	return st(fs.v.Unlink(ctx, caller(h), base.Ino(h.NodeId), name))
}

func (fs *rawFS) Rmdir(cancel <-chan struct{}, h *gofuse.InHeader, name string) gofuse.Status {
	defer fs.done(OpRmdir, time.Now())
	ctx, end := fs.interruptible(cancel)
	defer end()
	return st(fs.v.Rmdir(ctx, caller(h), base.Ino(h.NodeId), name))
}

func (fs *rawFS) Rename(cancel <-chan struct{}, in *gofuse.RenameIn, oldName, newName string) gofuse.Status {
	defer fs.done(OpRename, time.Now())
	ctx, end := fs.interruptible(cancel)
	defer end()
	var flags uint32
	if in.Flags&1 != 0 { // RENAME_NOREPLACE
		flags |= base.RenameNoReplace
	}
	if in.Flags&2 != 0 { // RENAME_EXCHANGE
		flags |= base.RenameExchange
	}
	if in.Flags&^3 != 0 { // RENAME_WHITEOUT and unknown flags
		return gofuse.EINVAL
	}
	return st(fs.v.Rename(ctx, caller(&in.InHeader), base.Ino(in.NodeId), oldName, base.Ino(in.Newdir), newName, flags))
}

func (fs *rawFS) Link(cancel <-chan struct{}, in *gofuse.LinkIn, name string, out *gofuse.EntryOut) gofuse.Status {
	defer fs.done(OpLink, time.Now())
	ctx, end := fs.interruptible(cancel)
	defer end()
	a, e := fs.v.Link(ctx, caller(&in.InHeader), base.Ino(in.Oldnodeid), base.Ino(in.NodeId), name)
	if e != 0 {
		return st(e)
	}
	fs.fillEntry(base.Ino(in.Oldnodeid), &a, out)
	return gofuse.OK
}

func (fs *rawFS) Access(cancel <-chan struct{}, in *gofuse.AccessIn) gofuse.Status {
	defer fs.done(OpAccess, time.Now())
	return st(fs.v.Access(context.Background(), caller(&in.InHeader), base.Ino(in.NodeId), in.Mask))
}

func (fs *rawFS) GetXAttr(cancel <-chan struct{}, h *gofuse.InHeader, name string, dest []byte) (uint32, gofuse.Status) {
	defer fs.done(OpGetXAttr, time.Now())
	val, e := fs.v.GetXattr(context.Background(), caller(h), base.Ino(h.NodeId), name)
	if e != 0 {
		return 0, st(e)
	}
	if len(dest) < len(val) {
		return uint32(len(val)), gofuse.ERANGE
	}
	copy(dest, val)
	return uint32(len(val)), gofuse.OK
}

func (fs *rawFS) ListXAttr(cancel <-chan struct{}, h *gofuse.InHeader, dest []byte) (uint32, gofuse.Status) {
	defer fs.done(OpListXAttr, time.Now())
	names, e := fs.v.ListXattr(context.Background(), caller(h), base.Ino(h.NodeId))
	if e != 0 {
		return 0, st(e)
	}
	var b strings.Builder
	for _, n := range names {
		b.WriteString(n)
		b.WriteByte(0)
	}
	if len(dest) < b.Len() {
		return uint32(b.Len()), gofuse.ERANGE
	}
	copy(dest, b.String())
	return uint32(b.Len()), gofuse.OK
}

func (fs *rawFS) SetXAttr(cancel <-chan struct{}, in *gofuse.SetXAttrIn, name string, data []byte) gofuse.Status {
	defer fs.done(OpSetXAttr, time.Now())
	return st(fs.v.SetXattr(context.Background(), caller(&in.InHeader), base.Ino(in.NodeId), name, data, int(in.Flags)))
}

func (fs *rawFS) RemoveXAttr(cancel <-chan struct{}, h *gofuse.InHeader, name string) gofuse.Status {
	defer fs.done(OpRemoveXAttr, time.Now())
	return st(fs.v.RemoveXattr(context.Background(), caller(h), base.Ino(h.NodeId), name))
}

func (fs *rawFS) openFlags(flags uint32) uint32 {
	if flags&syscall.O_DIRECT != 0 {
		// Without PARALLEL_DIRECT_WRITES the kernel holds the inode
		// lock over each direct write's whole round trip, so writers of
		// one file (a database's threads) take turns; vfs serialises
		// only the buffering. The kernel still takes the lock for
		// appends, writes past the end and files also open cached.
		return gofuse.FOPEN_DIRECT_IO | gofuse.FOPEN_PARALLEL_DIRECT_WRITES
	}
	if fs.opts.CloseToOpen {
		if flags&syscall.O_APPEND != 0 {
			// The kernel picks the append offset from its cached size,
			// which may be another client's old one; vfs appends at the
			// real end, so the page cache must not keep the data at the
			// kernel's offset.
			return gofuse.FOPEN_DIRECT_IO
		}
		return 0
	}
	if fs.opts.KeepCache {
		return gofuse.FOPEN_KEEP_CACHE
	}
	return 0
}

// handleFlags are the open flags a handle gets in vfs. With the writeback
// cache the kernel fills partially written pages by reading through the
// file's handle, write-only or not (read(2) on a write-only descriptor is
// refused by the kernel itself), so such handles must allow reads.
func (fs *rawFS) handleFlags(flags uint32) int {
	f := int(flags)
	if fs.opts.WritebackCache && f&syscall.O_ACCMODE == syscall.O_WRONLY {
		f = f&^syscall.O_ACCMODE | syscall.O_RDWR
	}
	return f
}

func (fs *rawFS) Create(cancel <-chan struct{}, in *gofuse.CreateIn, name string, out *gofuse.CreateOut) gofuse.Status {
	defer fs.done(OpCreate, time.Now())
	ctx, end := fs.interruptible(cancel)
	defer end()
	ino, a, fh, e := fs.v.Create(ctx, caller(&in.InHeader), base.Ino(in.NodeId), name, in.Mode&0o7777, in.Umask, fs.handleFlags(in.Flags))
	if e != 0 {
		return st(e)
	}
	fs.fillEntry(ino, &a, &out.EntryOut)
	out.Fh = fh
	out.OpenFlags = fs.openFlags(in.Flags)
	return gofuse.OK
}

func (fs *rawFS) Open(cancel <-chan struct{}, in *gofuse.OpenIn, out *gofuse.OpenOut) gofuse.Status {
	defer fs.done(OpOpen, time.Now())
	ctx, end := fs.interruptible(cancel)
	defer end()
	fh, e := fs.v.Open(ctx, caller(&in.InHeader), base.Ino(in.NodeId), fs.handleFlags(in.Flags))
	if e != 0 {
		return st(e)
	}
	if fs.opts.CloseToOpen {
		// Attributes only: a negative offset leaves the pages, which
		// the kernel drops anyway since we do not set FOPEN_KEEP_CACHE.
		fs.invalidateAttr(in.NodeId)
	}
	out.Fh = fh
	out.OpenFlags = fs.openFlags(in.Flags)
	return gofuse.OK
}

func (fs *rawFS) Read(cancel <-chan struct{}, in *gofuse.ReadIn, buf []byte) (gofuse.ReadResult, gofuse.Status) {
	defer fs.done(OpRead, time.Now())
	ctx, end := fs.interruptible(cancel)
	defer end()
	if int(in.Size) < len(buf) {
		buf = buf[:in.Size]
	}
	n, e := fs.v.Read(ctx, in.Fh, int64(in.Offset), buf)
	if e != 0 {
		return nil, st(e)
	}
	return gofuse.ReadResultData(buf[:n]), gofuse.OK
}

func (fs *rawFS) Write(cancel <-chan struct{}, in *gofuse.WriteIn, data []byte) (uint32, gofuse.Status) {
	defer fs.done(OpWrite, time.Now())
	ctx, end := fs.interruptible(cancel)
	defer end()
	if in.WriteFlags&gofuse.WRITE_KILL_SUIDGID != 0 {
		// HANDLE_KILLPRIV_V2: the kernel marks the writes that must drop
		// setuid and setgid (a writer without CAP_FSETID) and leaves it
		// to us.
		dropped, e := fs.v.KillPriv(ctx, base.Ino(in.NodeId))
		if e != 0 {
			return 0, st(e)
		}
		if dropped {
			// The kernel keeps the mode it had until told.
			fs.invalidateAttr(in.NodeId)
		}
	}
	n, e := fs.v.Write(ctx, in.Fh, int64(in.Offset), data)
	return uint32(n), st(e)
}

func (fs *rawFS) Flush(cancel <-chan struct{}, in *gofuse.FlushIn) gofuse.Status {
	defer fs.done(OpFlush, time.Now())
	ctx, end := fs.interruptible(cancel)
	defer end()
	e := fs.v.Flush(ctx, in.Fh)
	// With POSIX locks handled here, the kernel leaves releasing the
	// closing process's locks to the flush.
	if le := fs.v.ReleasePosixLocks(context.Background(), in.Fh, kernelOwner(in.LockOwner)); e == 0 {
		e = le
	}
	return st(e)
}

func (fs *rawFS) Fsync(cancel <-chan struct{}, in *gofuse.FsyncIn) gofuse.Status {
	defer fs.done(OpFsync, time.Now())
	ctx, end := fs.interruptible(cancel)
	defer end()
	return st(fs.v.Fsync(ctx, in.Fh))
}

func (fs *rawFS) Release(cancel <-chan struct{}, in *gofuse.ReleaseIn) {
	defer fs.done(OpRelease, time.Now())
	if in.ReleaseFlags&gofuse.FUSE_RELEASE_FLOCK_UNLOCK != 0 {
		if e := fs.v.ReleaseFlock(context.Background(), in.Fh, kernelOwner(in.LockOwner)); e != 0 {
			fs.opts.Logger.Warn("releasing flock at close", "ino", in.NodeId, "errno", e)
		}
	}
	if e := fs.v.Release(context.Background(), in.Fh); e != 0 {
		fs.opts.Logger.Warn("release", "ino", in.NodeId, "errno", e)
	}
}

func (fs *rawFS) Fallocate(cancel <-chan struct{}, in *gofuse.FallocateIn) gofuse.Status {
	defer fs.done(OpFallocate, time.Now())
	ctx, end := fs.interruptible(cancel)
	defer end()
	return st(fs.v.Fallocate(ctx, caller(&in.InHeader), in.Fh, in.Mode, int64(in.Offset), int64(in.Length)))
}

func (fs *rawFS) OpenDir(cancel <-chan struct{}, in *gofuse.OpenIn, out *gofuse.OpenOut) gofuse.Status {
	defer fs.done(OpOpenDir, time.Now())
	fh, e := fs.v.OpenDir(context.Background(), caller(&in.InHeader), base.Ino(in.NodeId))
	if e != 0 {
		return st(e)
	}
	out.Fh = fh
	return gofuse.OK
}

func (fs *rawFS) ReadDir(cancel <-chan struct{}, in *gofuse.ReadIn, out *gofuse.DirEntryList) gofuse.Status {
	defer fs.done(OpReadDir, time.Now())
	return st(fs.v.ReadDir(context.Background(), caller(&in.InHeader), in.Fh, in.Offset, vfs.NoAttrs, func(e vfs.DirEntry) bool {
		return out.AddDirEntry(gofuse.DirEntry{Name: e.Name, Ino: uint64(e.Ino), Mode: e.Type.ModeBits(), Off: e.Off})
	}))
}

func (fs *rawFS) ReadDirPlus(cancel <-chan struct{}, in *gofuse.ReadIn, out *gofuse.DirEntryList) gofuse.Status {
	defer fs.done(OpReadDirPlus, time.Now())
	return st(fs.v.ReadDir(context.Background(), caller(&in.InHeader), in.Fh, in.Offset, vfs.EntryAttrs, func(e vfs.DirEntry) bool {
		eo := out.AddDirLookupEntry(gofuse.DirEntry{Name: e.Name, Ino: uint64(e.Ino), Mode: e.Type.ModeBits(), Off: e.Off})
		if eo == nil {
			return false
		}
		if e.Name != "." && e.Name != ".." && e.Attr != nil {
			fs.fillEntry(e.Ino, e.Attr, eo)
		}
		return true
	}))
}

func (fs *rawFS) ReleaseDir(in *gofuse.ReleaseIn) {
	defer fs.done(OpReleaseDir, time.Now())
	fs.v.ReleaseDir(in.Fh)
}

func (fs *rawFS) FsyncDir(cancel <-chan struct{}, in *gofuse.FsyncIn) gofuse.Status {
	defer fs.done(OpFsyncDir, time.Now())
	return st(fs.v.FsyncDir(context.Background(), base.Ino(in.NodeId)))
}

func (fs *rawFS) StatFs(cancel <-chan struct{}, h *gofuse.InHeader, out *gofuse.StatfsOut) gofuse.Status {
	defer fs.done(OpStatFs, time.Now())
	// The kernel names the inode statfs(2) was asked about: in a tree
	// with a directory quota, df shows the quota.
	s, e := fs.v.StatFS(context.Background(), base.Ino(h.NodeId))
	if e != 0 {
		return st(e)
	}
	const bsize = 4096
	out.Bsize = bsize
	out.Frsize = bsize
	out.NameLen = 255
	out.Blocks = s.TotalBytes / bsize
	out.Bfree = s.AvailBytes / bsize
	out.Bavail = s.AvailBytes / bsize
	out.Files = s.Files + s.AvailFiles
	out.Ffree = s.AvailFiles
	return gofuse.OK
}

// kernelOwner is the lock owner of the kernel's owner id o: o without
// vfs.RemoteOwner, the bit that marks the NFS gateway's NLM owners, so
// that a kernel owner is never an NLM one.
func kernelOwner(o uint64) uint64 { return o &^ vfs.RemoteOwner }

// lockFromKernel converts a FUSE lock to a meta lock request.
func lockFromKernel(lk *gofuse.FileLock) (base.Lock, bool) {
	l := base.Lock{Start: lk.Start, End: min(lk.End, base.LockEOF), Pid: lk.Pid}
	switch lk.Typ {
	case syscall.F_RDLCK:
		l.Type = base.ReadLock
	case syscall.F_WRLCK:
		l.Type = base.WriteLock
	case syscall.F_UNLCK:
		l.Type = base.Unlock
	default:
		return l, false
	}
	return l, true
}

func (fs *rawFS) GetLk(cancel <-chan struct{}, in *gofuse.LkIn, out *gofuse.LkOut) gofuse.Status {
	defer fs.done(OpGetLk, time.Now())
	l, ok := lockFromKernel(&in.Lk)
	if !ok {
		return gofuse.EINVAL
	}
	got, e := fs.v.GetLock(context.Background(), in.Fh, kernelOwner(in.Owner), l)
	if e != 0 {
		return st(e)
	}
	out.Lk = gofuse.FileLock{Typ: syscall.F_UNLCK}
	if got.Type != base.Unlock {
		out.Lk = gofuse.FileLock{Start: got.Start, End: got.End, Pid: got.Pid, Typ: syscall.F_RDLCK}
		if got.Type == base.WriteLock {
			out.Lk.Typ = syscall.F_WRLCK
		}
	}
	return gofuse.OK
}

func (fs *rawFS) SetLk(cancel <-chan struct{}, in *gofuse.LkIn) gofuse.Status {
	defer fs.done(OpSetLk, time.Now())
	return fs.setLk(cancel, in, false)
}

func (fs *rawFS) SetLkw(cancel <-chan struct{}, in *gofuse.LkIn) gofuse.Status {
	defer fs.done(OpSetLkw, time.Now())
	return fs.setLk(cancel, in, true)
}

func (fs *rawFS) setLk(cancel <-chan struct{}, in *gofuse.LkIn, wait bool) gofuse.Status {
	l, ok := lockFromKernel(&in.Lk)
	if !ok {
		return gofuse.EINVAL
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	if wait {
		// The kernel interrupts a blocked request when the caller gets a
		// signal; go-fuse closes cancel then.
		go func() {
			select {
			case <-cancel:
				stop()
			case <-fs.stopping:
				stop()
			case <-ctx.Done():
			}
		}()
	}
	return st(fs.v.SetLock(ctx, in.Fh, kernelOwner(in.Owner), l, in.LkFlags&gofuse.FUSE_LK_FLOCK != 0, wait))
}
