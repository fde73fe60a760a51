package meta

// Load: a dump (dump.go) back into an empty store, of any engine.
//
// The records go in as versions of epoch 1 of a volume without snapshots,
// in parallel batches, one transaction per frame. The store is no volume
// until the last transaction: the first one writes a load marker, the
// last one the settings, counters and epoch and removes the marker, so a
// load that stops half way (killed, a damaged file) leaves a store that
// Open refuses, saying a load did not finish; running the load again with
// the same dump writes every record again (each write is idempotent) and
// finishes it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/dumpfile"
	"github.com/cairnfs/cairn/internal/kv"
)

// LoadOptions tune Load.
type LoadOptions struct {
	// DataURL, if set, replaces the dumped volume's data store URL (the
	// same objects reached another way).
	DataURL string
	// Force wipes a store that holds something else first, as format
	// --force does.
	Force bool
	// Workers write in parallel (default: 2 per CPU, at least 4).
	Workers int
	// Progress, if set, is updated as the load goes.
	Progress *DumpProgress
	// Check, if set, sees the settings the volume will have before
	// anything is written, and stops the load by returning an error (the
	// caller checks the data store, say).
	Check func(Settings) error
	// SkipSlices moves the loaded volume's slice counter this far past
	// the dump's, so that the slices written after the load never take
	// the ids of slices the dumped volume wrote after the dump was taken:
	// their objects may still be in the data store (a restore of an old
	// backup after the metadata was lost), and a slice reusing an id
	// would keep gc from freeing them (it frees objects by slice id).
	// Those objects are then orphans gc removes. 0: none.
	SkipSlices uint64
}

// LoadStats is what a finished load wrote.
type LoadStats struct {
	Volume  string            `json:"volume"`
	DumpID  string            `json:"dump_id"`
	Records map[string]uint64 `json:"records"`
	Inodes  uint64            `json:"inodes"`
	Resumed bool              `json:"resumed"` // an unfinished load of the same dump was finished
}

// loadMarker is the value of the marker of a store that is not a volume
// while a load fills it, or while a destroy empties it (destroy.go).
type loadMarker struct {
	DumpID  string    `json:"dump_id,omitempty"`
	Volume  string    `json:"volume"`
	Source  string    `json:"source,omitempty"`
	Started time.Time `json:"started"`
	// Destroy: the volume is being destroyed; Settings are its settings.
	Destroy  bool            `json:"destroy,omitempty"`
	Settings json.RawMessage `json:"settings,omitempty"`
}

// unfinishedLoad returns the error Open gives for a store whose load did
// not finish, or nil if r has no load marker.
func unfinishedLoad(r kv.Reader, name string) error {
	v, err := r.Get(loadKey())
	if err != nil || v == nil {
		return err
	}
	var lm loadMarker
	_ = json.Unmarshal(v, &lm)
	if lm.Destroy {
		return fmt.Errorf("volume %q in %s is being destroyed (since %s): run `cairn destroy` again to finish: %w",
			lm.Volume, name, lm.Started.Format(time.RFC3339), base.ErrInvalid)
	}
	return fmt.Errorf("%s holds an unfinished load of volume %q (dump %s, started %s): it is not a volume until "+
		"`cairn load` is run again with the same dump file: %w",
		name, lm.Volume, lm.DumpID, lm.Started.Format(time.RFC3339), base.ErrInvalid)
}

