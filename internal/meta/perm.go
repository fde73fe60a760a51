package meta

import (
	"fmt"

	"github.com/cairnfs/cairn/internal/base"
)

const (
	modeSetuid = 0o4000
	modeSetgid = 0o2000
	modeSticky = 0o1000
)

func isRoot(c *Caller) bool { return c.Uid == 0 }

// access checks rwx access unless the kernel already did.
func access(c *Caller, a *base.Attr, mask uint32) error {
	if c.KernelChecked || base.Permits(c, a, mask) {
		return nil
	}
	return base.ErrAccess
}

// ownerOrRoot: operations reserved to the owner (chmod, explicit utimes).
func ownerOrRoot(c *Caller, a *base.Attr) error {
	if isRoot(c) || c.Uid == a.Uid {
		return nil
	}
	return base.ErrPermission
}

// mayDelete checks removing (or replacing) the entry of victim in dir:
// w+x on dir, and the sticky rule.
func mayDelete(c *Caller, dir, victim *base.Attr) error {
	if err := access(c, dir, MayWrite|MayExec); err != nil {
		return err
	}
	if stickyOwnerDecides(c, dir) && c.Uid != victim.Uid {
		return fmt.Errorf("sticky directory: %w", base.ErrPermission)
	}
	return nil
}

// stickyOwnerDecides reports whether removing an entry of dir by c rests
// on the victim's owner: dir is sticky, and c is neither root nor dir's
// owner.
func stickyOwnerDecides(c *Caller, dir *base.Attr) bool {
	return dir.Mode&modeSticky != 0 && !isRoot(c) && c.Uid != dir.Uid
}

// newOwnership computes uid, gid and mode of an inode created by c in
// parent (mode already masked by umask), following Linux inode_init_owner.
func newOwnership(c *Caller, parent *base.Attr, typ base.FileType, mode uint32) (uid, gid, outMode uint32) {
	uid, gid = c.Uid, c.Gid
	if parent.Mode&modeSetgid != 0 {
		gid = parent.Gid
		if typ == base.TypeDir {
			mode |= modeSetgid
		} else if mode&(modeSetgid|0o010) == modeSetgid|0o010 && !c.InGroup(gid) && !isRoot(c) {
			mode &^= modeSetgid
		}
	}
	return uid, gid, mode
}

func validName(name string) error {
	if len(name) > MaxNameLen {
		return fmt.Errorf("%.40q…: %w", name, base.ErrNameTooLong)
	}
	if name == "" || name == "." || name == ".." {
		return fmt.Errorf("name %q: %w", name, base.ErrInvalid)
	}
	for i := 0; i < len(name); i++ {
		if name[i] == '/' || name[i] == 0 {
			return fmt.Errorf("name %q contains '/' or NUL: %w", name, base.ErrInvalid)
		}
	}
	return nil
}
