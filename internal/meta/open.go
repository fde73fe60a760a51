package meta

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// Open files and their holds.
//
// A client counts its open handles per inode in memory (OpenFile,
// CloseFile). When it has a session, the first open of an inode also
// writes a persistent hold (ino, session) so other clients do not destroy
// the inode when they unlink its last name, and so that holds of a crashed
// session can be found and released. An inode whose last link goes while
// it is held becomes an orphan (nlink 0, orphan record) and is destroyed at
// the last close, at CloseSession, or when a later client finds its
// session gone. The last close of a file keeps its hold for a moment
// (Options.HoldReleaseDelay) so that an open right after costs nothing.

func (m *Meta) openCount(ino base.Ino) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.opened[ino]
}

// lockIno serializes opens and closes of ino in this client against each
// other and against session changes.
func (m *Meta) lockIno(ino base.Ino) func() {
	m.holdMu.RLock()
	mu := &m.inoMu[uint64(ino)%uint64(len(m.inoMu))]
	mu.Lock()
	return func() {
		mu.Unlock()
		m.holdMu.RUnlock()
	}
}

// OpenFile records an open handle of ino in this client and returns its
// attributes, read in the same transaction; for inodes other than regular
// files it only returns the attributes (no CloseFile follows). The first open of a regular
// file writes a persistent hold if the client has a session, so other
// clients' unlinks do not destroy it while it is open. ErrNotFound (and
// nothing recorded) if the inode is gone.
func (m *Meta) OpenFile(ctx context.Context, ino base.Ino) (base.Attr, error) {
	a, _, _, err := m.OpenFileChunk(ctx, ino)
	return a, err
}

// OpenFileChunk is OpenFile that also returns, where it read them in the
// same round trip (stores without the latest-version cache: a database
// server), the slices of the file's first chunk: ok reports whether it
// did. A small file's first read then needs no read of its own.
func (m *Meta) OpenFileChunk(ctx context.Context, ino base.Ino) (a base.Attr, first []base.Slice, ok bool, err error) {
	unlock := m.lockIno(ino)
	defer unlock()
	m.mu.Lock()
	n := m.opened[ino]
	m.opened[ino] = n + 1
	sid := m.sid
	kept := n == 0 && m.releases[ino]
	if kept {
		// Closed a moment ago: its hold is still there; keep it.
		delete(m.releases, ino)
		n = -1
	}
	m.mu.Unlock()
	var gen uint64
	inTxn := n == 0 && sid != 0 && !m.opts.ReadOnly // else no hold to record
	if m.listings != nil {
		// An open reads the file's attributes anew (close-to-open): not
		// those an earlier open kept for its getattr.
		gen = m.listings.forgetOpened(ino)
	}
	// Counted first, then ordered after the log: a change over the log
	// that read the count as zero (a rename over the file, which then
	// destroyed it) is committed before this open reads the store, and
	// one that runs later sees the count (wbRead; openHeld, whose open
	// over the log sees such a change without a commit).
	if !inTxn || m.holdToucher != nil {
		err = m.wbRead(ctx, ino)
	}
	switch {
	case err != nil:
	case m.holdToucher != nil:
		// The count above is the hold; the touch makes an unlink that
		// read it as zero and has not committed run again, and orders
		// this read after one that has (touchHold).
		if n == 0 {
			err = m.touchHold(ctx, ino)
		}
		if err == nil {
			a, err = m.GetAttr(ctx, ino)
		}
	case !inTxn:
		a, err = m.GetAttr(ctx, ino)
	default:
		a, first, ok, err = m.openHeld(ctx, ino, sid)
	}
	if err != nil || a.Type != base.TypeFile {
		m.mu.Lock()
		if m.opened[ino] <= 1 {
			delete(m.opened, ino)
		} else {
			m.opened[ino]--
		}
		if kept {
			m.releases[ino] = true
			if !m.releasing {
				m.releasing = true
				go m.releaseLoop()
			}
		}
		m.mu.Unlock()
		if err != nil {
			return base.Attr{}, nil, false, err
		}
	}
	if m.listings != nil && inTxn && a.Type == base.TypeFile {
		m.listings.openedAt(ino, a, gen)
	}
	return a, first, ok, nil
}

