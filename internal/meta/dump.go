package meta

// Dump: the volume's metadata as of one instant, as one stream of records
// (package dumpfile; load.go reads it back into an empty store of any
// engine).
//
// The instant is a snapshot's epoch: an existing snapshot, or one taken
// for the dump and deleted after it. Versions at or below a frozen epoch
// never change, so the dump reads them in many small views, in parallel
// over ranges of inode numbers, while clients keep writing; no long
// transaction holds the store.
//
// A dump holds, for every inode that has a name at the epoch: its
// attributes, its entries (if a directory), its symlink target, xattrs
// and chunk records; then the inline blocks of the slices those chunk
// records reference, and the extra-owner counts of the slices referenced
// by more than one chunk record. Nothing bound to sessions is dumped
// (sessions, holds, locks, leases, reservations), nor what the epoch's
// snapshot alone keeps (other snapshots, the change log), nor inodes
// without a name (open but unlinked files: the loaded volume has no
// process holding them). Pending deletes are not dumped either: the dumped
// tree does not reference their slices.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/dumpfile"
	"github.com/cairnfs/cairn/internal/kv"
)

// DumpLayout is the version of the record layout in dumps (the header's
// meta_version): the logical keys and payloads of keys.go and codec.go.
// Layout 2 added the directory quotas: 'q' records, and attributes of 79
// bytes (Attr.Quota) beside those of 71. A load reads layouts 1 and 2.
const DumpLayout = 2

// minDumpLayout is the oldest layout a load reads.
const minDumpLayout = 1

// dumpPage and dumpPageBytes bound what one view reads; dumpFrame the raw
// bytes of one frame.
// (Variables: the tests make them small to cross every bound.)
var (
	dumpPage      = 4096
	dumpPageBytes = 1 << 20
	dumpFrame     = 1 << 20
)

// Dump trailer totals (dumpfile.Trailer.Extra), checked by Load.
const (
	extraNextInode  = "next_inode"
	extraNextSlice  = "next_slice"
	extraUsedInodes = "used_inodes"
	extraUsedBytes  = "used_bytes"
)

// DumpOptions tune Dump.
type DumpOptions struct {
	// Snapshot is the snapshot to dump; empty: take one for the dump and
	// delete it after.
	Snapshot string
	// Workers read in parallel (default: 4 per CPU, at least 8).
	Workers int
	// Progress, if set, is updated as the dump goes.
	Progress *DumpProgress
	// Snapshots: the dump also holds the volume's snapshots (dumpsnap.go).
	// Not with Snapshot.
	Snapshots bool
}

// DumpProgress counts what a dump or a load has done so far; safe to
// read while it runs.
type DumpProgress struct {
	Inodes  atomic.Int64 // attribute records
	Records atomic.Int64 // all records
	Bytes   atomic.Int64 // bytes written (dump) or read (load)
}

// DumpStats is what a finished dump holds.
type DumpStats struct {
	Snapshot string            `json:"snapshot"` // "" when the dump took its own
	Epoch    uint64            `json:"epoch"`
	Records  map[string]uint64 `json:"records"` // per kind (a key prefix letter)
	Inodes   uint64            `json:"inodes"`
	Bytes    int64             `json:"bytes"` // of the dump file
}

