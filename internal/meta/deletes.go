package meta

// The delete queue: slices no record references any more wait here
// (pending records, keys.go) until chunk.Store.DeleteQueued removes their
// objects from the object store and finishes them here: called by every
// mount's background loop (vfs) and by cairn gc (internal/gc).

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// TakeDeletes returns up to max slices waiting to be deleted from the
// object store. They stay queued until FinishDeletes; two clients may get
// the same slices, so deleting a slice must be idempotent. A read-only
// client gets none.
func (m *Meta) TakeDeletes(ctx context.Context, max int) ([]base.Slice, error) {
	if m.opts.ReadOnly {
		return nil, nil
	}
	if max <= 0 {
		max = 1
	}
	for {
		ps, err := m.listPending(ctx, max)
		if err != nil || len(ps) == 0 {
			return ps, err
		}
		out, err := m.dropSharedOwners(ctx, ps)
		if err != nil || len(out) > 0 || len(ps) < max {
			return out, err
		}
		// A full batch of shared slices: they are dealt with; look again.
	}
}

// dropSharedOwners handles pending deletes of slices that other chunk
// records still reference (restored copies, keys.go "O"): such a delete
// removes one owner and the slice stays. It returns the slices of ps
// (ascending ids) that are really free. Owner records are rare: one scan
// of their range finds them, and only those cost a transaction.
func (m *Meta) dropSharedOwners(ctx context.Context, ps []base.Slice) ([]base.Slice, error) {
	want := make(map[uint64]bool, len(ps))
	for _, s := range ps {
		want[s.ID] = true
	}
	var shared []uint64
	err := m.view(ctx, func(r kv.Reader) error {
		shared = shared[:0]
		return r.Scan(sharedKey(ps[0].ID), sharedKey(ps[len(ps)-1].ID+1), false, func(k, _ []byte) bool {
			if id, err := decodeSharedKey(k); err == nil && want[id] {
				shared = append(shared, id)
			}
			return true
		})
	})
	if err != nil || len(shared) == 0 {
		return ps, err
	}
	freed := map[uint64]bool{} // shared slices that every owner has dropped
	err = m.update(ctx, func(t *wtx) error {
		clear(freed)
		for _, id := range shared {
			pend, err := t.Get(pendingKey(id))
			if err != nil {
				return err
			}
			if pend == nil {
				continue // another client took it
			}
			drops, err := dropRecords(t, id)
			if err != nil {
				return err
			}
			// A pending delete of a volume from before drop records
			// has none: it is one drop.
			k := uint32(max(len(drops), 1))
			v, err := t.Get(sharedKey(id))
			if err != nil {
				return err
			}
			var n uint32
			if v != nil {
				if n, err = decodeU32(v); err != nil {
					return fmt.Errorf("slice %d owners: %w", id, err)
				}
			}
			if k > n {
				// Every owner has dropped it: free (FinishDeletes
				// removes the pending delete and the drop records).
				t.Delete(sharedKey(id))
				freed[id] = true
				continue
			}
			// Owners remain: the drops take as many extra owners off,
			// and the slice stays.
			if n > k {
				t.Set(sharedKey(id), u32(nil, n-k))
			} else {
				t.Delete(sharedKey(id))
			}
			for _, d := range drops {
				t.Delete(d)
			}
			t.Delete(pendingKey(id))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sharedSet := make(map[uint64]bool, len(shared))
	for _, id := range shared {
		sharedSet[id] = true
	}
	free := ps[:0:0]
	for _, s := range ps {
		if !sharedSet[s.ID] || freed[s.ID] {
			free = append(free, s)
		}
	}
	return free, nil
}

// dropRecords returns the keys of the drop records of slice id.
func dropRecords(r kv.Reader, id uint64) ([][]byte, error) {
	var keys [][]byte
	err := r.Scan(dropPrefix(id), kv.PrefixEnd(dropPrefix(id)), false, func(k, _ []byte) bool {
		keys = append(keys, bytes.Clone(k))
		return true
	})
	return keys, err
}

func (m *Meta) listPending(ctx context.Context, max int) ([]base.Slice, error) {
	var out []base.Slice
	err := m.view(ctx, func(r kv.Reader) error {
		out = out[:0]
		var derr error
		err := r.Scan(prefixOnly(pPending), kv.PrefixEnd(prefixOnly(pPending)), false, func(k, v []byte) bool {
			ki, err := DecodeKey(k)
			if err != nil || len(v) != 4 {
				derr = fmt.Errorf("pending delete %x: %w", k, base.ErrIO)
				return false
			}
			size := binary.BigEndian.Uint32(v)
			out = append(out, base.Slice{ID: ki.ID, Size: size, Len: size})
			return max <= 0 || len(out) < max
		})
		if err != nil {
			return err
		}
		return derr
	})
	return out, err
}

// FinishDeletes removes slices from the pending-delete queue once their
// objects are gone.
func (m *Meta) FinishDeletes(ctx context.Context, ids []uint64) error {
	if len(ids) == 0 {
		return nil
	}
	return m.update(ctx, func(t *wtx) error {
		for _, id := range ids {
			t.Delete(pendingKey(id))
		}
		// Their drop records, in one scan of the ids' range.
		lo, hi := slices.Min(ids), slices.Max(ids)
		want := make(map[uint64]bool, len(ids))
		for _, id := range ids {
			want[id] = true
		}
		var drops [][]byte
		err := t.Scan(dropPrefix(lo), kv.PrefixEnd(dropPrefix(hi)), false, func(k, _ []byte) bool {
			if id, _, err := decodeDropKey(k); err == nil && want[id] {
				drops = append(drops, bytes.Clone(k))
			}
			return true
		})
		for _, k := range drops {
			t.Delete(k)
		}
		return err
	})
}

// DeletesPending returns a channel that receives a value (coalesced) after
// a transaction of this client queued slices for deletion.
func (m *Meta) DeletesPending() <-chan struct{} { return m.deletes }

func (m *Meta) signalDeletes() {
	select {
	case m.deletes <- struct{}{}:
	default:
	}
}
