package meta

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cairnfs/cairn/internal/base"
)

// SetAttr changes the attributes of ino selected by req.Valid and returns
// the new attributes. Rules (Linux):
//   - SetMode: owner or root (ErrPermission); a non-root caller not in the
//     file's group loses the setgid bit.
//   - SetUid/SetGid: root, or the owner changing only the group to one of
//     his groups (ErrPermission). On non-directories this clears setuid,
//     and setgid if group-execute is set, unless SetMode is also given.
//   - SetAtime/SetMtime (explicit times): owner or root (ErrPermission);
//     SetAtimeNow/SetMtimeNow: owner, root, or write access (ErrAccess).
//   - SetSize: regular files only (ErrIsDir, ErrInvalid); needs write
//     access unless KernelChecked. Shrinking drops the data beyond the new
//     end, so a later extension reads zeros.
//   - SetCtime: root only; otherwise ctime becomes now.
//   - SetKillSuidgid: no check; applied after SetMode.
func (m *Meta) SetAttr(ctx context.Context, c *Caller, ino base.Ino, req SetAttrRequest) (base.Attr, error) {
	if a, ok := m.sameMtime(c, ino, req); ok {
		return a, nil
	}
	var out base.Attr
	build := func(out *base.Attr, replay bool) func(o *op) error {
		return func(o *op) error {
			if err := o.prefetchOp(attrKey(ino)); err != nil {
				return err
			}
			a, err := o.attr(ino)
			if replay && errors.Is(err, base.ErrNotFound) {
				return nil // destroyed after it (wbReplay)
			}
			if err != nil {
				return err
			}
			if isTrashDir(a) {
				return errInTrash("setattr")
			}
			if err := o.setattr(c, ino, a, req); err != nil {
				return fmt.Errorf("setattr %d: %w", ino, err)
			}
			*out = *a
			return nil
		}
	}
	// A fresh inode's attributes may be written back (writeback.go).
	if dir, ok := m.freshDir(ino); ok {
		if done, err := m.writeBack(ctx, []base.Ino{dir}, nil, build(&out, false), build(new(base.Attr), true), nil); done {
			return out, err
		}
	}
	err := m.mutate(ctx, build(&out, false))
	return out, err
}

// sameMtime answers, from the latest-attribute cache and without a
// transaction, the kernel's flush of times it keeps (write-back cache)
// when they add nothing: the mtime ino already has, and a ctime within
// [-kernelClockLag, +kernelStampSkew] of the stored one (the kernel's own
// stamp, on receiving the reply, of a change this client recorded, such
// as an unlink). The kernel sends one when it
// evicts an inode whose times it marked dirty; after an unlink that left
// the file in the trash, the inode is still there to set. Only for the
// kernel (c.KernelChecked): a caller asking through another front end
// gets the full setattr.
// kernelStampSkew bounds how much later than this client's record of a
// change the kernel stamps it: the time from the commit to the kernel's
// handling of the reply. kernelClockLag bounds how much earlier: the
// kernel stamps with its coarse clock, which lags the fine one by up to a
// tick (4 ms at 250 Hz, 10 ms at 100 Hz).
const (
	kernelStampSkew = 50 * time.Millisecond
	kernelClockLag  = 20 * time.Millisecond
)

func (m *Meta) sameMtime(c *Caller, ino base.Ino, req SetAttrRequest) (base.Attr, bool) {
	if m.lc == nil || !c.KernelChecked || m.opts.ReadOnly || (req.Valid != SetMtime && req.Valid != SetMtime|SetCtime) {
		return base.Attr{}, false
	}
	payload, _, ok := m.lc.get(attrKey(ino))
	if !ok {
		return base.Attr{}, false
	}
	a, err := decodeAttr(payload)
	if err != nil || a.Mtime != req.Mtime || isTrashDir(&a) {
		return base.Attr{}, false
	}
	if req.Valid&SetCtime != 0 && (req.Ctime < a.Ctime-int64(kernelClockLag) || req.Ctime > a.Ctime+int64(kernelStampSkew)) {
		return base.Attr{}, false
	}
	return a, true
}

func (o *op) setattr(c *Caller, ino base.Ino, a *base.Attr, req SetAttrRequest) error {
	v := req.Valid
	if v&(SetUid|SetGid) != 0 {
		uid, gid := a.Uid, a.Gid
		if v&SetUid != 0 {
			uid = req.Uid
		}
		if v&SetGid != 0 {
			gid = req.Gid
		}
		if !isRoot(c) && !c.KernelChecked && (uid != a.Uid || c.Uid != a.Uid || (gid != a.Gid && !c.InGroup(gid))) {
			return fmt.Errorf("chown to %d:%d: %w", uid, gid, base.ErrPermission)
		}
		a.Uid, a.Gid = uid, gid
		if a.Type != base.TypeDir && v&SetMode == 0 {
			a.Mode &^= modeSetuid
			if a.Mode&0o010 != 0 {
				a.Mode &^= modeSetgid
			}
		}
	}
	// With KernelChecked the kernel has applied the same ownership rules
	// (setattr_prepare) with the caller's full group list, which FUSE does
	// not pass on; its own changes (dropping setuid/setgid on a write by
	// another user, times kept by the writeback cache) must go through.
	if v&SetMode != 0 {
		if err := ownerOrRoot(c, a); err != nil && !c.KernelChecked {
			return fmt.Errorf("chmod: %w", err)
		}
		mode := req.Mode & 0o7777
		if !isRoot(c) && !c.KernelChecked && !c.InGroup(a.Gid) {
			mode &^= modeSetgid
		}
		a.Mode = mode
	}
	if v&SetKillSuidgid != 0 && a.Type != base.TypeDir {
		a.Mode &^= modeSetuid
		if a.Mode&0o010 != 0 {
			a.Mode &^= modeSetgid
		}
	}
	if c.KernelChecked {
		// checked by the kernel, see above
	} else if v&(SetAtime|SetMtime) != 0 {
		if err := ownerOrRoot(c, a); err != nil {
			return fmt.Errorf("set times: %w", err)
		}
	} else if v&(SetAtimeNow|SetMtimeNow) != 0 {
		if ownerOrRoot(c, a) != nil {
			if err := access(c, a, MayWrite); err != nil {
				return fmt.Errorf("set times to now: %w", err)
			}
		}
	}
	switch {
	case v&SetAtime != 0:
		a.Atime = req.Atime
	case v&SetAtimeNow != 0:
		a.Atime = o.now
	}
	switch {
	case v&SetMtime != 0:
		a.Mtime = req.Mtime
	case v&SetMtimeNow != 0:
		a.Mtime = o.now
	}
	if v&SetSize != 0 {
		switch a.Type {
		case base.TypeFile:
		case base.TypeDir:
			return fmt.Errorf("truncate: %w", base.ErrIsDir)
		default:
			return fmt.Errorf("truncate a %s: %w", a.Type, base.ErrInvalid)
		}
		if err := access(c, a, MayWrite); err != nil {
			return fmt.Errorf("truncate: %w", err)
		}
		if err := o.truncate(ino, a, req.Size); err != nil {
			return err
		}
		if v&SetMtime == 0 {
			a.Mtime = o.now
		}
	}
	a.Ctime = o.now
	if v&SetCtime != 0 {
		if !isRoot(c) && !c.KernelChecked {
			return fmt.Errorf("set ctime: %w", base.ErrPermission)
		}
		a.Ctime = req.Ctime
	}
	o.put(ino, a)
	return nil
}
