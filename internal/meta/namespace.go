package meta

// Namespace operations: lookup, create, link, unlink, rmdir, readdir.

import (
	"context"
	"errors"
	"fmt"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// Lookup finds name in directory parent. It needs search (x) permission on
// parent. "." returns parent itself and ".." its parent (the root's ".." is
// the root).
func (m *Meta) Lookup(ctx context.Context, c *Caller, parent base.Ino, name string) (base.Ino, base.Attr, error) {
	ino, a, _, err := m.LookupDir(ctx, c, parent, name)
	return ino, a, err
}

// LookupDir is Lookup, and also returns the attributes of parent, read in
// the same view (an NFS LOOKUP reply carries both).
func (m *Meta) LookupDir(ctx context.Context, c *Caller, parent base.Ino, name string) (base.Ino, base.Attr, base.Attr, error) {
	seq := m.wbSeq() // before any read of the store (wbAttr)
	if m.listings != nil && name != "." && name != ".." {
		if ino, a, p, ok := m.listings.lookup(c, parent, name); ok {
			return ino, a, p, nil
		}
	}
	if m.leases != nil && name != "." && name != ".." {
		if hit, err := m.leases.lookup(c, parent, name); hit {
			return 0, base.Attr{}, base.Attr{}, err
		}
	}
	{
		var ino base.Ino
		var a, p base.Attr
		if done, err := m.wbView(ctx, []base.Ino{parent}, func(r kv.Reader) (err error) {
			if ino, a, err = lookupAt(r, c, parent, name, latestEpoch); err != nil {
				return err
			}
			p, err = getAttr(r, parent)
			return err
		}); done {
			if err != nil {
				return 0, base.Attr{}, base.Attr{}, err
			}
			return ino, a, p, nil
		}
	}
	var ino base.Ino
	var a, p base.Attr
	var lease []byte
	var err error
	ahead := false
	if ah := m.ahead; ah != nil && name != "." && name != ".." {
		// Not in a contended directory: the create would queue there,
		// and a transaction begun ahead of it would not have.
		if ah.wantStart() && !m.contention.has(parent) {
			ino, a, p, ahead, err = m.lookupAhead(ctx, c, parent, name, &lease)
			if ahead && (err == nil || errors.Is(err, base.ErrNotFound)) {
				if h, wb, ok := leaseHolder(lease); ok && wb && h != m.sessionID() {
					ahead = false // look again, after the recall below
				}
			}
		}
	}
	if !ahead {
		err = m.lookupLoose(ctx, c, parent, name, &ino, &a, &p, &lease)
		for attempt := 0; err == nil || errors.Is(err, base.ErrNotFound); attempt++ {
			// Another client that writes back its changes of parent
			// commits them first (writeback.go).
			again, rerr := m.recallForRead(ctx, parent, lease, attempt)
			if rerr != nil {
				err = rerr
			}
			if !again || rerr != nil {
				break
			}
			err = m.lookupLoose(ctx, c, parent, name, &ino, &a, &p, &lease)
		}
		if m.ahead != nil && errors.Is(err, base.ErrNotFound) {
			m.ahead.noteAbsent(aheadKey{parent, name})
		}
	}
	if err != nil {
		// Not a directory other clients are changing too (contention.go):
		// the lease would be recalled at once.
		if m.leases != nil && errors.Is(err, base.ErrNotFound) && name != "." && name != ".." &&
			!m.contention.has(parent) && m.leases.missed(parent) {
			go m.acquireLease(parent)
		}
		return 0, base.Attr{}, base.Attr{}, err
	}
	if err := m.wbAttr(ctx, ino, &a, seq); err != nil {
		return 0, base.Attr{}, base.Attr{}, err
	}
	if m.listings != nil && name != "." && name != ".." && m.listings.found(parent) {
		go m.listings.load(context.WithoutCancel(ctx), m, parent)
	}
	return ino, a, p, nil
}

// lookupLoose is LookupDir's read of the store, in a loose view.
// lease receives the value of parent's lease record where the store is
// shared (nil: none, or not read).
func (m *Meta) lookupLoose(ctx context.Context, c *Caller, parent base.Ino, name string, ino *base.Ino, a, p *base.Attr, lease *[]byte) error {
	*lease = nil
	return m.looseView(ctx, func(rd kv.Reader) error {
		// The parent, the entry and its inode in one round trip where the
		// store can.
		r := &wtx{Txn: readTxn{rd}}
		r.leaseOut = lease
		// With the cache, the records are most likely in memory.
		if name != "." && name != ".." && m.lc == nil {
			if err := r.prefetchEntry(parent, name); err != nil {
				return err
			}
		}
		var err error
		if *ino, *a, err = lookupAt(r, c, parent, name, latestEpoch); err != nil {
			return err
		}
		*p, err = getAttr(r, parent) // prefetched
		return err
	})
}

// lookupAt is Lookup as of epoch.
func lookupAt(r kv.Reader, c *Caller, parent base.Ino, name string, epoch uint64) (base.Ino, base.Attr, error) {
	p, err := getAttrAt(r, parent, epoch)
	if err != nil {
		return 0, base.Attr{}, err
	}
	if p.Type != base.TypeDir {
		return 0, base.Attr{}, fmt.Errorf("lookup in inode %d: %w", parent, base.ErrNotDir)
	}
	if err := access(c, &p, MayExec); err != nil {
		return 0, base.Attr{}, fmt.Errorf("lookup %q in %d: %w", name, parent, err)
	}
	switch name {
	case ".":
		return parent, p, nil
	case "..":
		a, err := getAttrAt(r, p.Parent, epoch)
		return p.Parent, a, err
	}
	if err := validName(name); err != nil {
		return 0, base.Attr{}, err
	}
	ino, _, ok, err := getDentryAt(r, parent, name, epoch)
	if err != nil {
		return 0, base.Attr{}, err
	}
	if !ok {
		return 0, base.Attr{}, fmt.Errorf("%q in %d: %w", name, parent, base.ErrNotFound)
	}
	a, err := getAttrAt(r, ino, epoch)
	return ino, a, err
}

// GetAttr returns the attributes of ino (base.ErrNotFound if it does not
// exist). It performs no permission check. With the listing cache (shared
// engines), a directory this client changed less than a TTL ago is
// answered with the attribute its commit wrote, and the first getattr of
// a file after its open with the attribute the open read, if less than a
// TTL ago (listingcache.go).
func (m *Meta) GetAttr(ctx context.Context, ino base.Ino) (base.Attr, error) {
	if m.listings != nil {
		if a, ok := m.listings.dirAttr(ino); ok {
			return a, nil
		}
		if a, ok := m.listings.openedAttr(ino); ok {
			return a, nil
		}
	}
	var a base.Attr
	read := func(r kv.Reader) (err error) {
		a, err = getAttr(r, ino)
		return err
	}
	if done, err := m.wbView(ctx, []base.Ino{ino}, read); done {
		return a, err
	}
	err := m.looseView(ctx, read)
	return a, err
}

// Access checks access(2) mask (MayRead|MayWrite|MayExec, or 0 for
// existence) for c. It always checks, even for KernelChecked callers.
func (m *Meta) Access(ctx context.Context, c *Caller, ino base.Ino, mask uint32) error {
	a, err := m.GetAttr(ctx, ino)
	if err != nil {
		return err
	}
	if !base.Permits(c, &a, mask) {
		return fmt.Errorf("access %o to inode %d: %w", mask, ino, base.ErrAccess)
	}
	return nil
}

// createName validates a name for creating an entry: "." and ".." exist.
func createName(name string) error {
	if name == "." || name == ".." {
		return fmt.Errorf("%q: %w", name, base.ErrExist)
	}
	return validName(name)
}

// Mknod creates an inode of type typ named name in parent: a regular file,
// directory, symlink (target required), FIFO, socket or device (rdev). The
// permission bits are mode&07777 &^ umask (symlinks are always 0777).
// Needs w+x on parent. Errors: ErrExist, ErrNotDir, ErrNotFound (parent
// missing or removed), ErrAccess, ErrInvalid, ErrNameTooLong,
// ErrTooManyLinks (parent has too many subdirectories), ErrNoSpace (inode
// limit).
func (m *Meta) Mknod(ctx context.Context, c *Caller, parent base.Ino, name string, typ base.FileType,
	mode, umask, rdev uint32, target string) (base.Ino, base.Attr, error) {
	return m.mknod(ctx, c, parent, name, typ, mode, umask, rdev, target, false)
}

// Create makes a regular file and opens it (OpenFile) in one transaction.
func (m *Meta) Create(ctx context.Context, c *Caller, parent base.Ino, name string, mode, umask uint32) (base.Ino, base.Attr, error) {
	return m.mknod(ctx, c, parent, name, base.TypeFile, mode, umask, 0, "", true)
}

func (m *Meta) mknod(ctx context.Context, c *Caller, parent base.Ino, name string, typ base.FileType,
	mode, umask, rdev uint32, target string, open bool) (base.Ino, base.Attr, error) {
	if err := createName(name); err != nil {
		return 0, base.Attr{}, err
	}
	if typ < base.TypeFile || typ > base.TypeSocket {
		return 0, base.Attr{}, fmt.Errorf("file type %d: %w", typ, base.ErrInvalid)
	}
	ctx = changingEntries(ctx, parent)
	if typ == base.TypeSymlink {
		if target == "" {
			return 0, base.Attr{}, fmt.Errorf("empty symlink target: %w", base.ErrNotFound)
		}
		if len(target) > MaxSymlinkLen {
			return 0, base.Attr{}, fmt.Errorf("symlink target of %d bytes: %w", len(target), base.ErrNameTooLong)
		}
	}
	if m.opts.ReadOnly {
		return 0, base.Attr{}, base.ErrReadOnly
	}
	ino, err := m.allocIno(ctx)
	if err != nil {
		return 0, base.Attr{}, err
	}
	var sid uint64
	if open {
		unlock := m.lockIno(ino)
		defer unlock()
		m.mu.Lock()
		m.opened[ino]++
		sid = m.sid
		m.mu.Unlock()
		defer func() {
			if err != nil {
				m.mu.Lock()
				delete(m.opened, ino)
				m.mu.Unlock()
			}
		}()
	}
	var a base.Attr
	// In a directory this client leases, the new inode is fresh: no other
	// client can reach it without a lookup there, which recalls the lease
	// (lease.go). With write-back, a new directory is leased at once, in
	// the create: its entries are known (none).
	gen, leased := uint64(0), false
	if m.wb != nil {
		gen, leased = m.leases.heldGen(parent)
	}
	leaseNew := leased && typ == base.TypeDir && m.leases.roomFor(1)
	sid0 := m.sessionID()
	// build returns the mutation, which sets *out to the new attribute.
	build := func(out *base.Attr) func(o *op) error {
		return func(o *op) error {
			// A freshly allocated inode has no versions: its writes need not
			// look for older ones.
			o.remember(attrKey(ino), topVersion{})
			o.remember(symlinkKey(ino), topVersion{})
			if err := o.createRead(parent, name); err != nil {
				return err
			}
			if sid != 0 && m.holdToucher == nil {
				o.Set(holdKey(ino, sid), nil)
			}
			p, err := o.freeName(c, parent, name, "create")
			if err != nil {
				return err
			}
			perm := mode & 0o7777 &^ (umask & 0o777)
			if typ == base.TypeSymlink {
				perm = 0o777
			}
			// Parent of a non-directory is a hint (the directory of its
			// first or last-renamed name), for diff's path names.
			a := out
			*a = base.Attr{Type: typ, Nlink: 1, Atime: o.now, Mtime: o.now, Ctime: o.now, Btime: o.now, Parent: parent}
			a.Uid, a.Gid, a.Mode = newOwnership(c, p, typ, perm)
			switch typ {
			case base.TypeDir:
				a.Nlink, a.Parent = 2, parent
			case base.TypeSymlink:
				a.Length = uint64(len(target))
				if err := o.vset(symlinkKey(ino), []byte(target)); err != nil {
					return err
				}
			case base.TypeBlock, base.TypeChar:
				a.Rdev = rdev
			}
			if leaseNew {
				o.Set(leaseKey(ino), leaseValue(sid0, true))
			}
			return o.addInode(ino, a, parent, p, name)
		}
	}
	if leased {
		m.wb.markFresh(m, ino)
	}
	err = m.mutateAhead(ctx, parent, name, ino, build(&a), build(new(base.Attr)))
	if err != nil {
		if leaseNew && errors.Is(err, kv.ErrUnknownOutcome) {
			go m.releaseLease(context.Background(), ino, false) // the record may be there
		}
		return 0, base.Attr{}, err
	}
	if leased {
		m.leases.addFresh(parent, ino, gen)
		if leaseNew && sid0 == m.sessionID() {
			m.leases.installNew(ino, a)
		}
	}
	return ino, a, nil
}

// Link adds entry name in parent for the existing non-directory ino.
// Errors: ErrPermission (ino is a directory), ErrTooManyLinks, ErrExist,
// ErrNotFound (ino unlinked or missing), ErrAccess, ErrNotDir.
func (m *Meta) Link(ctx context.Context, c *Caller, ino, parent base.Ino, name string) (base.Attr, error) {
	if err := createName(name); err != nil {
		return base.Attr{}, err
	}
	// A file this client made in parent and links there again (git's
	// temporary file, then a link to the object's name) is still reached
	// through parent only: it stays fresh, and the link joins the
	// write-back log like the create did. A link into another directory
	// makes the file reachable there: no longer fresh, and committed.
	inDir := false
	if m.wb != nil {
		if d, ok := m.freshDir(ino); ok && d == parent {
			inDir = true
		} else {
			m.leases.unfresh(ino)
		}
	}
	ctx = changingEntries(ctx, parent)
	link := func(out *base.Attr) func(o *op) error {
		return func(o *op) error { return o.link(c, ino, parent, name, out) }
	}
	var out base.Attr
	if inDir {
		var absent []kv.Range
		if m.leases.absent(parent, name) {
			absent = []kv.Range{newestRange(dentryKey(parent, name))}
		}
		if done, err := m.writeBack(ctx, []base.Ino{parent}, absent, link(&out), link(new(base.Attr)), nil); done {
			return out, err
		}
	}
	err := m.mutate(ctx, link(&out))
	return out, err
}

// link adds name in parent for ino, and sets *out to ino's attributes.
func (o *op) link(c *Caller, ino, parent base.Ino, name string, out *base.Attr) error {
	a, err := o.attr(ino)
	if err != nil {
		return err
	}
	if a.Type == base.TypeDir {
		return fmt.Errorf("hard link to directory %d: %w", ino, base.ErrPermission)
	}
	if a.Nlink == 0 {
		return fmt.Errorf("inode %d was unlinked: %w", ino, base.ErrNotFound)
	}
	if a.Nlink >= MaxLinks {
		return fmt.Errorf("inode %d: %w", ino, base.ErrTooManyLinks)
	}
	if err := o.prefetchOp(attrKey(parent), dentryKey(parent, name), attrKey(ino)); err != nil {
		return err
	}
	p, err := o.freeName(c, parent, name, "link")
	if err != nil {
		return err
	}
	if a.Quota != p.Quota {
		// An inode counts in one quota: a link from a tree that
		// another quota counts is refused, as XFS refuses links
		// across project quotas (ln and cp fall back to a copy).
		return fmt.Errorf("link inode %d (quota of directory %d) into directory %d (quota of directory %d): %w",
			ino, a.Quota, parent, p.Quota, base.ErrCrossDevice)
	}
	if err := o.vset(dentryKey(parent, name), encodeDentry(ino, a.Type)); err != nil {
		return err
	}
	a.Nlink++
	a.Ctime = o.now
	o.put(ino, a)
	o.touchDir(parent, p)
	*out = *a
	return nil
}

// freeName checks that a new entry name may be added to directory parent
// (write and search permission, name not taken) and returns the parent's
// attributes.
func (o *op) freeName(c *Caller, parent base.Ino, name, verb string) (*base.Attr, error) {
	p, err := o.dirAttr(parent)
	if err != nil {
		return nil, err
	}
	if isTrashDir(p) || trashReserved(parent, name) {
		return nil, errInTrash(verb)
	}
	if err := access(c, p, MayWrite|MayExec); err != nil {
		return nil, fmt.Errorf("%s %q in %d: %w", verb, name, parent, err)
	}
	if _, _, ok, err := getDentry(o, parent, name); err != nil {
		return nil, err
	} else if ok {
		return nil, fmt.Errorf("%q in %d: %w", name, parent, base.ErrExist)
	}
	return p, nil
}

// childEntry resolves name in directory parent for a removal: the parent's
// attributes and the entry, or ErrNotFound (after the search permission
// check, so a caller who may not search the directory learns nothing).
func (o *op) childEntry(c *Caller, parent base.Ino, name string) (*base.Attr, base.Ino, base.FileType, error) {
	p, err := o.dirAttr(parent)
	if err != nil {
		return nil, 0, 0, err
	}
	ino, typ, ok, err := getDentry(o, parent, name)
	if err != nil {
		return nil, 0, 0, err
	}
	if !ok {
		if err := access(c, p, MayExec); err != nil {
			return nil, 0, 0, err
		}
		// Another client leasing parent may have made the name and not
		// committed it yet (write-back): its lease is recalled first.
		if err := o.checkLease(parent); err != nil {
			return nil, 0, 0, err
		}
		return nil, 0, 0, fmt.Errorf("%q in %d: %w", name, parent, base.ErrNotFound)
	}
	return p, ino, typ, nil
}

// Unlink removes the entry name (not a directory) from parent. When the
// last link goes, the inode is destroyed, or kept as an orphan while it is
// open (OpenFile) in this client or held by any session.
func (m *Meta) Unlink(ctx context.Context, c *Caller, parent base.Ino, name string) error {
	_, err := m.UnlinkChange(ctx, c, parent, name)
	return err
}

// DirChange is what a change of a directory's entries did, as seen inside
// its transaction: the directory's attributes before and after, and the
// inode the name named. NFS replies carry them (weak cache consistency)
// without reading them again.
type DirChange struct {
	Before, After base.Attr
	Ino           base.Ino
	// Gone is set when the change destroyed Ino (its last link went and
	// no one held it open). Inode numbers are never reused.
	Gone bool
}

// UnlinkChange is Unlink, and tells what it did to parent.
func (m *Meta) UnlinkChange(ctx context.Context, c *Caller, parent base.Ino, name string) (DirChange, error) {
	if name == "." || name == ".." {
		return DirChange{}, fmt.Errorf("unlink %q: %w", name, base.ErrIsDir)
	}
	if err := validName(name); err != nil {
		return DirChange{}, err
	}
	ctx = changingEntries(ctx, parent)
	var ch DirChange
	// build returns the mutation, which sets *out to what it did.
	build := func(out *DirChange) func(o *op) error {
		return func(o *op) error {
			ch := out
			o.quotaPlains = m.quotaHints.shardKeys(parent, o.shard)
			if err := o.prefetchUnlink(parent, name); err != nil {
				return err
			}
			p, ino, typ, err := o.childEntry(c, parent, name)
			if err != nil {
				return err
			}
			ch.Before, ch.Ino = *p, ino
			if err := o.prefetchInode(ino); err != nil {
				return err
			}
			if typ == base.TypeDir {
				return fmt.Errorf("unlink %q: %w", name, base.ErrIsDir)
			}
			a, err := o.attr(ino)
			if err != nil {
				return err
			}
			if isTrashDir(p) {
				return errInTrash("unlink")
			}
			if err := o.wbMayDelete(c, p, ino, a); err != nil {
				return fmt.Errorf("unlink %q in %d: %w", name, parent, err)
			}
			if err := o.vdel(dentryKey(parent, name)); err != nil {
				return err
			}
			o.touchDir(parent, p)
			moved, err := o.toTrash(parent, name, ino, a)
			if err != nil {
				return err
			}
			ch.After, ch.Gone = *p, false
			if moved {
				return nil
			}
			if err := o.dropLink(ino, a); err != nil {
				return err
			}
			ch.Gone = o.attrs[ino] == nil // destroy forgets it
			return nil
		}
	}
	if m.wbRemovesIn(parent) {
		if done, err := m.writeBack(ctx, []base.Ino{parent}, nil, build(&ch), build(new(DirChange)), nil); done {
			if err != nil {
				return DirChange{}, err
			}
			return ch, nil
		}
	}
	// Marked as freeing space: allowed on a nearly full metadata disk.
	err := m.trashRetry(ctx, func() error {
		return m.mutateGrouped(kv.Freeing(ctx), build(&ch))
	})
	if err != nil {
		return DirChange{}, err
	}
	return ch, nil
}

// Rmdir removes the empty directory name from parent. Errors: ErrNotEmpty
// (entries, or name ".."), ErrInvalid ("."), ErrNotDir, ErrNotFound,
// ErrAccess, ErrPermission (sticky parent).
func (m *Meta) Rmdir(ctx context.Context, c *Caller, parent base.Ino, name string) error {
	switch name {
	case ".":
		return fmt.Errorf("rmdir %q: %w", name, base.ErrInvalid)
	case "..":
		return fmt.Errorf("rmdir %q: %w", name, base.ErrNotEmpty)
	}
	if err := validName(name); err != nil {
		return err
	}
	ctx = changingEntries(ctx, parent)
	return m.trashRetry(ctx, func() error { return m.rmdir(ctx, c, parent, name) })
}

func (m *Meta) rmdir(ctx context.Context, c *Caller, parent base.Ino, name string) error {
	fn := func(o *op) error {
		if err := o.prefetchOp(attrKey(parent), dentryKey(parent, name)); err != nil {
			return err
		}
		p, ino, typ, err := o.childEntry(c, parent, name)
		if err != nil {
			return err
		}
		if err := o.prefetchInode(ino); err != nil {
			return err
		}
		if typ != base.TypeDir {
			return fmt.Errorf("rmdir %q: %w", name, base.ErrNotDir)
		}
		a, err := o.attr(ino)
		if err != nil {
			return err
		}
		if isTrashDir(p) || isTrashDir(a) {
			return errInTrash("rmdir")
		}
		if err := o.wbNeedsOwnLease(ino); err != nil {
			return err
		}
		if err := o.wbMayDelete(c, p, ino, a); err != nil {
			return fmt.Errorf("rmdir %q in %d: %w", name, parent, err)
		}
		if full, err := hasEntries(o, ino); err != nil {
			return err
		} else if full {
			return fmt.Errorf("rmdir %q: %w", name, base.ErrNotEmpty)
		}
		if err := o.vdel(dentryKey(parent, name)); err != nil {
			return err
		}
		p.Nlink--
		o.touchDir(parent, p)
		if moved, err := o.toTrash(parent, name, ino, a); err != nil || moved {
			return err
		}
		if m.wb != nil && m.leases.holds(ino) {
			// Its lease goes with it, in the same commit.
			o.Delete(leaseKey(ino))
		}
		return o.destroy(ino, a)
	}
	if m.wbRemovesIn(parent) {
		if done, err := m.writeBack(ctx, []base.Ino{parent}, nil, fn, fn, nil); done {
			return err
		}
	}
	return m.mutate(kv.Freeing(ctx), fn) // as in UnlinkChange
}

// Readdir lists directory dir: entries with name > after in name order, at
// most limit (0 = all). "." and ".." are not included. With plus, each
// Entry.Attr is filled. Needs read permission on dir.
func (m *Meta) Readdir(ctx context.Context, c *Caller, dir base.Ino, after string, limit int, plus bool) ([]base.Entry, error) {
	var out []base.Entry
	seq := m.wbSeq() // before any read of the store (wbAttr)
	// A directory this client's write-back log changes: over the log.
	if done, err := m.wbView(ctx, []base.Ino{dir}, func(r kv.Reader) (err error) {
		out, err = readdirAt(r, c, dir, after, limit, plus, latestEpoch)
		return err
	}); done {
		return out, err
	}
	for attempt := 0; ; attempt++ {
		var lease []byte
		err := m.view(ctx, func(r kv.Reader) (err error) {
			if m.lc == nil {
				// Shared: another client that writes back its changes
				// of dir commits them first (writeback.go).
				if lease, err = r.Get(leaseKey(dir)); err != nil {
					return err
				}
			}
			out, err = readdirAt(r, c, dir, after, limit, plus, latestEpoch)
			return err
		})
		if err != nil {
			return nil, err
		}
		again, err := m.recallForRead(ctx, dir, lease, attempt)
		if err != nil {
			return nil, err
		}
		if !again {
			if plus {
				for i := range out {
					if err := m.wbAttr(ctx, out[i].Ino, out[i].Attr, seq); err != nil {
						return nil, err
					}
				}
			}
			return out, nil
		}
	}
}

// readdirAt lists dir as of epoch for a reader of the file system: the
// root's trash (TrashName) is left out; it is reached by its name.
func readdirAt(r kv.Reader, c *Caller, dir base.Ino, after string, limit int, plus bool, epoch uint64) ([]base.Entry, error) {
	_, out, err := readdirDir(r, c, dir, after, limit, plus, epoch, dir == base.RootIno)
	return out, err
}

// readdirDir is readdirAt, and also returns the directory's attribute, read
// on the way; hideTrash leaves out the entry TrashName.
func readdirDir(r kv.Reader, c *Caller, dir base.Ino, after string, limit int, plus bool, epoch uint64, hideTrash bool) (base.Attr, []base.Entry, error) {
	var out []base.Entry
	d, err := getAttrAt(r, dir, epoch)
	if err != nil {
		return base.Attr{}, nil, err
	}
	if d.Type != base.TypeDir {
		return base.Attr{}, nil, fmt.Errorf("readdir %d: %w", dir, base.ErrNotDir)
	}
	if err := access(c, &d, MayRead); err != nil {
		return base.Attr{}, nil, fmt.Errorf("readdir %d: %w", dir, err)
	}
	prefix := dentryPrefix(dir)
	var start []byte
	if after != "" {
		start = dentryAfter(dir, after)
	}
	var ferr error
	err = vscan(r, prefix, start, epoch, func(k, v []byte) bool {
		ino, typ, err := decodeDentry(v)
		if err != nil {
			ferr = err
			return false
		}
		_, name, err := decodeDentryKey(k)
		if err != nil {
			ferr = err
			return false
		}
		if hideTrash && string(name) == TrashName {
			return true
		}
		out = append(out, base.Entry{Name: string(name), Ino: ino, Type: typ})
		return limit <= 0 || len(out) < limit
	})
	if err != nil {
		return base.Attr{}, nil, err
	}
	if ferr != nil {
		return base.Attr{}, nil, fmt.Errorf("readdir %d: %w", dir, ferr)
	}
	if plus {
		if err := entryAttrs(r, out, epoch); err != nil {
			return base.Attr{}, nil, fmt.Errorf("readdir %d: %w", dir, err)
		}
	}
	return d, out, nil
}

// attrBatch is how many attributes entryAttrs reads with one kv.Firsts
// (one statement on a server).
const attrBatch = 256

// attrVersionLen is the length of the key of a version of an attribute.
const attrVersionLen = 1 + 8 + epochLen

// entryAttrs fills the Attr of each entry as of epoch. The newest
// attributes are read attrBatch at a time with kv.Firsts: on a server one
// round trip per batch instead of one per entry.
func entryAttrs(r kv.Reader, ents []base.Entry, epoch uint64) error {
	for start := 0; start < len(ents); start += attrBatch {
		batch := ents[start:min(start+attrBatch, len(ents))]
		var ps []kv.Pair
		if epoch == latestEpoch {
			ranges := make([]kv.Range, len(batch))
			for i, e := range batch {
				ranges[i] = newestRange(attrKey(e.Ino))
			}
			var err error
			if ps, err = kv.Firsts(r, ranges); err != nil {
				return err
			}
		}
		for i := range batch {
			var a base.Attr
			var err error
			if ps != nil && len(ps[i].Key) == attrVersionLen {
				v, ok, derr := decodeVersion(attrKey(batch[i].Ino), ps[i].Value)
				a, err = inodeAttr(batch[i].Ino, v, ok, derr)
			} else {
				a, err = getAttrAt(r, batch[i].Ino, epoch)
			}
			if err != nil {
				return fmt.Errorf("entry %q: %w", batch[i].Name, err)
			}
			batch[i].Attr = &a
		}
	}
	return nil
}

// Readlink returns the target of symlink ino (ErrInvalid if not a symlink).
func (m *Meta) Readlink(ctx context.Context, ino base.Ino) (string, error) {
	var target string
	read := func(r kv.Reader) (err error) {
		target, err = readlinkAt(r, ino, latestEpoch)
		return err
	}
	if done, err := m.wbView(ctx, []base.Ino{ino}, read); done {
		return target, err
	}
	err := m.view(ctx, read)
	return target, err
}

func readlinkAt(r kv.Reader, ino base.Ino, epoch uint64) (string, error) {
	a, err := getAttrAt(r, ino, epoch)
	if err != nil {
		return "", err
	}
	if a.Type != base.TypeSymlink {
		return "", fmt.Errorf("readlink %d: %w", ino, base.ErrInvalid)
	}
	v, ok, err := vget(r, symlinkKey(ino), epoch)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", fmt.Errorf("symlink %d has no target: %w", ino, base.ErrIO)
	}
	return string(v), nil
}
