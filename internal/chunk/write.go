package chunk

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/object"
)

// Committer is the metadata side of a Writer, implemented by the caller
// (vfs, over meta).
type Committer interface {
	// NewSliceID returns a fresh, never reused, non-zero slice id. It is
	// called from background upload goroutines (with a context that is
	// cancelled by Writer.Close), at most once per slice unless it fails.
	NewSliceID(ctx context.Context) (uint64, error)
	// CommitSlice appends s to the slice list of chunk chunkIndex of the
	// file. It is called only from Writer.Flush (and from the background
	// flush Write starts by itself), one call at a time, in the order the
	// slices were started, after every block of s is uploaded, and while
	// Writer.HoldCommits callers are held off. After an error the same
	// slice is committed again by the next Flush, so a commit that failed
	// ambiguously may be repeated. It must not call HoldCommits.
	CommitSlice(ctx context.Context, chunkIndex uint32, s base.Slice) error
}

// BatchCommitter is an optional ability of a Committer: commit several
// slices, in order, in one metadata transaction. Flush uses it when
// present, so a flush of many small random writes costs one commit, not
// one per slice. Its contract is CommitSlice's, for the whole batch: all
// or nothing, and a batch that failed ambiguously may be committed again.
type BatchCommitter interface {
	CommitSlices(ctx context.Context, commits []Commit) error
}

// Commit is one slice of a batch: s goes to chunk Chunk.
type Commit struct {
	Chunk uint32
	Slice base.Slice
	// Block, for an inline slice (base.InlineBit) when the Committer is an
	// InlineCommitter, is the encoded object of the slice's only block,
	// which was not put in the object store: the commit must store it
	// under BlockKey(Slice.ID, 0, Slice.Size) where the volume's store
	// finds inline blocks, in the same transaction as the slice.
	Block []byte
	// Append marks a slice of Writer.Append: Chunk and Slice.Pos are the
	// writer's guess of the file's end, and the commit must place the
	// slice at the file's real end as of the commit instead.
	Append bool
	// Retry marks a slice whose earlier commit failed, maybe after it
	// took effect: an Append slice already in the file must not be
	// placed again.
	Retry bool
}

// InlineCommitter is a BatchCommitter that stores the blocks of inline
// slices (Commit.Block) with the slices themselves, in the metadata
// engine that the volume's object store reads inline blocks from. A
// Writer whose Store has an inline limit then holds such a block in its
// buffer until the commit instead of putting it first: one metadata
// transaction per small file instead of two.
type InlineCommitter interface {
	BatchCommitter
	CommitsInlineBlocks()
}

// maxBatch bounds the slices committed in one transaction.
const maxBatch = 256

// ErrWriterClosed is returned by Write and Flush after Close.
var ErrWriterClosed = fmt.Errorf("chunk: writer closed: %w", base.ErrBadFD)

type blockState uint8

const (
	filling   blockState = iota // accepting writes
	uploading                   // frozen, upload in flight
	uploaded                    // in the object store; buffer released
	held                        // inline block kept in its buffer for the commit (InlineCommitter)
	failed                      // frozen, last upload failed; retried by Flush
	queued                      // frozen, waiting in its chunk's pack (see packable)
)

// wblock is one block of a buffered slice. len(buf) is the number of bytes
// written to it (writes within a slice are contiguous from its start).
type wblock struct {
	buf   []byte
	n     int // data length, fixed when frozen
	state blockState
	done  chan struct{} // closed when the current upload attempt ends
	err   error         // error of the last failed upload
}

// wslice is a slice being buffered: bytes [pos, pos+length) of one chunk.
type wslice struct {
	chunk  uint32
	pos    uint32
	length int
	blocks []*wblock
	sealed bool // no more writes; every block frozen
	// skew places the slice's bytes in its buffers as if it started skew
	// bytes earlier: byte r is at offset (r+skew)%bs of blocks[(r+skew)/bs],
	// on the block grid of the slice it is expected to be merged into
	// (gridSkew). Nonzero only while every block is filling; unskew
	// restores the layout of the slice's own blocks before any upload.
	skew int

	idMu sync.Mutex
	id   uint64
	// A slice uploaded in a pack (see packable) is bytes [off, off+length)
	// of the pack's object of size bytes, whose id it takes; size is 0
	// for a slice that is its own object.
	off, size uint32

	// floating: written by Append; its place is decided at commit
	// (Commit.Append). It never shares a slice with Write's bytes.
	floating bool
	// tried: a commit of it failed (Commit.Retry). Guarded by w.mu.
	tried bool
}

// ensureID returns the slice's id, allocating it on first use; inline
// sets base.InlineBit in a new id (see Options.InlineMax).
func (ws *wslice) ensureID(ctx context.Context, c Committer, inline bool) (uint64, error) {
	ws.idMu.Lock()
	defer ws.idMu.Unlock()
	if ws.id != 0 {
		return ws.id, nil
	}
	id, err := newSliceID(ctx, c)
	if err != nil {
		return 0, err
	}
	if inline {
		id |= base.InlineBit
	}
	ws.id = id
	return id, nil
}

// newSliceID returns a fresh slice id from c, checked.
func newSliceID(ctx context.Context, c Committer) (uint64, error) {
	id, err := c.NewSliceID(ctx)
	if err != nil {
		return 0, fmt.Errorf("chunk: new slice id: %w", err)
	}
	if id == 0 || id&base.InlineBit != 0 {
		return 0, fmt.Errorf("chunk: committer returned slice id %#x: %w", id, base.ErrIO)
	}
	return id, nil
}

