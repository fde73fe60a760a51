package base

// ChunkSize is the fixed size of a file chunk: file offset o lies in chunk
// o / ChunkSize at position o % ChunkSize.
const ChunkSize = 64 << 20

// Slice is one reference from a chunk to (part of) an immutable slice of
// data. A slice with ID 0 is a hole: it reads as zeros (used by truncate).
//
// The bytes [Off, Off+Len) of slice ID (whose total stored size is Size)
// appear at position Pos of the chunk. Within a chunk's list, later entries
// are newer and win where they overlap older ones.
type Slice struct {
	Pos  uint32 // position within the chunk
	ID   uint64 // slice id; 0 = zeros
	Size uint32 // total size of the stored slice
	Off  uint32 // offset of the referenced range within the slice
	Len  uint32 // length of the referenced range
}
