package meta

// Replication at the record level (docs/design/0010-replication.md). A
// destination volume holds the source's namespace records exactly: the
// same inode numbers, entries, attributes, symlink targets, xattrs and
// chunk maps as the source's snapshot it last replicated. A cycle reads,
// on the source, the records that changed between two of its snapshots
// (the change log) and their values at the newer one, and writes them on
// the destination in one transaction, which also records the new state.
// Hard links, renames, holes, truncations and same-size rewrites are
// therefore kept as they are: nothing is derived from paths or contents.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// ReplicaRecord is one logical record of a source snapshot as a
// destination must hold it: Value (the payload) or, with Gone, nothing.
type ReplicaRecord struct {
	Key   []byte
	Value []byte
	Gone  bool
}

// ReplicaState is what a destination volume records about its pair, in
// the transaction of each cycle ("r").
type ReplicaState struct {
	Pair       string `json:"pair"`        // the pair's id
	SourceUUID string `json:"source_uuid"` // the source volume
	SourceName string `json:"source_name"`
	Source     string `json:"source"` // the source's metadata URL, password removed
	// Snapshot is the source snapshot the destination holds (also a
	// snapshot of the destination, its anchor for a later reverse); ""
	// while the first copy is being written.
	Snapshot string `json:"snapshot"`
	Epoch    uint64 `json:"epoch"` // Snapshot's epoch on the source
	// Taken is when Snapshot was taken on the source: the destination is
	// as of then (the lag is now minus Taken).
	Taken time.Time `json:"taken"`
	// Copying names the source snapshot of the first copy while it is
	// written in batches (the destination is no volume to mount yet); the
	// next batch starts after logical key Resume.
	Copying string `json:"copying,omitempty"`
	Resume  []byte `json:"resume,omitempty"`
	Cycles  uint64 `json:"cycles"`
	// Mirrored names the destination's snapshots that replicate the
	// source's (users' snapshots taken after the first copy); deleted on
	// the destination when the source deletes them.
	Mirrored     []string  `json:"mirrored,omitempty"`
	LastCycle    CycleInfo `json:"last_cycle"`
	Promoted     bool      `json:"promoted,omitempty"`      // failover done: writable
	PromotedAt   time.Time `json:"promoted_at,omitzero"`    // when
	ReversedFrom string    `json:"reversed_from,omitempty"` // the pair this one reverses
}

// CycleInfo describes one finished cycle.
type CycleInfo struct {
	Records int   `json:"records"`
	Files   int   `json:"files"` // attribute records written or removed
	Objects int   `json:"objects"`
	Bytes   int64 `json:"bytes"` // object bytes copied
	// Linked: of Objects, those the stores made themselves (a hard link
	// on one file system, a server-side copy on one S3 endpoint), whose
	// bytes did not travel.
	Linked   int           `json:"linked,omitempty"`
	Duration time.Duration `json:"duration"`
	Finished time.Time     `json:"finished"`
}

// ReplicaCounters are the source's id counters, which a destination keeps
// at least as high so that it hands out no inode or slice id of the
// source after a failover.
type ReplicaCounters struct {
	NextInode, NextSlice uint64
}

// ReplicaSnapshotPrefix starts the names of the snapshots replication
// takes on the source (and keeps on the destination as anchors).
const ReplicaSnapshotPrefix = "replica."

// ReplicaState returns the volume's replication state as a destination
// (ok false: it is none).
func (m *Meta) ReplicaState(ctx context.Context) (s ReplicaState, ok bool, err error) {
	err = m.view(ctx, func(r kv.Reader) error {
		s, ok, err = replicaStateIn(r)
		return err
	})
	return s, ok, err
}

func replicaStateIn(r kv.Reader) (ReplicaState, bool, error) {
	v, err := r.Get(replicaKey())
	if err != nil || v == nil {
		return ReplicaState{}, false, err
	}
	var s ReplicaState
	if err := json.Unmarshal(v, &s); err != nil {
		return ReplicaState{}, false, fmt.Errorf("replication state: %v: %w", err, base.ErrIO)
	}
	return s, true, nil
}

// ReplicaCountersNow returns the volume's id counters.
func (m *Meta) ReplicaCountersNow(ctx context.Context) (c ReplicaCounters, err error) {
	err = m.view(ctx, func(r kv.Reader) error {
		if c.NextInode, err = counter(r, counterNextInode); err != nil {
			return err
		}
		c.NextSlice, err = counter(r, counterNextSlice)
		return err
	})
	return c, err
}