func (ws *wslice) ref() base.Slice {
	ws.idMu.Lock()
	defer ws.idMu.Unlock()
	size := ws.size
	if size == 0 {
		size = uint32(ws.length)
	}
	return base.Slice{Pos: ws.pos, ID: ws.id, Size: size, Off: ws.off, Len: uint32(ws.length)}
}

// setPacked makes ws part of the pack id of size bytes, at off; id 0
// makes it its own object again (its pack failed to upload).
func (ws *wslice) setPacked(id uint64, off, size uint32) {
	ws.idMu.Lock()
	defer ws.idMu.Unlock()
	ws.id, ws.off, ws.size = id, off, size
}

// Writer buffers the writes of one file (one per open inode, shared by all
// its handles) as slices, uploads their blocks and commits them. All methods
// are safe for concurrent use; Write and Flush are meant to be serialised by
// the caller per file (vfs holds a per-file lock) but need not be.
//
// Slices: a write that starts inside the not-yet-uploaded tail of one of
// the chunk's open slices (at or after its last full block, at or before
// its end) goes into it, overwriting or extending it, unless a slice
// started after that one overlaps the write; any other write starts a new
// slice, sealing the chunk's oldest open slice when it already has
// maxOpenSlices. A slice that comes to end where another open one begins
// absorbs it if nothing has been uploaded of it (mergeNext), so writes
// that arrive slightly out of order still make full blocks. Slices never
// span chunks. Each full
// block is uploaded in the background as soon as it fills; the last,
// partial block when the slice is sealed (Flush, a new slice in its chunk,
// or memory pressure).
//
// Memory: bytes not yet uploaded count against Options.BufferLimit for the
// whole Store. Write waits while the bound would be exceeded (a single write
// larger than the bound waits until nothing else is buffered), and while it
// waits it seals the oldest slices of the Writer holding the most unsealed
// bytes so their uploads free memory.
//
// Auto-flush: when one chunk has more than Options.MaxChunkSlices
// uncommitted slices, Write starts a flush of the Writer in the background
// and returns without waiting for it; later writes go to new slices
// meanwhile (one background flush runs at a time, and another follows if
// asked for while it ran). Flushes are serialised, so commits keep the
// order the slices were started in whoever flushes. An error of a
// background flush is logged, returned by the next Write (once, without
// buffering that write), and the data stays buffered: the next Flush
// retries it and returns its own error if it still fails. Flushing idle
// files is the caller's job: vfs flushes files whose last write is older
// than its flush interval.
//
// Reads: uncommitted data is not in the chunk maps. A caller reading a
// file with pending data takes the Overlay of the range, then the
// committed chunk map (or both inside HoldCommits), reads the committed
// content and applies the overlay over it.
type Writer struct {
	s      *Store
	c      Committer
	ctx    context.Context // uploads, background flushes; cancelled by Close
	cancel context.CancelFunc

	uploads  sync.WaitGroup
	bg       sync.WaitGroup // background flushes
	flushMu  sync.Mutex     // serialises Flush and Close
	commitMu sync.RWMutex   // held by a commit (write) and by HoldCommits (read)

	mu        sync.Mutex
	pending   []*wslice            // uncommitted slices, in start order
	open      map[uint32][]*wslice // open (unsealed) slices of each chunk, in start order
	packs     map[uint32]*pack     // sealed small slices of each chunk waiting to be uploaded together
	perChunk  map[uint32]int       // uncommitted slices per chunk
	unsealed  int64                // bytes in filling blocks
	copied    int64                // bytes moved again between buffers by merges (tests)
	closed    bool
	bgRunning bool  // a background flush goroutine is running
	bgAgain   bool  // flush again when it ends
	bgErr     error // error of the last background flush, until reported or resolved
}

// NewWriter returns a Writer committing through c. Close it when the file
// is closed.
func (s *Store) NewWriter(c Committer) *Writer {
	ctx, cancel := context.WithCancel(context.Background())
	w := &Writer{
		s: s, c: c, ctx: ctx, cancel: cancel,
		open:     make(map[uint32][]*wslice),
		packs:    make(map[uint32]*pack),
		perChunk: make(map[uint32]int),
	}
	s.writersMu.Lock()
	s.writers[w] = struct{}{}
	s.writersMu.Unlock()
	return w
}

// Write copies p into the buffer at file offset off. It returns once the
// data is buffered (not uploaded, not visible to ReadChunk); it never waits
// for a flush, only while the Store's buffer is full, and then returns
// ctx's error if ctx ends. If a background flush failed since the last
// Write or Flush, Write returns that error and buffers nothing. On other
// errors a prefix of p may have been buffered. p is not retained.
func (w *Writer) Write(ctx context.Context, off int64, p []byte) error {
	return w.write(ctx, off, p, false)
}

// Append is Write for an append (O_APPEND) whose place the file's end
// decides when it is committed, not now: off is the caller's best guess
// of the end, where the bytes are buffered (and read back from, through
// Overlay) until then. Other clients of a shared volume may append
// meanwhile; the Committer (a BatchCommitter, see Commit.Append) places
// each such slice at the end as of its commit, in the order the slices
// were started, so no client's appends overwrite another's. Appended
// bytes never join a slice of Write's, nor Write's an appended one.
func (w *Writer) Append(ctx context.Context, off int64, p []byte) error {
	if _, ok := w.c.(BatchCommitter); !ok {
		return fmt.Errorf("chunk: Append needs a BatchCommitter: %w", base.ErrInvalid)
	}
	return w.write(ctx, off, p, true)
}

