package meta

// Inode-level helpers shared by the operations: an attribute cache per
// transaction, dentry access, and the life cycle of an inode (link
// dropping, orphans, destruction).

import (
	"context"
	"fmt"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// op is one file-system mutation: a wtx plus a cache of the attributes it
// read, written back by flush.
type op struct {
	*wtx
	m     *Meta
	now   int64
	attrs map[base.Ino]*base.Attr
	dirty []base.Ino
	// replaying: the change was acknowledged by the write-back log and
	// runs again (wbReplay); a volume limit does not refuse it (grant.go).
	replaying bool
}

func (m *Meta) mutate(ctx context.Context, fn func(o *op) error) error {
	return m.update(ctx, func(t *wtx) error {
		o := m.newOp(t)
		if err := fn(o); err != nil {
			return err
		}
		return o.flush()
	})
}

// newOp returns the state of one attempt of a mutation over t.
func (m *Meta) newOp(t *wtx) *op {
	return &op{wtx: t, m: m, now: m.now(), attrs: make(map[base.Ino]*base.Attr)}
}

// attr returns the cached attribute of ino; base.ErrNotFound if none.
func (o *op) attr(ino base.Ino) (*base.Attr, error) {
	if a, ok := o.attrs[ino]; ok {
		if a == nil {
			return nil, fmt.Errorf("inode %d: %w", ino, base.ErrNotFound)
		}
		return a, nil
	}
	a, err := getAttr(o, ino)
	if err != nil {
		return nil, err
	}
	o.attrs[ino] = &a
	return &a, nil
}

// dirAttr returns the attribute of a live directory.
func (o *op) dirAttr(ino base.Ino) (*base.Attr, error) {
	a, err := o.attr(ino)
	if err != nil {
		return nil, err
	}
	if a.Type != base.TypeDir {
		return nil, fmt.Errorf("inode %d: %w", ino, base.ErrNotDir)
	}
	if a.Nlink == 0 {
		return nil, fmt.Errorf("directory %d was removed: %w", ino, base.ErrNotFound)
	}
	return a, nil
}

// put marks ino's cached attribute to be written at flush.
func (o *op) put(ino base.Ino, a *base.Attr) {
	o.attrs[ino] = a
	o.dirty = append(o.dirty, ino)
}

func (o *op) flush() error {
	done := make(map[base.Ino]bool, len(o.dirty))
	for _, ino := range o.dirty {
		if done[ino] {
			continue
		}
		done[ino] = true
		a := o.attrs[ino]
		if a == nil { // destroyed
			continue
		}
		if a.Type == base.TypeDir {
			if err := o.dirWriting(ino, a); err != nil {
				return err
			}
		}
		if err := o.vset(attrKey(ino), encodeAttr(a)); err != nil {
			return err
		}
	}
	return nil
}

// touchDir updates mtime and ctime of a directory whose entries changed.
func (o *op) touchDir(ino base.Ino, a *base.Attr) {
	a.Mtime, a.Ctime = o.now, o.now
	o.put(ino, a)
}

func getAttr(r kv.Reader, ino base.Ino) (base.Attr, error) {
	return getAttrAt(r, ino, latestEpoch)
}

// getAttrAt reads the attribute of ino as of epoch.
func getAttrAt(r kv.Reader, ino base.Ino, epoch uint64) (base.Attr, error) {
	v, ok, err := vget(r, attrKey(ino), epoch)
	return inodeAttr(ino, v, ok, err)
}

// inodeAttr decodes v, the attribute record of ino as read (ok false: it
// has none), or passes err on.
func inodeAttr(ino base.Ino, v []byte, ok bool, err error) (base.Attr, error) {
	if err != nil {
		return base.Attr{}, err
	}
	if !ok {
		return base.Attr{}, fmt.Errorf("inode %d: %w", ino, base.ErrNotFound)
	}
	a, err := decodeAttr(v)
	if err != nil {
		return base.Attr{}, fmt.Errorf("inode %d: %w", ino, err)
	}
	return a, nil
}

// getDentry looks up name in parent; ok is false if there is no entry.
func getDentry(r kv.Reader, parent base.Ino, name string) (base.Ino, base.FileType, bool, error) {
	return getDentryAt(r, parent, name, latestEpoch)
}

// getDentryAt looks up name in parent as of epoch.
func getDentryAt(r kv.Reader, parent base.Ino, name string, epoch uint64) (base.Ino, base.FileType, bool, error) {
	v, ok, err := vget(r, dentryKey(parent, name), epoch)
	if err != nil || !ok {
		return 0, 0, false, err
	}
	ino, typ, err := decodeDentry(v)
	if err != nil {
		return 0, 0, false, fmt.Errorf("entry %q in %d: %w", name, parent, err)
	}
	return ino, typ, true, nil
}

// hasEntries reports whether directory ino has any entry.
func hasEntries(r kv.Reader, ino base.Ino) (bool, error) {
	if c, ok := r.(topCache); ok && c.topsOf().isEmpty(dentryPrefix(ino)) {
		return false, nil
	}
	found := false
	err := vscan(r, dentryPrefix(ino), nil, latestEpoch, func(_, _ []byte) bool {
		found = true
		return false
	})
	return found, err
}

// held reports whether ino is open somewhere: in this client, or by any
// session's persistent hold.
//
// An open by another client that commits its hold after this read is not
// seen; destroy makes the two conflict (touchAttrVersions).
func (o *op) held(ino base.Ino) (bool, error) {
	outside, err := o.decidingHeld(ino)
	if err != nil {
		return false, err
	}
	n := o.m.openCount(ino)
	if outside && o.m.wb.decideHook != nil {
		o.m.wb.decideHook(ino, n)
	}
	if o.m.holdToucher != nil {
		// The count is the hold; an open or close that changes it
		// touches holdKey(ino, 0) (session.go, "Holds in memory"), so
		// the commit must depend on that key. Reading the prefix below
		// covers it.
		if hook := o.m.heldHook; hook != nil {
			hook(ino, n)
		}
		if n > 0 {
			if !o.isEmpty(holdPrefix(ino)) {
				if _, err := o.Txn.Get(holdKey(ino, 0)); err != nil {
					return false, err
				}
			}
			return true, nil
		}
	} else if n > 0 {
		// Open in this client, whose hold (written by the open) is
		// written back for the same reason as below: the last close
		// of this client may be committing its release right now, and
		// must conflict with this transaction.
		sid := o.m.sessionID()
		switch {
		case sid == 0 || o.m.opts.ReadOnly:
		case outside && !o.holdDropped[string(holdKey(ino, sid))]:
			// With write-back the open may have written its hold in
			// the log, committed after this transaction read the
			// store: written here whether seen or not, so that a
			// close that deletes it (its commit after the log's)
			// conflicts with this transaction, which would otherwise
			// leave an orphan nobody holds.
			o.Set(holdKey(ino, sid), nil)
		case !o.isEmpty(holdPrefix(ino)):
			// Only a hold this transaction sees: one this transaction
			// deleted (the session's end) stays deleted.
			k := holdKey(ino, sid)
			if v, err := o.Get(k); err != nil {
				return false, err
			} else if v != nil {
				o.Set(k, nil)
			}
		}
		return true, nil
	}
	if o.isEmpty(holdPrefix(ino)) {
		return false, nil
	}
	var key []byte
	err = o.Scan(holdPrefix(ino), kv.PrefixEnd(holdPrefix(ino)), false, func(k, _ []byte) bool {
		key = append([]byte(nil), k...)
		return false
	})
	if err != nil || key == nil {
		return false, err
	}
	// Kept alive by a hold this transaction only read: writing it back
	// makes a concurrent release of that hold (which then looks for an
	// orphan to destroy) conflict with this transaction, so the two
	// cannot both miss the orphan (kv.Txn).
	o.Set(key, nil)
	return true, nil
}

// addInode is the one place an inode comes to be (create, restore): ino,
// with attributes a, gets the entry name in directory parent (whose
// attributes are p) and is counted (chargeInode).
func (o *op) addInode(ino base.Ino, a *base.Attr, parent base.Ino, p *base.Attr, name string) error {
	if a.Type == base.TypeDir {
		if p.Nlink >= MaxLinks {
			return fmt.Errorf("directory %d: %w", parent, base.ErrTooManyLinks)
		}
		p.Nlink++
	}
	if err := o.chargeInode(ino, a, parent, p); err != nil {
		return err
	}
	if err := o.vset(dentryKey(parent, name), encodeDentry(ino, a.Type)); err != nil {
		return err
	}
	o.touchDir(parent, p)
	o.put(ino, a)
	return nil
}

// dropLink removes one link of a non-directory inode; at zero links the
// inode becomes an orphan if it is open, else it is destroyed.
func (o *op) dropLink(ino base.Ino, a *base.Attr) error {
	if a.Nlink > 0 {
		a.Nlink--
	}
	a.Ctime = o.now
	o.put(ino, a)
	if a.Nlink > 0 {
		return nil
	}
	held, err := o.held(ino)
	if err != nil {
		return err
	}
	if held {
		o.Set(orphanKey(ino), nil)
		return nil
	}
	return o.destroy(ino, a)
}

// destroy deletes every record of an inode and queues its slices for
// deletion.
func (o *op) destroy(ino base.Ino, a *base.Attr) error {
	if a.Type != base.TypeFile {
		// A file's was recorded when its holds were read (held).
		if _, err := o.decidingHeld(ino); err != nil {
			return err
		}
	}
	if a.Type == base.TypeDir {
		if err := o.dirWriting(ino, nil); err != nil {
			return err
		}
	} else if o.m.profile.SnapshotIsolation {
		if err := o.touchAttrVersions(ino); err != nil {
			return err
		}
	}
	if err := o.vdel(attrKey(ino)); err != nil {
		return err
	}
	o.attrs[ino] = nil
	o.Delete(orphanKey(ino))
	o.Delete(lockGuardKey(ino))
	if a.Type == base.TypeSymlink {
		if err := o.vdel(symlinkKey(ino)); err != nil {
			return err
		}
	}
	if err := o.vdelAll(xattrPrefix(ino)); err != nil {
		return err
	}
	if a.Type == base.TypeFile {
		if err := o.dropChunks(ino, 0); err != nil {
			return err
		}
	}
	return o.uncharge(ino, a)
}

// touchAttrVersions makes this transaction, which destroys ino, conflict
// with an open of ino by another client that it did not see (held).
//
// On a store with snapshot isolation (kv.Profile), the open reads the
// attributes and writes its hold in one transaction, the destroy reads
// the holds and deletes the attributes in another: with no key written by
// both, both would commit and the open would hold a destroyed inode. So
// the open writes back every version of the attributes unchanged
// (openBlind, openTxn), and the destroy writes every version that the
// open may have seen: those it deletes or replaces anyway (the newest, and
// older ones no snapshot keeps), and, here, the ones snapshots keep, which
// it would otherwise leave alone. Concurrent opens of one file conflict
// with each other too, and run again, one round trip each.
func (o *op) touchAttrVersions(ino base.Ino) error {
	if err := o.loadEpochs(); err != nil {
		return err
	}
	logical := attrKey(ino)
	top, ok, err := o.newestTop(logical)
	if err != nil || !ok {
		return err
	}
	if top.epoch >= o.epoch {
		// The newest version is the live epoch's, which the destroy
		// deletes; is there an older one (read ahead by prefetchUnlink)?
		if o.epoch == 0 {
			return nil
		}
		if _, older, err := o.newestBelow(logical, o.epoch-1); err != nil || !older {
			return err
		}
	}
	return o.rewriteVersions(logical)
}

// vdelAll deletes every live record under prefix.
func (o *op) vdelAll(prefix []byte) error {
	if o.isEmpty(prefix) {
		return nil
	}
	var keys [][]byte
	if err := vscan(o, prefix, nil, latestEpoch, func(k, _ []byte) bool {
		keys = append(keys, append([]byte(nil), k...))
		return true
	}); err != nil {
		return err
	}
	for _, k := range keys {
		if err := o.vdel(k); err != nil {
			return err
		}
	}
	return nil
}
