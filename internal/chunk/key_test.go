package chunk

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/object"
)

func TestBlockKey(t *testing.T) {
	for _, tc := range []struct {
		id     uint64
		idx, n int
		want   string
	}{
		{1, 0, 4 << 20, "chunks/0/0/1_0_4194304"},
		{1234567, 3, 100, "chunks/1/1234/1234567_3_100"},
		{math.MaxUint64, 15, 1, "chunks/18446744073709/18446744073709551/18446744073709551615_15_1"},
	} {
		key := BlockKey(tc.id, tc.idx, tc.n)
		if key != tc.want {
			t.Errorf("BlockKey(%d,%d,%d) = %q, want %q", tc.id, tc.idx, tc.n, key, tc.want)
		}
		if err := object.ValidKey(key); err != nil {
			t.Error(err)
		}
		id, idx, n, err := ParseBlockKey(key)
		if err != nil || id != tc.id || idx != tc.idx || n != tc.n {
			t.Errorf("ParseBlockKey(%q) = %d %d %d %v", key, id, idx, n, err)
		}
		if !strings.HasPrefix(key, SlicePrefix(tc.id)) {
			t.Errorf("%q lacks prefix %q", key, SlicePrefix(tc.id))
		}
	}
	if strings.HasPrefix(BlockKey(12, 0, 1), SlicePrefix(1)) {
		t.Error("slice prefix of 1 matches slice 12")
	}
	for _, bad := range []string{
		"", "chunks/", "chunks/0/0/1_0", "chunks/0/0/1_0_0", "chunks/0/0/0_0_1",
		"chunks/0/0/01_0_1", "chunks/0/1/1_0_1", "chunks/0/0/1_-1_1", "chunks/0/0/+1_0_1",
		"chunks/0/0/1_0_1_2", "chunks/0/0/1_0_1/x", "blocks/0/0/1_0_1", "chunks/0/0/1_0_99999999999",
		"chunks/0//1_0_1", "chunks/0/0/1_0_1 ",
	} {
		if _, _, _, err := ParseBlockKey(bad); !errors.Is(err, base.ErrInvalid) {
			t.Errorf("ParseBlockKey(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

func FuzzParseBlockKey(f *testing.F) {
	f.Add("chunks/0/0/1_0_4194304")
	f.Add("chunks/1/1234/1234567_3_100")
	f.Add("chunks/0/0/01_0_1")
	f.Add("chunks/x")
	f.Fuzz(func(t *testing.T, key string) {
		id, idx, n, err := ParseBlockKey(key)
		if err != nil {
			return
		}
		if id == 0 || idx < 0 || n <= 0 {
			t.Fatalf("accepted %q as %d %d %d", key, id, idx, n)
		}
		if back := BlockKey(id, idx, n); back != key {
			t.Fatalf("round trip %q -> %q", key, back)
		}
		if err := object.ValidKey(key); err != nil {
			t.Fatalf("accepted key is not a valid object key: %v", err)
		}
	})
}

func TestBlockCodec(t *testing.T) {
	for _, f := range []BlockFormat{BlockFormat1, BlockFormat2} {
		for _, n := range []int{0, 1, SegmentSize - 1, SegmentSize, SegmentSize + 1, 3*SegmentSize + 17, 4 << 20} {
			data := bytes.Repeat([]byte{0xa5, 0x3c, 7}, n/3+1)[:n]
			id := BlockID{Slice: 1234, Index: 5, Length: n}
			obj := EncodeBlock(bytes.Clone(data), id, f)
			if len(obj) != EncodedLen(n) {
				t.Fatalf("format %d, n=%d: encoded %d bytes, want %d", f, n, len(obj), EncodedLen(n))
			}
			got, err := DecodeBlock(obj, id, f)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("format %d, n=%d: decode: %v", f, n, err)
			}
			wrong := id
			wrong.Length++
			if _, err := DecodeBlock(obj, wrong, f); !errors.Is(err, base.ErrChecksum) {
				t.Fatalf("format %d, n=%d: wrong length accepted: %v", f, n, err)
			}
			// A block is read in one format only.
			if _, err := DecodeBlock(obj, id, 3-f); !errors.Is(err, base.ErrChecksum) {
				t.Fatalf("format %d, n=%d: accepted as format %d: %v", f, n, 3-f, err)
			}
			// Every single-byte flip is caught.
			step := max(1, len(obj)/97)
			for i := 0; i < len(obj); i += step {
				bad := bytes.Clone(obj)
				bad[i] ^= 0x10
				if _, err := DecodeBlock(bad, id, f); !errors.Is(err, base.ErrChecksum) {
					t.Fatalf("format %d, n=%d: flip at %d not detected: %v", f, n, i, err)
				}
			}
		}
	}
}

// TestBlockIdentity: a format 2 block read as any other block of its
// length (another slice, another index of the same slice) fails its
// check, and so does one whose segments were swapped with their entries;
// format 1 blocks cannot tell.
func TestBlockIdentity(t *testing.T) {
	n := 3*SegmentSize + 100
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(i * 7)
	}
	id := BlockID{Slice: 1000, Index: 2, Length: n}
	others := []BlockID{
		{Slice: 1001, Index: 2, Length: n},
		{Slice: 999, Index: 2, Length: n},
		{Slice: 1000, Index: 3, Length: n},
		{Slice: 1000 | base.InlineBit, Index: 2, Length: n},
		{Slice: 1 << 40, Index: 0, Length: n},
	}
	obj := EncodeBlock(bytes.Clone(data), id, BlockFormat2)
	for _, o := range others {
		if _, err := DecodeBlock(obj, o, BlockFormat2); !errors.Is(err, base.ErrChecksum) {
			t.Errorf("block %+v accepted as %+v: %v", id, o, err)
		}
	}
	// Segments 0 and 1 swapped, with their table entries.
	sw := bytes.Clone(obj)
	copy(sw[:SegmentSize], obj[SegmentSize:2*SegmentSize])
	copy(sw[SegmentSize:], obj[:SegmentSize])
	copy(sw[n:n+4], obj[n+4:n+8])
	copy(sw[n+4:n+8], obj[n:n+4])
	if _, err := DecodeBlock(sw, id, BlockFormat2); !errors.Is(err, base.ErrChecksum) {
		t.Errorf("swapped segments accepted: %v", err)
	}
	old := EncodeBlock(bytes.Clone(data), id, BlockFormat1)
	if _, err := DecodeBlock(old, others[0], BlockFormat1); err != nil {
		t.Errorf("format 1 is not bound, yet read as another block fails: %v", err)
	}
}

// FuzzDecodeBlock: DecodeBlock never panics, fails only with
// ErrChecksum, and accepts only what EncodeBlock makes of the identity
// and format it was given.
func FuzzDecodeBlock(f *testing.F) {
	f.Add(EncodeBlock([]byte("hello"), BlockID{Slice: 1, Length: 5}, BlockFormat2), uint64(1), 0, 5, uint8(2))
	f.Add(EncodeBlock([]byte("hello"), BlockID{Slice: 1, Length: 5}, BlockFormat1), uint64(1), 0, 5, uint8(1))
	f.Add(EncodeBlock(nil, BlockID{Slice: 9, Index: 3}, BlockFormat2), uint64(9), 3, 0, uint8(2))
	f.Add(EncodeBlock(bytes.Repeat([]byte{1}, 2*SegmentSize+3)[SegmentSize:], BlockID{Slice: 7, Index: 1, Length: SegmentSize + 3}, BlockFormat2), uint64(7), 1, SegmentSize+3, uint8(2))
	f.Add([]byte("CRN\x01"), uint64(1), 0, 0, uint8(1))
	f.Add([]byte("CRN\x02"), uint64(1), 0, -1, uint8(2))
	f.Fuzz(func(t *testing.T, obj []byte, slice uint64, index, length int, format uint8) {
		bf := BlockFormat(format%2 + 1)
		id := BlockID{Slice: slice, Index: index, Length: length}
		data, err := DecodeBlock(obj, id, bf)
		if err != nil {
			if !errors.Is(err, base.ErrChecksum) {
				t.Fatalf("error does not wrap ErrChecksum: %v", err)
			}
			return
		}
		if len(data) != length {
			t.Fatalf("decoded %d bytes, want %d", len(data), length)
		}
		if re := EncodeBlock(bytes.Clone(data), id, bf); !bytes.Equal(re, obj) {
			t.Fatal("accepted object does not re-encode to itself")
		}
		sums := blockSums(obj, id, bf)
		for i := 0; i*SegmentSize < length; i++ {
			seg := data[i*SegmentSize : min((i+1)*SegmentSize, length)]
			if binary.BigEndian.Uint32(sums[4*i:]) != crc32.Checksum(seg, castagnoli) {
				t.Fatalf("blockSums entry %d is not the segment's CRC-32C", i)
			}
		}
	})
}

func TestInlineBlock(t *testing.T) {
	for _, c := range []struct {
		key  string
		want bool
	}{
		{BlockKey(7, 0, 100), false},
		{BlockKey(7|base.InlineBit, 0, 100), true},
		{BlockKey(base.InlineBit|123456789, 2, 4096), true},
		{"cairn/volume.json", false},
		{"chunks/x", false},
		{"other/0/0/" + strconv.FormatUint(base.InlineBit|5, 10) + "_0_1", false},
	} {
		if got := InlineBlock(c.key); got != c.want {
			t.Errorf("InlineBlock(%q) = %v, want %v", c.key, got, c.want)
		}
	}
}