func (w *Writer) write(ctx context.Context, off int64, p []byte, floating bool) error {
	w.mu.Lock()
	bgErr := w.bgErr
	w.bgErr = nil
	w.mu.Unlock()
	if bgErr != nil {
		return fmt.Errorf("chunk: background flush: %w", bgErr)
	}
	if off < 0 {
		return fmt.Errorf("chunk: write at negative offset %d: %w", off, base.ErrInvalid)
	}
	if off+int64(len(p)) > int64(math.MaxUint32+1)*base.ChunkSize {
		return fmt.Errorf("chunk: write beyond the last chunk: %w", base.ErrFileTooBig)
	}
	bs := w.s.opts.BlockSize
	flush := false
	for len(p) > 0 {
		idx, pos := uint32(off/base.ChunkSize), int(off%base.ChunkSize)
		// At most one block per step, so back-pressure is fine-grained.
		n := min(len(p), base.ChunkSize-pos, bs-pos%bs)
		f, err := w.writeChunk(ctx, idx, uint32(pos), p[:n], floating)
		if err != nil {
			return err
		}
		flush = flush || f
		p, off = p[n:], off+int64(n)
	}
	if flush {
		w.flushBackground()
	}
	return nil
}

// flushBackground starts a background flush, or asks the running one to
// flush again when it ends.
func (w *Writer) flushBackground() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	if w.bgRunning {
		w.bgAgain = true
		return
	}
	w.bgRunning = true
	w.bg.Add(1)
	go func() {
		defer w.bg.Done()
		for {
			err := w.flush(w.ctx, true)
			if err != nil && w.ctx.Err() == nil {
				w.s.log.Warn("background flush failed; data stays buffered, the next write or flush reports it", "err", err)
			}
			w.mu.Lock()
			again := err == nil && w.bgAgain && !w.closed
			w.bgAgain = false
			w.bgRunning = again
			w.mu.Unlock()
			if !again {
				return
			}
		}
	}()
}

// writeChunk writes p (within one chunk and one block-sized step) and
// reports whether the chunk has too many uncommitted slices.
func (w *Writer) writeChunk(ctx context.Context, idx, pos uint32, p []byte, floating bool) (bool, error) {
	s := w.s
	if err := s.reserve(ctx, len(p)); err != nil {
		return false, err
	}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		s.release(int64(len(p)))
		return false, ErrWriterClosed
	}
	ws := w.target(idx, pos, len(p), floating)
	if ws == nil {
		if open := w.open[idx]; len(open) >= maxOpenSlices {
			w.seal(open[0])
		}
		ws = &wslice{chunk: idx, pos: pos, floating: floating}
		if len(p) >= streamWrite {
			ws.skew = w.gridSkew(ws)
		}
		w.pending = append(w.pending, ws)
		w.open[idx] = append(w.open[idx], ws)
		w.perChunk[idx]++
	}
	rel := int(pos - ws.pos)
	growth := w.copyIn(ws, rel, p)
	for w.mergeNext(ws) {
	}
	bs := s.opts.BlockSize
	held := w.awaitsMerge(ws)
	if !held {
		w.unskew(ws)
	}
	for i := rel / bs; i < len(ws.blocks) && !held; i++ {
		if b := ws.blocks[i]; b.state == filling && len(b.buf) == bs {
			w.startUpload(ws, i)
		}
	}
	many := w.perChunk[idx] > s.opts.MaxChunkSlices
	w.mu.Unlock()
	s.release(int64(len(p) - growth))
	return many, nil
}

// maxOpenSlices bounds the open slices of one chunk. Writes that reach a
// Writer out of order (the kernel's writeback requests are served
// concurrently) start a slice each; keeping a few open lets the writes
// that come late continue the slice they belong to (see mergeNext). With
// the kernel's 12 background requests of 1 MiB in flight, 4 left 12
// short blocks per 768 MiB written with dd; 16 leaves none (measured).
const maxOpenSlices = 16

// mergeWindow: how far after the end of an open slice another one may
// start and still wait to be merged into it (awaitsMerge). The kernel's
// writeback sends up to max_background requests of max_write (1 MiB) at
// once, which the daemon serves concurrently.
const mergeWindow = 16 << 20

// awaitsMerge reports whether ws, of which nothing is uploaded, starts a
// little after the end of another open slice of its chunk: the writes
// between the two are likely still on their way, and mergeNext will then
// absorb ws. Until then ws's full blocks wait: uploaded now, their
// boundaries (relative to ws's start) would leave the earlier slice a
// short last block and make ws unmergeable. Sealing uploads them anyway.
// Called with w.mu held.
func (w *Writer) awaitsMerge(ws *wslice) bool {
	if !allFilling(ws) {
		return false
	}
	for _, o := range w.open[ws.chunk] {
		if o == ws || o.pos >= ws.pos || o.floating != ws.floating {
			continue
		}
		if gap := int64(ws.pos) - (int64(o.pos) + int64(o.length)); gap >= 0 && gap <= mergeWindow {
			return true
		}
	}
	return false
}

