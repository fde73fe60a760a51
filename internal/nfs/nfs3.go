package nfs

import (
	"context"
	"encoding/binary"
	"strings"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/nfs/proto"
)

// nfsProcs are the NFSv3 procedures by number.
var nfsProcs = []procedure{
	proto.NFSProcNull:        nfsNull,
	proto.NFSProcGetAttr:     nfsGetAttr,
	proto.NFSProcSetAttr:     nfsSetAttr,
	proto.NFSProcLookup:      nfsLookup,
	proto.NFSProcAccess:      nfsAccess,
	proto.NFSProcReadlink:    nfsReadlink,
	proto.NFSProcRead:        nfsRead,
	proto.NFSProcWrite:       nfsWrite,
	proto.NFSProcCreate:      nfsCreate,
	proto.NFSProcMkdir:       nfsMkdir,
	proto.NFSProcSymlink:     nfsSymlink,
	proto.NFSProcMknod:       nfsMknod,
	proto.NFSProcRemove:      nfsRemove,
	proto.NFSProcRmdir:       nfsRmdir,
	proto.NFSProcRename:      nfsRename,
	proto.NFSProcLink:        nfsLink,
	proto.NFSProcReadDir:     nfsReadDir,
	proto.NFSProcReadDirPlus: nfsReadDirPlus,
	proto.NFSProcFSStat:      nfsFSStat,
	proto.NFSProcFSInfo:      nfsFSInfo,
	proto.NFSProcPathConf:    nfsPathConf,
	proto.NFSProcCommit:      nfsCommit,
}

// fileHandle reads an nfs_fh3 and decodes it; the status is NFS3OK or
// why the handle is unusable.
func (s *Server) fileHandle(ctx context.Context, r *proto.Reader) (base.Ino, uint32) {
	b := r.Opaque(proto.MaxFHSize)
	if r.Err() != nil {
		return 0, proto.NFS3ErrBadHandle
	}
	return s.inoOf(ctx, b)
}

// dirOp is a decoded diropargs3.
type dirOp struct {
	dir  base.Ino
	st   uint32 // of the handle
	name string
}

func (s *Server) dirOpArgs(ctx context.Context, r *proto.Reader) dirOp {
	var d dirOp
	d.dir, d.st = s.fileHandle(ctx, r)
	d.name = r.String(proto.MaxPath)
	return d
}

// nameStatus checks a name for a directory operation.
func nameStatus(name string) uint32 {
	switch {
	case len(name) > proto.MaxName:
		return proto.NFS3ErrNameTooLong
	case name == "" || strings.ContainsAny(name, "/\x00"):
		return proto.NFS3ErrInval
	}
	return proto.NFS3OK
}

// handleAttr reads the attributes of the inode a decoded handle names.
// The status is the handle's when it is unusable (ino is then 0), else
// NFS3OK or why the attributes cannot be read.
func (s *Server) handleAttr(ctx context.Context, ino base.Ino, st uint32) (base.Attr, uint32) {
	if st != proto.NFS3OK {
		return base.Attr{}, st
	}
	a, e := s.getAttr(ctx, ino)
	return a, nfsStatus(e)
}

func nfsNull(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	return true
}

func nfsGetAttr(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	ino, st := s.fileHandle(ctx, args)
	if args.Err() != nil {
		return false
	}
	epoch, at := s.attrEpoch.Load(), time.Now()
	a, st := s.handleAttr(ctx, ino, st)
	w.Uint32(st)
	if st == proto.NFS3OK {
		s.readAttr(ino, &a, at, epoch)
		fa := s.fattr(ino, &a)
		fa.Encode(w)
	}
	return true
}

