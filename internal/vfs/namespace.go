package vfs

import (
	"context"
	"errors"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/meta"
	"github.com/cairnfs/cairn/internal/object"
)

// Lookup resolves name in parent. The root's .snapshots is the virtual
// directory of snapshots, and the ".." of a snapshot's root is that
// directory.
func (v *VFS) Lookup(ctx context.Context, c *base.Caller, parent base.Ino, name string) (base.Ino, base.Attr, syscall.Errno) {
	t, real, e := v.resolve(parent)
	if e != 0 {
		return 0, base.Attr{}, e
	}
	switch {
	case v.reserved(parent, name):
		if !c.KernelChecked {
			if err := v.access(ctx, t, c, real, base.MayExec); err != nil {
				return 0, base.Attr{}, v.errno("lookup", err)
			}
		}
		t, real, name = v.snapsDir, SnapshotsIno, "."
	case t.slot > 0 && real == base.RootIno && name == "..":
		t, real, name = v.snapsDir, SnapshotsIno, "."
	}
	ino, a, err := t.r.Lookup(ctx, c, real, name)
	if err != nil {
		return 0, a, v.errno("lookup", err)
	}
	t.outAttr(ino, &a)
	ino = t.outIno(ino)
	v.overlay(ino, &a)
	return ino, a, 0
}

// dirLookuper is a tree that reads an entry and its directory together.
type dirLookuper interface {
	LookupDir(ctx context.Context, c *base.Caller, parent base.Ino, name string) (base.Ino, base.Attr, base.Attr, error)
}

// LookupDir is Lookup, and also returns the attributes of parent (as
// GetAttr would), read in one view where the tree can.
func (v *VFS) LookupDir(ctx context.Context, c *base.Caller, parent base.Ino, name string) (base.Ino, base.Attr, base.Attr, syscall.Errno) {
	t, real, e := v.resolve(parent)
	if e != 0 {
		return 0, base.Attr{}, base.Attr{}, e
	}
	if dl, ok := t.r.(dirLookuper); ok && !v.reserved(parent, name) && name != "." && name != ".." {
		ino, a, d, err := dl.LookupDir(ctx, c, real, name)
		if err != nil {
			return 0, base.Attr{}, base.Attr{}, v.errno("lookup", err)
		}
		t.outAttr(ino, &a)
		ino = t.outIno(ino)
		v.overlay(ino, &a)
		t.outAttr(real, &d)
		v.overlay(parent, &d)
		return ino, a, d, 0
	}
	ino, a, e := v.Lookup(ctx, c, parent, name)
	if e != 0 {
		return 0, base.Attr{}, base.Attr{}, e
	}
	d, e := v.GetAttr(ctx, parent)
	return ino, a, d, e
}

// GetAttr returns the attributes of ino, including this process's buffered
// writes.
func (v *VFS) GetAttr(ctx context.Context, ino base.Ino) (base.Attr, syscall.Errno) {
	t, real, e := v.resolve(ino)
	if e != 0 {
		return base.Attr{}, e
	}
	var a base.Attr
	err := v.holdCommits(ino, func() error {
		var err error
		if a, err = t.r.GetAttr(ctx, real); err == nil {
			t.outAttr(real, &a)
			v.overlay(ino, &a)
		}
		return err
	})
	if err != nil {
		return a, v.errno("getattr", err)
	}
	return a, 0
}

// SetAttr changes attributes. A size change first commits buffered writes
// of the file, holding its write lock until the truncation is done, so
// they cannot land after it. A time change (with the writeback cache the
// kernel sends the file's mtime now and then while it is written) is made
// while no commit of the file runs, and the later commits of the writes
// buffered before it leave the times alone: no flush, which would cut the
// buffered slices' blocks short in the middle of a stream.
func (v *VFS) SetAttr(ctx context.Context, c *base.Caller, ino base.Ino, req base.SetAttrRequest) (base.Attr, syscall.Errno) {
	if _, e := v.writable(ino); e != 0 {
		return base.Attr{}, e
	}
	if v.gone.has(ino) {
		return base.Attr{}, syscall.ENOENT // see goneSet
	}
	f := v.holdFile(ino)
	if f != nil {
		defer func() { _ = v.unref(ctx, f, false) }()
	}
	var a base.Attr
	var err error
	switch {
	case f != nil && req.Valid&base.SetSize != 0:
		f.wmu.Lock()
		defer f.wmu.Unlock()
		if err := f.flush(ctx); err != nil {
			return base.Attr{}, v.errno("setattr-flush", err)
		}
		a, err = v.m.SetAttr(ctx, c, ino, req)
	case f != nil && req.Valid&(base.SetMtime|base.SetMtimeNow|base.SetCtime) != 0:
		err = f.holdCommits(func() error {
			var err error
			a, err = v.m.SetAttr(ctx, c, ino, req)
			if err == nil {
				f.timesSet.Store(time.Now().UnixNano())
			}
			return err
		})
	default:
		a, err = v.m.SetAttr(ctx, c, ino, req)
	}
	if err != nil {
		return a, v.errno("setattr", err)
	}
	if f != nil {
		f.invalidate()
	}
	v.overlay(ino, &a)
	return a, 0
}

