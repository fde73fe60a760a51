package meta

// Snapshots: named, read-only, point-in-time views of the whole volume.
//
// Taking a snapshot freezes the live epoch E (appends it to the frozen
// list "F") and opens E+1: one small transaction, whatever the volume's
// size. Writes after it add versions at E+1 instead of changing the
// versions of E (versioned.go), so no data or metadata is copied, and the
// first write after a snapshot costs what any write costs plus one change
// log entry per record it touches for the first time in the epoch.
//
// Deleting a snapshot removes it from the frozen list, then prunes the
// versions that only it could see. Those are versions written after the
// previous snapshot and superseded before the next one (or the live
// epoch): the change log names every record superseded in that span, so
// the work follows the changes made while the snapshot was the newest,
// not the size of the volume. The pruning is recorded as a job ("Y") in
// the transaction that removes the snapshot, so a crash half-way leaves
// the job to be resumed (ResumeSnapshotJobs, also run by gc).

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// Snapshot describes one snapshot. Stored as JSON under its name (keys.go).
type Snapshot struct {
	Name    string    `json:"name"`
	Epoch   uint64    `json:"epoch"` // the frozen epoch: the snapshot sees versions at or below it
	Created time.Time `json:"created"`
}

// snapshotBatch bounds the records one transaction of a snapshot deletion
// prunes, so a large deletion never builds one huge transaction.
const snapshotBatch = 256

// validSnapshotName applies the rules of a file name: the snapshot shows
// as /.snapshots/NAME.
func validSnapshotName(name string) error {
	if name == "" || name == "." || name == ".." {
		return fmt.Errorf("snapshot name %q: %w", name, base.ErrInvalid)
	}
	return validName(name)
}

// fenceAll writes every epoch fence shard: transactions that read the
// epoch records before this one commits and write versioned records
// conflict with it (keys.go).
func (t *wtx) fenceAll() {
	for i := 0; i < usageShards; i++ {
		t.Set(fenceKey(byte(i)), nil)
	}
	t.fenced = true
}

// epochLockKeys are the keys a change of the snapshot list locks first
// (kv.Exclusive): the epoch records and every fence shard, so that
// concurrent writers wait for it instead of aborting it over and over.
func epochLockKeys() [][]byte {
	keys := [][]byte{epochKey(), frozenKey()}
	for i := 0; i < usageShards; i++ {
		keys = append(keys, fenceKey(byte(i)))
	}
	return keys
}

// updateEpochs runs fn, which changes the snapshot list, in an exclusive
// transaction (see epochLockKeys).
func (m *Meta) updateEpochs(ctx context.Context, fn func(t *wtx) error) error {
	if m.opts.ReadOnly {
		return base.ErrReadOnly
	}
	if m.isClosed() {
		return kv.ErrClosed
	}
	if err := m.wbBarrier(ctx); err != nil {
		return err
	}
	return kv.UpdateExclusive(ctx, m.store, epochLockKeys(), func(tx kv.Txn) error {
		return fn(&wtx{Txn: tx, shard: 0})
	})
}