func nfsSetAttr(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	ino, st := s.fileHandle(ctx, args)
	sa := proto.DecodeSattr3(args)
	guard := args.Bool()
	var guardTime proto.Time
	if guard {
		guardTime = proto.Time{Sec: args.Uint32(), Nsec: args.Uint32()}
	}
	if args.Err() != nil {
		return false
	}
	a, st := s.handleAttr(ctx, ino, st)
	if st != proto.NFS3OK {
		w.Uint32(st)
		s.putWcc(ctx, w, wcc{}, 0)
		return true
	}
	pre := preOp(&a)
	if guard && nfsTime(a.Ctime) != guardTime {
		w.Uint32(proto.NFS3ErrNotSync)
		s.putWcc(ctx, w, pre, ino)
		return true
	}
	var e syscall.Errno
	if r := setAttrRequest(&sa); r.Valid != 0 {
		_, e = s.v.SetAttr(ctx, req.caller, ino, r)
	}
	w.Uint32(nfsStatus(e))
	s.putWcc(ctx, w, pre, ino)
	return true
}

// setAttrRequest converts a sattr3 into a vfs request.
func setAttrRequest(sa *proto.Sattr3) base.SetAttrRequest {
	var r base.SetAttrRequest
	if sa.Mode != nil {
		r.Valid |= base.SetMode
		r.Mode = *sa.Mode & 0o7777
	}
	if sa.Uid != nil {
		r.Valid |= base.SetUid
		r.Uid = *sa.Uid
	}
	if sa.Gid != nil {
		r.Valid |= base.SetGid
		r.Gid = *sa.Gid
	}
	if sa.Size != nil {
		r.Valid |= base.SetSize
		r.Size = *sa.Size
	}
	switch sa.AtimeHow {
	case proto.SetToServerTime:
		r.Valid |= base.SetAtimeNow
	case proto.SetToClientTime:
		r.Valid |= base.SetAtime
		r.Atime = timeNs(sa.Atime)
	}
	switch sa.MtimeHow {
	case proto.SetToServerTime:
		r.Valid |= base.SetMtimeNow
	case proto.SetToClientTime:
		r.Valid |= base.SetMtime
		r.Mtime = timeNs(sa.Mtime)
	}
	return r
}

func nfsLookup(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	d := s.dirOpArgs(ctx, args)
	if args.Err() != nil {
		return false
	}
	if d.st != proto.NFS3OK {
		w.Uint32(d.st)
		w.Bool(false)
		return true
	}
	if st := nameStatus(d.name); st != proto.NFS3OK && d.name != "" {
		w.Uint32(st)
		s.postOp(ctx, w, d.dir)
		return true
	}
	// The entry and the directory's attributes in one metadata read.
	ino, a, dir, e := s.v.LookupDir(ctx, req.caller, d.dir, d.name)
	if e == 0 && dir.Nlink == 0 {
		e = syscall.ESTALE // a removed directory still held open
	}
	if e == syscall.ENOENT {
		// The name is missing, or the directory itself is gone.
		if _, ge := s.getAttr(ctx, d.dir); ge != 0 {
			e = ge
		}
	}
	var fh []byte
	if e == 0 {
		if fh = s.handle(ino); fh == nil {
			e = syscall.EIO
		}
	}
	w.Uint32(nfsStatus(e))
	if e == 0 {
		w.Opaque(fh)
		s.putAttr(w, ino, &a)
		s.putAttr(w, d.dir, &dir)
		return true
	}
	s.postOp(ctx, w, d.dir)
	return true
}

