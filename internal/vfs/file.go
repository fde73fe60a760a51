package vfs

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/chunk"
	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/meta"
)

// file is the state shared by all handles of one open inode in this
// process: its write buffer and a cache of its chunk maps. The cache is
// valid because every change to the file's content made by this process
// goes through it; changes by other clients are picked up at open
// (close-to-open consistency). A snapshot's file never changes: its
// cache is never invalidated and it has nothing to write.
type file struct {
	v    *VFS
	ino  base.Ino // front-end number; writes (live tree only) use it too
	t    *tree
	rino base.Ino // number in t
	refs int      // guarded by v.mu

	// wmu serialises writes, flushes and truncates of this file.
	wmu sync.Mutex
	w   *chunk.Writer

	mu        sync.Mutex
	chunks    map[uint32][]base.Slice
	gen       uint64 // bumped by invalidate; a list read before a bump is not cached
	length    int64  // committed length, valid if lengthOK (same rules as chunks)
	lengthOK  bool
	lastWrite atomic.Int64 // ns of the newest buffered write, 0 if none
	// timesSet is when a SetAttr last set the times: commits of writes
	// made before it leave the times alone, and attributes are not
	// overlaid with those writes' time.
	timesSet atomic.Int64
	compact  map[uint32]bool
}

// unknownRetries bounds how many times a commit whose outcome was unknown
// is sent again at once (CommitSlices).
const unknownRetries = 3

// committer adapts a file to chunk.Committer.
type committer struct{ f *file }

func (c committer) NewSliceID(ctx context.Context) (uint64, error) {
	return c.f.v.m.NewSliceID(ctx)
}

func (c committer) CommitSlice(ctx context.Context, index uint32, s base.Slice) error {
	return c.CommitSlices(ctx, []chunk.Commit{{Chunk: index, Slice: s}})
}

var _ chunk.InlineCommitter = committer{}

// CommitsInlineBlocks makes committer a chunk.InlineCommitter: meta
// stores an inline slice's block as a blob with the slice, where the
// volume's object store looks for it.
func (committer) CommitsInlineBlocks() {}

// CommitSlices commits a flush's slices in one transaction.
func (c committer) CommitSlices(ctx context.Context, commits []chunk.Commit) error {
	f := c.f
	mtime := f.lastWrite.Load()
	if mtime == 0 {
		mtime = time.Now().UnixNano()
	}
	if f.timesSet.Load() >= mtime {
		mtime = 0 // the times were set after every write committed here
	}
	ws := make([]meta.SliceWrite, len(commits))
	appended := false
	for i, cm := range commits {
		ws[i] = meta.SliceWrite{Index: cm.Chunk, Slice: cm.Slice, Append: cm.Append, Retry: cm.Retry}
		appended = appended || cm.Append
		if cm.Block != nil {
			ws[i].BlobKey, ws[i].Blob = chunk.BlockKey(cm.Slice.ID, 0, int(cm.Slice.Size)), cm.Block
		}
	}
	due, err := f.v.m.WriteSlices(ctx, f.ino, ws, mtime)
	for try := 0; errors.Is(err, kv.ErrUnknownOutcome) && try < unknownRetries; try++ {
		// The connection broke after the commit was sent (a database
		// restart): it may have taken effect. Sent again as a retry, the
		// slices it placed are not placed twice (meta: appendsDone), so
		// an fsync waits out the restart instead of failing.
		f.v.log.Warn("commit outcome unknown; committing again as a retry", "ino", f.ino, "err", err)
		for i := range ws {
			ws[i].Retry = true
		}
		due, err = f.v.m.WriteSlices(ctx, f.ino, ws, mtime)
	}
	if err != nil {
		return err
	}
	if appended {
		// The appends went where the file ended, maybe not to the
		// chunks they were buffered for.
		f.invalidate()
	} else {
		idxs := make([]uint32, len(commits))
		for i, cm := range commits {
			idxs[i] = cm.Chunk
		}
		f.invalidateChunks(true, idxs...)
	}
	for _, idx := range due {
		f.v.scheduleCompaction(f.ino, idx)
	}
	return nil
}

// openFile returns the shared state of front-end inode ino (real in t),
// creating it, and takes a reference. For a live file the caller has
// recorded the open in meta (OpenFile or Create); each reference ends with
// one CloseFile in unref.
func (v *VFS) openFile(t *tree, ino, real base.Ino) *file {
	f, _ := v.openFileNew(t, ino, real)
	return f
}

// openFileNew is openFile that also reports whether the state was created
// (no other handle of this process has the file open).
func (v *VFS) openFileNew(t *tree, ino, real base.Ino) (f *file, created bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	f = v.files[ino]
	if f == nil {
		created = true
		f = &file{v: v, ino: ino, t: t, rino: real, chunks: make(map[uint32][]base.Slice)}
		f.w = v.cs.NewWriter(committer{f})
		v.files[ino] = f
	}
	f.refs++
	return f, created
}

