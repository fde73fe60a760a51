package cache_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/cache"
)

func openDisk(t *testing.T, o cache.DiskOptions) *cache.Disk {
	t.Helper()
	d, err := cache.OpenDisk(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	waitScan(t, d)
	return d
}

func waitScan(t *testing.T, d *cache.Disk) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); d.Scanning(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("scan did not end")
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func block(key string, n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(uint64(len(key)), uint64(n)))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	copy(b, key)
	return b
}

// cacheFiles returns the block files under dirs and their total size.
func cacheFiles(t *testing.T, dirs ...string) ([]string, int64) {
	t.Helper()
	var files []string
	var total int64
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
			if err != nil || de.IsDir() || de.Name() == "cairn-cache.lock" {
				return err
			}
			fi, err := de.Info()
			if err != nil {
				return err
			}
			files = append(files, p)
			total += fi.Size()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return files, total
}

func TestDiskBasics(t *testing.T) {
	dirs := []string{t.TempDir(), t.TempDir()}
	d := openDisk(t, cache.DiskOptions{Dirs: dirs, MaxBytes: 1 << 20, FreeRatio: -1})
	if _, ok := d.Get("k"); ok {
		t.Fatal("hit in an empty cache")
	}
	for i := range 20 {
		key := fmt.Sprintf("chunks/0/0/%d_0_1000", i)
		if err := d.Write(key, block(key, 1000)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 {
		key := fmt.Sprintf("chunks/0/0/%d_0_1000", i)
		if got, ok := d.Get(key); !ok || !bytes.Equal(got, block(key, 1000)) {
			t.Fatalf("Get(%s) = %d bytes, %v", key, len(got), ok)
		}
	}
	// Blocks are spread over both directories.
	for _, dir := range dirs {
		if files, _ := cacheFiles(t, dir); len(files) == 0 {
			t.Errorf("no block in %s", dir)
		}
	}
	d.Put("queued", []byte("later"))
	waitFor(t, "a queued Put", func() bool { return d.Has("queued") })
	d.Delete("queued")
	if _, ok := d.Get("queued"); ok {
		t.Error("hit after Delete")
	}
	if err := d.Write("huge", make([]byte, 1<<20)); !errors.Is(err, cache.ErrNoRoom) {
		t.Errorf("Write of a block above MaxBytes/8: %v", err)
	}
	s := d.Stats()
	if s.Hits != 20 || s.Misses != 2 || s.HitBytes != 20_000 || s.Items != 20 || s.Writes != 21 || s.ReadLatency.Count != 20 {
		t.Errorf("Stats = %+v", s)
	}
	if _, total := cacheFiles(t, dirs...); total != s.Bytes {
		t.Errorf("files hold %d bytes, Stats.Bytes = %d", total, s.Bytes)
	}
}

// TestDiskCorrupt damages cache files in several ways: each must be
// detected on Get, reported as a miss, deleted and counted — never served.
func TestDiskCorrupt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(b []byte) []byte
	}{
		{"flip a data byte", func(b []byte) []byte { b[len(b)-100] ^= 0x40; return b }},
		{"flip a key byte", func(b []byte) []byte { b[22] ^= 1; return b }},
		{"flip the crc", func(b []byte) []byte { b[17] ^= 1; return b }},
		{"bad magic", func(b []byte) []byte { b[0] = 'X'; return b }},
		{"truncated", func(b []byte) []byte { return b[:len(b)-1] }},
		{"appended", func(b []byte) []byte { return append(b, 0) }},
		{"empty", func(b []byte) []byte { return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			d := openDisk(t, cache.DiskOptions{Dirs: []string{dir}, MaxBytes: 1 << 20, FreeRatio: -1})
			const key = "chunks/0/0/7_0_5000"
			if err := d.Write(key, block(key, 5000)); err != nil {
				t.Fatal(err)
			}
			files, _ := cacheFiles(t, dir)
			if len(files) != 1 {
				t.Fatalf("%d files", len(files))
			}
			b, err := os.ReadFile(files[0])
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(files[0], tc.damage(b), 0o600); err != nil {
				t.Fatal(err)
			}
			if got, ok := d.Get(key); ok {
				t.Fatalf("corrupt file served (%d bytes)", len(got))
			}
			if files, _ := cacheFiles(t, dir); len(files) != 0 {
				t.Errorf("corrupt file kept: %v", files)
			}
			s := d.Stats()
			if s.Corrupt != 1 || s.Items != 0 || s.Bytes != 0 || s.Hits != 0 {
				t.Errorf("Stats = %+v", s)
			}
			// The caller fetches it again and puts it back.
			if err := d.Write(key, block(key, 5000)); err != nil {
				t.Fatal(err)
			}
			if got, ok := d.Get(key); !ok || !bytes.Equal(got, block(key, 5000)) {
				t.Error("re-cached block not served")
			}
		})
	}
}