func nfsAccess(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	ino, st := s.fileHandle(ctx, args)
	want := args.Uint32()
	if args.Err() != nil {
		return false
	}
	a, st := s.handleAttr(ctx, ino, st)
	if st != proto.NFS3OK {
		w.Uint32(st)
		w.Bool(false)
		return true
	}
	// A denial withholds the bits; any other failure (a store that
	// cannot answer) is the call's: granting nothing would make the
	// client fail its caller with EACCES, and cache that.
	var fail syscall.Errno
	may := func(mask uint32) bool {
		switch e := s.v.Access(ctx, req.caller, ino, mask); e {
		case 0:
			return true
		case syscall.EACCES, syscall.EPERM, syscall.EROFS:
		default:
			if fail == 0 {
				fail = e
			}
		}
		return false
	}
	var got uint32
	if want&proto.AccessRead != 0 && may(base.MayRead) {
		got |= proto.AccessRead
	}
	if want&(proto.AccessModify|proto.AccessExtend|proto.AccessDelete) != 0 && !s.opts.Export.ReadOnly && may(base.MayWrite) {
		got |= want & (proto.AccessModify | proto.AccessExtend)
		if a.Type == base.TypeDir {
			got |= want & proto.AccessDelete
		}
	}
	if want&(proto.AccessLookup|proto.AccessExecute) != 0 && may(base.MayExec) {
		if a.Type == base.TypeDir {
			got |= want & proto.AccessLookup
		} else {
			got |= want & proto.AccessExecute
		}
	}
	if fail != 0 {
		w.Uint32(nfsStatus(fail))
		s.putAttr(w, ino, &a)
		return true
	}
	w.Uint32(proto.NFS3OK)
	s.putAttr(w, ino, &a)
	w.Uint32(got)
	return true
}

func nfsReadlink(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	ino, st := s.fileHandle(ctx, args)
	if args.Err() != nil {
		return false
	}
	a, st := s.handleAttr(ctx, ino, st)
	if st == proto.NFS3OK && a.Type != base.TypeSymlink {
		st = proto.NFS3ErrInval
	}
	var target string
	if st == proto.NFS3OK {
		var e syscall.Errno
		target, e = s.v.Readlink(ctx, ino)
		st = nfsStatus(e)
	}
	w.Uint32(st)
	if st != proto.NFS3OK {
		s.postOp(ctx, w, ino)
		return true
	}
	s.putAttr(w, ino, &a)
	w.String(target)
	return true
}

// mayIO checks that the caller may read (or write) a file through the
// gateway's shared handle. As in other NFS servers, the owner may read
// and write whatever the mode (a file created read-only must still take
// the writes of its creator), and read access also follows from execute
// access (a client loads programs by reading them).
func (s *Server) mayIO(req *request, a *base.Attr, write bool) syscall.Errno {
	switch {
	case a.Type == base.TypeDir:
		return syscall.EISDIR
	case a.Type != base.TypeFile:
		return syscall.EINVAL
	case req.caller.Uid == a.Uid:
		return 0
	case write:
		// From the attributes the call uses (as read or kept:
		// Options.AttrCache), as the kernel checks a mount's caller
		// against its attribute cache. A read-only export or snapshot
		// refuses the write itself (EROFS).
		return permitted(base.Permits(req.caller, a, base.MayWrite))
	}
	// Reading a file one may only execute is allowed, as knfsd does.
	return permitted(base.Permits(req.caller, a, base.MayRead) || base.Permits(req.caller, a, base.MayExec))
}

func permitted(ok bool) syscall.Errno {
	if ok {
		return 0
	}
	return syscall.EACCES
}