// releaseFile flushes the file and drops a reference.
func (v *VFS) releaseFile(ctx context.Context, f *file) error {
	err := f.flush(ctx)
	if uerr := v.unref(ctx, f, true); err == nil {
		err = uerr
	}
	return err
}

// holdFile takes a reference on the open state of ino, if it is open.
func (v *VFS) holdFile(ino base.Ino) *file {
	v.mu.Lock()
	defer v.mu.Unlock()
	f := v.files[ino]
	if f != nil {
		f.refs++
	}
	return f
}

// openFiles returns the files open in this process.
func (v *VFS) openFiles() []*file {
	v.mu.Lock()
	defer v.mu.Unlock()
	files := make([]*file, 0, len(v.files))
	for _, f := range v.files {
		files = append(files, f)
	}
	return files
}

// unref drops a reference, and its open in meta if opened (a handle's
// reference, not a holdFile one; snapshot files record no open); the last
// one forgets the file and its write buffer (flushed by the caller).
func (v *VFS) unref(ctx context.Context, f *file, opened bool) error {
	v.mu.Lock()
	f.refs--
	last := f.refs == 0
	if last {
		delete(v.files, f.ino)
	}
	v.mu.Unlock()
	if last {
		f.w.Close()
	}
	if !opened || f.t.ro {
		return nil
	}
	return v.m.CloseFile(ctx, f.ino)
}

// flush commits buffered writes: everything written before it was
// called. It does not take wmu: writes go on meanwhile into new slices,
// which this flush leaves for the next one (chunk.Writer serialises
// flushes and keeps the commit order).
func (f *file) flush(ctx context.Context) error {
	lw := f.lastWrite.Load()
	if f.w.Pending() {
		if err := f.w.Flush(ctx); err != nil {
			return err
		}
	}
	// Every write up to lw is committed (maybe by a background flush).
	// Not if a write came meanwhile: it may still be buffered.
	f.lastWrite.CompareAndSwap(lw, 0)
	return nil
}

// readPart is one chunk's share of a read.
type readPart struct {
	index  uint32
	cpos   uint32
	n      int
	slices []base.Slice
	ov     *chunk.Overlay // buffered writes over the range; nil if none
}

// readPlan resolves a read of [off, off+n): the file's size, its committed
// length (content at or past it reads as zeros below the buffered
// writes), and per chunk the committed slice list and the overlay of this
// process's buffered writes.
//
// The buffered writes (length, overlays) are taken before the committed
// metadata, and no lock holds commits off: a commit invalidates the
// file's cached length and maps of its chunks after its transaction, and
// only then takes its slices off the Writer's pending list. A slice
// missing from the overlays taken first is therefore in the length and
// maps read after them (a slice in both reads the same bytes twice). Reads
// never wait for an upload or a commit, and see every write that completed
// before them. (They used to run inside HoldCommits: on a shared volume a
// random writer's commits, database transactions retried against
// compaction, then held reads off most of the time.)
func (f *file) readPlan(ctx context.Context, off int64, n int) (size, committed int64, parts []readPart, err error) {
	buffered := f.w.Pending()
	var bufLen int64
	var ovs []*chunk.Overlay
	if buffered {
		bufLen = f.w.Len()
		for pos, end := off, off+int64(n); pos < end; {
			index, cpos := uint32(pos/base.ChunkSize), uint32(pos%base.ChunkSize)
			m := min(end-pos, base.ChunkSize-int64(cpos))
			ovs = append(ovs, f.w.Overlay(index, cpos, int(m)))
			pos += m
		}
	}
	if committed, err = f.committedLength(ctx); err != nil {
		return 0, 0, nil, err
	}
	size = max(committed, bufLen)
	if off >= size {
		return size, committed, nil, nil
	}
	end := min(off+int64(n), size)
	for pos := off; pos < end; {
		p := readPart{index: uint32(pos / base.ChunkSize), cpos: uint32(pos % base.ChunkSize)}
		p.n = int(min(end-pos, base.ChunkSize-int64(p.cpos)))
		if p.slices, err = f.slices(ctx, p.index); err != nil {
			return 0, 0, nil, err
		}
		if buffered {
			// The overlay of the same chunk's range, which may run past
			// end: Apply ignores what lies past the part.
			p.ov = ovs[len(parts)]
		}
		parts = append(parts, p)
		pos += int64(p.n)
	}
	return size, committed, parts, nil
}

// holdCommits runs fn inside the Writer's HoldCommits when writes are
// buffered, else without a lock: with nothing buffered every completed
// write is committed, and its commit invalidated the cached length and
// maps before leaving the Writer's pending list.
func (f *file) holdCommits(fn func() error) error {
	if !f.w.Pending() {
		return fn()
	}
	return f.w.HoldCommits(fn)
}

func (f *file) idleFor() time.Duration {
	lw := f.lastWrite.Load()
	if lw == 0 || !f.w.Pending() {
		return 0
	}
	return time.Since(time.Unix(0, lw))
}