// openHeld is the first open of ino by session sid, which holds it
// (openTxn). A regular file this client made in a directory it leases,
// and which is still fresh there, is opened over the write-back log: no
// other client can reach it without recalling that lease, which commits
// the log first, so its hold may be committed later, like its close's
// release (CloseFile); its attributes and first chunk are what the log
// knows of it. git reads back every object it wrote.
func (m *Meta) openHeld(ctx context.Context, ino base.Ino, sid uint64) (a base.Attr, first []base.Slice, ok bool, err error) {
	if dir, fresh := m.freshDir(ino); fresh {
		open := func(a *base.Attr, first *[]base.Slice, ok *bool, live bool) func(o *op) error {
			return func(o *op) error {
				if live && m.wb.isDeciding(ino) {
					// A transaction outside the log may be destroying
					// it: the store decides (decidingHeld).
					return errOpenNotFresh
				}
				x, err := o.attr(ino)
				if !live {
					return replayOpen(o, ino, sid, x, err)
				}
				if err != nil {
					return err
				}
				if x.Type != base.TypeFile || x.Nlink == 0 {
					return errOpenNotFresh // the usual path decides
				}
				*a, *first, *ok = *x, nil, false
				if x.Length > 0 {
					if *first, err = readChunkAt(o.wtx, ino, 0, latestEpoch); err != nil {
						return err
					}
					*ok = true
				}
				o.Set(holdKey(ino, sid), nil)
				return nil
			}
		}
		var ra base.Attr
		var rf []base.Slice
		var rok bool
		if done, err := m.writeBack(ctx, []base.Ino{dir}, nil, open(&a, &first, &ok, true), open(&ra, &rf, &rok, false), nil); done {
			return a, first, ok, err
		}
	}
	// The store's view, after the log's (OpenFileChunk counted this open).
	if err := m.wbRead(ctx, ino); err != nil {
		return base.Attr{}, nil, false, err
	}
	if m.accel.BlindOpens {
		return m.openBlind(ctx, ino, sid)
	}
	return m.openTxn(ctx, ino, sid)
}

// replayOpen is an open over the log run again after its batch's guard
// failed (x, err: what it reads of ino now). Its attributes were given to
// the caller; what is left is the hold. A file gone meanwhile was
// destroyed by a change that found it not open in this client (op.held):
// this open's handle was closed by then, and there is nothing to hold.
// (The file may be counted open again now: a later open, which waits for
// the replays and then finds it gone.) An unlinked file still open is
// held as openTxn holds it.
func replayOpen(o *op, ino base.Ino, sid uint64, x *base.Attr, err error) error {
	switch {
	case errors.Is(err, base.ErrNotFound):
		return nil
	case err != nil:
		return err
	case x.Type != base.TypeFile:
		return nil
	}
	o.Set(holdKey(ino, sid), nil)
	if x.Nlink == 0 {
		o.Set(orphanKey(ino), nil) // conflicts with a concurrent destroy
	}
	return nil
}

// errOpenNotFresh: an open over the write-back log found no linked
// regular file; the usual path runs.
var errOpenNotFresh = errors.New("meta: open needs the store")

// openTxn is the transaction of a first open by session sid: it reads
// the attributes of ino (and, without the latest-version cache, the
// slices of its first chunk: ok) and, for a regular file, writes the hold.
func (m *Meta) openTxn(ctx context.Context, ino base.Ino, sid uint64) (a base.Attr, first []base.Slice, ok bool, err error) {
	err = m.rawUpdate(ctx, func(t *wtx) error {
		first, ok = nil, false
		withChunk := m.lc == nil
		if withChunk {
			if err := t.prefetch([][]byte{attrKey(ino), chunkKey(ino, 0)}, nil); err != nil {
				return err
			}
		}
		var err error
		if a, err = getAttr(t, ino); err != nil {
			return err
		}
		if a.Type == base.TypeFile {
			if m.profile.SnapshotIsolation {
				// Conflict with a concurrent destroy (touchAttrVersions).
				if err := t.rewriteVersions(attrKey(ino)); err != nil {
					return err
				}
			}
			if withChunk && a.Length > 0 {
				if first, err = readChunkAt(t, ino, 0, latestEpoch); err != nil {
					return err
				}
				ok = true
			}
			t.Set(holdKey(ino, sid), nil)
			if a.Nlink == 0 {
				// An unlinked file still open elsewhere: a concurrent
				// destroy deletes this record, so the two conflict.
				t.Set(orphanKey(ino), nil)
			}
		}
		return nil
	})
	return a, first, ok, err
}

