package chunk

import (
	"bytes"
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// TestObjectCRC: the CRC-32C derived from the segment checksums is the
// one of the whole object, for lengths around the segment boundaries and
// up to a full block.
func TestObjectCRC(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 4<<20+3)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	for _, n := range []int{0, 1, 5, SegmentSize - 1, SegmentSize, SegmentSize + 1, 3*SegmentSize + 7, 4 << 20, 4<<20 + 3} {
		for _, f := range []BlockFormat{BlockFormat1, BlockFormat2} {
			id := BlockID{Slice: 77, Index: 3, Length: n}
			obj := EncodeBlock(bytes.Clone(data[:n]), id, f)
			if got, want := objectCRC(obj, n, blockSums(obj, id, f)), crc32.Checksum(obj, castagnoli); got != want {
				t.Errorf("format %d, length %d: objectCRC %08x, CRC of the object %08x", f, n, got, want)
			}
		}
	}
	for range 200 {
		a, b := data[:r.IntN(1000)], data[:r.IntN(200000)]
		if got, want := crc32cCombine(crc32.Checksum(a, castagnoli), crc32.Checksum(b, castagnoli), len(b), nil),
			crc32.Checksum(append(bytes.Clone(a), b...), castagnoli); got != want {
			t.Fatalf("combine of %d and %d bytes: %08x, want %08x", len(a), len(b), got, want)
		}
	}
}

func FuzzObjectCRC(f *testing.F) {
	f.Add([]byte("hello"), uint16(3))
	f.Add(bytes.Repeat([]byte{7}, 2*SegmentSize+11), uint16(0))
	f.Fuzz(func(t *testing.T, data []byte, extra uint16) {
		// extra repeats data to cross segment boundaries cheaply.
		for range int(extra % 4) {
			data = append(data, data...)
		}
		id := BlockID{Slice: uint64(extra) + 1, Length: len(data)}
		obj := EncodeBlock(bytes.Clone(data), id, BlockFormat2)
		if got, want := objectCRC(obj, len(data), blockSums(obj, id, BlockFormat2)), crc32.Checksum(obj, castagnoli); got != want {
			t.Fatalf("length %d: objectCRC %08x, want %08x", len(data), got, want)
		}
	})
}

func BenchmarkObjectCRC(b *testing.B) {
	id := BlockID{Slice: 1, Length: 4 << 20}
	obj := EncodeBlock(make([]byte, 4<<20), id, BlockFormat2)
	b.Run("combined", func(b *testing.B) {
		for range b.N {
			objectCRC(obj, 4<<20, blockSums(obj, id, BlockFormat2))
		}
	})
	b.Run("pass", func(b *testing.B) {
		for range b.N {
			crc32.Checksum(obj, castagnoli)
		}
	})
}
