package cache_test

import (
	"bytes"
	"os"
	"testing"
	"unsafe"

	"github.com/cairnfs/cairn/internal/cache"
	"github.com/cairnfs/cairn/internal/directio"
)

// TestDiskPutCold: a cold block of 1 MiB or more is written past the page
// cache (its data pages are not cached after the write) and reads back
// whole; a small cold block and a block put the usual way go through the
// page cache.
func TestDiskPutCold(t *testing.T) {
	dir := t.TempDir()
	d := openDisk(t, cache.DiskOptions{Dirs: []string{dir}, MaxBytes: 64 << 20, FreeRatio: -1})
	raw := make([]byte, 3<<20+8192)
	buf := raw[4096-int(uintptr(unsafe.Pointer(&raw[0]))%4096):]
	for i := range buf {
		buf[i] = byte(i*13 + i>>16)
	}
	for _, c := range []struct {
		key    string
		data   []byte
		cold   bool
		direct bool
	}{
		{"chunks/0/0/1_0_2097152", buf[:2<<20], true, true},
		{"chunks/0/0/2_0_1048676", buf[:1<<20+100], true, true},
		{"chunks/0/0/3_0_65536", buf[:64<<10], true, false},
		{"chunks/0/0/4_0_2097152", buf[:2<<20], false, false},
	} {
		before := len(files(t, dir))
		if c.cold {
			d.PutSums(c.key, c.data, nil, true)
		} else {
			d.Put(c.key, c.data)
		}
		waitFor(t, "the block written", func() bool { return d.Has(c.key) })
		fs := files(t, dir)
		if len(fs) != before+1 {
			t.Fatalf("%s: %d files after the put, want %d", c.key, len(fs), before+1)
		}
		path := newest(t, fs)
		if got := resident(t, path); (got == 0) != c.direct {
			t.Errorf("%s: %d data pages in the page cache after the write; want none: %v", c.key, got, c.direct)
		}
		got, ok := d.Get(c.key)
		if !ok || !bytes.Equal(got, c.data) {
			t.Fatalf("%s: read back %v, %d bytes", c.key, ok, len(got))
		}
	}
}

func files(t *testing.T, dir string) []string {
	t.Helper()
	fs, _ := cacheFiles(t, dir)
	return fs
}

// newest returns the most recently modified of paths.
func newest(t *testing.T, paths []string) string {
	t.Helper()
	var best string
	var bt int64
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if best == "" || fi.ModTime().UnixNano() >= bt {
			best, bt = p, fi.ModTime().UnixNano()
		}
	}
	return best
}

// resident counts the pages of the file at path, past its first page
// (the header), that are in the page cache.
func resident(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	n := int(fi.Size() / directio.Align) // whole pages only
	all, err := directio.CachedPages(f, n)
	if err != nil {
		t.Fatal(err)
	}
	first, err := directio.CachedPages(f, 1)
	if err != nil {
		t.Fatal(err)
	}
	return all - first
}
