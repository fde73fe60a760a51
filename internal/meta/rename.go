package meta

import (
	"context"
	"fmt"

	"github.com/cairnfs/cairn/internal/base"
)

// Rename moves entry sn of directory sp to dn in dp, atomically, as
// renameat2(2) with flags RenameNoReplace or RenameExchange (not both).
//
// Without flags an existing destination is replaced: a directory may
// replace an empty directory (else ErrNotEmpty), not a non-directory
// (ErrNotDir); a non-directory may not replace a directory (ErrIsDir). The
// replaced inode loses a link as in Unlink. If source and destination are
// the same inode (hard links), nothing happens. Moving a directory into its
// own subtree is ErrInvalid. "." or ".." as either name is ErrBusy.
func (m *Meta) Rename(ctx context.Context, c *Caller, sp base.Ino, sn string, dp base.Ino, dn string, flags uint32) error {
	if flags&^(RenameNoReplace|RenameExchange) != 0 || flags == RenameNoReplace|RenameExchange {
		return fmt.Errorf("rename flags %#x: %w", flags, base.ErrInvalid)
	}
	for _, n := range []string{sn, dn} {
		if n == "." || n == ".." {
			return fmt.Errorf("rename %q: %w", n, base.ErrBusy)
		}
		if err := validName(n); err != nil {
			return err
		}
	}
	if m.wb != nil && sp != dp {
		// An inode moved to another directory can be reached there:
		// none of the two directories' inodes stays fresh (lease.go).
		m.leases.unfreshDir(sp)
		m.leases.unfreshDir(dp)
	}
	// Across directories, queued on the destination (one queue per
	// transaction: two could deadlock).
	ctx = changingEntries(ctx, dp)
	fn := func(o *op) error { return o.rename(c, sp, sn, dp, dn, flags) }
	if sp == dp && m.wbRemovesIn(sp) {
		if done, err := m.writeBack(ctx, []base.Ino{sp}, nil, fn, fn, nil); done {
			return err
		}
	}
	return m.trashRetry(ctx, func() error { return m.mutate(ctx, fn) })
}

func (o *op) rename(c *Caller, sp base.Ino, sn string, dp base.Ino, dn string, flags uint32) error {
	if err := o.prefetchOp(attrKey(sp), attrKey(dp), dentryKey(sp, sn), dentryKey(dp, dn)); err != nil {
		return err
	}
	spa, err := o.dirAttr(sp)
	if err != nil {
		return err
	}
	dpa, err := o.dirAttr(dp)
	if err != nil {
		return err
	}
	sino, styp, ok, err := getDentry(o, sp, sn)
	if err != nil {
		return err
	}
	if !ok {
		// Maybe made by another client leasing sp, not committed yet.
		if err := o.checkLease(sp); err != nil {
			return err
		}
		return fmt.Errorf("rename source %q in %d: %w", sn, sp, base.ErrNotFound)
	}
	dino, dtyp, dexists, err := getDentry(o, dp, dn)
	if err != nil {
		return err
	}
	exchange := flags&RenameExchange != 0
	if exchange && !dexists {
		if err := o.checkLease(dp); err != nil {
			return err
		}
		return fmt.Errorf("exchange target %q in %d: %w", dn, dp, base.ErrNotFound)
	}
	if dexists && flags&RenameNoReplace != 0 {
		return fmt.Errorf("rename target %q in %d: %w", dn, dp, base.ErrExist)
	}
	if err := access(c, spa, MayWrite|MayExec); err != nil {
		return fmt.Errorf("rename from %d: %w", sp, err)
	}
	if err := access(c, dpa, MayWrite|MayExec); err != nil {
		return fmt.Errorf("rename into %d: %w", dp, err)
	}
	if isTrashDir(spa) || isTrashDir(dpa) || trashReserved(sp, sn) || trashReserved(dp, dn) {
		return errInTrash("rename")
	}
	if dexists && dino == sino {
		return nil // same inode: POSIX says do nothing
	}
	sa, err := o.attr(sino)
	if err != nil {
		return err
	}
	if err := o.wbMayDelete(c, spa, sino, sa); err != nil {
		return fmt.Errorf("rename %q: %w", sn, err)
	}
	var da *base.Attr
	if dexists {
		if da, err = o.attr(dino); err != nil {
			return err
		}
		if err := o.wbMayDelete(c, dpa, dino, da); err != nil {
			return fmt.Errorf("rename over %q: %w", dn, err)
		}
	}
	// A directory changing parent rewrites its "..": needs w on itself and
	// must not move below itself.
	moveDir := func(ino base.Ino, a *base.Attr, to base.Ino) error {
		if sp == dp {
			return nil
		}
		if err := access(c, a, MayWrite); err != nil {
			return fmt.Errorf("move directory %d: %w", ino, err)
		}
		return o.checkNotAncestor(ino, to)
	}
	if styp == base.TypeDir {
		if err := moveDir(sino, sa, dp); err != nil {
			return err
		}
	}
	if exchange {
		if dtyp == base.TypeDir {
			if err := moveDir(dino, da, sp); err != nil {
				return err
			}
		}
		if err := o.moveQuota(sino, sa, dpa.Quota); err != nil {
			return err
		}
		if err := o.moveQuota(dino, da, spa.Quota); err != nil {
			return err
		}
		return o.exchange(sp, spa, sn, sino, sa, dp, dpa, dn, dino, da)
	}
	if dexists {
		switch {
		case styp == base.TypeDir && dtyp != base.TypeDir:
			return fmt.Errorf("rename directory over %q: %w", dn, base.ErrNotDir)
		case styp != base.TypeDir && dtyp == base.TypeDir:
			return fmt.Errorf("rename over directory %q: %w", dn, base.ErrIsDir)
		case dtyp == base.TypeDir:
			if err := o.wbNeedsOwnLease(dino); err != nil {
				return err
			}
			if full, err := hasEntries(o, dino); err != nil {
				return err
			} else if full {
				return fmt.Errorf("rename over %q: %w", dn, base.ErrNotEmpty)
			}
		}
	}
	if styp == base.TypeDir && sp != dp && !dexists && dpa.Nlink >= MaxLinks {
		return fmt.Errorf("directory %d: %w", dp, base.ErrTooManyLinks)
	}
	if err := o.moveQuota(sino, sa, dpa.Quota); err != nil {
		return err
	}

	// Apply.
	if err := o.vdel(dentryKey(sp, sn)); err != nil {
		return err
	}
	if err := o.vset(dentryKey(dp, dn), encodeDentry(sino, styp)); err != nil {
		return err
	}
	sa.Ctime = o.now
	if styp != base.TypeDir {
		sa.Parent = dp // hint, see mknod
	}
	if styp == base.TypeDir && sp != dp {
		sa.Parent = dp
		spa.Nlink--
		dpa.Nlink++
	}
	o.put(sino, sa)
	o.touchDir(sp, spa)
	o.touchDir(dp, dpa)
	if !dexists {
		return nil
	}
	if dtyp == base.TypeDir {
		dpa.Nlink--
	}
	// The replaced inode goes to the trash, if on, as if removed.
	if moved, err := o.toTrash(dp, dn, dino, da); err != nil || moved {
		return err
	}
	if dtyp == base.TypeDir {
		return o.destroy(dino, da)
	}
	return o.dropLink(dino, da)
}