// openBlind is openTxn for a store without the latest-version cache (a
// database server), in one round trip instead of two: kv.FirstsAndWrite
// reads the attributes and the first chunk and writes the hold at once,
// the write not waiting for the read. Almost every open is of a linked
// regular file, for which that is the whole transaction. For the rest the
// hold was written blind: an unlinked file runs openTxn, whose orphan
// record makes it conflict with a concurrent destroy, and the hold is
// taken back where the open finds no regular file or fails.
func (m *Meta) openBlind(ctx context.Context, ino base.Ino, sid uint64) (a base.Attr, first []base.Slice, ok bool, err error) {
	ak, ck, hold := attrKey(ino), chunkKey(ino, 0), holdKey(ino, sid)
	// The touch of the attributes makes this conflict with a concurrent
	// destroy of ino (touchAttrVersions).
	ps, err := kv.FirstsAndWrite(ctx, m.store, []kv.Range{newestRange(ak), newestRange(ck)},
		[]kv.Write{{Key: hold, Value: []byte{}}, {Key: ak, Touch: true}})
	if err != nil {
		return base.Attr{}, nil, false, err
	}
	v, found, err := newestOf(ak, ps[0])
	a, err = inodeAttr(ino, v, found, err)
	if err == nil && a.Type == base.TypeFile && a.Nlink > 0 {
		if a.Length == 0 {
			return a, nil, false, nil
		}
		v, found, err = newestOf(ck, ps[1])
		if err == nil && found {
			if first, err = decodeSlices(v); err != nil {
				err = fmt.Errorf("chunk 0 of inode %d: %w", ino, err)
			}
		}
		if err == nil {
			return a, first, true, nil // !found: a hole
		}
	} else if err == nil && a.Type == base.TypeFile {
		a, first, ok, err = m.openTxn(ctx, ino, sid)
		if err == nil && a.Type == base.TypeFile {
			return a, first, ok, nil
		}
	}
	if derr := m.store.Update(ctx, func(tx kv.Txn) error {
		tx.Delete(hold)
		return nil
	}); derr != nil && err == nil {
		err = fmt.Errorf("inode %d: taking back the hold of an open that failed or found no regular file: %w", ino, derr)
	}
	return a, nil, false, err
}

// CloseFile releases one handle of ino. At the last handle the hold is
// dropped and, if the inode was unlinked meanwhile and nobody else holds
// it, it is destroyed. ErrBadFD if ino is not open in this client.
func (m *Meta) CloseFile(ctx context.Context, ino base.Ino) error {
	// It only drops records: allowed on a nearly full metadata disk.
	ctx = kv.Freeing(ctx)
	unlock := m.lockIno(ino)
	defer unlock()
	m.mu.Lock()
	n := m.opened[ino]
	if n == 0 {
		m.mu.Unlock()
		return fmt.Errorf("close of inode %d that is not open: %w", ino, base.ErrBadFD)
	}
	if n == 1 {
		delete(m.opened, ino)
	} else {
		m.opened[ino] = n - 1
	}
	sid := m.sid
	// A fresh file's hold may be in the write-back log, not in the store
	// yet: its release is not delayed, since an open that kept it would
	// rely on a hold a transaction outside the log does not see. (Fresh
	// even while a transaction outside the log decides whether it is
	// held: freshDir says no then, but the hold may be in the log.)
	fresh := false
	if m.wb != nil {
		_, fresh = m.leases.freshIn(ino)
	}
	lazy := n == 1 && sid != 0 && m.opts.HoldReleaseDelay > 0 && !m.opts.ReadOnly && m.holdToucher == nil && !fresh
	if lazy {
		m.releases[ino] = true
		if !m.releasing {
			m.releasing = true
			go m.releaseLoop()
		}
	}
	m.mu.Unlock()
	if n > 1 || m.opts.ReadOnly || lazy {
		return nil
	}
	if m.holdToucher != nil {
		return m.releaseMemoryHold(ctx, ino)
	}
	release := func(o *op) error {
		if sid != 0 {
			o.Delete(holdKey(ino, sid))
		}
		return o.destroyIfOrphan(ino)
	}
	// A fresh file's hold goes in the write-back log (writeback.go).
	if dir, ok := m.freshDir(ino); ok {
		if done, err := m.writeBack(ctx, []base.Ino{dir}, nil, release, release, nil); done {
			return err
		}
	}
	return m.mutate(ctx, release)
}

