package chunk

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/object"
)

// piece is a run of chunk positions served by one slice reference (or by
// zeros, when ref.ID == 0).
type piece struct {
	pos, end uint64 // chunk positions [pos, end)
	ref      base.Slice
}

// resolve paints [a, b) with the slices, newest (last) first, and returns
// the pieces served by slices with a non-zero id. Positions not in any
// returned piece read as zeros. It rejects references that cannot be valid.
func resolve(slices []base.Slice, a, b uint64) ([]piece, error) {
	type span struct{ a, b uint64 }
	// Two buffers used in turn: a read of a chunk holding many slices
	// (random writes before compaction) allocates nothing per slice.
	var bufs [2][4]span
	open, next := append(bufs[0][:0], span{a, b}), bufs[1][:0]
	var out []piece
	for i := len(slices) - 1; i >= 0 && len(open) > 0; i-- {
		s := slices[i]
		lo, hi := uint64(s.Pos), uint64(s.Pos)+uint64(s.Len)
		if s.Len == 0 {
			continue
		}
		if hi > base.ChunkSize || (s.ID != 0 && uint64(s.Off)+uint64(s.Len) > uint64(s.Size)) {
			return nil, fmt.Errorf("chunk: invalid slice reference %+v: %w", s, base.ErrIO)
		}
		if hi <= a || lo >= b {
			continue // outside the read
		}
		next = next[:0]
		for _, sp := range open {
			if hi <= sp.a || lo >= sp.b {
				next = append(next, sp)
				continue
			}
			x, y := max(lo, sp.a), min(hi, sp.b)
			if sp.a < x {
				next = append(next, span{sp.a, x})
			}
			if y < sp.b {
				next = append(next, span{y, sp.b})
			}
			if s.ID != 0 {
				out = append(out, piece{x, y, s})
			}
		}
		open, next = next, open
	}
	return out, nil
}

// blockPart is the part of one block that a read copies.
type blockPart struct {
	key    string
	length int // block length
	boff   int // offset in the block
	dst    int // offset in the destination
	n      int // bytes
}

// blockParts splits pieces into per-block parts, relative to destination
// start a.
func (s *Store) blockParts(pieces []piece, a uint64) []blockPart {
	bs := uint64(s.opts.BlockSize)
	var parts []blockPart
	for _, pc := range pieces {
		so := uint64(pc.ref.Off) + (pc.pos - uint64(pc.ref.Pos)) // slice offset
		dst := pc.pos - a
		for left := pc.end - pc.pos; left > 0; {
			idx := so / bs
			boff := so % bs
			n := min(left, bs-boff)
			blen := s.blockLen(pc.ref.Size, int(idx))
			parts = append(parts, blockPart{
				key: BlockKey(pc.ref.ID, int(idx), blen), length: blen,
				boff: int(boff), dst: int(dst), n: int(n),
			})
			so += n
			dst += n
			left -= n
		}
	}
	return parts
}

// ReadChunk fills p with the content of one chunk from position pos, as
// described by slices (the chunk's slice list, oldest first; later entries
// win where they overlap). Holes and ID-0 slices read as zeros. It reads
// min(len(p), base.ChunkSize-pos) bytes and returns that count, or an
// error: a block whose checksum does not match wraps base.ErrChecksum, a
// missing block wraps base.ErrIO; on error the content of p is undefined.
// The caller clamps p to the file length and splits reads at chunk
// boundaries. ReadChunk sees only committed data: what the slices reference.
// Blocks spanned by the read are fetched concurrently. It does no
// read-ahead; use a Reader for that. slices is not retained or modified.
func (s *Store) ReadChunk(ctx context.Context, slices []base.Slice, pos uint32, p []byte) (int, error) {
	return s.readChunk(ctx, slices, pos, p, true)
}