// TestDiskRestart closes a cache and opens it again: the blocks are found
// again, stray files are removed, and the recency order follows the files'
// modification times.
func TestDiskRestart(t *testing.T) {
	dirs := []string{t.TempDir(), t.TempDir()}
	item := int64(20 + len("k00") + 4 + 1000) // header, key, one segment CRC, data
	o := cache.DiskOptions{Dirs: dirs, MaxBytes: 10 * item, FreeRatio: -1}
	d := openDisk(t, o)
	base := time.Now().Add(-time.Hour)
	for i := range 10 {
		key := fmt.Sprintf("k%02d", i)
		if err := d.Write(key, block(key, 1000)); err != nil {
			t.Fatal(err)
		}
	}
	files, _ := cacheFiles(t, dirs...)
	for _, f := range files {
		b, _ := os.ReadFile(f)
		i := int(b[20+1]-'0')*10 + int(b[20+2]-'0')
		if err := os.Chtimes(f, base, base.Add(time.Duration(i)*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	// A temporary file left by a crash, and a foreign file.
	_ = os.WriteFile(filepath.Join(dirs[0], "blocks", ".tmp-abc-1234"), []byte("torn"), 0o600)
	_ = os.WriteFile(filepath.Join(dirs[1], "blocks", "junk"), []byte("not a block"), 0o600)
	d.Close()

	d2 := openDisk(t, o)
	if s := d2.Stats(); s.Items != 10 || s.Bytes != 10*item {
		t.Fatalf("after restart: %+v", s)
	}
	if files, _ := cacheFiles(t, dirs...); len(files) != 10 {
		t.Errorf("%d files after the scan, want 10", len(files))
	}
	for i := range 10 {
		key := fmt.Sprintf("k%02d", i)
		if got, ok := d2.Get(key); !ok || !bytes.Equal(got, block(key, 1000)) {
			t.Fatalf("Get(%s) after restart: %v", key, ok)
		}
	}
	// Equal recency after the Gets above, except k00 was touched first;
	// re-open to check the order the scan builds: the oldest file goes.
	d2.Close()
	d3 := openDisk(t, o)
	if err := d3.Write("new", block("new", 1000)); err != nil {
		t.Fatal(err)
	}
	if d3.Has("k00") || !d3.Has("k01") {
		t.Errorf("eviction after restart did not take the oldest block")
	}
	if s := d3.Stats(); s.Hits != 0 || s.Evictions != 1 {
		t.Errorf("Stats = %+v", s)
	}
}

// TestDiskGetDuringScan: blocks not yet indexed are served while the
// index is being rebuilt.
func TestDiskGetDuringScan(t *testing.T) {
	dir := t.TempDir()
	o := cache.DiskOptions{Dirs: []string{dir}, MaxBytes: 1 << 30, FreeRatio: -1}
	d := openDisk(t, o)
	for i := range 2000 {
		if err := d.Write(fmt.Sprint("k", i), []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	d.Close()
	d2, err := cache.OpenDisk(o)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	if got, ok := d2.Get("k1999"); !ok || got[0] != byte(1999%256) {
		t.Fatal("block not served during the scan")
	}
	waitScan(t, d2)
	if s := d2.Stats(); s.Items != 2000 {
		t.Errorf("%d items after the scan", s.Items)
	}
}

// TestDiskBound hammers a small cache from many goroutines and checks that
// its bound holds while they run and, on disk, once they stopped.
func TestDiskBound(t *testing.T) {
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	const maxBytes = 200 << 10
	d := openDisk(t, cache.DiskOptions{Dirs: dirs, MaxBytes: maxBytes, FreeRatio: -1, WriteQueue: 64 << 10})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var bad atomic.Int64
	for w := range 6 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 2))
			for {
				select {
				case <-stop:
					return
				default:
				}
				n := r.IntN(300)
				key := fmt.Sprint("blk/", n)
				size := 1000 + n*40 // a key always has the same content
				switch r.IntN(10) {
				case 0:
					d.Delete(key)
				case 1, 2:
					d.Put(key, block(key, size))
				case 3:
					_ = d.Write(key, block(key, size))
				default:
					if got, ok := d.Get(key); ok && !bytes.Equal(got, block(key, size)) {
						bad.Add(1)
					}
				}
			}
		})
	}
	deadline := time.Now().Add(400 * time.Millisecond)
	for time.Now().Before(deadline) {
		if s := d.Stats(); s.Bytes > maxBytes || s.Bytes < 0 || s.Items < 0 {
			t.Fatalf("bound broken: %+v", s)
		}
	}
	close(stop)
	wg.Wait()
	d.Close()
	s := d.Stats()
	if bad.Load() != 0 || s.Corrupt != 0 || s.Evictions == 0 || s.Hits == 0 {
		t.Fatalf("%d wrong blocks served; Stats = %+v", bad.Load(), s)
	}
	if _, total := cacheFiles(t, dirs...); total > maxBytes {
		t.Errorf("files hold %d bytes, bound %d", total, maxBytes)
	}
}

