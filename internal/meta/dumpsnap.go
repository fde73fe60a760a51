package meta

// Dumps with the volume's snapshots (DumpOptions.Snapshots).
//
// Such a dump carries, for each per-inode record, the physical versions
// that some snapshot or the dump's instant can see (the newest version at
// or below each frozen epoch), tombstones included, under their physical
// keys and with their tagged values; the snapshot records; and the change
// log up to the dump's epoch, which snapshot deletion and diff read. The
// loaded volume's live epoch is the dump's: its live state is what the
// dump saw, and its snapshots are the source's, at their epochs.
//
// Versions that some frozen epoch sees never change while that snapshot
// exists; only deleting a snapshot prunes them. A dump refuses to start
// while a deletion's pruning runs, and fails if a snapshot it dumps is
// deleted before it ends (the dump would hold versions half pruned).

import (
	"context"
	"fmt"
	"slices"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/dumpfile"
	"github.com/cairnfs/cairn/internal/kv"
)

// snapDump is what a dump with snapshots reads beside the records.
type snapDump struct {
	snaps  []Snapshot // the source's snapshots below the dump's epoch
	frozen []uint64   // their epochs, then the dump's
}

// beginSnapDump lists the snapshots below epoch (the dump's own one) and
// refuses while a snapshot deletion is pruning.
func (m *Meta) beginSnapDump(ctx context.Context, epoch uint64) (*snapDump, error) {
	sd := &snapDump{}
	err := m.viewAgain(ctx, func(r kv.Reader) error {
		jobs := 0
		if err := r.Scan(prefixOnly(pSnapJob), kv.PrefixEnd(prefixOnly(pSnapJob)), false, func(_, _ []byte) bool {
			jobs++
			return false
		}); err != nil {
			return err
		}
		if jobs > 0 {
			return fmt.Errorf("a snapshot deletion is still pruning; dump with --snapshots when it is done (gc finishes it): %w", base.ErrBusy)
		}
		all, err := listSnapshots(r)
		sd.snaps = slices.DeleteFunc(all, func(s Snapshot) bool { return s.Epoch >= epoch })
		return err
	})
	for _, s := range sd.snaps {
		sd.frozen = append(sd.frozen, s.Epoch)
	}
	sd.frozen = append(sd.frozen, epoch)
	return sd, err
}

// endSnapDump fails if a snapshot the dump holds was deleted meanwhile.
func (m *Meta) endSnapDump(ctx context.Context, sd *snapDump) error {
	return m.viewAgain(ctx, func(r kv.Reader) error {
		now, err := listSnapshots(r)
		if err != nil {
			return err
		}
		for _, s := range sd.snaps {
			if !slices.ContainsFunc(now, func(n Snapshot) bool { return n.Name == s.Name && n.Epoch == s.Epoch }) {
				return fmt.Errorf("snapshot %q was deleted during the dump; dump again: %w", s.Name, base.ErrStale)
			}
		}
		return nil
	})
}

// retained returns the versions of one logical key (newest first) that a
// frozen epoch sees, in the same order; a tombstone only when a version it
// hides is retained too.
func (sd *snapDump) retained(vs []version) []version {
	return retainedBy(sd.frozen, vs)
}

// retainedBy is retained for the frozen epochs given.
func retainedBy(frozen []uint64, vs []version) []version {
	keep := make([]bool, len(vs))
	for _, f := range frozen {
		for i, v := range vs {
			if v.epoch <= f {
				keep[i] = true
				break
			}
		}
	}
	var out []version
	for i, v := range vs {
		if !keep[i] {
			continue
		}
		if isTombstone(v.value) && !slices.Contains(keep[i+1:], true) {
			continue
		}
		out = append(out, v)
	}
	return out
}

func isTombstone(tagged []byte) bool { return len(tagged) == 1 && tagged[0] == tagTombstone }