// readChunk is ReadChunk; partial says small reads of uncached blocks may
// fetch only the segments they need (random access) rather than the whole
// block (sequential access, where the rest of the block is read next).
func (s *Store) readChunk(ctx context.Context, slices []base.Slice, pos uint32, p []byte, partial bool) (int, error) {
	if uint64(pos) >= base.ChunkSize {
		return 0, nil
	}
	p = p[:min(len(p), base.ChunkSize-int(pos))]
	a, b := uint64(pos), uint64(pos)+uint64(len(p))
	pieces, err := resolve(slices, a, b)
	if err != nil {
		return 0, err
	}
	clear(p)
	parts := s.blockParts(pieces, a)
	if err := s.readParts(ctx, parts, p, partial); err != nil {
		return 0, err
	}
	s.st.bytesRead.Add(int64(len(p)))
	return len(p), nil
}

// readParts fetches the distinct blocks of parts concurrently and copies
// the parts into p: every byte of every part.
func (s *Store) readParts(ctx context.Context, parts []blockPart, p []byte, allowPartial bool) error {
	if len(parts) == 0 {
		return nil
	}
	type blk struct {
		key    string
		length int
		data   []byte
		err    error
	}
	var blocks []*blk
	byKey := make(map[string]*blk, len(parts))
	owner := make([]*blk, len(parts))
	for i, pt := range parts {
		b := byKey[pt.key]
		if b == nil {
			b = &blk{key: pt.key, length: pt.length}
			byKey[pt.key] = b
			blocks = append(blocks, b)
		}
		owner[i] = b
	}
	// A block that is not in the memory tier whole and of which the read
	// needs only a small part, or that the memory tier would not keep
	// (memKeeps), is read partially: just the 64 KiB segments
	// covering the part, from the memory tier, else from the disk tier
	// (which reads and verifies only those segments of its file), else
	// with their CRC entries from the object store (random reads would
	// otherwise move whole blocks for a few KiB each); a partial read that
	// went to the object store also schedules a background fill of the
	// disk tier (fillDisk).
	need := make(map[*blk]int, len(blocks))
	for i, pt := range parts {
		need[owner[i]] += pt.n
	}
	partial := make(map[*blk]bool)
	for _, b := range blocks {
		if b.length > 2*SegmentSize && (allowPartial && need[b] <= b.length/8 || !s.memKeeps(b.key, b.length)) {
			if d, ok := s.cacheGet(b.key, b.length); ok {
				s.st.cacheHits.Add(1)
				b.data = d // one lookup of the memory tier, not two
				continue
			}
			if !s.fetching(b.key) {
				partial[b] = true
			}
		}
	}
	parallel(len(blocks), s.opts.ReadConcurrency, func(i int) {
		b := blocks[i]
		if partial[b] || b.data != nil {
			return
		}
		b.data, b.err = s.getBlock(ctx, b.key, b.length)
	})
	for _, b := range blocks {
		if b.err != nil {
			return b.err
		}
	}
	for i, pt := range parts {
		b := owner[i]
		if partial[b] {
			fetched, err := s.readRange(ctx, b.key, b.length, pt.boff, p[pt.dst:pt.dst+pt.n])
			if err != nil {
				return err
			}
			if fetched && !noFill(ctx) {
				s.fillDisk(ctx, b.key, b.length)
			}
			continue
		}
		copy(p[pt.dst:pt.dst+pt.n], b.data[pt.boff:pt.boff+pt.n])
	}
	return nil
}

// segKey names one verified segment of a block in the cache.
func segKey(key string, seg int) string { return key + "#" + strconv.Itoa(seg) }

// readRange fills dst with bytes [boff, boff+len(dst)) of a block of length
// bytes, reading and verifying only the segments that cover them: from the
// memory tier, else from the disk tier (which reads only those segments
// of its file of the block), else with two concurrent ranged reads from
// the object store (the segments' data and their CRC entries). It reports
// whether it went to the object store. A mismatch wraps base.ErrChecksum.
func (s *Store) readRange(ctx context.Context, key string, length, boff int, dst []byte) (fetched bool, err error) {
	segA, segB := boff/SegmentSize, (boff+len(dst)-1)/SegmentSize
	segs, tier := s.localSegments(key, length, segA, segB)
	switch tier {
	case tierMemory:
		s.st.cacheHits.Add(1)
	case tierDisk:
		s.st.cacheMisses.Add(1)
		s.st.diskHits.Add(1)
	default:
		s.st.cacheMisses.Add(1)
		if s.disk != nil {
			s.st.diskMisses.Add(1)
		}
		if err := s.fetchSegments(ctx, key, length, segA, segs); err != nil {
			return true, err
		}
	}
	off := boff - segA*SegmentSize
	for _, seg := range segs {
		if off >= len(seg) {
			off -= len(seg)
			continue
		}
		n := copy(dst, seg[off:])
		dst = dst[n:]
		off = 0
		if len(dst) == 0 {
			break
		}
	}
	if len(dst) > 0 {
		// The segments are checked for length where they are found, so
		// this does not happen; were it to, the read would return zeros
		// (readChunk clears its buffer) as if they were the file's.
		return tier == tierObject, fmt.Errorf("chunk: block %s: segments %d-%d end %d bytes short of the read: %w", key, segA, segB, len(dst), base.ErrIO)
	}
	return tier == tierObject, nil
}