// ReplicaChanged returns the logical keys of the namespace records that
// changed after snapshot from up to to (to nil: the live volume), from
// the change log.
func (m *Meta) ReplicaChanged(ctx context.Context, from Snapshot, to *Snapshot) ([][]byte, error) {
	var out [][]byte
	err := m.view(ctx, func(r kv.Reader) error {
		out = out[:0]
		end := uint64(latestEpoch)
		if to != nil {
			end = to.Epoch
		} else {
			t := &wtx{Txn: readTxn{r}}
			if err := t.loadEpochs(); err != nil {
				return err
			}
			end = t.epoch
		}
		seen := map[string]bool{}
		var derr error
		err := r.Scan(changePrefix(from.Epoch+1), changePrefix(end+1), false, func(k, _ []byte) bool {
			_, l, err := decodeChangeKey(k)
			if err != nil {
				derr = err
				return false
			}
			if !seen[string(l)] && slices.Contains(versionedPrefixes, l[0]) {
				seen[string(l)] = true
				out = append(out, bytes.Clone(l))
			}
			return true
		})
		if err == nil {
			err = derr
		}
		return err
	})
	return out, err
}

// ReplicaValues returns the records of keys as snapshot snap holds them.
// The records of an inode without links there (open but unlinked) are
// Gone: a destination has no use for them.
func (m *Meta) ReplicaValues(ctx context.Context, snap Snapshot, keys [][]byte) ([]ReplicaRecord, error) {
	var out []ReplicaRecord
	err := m.view(ctx, func(r kv.Reader) error {
		out = out[:0]
		live := map[base.Ino]bool{}
		for _, k := range keys {
			v, ok, err := vget(r, k, snap.Epoch)
			if err != nil {
				return err
			}
			if ok && !isDentryKey(k) {
				if ok, err = linkedAt(r, k, snap.Epoch, live); err != nil {
					return err
				}
			}
			out = append(out, ReplicaRecord{Key: k, Value: v, Gone: !ok})
		}
		return nil
	})
	return out, err
}

// linkedAt reports whether the inode of inode record k has links at
// epoch (memoized in live).
func linkedAt(r kv.Reader, k []byte, epoch uint64, live map[base.Ino]bool) (bool, error) {
	ino, ok := keyIno(k)
	if !ok {
		return true, nil
	}
	if l, ok := live[ino]; ok {
		return l, nil
	}
	a, err := getAttrAt(r, ino, epoch)
	l := err == nil && a.Nlink > 0
	if err != nil && !errors.Is(err, base.ErrNotFound) {
		return false, err
	}
	live[ino] = l
	return l, nil
}

// ReplicaScan returns up to max namespace records of snapshot snap in
// key order, starting after key after (nil: from the first), and the key
// to continue after (nil: done). A snapshot's records do not change, so
// the scan may span many views.
func (m *Meta) ReplicaScan(ctx context.Context, snap Snapshot, after []byte, max int) (recs []ReplicaRecord, next []byte, err error) {
	err = m.view(ctx, func(r kv.Reader) error {
		recs, next = recs[:0], nil
		live := map[base.Ino]bool{}
		for _, p := range versionedPrefixes {
			if after != nil && after[0] > p {
				continue
			}
			start := prefixOnly(p)
			if after != nil && after[0] == p {
				start = after
			}
			// The scan's callback must not read (it runs inside the
			// store's iterator): the links are checked after it.
			var batch []ReplicaRecord
			err := vscan(r, prefixOnly(p), start, snap.Epoch, func(logical, payload []byte) bool {
				if after != nil && bytes.Equal(logical, after) {
					return true
				}
				if len(recs)+len(batch) == max {
					if len(batch) > 0 {
						next = bytes.Clone(batch[len(batch)-1].Key)
					} else {
						next = bytes.Clone(recs[len(recs)-1].Key)
					}
					return false
				}
				batch = append(batch, ReplicaRecord{Key: bytes.Clone(logical), Value: bytes.Clone(payload)})
				return true
			})
			if err != nil {
				return err
			}
			for _, rec := range batch {
				if !isDentryKey(rec.Key) {
					ok, err := linkedAt(r, rec.Key, snap.Epoch, live)
					if err != nil {
						return err
					}
					if !ok {
						continue
					}
				}
				recs = append(recs, rec)
			}
			if next != nil {
				return nil
			}
		}
		return nil
	})
	return recs, next, err
}