// Dump writes the volume's metadata to w (see the file comment). It
// returns once w has every byte; on error, what w got is not a valid dump
// (it has no trailer).
func (m *Meta) Dump(ctx context.Context, w io.Writer, o DumpOptions) (DumpStats, error) {
	if m.isClosed() {
		return DumpStats{}, kv.ErrClosed
	}
	if o.Snapshots && o.Snapshot != "" {
		return DumpStats{}, fmt.Errorf("dump: a dump with the snapshots is of the volume now, not of snapshot %q: %w", o.Snapshot, base.ErrInvalid)
	}
	snap, done, err := m.dumpSnapshot(ctx, o.Snapshot)
	if err != nil {
		return DumpStats{}, err
	}
	defer done()
	var sd *snapDump
	if o.Snapshots {
		if sd, err = m.beginSnapDump(ctx, snap.Epoch); err != nil {
			return DumpStats{}, fmt.Errorf("dump: %w", err)
		}
	}
	settings, err := json.Marshal(m.Settings())
	if err != nil {
		return DumpStats{}, err
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	h := dumpfile.Header{ID: hex.EncodeToString(id[:]), Meta: DumpLayout, Settings: settings,
		Source: m.store.Name(), Snapshot: o.Snapshot, Epoch: snap.Epoch,
		Created: time.Now().UTC().Format(time.RFC3339Nano), Tool: "cairn", Snapshots: o.Snapshots}
	dw, err := dumpfile.NewWriter(w, h)
	if err != nil {
		return DumpStats{}, err
	}
	d := &dumper{m: m, epoch: snap.Epoch, progress: o.Progress, owners: newSliceCounter(), snaps: sd}
	if d.progress == nil {
		d.progress = new(DumpProgress)
	}
	var nextIno, nextSlice uint64
	err = m.viewAgain(ctx, func(r kv.Reader) (err error) {
		if nextIno, err = counter(r, counterNextInode); err != nil {
			return err
		}
		nextSlice, err = counter(r, counterNextSlice)
		return err
	})
	if err != nil {
		return DumpStats{}, err
	}
	if err := d.run(ctx, dw, nextIno, nextSlice, o.Workers); err != nil {
		return DumpStats{}, fmt.Errorf("dump: %w", err)
	}
	if sd != nil {
		if err := m.endSnapDump(ctx, sd); err != nil {
			return DumpStats{}, fmt.Errorf("dump: %w", err)
		}
	}
	extra := map[string]uint64{extraNextInode: nextIno, extraNextSlice: nextSlice,
		extraUsedInodes: d.inodes.Load(), extraUsedBytes: d.bytes.Load()}
	if err := dw.Close(extra); err != nil {
		return DumpStats{}, fmt.Errorf("dump: %w", err)
	}
	d.progress.Bytes.Store(dw.Bytes())
	return DumpStats{Snapshot: o.Snapshot, Epoch: snap.Epoch, Records: d.counts(), Inodes: d.inodes.Load(), Bytes: dw.Bytes()}, nil
}

// dumpSnapshot returns the snapshot to dump and what to do when done:
// delete it if the dump took it.
func (m *Meta) dumpSnapshot(ctx context.Context, name string) (Snapshot, func(), error) {
	if name != "" {
		s, err := m.SnapshotByName(ctx, name)
		return s, func() {}, err
	}
	m.dropStaleDumpSnapshots(ctx)
	var r [3]byte
	_, _ = rand.Read(r[:])
	name = dumpSnapshotPrefix + time.Unix(0, m.now()).UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(r[:])
	s, err := m.CreateSnapshot(ctx, name)
	if err != nil {
		return Snapshot{}, nil, fmt.Errorf("dump: taking its snapshot: %w", err)
	}
	return s, func() {
		if err := m.DeleteSnapshot(context.WithoutCancel(ctx), name, nil); err != nil {
			m.log.Warn("dump: deleting its snapshot failed; delete it by hand", "snapshot", name, "err", err)
		}
	}, nil
}

// dumpSnapshotPrefix starts the names of the snapshots dumps take for
// themselves (hidden in a listing of /.snapshots).
const dumpSnapshotPrefix = ".cairn-dump-"

// staleDumpSnapshot is the age past which a dump's own snapshot is taken
// to belong to a dump that was killed: it is deleted by the next dump.
const staleDumpSnapshot = 24 * time.Hour

// dropStaleDumpSnapshots deletes the snapshots of dumps that were killed
// before they could delete their own (they would hold space for ever).
// Failures are logged: they do not stop a dump.
func (m *Meta) dropStaleDumpSnapshots(ctx context.Context) {
	snaps, err := m.Snapshots(ctx)
	if err != nil {
		return
	}
	for _, s := range snaps {
		if !strings.HasPrefix(s.Name, dumpSnapshotPrefix) || time.Unix(0, m.now()).Sub(s.Created) < staleDumpSnapshot {
			continue
		}
		m.log.Warn("dump: deleting the snapshot of a dump that did not finish", "snapshot", s.Name, "created", s.Created)
		if err := m.DeleteSnapshot(ctx, s.Name, nil); err != nil && !errors.Is(err, base.ErrNotFound) {
			m.log.Warn("dump: deleting a stale dump snapshot failed", "snapshot", s.Name, "err", err)
		}
	}
}

// dumper is one running dump.
type dumper struct {
	m        *Meta
	epoch    uint64
	progress *DumpProgress
	owners   *sliceCounter
	snaps    *snapDump     // nil: a dump without the snapshots
	inodes   atomic.Uint64 // inodes dumped
	bytes    atomic.Uint64 // their usage (usageBytes)
	mu       sync.Mutex
	records  map[byte]uint64
}

func (d *dumper) counts() map[string]uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]uint64{}
	for k, n := range d.records {
		out[string(k)] = n
	}
	return out
}

