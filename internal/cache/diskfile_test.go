package cache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"

	"github.com/cairnfs/cairn/internal/directio"
)

// FuzzDecodeFile: any input either fails with errCorrupt, errOldFormat or
// errOtherKey, or is accepted, and an accepted file with the segment size
// Cairn writes is byte for byte the file Cairn would write for its data.
// The partial path (parseHead, checkMeta, checkSegs over a range) agrees.
func FuzzDecodeFile(f *testing.F) {
	for _, n := range []int{0, 1, 1 << 16, 1<<16 + 7, 3 << 16, directio.Min, directio.Min + 5} {
		data := bytes.Repeat([]byte{byte(n)}, n)
		f.Add(append(encodeHead("k", data, nil), data...), "k")
	}
	f.Add([]byte("CRNC\x01\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00k"), "k")
	f.Fuzz(func(t *testing.T, b []byte, key string) {
		data, err := decodeFile(b, key)
		if err != nil {
			if !errors.Is(err, errCorrupt) && !errors.Is(err, errOldFormat) && !errors.Is(err, errOtherKey) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		if b[4] == diskVersion && b[5] == diskSegShift {
			if want := append(encodeHead(key, data, nil), data...); !bytes.Equal(b, want) {
				t.Fatalf("accepted a file that is not the canonical encoding")
			}
		}
		h, _ := parseHead(b)
		table, err := checkMeta(b, h, key)
		if err != nil {
			t.Fatalf("whole file accepted, header refused: %v", err)
		}
		if len(data) > 0 {
			last := (len(data) - 1) >> h.shift
			if err := checkSegs(h, table, last, data[last<<h.shift:]); err != nil {
				t.Fatalf("whole file accepted, last segment refused: %v", err)
			}
		}
	})
}

// TestFileVersions: a large block's data starts on a directio.Align
// boundary (zeros before it), a small one's right after the table; a file
// of version 2 (never padded) is still read; nonzero padding is corrupt.
func TestFileVersions(t *testing.T) {
	for _, n := range []int{100, directio.Min - 1, directio.Min, 2*directio.Min + 7} {
		data := bytes.Repeat([]byte{byte(n)}, n)
		head := encodeHead("k", data, nil)
		h, err := parseHead(head)
		if err != nil {
			t.Fatal(err)
		}
		if aligned := len(head)%4096 == 0; aligned != (n >= directio.Min) || len(head) != h.dataOff() {
			t.Errorf("%d bytes: header of %d bytes", n, len(head))
		}
		if got, err := decodeFile(append(head, data...), "k"); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%d bytes: %v", n, err)
		}
		// Version 2: the same without padding.
		v2 := append([]byte(nil), head[:h.tableEnd()]...)
		v2[4] = 2
		binary.BigEndian.PutUint32(v2[16:], crc32.Update(crc32.Checksum(v2[:16], castagnoli), castagnoli, v2[diskHeaderLen:]))
		if got, err := decodeFile(append(v2, data...), "k"); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%d bytes, version 2: %v", n, err)
		}
		if h.dataOff() > h.tableEnd() {
			bad := append(append([]byte(nil), head...), data...)
			bad[h.dataOff()-1] = 1
			if _, err := decodeFile(bad, "k"); !errors.Is(err, errCorrupt) {
				t.Errorf("%d bytes: nonzero padding: %v", n, err)
			}
		}
	}
}
