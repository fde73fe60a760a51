package chunk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/object"
)

// BlockCache caches verified block data by block key. It is safe for
// concurrent use. Get returns data the caller must not modify; Put takes
// ownership of data (chunk never modifies it afterwards). A cache may drop
// entries at any time. Block keys are never reused for different content,
// so a cache needs no invalidation for correctness.
type BlockCache interface {
	Get(key string) ([]byte, bool)
	Put(key string, data []byte)
}

// BlockCacheDeleter is an optional ability of a BlockCache: DeleteSlice
// drops the blocks of deleted slices from caches that implement it.
type BlockCacheDeleter interface {
	Delete(key string)
}

// DiskCache is a cache tier below the BlockCache: slower (local files)
// but larger, and it may keep blocks across restarts. The Store asks it
// for a block only after a BlockCache miss, inside the single-flight fetch
// of that block, and gives it every block it fetched from the object store.
// It is safe for concurrent use.
//
// Get returns verified block data the caller owns, or false; it may do
// disk I/O and is never called under a Store lock. A DiskCache must verify
// what it returns itself (a damaged file is a miss, never wrong data).
// ReadRange is Get of bytes [off, off+n) of a block: it reads and
// verifies only what holds them, so a small random read of a block
// cached whole costs a small read. Has reports cheaply, without I/O,
// whether key is probably cached. Put caches data in the background and
// may drop it; it keeps data until written, and nobody modifies data
// afterwards. Write caches data before
// it returns (warmup) or returns why it could not. Delete drops a key.
type DiskCache interface {
	Get(key string) ([]byte, bool)
	ReadRange(key string, off, n int) ([]byte, bool)
	Has(key string) bool
	Put(key string, data []byte)
	Write(key string, data []byte) error
	Delete(key string)
}

// syncer is object.Syncer, restated so the assertion is local.
type syncer interface {
	Sync(ctx context.Context) error
}

var _ syncer = object.Syncer(nil)

// Store reads and writes slices of file content in an object store. It is
// safe for concurrent use.
type Store struct {
	obj   object.Store
	cache BlockCache // may be nil
	disk  DiskCache  // may be nil
	// keeps is the cache's ability to tell whether it would keep a
	// block (nil: it keeps every block; memKeeps); raBlocks is a
	// sequential reader's read-ahead window (readAheadBlocks).
	keeps    keeper
	raBlocks int
	opts     Options
	log      *slog.Logger
	bad      *badBlocks // logs bad blocks, rate-limited

	upSem   chan struct{} // upload slots (global)
	raSem   chan struct{} // read-ahead slots (global, try-acquire only)
	fillSem chan struct{} // disk-fill slots (global, try-acquire only); nil: no fills

	sfMu     sync.Mutex
	inflight map[string]*fetchCall
	filling  map[string]bool // blocks being fetched into the disk tier, guarded by sfMu

	// Write buffer accounting: bytes copied into Writers and not yet
	// uploaded, guarded by bufMu; bufWake is closed (and replaced) whenever
	// bytes are released.
	bufMu    sync.Mutex
	buffered int64
	peak     int64 // highest value of buffered
	bufWake  chan struct{}
	// blockBufs recycles the buffers of full blocks (blockBuf).
	blockBufs sync.Pool

	writersMu sync.Mutex
	writers   map[*Writer]struct{}

	st stats
}

type fetchCall struct {
	done chan struct{}
	data []byte
	err  error
}