func nfsRead(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	ino, st := s.fileHandle(ctx, args)
	off := args.Uint64()
	count := args.Uint32()
	if args.Err() != nil {
		return false
	}
	a, epoch, at, st := s.ioAttr(ctx, ino, st)
	if st == proto.NFS3OK {
		e := s.mayIO(req, &a, false)
		if e == 0 && off >= base.MaxFileSize {
			e = syscall.EINVAL
		}
		st = nfsStatus(e)
	}
	if st != proto.NFS3OK {
		w.Uint32(st)
		s.postOp(ctx, w, ino)
		return true
	}
	n := int(min(count, uint32(s.opts.MaxIO)))
	if off >= a.Length {
		n = 0
	} else if rest := a.Length - off; uint64(n) > rest {
		n = int(rest)
	}
	// The data is read straight into the reply: status, attributes, count
	// and eof are set once the read tells how much came.
	start := len(w.B)
	w.Uint32(proto.NFS3OK)
	s.putAttr(w, ino, &a)
	head := len(w.B)
	w.Uint32(0) // count
	w.Bool(false)
	room := w.OpaqueSpace(n)
	got := 0
	if n > 0 {
		f, e := s.files.get(ctx, ino, false)
		if e == 0 {
			if !at.IsZero() && s.opts.AttrCache > 0 {
				s.files.keepAttr(ino, &a, at, epoch) // now that the file is open
			}
			got, e = s.v.Read(ctx, f.fh, int64(off), room)
			s.files.put(ctx, f)
		}
		if e != 0 {
			w.B = w.B[:start]
			w.Uint32(nfsStatus(e))
			s.postOp(ctx, w, ino)
			return true
		}
	}
	w.OpaqueDone(room, got)
	binary.BigEndian.PutUint32(w.B[head:], uint32(got))
	// The end of the file: the length the call used, or short of it if
	// the file is shorter now (a truncation another client made while
	// this gateway kept the attributes: Options.AttrCache).
	if off+uint64(got) >= a.Length || got < n {
		binary.BigEndian.PutUint32(w.B[head+4:], 1)
	}
	return true
}

func nfsWrite(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	ino, st := s.fileHandle(ctx, args)
	off := args.Uint64()
	count := args.Uint32()
	stable := args.Uint32()
	data := args.Opaque(s.opts.MaxIO)
	if args.Err() != nil || stable > proto.FileSync {
		return false
	}
	if uint64(count) < uint64(len(data)) {
		data = data[:count]
	}
	a, epoch, at, st := s.ioAttr(ctx, ino, st)
	if st != proto.NFS3OK {
		w.Uint32(st)
		s.putWcc(ctx, w, wcc{}, 0)
		return true
	}
	pre := preOp(&a)
	e := s.mayIO(req, &a, true)
	if e == 0 && off+uint64(len(data)) > base.MaxFileSize {
		e = syscall.EFBIG
	}
	n := 0
	committed := uint32(proto.Unstable)
	if e == 0 {
		var f *openFile
		f, e = s.files.get(ctx, ino, true)
		if e == 0 {
			n, e = s.v.Write(ctx, f.fh, int64(off), data)
			if e == 0 && stable != proto.Unstable {
				e = s.v.Fsync(ctx, f.fh)
				committed = proto.FileSync
			}
			s.files.put(ctx, f)
		}
	}
	w.Uint32(nfsStatus(e))
	if e == 0 {
		// The attributes read before the write, with the write applied
		// (vfs.Overlay: the time of the last write, the end of what is
		// buffered), not a second read of the store: a WRITE cost two
		// reads of the file's attributes, and a gateway streaming a file
		// 4 to 7 times the metadata transactions of a mount. The write
		// reached off+n even if a flush committed it meanwhile. They
		// are kept for the next READ or WRITE (Options.AttrCache),
		// whatever the write's stability: a READ after it must not stop
		// at the end the file had before.
		s.v.Overlay(ino, &a)
		a.Length = max(a.Length, off+uint64(n))
		if at.IsZero() {
			s.files.wroteAttr(ino, &a, epoch)
		} else if s.opts.AttrCache > 0 {
			s.files.keepAttr(ino, &a, at, epoch)
		}
	}
	if e == 0 && committed == proto.Unstable {
		s.putWccAttrs(w, pre, ino, &a)
	} else {
		s.putWcc(ctx, w, pre, ino)
	}
	if e == 0 {
		w.Uint32(uint32(n))
		w.Uint32(committed)
		w.Fixed(s.verf[:])
	}
	return true
}