// run reads the per-inode records over ranges of inode numbers in
// parallel, then the blobs and owner counts, and writes the frames as
// they come.
func (d *dumper) run(ctx context.Context, dw *dumpfile.Writer, nextIno, nextSlice uint64, workers int) error {
	if workers <= 0 {
		workers = max(8, 4*runtime.GOMAXPROCS(0))
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	frames := make(chan dumpfile.Sealed, 2*workers)
	wrote := make(chan error, 1)
	go func() {
		var err error
		for f := range frames {
			if err == nil {
				if err = dw.Write(f); err != nil {
					cancel(err)
				}
				d.progress.Bytes.Store(dw.Bytes())
			}
		}
		wrote <- err
	}()
	err := d.inodeRanges(ctx, frames, nextIno, workers)
	if err == nil {
		err = d.blobs(ctx, frames, nextSlice, workers)
	}
	if err == nil {
		err = d.ownerCounts(ctx, frames)
	}
	if err == nil {
		err = d.quotas(ctx, frames)
	}
	if err == nil && d.snaps != nil {
		err = d.snapRecords(ctx, frames)
	}
	close(frames)
	if werr := <-wrote; werr != nil {
		return werr
	}
	return err
}

// inodeRanges dumps the per-inode records of [1, nextIno) (the last range
// open-ended) split into ranges that workers take in turn.
func (d *dumper) inodeRanges(ctx context.Context, frames chan<- dumpfile.Sealed, nextIno uint64, workers int) error {
	step := max(1, nextIno/uint64(workers*16))
	var list [][2]uint64
	for lo := uint64(1); ; lo += step {
		if lo+step >= nextIno || lo+step < lo {
			list = append(list, [2]uint64{lo, math.MaxUint64})
			break
		}
		list = append(list, [2]uint64{lo, lo + step})
	}
	return parallel(ctx, len(list), workers, func(i int) error {
		if d.snaps != nil {
			return d.inodeRangeSnap(ctx, frames, list[i][0], list[i][1])
		}
		return d.inodeRange(ctx, frames, list[i][0], list[i][1])
	})
}

// parallel runs fn(0) … fn(n-1) on workers goroutines and returns the
// first error, or the context's.
func parallel(ctx context.Context, n, workers int, fn func(i int) error) error {
	tasks := make(chan int, n)
	for i := range n {
		tasks <- i
	}
	close(tasks)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range tasks {
				if err := fn(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	return ctx.Err()
}

// inodeRange dumps the records of the inodes in [lo, hi).
func (d *dumper) inodeRange(ctx context.Context, frames chan<- dumpfile.Sealed, lo, hi uint64) error {
	unnamed := map[base.Ino]bool{} // attributes with nlink 0: left out
	for _, p := range inodeKinds { // attributes first: unnamed inodes are left out
		out := d.sink(ctx, frames, p)
		err := d.scanRange(ctx, p, lo, hi, func(logical, payload []byte) error {
			if p == pAttr {
				a, err := decodeAttr(payload)
				if err != nil {
					return fmt.Errorf("inode record %x: %w", logical, err)
				}
				ino, _ := keyIno(logical)
				if a.Nlink == 0 {
					unnamed[ino] = true
					return nil
				}
				d.inodes.Add(1)
				d.bytes.Add(uint64(usageBytes(&a)))
				d.progress.Inodes.Add(1)
			} else if p != pDentry {
				if ino, _ := keyIno(logical); unnamed[ino] {
					return nil
				}
			}
			if p == pChunk {
				ss, err := decodeSlices(payload)
				if err != nil {
					return fmt.Errorf("chunk record %x: %w", logical, err)
				}
				d.owners.addRecord(ss)
			}
			return out.add(logical, payload)
		})
		if err != nil {
			return err
		}
		if err := out.flush(); err != nil {
			return err
		}
	}
	return nil
}

// sink gathers the records of one kind into frames and hands each full
// frame, sealed, to the writer.
type sink struct {
	d      *dumper
	ctx    context.Context
	frames chan<- dumpfile.Sealed
	b      dumpfile.Batch
}

func (d *dumper) sink(ctx context.Context, frames chan<- dumpfile.Sealed, kind byte) *sink {
	return &sink{d: d, ctx: ctx, frames: frames, b: dumpfile.Batch{Kind: kind}}
}

// add adds one record, sending the frame when it is full.
func (s *sink) add(k, v []byte) error {
	s.b.Add(k, v)
	s.d.progress.Records.Add(1)
	if len(s.b.Raw) >= dumpFrame {
		return s.flush()
	}
	return nil
}

// flush sends what the frame holds.
func (s *sink) flush() error {
	if s.b.Records == 0 {
		return nil
	}
	s.d.count(s.b.Kind, s.b.Records)
	select {
	case s.frames <- s.b.Seal():
	case <-s.ctx.Done():
		return context.Cause(s.ctx)
	}
	s.b = dumpfile.Batch{Kind: s.b.Kind}
	return nil
}

func (d *dumper) count(kind byte, n uint32) {
	d.mu.Lock()
	if d.records == nil {
		d.records = map[byte]uint64{}
	}
	d.records[kind] += uint64(n)
	d.mu.Unlock()
}

// page is the records one view read, copied out of it: at most dumpPage
// records or dumpPageBytes bytes.
type page struct {
	arena []byte
	lens  []int // key and value lengths, in turn
	full  bool  // the scan stopped at the bound: more may follow
}

func (p *page) reset() { p.arena, p.lens, p.full = p.arena[:0], p.lens[:0], false }

// more reports whether the page takes another record after the one just
// added; when it does not, it is full.
func (p *page) more() bool {
	p.full = p.len() >= dumpPage || len(p.arena) >= dumpPageBytes
	return !p.full
}

func (p *page) add(k, v []byte) {
	p.arena = append(append(p.arena, k...), v...)
	p.lens = append(p.lens, len(k), len(v))
}

func (p *page) len() int { return len(p.lens) / 2 }

// each calls fn for every record; lastKey is the last one's key.
func (p *page) each(fn func(k, v []byte) error) (lastKey []byte, err error) {
	off := 0
	for i := 0; i < len(p.lens); i += 2 {
		k := p.arena[off : off+p.lens[i]]
		v := p.arena[off+p.lens[i] : off+p.lens[i]+p.lens[i+1]]
		off += p.lens[i] + p.lens[i+1]
		if err := fn(k, v); err != nil {
			return nil, err
		}
		lastKey = k
	}
	return lastKey, nil
}

// scanRange calls fn for every live record of kind p whose inode (or
// parent) is in [lo, hi), as of the dump's epoch, reading dumpPage records
// per view. fn runs outside the view.
func (d *dumper) scanRange(ctx context.Context, p byte, lo, hi uint64, fn func(logical, payload []byte) error) error {
	start := inodeFrom(p, lo)
	end := kv.PrefixEnd(prefixOnly(p))
	if hi != math.MaxUint64 {
		end = inodeFrom(p, hi)
	}
	return d.paged(ctx, start, kv.PrefixEnd, fn, func(r kv.Reader, from []byte, pg *page) error {
		return vscanRange(r, from, end, d.epoch, func(logical, _, payload []byte) bool {
			pg.add(logical, payload)
			return pg.more()
		})
	})
}

// blobs dumps the inline blocks of the slices the dumped chunk records
// reference (blobs of other slices belong to other epochs), over ranges of
// the blob keys in parallel. The ranges split the slice numbers below
// nextSlice evenly (blobSplit); they cover every blob key whatever the
// keys look like, only their balance depends on it.
func (d *dumper) blobs(ctx context.Context, frames chan<- dumpfile.Sealed, nextSlice uint64, workers int) error {
	bounds := [][]byte{prefixOnly(pBlob)}
	if n := uint64(workers * 4); nextSlice > n {
		for i := uint64(1); i < n; i++ {
			bounds = append(bounds, blobSplit(base.InlineBit|nextSlice/n*i))
		}
	}
	bounds = append(bounds, kv.PrefixEnd(prefixOnly(pBlob)))
	return parallel(ctx, len(bounds)-1, workers, func(i int) error {
		return d.blobRange(ctx, frames, bounds[i], bounds[i+1])
	})
}

// blobRange dumps the blobs of [start, end) that the dump references.
func (d *dumper) blobRange(ctx context.Context, frames chan<- dumpfile.Sealed, start, end []byte) error {
	out := d.sink(ctx, frames, pBlob)
	err := d.scanRaw(ctx, start, end, func(k, v []byte) error {
		// A blob whose key names no slice is dumped: nothing says it is
		// not needed.
		if id, ok := blobSlice(k); !ok || d.owners.has(id) {
			return out.add(k, v)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return out.flush()
}

// scanRaw calls fn for every key of [start, end) with its value, reading
// a page per view; fn runs outside the view.
func (d *dumper) scanRaw(ctx context.Context, start, end []byte, fn func(k, v []byte) error) error {
	return d.paged(ctx, start, keyAfter, fn, func(r kv.Reader, from []byte, pg *page) error {
		return r.Scan(from, end, false, func(k, v []byte) bool {
			pg.add(k, v)
			return pg.more()
		})
	})
}

// paged fills a page per view with read (from start, then from resume of
// the last key read) and calls fn for its records outside the view, until
// a page is not full.
func (d *dumper) paged(ctx context.Context, start []byte, resume func(last []byte) []byte, fn func(k, v []byte) error,
	read func(r kv.Reader, from []byte, pg *page) error) error {
	var pg page
	for {
		err := d.m.viewAgain(ctx, func(r kv.Reader) error {
			pg.reset()
			return read(r, start, &pg)
		})
		if err != nil {
			return err
		}
		last, err := pg.each(fn)
		if err != nil || !pg.full {
			return err
		}
		start = resume(last)
		if err := context.Cause(ctx); err != nil {
			return err
		}
	}
}

// ownerCounts writes the extra-owner count of every slice that more than
// one dumped chunk record references.
func (d *dumper) ownerCounts(ctx context.Context, frames chan<- dumpfile.Sealed) error {
	shared := d.owners.shared()
	ids := make([]uint64, 0, len(shared))
	for id := range shared {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := d.sink(ctx, frames, pShared)
	for _, id := range ids {
		if err := out.add(sharedKey(id), u32(nil, shared[id]-1)); err != nil {
			return err
		}
	}
	return out.flush()
}

// quotas writes the record of every directory quota. Their usage is not
// versioned, so not of the dump's instant: the load counts it again from
// the tree, whose attributes name their quota.
func (d *dumper) quotas(ctx context.Context, frames chan<- dumpfile.Sealed) error {
	type rec struct{ k, v []byte }
	var recs []rec
	err := d.m.viewAgain(ctx, func(r kv.Reader) error {
		recs = recs[:0]
		return r.Scan(prefixOnly(pQuota), kv.PrefixEnd(prefixOnly(pQuota)), false, func(k, v []byte) bool {
			if _, shard, err := decodeQuotaKey(k); err == nil && shard < 0 {
				recs = append(recs, rec{append([]byte(nil), k...), append([]byte(nil), v...)})
			}
			return true
		})
	})
	if err != nil {
		return err
	}
	out := d.sink(ctx, frames, pQuota)
	for _, r := range recs {
		if err := out.add(r.k, r.v); err != nil {
			return err
		}
	}
	return out.flush()
}

// sliceCounter counts, per slice, the chunk records that reference it:
// one bit per slice number for "seen" (in blocks allocated as the numbers
// come: a few MiB for ten million slices), and a map for those seen more
// than once (rare: restores and cross-chunk slices).
type sliceCounter struct {
	mu     sync.RWMutex
	blocks map[uint64]*[1024]atomic.Uint64 // slice number / 65536 → bits
	smu    sync.Mutex
	multi  map[uint64]uint32 // slice id → chunk records, when more than one
}

func newSliceCounter() *sliceCounter {
	return &sliceCounter{blocks: map[uint64]*[1024]atomic.Uint64{}, multi: map[uint64]uint32{}}
}

// addRecord counts one chunk record referencing ss (each id once).
func (c *sliceCounter) addRecord(ss []base.Slice) {
	for i, s := range ss {
		if s.ID == 0 || slices.ContainsFunc(ss[:i], func(o base.Slice) bool { return o.ID == s.ID }) {
			continue
		}
		n := base.SliceNumber(s.ID)
		w, bit := c.word(n, true), uint64(1)<<(n%64)
		if w.Or(bit)&bit == 0 {
			continue
		}
		c.smu.Lock()
		if c.multi[s.ID] == 0 {
			c.multi[s.ID] = 1
		}
		c.multi[s.ID]++
		c.smu.Unlock()
	}
}

// has reports whether a chunk record referenced slice id.
func (c *sliceCounter) has(id uint64) bool {
	n := base.SliceNumber(id)
	w := c.word(n, false)
	return w != nil && w.Load()&(1<<(n%64)) != 0
}

func (c *sliceCounter) word(n uint64, create bool) *atomic.Uint64 {
	c.mu.RLock()
	blk := c.blocks[n>>16]
	c.mu.RUnlock()
	if blk == nil {
		if !create {
			return nil
		}
		c.mu.Lock()
		if blk = c.blocks[n>>16]; blk == nil {
			blk = new([1024]atomic.Uint64)
			c.blocks[n>>16] = blk
		}
		c.mu.Unlock()
	}
	return &blk[(n&0xffff)/64]
}

// shared returns the slices referenced by more than one chunk record,
// with their counts.
func (c *sliceCounter) shared() map[uint64]uint32 {
	c.smu.Lock()
	defer c.smu.Unlock()
	return c.multi
}

// errDumpLayout: a dump of another record layout.
var errDumpLayout = errors.New("dump of another record layout")