// ReplicaGained returns the slices the chunk records of recs reference
// that the destination's live records of the same keys do not: the ones
// whose objects a cycle must copy before it applies recs.
func (m *Meta) ReplicaGained(ctx context.Context, recs []ReplicaRecord) ([]base.Slice, error) {
	var out []base.Slice
	err := m.view(ctx, func(r kv.Reader) error {
		out = out[:0]
		seen := map[uint64]bool{}
		for _, rec := range recs {
			if rec.Gone || rec.Key[0] != pChunk {
				continue
			}
			ss, err := decodeSlices(rec.Value)
			if err != nil {
				return fmt.Errorf("chunk record %x: %w", rec.Key, err)
			}
			old, err := liveSlices(r, rec.Key)
			if err != nil {
				return err
			}
			had := map[uint64]bool{}
			for _, s := range old {
				had[s.ID] = true
			}
			for _, s := range ss {
				if s.ID != 0 && !had[s.ID] && !seen[s.ID] {
					seen[s.ID] = true
					out = append(out, s)
				}
			}
		}
		return nil
	})
	return out, err
}

func liveSlices(r kv.Reader, logical []byte) ([]base.Slice, error) {
	v, ok, err := vget(r, logical, latestEpoch)
	if err != nil || !ok {
		return nil, err
	}
	ss, err := decodeSlices(v)
	if err != nil {
		return nil, fmt.Errorf("chunk record %x: %w", logical, err)
	}
	return ss, nil
}

// ReplicaOwners returns the extra owner counts ("O") of slices ids that
// have any (slices a restore shares between files).
func (m *Meta) ReplicaOwners(ctx context.Context, ids []uint64) (map[uint64]uint32, error) {
	out := map[uint64]uint32{}
	err := m.view(ctx, func(r kv.Reader) error {
		clear(out)
		for _, id := range ids {
			v, err := r.Get(sharedKey(id))
			if err != nil {
				return err
			}
			if v != nil {
				n, err := decodeU32(v)
				if err != nil {
					return fmt.Errorf("owners of slice %d: %w", id, err)
				}
				out[id] = n
			}
		}
		return nil
	})
	return out, err
}

// ReplicaQuotas returns every quota record and usage shard, raw.
func (m *Meta) ReplicaQuotas(ctx context.Context) ([]kv.Pair, error) {
	var out []kv.Pair
	err := m.view(ctx, func(r kv.Reader) error {
		out = out[:0]
		return r.Scan(prefixOnly(pQuota), kv.PrefixEnd(prefixOnly(pQuota)), false, func(k, v []byte) bool {
			out = append(out, kv.Pair{Key: bytes.Clone(k), Value: bytes.Clone(v)})
			return true
		})
	})
	return out, err
}

// ReplicaApply is one transaction of a cycle on the destination.
type ReplicaApply struct {
	Records []ReplicaRecord
	// Expect: the state's Snapshot and Copying the destination must hold
	// for the transaction to apply (another replicator of the pair, or a
	// failover, moved it on otherwise: ErrReplicaMoved).
	ExpectSnapshot, ExpectCopying string
	State                         ReplicaState // recorded with the records
	Counters                      ReplicaCounters
	Owners                        map[uint64]uint32 // extra owners of the copied slices
	// Quotas, if not nil, replace every quota record and shard.
	Quotas []kv.Pair
	// Blobs are the inline blocks (blob key → bytes) of the slices the
	// records gain, written in the same transaction.
	Blobs map[string][]byte
	// First: the destination is a new volume whose first copy this is;
	// no state is expected.
	First bool
}

// ErrReplicaMoved: the destination is not at the state a cycle started
// from.
var ErrReplicaMoved = fmt.Errorf("the destination moved on: another replicator, or a failover: %w", base.ErrExist)