// Load reads a dump from in into store, which must be empty, hold an
// unfinished load of the same dump, or force must be set.
func Load(ctx context.Context, store kv.Store, in io.Reader, o LoadOptions) (LoadStats, error) {
	dr, err := dumpfile.NewReader(in)
	if err != nil {
		return LoadStats{}, fmt.Errorf("load: %w", err)
	}
	h := dr.Header()
	if h.Meta < minDumpLayout || h.Meta > DumpLayout {
		return LoadStats{}, fmt.Errorf("load: dump of record layout %d, this build loads %d to %d: %w", h.Meta, minDumpLayout, DumpLayout, errDumpLayout)
	}
	s, err := decodeSettings(h.Settings)
	if err != nil {
		return LoadStats{}, fmt.Errorf("load: the dump's settings: %w", err)
	}
	if o.DataURL != "" {
		s.DataURL = o.DataURL
	}
	if err := s.Validate(); err != nil {
		return LoadStats{}, fmt.Errorf("load: the dump's settings: %w", err)
	}
	if s.FormatVersion > CurrentFormatVersion {
		return LoadStats{}, fmt.Errorf("load: volume of format version %d, this build reads up to %d: %w", s.FormatVersion, CurrentFormatVersion, base.ErrInvalid)
	}
	if o.Check != nil {
		if err := o.Check(s); err != nil {
			return LoadStats{}, fmt.Errorf("load: %w", err)
		}
	}
	resumed, err := prepareLoad(ctx, store, h, s, o.Force)
	if err != nil {
		return LoadStats{}, err
	}
	l := &loader{store: store, progress: o.Progress, records: map[byte]*atomic.Uint64{}, snapshots: h.Snapshots, epoch: h.Epoch}
	for _, k := range []byte{pAttr, pDentry, pSymlink, pXattr, pChunk, pBlob, pShared, pSnapshot, pChange, pQuota} {
		l.records[k] = new(atomic.Uint64)
	}
	if l.progress == nil {
		l.progress = new(DumpProgress)
	}
	if err := l.run(ctx, dr, o.Workers); err != nil {
		return LoadStats{}, fmt.Errorf("load: %w", err)
	}
	t := dr.Trailer()
	if err := l.finish(ctx, s, h, t.Extra, o.SkipSlices); err != nil {
		return LoadStats{}, fmt.Errorf("load: %w", err)
	}
	if l.records[pQuota].Load() > 0 {
		if err := recountQuotas(ctx, store); err != nil {
			return LoadStats{}, fmt.Errorf("load: %w", err)
		}
	}
	st := LoadStats{Volume: s.Name, DumpID: h.ID, Records: map[string]uint64{}, Inodes: l.inodes.Load(), Resumed: resumed}
	for k, n := range l.records {
		if c := n.Load(); c > 0 {
			st.Records[string(k)] = c
		}
	}
	return st, nil
}

// prepareLoad checks that store may take the load and writes the marker.
// resumed: the store holds an unfinished load of this dump.
func prepareLoad(ctx context.Context, store kv.Store, h dumpfile.Header, s Settings, force bool) (resumed bool, err error) {
	var settings, marker []byte
	var any bool
	err = store.View(ctx, func(r kv.Reader) error {
		if settings, err = r.Get(settingsKey()); err != nil {
			return err
		}
		if marker, err = r.Get(loadKey()); err != nil {
			return err
		}
		any = false
		return r.Scan(nil, nil, false, func(_, _ []byte) bool { any = true; return false })
	})
	if err != nil {
		return false, err
	}
	var lm loadMarker
	if marker != nil {
		_ = json.Unmarshal(marker, &lm)
	}
	switch {
	case force:
		if any {
			if err := wipe(ctx, store); err != nil {
				return false, fmt.Errorf("load: wiping %s: %w", store.Name(), err)
			}
		}
	case settings != nil:
		old, _ := decodeSettings(settings)
		return false, fmt.Errorf("load: %s already holds volume %q; load into an empty store (or use --force to overwrite it): %w",
			store.Name(), old.Name, base.ErrExist)
	case marker != nil && lm.Destroy:
		return false, fmt.Errorf("load: volume %q in %s is being destroyed; finish with cairn destroy, or use --force: %w",
			lm.Volume, store.Name(), base.ErrExist)
	case marker != nil && lm.DumpID == h.ID:
		resumed = true
	case marker != nil:
		return false, fmt.Errorf("load: %s holds an unfinished load of another dump (%s, volume %q); finish it with that dump, "+
			"or use --force to overwrite it: %w", store.Name(), lm.DumpID, lm.Volume, base.ErrExist)
	case any:
		return false, fmt.Errorf("load: %s is not empty (it holds records but no volume); use --force to overwrite it: %w",
			store.Name(), base.ErrExist)
	}
	if resumed {
		return true, nil
	}
	js, err := json.Marshal(loadMarker{DumpID: h.ID, Volume: s.Name, Source: h.Source, Started: time.Now().UTC()})
	if err != nil {
		return false, err
	}
	return false, store.Update(ctx, func(tx kv.Txn) error {
		tx.Set(loadKey(), js)
		return nil
	})
}

