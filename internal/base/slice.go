package base

// ChunkSize is the fixed size of a file chunk: file offset o lies in chunk
// o / ChunkSize at position o % ChunkSize.
const ChunkSize = 64 << 20

// MaxFileSize is the largest file length Cairn accepts: 2^50 bytes, 16M
// chunks of ChunkSize, well inside the 32-bit chunk index. vfs refuses
// writes and allocations past it (EFBIG) and the NFS gateway announces it
// in FSINFO.
const MaxFileSize = 1 << 50

// Slice is one reference from a chunk to (part of) an immutable slice of
// data. A slice with ID 0 is a hole: it reads as zeros (used by truncate).
//
// The bytes [Off, Off+Len) of slice ID (whose total stored size is Size)
// appear at position Pos of the chunk. Within a chunk's list, later entries
// are newer and win where they overlap older ones.
//
// An ID with InlineBit set names a slice whose one block a volume keeps in
// its metadata engine rather than its object store (see InlineBit).
type Slice struct {
	Pos  uint32 // position within the chunk
	ID   uint64 // slice id; 0 = zeros
	Size uint32 // total size of the stored slice
	Off  uint32 // offset of the referenced range within the slice
	Len  uint32 // length of the referenced range
}

// InlineBit is set in the id of a slice whose block lives in the
// metadata engine: on a volume with an inline limit, the data path gives
// it to a slice of at most that many bytes at the start of a file (small
// files). The other 63 bits are the number the slice counter handed out;
// SliceNumber returns them. Everything that stores or looks up the slice
// uses the whole id, so its block key, which carries the id, says where
// the block is.
const InlineBit uint64 = 1 << 63

// SliceNumber returns id without InlineBit: the number the slice counter
// handed out, which in-flight tracking, reservations and gc's guard use.
func SliceNumber(id uint64) uint64 { return id &^ InlineBit }