// touchHold orders a change of ino's open count against transactions
// (kv.Toucher).
func (m *Meta) touchHold(ctx context.Context, ino base.Ino) error {
	return m.holdToucher.Touch(ctx, [][]byte{holdKey(ino, 0)})
}

// releaseMemoryHold ends the last open of ino with holds in memory: it
// destroys the inode if it was unlinked meanwhile.
func (m *Meta) releaseMemoryHold(ctx context.Context, ino base.Ino) error {
	if err := m.touchHold(ctx, ino); err != nil {
		return err
	}
	a, err := m.GetAttr(ctx, ino)
	if errors.Is(err, base.ErrNotFound) || err == nil && a.Nlink > 0 {
		return nil
	}
	if err != nil {
		return err
	}
	return m.mutate(ctx, func(o *op) error { return o.destroyIfOrphan(ino) })
}

func (o *op) destroyIfOrphan(ino base.Ino) error {
	a, err := o.attr(ino)
	if err != nil {
		return nil // already gone
	}
	if a.Nlink > 0 {
		return nil
	}
	if held, err := o.held(ino); err != nil || held {
		return err
	}
	return o.destroy(ino, a)
}

// destroyUnheldOrphans destroys the unlinked inodes that no hold record
// keeps: with holds in memory, those a previous process had open when it
// ended. Only for a store no other client uses.
func (m *Meta) destroyUnheldOrphans(ctx context.Context) error {
	return m.mutateRaw(ctx, func(o *op) error {
		var inos []base.Ino
		err := o.Scan(prefixOnly(pOrphan), kv.PrefixEnd(prefixOnly(pOrphan)), false, func(k, _ []byte) bool {
			if ino, err := decodeOrphanKey(k); err == nil {
				inos = append(inos, ino)
			}
			return true
		})
		if err != nil {
			return err
		}
		if len(inos) > 0 {
			m.log.Info("unlinked files left open by earlier mounts: destroying those no hold record keeps", "files", len(inos))
		}
		for _, ino := range inos {
			if err := o.destroyIfOrphan(ino); err != nil {
				return err
			}
		}
		return nil
	})
}

// releaseLoop deletes, in batches, the holds of files this client closed
// (Options.HoldReleaseDelay), and destroys those of them that were
// unlinked meanwhile. A file opened again before its hold goes keeps it.
func (m *Meta) releaseLoop() {
	for {
		time.Sleep(m.opts.HoldReleaseDelay)
		if err := m.FlushReleases(context.Background()); err != nil {
			m.log.Warn("releasing open-file holds", "err", err)
		}
		m.mu.Lock()
		if len(m.releases) == 0 || m.closed {
			m.releasing = false
			m.mu.Unlock()
			return
		}
		m.mu.Unlock()
	}
}

// FlushReleases deletes now the holds of closed files that
// HoldReleaseDelay keeps for a moment.
func (m *Meta) FlushReleases(ctx context.Context) error {
	m.holdMu.RLock()
	defer m.holdMu.RUnlock()
	m.mu.Lock()
	stripes := map[int]bool{}
	for ino := range m.releases {
		stripes[int(uint64(ino)%uint64(len(m.inoMu)))] = true
	}
	m.mu.Unlock()
	order := make([]int, 0, len(stripes))
	for i := range m.inoMu {
		if stripes[i] {
			order = append(order, i)
		}
	}
	for _, i := range order {
		m.inoMu[i].Lock()
		defer m.inoMu[i].Unlock()
	}
	m.mu.Lock()
	var inos []base.Ino
	for ino := range m.releases {
		if stripes[int(uint64(ino)%uint64(len(m.inoMu)))] {
			inos = append(inos, ino)
		}
	}
	sid := m.sid
	m.mu.Unlock()
	if len(inos) == 0 {
		return nil
	}
	err := m.mutateRaw(ctx, func(o *op) error {
		attrs := make([][]byte, len(inos))
		for i, ino := range inos {
			attrs[i] = attrKey(ino)
		}
		if err := o.prefetchOp(attrs...); err != nil {
			return err
		}
		for _, ino := range inos {
			if sid != 0 {
				o.Delete(holdKey(ino, sid))
			}
			if err := o.destroyIfOrphan(ino); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	m.mu.Lock()
	for _, ino := range inos {
		delete(m.releases, ino)
	}
	m.mu.Unlock()
	return nil
}