// loader is one running load.
type loader struct {
	// snapshots: the dump holds the snapshots (dumpsnap.go): per-inode
	// records are physical versions at or below epoch, the dump's.
	snapshots bool
	epoch     uint64
	mu        sync.Mutex
	frozen    []uint64 // the snapshots' epochs, as loaded

	store    kv.Store
	progress *DumpProgress
	records  map[byte]*atomic.Uint64
	inodes   atomic.Uint64
	bytes    atomic.Uint64
	maxIno   atomic.Uint64
	maxSlice atomic.Uint64
}

// run reads the frames in order and writes them from workers, one
// transaction per frame.
func (l *loader) run(ctx context.Context, dr *dumpfile.Reader, workers int) error {
	if workers <= 0 {
		workers = max(4, 2*runtime.GOMAXPROCS(0))
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	frames := make(chan *dumpfile.RawFrame, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for f := range frames {
				if err := l.frame(ctx, f); err != nil {
					cancel(err)
				}
			}
		}()
	}
	var err error
	for err == nil {
		var f *dumpfile.RawFrame
		if f, err = dr.Next(); err != nil {
			break
		}
		select {
		case frames <- f:
		case <-ctx.Done():
			err = context.Cause(ctx)
		}
	}
	close(frames)
	wg.Wait()
	if err == io.EOF {
		err = nil
	}
	if cerr := context.Cause(ctx); cerr != nil {
		return cerr
	}
	return err
}

// frame checks every record of one frame and writes them in one
// transaction.
func (l *loader) frame(ctx context.Context, rf *dumpfile.RawFrame) error {
	f, err := rf.Open()
	if err != nil {
		return err
	}
	type write struct{ k, v []byte }
	ws := make([]write, 0, f.Records)
	var inodes, bytes uint64
	err = f.Each(func(k, v []byte) error {
		if len(k) == 0 || k[0] != f.Kind {
			return fmt.Errorf("frame %d at offset %d: record key %x in a frame of kind %q: %w", f.Seq, f.Offset, k, f.Kind, dumpfile.ErrFormat)
		}
		raw, err := l.checkRecord(k, v, &inodes, &bytes)
		if err != nil {
			return fmt.Errorf("frame %d (kind %q) at offset %d: %v: %w", f.Seq, f.Kind, f.Offset, err, dumpfile.ErrFormat)
		}
		if raw {
			ws = append(ws, write{k, v})
		} else {
			ws = append(ws, write{versionKey(k, 1), append([]byte{tagLive}, v...)})
		}
		return nil
	})
	if err != nil {
		return err
	}
	err = l.store.Update(ctx, func(tx kv.Txn) error {
		for _, w := range ws {
			tx.Set(w.k, w.v)
		}
		return nil
	})
	if err != nil {
		return err
	}
	l.records[f.Kind].Add(uint64(f.Records))
	l.inodes.Add(inodes)
	l.bytes.Add(bytes)
	l.progress.Records.Add(int64(f.Records))
	l.progress.Inodes.Add(int64(inodes))
	l.progress.Bytes.Add(int64(len(f.Raw)))
	return nil
}