// Where localSegments found a range of segments.
const (
	tierMemory = iota // every segment in the memory tier
	tierDisk          // read from the disk tier
	tierObject        // not all: the range must be fetched
)

// localSegments looks for segments [segA, segB] of a block of length bytes
// in the memory tier, then reads the range from the block's file in the
// disk tier and puts its segments into the memory tier. It returns them
// (all, unless the tier is tierObject) and where they were found.
func (s *Store) localSegments(key string, length, segA, segB int) ([][]byte, int) {
	segs := make([][]byte, segB-segA+1)
	if s.cache != nil {
		found := 0
		for i := range segs {
			want := min(SegmentSize, length-(segA+i)*SegmentSize)
			if d, ok := s.cache.Get(segKey(key, segA+i)); ok && len(d) == want {
				segs[i] = d
				found++
			}
		}
		if found == len(segs) {
			return segs, tierMemory
		}
	}
	if s.disk == nil {
		return segs, tierObject
	}
	lo, hi := segA*SegmentSize, min((segB+1)*SegmentSize, length)
	d, ok := s.disk.ReadRange(key, lo, hi-lo)
	if !ok {
		return segs, tierObject
	}
	for i := range segs {
		segs[i] = d[i*SegmentSize : min((i+1)*SegmentSize, len(d))]
		if s.cache != nil {
			s.cache.Put(segKey(key, segA+i), segs[i])
		}
	}
	return segs, tierDisk
}

// fetchSegments reads segments segA.. (len(segs) of them) of a block of
// length bytes from the object store, verifies them against their CRC
// entries, puts them into the memory tier and stores them in segs.
func (s *Store) fetchSegments(ctx context.Context, key string, length, segA int, segs [][]byte) error {
	id, err := s.blockID(key, length)
	if err != nil {
		return err
	}
	start := segA * SegmentSize
	end := min((segA+len(segs))*SegmentSize, length)
	s.st.objectGets.Add(2)
	// The two requests are independent: sent together, a miss costs one
	// round trip to a remote store instead of two (Options.LocalStore).
	var crcs []byte
	var crcErr error
	getCRCs := func() {
		crcs, crcErr = s.obj.Get(ctx, key, int64(length+4*segA), int64(4*len(segs)))
		if crcErr == nil && len(crcs) != 4*len(segs) {
			crcErr = fmt.Errorf("chunk: block %s: short CRC table: %w", key, base.ErrChecksum)
		}
	}
	var crcWait sync.WaitGroup
	if s.opts.LocalStore {
		getCRCs()
	} else {
		crcWait.Go(getCRCs)
	}
	data, err := s.obj.Get(ctx, key, int64(start), int64(end-start))
	if err == nil && len(data) != end-start {
		err = fmt.Errorf("chunk: block %s: short read of %d bytes at %d, want %d: %w", key, len(data), start, end-start, base.ErrChecksum)
	}
	crcWait.Wait()
	if err == nil {
		err = crcErr
	}
	if err != nil {
		if errors.Is(err, object.ErrNotFound) {
			return s.missing(ctx, key, err)
		}
		if errors.Is(err, base.ErrChecksum) {
			return s.mismatch(ctx, key, err)
		}
		return err
	}
	s.st.bytesFetched.Add(int64(len(data) + len(crcs)))
	t := newTagger(id, s.opts.BlockFormat)
	for i := range segs {
		seg := data[i*SegmentSize : min((i+1)*SegmentSize, len(data))]
		if err := checkSegment(t, segA+i, seg, binary.BigEndian.Uint32(crcs[4*i:])); err != nil {
			return s.mismatch(ctx, key, err)
		}
		segs[i] = seg
		if s.cache != nil {
			s.cache.Put(segKey(key, segA+i), seg)
		}
	}
	return nil
}