// Mknod creates a file, directory, symlink (target non-empty), device,
// fifo or socket.
func (v *VFS) Mknod(ctx context.Context, c *base.Caller, parent base.Ino, name string, typ base.FileType, mode, umask, rdev uint32, target string) (base.Ino, base.Attr, syscall.Errno) {
	if _, e := v.writable(parent); e != 0 {
		return 0, base.Attr{}, e
	}
	if v.reserved(parent, name) {
		return 0, base.Attr{}, syscall.EEXIST
	}
	ino, a, err := v.m.Mknod(ctx, c, parent, name, typ, mode, umask, rdev, target)
	if err != nil {
		return 0, a, v.errno("mknod", err)
	}
	return ino, a, 0
}

// Link creates a hard link to ino as parent/name.
func (v *VFS) Link(ctx context.Context, c *base.Caller, ino, parent base.Ino, name string) (base.Attr, syscall.Errno) {
	if _, e := v.writable(ino); e != 0 {
		return base.Attr{}, e
	}
	if _, e := v.writable(parent); e != 0 {
		return base.Attr{}, e
	}
	if v.reserved(parent, name) {
		return base.Attr{}, syscall.EEXIST
	}
	a, err := v.m.Link(ctx, c, ino, parent, name)
	if err != nil {
		return a, v.errno("link", err)
	}
	v.overlay(ino, &a)
	return a, 0
}

// Unlink removes a non-directory entry.
func (v *VFS) Unlink(ctx context.Context, c *base.Caller, parent base.Ino, name string) syscall.Errno {
	_, e := v.UnlinkChange(ctx, c, parent, name)
	return e
}

// UnlinkChange is Unlink, and tells what it did to parent (its
// attributes before and after, in the same transaction) and which inode
// the name named.
func (v *VFS) UnlinkChange(ctx context.Context, c *base.Caller, parent base.Ino, name string) (meta.DirChange, syscall.Errno) {
	if _, e := v.writable(parent); e != 0 {
		return meta.DirChange{}, e
	}
	if v.reserved(parent, name) {
		return meta.DirChange{}, syscall.EROFS
	}
	ch, err := v.m.UnlinkChange(ctx, c, parent, name)
	if err == nil && ch.Gone {
		v.gone.add(ch.Ino)
	}
	return ch, v.errno("unlink", err)
}

// Rmdir removes an empty directory.
func (v *VFS) Rmdir(ctx context.Context, c *base.Caller, parent base.Ino, name string) syscall.Errno {
	if _, e := v.writable(parent); e != 0 {
		return e
	}
	if v.reserved(parent, name) {
		return syscall.EROFS
	}
	return v.errno("rmdir", v.m.Rmdir(ctx, c, parent, name))
}

// Rename moves sp/sn to dp/dn with renameat2 flags.
func (v *VFS) Rename(ctx context.Context, c *base.Caller, sp base.Ino, sn string, dp base.Ino, dn string, flags uint32) syscall.Errno {
	if _, e := v.writable(sp); e != 0 {
		return e
	}
	if _, e := v.writable(dp); e != 0 {
		return e
	}
	if v.reserved(sp, sn) || v.reserved(dp, dn) {
		return syscall.EROFS
	}
	if flags&^(base.RenameNoReplace|base.RenameExchange) != 0 ||
		flags == base.RenameNoReplace|base.RenameExchange {
		return syscall.EINVAL
	}
	return v.errno("rename", v.m.Rename(ctx, c, sp, sn, dp, dn, flags))
}

// Readlink returns a symlink's target.
func (v *VFS) Readlink(ctx context.Context, ino base.Ino) (string, syscall.Errno) {
	t, real, e := v.resolve(ino)
	if e != 0 {
		return "", e
	}
	target, err := t.r.Readlink(ctx, real)
	if err != nil {
		return "", v.errno("readlink", err)
	}
	return target, 0
}

// Access checks mask (R_OK=4, W_OK=2, X_OK=1) for the caller.
func (v *VFS) Access(ctx context.Context, c *base.Caller, ino base.Ino, mask uint32) syscall.Errno {
	t, real, e := v.resolve(ino)
	if e != 0 {
		return e
	}
	if mask&base.MayWrite != 0 && (v.opts.ReadOnly || t.ro) {
		return syscall.EROFS
	}
	return v.errno("access", v.access(ctx, t, c, real, mask))
}