// checkRecord validates one record of a frame. raw: the record goes into
// the store as it is (otherwise it is a logical key and payload, written
// as a version of epoch 1).
func (l *loader) checkRecord(k, v []byte, inodes, bytes *uint64) (raw bool, err error) {
	switch {
	case k[0] == pBlob || k[0] == pShared || k[0] == pQuota:
		return true, l.check(k, v, inodes, bytes)
	case !l.snapshots && (k[0] == pSnapshot || k[0] == pChange):
		return false, fmt.Errorf("a %q record in a dump without snapshots", k[0])
	case k[0] == pSnapshot:
		s, err := decodeSnapshot(k, v)
		if err != nil || s.Epoch >= l.epoch || string(snapshotKey(s.Name)) != string(k) {
			return false, fmt.Errorf("snapshot record %q: bad", k)
		}
		l.mu.Lock()
		l.frozen = append(l.frozen, s.Epoch)
		l.mu.Unlock()
		return true, nil
	case k[0] == pChange:
		e, logical, err := decodeChangeKey(k)
		if err != nil || e > l.epoch || len(v) != 0 || len(logical) == 0 {
			return false, fmt.Errorf("change log record %x: bad", k)
		}
		return true, nil
	case !l.snapshots:
		return false, l.check(k, v, inodes, bytes)
	}
	// A physical version: a tombstone, or a live payload checked as the
	// record it is. Usage comes from the trailer: versions are not inodes.
	logical, e, err := splitVersion(k)
	if err != nil || e == 0 || e > l.epoch {
		return false, fmt.Errorf("version key %x: bad or above the dump's epoch %d", k, l.epoch)
	}
	switch {
	case isTombstone(v):
	case len(v) > 0 && v[0] == tagLive && logical[0] == pAttr:
		// A snapshot may see an inode without a link (unlinked while
		// open when it was taken).
		ino, err := decodeAttrKey(logical)
		if err != nil {
			return false, err
		}
		if _, err := decodeAttr(v[1:]); err != nil {
			return false, err
		}
		atomicMax(&l.maxIno, uint64(ino))
	case len(v) > 0 && v[0] == tagLive:
		var i, b uint64
		if err := l.check(logical, v[1:], &i, &b); err != nil {
			return false, err
		}
	default:
		return false, fmt.Errorf("version %x: bad tag", k)
	}
	return true, nil
}

// check validates one record as the store would read it.
func (l *loader) check(k, v []byte, inodes, bytes *uint64) error {
	switch k[0] {
	case pAttr:
		ino, err := decodeAttrKey(k)
		if err != nil {
			return err
		}
		a, err := decodeAttr(v)
		if err != nil {
			return err
		}
		if a.Nlink == 0 {
			return fmt.Errorf("inode %d has no link", ino)
		}
		*inodes++
		*bytes += uint64(usageBytes(&a))
		atomicMax(&l.maxIno, uint64(ino))
	case pDentry:
		if _, _, err := decodeDentryKey(k); err != nil {
			return err
		}
		if _, _, err := decodeDentry(v); err != nil {
			return err
		}
	case pSymlink:
		if _, err := decodeSymlinkKey(k); err != nil {
			return err
		}
		if len(v) == 0 || len(v) > MaxSymlinkLen {
			return fmt.Errorf("symlink target of %d bytes", len(v))
		}
	case pXattr:
		if _, _, err := decodeXattrKey(k); err != nil {
			return err
		}
	case pChunk:
		if _, _, err := decodeChunkKey(k); err != nil {
			return err
		}
		ss, err := decodeSlices(v)
		if err != nil {
			return err
		}
		for _, s := range ss {
			atomicMax(&l.maxSlice, base.SliceNumber(s.ID))
		}
	case pBlob:
		if _, err := decodeBlobKey(k); err != nil {
			return err
		}
	case pQuota:
		dir, shard, err := decodeQuotaKey(k)
		if err != nil {
			return err
		}
		if shard >= 0 {
			return fmt.Errorf("quota usage shard %x in a dump (usage is counted again at load)", k)
		}
		if _, err := decodeQuotaRecord(dir, v); err != nil {
			return err
		}
	case pShared:
		if _, err := decodeSharedKey(k); err != nil {
			return err
		}
		if n, err := decodeU32(v); err != nil || n == 0 {
			return fmt.Errorf("slice owner count %x", v)
		}
	default:
		return fmt.Errorf("unknown record kind %q", k[0])
	}
	return nil
}