// gridSkew returns the skew that puts the new slice ws, of chunk
// positions after a gap behind an open slice of its chunk (awaitsMerge),
// on that slice's block grid: when the gap closes, mergeNext then joins
// the two slices' blocks instead of copying ws's bytes (joinBlocks). A
// stream the kernel's writeback sends out of order copied 70-90% of its
// bytes that way before (measured). Called with w.mu held.
func (w *Writer) gridSkew(ws *wslice) int {
	bs := w.s.opts.BlockSize
	var best *wslice
	bestGap := int64(mergeWindow) + 1
	for _, o := range w.open[ws.chunk] {
		if o == ws || o.pos >= ws.pos || o.floating != ws.floating {
			continue
		}
		if gap := int64(ws.pos) - (int64(o.pos) + int64(o.length)); gap > 0 && gap < bestGap {
			best, bestGap = o, gap
		}
	}
	if best == nil {
		return 0
	}
	return (int(ws.pos-best.pos) + best.skew) % bs
}

// unskew moves the bytes of ws to the layout of a slice of its own, block
// i holding bytes [i*bs, (i+1)*bs), when it will not be merged. It copies
// them. Called with w.mu held.
func (w *Writer) unskew(ws *wslice) {
	if ws.skew == 0 {
		return
	}
	old, skew, length := ws.blocks, ws.skew, ws.length
	ws.blocks, ws.skew, ws.length = nil, 0, 0
	for i, b := range old {
		data := b.buf
		if i == 0 {
			data = data[skew:]
		}
		w.copyIn(ws, ws.length, data)
		w.s.recycleBlockBuf(b.buf)
	}
	w.unsealed -= int64(length) // copyIn counted them again
	w.copied += int64(length)
}

// joinBlocks appends nx, which starts where ws ends, to ws by moving its
// blocks when nx is on ws's block grid (gridSkew). The block both share,
// if any, takes the shorter of the two parts from the other: at most half
// a block is copied. It reports false, changing nothing, when the grids
// differ. Called with w.mu held.
func (w *Writer) joinBlocks(ws, nx *wslice) bool {
	bs := w.s.opts.BlockSize
	x := ws.length + ws.skew // ws's end in its buffers' layout
	k := x / bs
	if x%bs != nx.skew || len(nx.blocks) == 0 {
		return false
	}
	if nx.skew == 0 {
		if len(ws.blocks) != k {
			return false
		}
		ws.blocks = append(ws.blocks, nx.blocks...)
		ws.length += nx.length
		return true
	}
	if len(ws.blocks) != k+1 {
		return false
	}
	wb, nb := ws.blocks[k], nx.blocks[0]
	if wb.state != filling || len(wb.buf) != nx.skew || len(nb.buf) < nx.skew {
		return false
	}
	switch tail := len(nb.buf) - nx.skew; {
	case tail < nx.skew && cap(wb.buf) >= len(nb.buf):
		// nx's part of the block is the shorter: into ws's buffer.
		wb.buf = append(wb.buf, nb.buf[nx.skew:]...)
		w.s.recycleBlockBuf(nb.buf)
		ws.blocks = append(ws.blocks, nx.blocks[1:]...)
		w.copied += int64(tail)
	default:
		copy(nb.buf, wb.buf)
		w.s.recycleBlockBuf(wb.buf)
		ws.blocks = append(ws.blocks[:k], nx.blocks...)
		w.copied += int64(nx.skew)
	}
	ws.length += nx.length
	return true
}

// target returns the open slice of chunk idx that a write of n bytes at
// pos goes into, or nil if it needs a new one. The write must fit the
// slice (fits), be of its kind (Append or Write), and no slice of the chunk started after it may overlap
// the write: commits apply slices in start order, so the later slice
// would hide the newer bytes.
func (w *Writer) target(idx, pos uint32, n int, floating bool) *wslice {
	open := w.open[idx]
	for i := len(open) - 1; i >= 0; i-- {
		if ws := open[i]; ws.floating == floating && w.fits(ws, pos) && !w.overlappedBetween(ws, nil, int64(pos), int64(pos)+int64(n)) {
			return ws
		}
	}
	return nil
}

// mergeNext moves into ws the open slice that starts where ws now ends,
// if that slice has not begun uploading and no slice started between the
// two overlaps it: its bytes then take ws's place in the commit order
// (earlier or later than their own) without changing what any read or
// commit sees. Writes that arrived out of order then make one slice with
// full blocks instead of several with short ones. It reports whether it
// merged one. Called with w.mu held.
func (w *Writer) mergeNext(ws *wslice) bool {
	end := int64(ws.pos) + int64(ws.length)
	open := w.open[ws.chunk]
	for j, nx := range open {
		if int64(nx.pos) != end || nx == ws || nx.length == 0 || nx.floating != ws.floating {
			continue
		}
		if !allFilling(nx) || w.overlappedBetween(ws, nx, end, end+int64(nx.length)) {
			return false
		}
		if !w.joinBlocks(ws, nx) {
			for i, b := range nx.blocks {
				data := b.buf
				if i == 0 {
					data = data[nx.skew:]
				}
				w.copyIn(ws, ws.length, data)
				// Never uploaded, and Overlay copies what it reads.
				w.s.recycleBlockBuf(b.buf)
			}
			w.unsealed -= int64(nx.length) // copyIn counted them again
			w.copied += int64(nx.length)
		}
		w.open[ws.chunk] = slices.Delete(slices.Clone(open), j, j+1)
		w.pending = slices.DeleteFunc(w.pending, func(o *wslice) bool { return o == nx })
		w.perChunk[ws.chunk]--
		return true
	}
	return false
}