// CreateSnapshot freezes the live epoch under name and opens the next one.
// It is O(1): one transaction of a few keys. Everything committed before
// it returns (in particular everything fsynced) is in the snapshot; no
// write committed after it is. Errors: ErrInvalid (bad name), ErrExist
// (name taken), ErrReadOnly.
func (m *Meta) CreateSnapshot(ctx context.Context, name string) (Snapshot, error) {
	if err := validSnapshotName(name); err != nil {
		return Snapshot{}, err
	}
	// Changes other clients acknowledged but have not committed yet
	// belong in the snapshot: they commit them first.
	if err := m.recallWriteBacks(ctx); err != nil {
		return Snapshot{}, fmt.Errorf("create snapshot %q: %w", name, err)
	}
	var snap Snapshot
	err := m.updateEpochs(ctx, func(t *wtx) error {
		v, err := t.Get(snapshotKey(name))
		if err != nil {
			return err
		}
		if v != nil {
			return fmt.Errorf("snapshot %q: %w", name, base.ErrExist)
		}
		if err := t.loadEpochs(); err != nil {
			return err
		}
		snap = Snapshot{Name: name, Epoch: t.epoch, Created: time.Unix(0, m.now()).UTC()}
		rec, err := json.Marshal(snap)
		if err != nil {
			return err
		}
		t.Set(snapshotKey(name), rec)
		t.Set(frozenKey(), encodeU64s(append(slices.Clone(t.frozen), t.epoch)))
		t.Set(epochKey(), u64(nil, t.epoch+1))
		t.fenceAll()
		return nil
	})
	if err != nil {
		return Snapshot{}, fmt.Errorf("create snapshot %q: %w", name, err)
	}
	return snap, nil
}

func decodeSnapshot(k, v []byte) (Snapshot, error) {
	var s Snapshot
	if err := json.Unmarshal(v, &s); err != nil || s.Epoch == 0 {
		return s, fmt.Errorf("snapshot record %q: bad value: %w", k, base.ErrIO)
	}
	return s, nil
}

func listSnapshots(r kv.Reader) ([]Snapshot, error) {
	var out []Snapshot
	var derr error
	err := r.Scan(prefixOnly(pSnapshot), kv.PrefixEnd(prefixOnly(pSnapshot)), false, func(k, v []byte) bool {
		s, err := decodeSnapshot(k, v)
		if err != nil {
			derr = err
			return false
		}
		out = append(out, s)
		return true
	})
	if err == nil {
		err = derr
	}
	slices.SortFunc(out, func(a, b Snapshot) int { return cmp.Compare(a.Epoch, b.Epoch) })
	return out, err
}

// Snapshots lists the snapshots, oldest first.
func (m *Meta) Snapshots(ctx context.Context) ([]Snapshot, error) {
	var out []Snapshot
	err := m.view(ctx, func(r kv.Reader) (err error) {
		out, err = listSnapshots(r)
		return err
	})
	return out, err
}

// SnapshotByName returns the snapshot called name (ErrNotFound if none).
func (m *Meta) SnapshotByName(ctx context.Context, name string) (Snapshot, error) {
	var s Snapshot
	err := m.view(ctx, func(r kv.Reader) (err error) {
		s, err = snapshotIn(r, name)
		return err
	})
	return s, err
}

