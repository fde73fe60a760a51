package cache

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzDecodeFile: any input either fails with errCorrupt, errOldFormat or
// errOtherKey, or is accepted, and an accepted file with the segment size
// Cairn writes is byte for byte the file Cairn would write for its data.
// The partial path (parseHead, checkMeta, checkSegs over a range) agrees.
func FuzzDecodeFile(f *testing.F) {
	for _, n := range []int{0, 1, 1 << 16, 1<<16 + 7, 3 << 16} {
		data := bytes.Repeat([]byte{byte(n)}, n)
		f.Add(append(encodeHead("k", data), data...), "k")
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
		if b[5] == diskSegShift {
			if want := append(encodeHead(key, data), data...); !bytes.Equal(b, want) {
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