// overlappedBetween reports whether a slice of a's chunk started between
// a and b (in either order; b nil: after a) overlaps chunk positions
// [start, end).
func (w *Writer) overlappedBetween(a, b *wslice, start, end int64) bool {
	between := false
	for _, o := range w.pending {
		switch {
		case o == a || o == b:
			if between {
				return false
			}
			between = true
		case between && o.chunk == a.chunk && int64(o.pos) < end && start < int64(o.pos)+int64(o.length):
			return true
		}
	}
	return false
}

// allFilling reports whether no block of ws has begun uploading.
func allFilling(ws *wslice) bool {
	for _, b := range ws.blocks {
		if b.state != filling {
			return false
		}
	}
	return true
}

// fits reports whether a write at chunk position pos can go into ws: it
// must start inside ws's unfrozen tail or at its end.
func (w *Writer) fits(ws *wslice, pos uint32) bool {
	if ws.sealed || pos < ws.pos {
		return false
	}
	bs := w.s.opts.BlockSize
	rel := int(pos - ws.pos)
	// A skewed slice has no frozen block.
	return rel <= ws.length && (ws.skew != 0 || rel >= ws.length/bs*bs)
}

// streamWrite is the size from which a write at the start of a block is
// taken for part of a stream: copyIn gives its block a full buffer.
const streamWrite = 128 << 10

// copyIn copies p to offset rel of ws and returns how much ws grew.
func (w *Writer) copyIn(ws *wslice, rel int, p []byte) int {
	bs := w.s.opts.BlockSize
	old := ws.length
	ws.length = max(ws.length, rel+len(p))
	for x := rel + ws.skew; len(p) > 0; {
		idx, boff := x/bs, x%bs
		for len(ws.blocks) <= idx {
			ws.blocks = append(ws.blocks, &wblock{})
		}
		b := ws.blocks[idx]
		n := min(len(p), bs-boff)
		if need := boff + n; need > len(b.buf) {
			if need > cap(b.buf) {
				c := max(need, 2*cap(b.buf), 16<<10)
				// A stream (a block after the first, or a large
				// write) gets the whole block at once: growing it by
				// doubling would allocate, zero and copy it about
				// twice over.
				if c >= bs || boff == 0 && (idx > 0 || n >= streamWrite) || ws.skew != 0 {
					c = EncodedLen(bs) // room to encode in place
				}
				var nb []byte
				if c == EncodedLen(bs) {
					nb = w.s.blockBuf(len(b.buf))
				} else {
					nb = make([]byte, len(b.buf), c)
				}
				copy(nb, b.buf)
				b.buf = nb
			}
			b.buf = b.buf[:need]
		}
		copy(b.buf[boff:], p[:n])
		p, x = p[n:], x+n
	}
	growth := ws.length - old
	w.unsealed += int64(growth)
	return growth
}

// seal closes ws to writes and starts the upload of its unfrozen blocks.
// Called with w.mu held.
func (w *Writer) seal(ws *wslice) {
	if ws.sealed {
		return
	}
	w.unskew(ws)
	ws.sealed = true
	open := slices.DeleteFunc(slices.Clone(w.open[ws.chunk]), func(o *wslice) bool { return o == ws })
	if len(open) == 0 {
		delete(w.open, ws.chunk)
	} else {
		w.open[ws.chunk] = open
	}
	if w.packable(ws) {
		b := ws.blocks[0]
		b.n, b.state = len(b.buf), queued
		w.unsealed -= int64(b.n)
		// A pack is one block.
		target := min(packTarget, w.s.opts.BlockSize)
		if p := w.packs[ws.chunk]; p != nil && p.bytes+b.n > target {
			w.startPack(ws.chunk)
		}
		p := w.packs[ws.chunk]
		if p == nil {
			p = &pack{}
			w.packs[ws.chunk] = p
		}
		p.slices = append(p.slices, ws)
		if p.bytes += b.n; p.bytes >= target {
			w.startPack(ws.chunk)
		}
		return
	}
	for i, b := range ws.blocks {
		if b.state == filling {
			w.startUpload(ws, i)
		}
	}
}

// Small slices are uploaded in packs. Random writes make one slice per
// write, and one object per slice would cost a PUT (a file, on a local
// store) per 4 KiB written. A sealed slice of a single block of at most
// packMember bytes waits in its chunk's pack instead; the pack's slices
// are uploaded as one object (of one block) when they reach packTarget
// bytes or a block, or at the next Flush or memory pressure, and each is
// committed as its part of that object (base.Slice Off and Size). A pack
// never spans chunks: the object's id is referenced by one chunk record
// only, which frees it when its last part is gone, as for any slice. See
// docs/design/0005.
const (
	packMember = 128 << 10
	packTarget = 1 << 20
)

// pack is the sealed small slices of one chunk waiting to be uploaded
// together, and their bytes.
type pack struct {
	slices []*wslice
	bytes  int
}

// packable reports whether sealed slice ws waits in a pack. Inline slices
// do not (they are not objects). Called with w.mu held.
func (w *Writer) packable(ws *wslice) bool {
	if len(ws.blocks) != 1 || ws.length == 0 || ws.length > packMember || ws.blocks[0].state != filling {
		return false
	}
	if _, ok := w.c.(BatchCommitter); !ok {
		return false // the parts of a pack must commit together (cut)
	}
	return !w.s.Inline(ws.chunk, ws.pos+uint32(ws.length))
}

// startPacks starts the upload of every chunk's pack. Called with w.mu
// held.
func (w *Writer) startPacks() {
	for idx := range w.packs {
		w.startPack(idx)
	}
}

