package vfs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/chunk"
	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/meta"
)

// Options configures a VFS.
type Options struct {
	// Logger receives operation errors that the caller only sees as EIO.
	// Default: discard.
	Logger *slog.Logger
	// ReadOnly refuses every modification with EROFS.
	ReadOnly bool
	// FlushInterval is how often buffered writes of open files that have not
	// been flushed by close or fsync are committed anyway, so data written
	// through a long-lived handle becomes visible and bounded in memory.
	// Default 5s.
	FlushInterval time.Duration
	// DeleteDelay is how long a slice that metadata no longer references is
	// kept before its objects are deleted, so that reads which resolved the
	// chunk just before a compaction or truncate replaced it still find
	// their blocks. Default 10s.
	DeleteDelay time.Duration
	// SyncInterval bounds how long committed metadata and uploaded objects
	// may stay without a disk flush (see docs/durability.md). Default 1s;
	// negative disables the background sync.
	SyncInterval time.Duration
	// AppendAtEOF makes writes through an O_APPEND handle land at the end
	// of the file as Cairn knows it, whatever offset the caller sends: on
	// shared volumes the kernel's idea of the size can be another client's
	// old one.
	AppendAtEOF bool
	// Snapshot, if set, is served at the root instead of the live volume,
	// read-only (ReadOnly is implied), without a /.snapshots directory.
	Snapshot *meta.Snapshot
	// SnapshotCheck bounds how long reads through an open handle of a
	// snapshot file go on from its cached chunk maps after the snapshot
	// was deleted; then they fail with ESTALE (metadata operations fail at
	// once). Default 1s.
	SnapshotCheck time.Duration
}

func (o *Options) setDefaults() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.FlushInterval <= 0 {
		o.FlushInterval = 5 * time.Second
	}
	if o.DeleteDelay == 0 {
		o.DeleteDelay = 10 * time.Second
	}
	if o.SyncInterval == 0 {
		o.SyncInterval = time.Second
	}
	if o.SnapshotCheck <= 0 {
		o.SnapshotCheck = time.Second
	}
}

// VFS implements POSIX operations over meta and chunk. Safe for concurrent
// use. Every method returns 0 or an errno.
type VFS struct {
	m    meta.FS // all vfs needs of meta
	cs   *chunk.Store
	opts Options
	log  *slog.Logger

	mu      sync.Mutex
	files   map[base.Ino]*file
	handles map[uint64]*handle
	nextFh  uint64

	bg         sync.WaitGroup
	stop       chan struct{}
	compactQ   chan compactJob
	compactMu  sync.Mutex
	compacting map[compactJob]bool
	closeOnce  sync.Once

	noCap sync.Map // base.Ino → time.Time: security.capability known absent
	gone  goneSet  // inodes this VFS's unlinks destroyed

	lockMu     sync.Mutex
	lockOwners map[lockRef]bool // POSIX lock owners that took a lock here

	root     *tree // the tree at the root: the live volume or Options.Snapshot
	snapsDir *tree // /.snapshots; nil when serving a snapshot

	slotMu  sync.Mutex
	bySlot  []*tree          // snapshot trees; slot s is bySlot[s-1]
	byEpoch map[uint64]*tree // the same, by snapshot epoch
}

type compactJob struct {
	ino   base.Ino
	index uint32
}

// New returns a VFS and starts its background workers; Close stops them.
func New(m meta.FS, cs *chunk.Store, opts Options) *VFS {
	opts.setDefaults()
	if opts.Snapshot != nil {
		opts.ReadOnly = true
	}
	v := &VFS{
		m:          m,
		cs:         cs,
		opts:       opts,
		log:        opts.Logger,
		files:      make(map[base.Ino]*file),
		handles:    make(map[uint64]*handle),
		nextFh:     1,
		stop:       make(chan struct{}),
		compactQ:   make(chan compactJob, 1024),
		compacting: make(map[compactJob]bool),
		byEpoch:    make(map[uint64]*tree),
	}
	if s := opts.Snapshot; s != nil {
		v.root = &tree{r: m.View(*s), ro: true, snap: s}
	} else {
		v.root = &tree{r: m}
		v.snapsDir = &tree{r: snapshotsDir{v}, ro: true}
	}
	v.bg.Add(3)
	go v.deleteLoop()
	go v.compactLoop()
	go v.flushLoop()
	return v
}

// Chunks returns the data store.
func (v *VFS) Chunks() *chunk.Store { return v.cs }