// recountQuotas counts the usage of the loaded directory quotas from the
// loaded tree: a dump carries the quotas' records, not their usage, which
// is not versioned and so not of the dump's instant.
func recountQuotas(ctx context.Context, store kv.Store) error {
	m, err := Open(ctx, store, Options{})
	if err != nil {
		return err
	}
	defer m.Close()
	if _, err := m.CheckQuotas(ctx, true); err != nil {
		return fmt.Errorf("counting the directory quotas: %w", err)
	}
	return nil
}

// liveEpoch is the loaded volume's live epoch: 1, or with the snapshots
// the dump's (its records are the versions that epoch sees).
func (l *loader) liveEpoch() uint64 {
	if l.snapshots {
		return l.epoch
	}
	return 1
}

// maxSkippedSlice bounds the slice counter LoadOptions.SkipSlices moves:
// far below base.InlineBit, whose bit a slice number never has.
const maxSkippedSlice = 1 << 62

func atomicMax(a *atomic.Uint64, v uint64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}

// finish checks the totals against the trailer's and makes the store a
// volume: settings, epoch, counters, and the marker removed, in one
// transaction.
func (l *loader) finish(ctx context.Context, s Settings, h dumpfile.Header, extra map[string]uint64, skip uint64) error {
	nextIno, nextSlice := extra[extraNextInode], extra[extraNextSlice]
	if l.snapshots {
		// Usage is what the dump's epoch sees, which the versions do not
		// say record by record: the trailer's (checksummed) totals.
		l.inodes.Store(extra[extraUsedInodes])
		l.bytes.Store(extra[extraUsedBytes])
	}
	switch {
	case extra[extraUsedInodes] != l.inodes.Load():
		return fmt.Errorf("the dump counts %d inodes, %d were loaded: %w", extra[extraUsedInodes], l.inodes.Load(), dumpfile.ErrFormat)
	case extra[extraUsedBytes] != l.bytes.Load():
		return fmt.Errorf("the dump counts %d bytes of files, %d were loaded: %w", extra[extraUsedBytes], l.bytes.Load(), dumpfile.ErrFormat)
	case nextIno <= l.maxIno.Load() || nextSlice <= l.maxSlice.Load():
		return fmt.Errorf("the dump's counters (next inode %d, next slice %d) are not above what it holds (inode %d, slice %d): %w",
			nextIno, nextSlice, l.maxIno.Load(), l.maxSlice.Load(), dumpfile.ErrFormat)
	}
	if skip > 0 && skip < maxSkippedSlice && nextSlice < maxSkippedSlice-skip {
		nextSlice += skip
	}
	root := false
	err := l.store.View(ctx, func(r kv.Reader) error {
		_, ok, err := vget(r, attrKey(base.RootIno), l.liveEpoch())
		root = ok
		return err
	})
	if err != nil {
		return err
	}
	if !root {
		return fmt.Errorf("the dump has no root directory: %w", dumpfile.ErrFormat)
	}
	js, err := json.Marshal(s)
	if err != nil {
		return err
	}
	err = l.store.Update(ctx, func(tx kv.Txn) error {
		v, err := tx.Get(loadKey())
		if err != nil {
			return err
		}
		var lm loadMarker
		if v == nil || json.Unmarshal(v, &lm) != nil || lm.DumpID != h.ID {
			return errors.New("the load marker changed under the load: another load ran into the same store")
		}
		tx.Set(settingsKey(), js)
		tx.Set(epochKey(), u64(nil, l.liveEpoch()))
		slices.Sort(l.frozen)
		tx.Set(frozenKey(), encodeU64s(l.frozen))
		tx.Set(counterKey(counterNextInode), u64(nil, nextIno))
		tx.Set(counterKey(counterNextSlice), u64(nil, nextSlice))
		tx.Set(counterKey(counterUsedBytes), u64(nil, l.bytes.Load()))
		tx.Set(counterKey(counterUsedInodes), u64(nil, l.inodes.Load()))
		tx.Set(counterKey(counterNextSess), u64(nil, 1))
		tx.Delete(loadKey())
		return nil
	})
	if err != nil {
		return err
	}
	return l.store.Sync(ctx)
}
