package chunk

import (
	"bytes"
	"errors"
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
	for _, n := range []int{0, 1, SegmentSize - 1, SegmentSize, SegmentSize + 1, 3*SegmentSize + 17, 4 << 20} {
		data := bytes.Repeat([]byte{0xa5, 0x3c, 7}, n/3+1)[:n]
		obj := EncodeBlock(bytes.Clone(data))
		if len(obj) != EncodedLen(n) {
			t.Fatalf("n=%d: encoded %d bytes, want %d", n, len(obj), EncodedLen(n))
		}
		if dataLen(len(obj)) != n {
			t.Fatalf("dataLen(%d) = %d, want %d", len(obj), dataLen(len(obj)), n)
		}
		for _, length := range []int{n, -1} {
			got, err := DecodeBlock(obj, length)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("n=%d length=%d: decode: %v", n, length, err)
			}
		}
		if _, err := DecodeBlock(obj, n+1); !errors.Is(err, base.ErrChecksum) {
			t.Fatalf("n=%d: wrong length accepted: %v", n, err)
		}
		// Every single-byte flip is caught.
		step := max(1, len(obj)/97)
		for i := 0; i < len(obj); i += step {
			bad := bytes.Clone(obj)
			bad[i] ^= 0x10
			if _, err := DecodeBlock(bad, n); !errors.Is(err, base.ErrChecksum) {
				t.Fatalf("n=%d: flip at %d not detected: %v", n, i, err)
			}
		}
	}
	for size := range 300 {
		if n := dataLen(size); n >= 0 && EncodedLen(n) != size {
			t.Fatalf("dataLen(%d) = %d", size, n)
		}
	}
}

func FuzzDecodeBlock(f *testing.F) {
	f.Add(EncodeBlock([]byte("hello")), 5)
	f.Add(EncodeBlock(nil), -1)
	f.Add(EncodeBlock(bytes.Repeat([]byte{1}, 2*SegmentSize+3)[SegmentSize:]), -1)
	f.Add([]byte("CRN\x01"), 0)
	f.Fuzz(func(t *testing.T, obj []byte, length int) {
		data, err := DecodeBlock(obj, length)
		if err != nil {
			if !errors.Is(err, base.ErrChecksum) {
				t.Fatalf("error does not wrap ErrChecksum: %v", err)
			}
			return
		}
		if length >= 0 && len(data) != length {
			t.Fatalf("decoded %d bytes, want %d", len(data), length)
		}
		if re := EncodeBlock(bytes.Clone(data)); !bytes.Equal(re, obj) {
			t.Fatal("accepted object does not re-encode to itself")
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
