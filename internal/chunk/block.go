package chunk

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/cairnfs/cairn/internal/base"
)

// SegmentSize is the unit of checksumming inside a block: one CRC-32C per
// SegmentSize bytes of data.
const SegmentSize = 64 << 10

// trailerLen is the length of the trailer that ends every block object:
// magic "CRN" and the BlockFormat.
const trailerLen = 4

// BlockFormat is the layout of a volume's block objects, written as the
// last byte of their trailer. A Store writes and accepts one format
// (Options.BlockFormat); both have the same object sizes (EncodedLen).
type BlockFormat uint8

const (
	// BlockFormat1 blocks store the CRC-32C of each segment. They catch
	// damaged bytes but not an object that belongs to another block: a
	// misplaced or swapped object of the same length reads as this
	// block's data. The blocks of volumes formatted before meta format
	// version 3.
	BlockFormat1 BlockFormat = 1
	// BlockFormat2 blocks store the CRC-32C of each segment XORed with a
	// tag of the block's identity (BlockID) and the segment's index: read
	// under any other key, or with its segments reordered, an object
	// fails its checks. The default.
	BlockFormat2 BlockFormat = 2
)

func (f BlockFormat) valid() bool { return f == BlockFormat1 || f == BlockFormat2 }

func (f BlockFormat) trailer() [trailerLen]byte { return [trailerLen]byte{'C', 'R', 'N', byte(f)} }

// BlockID is the identity of a block object, the fields of its key
// (BlockKey): block Index, of Length data bytes, of slice Slice.
type BlockID struct {
	Slice  uint64
	Index  int
	Length int
}

// Key returns the object key of the block.
func (b BlockID) Key() string { return BlockKey(b.Slice, b.Index, b.Length) }

// blockIDOf returns the identity of the block stored under key, a key
// BlockKey made.
func blockIDOf(key string) (BlockID, error) {
	id, index, length, err := ParseBlockKey(key)
	if err != nil {
		return BlockID{}, err
	}
	return BlockID{Slice: id, Index: index, Length: length}, nil
}

// tagger computes the tags of the segments of one block: the CRC-32C of
// its identity and the segment's index, as 20 big-endian bytes (slice
// uint64, index uint32, length uint32, segment uint32). A tag tells blocks
// apart, which is all it is for: it is no defence against forgery, and
// two identities share a tag with a chance of about 2^-32 (none when they
// differ within 32 consecutive bits, as neighbouring slice ids do).
type tagger struct {
	f    BlockFormat
	head uint32 // CRC-32C of the identity's 16 bytes
}

func newTagger(id BlockID, f BlockFormat) tagger {
	var b [16]byte
	binary.BigEndian.PutUint64(b[0:], id.Slice)
	binary.BigEndian.PutUint32(b[8:], uint32(id.Index))
	binary.BigEndian.PutUint32(b[12:], uint32(id.Length))
	return tagger{f: f, head: crc32.Checksum(b[:], castagnoli)}
}

// tag returns what the table entry of segment seg holds XORed into the
// segment's CRC-32C: 0 in format 1.
func (t tagger) tag(seg int) uint32 {
	if t.f != BlockFormat2 {
		return 0
	}
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(seg))
	return crc32.Update(t.head, castagnoli, b[:])
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func numSegments(n int) int { return (n + SegmentSize - 1) / SegmentSize }

// EncodedLen is the size of the object that stores a block of n data bytes.
func EncodedLen(n int) int { return n + 4*numSegments(n) + trailerLen }

// EncodeBlock returns the object of format f for the data of block id
// (id.Length is len(data)): data, checksum table, trailer. It appends to
// data's backing array when it has room, so callers that keep data must
// not rely on the bytes past len(data).
func EncodeBlock(data []byte, id BlockID, f BlockFormat) []byte {
	n := len(data)
	out := data
	if cap(out) < EncodedLen(n) {
		out = make([]byte, n, EncodedLen(n))
		copy(out, data)
	}
	t := newTagger(id, f)
	for i, off := 0, 0; off < n; i, off = i+1, off+SegmentSize {
		end := min(off+SegmentSize, n)
		out = binary.BigEndian.AppendUint32(out, crc32.Checksum(data[off:end], castagnoli)^t.tag(i))
	}
	tr := f.trailer()
	return append(out, tr[:]...)
}

// DecodeBlock verifies obj, read as the object of block id, against format
// f and returns the data (a sub-slice of obj). Every failure wraps
// base.ErrChecksum: a size other than EncodedLen(id.Length), a trailer
// other than f's (a block of the other format is rejected, see
// Options.BlockFormat), a segment whose entry does not match — in format
// 2 also the segments of any other block's object.
func DecodeBlock(obj []byte, id BlockID, f BlockFormat) ([]byte, error) {
	length := id.Length
	if length < 0 || length > len(obj) || len(obj) != EncodedLen(length) {
		return nil, fmt.Errorf("chunk: block object is %d bytes, want %d for %d data bytes: %w",
			len(obj), EncodedLen(length), length, base.ErrChecksum)
	}
	if tr := [trailerLen]byte(obj[len(obj)-trailerLen:]); tr != f.trailer() {
		if other := BlockFormat(tr[3]); tr == other.trailer() && other.valid() {
			return nil, fmt.Errorf("chunk: block object of format %d, this volume's blocks are format %d: %w",
				other, f, base.ErrChecksum)
		}
		return nil, fmt.Errorf("chunk: block object has trailer %x, want %x: %w", tr[:], f.trailer(), base.ErrChecksum)
	}
	data, table := obj[:length:length], obj[length:len(obj)-trailerLen]
	t := newTagger(id, f)
	for i := 0; i*SegmentSize < length; i++ {
		seg := data[i*SegmentSize : min((i+1)*SegmentSize, length)]
		if err := checkSegment(t, i, seg, binary.BigEndian.Uint32(table[4*i:])); err != nil {
			return nil, err
		}
	}
	return data, nil
}

// checkSegment verifies segment seg of a block against its table entry.
func checkSegment(t tagger, seg int, data []byte, entry uint32) error {
	crc := crc32.Checksum(data, castagnoli)
	if crc^t.tag(seg) == entry {
		return nil
	}
	why := "damaged"
	if t.f == BlockFormat2 {
		why = "damaged, or another block's object"
	}
	return fmt.Errorf("chunk: segment %d (bytes %d-%d): crc %08x does not match entry %08x (%s): %w",
		seg, seg*SegmentSize, seg*SegmentSize+len(data), crc, entry, why, base.ErrChecksum)
}

// blockSums returns the CRC-32C of each segment of obj, an object of
// block id of format f that EncodeBlock made or DecodeBlock accepted: the
// checksums of the data alone, tags removed (the disk tier's table, and
// objectCRC's input). In format 1 it is a sub-slice of obj.
func blockSums(obj []byte, id BlockID, f BlockFormat) []byte {
	table := obj[id.Length : len(obj)-trailerLen]
	if f != BlockFormat2 {
		return table
	}
	t := newTagger(id, f)
	sums := make([]byte, len(table))
	for i := 0; 4*i < len(table); i++ {
		binary.BigEndian.PutUint32(sums[4*i:], binary.BigEndian.Uint32(table[4*i:])^t.tag(i))
	}
	return sums
}
