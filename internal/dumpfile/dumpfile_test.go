package dumpfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

// sample writes a dump of kinds A and K, n records each, in frames of
// per records.
func sample(t testing.TB, n, per int) []byte {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, Header{ID: "x1", Meta: 3, Settings: []byte(`{"name":"v"}`), Epoch: 7})
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []byte{'A', 'K'} {
		b := Batch{Kind: kind}
		for i := 0; i < n; i++ {
			b.Add([]byte(fmt.Sprintf("%c%08d", kind, i)), bytes.Repeat([]byte{byte(i)}, i%50))
			if int(b.Records) == per || i == n-1 {
				if err := w.Write(b.Seal()); err != nil {
					t.Fatal(err)
				}
				b = Batch{Kind: kind}
			}
		}
	}
	if err := w.Close(map[string]uint64{"next_inode": 99}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// readAll reads every record of a dump, checking each frame.
func readAll(data []byte) (map[string]string, *Trailer, error) {
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, nil, err
	}
	got := map[string]string{}
	for {
		rf, err := r.Next()
		if err == io.EOF {
			return got, r.Trailer(), nil
		}
		if err != nil {
			return nil, nil, err
		}
		f, err := rf.Open()
		if err != nil {
			return nil, nil, err
		}
		err = f.Each(func(k, v []byte) error {
			if k[0] != f.Kind {
				return fmt.Errorf("key %q in a frame of kind %c", k, f.Kind)
			}
			got[string(k)] = string(v)
			return nil
		})
		if err != nil {
			return nil, nil, err
		}
	}
}

func TestRoundTrip(t *testing.T) {
	data := sample(t, 1000, 64)
	got, tr, err := readAll(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2000 || tr.Records["A"] != 1000 || tr.Records["K"] != 1000 || tr.Extra["next_inode"] != 99 {
		t.Fatalf("%d records, trailer %+v", len(got), tr)
	}
	if got["K00000077"] != strings.Repeat(string(rune(77)), 27) {
		t.Fatalf("record K77 = %q", got["K00000077"])
	}
	r, _ := NewReader(bytes.NewReader(data))
	if h := r.Header(); h.ID != "x1" || h.Epoch != 7 || string(h.Settings) != `{"name":"v"}` {
		t.Fatalf("header %+v", h)
	}
}

// TestDamage: every truncation and every flipped byte of a dump is
// refused with ErrFormat, never read as a shorter or different dump.
func TestDamage(t *testing.T) {
	data := sample(t, 200, 40)
	for cut := 0; cut < len(data); cut++ {
		if _, _, err := readAll(data[:cut]); !errors.Is(err, ErrFormat) {
			t.Fatalf("cut at %d of %d: %v", cut, len(data), err)
		}
	}
	for i := range data {
		bad := bytes.Clone(data)
		bad[i] ^= 0x20
		if _, _, err := readAll(bad); !errors.Is(err, ErrFormat) {
			t.Fatalf("byte %d of %d flipped: %v", i, len(data), err)
		}
	}
	if _, _, err := readAll(append(bytes.Clone(data), 0)); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "after the trailer") {
		t.Fatalf("a byte after the trailer: %v", err)
	}
	if _, _, err := readAll([]byte("#!/bin/sh\necho not a dump\n")); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "not a Cairn dump") {
		t.Fatalf("a foreign file: %v", err)
	}
}

// TestLostFrame: a frame cut out whole (at frame boundaries) is found by
// the sequence numbers.
func TestLostFrame(t *testing.T) {
	data := sample(t, 100, 50)
	r, _ := NewReader(bytes.NewReader(data))
	var offs []int64
	for {
		f, err := r.Next()
		if err != nil {
			break
		}
		offs = append(offs, f.Offset)
	}
	cut := append(bytes.Clone(data[:offs[1]]), data[offs[2]:]...)
	if _, _, err := readAll(cut); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "lost or repeated") {
		t.Fatalf("frame 1 cut out: %v", err)
	}
}

func FuzzReader(f *testing.F) {
	f.Add(sample(f, 20, 7))
	f.Add([]byte(Magic))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, tr, err := readAll(data)
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error not wrapping ErrFormat: %v", err)
			}
			return
		}
		n := uint64(0)
		for _, c := range tr.Records {
			n += c
		}
		if uint64(len(got)) > n {
			t.Fatalf("%d records read, trailer counts %d", len(got), n)
		}
	})
}
