package meta

import (
	"context"
	"fmt"
	"strings"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// Extended attributes. Supported namespaces: "user." (read/write access to
// the inode; only on regular files and directories), "trusted." (root
// only), "security." (anyone may read; owner or root may write). Other
// namespaces (e.g. "system." ACLs) are ErrNotSupported. Names are 1..255
// bytes, values at most 64 KiB; larger is ErrRange.

func xattrName(name string) error {
	if name == "" || len(name) > MaxXattrName || strings.IndexByte(name, 0) >= 0 {
		return fmt.Errorf("xattr name %.40q: %w", name, base.ErrRange)
	}
	return nil
}

// xattrAccess checks access to attribute name of inode a for reading
// (write=false) or writing.
func xattrAccess(c *Caller, a *base.Attr, name string, write bool) error {
	switch {
	case strings.HasPrefix(name, "user."):
		if a.Type != base.TypeFile && a.Type != base.TypeDir {
			if write {
				return fmt.Errorf("user xattr on a %s: %w", a.Type, base.ErrPermission)
			}
			return fmt.Errorf("user xattr on a %s: %w", a.Type, base.ErrNoAttr)
		}
		if a.Type == base.TypeDir && a.Mode&modeSticky != 0 && write && !isRoot(c) && c.Uid != a.Uid {
			return fmt.Errorf("user xattr on sticky directory: %w", base.ErrPermission)
		}
		mask := uint32(MayRead)
		if write {
			mask = MayWrite
		}
		return access(c, a, mask)
	case strings.HasPrefix(name, "trusted."):
		if !isRoot(c) {
			return fmt.Errorf("trusted xattr: %w", base.ErrPermission)
		}
		return nil
	case strings.HasPrefix(name, "security."):
		if write {
			return ownerOrRoot(c, a)
		}
		return nil
	}
	return fmt.Errorf("xattr namespace of %q: %w", name, base.ErrNotSupported)
}

// GetXattr returns the value of attribute name (ErrNoAttr if absent).
func (m *Meta) GetXattr(ctx context.Context, c *Caller, ino base.Ino, name string) ([]byte, error) {
	if err := xattrName(name); err != nil {
		return nil, err
	}
	var out []byte
	read := func(r kv.Reader) (err error) {
		out, err = getXattrAt(r, c, ino, name, latestEpoch)
		return err
	}
	if done, err := m.wbView(ctx, []base.Ino{ino}, read); done {
		return out, err
	}
	err := m.view(ctx, read)
	return out, err
}

func getXattrAt(r kv.Reader, c *Caller, ino base.Ino, name string, epoch uint64) ([]byte, error) {
	a, err := getAttrAt(r, ino, epoch)
	if err != nil {
		return nil, err
	}
	if err := xattrAccess(c, &a, name, false); err != nil {
		return nil, err
	}
	v, ok, err := vget(r, xattrKey(ino, name), epoch)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("xattr %q of %d: %w", name, ino, base.ErrNoAttr)
	}
	return v, nil
}

// ListXattr lists the attribute names of ino in name order. "trusted."
// names are listed only to root.
func (m *Meta) ListXattr(ctx context.Context, c *Caller, ino base.Ino) ([]string, error) {
	var out []string
	read := func(r kv.Reader) (err error) {
		out, err = listXattrAt(r, c, ino, latestEpoch)
		return err
	}
	if done, err := m.wbView(ctx, []base.Ino{ino}, read); done {
		return out, err
	}
	err := m.view(ctx, read)
	return out, err
}

func listXattrAt(r kv.Reader, c *Caller, ino base.Ino, epoch uint64) ([]string, error) {
	var out []string
	if _, err := getAttrAt(r, ino, epoch); err != nil {
		return nil, err
	}
	var derr error
	err := vscan(r, xattrPrefix(ino), nil, epoch, func(k, _ []byte) bool {
		_, rawName, err := decodeXattrKey(k)
		if err != nil {
			derr = err
			return false
		}
		name := string(rawName)
		if !strings.HasPrefix(name, "trusted.") || isRoot(c) {
			out = append(out, name)
		}
		return true
	})
	if err == nil {
		err = derr
	}
	return out, err
}

// SetXattr sets attribute name. flags: XattrCreate (ErrExist if present),
// XattrReplace (ErrNoAttr if absent), or 0. Updates ctime.
func (m *Meta) SetXattr(ctx context.Context, c *Caller, ino base.Ino, name string, value []byte, flags int) error {
	if err := xattrName(name); err != nil {
		return err
	}
	if len(value) > MaxXattrValue {
		return fmt.Errorf("xattr value of %d bytes: %w", len(value), base.ErrRange)
	}
	if flags&^(XattrCreate|XattrReplace) != 0 || flags == XattrCreate|XattrReplace {
		return fmt.Errorf("xattr flags %#x: %w", flags, base.ErrInvalid)
	}
	return m.mutate(ctx, func(o *op) error {
		a, ok, err := o.xattrForWrite(c, ino, name)
		if err != nil {
			return err
		}
		if ok && flags == XattrCreate {
			return fmt.Errorf("xattr %q of %d: %w", name, ino, base.ErrExist)
		}
		if !ok && flags == XattrReplace {
			return fmt.Errorf("xattr %q of %d: %w", name, ino, base.ErrNoAttr)
		}
		if err := o.vset(xattrKey(ino, name), value); err != nil {
			return err
		}
		a.Ctime = o.now
		o.put(ino, a)
		return nil
	})
}

// xattrForWrite checks that c may change attribute name of ino and reports
// whether it exists; it returns the inode's attributes to update.
func (o *op) xattrForWrite(c *Caller, ino base.Ino, name string) (*base.Attr, bool, error) {
	a, err := o.attr(ino)
	if err != nil {
		return nil, false, err
	}
	if isTrashDir(a) {
		return nil, false, errInTrash("xattr")
	}
	if err := xattrAccess(c, a, name, true); err != nil {
		return nil, false, err
	}
	_, ok, err := vget(o, xattrKey(ino, name), latestEpoch)
	return a, ok, err
}

// RemoveXattr removes attribute name (ErrNoAttr if absent). Updates ctime.
func (m *Meta) RemoveXattr(ctx context.Context, c *Caller, ino base.Ino, name string) error {
	if err := xattrName(name); err != nil {
		return err
	}
	return m.mutate(ctx, func(o *op) error {
		a, ok, err := o.xattrForWrite(c, ino, name)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("xattr %q of %d: %w", name, ino, base.ErrNoAttr)
		}
		if err := o.vdel(xattrKey(ino, name)); err != nil {
			return err
		}
		a.Ctime = o.now
		o.put(ino, a)
		return nil
	})
}