// DeleteSnapshot deletes the snapshot called name: it disappears at once
// for every client, then the metadata versions that only it could see
// are pruned and the slices only they referenced are queued for deletion
// (the background delete loop of a mount, or gc, removes their objects).
// progress, if not nil, is called with the number of changed records
// examined so far. Errors: ErrNotFound, ErrReadOnly.
func (m *Meta) DeleteSnapshot(ctx context.Context, name string, progress func(done int)) error {
	err := m.updateEpochs(ctx, func(t *wtx) error {
		s, err := snapshotIn(t, name)
		if err != nil {
			return err
		}
		i, err := t.frozenIndex(s)
		if err != nil {
			return err
		}
		v, err := json.Marshal(s)
		if err != nil {
			return err
		}
		t.Delete(snapshotKey(name))
		t.Set(frozenKey(), encodeU64s(slices.Delete(slices.Clone(t.frozen), i, i+1)))
		t.Set(snapJobKey(s.Epoch), v)
		t.fenceAll()
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete snapshot %q: %w", name, err)
	}
	return m.ResumeSnapshotJobs(ctx, progress)
}

// ResumeSnapshotJobs finishes the pruning of every deleted snapshot whose
// deletion was interrupted (and of those just deleted). Safe to run by
// several clients at once: pruning is idempotent.
func (m *Meta) ResumeSnapshotJobs(ctx context.Context, progress func(done int)) error {
	if m.opts.ReadOnly {
		return nil
	}
	var jobs []uint64
	err := m.view(ctx, func(r kv.Reader) error {
		return r.Scan(prefixOnly(pSnapJob), kv.PrefixEnd(prefixOnly(pSnapJob)), false, func(k, _ []byte) bool {
			if epoch, err := decodeSnapJobKey(k); err == nil {
				jobs = append(jobs, epoch)
			}
			return true
		})
	})
	if err != nil {
		return err
	}
	done := 0
	for _, e := range jobs {
		if err := m.pruneSnapshot(ctx, e, &done, progress); err != nil {
			return fmt.Errorf("pruning deleted snapshot of epoch %d: %w", e, err)
		}
	}
	return nil
}

// spanAfter returns the end of the span whose changes decide what the
// snapshot of epoch e (no longer frozen) alone could see: the next frozen
// epoch above e, else the live epoch.
func (t *wtx) spanAfter(e uint64) uint64 {
	i, _ := slices.BinarySearch(t.frozen, e+1)
	if i < len(t.frozen) {
		return t.frozen[i]
	}
	return t.epoch
}

// pruneSnapshot runs the job of the deleted snapshot of epoch e.
func (m *Meta) pruneSnapshot(ctx context.Context, e uint64, done *int, progress func(int)) error {
	var end uint64
	if err := m.view(ctx, func(r kv.Reader) error {
		t := &wtx{Txn: readTxn{r}}
		if err := t.loadEpochs(); err != nil {
			return err
		}
		end = t.spanAfter(e)
		return nil
	}); err != nil {
		return err
	}
	// Every record superseded in (e, end] has a change log entry there.
	start := changePrefix(e + 1)
	stop := changePrefix(end + 1)
	for {
		var logicals [][]byte
		err := m.view(ctx, func(r kv.Reader) error {
			logicals = logicals[:0]
			var derr error
			err := r.Scan(start, stop, false, func(k, _ []byte) bool {
				_, logical, err := decodeChangeKey(k)
				if err != nil {
					derr = err
					return false
				}
				logicals = append(logicals, append([]byte(nil), logical...))
				start = keyAfter(k)
				return len(logicals) < snapshotBatch
			})
			if err != nil {
				return err
			}
			return derr
		})
		if err != nil {
			return err
		}
		if len(logicals) == 0 {
			break
		}
		err = m.update(ctx, func(t *wtx) error {
			for _, l := range logicals {
				if err := t.compactVersions(l); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		*done += len(logicals)
		if progress != nil {
			progress(*done)
		}
	}
	if err := m.update(ctx, func(t *wtx) error {
		t.Delete(snapJobKey(e))
		return nil
	}); err != nil {
		return err
	}
	return m.dropChangeLog(ctx)
}

// dropChangeLog deletes the change log entries no snapshot deletion and
// no diff can need: those at or below the oldest snapshot or pending
// deletion job (every entry when there is neither).
func (m *Meta) dropChangeLog(ctx context.Context) error {
	for {
		n := 0
		err := m.update(ctx, func(t *wtx) error {
			n = 0
			if err := t.loadEpochs(); err != nil {
				return err
			}
			bound := t.epoch // no snapshot: every entry goes
			if len(t.frozen) > 0 {
				bound = t.frozen[0]
			}
			var jerr error
			if err := t.Scan(prefixOnly(pSnapJob), kv.PrefixEnd(prefixOnly(pSnapJob)), false, func(k, _ []byte) bool {
				epoch, err := decodeSnapJobKey(k)
				if err != nil {
					jerr = err
					return false
				}
				bound = min(bound, epoch)
				return false
			}); err != nil {
				return err
			}
			if jerr != nil {
				return jerr
			}
			var keys [][]byte
			if err := t.Scan(prefixOnly(pChange), changePrefix(bound+1), false, func(k, _ []byte) bool {
				keys = append(keys, append([]byte(nil), k...))
				return len(keys) < 4*snapshotBatch
			}); err != nil {
				return err
			}
			for _, k := range keys {
				t.Delete(k)
			}
			n = len(keys)
			return nil
		})
		if err != nil || n == 0 {
			return err
		}
	}
}

// SnapshotSpace is what a snapshot holds that nothing else does.
type SnapshotSpace struct {
	Bytes  uint64 // object bytes of slices only this snapshot references
	Slices uint64
}

// SnapshotUsage computes the space held only by the snapshot called name:
// what deleting it would let gc free. Like deletion, its cost follows the
// changes made between this snapshot and the next.
func (m *Meta) SnapshotUsage(ctx context.Context, name string) (SnapshotSpace, error) {
	var sp SnapshotSpace
	err := m.view(ctx, func(r kv.Reader) error {
		sp = SnapshotSpace{}
		s, err := snapshotIn(r, name)
		if err != nil {
			return err
		}
		// A read-only transaction that plays the deletion without writing.
		t := &dryTxn{Reader: r, deleted: map[string]bool{}}
		w := &wtx{Txn: t}
		i, err := w.frozenIndex(s)
		if err != nil {
			return err
		}
		w.frozen = slices.Delete(slices.Clone(w.frozen), i, i+1)
		end := w.spanAfter(s.Epoch)
		var logicals [][]byte
		if err := r.Scan(changePrefix(s.Epoch+1), changePrefix(end+1), false, func(k, _ []byte) bool {
			if _, logical, err := decodeChangeKey(k); err == nil && logical[0] == pChunk {
				logicals = append(logicals, append([]byte(nil), logical...))
			}
			return true
		}); err != nil {
			return err
		}
		for _, l := range logicals {
			if err := w.compactVersions(l); err != nil {
				return err
			}
		}
		sp.Slices = uint64(len(t.freed))
		for _, size := range t.freed {
			sp.Bytes += uint64(size)
		}
		return nil
	})
	return sp, err
}

// dryTxn is a Txn over a Reader that records pending-delete writes
// instead of making them, for SnapshotUsage. Deleted keys are hidden from
// later Gets (Scans are not filtered: compactVersions reads each record
// once).
type dryTxn struct {
	kv.Reader
	deleted map[string]bool
	freed   map[uint64]uint32
}

func (d *dryTxn) Set(key, value []byte) {
	if len(key) == 0 || key[0] != pPending {
		return
	}
	id, err := decodePendingKey(key)
	if err != nil {
		return
	}
	if size, err := decodeU32(value); err == nil {
		if d.freed == nil {
			d.freed = make(map[uint64]uint32)
		}
		d.freed[id] = size
	}
}

func (d *dryTxn) Delete(key []byte) { d.deleted[string(key)] = true }

func (d *dryTxn) Get(key []byte) ([]byte, error) {
	if d.deleted[string(key)] {
		return nil, nil
	}
	return d.Reader.Get(key)
}

// frozenIndex returns the position of s's epoch in the frozen list.
func (t *wtx) frozenIndex(s Snapshot) (int, error) {
	if err := t.loadEpochs(); err != nil {
		return 0, err
	}
	i, found := slices.BinarySearch(t.frozen, s.Epoch)
	if !found {
		return 0, fmt.Errorf("snapshot %q: epoch %d is not frozen: %w", s.Name, s.Epoch, base.ErrIO)
	}
	return i, nil
}

// frozenAt reports whether epoch is a snapshot's epoch in r.
func frozenAt(r kv.Reader, epoch uint64) (bool, error) {
	v, err := r.Get(frozenKey())
	if err != nil {
		return false, err
	}
	fr, err := decodeU64s(v)
	if err != nil {
		return false, fmt.Errorf("snapshot epochs record: %w", err)
	}
	_, found := slices.BinarySearch(fr, epoch)
	return found, nil
}