// TestDiskFreeSpaceFloor injects a file system whose free space the test
// controls: below the floor the cache evicts and then stops caching.
func TestDiskFreeSpaceFloor(t *testing.T) {
	dir := t.TempDir()
	const total = 1000 << 10 // floor: 100 KiB free
	var other atomic.Int64   // bytes used by something else
	var dp atomic.Pointer[cache.Disk]
	free := func(string) (uint64, uint64, error) {
		used := other.Load()
		if d := dp.Load(); d != nil {
			used += d.Stats().Bytes
		}
		return uint64(max(total-used, 0)), total, nil
	}
	o := cache.DiskOptions{Dirs: []string{dir}, MaxBytes: 1 << 30, FreeSpace: free, SpaceCheck: 5 * time.Millisecond}
	d, err := cache.OpenDisk(o)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	dp.Store(d)
	waitScan(t, d)
	write := func(i int) error { return d.Write(fmt.Sprint("k", i), make([]byte, 10<<10)) }
	// 80 blocks of 10 KiB fill 800 KiB: free is 200 KiB, above the floor.
	for i := range 80 {
		if err := write(i); err != nil {
			t.Fatal(err)
		}
	}
	if s := d.Stats(); s.Items != 80 || s.SpaceEvictions != 0 {
		t.Fatalf("Stats = %+v", s)
	}
	// Something else takes 150 KiB: free 50 KiB. The next write evicts
	// the least recently used blocks to get back to the floor.
	other.Store(150 << 10)
	d.Get("k0") // k0 is now the most recently used
	if err := write(100); err != nil {
		t.Fatal(err)
	}
	s := d.Stats()
	if f, _, _ := free(dir); f < total/10 || s.SpaceEvictions == 0 || !d.Has("k0") || d.Has("k1") {
		t.Fatalf("free %d after the write; Stats = %+v", f, s)
	}
	// The disk fills up behind the cache's back: the background check
	// evicts.
	before := s.SpaceEvictions
	other.Add(100 << 10)
	waitFor(t, "background eviction", func() bool { return d.Stats().SpaceEvictions > before })
	waitFor(t, "free space back at the floor", func() bool { f, _, _ := free(dir); return f >= total/10 })
	// Nothing left to evict can make room: the cache stops caching.
	other.Store(total)
	waitFor(t, "the cache to empty", func() bool { return d.Stats().Items == 0 })
	if err := write(200); !errors.Is(err, cache.ErrNoRoom) {
		t.Fatalf("Write on a full disk: %v", err)
	}
	d.Put("k201", make([]byte, 100))
	time.Sleep(20 * time.Millisecond)
	if d.Has("k201") || d.Stats().Dropped < 2 {
		t.Errorf("cached on a full disk: %+v", d.Stats())
	}
}

func TestDiskOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    cache.DiskOptions
		ok   bool
	}{
		{"defaults", cache.DiskOptions{Dirs: []string{"/x"}}, true},
		{"no dir", cache.DiskOptions{}, false},
		{"empty dir", cache.DiskOptions{Dirs: []string{""}}, false},
		{"negative size", cache.DiskOptions{Dirs: []string{"/x"}, MaxBytes: -1}, false},
		{"ratio 1", cache.DiskOptions{Dirs: []string{"/x"}, FreeRatio: 1}, false},
		{"dir twice", cache.DiskOptions{Dirs: []string{"/x", "/y", "/x/"}}, false},
	} {
		err := tc.o.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("%s: Validate = %v", tc.name, err)
		}
		if tc.ok && (tc.o.MaxBytes != cache.DefaultDiskSize || tc.o.FreeRatio != cache.DefaultFreeRatio || tc.o.Logger == nil) {
			t.Errorf("%s: defaults not filled: %+v", tc.name, tc.o)
		}
	}
}

// TestDiskReadRange reads parts of a cached block: each comes back equal
// to that part of the block, reading only its segments, so damage to
// another segment does not stop it, while damage to its own segment is
// detected, drops the file and is never served.
func TestDiskReadRange(t *testing.T) {
	dir := t.TempDir()
	d := openDisk(t, cache.DiskOptions{Dirs: []string{dir}, MaxBytes: 64 << 20, FreeRatio: -1})
	const seg = 64 << 10
	const key = "chunks/0/0/9_0_327700"
	data := block(key, 5*seg+20)
	if err := d.Write(key, data); err != nil {
		t.Fatal(err)
	}
	for _, r := range [][2]int{{0, 1}, {0, seg}, {seg - 1, 2}, {3*seg + 5, 8192}, {5 * seg, 20}, {0, len(data)}, {len(data) - 1, 1}} {
		got, ok := d.ReadRange(key, r[0], r[1])
		if !ok || !bytes.Equal(got, data[r[0]:r[0]+r[1]]) {
			t.Fatalf("ReadRange(%d, %d) = %d bytes, %v", r[0], r[1], len(got), ok)
		}
	}
	// Past the end, empty or negative: a miss that keeps the block.
	for _, r := range [][2]int{{len(data) - 1, 2}, {len(data), 1}, {0, 0}, {-1, 4}} {
		if _, ok := d.ReadRange(key, r[0], r[1]); ok {
			t.Fatalf("ReadRange(%d, %d) hit", r[0], r[1])
		}
	}
	if !d.Has(key) {
		t.Fatal("a range miss dropped the block")
	}
	if s := d.Stats(); s.Hits != 7 || s.Misses != 4 || s.Corrupt != 0 {
		t.Fatalf("Stats = %+v", s)
	}

	// Damage segment 3.
	files, _ := cacheFiles(t, dir)
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	dataOff := len(b) - len(data)
	b[dataOff+3*seg+100] ^= 0x10
	if err := os.WriteFile(files[0], b, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, ok := d.ReadRange(key, seg, 100); !ok || !bytes.Equal(got, data[seg:seg+100]) {
		t.Fatal("a sound segment of a file damaged elsewhere was not served")
	}
	if got, ok := d.ReadRange(key, 3*seg+50, 100); ok {
		t.Fatalf("damaged segment served (%d bytes)", len(got))
	}
	if d.Has(key) {
		t.Error("damaged file still indexed")
	}
	if files, _ := cacheFiles(t, dir); len(files) != 0 {
		t.Errorf("damaged file kept: %v", files)
	}
	if s := d.Stats(); s.Corrupt != 1 {
		t.Errorf("Stats = %+v", s)
	}

	// Damage the header's CRC of a fresh copy: no range is served.
	if err := d.Write(key, data); err != nil {
		t.Fatal(err)
	}
	files, _ = cacheFiles(t, dir)
	b, _ = os.ReadFile(files[0])
	b[18] ^= 1
	_ = os.WriteFile(files[0], b, 0o600)
	if _, ok := d.ReadRange(key, 0, 10); ok {
		t.Fatal("file with a bad header served")
	}
	if s := d.Stats(); s.Corrupt != 2 {
		t.Errorf("Stats = %+v", s)
	}
}

// TestDiskOldFormat: files of the previous format (version 1, one CRC for
// the whole file) are removed by the scan without being counted as
// corrupt, and a Get that meets one misses.
func TestDiskOldFormat(t *testing.T) {
	dir := t.TempDir()
	o := cache.DiskOptions{Dirs: []string{dir}, MaxBytes: 1 << 20, FreeRatio: -1}
	d := openDisk(t, o)
	const key = "chunks/0/0/3_0_100"
	if err := d.Write(key, block(key, 100)); err != nil {
		t.Fatal(err)
	}
	files, _ := cacheFiles(t, dir)
	b, _ := os.ReadFile(files[0])
	b[4] = 1 // as written by version 1 (its layout does not matter here)
	_ = os.WriteFile(files[0], b, 0o600)
	if _, ok := d.Get(key); ok {
		t.Fatal("old-format file served")
	}
	if files, _ := cacheFiles(t, dir); len(files) != 0 {
		t.Errorf("old-format file kept: %v", files)
	}
	if s := d.Stats(); s.Corrupt != 0 || s.Misses != 1 || s.Items != 0 {
		t.Errorf("Stats = %+v", s)
	}
	_ = os.MkdirAll(filepath.Dir(files[0]), 0o700)
	_ = os.WriteFile(files[0], b, 0o600)
	d.Close()
	d2 := openDisk(t, o)
	if files, _ := cacheFiles(t, dir); len(files) != 0 || d2.Stats().Items != 0 {
		t.Errorf("scan kept an old-format file: %v", files)
	}
}

// TestDiskDirInUse: a directory an open Disk holds cannot be opened by a
// second one (flock locks belong to open files, so this holds within one
// process as across processes), which names the holder; a Disk that fails
// to open releases the directories it took; Close releases them.
func TestDiskDirInUse(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	d := openDisk(t, cache.DiskOptions{Dirs: []string{a}, FreeRatio: -1})
	_, err := cache.OpenDisk(cache.DiskOptions{Dirs: []string{b, a}, FreeRatio: -1})
	if !errors.Is(err, cache.ErrDirInUse) || !strings.Contains(err.Error(), a) ||
		!strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Fatalf("second open of %s: %v", a, err)
	}
	// b was taken before a failed, and given back.
	openDisk(t, cache.DiskOptions{Dirs: []string{b}, FreeRatio: -1})
	d.Close()
	openDisk(t, cache.DiskOptions{Dirs: []string{a}, FreeRatio: -1})
}