func (o *op) exchange(sp base.Ino, spa *base.Attr, sn string, sino base.Ino, sa *base.Attr,
	dp base.Ino, dpa *base.Attr, dn string, dino base.Ino, da *base.Attr) error {
	if err := o.vset(dentryKey(sp, sn), encodeDentry(dino, da.Type)); err != nil {
		return err
	}
	if err := o.vset(dentryKey(dp, dn), encodeDentry(sino, sa.Type)); err != nil {
		return err
	}
	if sp != dp {
		if sa.Type != base.TypeDir {
			sa.Parent = dp // hints, see mknod
		}
		if da.Type != base.TypeDir {
			da.Parent = sp
		}
		if sa.Type == base.TypeDir {
			sa.Parent = dp
			spa.Nlink--
			dpa.Nlink++
		}
		if da.Type == base.TypeDir {
			da.Parent = sp
			dpa.Nlink--
			spa.Nlink++
		}
	}
	sa.Ctime, da.Ctime = o.now, o.now
	o.put(sino, sa)
	o.put(dino, da)
	o.touchDir(sp, spa)
	o.touchDir(dp, dpa)
	return nil
}

// checkNotAncestor fails with ErrInvalid if dir is target or one of its
// ancestors (walking ".." pointers to the root).
func (o *op) checkNotAncestor(dir, target base.Ino) error {
	// The ancestors are only read: two moves of directories into each
	// other's subtrees write no common key, and under snapshot isolation
	// both could commit and make a cycle. Every such move writes this
	// counter, so they conflict (kv.Txn).
	if err := o.bump(counterDirMoves); err != nil {
		return err
	}
	seen := 0
	for cur := target; ; {
		if cur == dir {
			return fmt.Errorf("move directory %d into its own subtree: %w", dir, base.ErrInvalid)
		}
		if cur == base.RootIno {
			return nil
		}
		a, err := o.attr(cur)
		if err != nil {
			return err
		}
		if seen++; seen > 1<<20 {
			return fmt.Errorf("directory %d: parent chain loops: %w", target, base.ErrIO)
		}
		cur = a.Parent
	}
}