// errno converts err, logging errors that become EIO so they are never
// silent: all but the bad blocks chunk has logged (chunk.Logged), once
// per block and minute, with the file (readingFile).
func (v *VFS) errno(op string, err error) syscall.Errno {
	e := Errno(err)
	if e == syscall.EIO && !chunk.Logged(err) {
		v.log.Error("I/O error", "op", op, "err", err)
	}
	return e
}

// readingFile marks ctx as reading the content of inode ino (as the
// front end numbers it), so that the bad blocks chunk meets are logged
// with the file as well as the object.
func readingFile(ctx context.Context, ino base.Ino) context.Context {
	return chunk.WithInode(ctx, ino)
}

func (v *VFS) roCheck() syscall.Errno {
	if v.opts.ReadOnly {
		return syscall.EROFS
	}
	return 0
}

// FlushAll commits the buffered writes of every open file and makes
// everything durable.
func (v *VFS) FlushAll(ctx context.Context) error {
	first := v.flushFiles(ctx)
	if err := v.syncAll(ctx); err != nil && first == nil {
		first = err
	}
	return first
}

// flushFiles commits the buffered writes of every open file.
func (v *VFS) flushFiles(ctx context.Context) error {
	var first error
	for _, f := range v.openFiles() {
		if err := f.flush(ctx); err != nil && first == nil {
			first = fmt.Errorf("flush inode %d: %w", f.ino, err)
		}
	}
	return first
}

// Close flushes every open file's buffered writes, syncs, and stops the
// background workers. Handles still open are left valid for reading state
// but should not be used afterwards.
func (v *VFS) Close(ctx context.Context) error {
	first := v.flushFiles(ctx)
	v.closeOnce.Do(func() { close(v.stop) })
	v.bg.Wait()
	if err := v.syncAll(ctx); err != nil && first == nil {
		first = err
	}
	return first
}

// syncAll makes uploaded objects and then committed metadata durable, in
// that order, so metadata never points at objects a machine crash can lose.
func (v *VFS) syncAll(ctx context.Context) error {
	if err := v.cs.SyncObjects(ctx); err != nil {
		return fmt.Errorf("sync objects: %w", err)
	}
	if err := v.m.Sync(ctx); err != nil {
		return fmt.Errorf("sync metadata: %w", err)
	}
	return nil
}

// deleteScanGap is the least time between two scans of the pending
// deletes that this client's commits trigger: a tenth of the delete delay,
// at most a second. Each scan reads up to a few thousand pending records;
// run after every commit that queued a delete, the scans took 40% of the
// daemon's CPU while small files were being deleted. A slice first seen a
// gap late is deleted a gap late.
func (v *VFS) deleteScanGap() time.Duration {
	return min(v.opts.DeleteDelay/10, time.Second)
}

func (v *VFS) deleteLoop() {
	defer v.bg.Done()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	ctx := context.Background()
	seen := map[uint64]time.Time{} // when each pending slice was first seen
	var last time.Time             // the last scan
	var later <-chan time.Time     // a scan put off by deleteScanGap
	for {
		select {
		case <-v.stop:
			return
		case <-tick.C:
		case <-later:
			later = nil
		case <-v.m.DeletesPending():
			if wait := v.deleteScanGap() - time.Since(last); wait > 0 {
				if later == nil {
					later = time.After(wait)
				}
				continue
			}
		}
		last = time.Now()
		slices, err := v.m.TakeDeletes(ctx, 4096)
		if err != nil {
			v.log.Warn("listing pending deletes", "err", err)
			continue
		}
		now := time.Now()
		var due []base.Slice
		for _, s := range slices {
			first, ok := seen[s.ID]
			if !ok {
				seen[s.ID] = now
				first = now
			}
			if now.Sub(first) >= v.opts.DeleteDelay {
				due = append(due, s)
			}
		}
		r, err := v.cs.DeleteQueued(ctx, v.m, due)
		if r.BatchErr != nil {
			v.log.Warn("deleting slices in batches failed; deleting one at a time", "slices", len(due), "err", r.BatchErr)
		}
		for _, f := range r.Failed {
			v.log.Warn("deleting slice", "slice", f.ID, "err", f.Err)
		}
		if err != nil {
			v.log.Warn("finishing deletes", "err", err)
			continue
		}
		for _, id := range r.Finished {
			delete(seen, id)
		}
	}
}

func (v *VFS) scheduleCompaction(ino base.Ino, index uint32) {
	j := compactJob{ino, index}
	v.compactMu.Lock()
	if v.compacting[j] {
		v.compactMu.Unlock()
		return
	}
	v.compacting[j] = true
	v.compactMu.Unlock()
	select {
	case v.compactQ <- j:
	default:
		v.compactMu.Lock()
		delete(v.compacting, j)
		v.compactMu.Unlock()
	}
}