func nfsCommit(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	ino, st := s.fileHandle(ctx, args)
	args.Uint64() // offset and count: the whole file is committed
	args.Uint32()
	if args.Err() != nil {
		return false
	}
	a, _, _, st := s.ioAttr(ctx, ino, st)
	if st != proto.NFS3OK {
		w.Uint32(st)
		s.putWcc(ctx, w, wcc{}, 0)
		return true
	}
	pre := preOp(&a)
	var e syscall.Errno
	if f := s.files.peek(ino); f != nil {
		// Commit the file's buffered writes and make them durable:
		// other clients see the data at their next open (close-to-open;
		// another gateway's at its next GETATTR, Options.CloseToOpen).
		// The handle stays open for the client's next WRITE or READ, as
		// without a COMMIT (FileIdle closes it): a client that commits
		// as it streams a file would otherwise open it again after each
		// COMMIT, and each open and close is a metadata transaction.
		e = s.v.Fsync(ctx, f.fh)
		s.files.put(ctx, f)
	} else {
		// Nothing buffered here: closed handles committed their writes;
		// make them durable.
		e = s.v.FsyncDir(ctx, ino)
	}
	w.Uint32(nfsStatus(e))
	if e == 0 {
		// The attributes before it: the commit placed what the gateway
		// buffered, which they already showed (vfs.Overlay, WRITE), at
		// the time of its last write (meta.WriteSlices' mtime).
		s.putWccAttrs(w, pre, ino, &a)
		w.Fixed(s.verf[:])
	} else {
		s.putWcc(ctx, w, pre, ino)
	}
	return true
}

// createResult appends the result of CREATE, MKDIR, SYMLINK and MKNOD.
func (s *Server) createResult(ctx context.Context, w *proto.Writer, e syscall.Errno, ino base.Ino, a *base.Attr, dirPre wcc, dir base.Ino) {
	w.Uint32(nfsStatus(e))
	if e == 0 {
		w.Bool(true)
		w.Opaque(s.handle(ino))
		s.putAttr(w, ino, a)
	}
	s.putWcc(ctx, w, dirPre, dir)
}

// startDirOp checks a directory operation's handle and name and returns
// the directory's attributes before it (none if they cannot be read).
// The status is NFS3OK or why the operation cannot go on; the caller
// writes it.
func (s *Server) startDirOp(ctx context.Context, d dirOp) (wcc, uint32) {
	a, st := s.handleAttr(ctx, d.dir, d.st)
	if st != proto.NFS3OK {
		return wcc{}, st
	}
	if a.Type != base.TypeDir {
		return preOp(&a), proto.NFS3ErrNotDir
	}
	return preOp(&a), nameStatus(d.name)
}

// applyAttrs sets what a sattr3 asks for beyond the mode given at
// creation.
func (s *Server) applyAttrs(ctx context.Context, c *base.Caller, ino base.Ino, sa proto.Sattr3, a *base.Attr) syscall.Errno {
	sa.Mode = nil
	r := setAttrRequest(&sa)
	if r.Valid == 0 {
		return 0
	}
	na, e := s.v.SetAttr(ctx, c, ino, r)
	if e == 0 {
		*a = na
	}
	return e
}

func modeOr(sa *proto.Sattr3, def uint32) uint32 {
	if sa.Mode != nil {
		return *sa.Mode & 0o7777
	}
	return def
}