// startPack uploads the pack of chunk idx as one object in the
// background. A pack of one slice is that slice's own object. If the
// upload fails, its slices fail as blocks do and are retried each as its
// own object. Called with w.mu held.
func (w *Writer) startPack(idx uint32) {
	p := w.packs[idx]
	delete(w.packs, idx)
	if w.closed || p == nil {
		return
	}
	members := p.slices
	if len(members) == 1 {
		w.startUpload(members[0], 0)
		return
	}
	data := make([]byte, 0, EncodedLen(p.bytes)) // EncodeBlock appends in place
	offs := make([]uint32, len(members))
	done := make(chan struct{})
	for i, m := range members {
		b := m.blocks[0]
		offs[i] = uint32(len(data))
		data = append(data, b.buf[:b.n]...)
		b.state, b.err, b.done = uploading, nil, done
	}
	w.uploads.Add(1)
	go func() {
		defer w.uploads.Done()
		err := w.uploadPack(members, offs, data)
		blocks := make([]*wblock, len(members))
		for i, m := range members {
			blocks[i] = m.blocks[0]
		}
		w.uploadEnded(blocks, done, err)
		if err != nil && w.ctx.Err() == nil {
			w.s.log.Warn("pack upload failed; Flush will retry its slices one by one", "chunk", idx, "slices", len(members), "err", err)
		}
	}()
}

// uploadPack gives the pack's slices a new id and their places in the
// object, and uploads it.
func (w *Writer) uploadPack(members []*wslice, offs []uint32, data []byte) error {
	id, err := newSliceID(w.ctx, w.c)
	if err != nil {
		return err
	}
	for i, m := range members {
		m.setPacked(id, offs[i], uint32(len(data)))
	}
	key := BlockKey(id, 0, len(data))
	if err = w.put(key, data); err != nil {
		for _, m := range members {
			m.setPacked(0, 0, 0)
		}
		return err
	}
	w.s.cacheRandomWrite(key, data[:len(data):len(data)], true)
	return nil
}

// startUpload freezes block i of ws (if still filling) and uploads it in
// the background. Called with w.mu held.
func (w *Writer) startUpload(ws *wslice, i int) {
	if w.closed {
		return
	}
	b := ws.blocks[i]
	if b.state == filling {
		b.n = len(b.buf)
		w.unsealed -= int64(b.n)
	}
	b.state, b.err = uploading, nil
	done := make(chan struct{})
	b.done = done
	data := b.buf[:b.n]
	// Only a sealed slice's length is final; one of a single block within
	// the first InlineMax bytes of the file is inline.
	inline := ws.sealed && len(ws.blocks) == 1 && w.s.Inline(ws.chunk, ws.pos+uint32(ws.length))
	if _, ok := w.c.(InlineCommitter); ok && inline {
		// The commit stores it (and gives it its id); the buffer stays
		// accounted until then.
		b.state = held
		close(done)
		return
	}
	w.uploads.Add(1)
	go func() {
		defer w.uploads.Done()
		err := w.uploadBlock(ws, i, data, inline)
		w.uploadEnded([]*wblock{b}, done, err)
		if err != nil && w.ctx.Err() == nil {
			w.s.log.Warn("block upload failed; Flush will retry", "chunk", ws.chunk, "block", i, "err", err)
		}
	}()
}

// uploadEnded records the end of the upload of blocks (one block, or the
// slices of a pack) whose attempt closes done: uploaded, their buffers
// released, or failed with err.
func (w *Writer) uploadEnded(blocks []*wblock, done chan struct{}, err error) {
	released := 0
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, b := range blocks {
		if err == nil {
			if b.n == w.s.opts.BlockSize || w.s.recyclesShort(b.buf[:b.n]) {
				// Nothing reads an uploaded block's buffer (Overlay
				// reads the object), and putBlock kept no reference
				// to a full one, nor to a short one it copied.
				w.s.recycleBlockBuf(b.buf)
			}
			b.state, b.buf = uploaded, nil
			released += b.n
		} else {
			b.state, b.err = failed, err
		}
	}
	// Release before done: whoever waited for the upload sees the buffer
	// accounting already updated.
	w.s.release(int64(released))
	close(done)
}

// uploadBlock uploads block i of ws, retrying a few times.
func (w *Writer) uploadBlock(ws *wslice, i int, data []byte, inline bool) error {
	id, err := ws.ensureID(w.ctx, w.c, inline)
	if err != nil {
		return err
	}
	return w.put(BlockKey(id, i, len(data)), data)
}

// put uploads one block object, retrying a few times.
func (w *Writer) put(key string, data []byte) error {
	for attempt := 0; ; attempt++ {
		// Blocks shorter than a full block (small writes, the ends of
		// slices) are likely read back soon; full blocks of streams are
		// not kept, so a large write does not flush the memory tier.
		err := w.s.putBlock(w.ctx, key, data, len(data) < w.s.opts.BlockSize, true)
		// A store that reports an outage (object.ErrUnavailable) has
		// retried for as long as its policy allows: no more here.
		if err == nil || attempt == 2 || w.ctx.Err() != nil || errors.Is(err, object.ErrUnavailable) {
			return err
		}
		t := time.NewTimer(100 * time.Millisecond << attempt)
		select {
		case <-t.C:
		case <-w.ctx.Done():
			t.Stop()
			return err
		}
	}
}