func (v *VFS) compactLoop() {
	defer v.bg.Done()
	ctx := context.Background()
	for {
		select {
		case <-v.stop:
			return
		case j := <-v.compactQ:
			if err := v.compact(ctx, j); err != nil {
				v.log.Warn("compaction", "ino", j.ino, "chunk", j.index, "err", err)
			}
			v.compactMu.Lock()
			delete(v.compacting, j)
			v.compactMu.Unlock()
		}
	}
}

// compactWindows bounds how many block-sized windows one compaction job
// rewrites before giving other chunks a turn.
const compactWindows = 16

// compact reduces the slice list of one chunk. It works window by window
// (one block size each), rewriting the slices that lie entirely inside a
// window as one slice spanning them, so the cost follows the fragmented
// range, not the chunk's 64 MiB.
//
// Which window: the one whose rewrite writes the fewest bytes per slice it
// takes off the list, and only if that is at most compactSliceCost.
// Random writes spread over a chunk fill its windows evenly; rewriting a
// 4 MiB window for each few 8 KiB writes in it made compaction a third of
// the daemon's CPU under the 8K random mix. The chunk's slices may then
// grow past the threshold, up to compactForce times it: beyond that the
// window holding the most slices is rewritten whatever its cost, which
// bounds the list (the metadata record and a read's resolve). Writes that
// fill a window densely (appends, rewrites of one region) qualify at once.
// A job stops once the chunk is down to half the threshold or no window
// qualifies. Only when no window holds two slices (slices crossing window
// boundaries) is the whole covered range rewritten. If the chunk changed
// in a way that invalidates a rewrite, the new slice is dropped; the next
// write that finds the chunk fragmented schedules another attempt. See
// docs/design/0005.
func (v *VFS) compact(ctx context.Context, j compactJob) error {
	ctx = readingFile(ctx, j.ino)
	for round := 0; round < compactWindows; round++ {
		slices, err := v.m.ReadChunk(ctx, j.ino, j.index)
		if err != nil {
			if errors.Is(err, base.ErrNotFound) {
				return nil
			}
			return err
		}
		if len(slices) < 2 || round > 0 && len(slices) <= v.m.CompactThreshold()/2 {
			return nil
		}
		force := len(slices) > compactForce*v.m.CompactThreshold()
		drop, lo, hi, some := pickWindow(slices, uint32(v.cs.BlockSize()), force)
		if drop == nil {
			if round > 0 || len(slices) <= v.m.CompactThreshold() || some {
				return nil
			}
			// No window to work on: rewrite everything the slices cover.
			lo, hi = coverage(slices)
		}
		id, err := v.m.NewSliceID(ctx)
		if err != nil {
			return err
		}
		if v.cs.Inline(j.index, hi) {
			// The start of a small file: inline, as the writer makes
			// such slices.
			id |= base.InlineBit
		}
		ns, err := v.cs.CompactRange(ctx, slices, lo, hi, id)
		if err != nil {
			v.m.ForgetSlice(id)
			return err
		}
		if err := v.m.CompactChunk(ctx, j.ino, j.index, slices, drop, ns); err != nil {
			// After an unknown outcome the chunk may point to the merged
			// slice: its object stays, and gc reclaims it if the commit
			// did not happen.
			if !errors.Is(err, kv.ErrUnknownOutcome) {
				if derr := v.cs.DeleteSlice(ctx, ns.ID, ns.Size); derr != nil {
					v.log.Warn("dropping unused compacted slice", "slice", ns.ID, "err", derr)
				}
			}
			if errors.Is(err, base.ErrNotFound) || isStaleCompaction(err) {
				return nil
			}
			return err
		}
		v.mu.Lock()
		f := v.files[j.ino]
		v.mu.Unlock()
		if f != nil {
			f.invalidateChunks(false, j.index)
		}
		if drop == nil {
			return nil
		}
	}
	return nil
}

// compactSliceCost bounds, while the chunk holds at most compactForce
// times the compaction threshold slices, the bytes a window rewrite may
// write per slice it takes off the chunk's list.
const (
	compactSliceCost = 96 << 10
	compactForce     = 8
)