func nfsCreate(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	d := s.dirOpArgs(ctx, args)
	how := args.Uint32()
	var sa proto.Sattr3
	var verf []byte
	switch how {
	case proto.CreateUnchecked, proto.CreateGuarded:
		sa = proto.DecodeSattr3(args)
	case proto.CreateExclusive:
		verf = args.Fixed(proto.VerfSize)
	default:
		return false
	}
	if args.Err() != nil {
		return false
	}
	pre, st := s.startDirOp(ctx, d)
	if st != proto.NFS3OK {
		w.Uint32(st)
		s.putWcc(ctx, w, pre, d.dir)
		return true
	}
	mode := modeOr(&sa, 0o644)
	ino, a, e := s.v.Mknod(ctx, req.caller, d.dir, d.name, base.TypeFile, mode, 0, 0, "")
	switch {
	case e == 0 && how == proto.CreateExclusive:
		// The verifier is kept in atime and mtime until the client sets
		// the real attributes, so a retransmitted create finds it.
		va, vm := exclusiveTimes(verf)
		a, e = s.v.SetAttr(ctx, req.caller, ino, base.SetAttrRequest{Valid: base.SetAtime | base.SetMtime, Atime: va, Mtime: vm})
	case e == 0:
		// The new file already has length 0 and the caller as owner (as
		// Linux asks for an O_TRUNC create): only what differs costs a
		// SETATTR.
		if sa.Size != nil && *sa.Size == a.Length {
			sa.Size = nil
		}
		if sa.Uid != nil && *sa.Uid == a.Uid {
			sa.Uid = nil
		}
		if sa.Gid != nil && *sa.Gid == a.Gid {
			sa.Gid = nil
		}
		e = s.applyAttrs(ctx, req.caller, ino, sa, &a)
	case e == syscall.EEXIST && how != proto.CreateGuarded:
		var le syscall.Errno
		ino, a, le = s.v.Lookup(ctx, req.caller, d.dir, d.name)
		switch {
		case le != 0:
			e = le
		case a.Type != base.TypeFile:
			// An existing directory or other type stays EEXIST.
		case how == proto.CreateExclusive:
			va, vm := exclusiveTimes(verf)
			if a.Atime == va && a.Mtime == vm {
				e = 0 // the reply to our own create was lost
			}
		default:
			// UNCHECKED: the existing file is used, with the size the
			// client asks for (a truncating open).
			e = 0
			sa.Mode = nil
			if sa.Size != nil || sa.Uid != nil || sa.Gid != nil {
				e = s.applyAttrs(ctx, req.caller, ino, sa, &a)
			}
		}
	}
	s.createResult(ctx, w, e, ino, &a, pre, d.dir)
	return true
}

// exclusiveTimes turns an EXCLUSIVE create's verifier into the atime and
// mtime that keep it (whole seconds, so every client reads them back).
func exclusiveTimes(v []byte) (int64, int64) {
	a := uint32(v[0])<<24 | uint32(v[1])<<16 | uint32(v[2])<<8 | uint32(v[3])
	m := uint32(v[4])<<24 | uint32(v[5])<<16 | uint32(v[6])<<8 | uint32(v[7])
	return int64(a) * 1e9, int64(m) * 1e9
}

func nfsMkdir(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	d := s.dirOpArgs(ctx, args)
	sa := proto.DecodeSattr3(args)
	if args.Err() != nil {
		return false
	}
	return s.mknod(ctx, req, w, d, base.TypeDir, sa, 0o755, 0, "")
}

func nfsSymlink(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	d := s.dirOpArgs(ctx, args)
	sa := proto.DecodeSattr3(args)
	target := args.String(proto.MaxPath)
	if args.Err() != nil {
		return false
	}
	if target == "" {
		pre, st := s.startDirOp(ctx, d)
		if st == proto.NFS3OK {
			st = proto.NFS3ErrInval
		}
		w.Uint32(st)
		s.putWcc(ctx, w, pre, d.dir)
		return true
	}
	sa.Mode = nil // symlinks are 0777
	return s.mknod(ctx, req, w, d, base.TypeSymlink, sa, 0o777, 0, target)
}