// inodeRangeSnap is inodeRange of a dump with snapshots.
func (d *dumper) inodeRangeSnap(ctx context.Context, frames chan<- dumpfile.Sealed, lo, hi uint64) error {
	unnamed := map[base.Ino]bool{} // unlinked at the dump's epoch, still open
	e := d.epoch
	// Change log entries of the tombstones written below: the deletion of
	// the snapshots that see the versions they hide must find them.
	changes := d.sink(ctx, frames, pChange)
	for _, p := range inodeKinds {
		out := d.sink(ctx, frames, p)
		err := d.scanVersions(ctx, p, lo, hi, func(logical []byte, all []version) error {
			vs := d.snaps.retained(all)
			if len(vs) == 0 {
				return nil
			}
			ino, _ := keyIno(logical)
			atE := vs[0] // the newest retained version is the one epoch e sees
			if p == pAttr && !isTombstone(atE.value) {
				a, err := decodeAttr(atE.value[1:])
				if err != nil {
					return fmt.Errorf("inode record %x: %w", logical, err)
				}
				if a.Nlink == 0 {
					unnamed[ino] = true
				} else {
					d.inodes.Add(1)
					d.bytes.Add(uint64(usageBytes(&a)))
					d.progress.Inodes.Add(1)
				}
			}
			if p != pDentry && unnamed[ino] && !isTombstone(atE.value) {
				// What a destroy at epoch e would leave: a tombstone there,
				// the versions the snapshots (not the dump's instant) see
				// below it.
				vs = retainedBy(d.snaps.frozen[:len(d.snaps.frozen)-1], all)
				if len(vs) == 0 {
					return nil // no snapshot sees it: nothing to hide
				}
				if atE.epoch != e {
					if err := changes.add(changeKey(e, logical), nil); err != nil {
						return err
					}
				}
				vs = append([]version{{epoch: e, value: []byte{tagTombstone}}}, vs...)
			}
			var ids []base.Slice
			for _, v := range vs {
				if p == pChunk && !isTombstone(v.value) {
					ss, err := decodeSlices(v.value[1:])
					if err != nil {
						return fmt.Errorf("chunk record %x: %w", logical, err)
					}
					ids = append(ids, ss...)
				}
				if err := out.add(versionKey(logical, v.epoch), v.value); err != nil {
					return err
				}
			}
			d.owners.addRecord(ids)
			return nil
		})
		if err != nil {
			return err
		}
		if err := out.flush(); err != nil {
			return err
		}
	}
	return changes.flush()
}

// scanVersions calls fn with every version at or below the dump's epoch
// of each logical key of kind p whose inode is in [lo, hi), newest first,
// reading dumpPage logical keys per view. fn runs outside the view.
func (d *dumper) scanVersions(ctx context.Context, p byte, lo, hi uint64, fn func(logical []byte, vs []version) error) error {
	start := inodeFrom(p, lo)
	end := kv.PrefixEnd(prefixOnly(p))
	if hi != ^uint64(0) {
		end = inodeFrom(p, hi)
	}
	type group struct {
		logical []byte
		vs      []version
	}
	for {
		var page []group
		bytes, full := 0, false
		err := d.m.viewAgain(ctx, func(r kv.Reader) error {
			page, bytes, full = page[:0], 0, false
			var ferr error
			err := r.Scan(start, end, false, func(k, v []byte) bool {
				logical, e, err := splitVersion(k)
				if err != nil {
					ferr = err
					return false
				}
				if n := len(page); n == 0 || !slices.Equal(page[n-1].logical, logical) {
					if n >= dumpPage || bytes >= dumpPageBytes {
						full = true // the page ends between two logical keys
						return false
					}
					page = append(page, group{logical: slices.Clone(logical)})
				}
				if e <= d.epoch {
					g := &page[len(page)-1]
					g.vs = append(g.vs, version{e, slices.Clone(v)})
					bytes += len(k) + len(v)
				}
				return true
			})
			if err != nil {
				return err
			}
			return ferr
		})
		if err != nil {
			return err
		}
		for _, g := range page {
			if err := fn(g.logical, g.vs); err != nil {
				return err
			}
		}
		if !full {
			return nil
		}
		start = kv.PrefixEnd(page[len(page)-1].logical)
		if err := context.Cause(ctx); err != nil {
			return err
		}
	}
}

// snapRecords writes the snapshot records and the change log up to the
// dump's epoch.
func (d *dumper) snapRecords(ctx context.Context, frames chan<- dumpfile.Sealed) error {
	t := d.sink(ctx, frames, pSnapshot)
	for _, s := range d.snaps.snaps {
		var v []byte
		err := d.m.viewAgain(ctx, func(r kv.Reader) (err error) {
			v, err = r.Get(snapshotKey(s.Name))
			if err == nil && v == nil {
				err = fmt.Errorf("snapshot %q was deleted during the dump; dump again: %w", s.Name, base.ErrStale)
			}
			return err
		})
		if err == nil {
			err = t.add(snapshotKey(s.Name), v)
		}
		if err != nil {
			return err
		}
	}
	if err := t.flush(); err != nil {
		return err
	}
	changes := d.sink(ctx, frames, pChange)
	if err := d.scanRaw(ctx, prefixOnly(pChange), changePrefix(d.epoch+1), changes.add); err != nil {
		return err
	}
	return changes.flush()
}