// Flush uploads every buffered block (retrying failed uploads), waits for
// the uploads, then commits the slices through the Committer in the order
// they were started, each exactly once on success. Writes made while Flush
// runs go into new slices and are left for the next Flush.
//
// On error (an upload, a commit, or ctx) Flush returns it and stops at the
// first slice it could not commit: the slices before it are committed, that
// slice and the later ones stay buffered, and the next Flush retries them.
// The error is never swallowed; the caller reports it (to fsync or close).
// Flush does not make the objects durable on stores implementing
// object.Syncer; see Store.SyncObjects.
//
// Flush waits for a background flush in progress, then flushes whatever
// is still pending: everything written before Flush was called. It
// consumes the error of an earlier background flush (this Flush retried
// that data, and reports its own outcome).
func (w *Writer) Flush(ctx context.Context) error {
	return w.flush(ctx, false)
}

// flush is Flush; background says where the error goes: kept for the next
// Write, or to the caller only.
func (w *Writer) flush(ctx context.Context, background bool) error {
	w.flushMu.Lock()
	defer w.flushMu.Unlock()
	err := w.flushLocked(ctx)
	w.mu.Lock()
	switch {
	case !background || err == nil:
		w.bgErr = nil
	case !w.closed && w.ctx.Err() == nil:
		w.bgErr = err
	}
	w.mu.Unlock()
	return err
}

// flushLocked is Flush with flushMu held.
func (w *Writer) flushLocked(ctx context.Context) error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrWriterClosed
	}
	for _, open := range w.open {
		for _, ws := range open {
			w.seal(ws)
		}
	}
	w.startPacks()
	list := slices.Clone(w.pending)
	var waits []chan struct{}
	for _, ws := range list {
		for i, b := range ws.blocks {
			if b.state == failed {
				w.startUpload(ws, i)
			}
			if b.state == uploading {
				waits = append(waits, b.done)
			}
		}
	}
	w.mu.Unlock()
	for _, ch := range waits {
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	bc, batching := w.c.(BatchCommitter)
	for len(list) > 0 {
		n, upErr := w.cut(list, batching)
		if n > 0 {
			// Readers in HoldCommits see the slices either pending or
			// committed, never neither.
			w.commitMu.Lock()
			var err error
			if batching {
				var commits []Commit
				if commits, err = w.commits(ctx, list[:n]); err == nil {
					err = bc.CommitSlices(ctx, commits)
				}
				if err == nil {
					w.committedHeld(list[:n])
				}
			} else {
				ref := list[0].ref()
				if err = w.c.CommitSlice(ctx, list[0].chunk, ref); err != nil {
					err = fmt.Errorf("slice %d: %w", ref.ID, err)
				}
			}
			if err != nil {
				w.mu.Lock()
				for _, ws := range list[:n] {
					ws.tried = true
				}
				w.mu.Unlock()
				w.commitMu.Unlock()
				return fmt.Errorf("chunk: commit to chunk %d: %w", list[0].chunk, err)
			}
			w.mu.Lock()
			for _, ws := range list[:n] {
				if len(w.pending) > 0 && w.pending[0] == ws {
					w.pending[0] = nil
					w.pending = w.pending[1:]
				}
				if w.perChunk[ws.chunk]--; w.perChunk[ws.chunk] <= 0 {
					delete(w.perChunk, ws.chunk)
				}
			}
			w.mu.Unlock()
			w.commitMu.Unlock()
			list = list[n:]
		}
		if upErr != nil {
			return upErr
		}
	}
	return nil
}

// cut returns how many slices at the head of list the next commit takes:
// the longest run of uploaded slices, up to maxBatch (one without
// batching), and the upload error that ended the run early, if any. The
// parts of a pack (one object id) are committed in one transaction, even
// past maxBatch: the metadata frees an object when no committed slice
// refers to it any more, so a compaction or truncation that ran between
// two commits of one pack would drop its first parts, queue the object
// for deletion, and leave the later parts pointing at a deleted object.
// A run that an upload error would cut inside a pack ends before that
// pack.
func (w *Writer) cut(list []*wslice, batching bool) (int, error) {
	if !batching {
		// A Committer without batches never sees packs (packable).
		if err := w.uploadError(list[0]); err != nil {
			return 0, fmt.Errorf("chunk: upload of a slice of chunk %d: %w", list[0].chunk, err)
		}
		return 1, nil
	}
	ids := make([]uint64, len(list))
	last := make(map[uint64]int) // object id -> index of its last slice in list
	for i, ws := range list {
		ids[i] = ws.ref().ID
		last[ids[i]] = i
	}
	closed, need := 0, 0 // list[:closed] holds whole packs; list[:need] must be taken
	for i, ws := range list {
		if err := w.uploadError(ws); err != nil {
			return closed, fmt.Errorf("chunk: upload of a slice of chunk %d: %w", ws.chunk, err)
		}
		if ids[i] != 0 {
			need = max(need, last[ids[i]]+1)
		}
		if i+1 >= need {
			closed = i + 1
			if closed >= maxBatch {
				break
			}
		}
	}
	return closed, nil
}

// commits returns the batch for slices, with the encoded blocks of the
// held ones, which get their inline ids here.
func (w *Writer) commits(ctx context.Context, list []*wslice) ([]Commit, error) {
	isHeld := func(ws *wslice) bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(ws.blocks) > 0 && ws.blocks[0].state == held
	}
	for _, ws := range list {
		if isHeld(ws) {
			if _, err := ws.ensureID(ctx, w.c, true); err != nil {
				return nil, err
			}
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]Commit, len(list))
	for i, ws := range list {
		out[i] = Commit{Chunk: ws.chunk, Slice: ws.ref(), Append: ws.floating, Retry: ws.tried}
		if len(ws.blocks) > 0 && ws.blocks[0].state == held {
			b := ws.blocks[0]
			obj := make([]byte, b.n, EncodedLen(b.n)) // EncodeBlock appends in place
			copy(obj, b.buf[:b.n])
			out[i].Block = EncodeBlock(obj, BlockID{Slice: out[i].Slice.ID, Length: int(out[i].Slice.Size)}, w.s.opts.BlockFormat)
		}
	}
	return out, nil
}