func nfsMknod(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	d := s.dirOpArgs(ctx, args)
	t := args.Uint32()
	var sa proto.Sattr3
	var rdev uint32
	var typ base.FileType
	switch t {
	case proto.NF3Chr, proto.NF3Blk:
		sa = proto.DecodeSattr3(args)
		rdev = mkdev(args.Uint32(), args.Uint32())
		typ = base.TypeChar
		if t == proto.NF3Blk {
			typ = base.TypeBlock
		}
	case proto.NF3Sock, proto.NF3FIFO:
		sa = proto.DecodeSattr3(args)
		typ = base.TypeSocket
		if t == proto.NF3FIFO {
			typ = base.TypeFIFO
		}
	case proto.NF3Reg, proto.NF3Dir, proto.NF3Lnk:
	default:
		return false
	}
	if args.Err() != nil {
		return false
	}
	if typ == 0 {
		pre, st := s.startDirOp(ctx, d)
		if st == proto.NFS3OK {
			st = proto.NFS3ErrBadType
		}
		w.Uint32(st)
		s.putWcc(ctx, w, pre, d.dir)
		return true
	}
	return s.mknod(ctx, req, w, d, typ, sa, 0o644, rdev, "")
}

// mknod creates a directory, symlink or special file.
func (s *Server) mknod(ctx context.Context, req *request, w *proto.Writer, d dirOp, typ base.FileType, sa proto.Sattr3, mode, rdev uint32, target string) bool {
	pre, st := s.startDirOp(ctx, d)
	if st != proto.NFS3OK {
		w.Uint32(st)
		s.putWcc(ctx, w, pre, d.dir)
		return true
	}
	ino, a, e := s.v.Mknod(ctx, req.caller, d.dir, d.name, typ, modeOr(&sa, mode), 0, rdev, target)
	if e == 0 && typ != base.TypeSymlink {
		e = s.applyAttrs(ctx, req.caller, ino, sa, &a)
	}
	s.createResult(ctx, w, e, ino, &a, pre, d.dir)
	return true
}

func nfsRemove(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	return s.remove(ctx, req, args, w, false)
}

func nfsRmdir(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	return s.remove(ctx, req, args, w, true)
}

func (s *Server) remove(ctx context.Context, req *request, args *proto.Reader, w *proto.Writer, dir bool) bool {
	d := s.dirOpArgs(ctx, args)
	if args.Err() != nil {
		return false
	}
	if !dir && d.st == proto.NFS3OK && nameStatus(d.name) == proto.NFS3OK {
		return s.unlink(ctx, req, d, w)
	}
	pre, st := s.startDirOp(ctx, d)
	if st == proto.NFS3OK {
		var e syscall.Errno
		if dir {
			e = s.v.Rmdir(ctx, req.caller, d.dir, d.name)
		} else {
			e = s.v.Unlink(ctx, req.caller, d.dir, d.name)
		}
		st = nfsStatus(e)
	}
	w.Uint32(st)
	s.putWcc(ctx, w, pre, d.dir)
	return true
}

// unlink serves REMOVE in one metadata transaction, which also gives the
// directory's attributes before and after for the reply. Only a failure
// reads them again (and tells a stale directory from a missing name).
func (s *Server) unlink(ctx context.Context, req *request, d dirOp, w *proto.Writer) bool {
	ch, e := s.v.UnlinkChange(ctx, req.caller, d.dir, d.name)
	if e != 0 {
		a, st := s.handleAttr(ctx, d.dir, d.st)
		switch {
		case st != proto.NFS3OK:
		case a.Type != base.TypeDir:
			st = proto.NFS3ErrNotDir
		default:
			st = nfsStatus(e)
		}
		w.Uint32(st)
		s.putWcc(ctx, w, wcc{}, d.dir)
		return true
	}
	// Drop the gateway's hold on the file, so the last link's removal
	// frees it.
	s.files.release(ctx, ch.Ino)
	w.Uint32(proto.NFS3OK)
	s.putWccAttrs(w, preOp(&ch.Before), d.dir, &ch.After)
	return true
}

