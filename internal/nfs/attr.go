package nfs

import (
	"context"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/nfs/proto"
)

// ftype converts a Cairn file type to an ftype3.
func ftype(t base.FileType) uint32 {
	switch t {
	case base.TypeFile:
		return proto.NF3Reg
	case base.TypeDir:
		return proto.NF3Dir
	case base.TypeSymlink:
		return proto.NF3Lnk
	case base.TypeBlock:
		return proto.NF3Blk
	case base.TypeChar:
		return proto.NF3Chr
	case base.TypeSocket:
		return proto.NF3Sock
	case base.TypeFIFO:
		return proto.NF3FIFO
	}
	return proto.NF3Reg
}

// nfsTime converts nanoseconds since the epoch to an nfstime3 (times
// before 1970 are clamped to 0: nfstime3 seconds are unsigned).
func nfsTime(ns int64) proto.Time {
	if ns < 0 {
		return proto.Time{}
	}
	return proto.Time{Sec: uint32(ns / 1e9), Nsec: uint32(ns % 1e9)}
}

func timeNs(t proto.Time) int64 { return int64(t.Sec)*1e9 + int64(t.Nsec) }

// Device numbers are stored in Linux's 32-bit dev_t encoding.
func devMajor(rdev uint32) uint32 { return (rdev >> 8) & 0xfff }
func devMinor(rdev uint32) uint32 { return rdev&0xff | (rdev>>12)&0xfff00 }
func mkdev(major, minor uint32) uint32 {
	return (major&0xfff)<<8 | minor&0xff | (minor&0xfff00)<<12
}

func (s *Server) fattr(ino base.Ino, a *base.Attr) proto.Fattr3 {
	return proto.Fattr3{
		Type:   ftype(a.Type),
		Mode:   a.Mode & 0o7777,
		Nlink:  a.Nlink,
		Uid:    a.Uid,
		Gid:    a.Gid,
		Size:   a.Length,
		Used:   (a.Length + 4095) &^ 4095,
		Major:  devMajor(a.Rdev),
		Minor:  devMinor(a.Rdev),
		Fsid:   s.fh.fsid,
		Fileid: s.fileid(ino),
		Atime:  nfsTime(a.Atime),
		Mtime:  nfsTime(a.Mtime),
		Ctime:  nfsTime(a.Ctime),
	}
}

// putAttr appends a post_op_attr from known attributes (a nil a: none).
func (s *Server) putAttr(w *proto.Writer, ino base.Ino, a *base.Attr) {
	if a == nil {
		w.Bool(false)
		return
	}
	w.Bool(true)
	fa := s.fattr(ino, a)
	fa.Encode(w)
}

// postOp appends a post_op_attr read now; none if that fails.
func (s *Server) postOp(ctx context.Context, w *proto.Writer, ino base.Ino) {
	if ino == 0 {
		w.Bool(false)
		return
	}
	a, e := s.v.GetAttr(ctx, ino)
	if e != 0 {
		w.Bool(false)
		return
	}
	s.putAttr(w, ino, &a)
}

// wcc is the pre-operation part of wcc_data.
type wcc struct {
	ok           bool
	size         uint64
	mtime, ctime int64
}

func preOp(a *base.Attr) wcc {
	if a == nil {
		return wcc{}
	}
	return wcc{ok: true, size: a.Length, mtime: a.Mtime, ctime: a.Ctime}
}

// putWcc appends wcc_data: the attributes before, and after (read now).
func (s *Server) putWcc(ctx context.Context, w *proto.Writer, pre wcc, ino base.Ino) {
	putPreOp(w, pre)
	s.postOp(ctx, w, ino)
}

// putWccAttrs is putWcc with the post-operation attributes known.
func (s *Server) putWccAttrs(w *proto.Writer, pre wcc, ino base.Ino, post *base.Attr) {
	putPreOp(w, pre)
	s.putAttr(w, ino, post)
}

func putPreOp(w *proto.Writer, pre wcc) {
	w.Bool(pre.ok)
	if pre.ok {
		w.Uint64(pre.size)
		for _, t := range []proto.Time{nfsTime(pre.mtime), nfsTime(pre.ctime)} {
			w.Uint32(t.Sec)
			w.Uint32(t.Nsec)
		}
	}
}

// getAttr reads the attributes of the inode a handle names: an inode
// that no longer exists, or that is unlinked but still held open (by this
// gateway's cache or another client), is a stale handle. ENOENT is the
// store's answer that the inode is gone; a store that cannot answer is
// EIO (vfs.Errno), and stays EIO.
func (s *Server) getAttr(ctx context.Context, ino base.Ino) (base.Attr, syscall.Errno) {
	a, e := s.v.GetAttr(ctx, ino)
	if e == syscall.ENOENT || e == 0 && a.Nlink == 0 {
		return base.Attr{}, syscall.ESTALE
	}
	return a, e
}

// ioAttr returns ino's attributes for a READ, WRITE or COMMIT: kept ones
// (Options.AttrCache) with this gateway's buffered writes applied, or
// else read from the store and kept if the file is open. at is when
// the store was read (zero: kept ones); epoch is the attribute epoch
// they belong to.
func (s *Server) ioAttr(ctx context.Context, ino base.Ino, st uint32) (a base.Attr, epoch uint64, at time.Time, _ uint32) {
	if st != proto.NFS3OK {
		return base.Attr{}, 0, at, st
	}
	epoch = s.attrEpoch.Load()
	now := time.Now()
	if ttl := s.opts.AttrCache; ttl > 0 {
		if a, ok := s.files.cachedAttr(ino, epoch, ttl, now); ok {
			s.v.Overlay(ino, &a)
			return a, epoch, at, proto.NFS3OK
		}
	}
	a, st = s.handleAttr(ctx, ino, st)
	if st == proto.NFS3OK {
		s.readAttr(ino, &a, now, epoch)
	}
	return a, epoch, now, st
}

// readAttr takes in ino's attributes, read from the store at or after at
// under epoch: kept with its open file (if any, Options.AttrCache), and,
// with Options.CloseToOpen, if they show the file changed since they were
// last read, what this gateway cached of its content is dropped, as an
// open does on a mount: a client revalidates a file at its open with a
// GETATTR, which then finds what another client wrote.
func (s *Server) readAttr(ino base.Ino, a *base.Attr, at time.Time, epoch uint64) {
	same := false
	if s.opts.AttrCache > 0 {
		same = s.files.keepAttr(ino, a, at, epoch)
	}
	if s.opts.CloseToOpen && !same && a.Type == base.TypeFile {
		s.v.Revalidate(ino)
	}
}