// Reader reads chunks for one sequential stream (one open file handle) and
// prefetches ahead of it. When consecutive reads continue where the
// previous one ended, it fetches the next Options.ReadAhead blocks of the
// same chunk into the block cache in the background; random reads trigger
// nothing. Prefetches use a small global pool of slots and are skipped when
// it is full, so they never delay foreground reads. Without a block cache
// it behaves like Store.ReadChunk. It is safe for concurrent use, though
// concurrent use by several streams defeats the detection.
type Reader struct {
	s *Store

	mu      sync.Mutex
	next    uint64 // file offset where the previous read ended
	seq     int    // consecutive sequential reads
	raChunk uint32 // chunk of raUpTo
	raUpTo  uint64 // chunk position up to which prefetch was issued
	// The read-ahead window's part in the next chunk, whose slices only
	// the caller can look up (NextChunk, PrefetchNext): positions up to
	// nxUpTo of chunk nxChunk are issued, those from spillFrom on not
	// yet handed to the caller if spill.
	nxChunk   uint32
	nxUpTo    uint64
	spill     bool
	spillFrom uint64
	// bg is the context of prefetches: no deadline, and the file of the
	// last read (WithInode), for the log lines of bad blocks.
	bg context.Context
}

// NewReader returns a Reader for one sequential stream.
func (s *Store) NewReader() *Reader { return &Reader{s: s, bg: context.Background()} }

// ReadChunk is Store.ReadChunk for chunk index of the file (used only to
// detect sequential access), plus read-ahead.
func (r *Reader) ReadChunk(ctx context.Context, index uint32, slices []base.Slice, pos uint32, p []byte) (int, error) {
	s := r.s
	if s.cache == nil || s.opts.ReadAhead < 0 || uint64(pos) >= base.ChunkSize {
		return s.readChunk(ctx, slices, pos, p, true)
	}
	off := uint64(index)*base.ChunkSize + uint64(pos)
	end := uint64(pos) + uint64(min(len(p), base.ChunkSize-int(pos)))
	r.mu.Lock()
	if ino, ok := inodeOf(ctx); ok {
		if old, _ := inodeOf(r.bg); old != ino {
			r.bg = WithInode(context.Background(), ino)
		}
	}
	bg := r.bg
	if off == r.next {
		r.seq++
	} else {
		r.seq = 0
	}
	r.next = uint64(index)*base.ChunkSize + end
	var from, to uint64
	if r.seq > 0 {
		from = end
		if r.raChunk == index && r.raUpTo > from {
			from = r.raUpTo
		} else if r.nxChunk == index && r.nxUpTo > from {
			from = r.nxUpTo
		}
		want := end + uint64(s.raBlocks)*uint64(s.opts.BlockSize)
		to = min(want, base.ChunkSize)
		if from < to {
			r.raChunk, r.raUpTo = index, to
		}
		if want > base.ChunkSize && index < maxChunkIndex {
			// The window reaches into the next chunk: without its
			// slices a sequential reader would stall at every chunk
			// boundary for a whole block fetch. That part is whole
			// blocks, so it grows a block at a time, not a read at a
			// time, and the caller's lookups are few.
			bs := uint64(s.opts.BlockSize)
			next, upTo := index+1, (want-base.ChunkSize+bs-1)/bs*bs
			if r.nxChunk != next {
				r.nxChunk, r.nxUpTo, r.spill = next, 0, false
			}
			if upTo > r.nxUpTo {
				if !r.spill {
					r.spill, r.spillFrom = true, r.nxUpTo
				}
				r.nxUpTo = upTo
			}
		}
	}
	random := r.seq == 0 && off != 0
	r.mu.Unlock()
	if from < to {
		s.prefetch(bg, slices, from, to)
	}
	return s.readChunk(ctx, slices, pos, p, random)
}