// committedHeld ends the held state of the blocks of slices just
// committed: they are in the metadata engine now. Their buffers go to the
// memory cache, as a small uploaded block's would, and leave the write
// buffer.
func (w *Writer) committedHeld(list []*wslice) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var released int64
	for _, ws := range list {
		if len(ws.blocks) == 0 || ws.blocks[0].state != held {
			continue
		}
		b := ws.blocks[0]
		data := b.buf[:b.n:b.n]
		key := BlockKey(ws.ref().ID, 0, b.n)
		w.s.st.inlineCommits.Add(1)
		w.s.st.bytesWritten.Add(int64(b.n))
		if w.s.cache != nil {
			w.s.cache.Put(key, data)
		}
		if w.s.cachesWrite(len(data), true) {
			w.s.disk.Put(key, data)
		}
		b.state, b.buf = uploaded, nil
		released += int64(b.n)
	}
	w.s.release(released)
}

func (w *Writer) uploadError(ws *wslice) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, b := range ws.blocks {
		if b.state != uploaded && b.state != held {
			if b.err != nil {
				return b.err
			}
			return errors.New("chunk: upload did not finish")
		}
	}
	return nil
}

// Pending reports whether the Writer holds data not yet committed.
func (w *Writer) Pending() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pending) > 0
}

// Len returns the highest file offset covered by uncommitted data (the
// end of the furthest pending slice), or 0 when nothing is pending. vfs
// reports max(committed length, Len) as the size of a file being written.
func (w *Writer) Len() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var n int64
	for _, ws := range w.pending {
		n = max(n, int64(ws.chunk)*base.ChunkSize+int64(ws.pos)+int64(ws.length))
	}
	return n
}

// Close discards whatever is still buffered (call Flush first and report
// its error), stops the uploads and the background flush in flight and
// releases the Writer's share of the buffer. Blocks uploaded but never
// committed are left for gc. Close is idempotent; Write and Flush fail with
// ErrWriterClosed afterwards.
func (w *Writer) Close() {
	w.s.writersMu.Lock()
	delete(w.s.writers, w)
	w.s.writersMu.Unlock()
	w.cancel()
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	w.mu.Unlock()
	w.bg.Wait()
	w.flushMu.Lock()
	defer w.flushMu.Unlock()
	w.uploads.Wait()
	w.mu.Lock()
	var n int64
	for _, ws := range w.pending {
		for _, b := range ws.blocks {
			n += int64(len(b.buf))
			b.buf = nil
		}
		if len(ws.blocks) > 0 {
			n -= int64(ws.skew) // not data
		}
	}
	w.pending, w.unsealed = nil, 0
	clear(w.open)
	clear(w.packs)
	clear(w.perChunk)
	w.mu.Unlock()
	w.s.release(n)
}

// sealOldest seals the oldest open slices until about half of the Writer's
// unsealed bytes are on their way to the object store. Used under memory
// pressure.
func (w *Writer) sealOldest() {
	w.mu.Lock()
	defer w.mu.Unlock()
	target := w.unsealed / 2
	for _, ws := range w.pending {
		if !ws.sealed && w.unsealed > target {
			w.seal(ws)
		}
	}
	w.startPacks()
}

// reserve takes n bytes of the buffer budget, waiting while it would exceed
// BufferLimit (unless nothing is buffered) and relieving pressure meanwhile.
func (s *Store) reserve(ctx context.Context, n int) error {
	for {
		s.bufMu.Lock()
		if s.buffered == 0 || s.buffered+int64(n) <= s.opts.BufferLimit {
			s.buffered += int64(n)
			s.peak = max(s.peak, s.buffered)
			s.bufMu.Unlock()
			return nil
		}
		wake := s.bufWake
		s.bufMu.Unlock()
		s.relieve()
		t := time.NewTimer(time.Second)
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		t.Stop()
	}
}

// release returns n bytes to the buffer budget and wakes waiters.
func (s *Store) release(n int64) {
	if n == 0 {
		return
	}
	s.bufMu.Lock()
	s.buffered -= n
	close(s.bufWake)
	s.bufWake = make(chan struct{})
	s.bufMu.Unlock()
}

// relieve makes the Writer with the most unsealed bytes seal its oldest
// slices, and every Writer retry its failed uploads.
func (s *Store) relieve() {
	s.writersMu.Lock()
	ws := make([]*Writer, 0, len(s.writers))
	for w := range s.writers {
		ws = append(ws, w)
	}
	s.writersMu.Unlock()
	var best *Writer
	var most int64
	for _, w := range ws {
		w.mu.Lock()
		n := w.unsealed
		w.retryFailed()
		w.mu.Unlock()
		if n > most {
			best, most = w, n
		}
	}
	if best != nil {
		best.sealOldest()
	}
}

// retryFailed restarts failed uploads. Called with w.mu held.
func (w *Writer) retryFailed() {
	for _, ws := range w.pending {
		for i, b := range ws.blocks {
			if b.state == failed {
				w.startUpload(ws, i)
			}
		}
	}
}