// ApplyReplica writes a's records on the destination in one transaction
// with its state: a client of the destination sees the state before or
// the state after, never a mix. A chunk record's dropped slices are
// queued for deletion as a write's are; usage counters follow the
// attributes written.
func (m *Meta) ApplyReplica(ctx context.Context, a ReplicaApply) error {
	return m.update(ctx, func(t *wtx) error {
		cur, ok, err := replicaStateIn(t)
		if err != nil {
			return err
		}
		switch {
		case !ok && !a.First:
			return fmt.Errorf("no replication state: %w", ErrReplicaMoved)
		case ok && (cur.Pair != a.State.Pair || cur.Promoted || cur.Snapshot != a.ExpectSnapshot || cur.Copying != a.ExpectCopying):
			return fmt.Errorf("at %q (copying %q), the cycle expected %q (%q): %w", cur.Snapshot, cur.Copying, a.ExpectSnapshot, a.ExpectCopying, ErrReplicaMoved)
		}
		for key, data := range a.Blobs {
			t.Set(blobKey(key), data)
		}
		o := m.newOp(t)
		for _, rec := range a.Records {
			if err := o.applyRecord(rec); err != nil {
				return err
			}
		}
		for id, n := range a.Owners {
			if n > 0 {
				t.Set(sharedKey(id), u32(nil, n))
			}
		}
		if a.Quotas != nil {
			var old [][]byte
			if err := t.Scan(prefixOnly(pQuota), kv.PrefixEnd(prefixOnly(pQuota)), false, func(k, _ []byte) bool {
				old = append(old, bytes.Clone(k))
				return true
			}); err != nil {
				return err
			}
			for _, k := range old {
				t.Delete(k)
			}
			for _, p := range a.Quotas {
				t.Set(p.Key, p.Value)
			}
		}
		for kind, n := range map[byte]uint64{counterNextInode: a.Counters.NextInode, counterNextSlice: a.Counters.NextSlice} {
			have, err := counter(t, kind)
			if err != nil {
				return err
			}
			if n > have {
				t.Set(counterKey(kind), u64(nil, n))
			}
		}
		return setReplicaState(t, a.State)
	})
}

// applyRecord makes the live volume hold rec.
func (o *op) applyRecord(rec ReplicaRecord) error {
	k := rec.Key
	if !slices.Contains(versionedPrefixes, k[0]) {
		return fmt.Errorf("replica record %x: not a namespace record: %w", k, base.ErrInvalid)
	}
	old, had, err := vget(o, k, latestEpoch)
	if err != nil {
		return err
	}
	if rec.Gone && !had || !rec.Gone && had && bytes.Equal(old, rec.Value) {
		return nil
	}
	switch k[0] {
	case pAttr:
		var before, after base.Attr
		if had {
			if before, err = decodeAttr(old); err != nil {
				return fmt.Errorf("attribute record %x: %w", k, err)
			}
		}
		if !rec.Gone {
			if after, err = decodeAttr(rec.Value); err != nil {
				return fmt.Errorf("replica attribute %x: %w", k, err)
			}
		}
		var inodes int64
		switch {
		case !had:
			inodes = 1
		case rec.Gone:
			inodes = -1
		}
		if err := o.addUsage(counterUsedInodes, inodes); err != nil {
			return err
		}
		if err := o.addUsage(counterUsedBytes, usageBytes(&after)-usageBytes(&before)); err != nil {
			return err
		}
	case pChunk:
		var oldSS, newSS []base.Slice
		if had {
			if oldSS, err = decodeSlices(old); err != nil {
				return fmt.Errorf("chunk record %x: %w", k, err)
			}
		}
		if !rec.Gone {
			if newSS, err = decodeSlices(rec.Value); err != nil {
				return fmt.Errorf("replica chunk %x: %w", k, err)
			}
		}
		ki, err := DecodeKey(versionKey(k, 0))
		if err != nil {
			return err
		}
		if rec.Gone {
			err = o.vdel(k)
		} else {
			err = o.vset(k, rec.Value)
		}
		if err != nil {
			return err
		}
		return o.release(ki.Ino, ki.Index, oldSS, newSS)
	}
	if rec.Gone {
		return o.vdel(k)
	}
	return o.vset(k, rec.Value)
}

// SetReplicaState writes the destination's state unconditionally (a new
// pair's first record, failover, stop).
func (m *Meta) SetReplicaState(ctx context.Context, change func(s *ReplicaState, ok bool) error) (ReplicaState, error) {
	return m.changeReplicaState(ctx, func(_ *wtx, s *ReplicaState, ok bool) error { return change(s, ok) })
}

