package daemon

import (
	"bytes"
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/vfs"
)

// TestReadTierStats: small random reads through vfs after a restart miss
// both tiers, fill the disk tier in the background, and then hit it; the
// data path's per-read tier counters and the disk fills show in Stats and
// in the Prometheus text.
func TestReadTierStats(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	url := "pebble://" + dir + "/meta"
	const bs = 1 << 20
	if _, err := Format(ctx, FormatOptions{MetaURL: url, Name: "rt", BlockSize: bs}); err != nil {
		t.Fatal(err)
	}
	vo := VolumeOptions{MetaURL: url, CacheDirs: []string{dir + "/cache"}, CacheOnStoreFS: true, CacheSize: 64 << 20, CacheFreeRatio: -1}
	root := &base.Caller{}
	data := bytes.Repeat([]byte("cairn-tiers "), 2*bs/12+1)[:2*bs]

	vol, err := OpenVolume(ctx, vo)
	if err != nil {
		t.Fatal(err)
	}
	v := vfs.New(vol.Meta, vol.Chunks, vfs.Options{})
	ino, _, fh, errno := v.Create(ctx, root, base.RootIno, "f", 0o644, 0, syscall.O_RDWR)
	if errno != 0 {
		t.Fatal(errno)
	}
	if _, errno := v.Write(ctx, fh, 0, data); errno != 0 {
		t.Fatal(errno)
	}
	if errno := v.Release(ctx, fh); errno != 0 {
		t.Fatal(errno)
	}
	_ = v.Close(ctx)
	vol.Close()

	// Restart: both tiers empty.
	vol, err = OpenVolume(ctx, vo)
	if err != nil {
		t.Fatal(err)
	}
	defer vol.Close()
	v = vfs.New(vol.Meta, vol.Chunks, vfs.Options{})
	defer v.Close(ctx)
	fh, errno = v.Open(ctx, root, ino, syscall.O_RDONLY)
	if errno != 0 {
		t.Fatal(errno)
	}
	defer v.Release(ctx, fh)
	read := func(off int) {
		t.Helper()
		buf := make([]byte, 8192)
		if n, errno := v.Read(ctx, fh, int64(off), buf); errno != 0 || n != len(buf) || !bytes.Equal(buf, data[off:off+n]) {
			t.Fatalf("read at %d: %d bytes, %v", off, n, errno)
		}
	}
	read(300 << 10) // random: a partial read, both tiers miss
	for deadline := time.Now().Add(5 * time.Second); vol.Stats().Disk.Items < 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the disk tier was not filled: %+v", *vol.Stats().Disk)
		}
	}
	read(700 << 10) // another segment of the same block: from the disk tier
	c := vol.Stats().Chunk
	if c.ReadMemoryHits != 0 || c.ReadMemoryMisses != 2 || c.ReadDiskMisses != 1 || c.ReadDiskHits != 1 || c.DiskFills != 1 {
		t.Fatalf("chunk counters: %+v", c)
	}
	var out strings.Builder
	if err := WritePrometheus(&out, vol.Stats()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"cairn_disk_fills_total 1\n",
		`cairn_read_tier_hits_total{tier="disk"} 1` + "\n",
		`cairn_read_tier_misses_total{tier="memory"} 2` + "\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if n := strings.Count(out.String(), "# TYPE cairn_read_tier_hits_total"); n != 1 {
		t.Errorf("%d TYPE lines for cairn_read_tier_hits_total", n)
	}
}