// maxChunkIndex is the last chunk index a file can have.
const maxChunkIndex = ^uint32(0)

// NextChunk reports whether the read-ahead window of the last ReadChunk
// calls reaches into the next chunk, and which chunk positions [from, upTo)
// of it to prefetch: the caller looks up that chunk's slices and passes
// them to PrefetchNext. Each position is reported once.
func (r *Reader) NextChunk() (index uint32, from, upTo uint64, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.spill {
		return 0, 0, 0, false
	}
	r.spill = false
	return r.nxChunk, r.spillFrom, r.nxUpTo, true
}

// PrefetchNext prefetches positions [from, upTo) of a chunk, given its
// slices, into the cache as read-ahead: what NextChunk reported, which it
// does only with a cache and read-ahead on.
func (r *Reader) PrefetchNext(slices []base.Slice, from, upTo uint64) {
	r.mu.Lock()
	bg := r.bg
	r.mu.Unlock()
	r.s.prefetch(bg, slices, from, min(upTo, base.ChunkSize))
}

// prefetch starts background fetches into the cache of the blocks serving
// chunk positions [a, b), as long as read-ahead slots are free. ctx
// is not cancelled; it carries the file being read (WithInode).
func (s *Store) prefetch(ctx context.Context, slices []base.Slice, a, b uint64) {
	pieces, err := resolve(slices, a, b)
	if err != nil {
		return
	}
	seen := make(map[string]bool)
	for _, pt := range s.blockParts(pieces, a) {
		if seen[pt.key] {
			continue
		}
		seen[pt.key] = true
		if _, ok := s.cacheGet(pt.key, pt.length); ok {
			continue
		}
		// A block already being fetched takes no slot: the window moves a
		// read at a time, so it covers a block being fetched once per read
		// of a block's size, and counting each would fill the slots with
		// one fetch and leave later blocks of the window unfetched.
		if s.fetching(pt.key) {
			continue
		}
		if s.disk == nil && !s.memKeeps(pt.key, pt.length) {
			return // no tier would keep it for the read to come
		}
		select {
		case s.raSem <- struct{}{}:
		default:
			return // busy: stay out of the way
		}
		s.st.prefetches.Add(1)
		c := s.startFetch(QuietMissing(ctx), pt.key, pt.length)
		go func() {
			<-c.done
			<-s.raSem
		}()
	}
}

// fillDisk fetches the whole block key into the disk tier in the
// background, after a partial read of it had to go to the object store:
// small random reads then fill the disk tier as sequential reads do, and
// later small reads of any part of the block are served locally (the disk
// tier reads only the segments they need). The foreground read never
// waits for it. A fill is skipped when the block is on disk, being
// fetched or filled already (deduplicated by key), or when
// Options.DiskFills fills are running (bounded, so a random workload
// cannot queue unbounded block fetches behind its small reads). The block
// goes to the disk tier only: the memory tier keeps the segments reads
// use. The fill outlives ctx; it keeps only its values (WithInode).
func (s *Store) fillDisk(ctx context.Context, key string, length int) {
	if s.fillSem == nil || s.disk.Has(key) {
		return
	}
	s.sfMu.Lock()
	if s.filling[key] || s.inflight[key] != nil {
		s.sfMu.Unlock()
		return
	}
	select {
	case s.fillSem <- struct{}{}:
	default:
		s.sfMu.Unlock()
		return // busy: a later miss of this block tries again
	}
	s.filling[key] = true
	s.sfMu.Unlock()
	s.st.diskFills.Add(1)
	go func() {
		defer func() {
			s.sfMu.Lock()
			delete(s.filling, key)
			s.sfMu.Unlock()
			<-s.fillSem
		}()
		data, _, err := s.fetchObject(QuietMissing(context.WithoutCancel(ctx)), key, length)
		if err != nil {
			return // a bad block is logged by fetchObject (a missing one by the read that needs it); a later miss tries again
		}
		// Write, not Put: the slot is held until the file is in place, so
		// fills go no faster than the disk takes them.
		if err := s.disk.Write(key, data); err != nil {
			// Best effort: a full or failing disk is counted and logged
			// by the disk cache.
			s.log.Debug("background fill of the disk cache", "key", key, "err", err)
		}
	}()
}
