package local_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/cairnfs/cairn/internal/directio"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/object/local"
)

// TestPutCold: cold objects of directMin bytes or more in an aligned buffer
// are written past the page cache, whole and exact, tail included; others
// (short, misaligned, not cold) through it. Both ways of Put.
func TestPutCold(t *testing.T) {
	const align = 4096
	raw := make([]byte, 3*directio.Min+2*align)
	aligned := raw[align-int(uintptr(unsafe.Pointer(&raw[0]))%align):]
	for i := range aligned {
		aligned[i] = byte(i*31 + i>>12)
	}
	cases := []struct {
		name   string
		data   []byte
		cold   bool
		direct bool // expected to bypass the page cache
	}{
		{"aligned, with a tail", aligned[:2*directio.Min+260], true, true},
		{"aligned, whole pages", aligned[:directio.Min], true, true},
		{"short", aligned[:directio.Min-align], true, false},
		{"misaligned", aligned[1 : 2*directio.Min+1], true, false},
		{"not cold", aligned[:2*directio.Min], false, false},
	}
	for _, unnamed := range []bool{true, false} {
		s := open(t, t.TempDir())
		local.SetUnnamed(s, unnamed)
		for _, c := range cases {
			ctx := t.Context()
			if c.cold {
				ctx = object.WithCold(ctx)
			}
			key := "cold/" + strings.ReplaceAll(c.name, " ", "")
			if err := s.Put(ctx, key, c.data); err != nil {
				t.Fatalf("unnamed=%v %s: %v", unnamed, c.name, err)
			}
			if !local.Direct(s) {
				t.Skip("the test directory's file system refuses direct I/O")
			}
			// Before any read: pages of the first MiB in the page cache.
			if got := residentPages(t, filepath.Join(s.Dir(), key), directio.Min/align); (got == 0) != c.direct {
				t.Errorf("unnamed=%v %s: %d of the first %d pages in the page cache, want none: %v",
					unnamed, c.name, got, directio.Min/align, c.direct)
			}
			got, err := s.Get(t.Context(), key, 0, -1)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, c.data) {
				t.Fatalf("unnamed=%v %s: read back %d bytes, differ from the %d put", unnamed, c.name, len(got), len(c.data))
			}
		}
	}
}

// residentPages counts the pages among the first n of the file at path
// that are in the page cache.
func residentPages(t *testing.T, path string, n int) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := directio.CachedPages(f, n)
	if err != nil {
		t.Fatal(err)
	}
	return got
}
