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

// blockTrailer ends every block object: magic "CRN" and format version 1.
var blockTrailer = [4]byte{'C', 'R', 'N', 1}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func numSegments(n int) int { return (n + SegmentSize - 1) / SegmentSize }

// EncodedLen is the size of the object that stores a block of n data bytes.
func EncodedLen(n int) int { return n + 4*numSegments(n) + len(blockTrailer) }

// EncodeBlock returns the object bytes for block data: data, CRC table,
// trailer. It appends to data's backing array when it has room, so callers
// that keep data must not rely on the bytes past len(data).
func EncodeBlock(data []byte) []byte {
	n := len(data)
	out := data
	if cap(out) < EncodedLen(n) {
		out = make([]byte, n, EncodedLen(n))
		copy(out, data)
	}
	for off := 0; off < n; off += SegmentSize {
		end := min(off+SegmentSize, n)
		out = binary.BigEndian.AppendUint32(out, crc32.Checksum(data[off:end], castagnoli))
	}
	return append(out, blockTrailer[:]...)
}

// DecodeBlock verifies the object obj of a block of length data bytes and
// returns the data (a sub-slice of obj). length < 0 derives the data length
// from the object size. Every failure (wrong size, bad trailer, a segment
// whose CRC does not match) wraps base.ErrChecksum.
func DecodeBlock(obj []byte, length int) ([]byte, error) {
	if length < 0 {
		length = dataLen(len(obj))
		if length < 0 {
			return nil, fmt.Errorf("chunk: block object of %d bytes has no valid layout: %w", len(obj), base.ErrChecksum)
		}
	}
	if length > len(obj) || len(obj) != EncodedLen(length) {
		return nil, fmt.Errorf("chunk: block object is %d bytes, want %d for %d data bytes: %w",
			len(obj), EncodedLen(length), length, base.ErrChecksum)
	}
	if [4]byte(obj[len(obj)-4:]) != blockTrailer {
		return nil, fmt.Errorf("chunk: block object has trailer %x, want %x: %w",
			obj[len(obj)-4:], blockTrailer[:], base.ErrChecksum)
	}
	data, table := obj[:length:length], obj[length:len(obj)-4]
	for i := 0; i*SegmentSize < length; i++ {
		seg := data[i*SegmentSize : min((i+1)*SegmentSize, length)]
		want := binary.BigEndian.Uint32(table[4*i:])
		if got := crc32.Checksum(seg, castagnoli); got != want {
			return nil, fmt.Errorf("chunk: segment %d (bytes %d-%d): crc %08x, stored %08x: %w",
				i, i*SegmentSize, i*SegmentSize+len(seg), got, want, base.ErrChecksum)
		}
	}
	return data, nil
}

// blockSums returns the segment checksum table of obj, a block object
// of length data bytes that EncodeBlock made or DecodeBlock accepted.
func blockSums(obj []byte, length int) []byte {
	return obj[length : len(obj)-len(blockTrailer)]
}

// dataLen returns the n with EncodedLen(n) == size, or -1. EncodedLen is
// strictly increasing, so there is at most one.
func dataLen(size int) int {
	m := size - len(blockTrailer)
	if m < 0 {
		return -1
	}
	// n + 4*ceil(n/S) = m; k = ceil(n/S) is close to m/(S+4).
	k0 := m / (SegmentSize + 4)
	for k := k0; k <= k0+1; k++ {
		if n := m - 4*k; n >= 0 && numSegments(n) == k {
			return n
		}
	}
	return -1
}
