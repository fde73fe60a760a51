// Package chunk maps file content onto immutable slices stored as
// checksummed block objects, buffers writes with a global memory bound, and
// serves reads through a block cache with single-flight fetches and
// sequential read-ahead.
//
// It owns the data path below vfs and must not import meta or vfs: the
// little metadata it needs (new slice ids, committing a slice to a chunk)
// reaches it through the Committer interface implemented by the caller, and
// the chunk maps it reads are passed in as []base.Slice.
//
// # Data layout
//
// File offset o lies in chunk o/base.ChunkSize at position o%base.ChunkSize.
// A chunk is an ordered list of base.Slice references (later entries win). A
// slice with id N and total size S is stored as ceil(S/BlockSize) blocks;
// block i holds slice bytes [i*BlockSize, min(S, (i+1)*BlockSize)) and is the
// object BlockKey(N, i, blockLen):
//
//	chunks/<N/1000000>/<N/1000>/<N>_<i>_<blockLen>
//
// The key alone tells gc which slice a block belongs to (ParseBlockKey) and
// the reader how long the block is.
//
// # Block format
//
// A block object is the block data, then a table with one big-endian
// uint32 per 64 KiB segment of the data (the last segment may be shorter),
// then the 4-byte trailer "CRN" and the BlockFormat:
//
//	data[0:n] | entry(seg 0) .. entry(seg k-1) | 'C' 'R' 'N' format
//
// In format 2 (BlockFormat2, volumes of meta format version 3 on) the
// entry of segment i is the CRC-32C (Castagnoli) of the segment XORed with
// a tag, the CRC-32C of the block's identity (BlockID: slice id, block
// index, length) and i: an object read under another block's key fails
// its check, as a damaged one does. In format 1 (older volumes) it is the
// CRC-32C alone. A Store reads only its volume's format
// (Options.BlockFormat).
//
// See EncodeBlock and DecodeBlock. Every read verifies every segment of the
// block before any byte of it is returned or cached; a mismatch, a bad
// trailer or a wrong object size is an error wrapping base.ErrChecksum (vfs
// turns it into EIO) and an error log line — never wrong data. The line
// names the object and the file (WithInode), and is written at most once
// a minute per object (Logged).
//
// Reads fetch and verify whole blocks (at most BlockSize, 4 MiB by default)
// and cache the verified data, except small reads of blocks that no tier
// holds whole: those read only the 64 KiB segments they need plus their
// CRC entries (two ranged requests, sent together) and cache the verified
// segments under their own keys. Verifying a whole 4 MiB block costs about
// 0.16 ms (CRC-32C runs at ~25 GB/s with hardware support), far below one
// object-store round trip.
//
// Below the BlockCache an optional DiskCache (Options.DiskCache) is asked
// on a miss, inside the single-flight fetch, and given every block fetched
// from the object store (and, with Options.CacheWrites, every block
// uploaded). A small read that had to go to the object store also starts
// a bounded, deduplicated background fetch of its whole block into the
// disk tier (Options.DiskFills), so random reads fill the disk tier too;
// a small read served by the disk tier reads only the 64 KiB segments it
// needs of the block's file (DiskCache.ReadRange).
// Store.Warm fills it with whole blocks without touching the BlockCache.
// Blocks shorter than BlockSize (small writes) and blocks written by
// compaction go into the BlockCache when uploaded: they are read back
// soon, and would otherwise cost an object get each.
//
// Concurrent reads of one block share one fetch (single-flight); the blocks
// one ReadChunk spans are fetched in parallel (Options.ReadConcurrency). A
// Reader (one per open handle) detects sequential access and prefetches the
// next Options.ReadAhead blocks of the chunk into the block cache.
//
// # Writing
//
// A Writer (one per open inode) buffers writes as slices, uploads each full
// block as soon as it fills, and on Flush uploads the rest and commits the
// slices through the Committer in the order they were started. Buffered,
// not yet uploaded bytes of all Writers are bounded by Options.BufferLimit:
// Write blocks (until its context ends) while the bound would be exceeded,
// so a Write to an unreachable object store blocks rather than failing.
// That bound is the only thing a Write waits for: the flush a Writer starts
// itself (a chunk with too many uncommitted slices) runs in the background,
// and its error is returned by the next Write and retried by the next
// Flush.
//
// # Visibility and durability
//
// Data given to Writer.Write is not visible to ReadChunk until Writer.Flush
// has uploaded it and committed its slices through the Committer, and the
// caller has re-read the chunk map: ReadChunk only reads what the slices
// passed to it reference. A caller reading a file with pending writes takes
// Writer.Overlay of the range, then the chunk map (or both inside
// Writer.HoldCommits), and applies the overlay over what ReadChunk
// returned (read-your-writes without a commit). When the object store implements object.Syncer,
// objects are durable only after Store.SyncObjects, which fsync must call
// after Flush and before syncing metadata.
package chunk
