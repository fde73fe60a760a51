package chunk

import (
	"encoding/binary"
	"hash/crc32"
	"sync"
)

// The CRC-32C of a whole block object, from its segment checksums.
//
// An object store that checks uploads (S3's x-amz-checksum-crc32c) wants
// the CRC-32C of the whole object. EncodeBlock has just computed one per
// 64 KiB segment (blockSums), so a second pass over the block is not
// needed: the CRC of a concatenation follows from the CRCs of its parts
// (zlib's crc32_combine). CRC-32 is linear over GF(2): appending n zero
// bytes to a message maps its CRC through a fixed 32×32 bit matrix, the
// n-th power of the matrix for one zero bit, and CRC(a‖b) =
// zeros(len(b))·CRC(a) ⊕ CRC(b). Every segment but the last has the same
// length, so that matrix is computed once.

// castagnoliReversed is the CRC-32C polynomial in the reversed (LSB-first)
// form hash/crc32 uses.
const castagnoliReversed = 0x82f63b78

// gf2Matrix is a 32×32 bit matrix over GF(2): column i is the image of
// bit i.
type gf2Matrix [32]uint32

func (m *gf2Matrix) times(v uint32) uint32 {
	var sum uint32
	for i := 0; v != 0; i, v = i+1, v>>1 {
		if v&1 != 0 {
			sum ^= m[i]
		}
	}
	return sum
}

// square returns m·m.
func (m *gf2Matrix) square() gf2Matrix {
	var out gf2Matrix
	for i := range out {
		out[i] = m.times(m[i])
	}
	return out
}

// zerosMatrix returns the matrix that maps the CRC-32C of a message to
// that of the message followed by n zero bytes.
func zerosMatrix(n int) gf2Matrix {
	// One zero bit: shift right, folding the polynomial in for bit 0.
	var bit gf2Matrix
	bit[0] = castagnoliReversed
	for i := 1; i < 32; i++ {
		bit[i] = 1 << (i - 1)
	}
	byteM := bit.square()  // 2 bits
	byteM = byteM.square() // 4 bits
	byteM = byteM.square() // 8 bits: one zero byte
	var out gf2Matrix
	for i := range out {
		out[i] = 1 << i // identity
	}
	for p := byteM; n > 0; n >>= 1 {
		if n&1 != 0 {
			var next gf2Matrix
			for i := range next {
				next[i] = p.times(out[i])
			}
			out = next
		}
		if n > 1 {
			p = p.square()
		}
	}
	return out
}

var segmentZeros = sync.OnceValue(func() gf2Matrix { return zerosMatrix(SegmentSize) })

// crc32cCombine returns the CRC-32C of a‖b from crcA = CRC(a), crcB =
// CRC(b) and len(b), through m = zerosMatrix(len(b)) if not nil.
func crc32cCombine(crcA, crcB uint32, lenB int, m *gf2Matrix) uint32 {
	if lenB == 0 {
		return crcA
	}
	if m == nil {
		z := zerosMatrix(lenB)
		m = &z
	}
	return m.times(crcA) ^ crcB
}

// objectCRC returns the CRC-32C of obj, a block object of length data
// bytes that EncodeBlock made, from sums, the CRC-32C of each segment of
// its data (blockSums: in format 2 the table holds them tagged): the data
// is not read again.
func objectCRC(obj []byte, length int, sums []byte) uint32 {
	full := segmentZeros()
	var crc uint32
	for i := 0; i*SegmentSize < length; i++ {
		s := binary.BigEndian.Uint32(sums[4*i:])
		if i == 0 {
			crc = s
			continue
		}
		seg, m := min(SegmentSize, length-i*SegmentSize), &full
		if seg < SegmentSize {
			m = nil // the last, shorter segment: its own matrix
		}
		crc = crc32cCombine(crc, s, seg, m)
	}
	return crc32.Update(crc, castagnoli, obj[length:])
}