// changeReplicaState runs change on the state in a transaction that
// writes it back (with whatever else change writes).
func (m *Meta) changeReplicaState(ctx context.Context, change func(t *wtx, s *ReplicaState, ok bool) error) (ReplicaState, error) {
	var out ReplicaState
	err := m.update(ctx, func(t *wtx) error {
		s, ok, err := replicaStateIn(t)
		if err != nil {
			return err
		}
		if err := change(t, &s, ok); err != nil {
			return err
		}
		out = s
		return setReplicaState(t, s)
	})
	return out, err
}

func setReplicaState(t kv.Txn, s ReplicaState) error {
	js, err := json.Marshal(s)
	if err != nil {
		return err
	}
	t.Set(replicaKey(), js)
	return nil
}

// ClearReplicaState removes the destination's state: the volume is no
// destination any more.
func (m *Meta) ClearReplicaState(ctx context.Context) error {
	return m.update(ctx, func(t *wtx) error {
		t.Delete(replicaKey())
		return nil
	})
}

// ReplicaEmpty reports whether the volume holds nothing but its root (a
// new volume a pair may take as its destination).
func (m *Meta) ReplicaEmpty(ctx context.Context) (bool, error) {
	empty := true
	err := m.view(ctx, func(r kv.Reader) error {
		empty = true
		return vscan(r, prefixOnly(pDentry), prefixOnly(pDentry), latestEpoch, func(logical, _ []byte) bool {
			empty = false
			return false
		})
	})
	return empty, err
}

// LoadReplicaState reads a store's replication state without opening
// it as a volume (OpenVolume: a destination mounts read-only).
func LoadReplicaState(ctx context.Context, store kv.Store) (s ReplicaState, ok bool, err error) {
	err = store.View(ctx, func(r kv.Reader) error {
		s, ok, err = replicaStateIn(r)
		return err
	})
	return s, ok, err
}

// IsAttrKey reports whether a replica record's key is an inode's
// attributes (one file, directory or other inode).
func IsAttrKey(k []byte) bool { return len(k) > 0 && k[0] == pAttr }

// replicaInodeGap and replicaSliceGap are how far a failover moves the
// destination's inode and slice counters past the source's last
// replicated values: the old source may have handed out ids after its
// last cycle, and a reverse resynchronisation must never meet one id
// naming two different things on the two sides (a slice id seen on both
// would not be copied). Inode numbers stay far below the 2^48 that
// front ends leave them (vfs slots): 2^32 inodes is more than a source
// creates between two cycles.
const (
	replicaInodeGap = 1 << 32
	replicaSliceGap = 1 << 40
)

// PromoteReplica makes a destination writable at the state it holds (its
// last replicated snapshot: cycles apply whole): the state is marked
// promoted, and the id counters jump by replicaIDGap.
func (m *Meta) PromoteReplica(ctx context.Context, now time.Time) (ReplicaState, error) {
	return m.changeReplicaState(ctx, func(t *wtx, s *ReplicaState, ok bool) error {
		switch {
		case !ok:
			return fmt.Errorf("the volume is no replication destination: %w", base.ErrInvalid)
		case s.Promoted:
			return fmt.Errorf("the destination was failed over already, at %s: %w", s.PromotedAt.Format(time.RFC3339), base.ErrExist)
		case s.Snapshot == "":
			return fmt.Errorf("the first copy of pair %s never finished: there is no replicated state to fail over to: %w", s.Pair, base.ErrInvalid)
		}
		for kind, gap := range map[byte]uint64{counterNextInode: replicaInodeGap, counterNextSlice: replicaSliceGap} {
			n, err := counter(t, kind)
			if err != nil {
				return err
			}
			t.Set(counterKey(kind), u64(nil, n+gap))
		}
		s.Promoted, s.PromotedAt = true, now
		return nil
	})
}

// ReplicaBlobs reads the blobs (inline blocks) under keys in one view;
// a missing one is an error wrapping base.ErrNotFound.
func (m *Meta) ReplicaBlobs(ctx context.Context, keys []string) (map[string][]byte, error) {
	out := make(map[string][]byte, len(keys))
	err := m.view(ctx, func(r kv.Reader) error {
		clear(out)
		for _, k := range keys {
			v, err := r.Get(blobKey(k))
			if err != nil {
				return err
			}
			if v == nil {
				return fmt.Errorf("blob %s: %w", k, base.ErrNotFound)
			}
			out[k] = v
		}
		return nil
	})
	return out, err
}