// TestDiskPutColdSums: a cold block given with its segment checksums is
// stored with them and reads back; one given with wrong ones is never
// served: its file fails its checks and the read misses.
func TestDiskPutColdSums(t *testing.T) {
	d := openDisk(t, cache.DiskOptions{Dirs: []string{t.TempDir()}, MaxBytes: 64 << 20, FreeRatio: -1})
	data := block("good", 1<<20+300)
	sums := make([]byte, 4*((len(data)+1<<16-1)>>16))
	for i := 0; i*(1<<16) < len(data); i++ {
		binary.BigEndian.PutUint32(sums[4*i:], crc32.Checksum(data[i<<16:min((i+1)<<16, len(data))], crc32.MakeTable(crc32.Castagnoli)))
	}
	d.PutSums("good", data, sums, true)
	bad := slices.Clone(sums)
	bad[5] ^= 1
	d.PutSums("bad", data, bad, true)
	waitFor(t, "both written", func() bool { return d.Has("good") && d.Has("bad") })
	if got, ok := d.Get("good"); !ok || !bytes.Equal(got, data) {
		t.Fatalf("good: %v, %d bytes", ok, len(got))
	}
	if _, ok := d.Get("bad"); ok {
		t.Fatal("block with a wrong checksum table served")
	}
	if s := d.Stats(); s.Corrupt != 1 {
		t.Errorf("Stats = %+v, want one corrupt file", s)
	}
}