// Revalidate forgets what this process cached of file ino's content
// (its chunk maps and committed length) if it has it open, as an open
// does on a shared volume (close-to-open): for the NFS gateway, whose
// clients revalidate a file with a GETATTR instead of opening it, while
// the gateway keeps it open.
func (v *VFS) Revalidate(ino base.Ino) {
	v.mu.Lock()
	f := v.files[ino]
	v.mu.Unlock()
	if f != nil && !f.t.ro {
		f.invalidate()
	}
}

func (f *file) invalidate() {
	f.mu.Lock()
	clear(f.chunks)
	f.lengthOK = false
	f.gen++
	f.mu.Unlock()
}

// invalidateChunks forgets the cached lists of the chunks this process
// just changed (a commit of its writes, a compaction) and, if length, the
// cached length. The other chunks' lists stay: their records did not
// change, and those of other clients are dropped at the next open
// (close-to-open). On a shared volume a list costs a database read, and a
// random writer commits every few milliseconds: forgetting every chunk of
// a 1 GiB file at each commit made reads fetch their list again.
func (f *file) invalidateChunks(length bool, indexes ...uint32) {
	f.mu.Lock()
	for _, idx := range indexes {
		delete(f.chunks, idx)
	}
	if length {
		f.lengthOK = false
	}
	f.gen++ // lists being read meanwhile are used once, not cached
	f.mu.Unlock()
}

// committedLength returns the file's committed length, cached like the
// chunk maps: until this process changes the file, or the next open.
func (f *file) committedLength(ctx context.Context) (int64, error) {
	f.mu.Lock()
	n, ok, gen := f.length, f.lengthOK, f.gen
	f.mu.Unlock()
	if ok {
		return n, nil
	}
	a, err := f.t.r.GetAttr(ctx, f.rino)
	if err != nil {
		return 0, err
	}
	f.setLength(gen, int64(a.Length))
	return int64(a.Length), nil
}

// setLength caches a length read at generation gen.
func (f *file) setLength(gen uint64, n int64) {
	f.mu.Lock()
	if f.gen == gen {
		f.length, f.lengthOK = n, true
	}
	f.mu.Unlock()
}

// setSlices caches the slice list of chunk index read at generation gen.
func (f *file) setSlices(gen uint64, index uint32, s []base.Slice) {
	f.mu.Lock()
	if f.gen == gen {
		f.chunks[index] = s
	}
	f.mu.Unlock()
}

// slices returns the slice list of a chunk, cached until the file's
// content changes through this process. A list read while a change
// committed is used once but not cached, so the cache never keeps a list
// that points at slices a compaction has replaced (and will delete).
func (f *file) slices(ctx context.Context, index uint32) ([]base.Slice, error) {
	f.mu.Lock()
	s, ok := f.chunks[index]
	gen := f.gen
	f.mu.Unlock()
	if ok {
		return s, nil
	}
	s, err := f.t.r.ReadChunk(ctx, f.rino, index)
	if err != nil {
		return nil, err
	}
	f.setSlices(gen, index, s)
	return s, nil
}

// holdCommits runs fn (which reads ino's committed attributes and
// overlays them) so that no commit of the file's buffered writes runs
// meanwhile: otherwise a write could leave the buffer after fn read the
// committed length and before overlay read the buffered one, and the
// file would seem shorter for a moment.
func (v *VFS) holdCommits(ino base.Ino, fn func() error) error {
	v.mu.Lock()
	f := v.files[ino]
	v.mu.Unlock()
	if f == nil {
		return fn()
	}
	return f.holdCommits(fn)
}

// overlay adjusts committed attributes with this process's buffered writes.
// Overlay applies to a, attributes of ino read before, what this VFS
// has buffered for the file since (its length and modification time),
// as GetAttr does: a caller that read the attributes before a write
// learns those after it without reading the store again.
func (v *VFS) Overlay(ino base.Ino, a *base.Attr) { v.overlay(ino, a) }

func (v *VFS) overlay(ino base.Ino, a *base.Attr) {
	v.mu.Lock()
	f := v.files[ino]
	v.mu.Unlock()
	if f == nil || a.Type != base.TypeFile {
		return
	}
	if n := f.w.Len(); n > int64(a.Length) {
		a.Length = uint64(n)
	}
	if lw := f.lastWrite.Load(); lw > a.Mtime && lw > f.timesSet.Load() {
		a.Mtime = lw
		a.Ctime = lw
	}
}

// handle is one open of a file or directory.
type handle struct {
	fh    uint64
	ino   base.Ino // front-end number
	t     *tree
	flags int
	f     *file         // regular files
	r     *chunk.Reader // regular files: read-ahead state of this handle
	dir   *dirState     // directories
}

func (v *VFS) newHandle(h *handle) uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	h.fh = v.nextFh
	v.nextFh++
	v.handles[h.fh] = h
	return h.fh
}

func (v *VFS) handle(fh uint64) *handle {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.handles[fh]
}

func (v *VFS) dropHandle(fh uint64) *handle {
	v.mu.Lock()
	defer v.mu.Unlock()
	h := v.handles[fh]
	delete(v.handles, fh)
	return h
}

var (
	_ chunk.Committer      = committer{}
	_ chunk.BatchCommitter = committer{}
)