// pickWindow finds the block-sized window of the chunk to rewrite among
// those holding at least two slices that lie entirely inside it: with
// force the one holding the most, else the one whose rewrite writes the
// fewest bytes per slice it removes (the range the slices span over their
// number less one, as they become one), if at most compactSliceCost. It
// returns which slices those are and the range [lo, hi) they span, or nil;
// some reports whether some window held two slices.
//
// The cost counts every byte the rewrite writes, the bytes of a slice an
// earlier rewrite made included: a window holding such a slice and a few
// new writes waits for more of them. Counting the slices' bytes as new
// data instead (their share of the range) rewrote such windows, 4 MiB, for
// two or three 8 KiB writes (design/0005-caches.md, "Compaction by the
// cost per slice").
func pickWindow(slices []base.Slice, window uint32, force bool) (drop []bool, lo, hi uint32, some bool) {
	if window == 0 {
		return nil, 0, 0, false
	}
	type win struct {
		n      int
		lo, hi uint32
	}
	wins := map[uint32]*win{}
	for _, s := range slices {
		if s.Len == 0 {
			continue
		}
		w := s.Pos / window
		if (s.Pos+s.Len-1)/window != w {
			continue
		}
		x := wins[w]
		if x == nil {
			x = &win{lo: s.Pos, hi: s.Pos + s.Len}
			wins[w] = x
		}
		x.n++
		x.lo, x.hi = min(x.lo, s.Pos), max(x.hi, s.Pos+s.Len)
	}
	best, found := uint32(0), false
	better := func(w uint32, x *win) bool {
		if !found {
			return true
		}
		b := wins[best]
		if force {
			return x.n > b.n || x.n == b.n && w < best
		}
		// span(x)/(x.n-1) < span(b)/(b.n-1), without division
		l, r := uint64(x.hi-x.lo)*uint64(b.n-1), uint64(b.hi-b.lo)*uint64(x.n-1)
		return l < r || l == r && w < best
	}
	for w, x := range wins {
		if x.n < 2 {
			continue
		}
		some = true
		if !force && uint64(x.hi-x.lo) > uint64(x.n-1)*compactSliceCost {
			continue
		}
		if better(w, x) {
			best, found = w, true
		}
	}
	if !found {
		return nil, 0, 0, some
	}
	drop = make([]bool, len(slices))
	for i, s := range slices {
		if s.Len == 0 || s.Pos/window != best || (s.Pos+s.Len-1)/window != best {
			continue
		}
		drop[i] = true
	}
	return drop, wins[best].lo, wins[best].hi, some
}

// coverage is the range [lo, hi) the slices cover.
func coverage(slices []base.Slice) (lo, hi uint32) {
	lo = ^uint32(0)
	for _, s := range slices {
		if s.Len == 0 {
			continue
		}
		lo = min(lo, s.Pos)
		hi = max(hi, s.Pos+s.Len)
	}
	return lo, hi
}

func (v *VFS) flushLoop() {
	defer v.bg.Done()
	flushTick := time.NewTicker(v.opts.FlushInterval)
	defer flushTick.Stop()
	var syncC <-chan time.Time
	if v.opts.SyncInterval > 0 {
		t := time.NewTicker(v.opts.SyncInterval)
		defer t.Stop()
		syncC = t.C
	}
	ctx := context.Background()
	for {
		select {
		case <-v.stop:
			return
		case <-flushTick.C:
			for _, f := range v.openFiles() {
				if f.idleFor() >= v.opts.FlushInterval {
					if err := f.flush(ctx); err != nil {
						v.log.Warn("background flush", "ino", f.ino, "err", err)
					}
				}
			}
		case <-syncC:
			if err := v.syncAll(ctx); err != nil {
				v.log.Warn("background sync", "err", err)
			}
		}
	}
}

func isStaleCompaction(err error) bool {
	return errors.Is(err, meta.ErrCompactionStale)
}

// goneSet remembers the last goneMax inodes this VFS destroyed by
// unlinking them. With the writeback cache (the default on embedded
// volumes; shared volumes mount without it, unless asked), the kernel
// writes a file's cached mtime back (SETATTR) when it evicts the inode,
// which for an unlinked file comes after the UNLINK: answering those from
// memory saves a metadata transaction per removed file. Inode numbers are
// never reused, so an entry cannot go stale; forgetting one only costs
// that transaction again.
type goneSet struct {
	mu   sync.Mutex
	set  map[base.Ino]struct{}
	ring []base.Ino
	next int
}

const goneMax = 4096

func (g *goneSet) add(ino base.Ino) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.set == nil {
		g.set = make(map[base.Ino]struct{}, goneMax)
		g.ring = make([]base.Ino, goneMax)
	}
	if _, ok := g.set[ino]; ok {
		return
	}
	if old := g.ring[g.next]; old != 0 {
		delete(g.set, old)
	}
	g.ring[g.next] = ino
	g.next = (g.next + 1) % goneMax
	g.set[ino] = struct{}{}
}

func (g *goneSet) has(ino base.Ino) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.set[ino]
	return ok
}