func nfsRename(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	from := s.dirOpArgs(ctx, args)
	to := s.dirOpArgs(ctx, args)
	if args.Err() != nil {
		return false
	}
	fpre, st := s.startDirOp(ctx, from)
	tpre, tst := s.startDirOp(ctx, to)
	if st == proto.NFS3OK {
		st = tst
	}
	if st == proto.NFS3OK {
		st = nfsStatus(s.v.Rename(ctx, req.caller, from.dir, from.name, to.dir, to.name, 0))
	}
	w.Uint32(st)
	s.putWcc(ctx, w, fpre, from.dir)
	s.putWcc(ctx, w, tpre, to.dir)
	return true
}

func nfsLink(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	ino, fst := s.fileHandle(ctx, args)
	d := s.dirOpArgs(ctx, args)
	if args.Err() != nil {
		return false
	}
	pre, st := s.startDirOp(ctx, d)
	if fst != proto.NFS3OK {
		st = fst
		ino = 0
	}
	if st == proto.NFS3OK {
		_, e := s.getAttr(ctx, ino)
		if e == 0 {
			_, e = s.v.Link(ctx, req.caller, ino, d.dir, d.name)
		}
		st = nfsStatus(e)
	}
	w.Uint32(st)
	s.postOp(ctx, w, ino)
	s.putWcc(ctx, w, pre, d.dir)
	return true
}

func nfsFSStat(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	ino, st := s.fileHandle(ctx, args)
	if args.Err() != nil {
		return false
	}
	a, st := s.handleAttr(ctx, ino, st)
	var fs base.StatFS
	if st == proto.NFS3OK {
		var e syscall.Errno
		fs, e = s.v.StatFS(ctx, ino)
		st = nfsStatus(e)
	}
	w.Uint32(st)
	if st != proto.NFS3OK {
		s.postOp(ctx, w, ino)
		return true
	}
	s.putAttr(w, ino, &a)
	w.Uint64(fs.TotalBytes)
	w.Uint64(fs.AvailBytes)
	w.Uint64(fs.AvailBytes)
	w.Uint64(fs.Files + fs.AvailFiles)
	w.Uint64(fs.AvailFiles)
	w.Uint64(fs.AvailFiles)
	w.Uint32(0) // invarsec: the figures change at any time
	return true
}

// attrProc serves a procedure whose argument is a file handle and whose
// reply is a status, a post_op_attr and, on success, what body appends
// (FSINFO, PATHCONF).
func (s *Server) attrProc(ctx context.Context, args *proto.Reader, w *proto.Writer, body func()) bool {
	ino, st := s.fileHandle(ctx, args)
	if args.Err() != nil {
		return false
	}
	a, st := s.handleAttr(ctx, ino, st)
	w.Uint32(st)
	if st != proto.NFS3OK {
		w.Bool(false)
		return true
	}
	s.putAttr(w, ino, &a)
	body()
	return true
}

// FSINFO properties.
const (
	fsfLink        = 0x01
	fsfSymlink     = 0x02
	fsfHomogeneous = 0x08
	fsfCanSetTime  = 0x10
)

func nfsFSInfo(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	return s.attrProc(ctx, args, w, func() {
		io := uint32(s.opts.MaxIO)
		w.Uint32(io)       // rtmax
		w.Uint32(io)       // rtpref
		w.Uint32(4096)     // rtmult
		w.Uint32(io)       // wtmax
		w.Uint32(io)       // wtpref
		w.Uint32(4096)     // wtmult
		w.Uint32(64 << 10) // dtpref
		w.Uint64(base.MaxFileSize)
		w.Uint32(0) // time_delta: nanoseconds
		w.Uint32(1)
		w.Uint32(fsfLink | fsfSymlink | fsfHomogeneous | fsfCanSetTime)
	})
}

func nfsPathConf(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	return s.attrProc(ctx, args, w, func() {
		w.Uint32(65000)         // linkmax
		w.Uint32(proto.MaxName) // name_max
		w.Bool(true)            // no_trunc
		w.Bool(true)            // chown_restricted
		w.Bool(false)           // case_insensitive
		w.Bool(true)            // case_preserving
	})
}