// New returns a Store over obj. cache may be nil (no caching; then
// read-ahead is off). opts is validated (defaults filled in).
func New(obj object.Store, cache BlockCache, opts Options) (*Store, error) {
	if obj == nil {
		return nil, fmt.Errorf("chunk: nil object store: %w", base.ErrInvalid)
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	s := &Store{
		obj:      obj,
		cache:    cache,
		disk:     opts.DiskCache,
		opts:     opts,
		log:      opts.Logger,
		bad:      newBadBlocks(opts.Logger),
		upSem:    make(chan struct{}, opts.UploadConcurrency),
		raSem:    make(chan struct{}, max(opts.ReadAhead, 1)*2),
		inflight: make(map[string]*fetchCall),
		filling:  make(map[string]bool),
		bufWake:  make(chan struct{}),
		writers:  make(map[*Writer]struct{}),
	}
	if s.disk != nil && opts.DiskFills > 0 {
		s.fillSem = make(chan struct{}, opts.DiskFills)
	}
	s.keeps, _ = cache.(keeper)
	s.raBlocks = s.readAheadBlocks()
	return s, nil
}

// Space returns the room of the object store's storage
// (object.SpaceOf), or an error wrapping object.ErrUnknownSpace when the
// store cannot tell (S3).
func (s *Store) Space(ctx context.Context) (object.Space, error) {
	return object.SpaceOf(ctx, s.obj)
}

// Options returns the validated options in use.
func (s *Store) Options() Options { return s.opts }

// BlockSize returns the block size in use.
func (s *Store) BlockSize() int { return s.opts.BlockSize }

// Inline reports whether a slice of one block in chunk index, ending at
// chunk position end, is inline (base.InlineBit in its id, see
// Options.InlineMax): it lies within the first InlineMax bytes of the
// file. The writer and compaction both follow it.
func (s *Store) Inline(index, end uint32) bool {
	return index == 0 && end <= uint32(s.inlineMax())
}

// inlineMax is the inline limit in force (Options.InlineLimit).
func (s *Store) inlineMax() int {
	if s.opts.InlineLimit == nil {
		return s.opts.InlineMax
	}
	n := s.opts.InlineLimit()
	if n < 0 || n > MaxInlineMax || n >= s.opts.BlockSize {
		return 0
	}
	return n
}

// blockLen returns the length of block index of a slice of size bytes.
func (s *Store) blockLen(size uint32, index int) int {
	bs := s.opts.BlockSize
	return min(bs, int(size)-index*bs)
}

// numBlocks returns the number of blocks of a slice of size bytes.
func (s *Store) numBlocks(size uint32) int {
	return (int(size) + s.opts.BlockSize - 1) / s.opts.BlockSize
}

// getBlock returns the verified data of a block, from the cache or the
// object store. Concurrent misses of one block share one fetch; the fetch
// keeps running if ctx is cancelled, so other waiters (and the cache) still
// get it. The returned slice must not be modified.
func (s *Store) getBlock(ctx context.Context, key string, length int) ([]byte, error) {
	if d, ok := s.cacheGet(key, length); ok {
		s.st.cacheHits.Add(1)
		return d, nil
	}
	s.st.cacheMisses.Add(1)
	c := s.startFetch(ctx, key, length)
	select {
	case <-c.done:
		return c.data, c.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// keeper is the optional ability of a BlockCache to tell whether it would
// keep an item (cache.Memory keeps none larger than a quarter of its size).
type keeper interface {
	Keeps(key string, n int) bool
}

// memKeeps reports whether the memory tier would keep the block key of
// length bytes. A sequential read of a block it would not keep must not
// fetch the whole block: the block would be thrown away once the read's
// part is copied, and the next read of the same block would fetch it all
// again (with a memory tier of 8 MiB and blocks of 4 MiB, a sequential
// reader fetched each block about four times and read at a quarter of
// its link).
func (s *Store) memKeeps(key string, length int) bool {
	return s.cache != nil && (s.keeps == nil || s.keeps.Keeps(key, length))
}

// sizer is the optional ability of a BlockCache to tell its bound.
type sizer interface {
	Max() int64
}

// readAheadBlocks is how many blocks a sequential reader's window holds
// (New keeps it in raBlocks):
// Options.ReadAhead, but without a disk tier no more than half of what
// the memory tier holds, so that the blocks fetched ahead do not evict
// the ones not yet read (16 blocks of 4 MiB ahead of a reader with a
// 64 MiB memory tier fetched a quarter of the blocks twice).
func (s *Store) readAheadBlocks() int {
	n := s.opts.ReadAhead
	if sz, ok := s.cache.(sizer); ok && s.disk == nil {
		n = min(n, max(1, int(sz.Max()/2/int64(s.opts.BlockSize))))
	}
	return n
}

func (s *Store) cacheGet(key string, length int) ([]byte, bool) {
	if s.cache == nil {
		return nil, false
	}
	d, ok := s.cache.Get(key)
	return d, ok && len(d) == length
}

// fetching reports whether a fetch of key is in flight.
func (s *Store) fetching(key string) bool {
	s.sfMu.Lock()
	defer s.sfMu.Unlock()
	return s.inflight[key] != nil
}

// startFetch joins or starts the fetch of key. The leader puts the result in
// the cache before it leaves the in-flight table, so a caller that finds
// neither an in-flight fetch nor a cache entry (checked under sfMu) really
// has to fetch.
func (s *Store) startFetch(ctx context.Context, key string, length int) *fetchCall {
	s.sfMu.Lock()
	if c := s.inflight[key]; c != nil {
		s.sfMu.Unlock()
		return c
	}
	if d, ok := s.cacheGet(key, length); ok {
		s.sfMu.Unlock()
		c := &fetchCall{done: make(chan struct{}), data: d}
		close(c.done)
		return c
	}
	c := &fetchCall{done: make(chan struct{})}
	s.inflight[key] = c
	s.sfMu.Unlock()
	fctx := context.WithoutCancel(ctx)
	go func() {
		c.data, c.err = s.fetch(fctx, key, length)
		if c.err == nil && s.cache != nil && !noFill(ctx) {
			s.cache.Put(key, c.data)
		}
		s.sfMu.Lock()
		delete(s.inflight, key)
		s.sfMu.Unlock()
		close(c.done)
	}()
	return c
}

// fetch returns one block from the disk cache, or reads and verifies its
// object and gives it to the disk cache.
func (s *Store) fetch(ctx context.Context, key string, length int) ([]byte, error) {
	if s.disk != nil {
		if d, ok := s.disk.Get(key); ok && len(d) == length {
			s.st.diskHits.Add(1)
			return d, nil
		}
		s.st.diskMisses.Add(1)
	}
	data, sums, err := s.fetchObject(ctx, key, length)
	if err == nil && s.disk != nil && !noFill(ctx) {
		// Through the page cache, not past it: the device's writes then
		// wait for writeback instead of competing with the reads still
		// to come (design 0005, "The disk tier's writes of sequential
		// blocks").
		s.diskPut(key, data, sums, false)
	}
	return data, err
}

type noFillKey struct{}

// withoutFill marks reads whose blocks are not worth caching: compaction
// reads the blocks it is about to replace, and putting them in the
// memory tier would evict live blocks, and in the disk tier cost a block
// write each (a third of the daemon's CPU under 4K random writes). A
// fetch shared with another read (single-flight) follows its leader.
func withoutFill(ctx context.Context) context.Context {
	return context.WithValue(ctx, noFillKey{}, true)
}

func noFill(ctx context.Context) bool {
	v, _ := ctx.Value(noFillKey{}).(bool)
	return v
}

// fetchObject reads and verifies one block object, and returns its data
// and its segment checksums.
func (s *Store) fetchObject(ctx context.Context, key string, length int) (data, sums []byte, err error) {
	id, err := s.blockID(key, length)
	if err != nil {
		return nil, nil, err
	}
	s.st.objectGets.Add(1)
	obj, err := object.ReadAll(ctx, s.obj, key)
	if err != nil {
		if errors.Is(err, object.ErrNotFound) {
			return nil, nil, s.missing(ctx, key, err)
		}
		return nil, nil, fmt.Errorf("chunk: get block %s: %w", key, err)
	}
	s.st.bytesFetched.Add(int64(len(obj)))
	data, err = DecodeBlock(obj, id, s.opts.BlockFormat)
	if err != nil {
		return nil, nil, s.mismatch(ctx, key, err)
	}
	return data, blockSums(obj, id, s.opts.BlockFormat), nil
}

// blockID returns the identity of the block under key, of length bytes.
func (s *Store) blockID(key string, length int) (BlockID, error) {
	id, err := blockIDOf(key)
	if err == nil && id.Length != length {
		err = fmt.Errorf("chunk: block key %s read as %d bytes: %w", key, length, base.ErrInvalid)
	}
	return id, err
}

// missing counts, logs (see badBlocks) and returns the failure of a read
// of block key whose object is not in the store (err).
func (s *Store) missing(ctx context.Context, key string, err error) error {
	err = fmt.Errorf("chunk: block %s missing: %w: %w", key, base.ErrIO, err)
	if quietMissing(ctx) {
		return err
	}
	return s.bad.report(ctx, key, "block object missing", err, "store", s.obj.String())
}

// mismatch counts, logs (see badBlocks) and returns the failure of a
// read of block key that did not pass its checks (err, wrapping
// base.ErrChecksum).
func (s *Store) mismatch(ctx context.Context, key string, err error) error {
	s.st.checksumErrors.Add(1)
	err = fmt.Errorf("chunk: block %s: %w", key, err)
	return s.bad.report(ctx, key, "block checksum mismatch", err, "store", s.obj.String())
}

// putBlock encodes data as a block object and stores it under key, holding
// an upload slot. It may append the CRC table into data's spare capacity.
// With toMemory the uploaded block is also put into the memory tier, which
// then owns data (the caller must not modify it afterwards); without, it is
// taken for a stream's block that will not be read back soon, and the
// object store is told so (object.WithCold).
//
// written: the block is one a client wrote (not compaction's output), to
// which Options.CacheSmallWrites applies.
func (s *Store) putBlock(ctx context.Context, key string, data []byte, toMemory, written bool) error {
	select {
	case s.upSem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.upSem }()
	id, err := s.blockID(key, len(data))
	if err != nil {
		return err
	}
	obj := EncodeBlock(data, id, s.opts.BlockFormat)
	sums := blockSums(obj, id, s.opts.BlockFormat)
	s.st.objectPuts.Add(1)
	putCtx := object.WithCRC32C(ctx, objectCRC(obj, len(data), sums))
	if !toMemory {
		putCtx = object.WithCold(putCtx) // a stream's block: not read back soon
	}
	if err := s.obj.Put(putCtx, key, obj); err != nil {
		return fmt.Errorf("chunk: put block %s: %w", key, err)
	}
	s.st.bytesWritten.Add(int64(len(data)))
	if toMemory && s.cache != nil {
		s.cache.Put(key, memoryCopy(data))
	}
	data = data[:len(data):len(data)]
	if s.cachesWrite(len(data), written) {
		s.diskPut(key, data, sums, !toMemory)
	}
	return nil
}

// cachesWrite reports whether an uploaded block of n bytes goes to the
// disk tier as it is written: under Options.CacheWrites every block, under
// CacheSmallWrites a short one a client wrote. Compaction's short outputs
// are left out: a range rewritten again before anyone reads it would cost
// a disk write each time (see compact).
func (s *Store) cachesWrite(n int, written bool) bool {
	return s.disk != nil && (s.opts.CacheWrites || written && s.opts.CacheSmallWrites && n < s.opts.BlockSize)
}

// diskPut gives a block to the disk tier with its segment checksums, as
// a cold one (written past the page cache) if cold, where the tier can.
func (s *Store) diskPut(key string, data, sums []byte, cold bool) {
	if sp, ok := s.disk.(sumsPutter); ok {
		sp.PutSums(key, data, sums, cold)
		return
	}
	s.disk.Put(key, data)
}

// sumsPutter is a DiskCache that takes a block's segment checksums with
// it, and can write a block that is not read back soon past the page
// cache (cache.Disk).
type sumsPutter interface {
	PutSums(key string, data, sums []byte, cold bool)
}

// cacheRandomWrite puts an uploaded pack or compaction output into the
// disk tier under Options.CacheRandomWrites (unless putBlock already did:
// cachesWrite).
func (s *Store) cacheRandomWrite(key string, data []byte, written bool) {
	if s.opts.CacheRandomWrites && !s.cachesWrite(len(data), written) && s.disk != nil {
		s.disk.Put(key, data)
	}
}

// blockBuf returns a buffer of length n for a full block and room to
// encode it in place (EncodedLen(BlockSize)): one recycled by
// recycleBlockBuf, or a new one. Its bytes past the first n are not
// zeroed.
func (s *Store) blockBuf(n int) []byte {
	if p, ok := s.blockBufs.Get().(*[]byte); ok {
		return (*p)[:n]
	}
	return make([]byte, n, EncodedLen(s.opts.BlockSize))
}

// memoryCopy returns what the memory tier keeps of an uploaded block:
// data itself, or a copy of it when it sits in a buffer at least twice as
// large (a block buffer given to the first write of what looked like a
// stream, in a file that ended soon after). The tier counts the bytes of
// its blocks, not their buffers': kept whole, such buffers held far more
// than its bound (heap in use after a tar -x of the Go tree on an
// embedded mount: 666 MB, 271 MB with the copy), and each new one was
// zeroed.
func memoryCopy(data []byte) []byte {
	if oversized(data) {
		return bytes.Clone(data)
	}
	return data[:len(data):len(data)]
}

// oversized reports whether data's buffer is at least twice its length,
// and larger by 64 KiB or more (memoryCopy).
func oversized(data []byte) bool {
	c := cap(data)
	return c >= 2*len(data) && c-len(data) >= 64<<10
}

// recyclesShort reports whether the block buffer buf of an uploaded block
// shorter than a block is left to nobody (so recycleBlockBuf may take it):
// the memory tier took a copy (memoryCopy) or is off, and the disk tier
// does not take it (cachesWrite).
func (s *Store) recyclesShort(buf []byte) bool {
	n := len(buf)
	return cap(buf) == EncodedLen(s.opts.BlockSize) && n < s.opts.BlockSize && !s.cachesWrite(n, true) &&
		(s.cache == nil || oversized(buf))
}

// recycleBlockBuf takes back the buffer of a full block that putBlock
// uploaded and left to nobody: not put into the memory tier (it keeps
// only shorter blocks) nor queued for the disk tier (CacheWrites). A
// stream then writes into the same few buffers instead of asking the
// runtime for fresh ones, which it zeroes and the kernel maps in page by
// page (measured: about a tenth of a sequential writer's CPU).
func (s *Store) recycleBlockBuf(buf []byte) {
	if cap(buf) != EncodedLen(s.opts.BlockSize) || s.opts.CacheWrites && s.disk != nil {
		return
	}
	buf = buf[:0]
	s.blockBufs.Put(&buf)
}

// SyncObjects makes every block uploaded so far durable, when the object
// store implements object.Syncer (otherwise Put already is durable and this
// does nothing). Writer.Flush does not sync; fsync calls Flush, then
// SyncObjects, then syncs metadata, in that order.
func (s *Store) SyncObjects(ctx context.Context) error {
	if sy, ok := s.obj.(syncer); ok {
		if err := sy.Sync(ctx); err != nil {
			return fmt.Errorf("chunk: sync %s: %w", s.obj, err)
		}
	}
	return nil
}

// DeleteSlice deletes every block object of slice id of size bytes and
// drops them from the disk tier, and them and their segments from the
// cache (if it implements BlockCacheDeleter). Blocks already missing are
// fine, so it may be repeated. It tries every block and returns the first error.
func (s *Store) DeleteSlice(ctx context.Context, id uint64, size uint32) error {
	if id == 0 {
		return nil
	}
	n := s.numBlocks(size)
	errs := make([]error, n)
	parallel(n, s.opts.UploadConcurrency, func(i int) {
		blen := s.blockLen(size, i)
		key := BlockKey(id, i, blen)
		s.forgetBlock(key, blen)
		s.st.objectDeletes.Add(1)
		if err := s.obj.Delete(ctx, key); err != nil {
			errs[i] = fmt.Errorf("chunk: delete block %s: %w", key, err)
		}
	})
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// DeleteSlices deletes the blocks of every slice of ss, as DeleteSlice
// does each, with as few requests as the object store allows: batches
// of up to object.MaxBatchDelete keys where it is an object.BatchDeleter
// (S3's DeleteObjects; one metadata transaction for inline blocks), one
// DeleteSlice per slice otherwise. It stops at the first error; since
// deleting a missing block is fine, the caller may repeat it whole.
func (s *Store) DeleteSlices(ctx context.Context, ss []base.Slice) error {
	if _, ok := s.obj.(object.BatchDeleter); !ok {
		for _, sl := range ss {
			if err := s.DeleteSlice(ctx, sl.ID, sl.Size); err != nil {
				return err
			}
		}
		return nil
	}
	var keys []string
	for _, sl := range ss {
		if sl.ID == 0 {
			continue
		}
		for i := range s.numBlocks(sl.Size) {
			blen := s.blockLen(sl.Size, i)
			key := BlockKey(sl.ID, i, blen)
			s.forgetBlock(key, blen)
			keys = append(keys, key)
		}
	}
	s.st.objectDeletes.Add(int64(len(keys)))
	if err := object.DeleteAll(ctx, s.obj, keys); err != nil {
		return fmt.Errorf("chunk: delete %d blocks of %d slices: %w", len(keys), len(ss), err)
	}
	return nil
}

// forgetBlock drops the block under key (of blen data bytes) from the
// disk tier, and it and the segments partial reads cache under their own
// keys from the memory cache.
func (s *Store) forgetBlock(key string, blen int) {
	if s.disk != nil {
		s.disk.Delete(key)
	}
	del, _ := s.cache.(BlockCacheDeleter)
	for seg := -1; del != nil && seg*SegmentSize < blen; seg++ {
		k := key
		if seg >= 0 {
			k = segKey(key, seg)
		}
		del.Delete(k)
	}
}

// parallel runs fn(0..n-1) with at most limit running at once and waits.
func parallel(n, limit int, fn func(i int)) {
	if n == 1 || limit <= 1 {
		for i := range n {
			fn(i)
		}
		return
	}
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			fn(i)
		})
	}
	wg.Wait()
}

// Stats are cumulative counters of a Store (Buffered is a gauge).
type Stats struct {
	BytesWritten   int64 // data bytes uploaded in blocks (excl. CRC tables)
	BytesRead      int64 // bytes returned by ReadChunk
	BytesFetched   int64 // object bytes fetched from the object store
	ObjectPuts     int64
	ObjectGets     int64
	ObjectDeletes  int64
	CacheHits      int64 // BlockCache
	CacheMisses    int64
	DiskHits       int64 // DiskCache, asked after a BlockCache miss
	DiskMisses     int64
	ChecksumErrors int64
	Prefetches     int64 // blocks fetched by read-ahead
	DiskFills      int64 // whole blocks fetched into the DiskCache after partial reads
	Compactions    int64 // slices written by Compact and CompactRange
	CompactBytes   int64 // bytes they rewrote
	InlineCommits  int64 // inline blocks committed with their slice, not put (InlineCommitter)
	Buffered       int64 // bytes buffered in Writers, not yet uploaded
	BufferedPeak   int64 // highest Buffered seen
}

type stats struct {
	bytesWritten, bytesRead, bytesFetched  atomic.Int64
	objectPuts, objectGets, objectDeletes  atomic.Int64
	cacheHits, cacheMisses, checksumErrors atomic.Int64
	prefetches, diskHits, diskMisses       atomic.Int64
	diskFills, compactions, compactBytes   atomic.Int64
	inlineCommits                          atomic.Int64
}

// Stats returns a snapshot of the counters.
func (s *Store) Stats() Stats {
	s.bufMu.Lock()
	buffered, peak := s.buffered, s.peak
	s.bufMu.Unlock()
	return Stats{
		BytesWritten:   s.st.bytesWritten.Load(),
		BytesRead:      s.st.bytesRead.Load(),
		BytesFetched:   s.st.bytesFetched.Load(),
		ObjectPuts:     s.st.objectPuts.Load(),
		ObjectGets:     s.st.objectGets.Load(),
		ObjectDeletes:  s.st.objectDeletes.Load(),
		CacheHits:      s.st.cacheHits.Load(),
		CacheMisses:    s.st.cacheMisses.Load(),
		DiskHits:       s.st.diskHits.Load(),
		DiskMisses:     s.st.diskMisses.Load(),
		ChecksumErrors: s.st.checksumErrors.Load(),
		Prefetches:     s.st.prefetches.Load(),
		DiskFills:      s.st.diskFills.Load(),
		Compactions:    s.st.compactions.Load(),
		CompactBytes:   s.st.compactBytes.Load(),
		InlineCommits:  s.st.inlineCommits.Load(),
		Buffered:       buffered,
		BufferedPeak:   peak,
	}
}
