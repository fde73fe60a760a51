package chunk

import (
	"fmt"
	"log/slog"

	"github.com/cairnfs/cairn/internal/base"
)

// Defaults of Options.
const (
	DefaultBlockSize         = 4 << 20
	DefaultBufferLimit       = 256 << 20
	DefaultUploadConcurrency = 16
	DefaultReadAhead         = 8
	DefaultReadConcurrency   = 8
	DefaultMaxChunkSlices    = 32
	DefaultDiskFills         = 4

	// MinBlockSize is the smallest block size accepted.
	MinBlockSize = 4 << 10
)

// Options configures a Store. The zero value of every field means its
// default; Validate fills them in and rejects impossible values.
type Options struct {
	// BlockSize is the size of every block object but the last of a slice
	// (the volume's block size). It must be the same for every client of a
	// volume, since readers derive block keys from it. Default 4 MiB; at
	// least MinBlockSize, at most base.ChunkSize.
	BlockSize int
	// BufferLimit bounds the bytes buffered by all Writers of the Store that
	// are not yet uploaded. Writes block (honouring their context) while the
	// bound would be exceeded. Default 256 MiB.
	BufferLimit int64
	// UploadConcurrency bounds the block uploads in flight for the whole
	// Store (writes and compaction). Default 16.
	UploadConcurrency int
	// ReadConcurrency bounds the block fetches one ReadChunk call runs in
	// parallel. Default 8.
	ReadConcurrency int
	// ReadAhead is the number of blocks a Reader prefetches ahead of a
	// sequential reader. Default 8; negative disables read-ahead. Read-ahead
	// needs a block cache (it fetches into the cache).
	ReadAhead int
	// MaxChunkSlices is the number of uncommitted slices one chunk of one
	// Writer may have before Write flushes the Writer itself (so small
	// scattered writes are committed and compacted instead of piling up).
	// Default 32.
	MaxChunkSlices int
	// DiskCache is the second cache tier, below the BlockCache and above
	// the object store (see DiskCache). Default nil: none.
	DiskCache DiskCache
	// DiskFills bounds the whole-block fetches into DiskCache that run in
	// the background after partial reads (see Store.ReadChunk): when a
	// small read of a block in neither cache tier fetches only a few
	// segments, the whole block is also fetched into the disk tier, unless
	// this many such fetches are running already. Default 4; negative
	// disables them (small random reads then never fill the disk tier).
	// Without a DiskCache it has no effect.
	DiskFills int
	// CacheWrites also puts the blocks this Store uploads into DiskCache
	// (cache-on-write), so that data written here is read back locally.
	// Default false.
	CacheWrites bool
	// CacheSmallWrites puts the blocks this Store uploads that are
	// shorter than a full block (small files, the ends of files, packs of
	// small slices) into DiskCache, even without CacheWrites: they are
	// likely read again, and cost the disk little. Default false here;
	// cairn mount turns it on (--cache-small-writes).
	CacheSmallWrites bool
	// CacheRandomWrites puts the objects that random writes make, packs of
	// small slices and compaction output, into DiskCache even without
	// CacheWrites: on a remote store a read that misses memory would
	// otherwise fetch their segments from the object store (milliseconds
	// each) before the disk tier has them. Default false.
	CacheRandomWrites bool
	// LocalStore says the object store answers in microseconds (a local
	// directory): the two ranges a block read that misses the caches needs,
	// its segments and their checksums, are read one after the other
	// instead of at once, which on a remote store saves a round trip and
	// here would only cost a goroutine and a wake-up. Default false.
	LocalStore bool
	// InlineMax: a slice of at most this many bytes that lies within the
	// first InlineMax bytes of a file (a small file, or the start of one)
	// gets base.InlineBit in its id, and its block goes to the object
	// store under a key that says so; the volume's store keeps such blocks
	// in the metadata engine. Slices elsewhere, such as small random writes
	// into a large file, do not: they would cost the metadata engine a
	// transaction each. Default 0: none. At most MaxInlineMax.
	InlineMax int
	// InlineLimit, if set, is asked for the inline limit at each decision
	// instead of InlineMax: a volume's limit may change while it is
	// mounted (meta.Settings.InlineMax, cairn config --inline-max). A
	// value outside InlineMax's bounds counts as 0. A slice's place is
	// decided once, when its block is sealed, and recorded in its id,
	// so blocks written before a change stay where they are.
	InlineLimit func() int
	// BlockFormat is the format of the block objects the Store writes,
	// and the only one it reads: a block of the other format fails its
	// check. Every client of a volume must use the volume's (meta
	// settings: format version 3 and later BlockFormat2, earlier ones
	// BlockFormat1). Default BlockFormat2.
	BlockFormat BlockFormat
	// Logger receives checksum mismatches and background upload failures.
	// Default: discard.
	Logger *slog.Logger
}

// MaxInlineMax bounds Options.InlineMax.
const MaxInlineMax = 64 << 10

// Validate fills in defaults and checks the options.
func (o *Options) Validate() error {
	if o.BlockSize == 0 {
		o.BlockSize = DefaultBlockSize
	}
	if o.BlockSize < MinBlockSize || o.BlockSize > base.ChunkSize {
		return fmt.Errorf("chunk: block size %d outside [%d, %d]: %w",
			o.BlockSize, MinBlockSize, base.ChunkSize, base.ErrInvalid)
	}
	if o.BufferLimit == 0 {
		o.BufferLimit = DefaultBufferLimit
	}
	if o.InlineMax < 0 || o.InlineMax > MaxInlineMax || o.InlineMax >= o.BlockSize {
		return fmt.Errorf("chunk: inline limit %d outside [0, %d] or not below the block size %d: %w",
			o.InlineMax, MaxInlineMax, o.BlockSize, base.ErrInvalid)
	}
	if o.BufferLimit < 0 {
		return fmt.Errorf("chunk: negative buffer limit %d: %w", o.BufferLimit, base.ErrInvalid)
	}
	if o.UploadConcurrency == 0 {
		o.UploadConcurrency = DefaultUploadConcurrency
	}
	if o.ReadConcurrency == 0 {
		o.ReadConcurrency = DefaultReadConcurrency
	}
	if o.UploadConcurrency < 0 || o.ReadConcurrency < 0 {
		return fmt.Errorf("chunk: negative concurrency: %w", base.ErrInvalid)
	}
	if o.ReadAhead == 0 {
		o.ReadAhead = DefaultReadAhead
	}
	if o.DiskFills == 0 {
		o.DiskFills = DefaultDiskFills
	}
	if o.MaxChunkSlices == 0 {
		o.MaxChunkSlices = DefaultMaxChunkSlices
	}
	if o.MaxChunkSlices < 0 {
		return fmt.Errorf("chunk: negative MaxChunkSlices: %w", base.ErrInvalid)
	}
	if o.BlockFormat == 0 {
		o.BlockFormat = BlockFormat2
	}
	if !o.BlockFormat.valid() {
		return fmt.Errorf("chunk: unknown block format %d: %w", o.BlockFormat, base.ErrInvalid)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}