// StatFS reports capacity and usage as seen from inode ino (0: the
// volume's): in a tree with a directory quota, the nearest quota's
// limits. The size and the space left of a volume without a capacity
// are those of its data store where the store can tell (a local
// directory: its file system's), so that df shows the disk that fills
// up; otherwise (S3) meta's large virtual size.
func (v *VFS) StatFS(ctx context.Context, ino base.Ino) (base.StatFS, syscall.Errno) {
	var real base.Ino // in a snapshot (or an unknown inode): the volume's
	if t, r, e := v.resolve(ino); e == 0 && t == v.root {
		real = r
	}
	s, err := v.m.StatFSDir(ctx, real)
	if err != nil {
		return s, v.errno("statfs", err)
	}
	if v.m.Settings().Capacity == 0 {
		sp, err := v.cs.Space(ctx)
		switch {
		case err == nil && sp.Total > 0 && s.QuotaBytes:
			s.AvailBytes = min(s.AvailBytes, sp.Avail)
		case err == nil && sp.Total > 0:
			s.TotalBytes, s.AvailBytes = sp.Total, min(sp.Avail, sp.Total)
		case err != nil && !errors.Is(err, object.ErrUnknownSpace):
			v.log.Warn("statfs: the data store's space is unknown; reporting the virtual size", "err", err)
		}
	}
	return s, 0
}

// capXattr is the attribute the kernel asks for before a write to a FUSE
// file, to decide whether the write must drop file capabilities: before
// every write, or with HANDLE_KILLPRIV_V2 (the FUSE adapter's default)
// once per attribute refresh of the file.
const capXattr = "security.capability"

// noCapTTL bounds how long the absence of security.capability is cached.
const noCapTTL = time.Second

// GetXattr returns the value of an extended attribute. The absence of
// security.capability is cached briefly per inode (and forgotten when this
// process sets or removes an xattr of it): the kernel asks for it before
// every write, and answering from the metadata engine each time cost a
// sixth of a small-write workload's CPU.
func (v *VFS) GetXattr(ctx context.Context, c *base.Caller, ino base.Ino, name string) ([]byte, syscall.Errno) {
	if name == capXattr {
		if t, ok := v.noCap.Load(ino); ok && time.Since(t.(time.Time)) < noCapTTL {
			return nil, syscall.ENODATA
		}
	}
	t, real, e := v.resolve(ino)
	if e != 0 {
		return nil, e
	}
	val, err := t.r.GetXattr(ctx, c, real, name)
	if err != nil {
		e := v.errno("getxattr", err)
		if e == syscall.ENODATA && name == capXattr {
			v.noCap.Store(ino, time.Now())
		}
		return nil, e
	}
	return val, 0
}

// KillPriv drops what a write by a process without CAP_FSETID drops
// before the data changes: setuid, setgid when group-execute is set, and
// security.capability. The FUSE adapter calls it for the writes the
// kernel marks so (HANDLE_KILLPRIV_V2 leaves this to the file system). It
// reads the attributes, and writes only when there is something to drop.
// dropped says whether the mode changed.
func (v *VFS) KillPriv(ctx context.Context, ino base.Ino) (dropped bool, e syscall.Errno) {
	a, e := v.GetAttr(ctx, ino)
	if e != 0 {
		return false, e
	}
	if a.Type != base.TypeDir && (a.Mode&0o4000 != 0 || a.Mode&0o2010 == 0o2010) {
		if _, e := v.SetAttr(ctx, base.RootCaller, ino, base.SetAttrRequest{Valid: base.SetKillSuidgid}); e != 0 {
			return false, e
		}
		dropped = true
	}
	if _, e := v.GetXattr(ctx, base.RootCaller, ino, capXattr); e == 0 {
		if e := v.RemoveXattr(ctx, base.RootCaller, ino, capXattr); e != 0 && e != syscall.ENODATA {
			return dropped, e
		}
	}
	return dropped, 0
}

// ListXattr lists extended attribute names.
func (v *VFS) ListXattr(ctx context.Context, c *base.Caller, ino base.Ino) ([]string, syscall.Errno) {
	t, real, e := v.resolve(ino)
	if e != 0 {
		return nil, e
	}
	names, err := t.r.ListXattr(ctx, c, real)
	if err != nil {
		return nil, v.errno("listxattr", err)
	}
	return names, 0
}

// SetXattr sets an extended attribute (flags: base.XattrCreate/Replace).
func (v *VFS) SetXattr(ctx context.Context, c *base.Caller, ino base.Ino, name string, value []byte, flags int) syscall.Errno {
	if _, e := v.writable(ino); e != 0 {
		return e
	}
	defer v.noCap.Delete(ino)
	return v.errno("setxattr", v.m.SetXattr(ctx, c, ino, name, value, flags))
}

// RemoveXattr removes an extended attribute.
func (v *VFS) RemoveXattr(ctx context.Context, c *base.Caller, ino base.Ino, name string) syscall.Errno {
	if _, e := v.writable(ino); e != 0 {
		return e
	}
	defer v.noCap.Delete(ino)
	return v.errno("removexattr", v.m.RemoveXattr(ctx, c, ino, name))
}

// FsyncDir makes the directory's entries durable: metadata is flushed to
// disk (with any objects it points to).
func (v *VFS) FsyncDir(ctx context.Context, ino base.Ino) syscall.Errno {
	return v.errno("fsyncdir", v.syncAll(ctx))
}
