package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestE2EDiskCacheWarmupStats mounts with a disk cache and a metrics
// endpoint, writes files, remounts (empty memory and page caches), warms
// a tree with cairn warmup, reads it back through the mount and checks,
// with cairn stats --json and /metrics, that the disk tier served it.
func TestE2EDiskCacheWarmupStats(t *testing.T) {
	v := newE2EVolume(t)
	cacheDir := filepath.Join(v.dir, "cache")
	port := freePort(t)
	// Without --cache-small-writes the written files' short blocks stay
	// out of the disk cache too, so warmup has every block to fetch.
	mount := func() {
		cairn(t, "mount", "-d", "--log", v.dir+"/mount.log", "--cache-dir", cacheDir, "--cache-on-store-fs", "--cache-size", "1G",
			"--cache-small-writes=false", "--metrics", "127.0.0.1:"+port, v.meta, v.mnt)
	}
	mount()
	t.Cleanup(func() { v.unmount(t) })
	// Checksums from the source, so nothing reads the files through the
	// mount (which would fill the disk cache) before warmup.
	sh(t, v.dir, `mkdir -p src/sub
head -c 9000000 /dev/urandom > src/big
for i in 1 2 3 4 5; do head -c 30000 /dev/urandom > src/sub/s$i; done
(cd src && sha256sum big sub/* > ../sums)
cp -r src mnt/tree`)
	v.unmount(t)
	mount()

	out := cairn(t, "warmup", filepath.Join(v.mnt, "tree"))
	if !strings.Contains(out, "warmed 6 files") || !strings.Contains(out, "0.0 MiB already cached") {
		t.Fatalf("warmup:\n%s", out)
	}
	if out := cairn(t, "warmup", "-q", filepath.Join(v.mnt, "tree", "big")); !strings.Contains(out, "0.0 MiB fetched") {
		t.Fatalf("second warmup fetched again:\n%s", out)
	}
	sh(t, filepath.Join(v.mnt, "tree"), "sha256sum -c --quiet ../../sums")

	out = cairn(t, "stats", "--count", "1", "--interval", "200ms", "--json", v.mnt)
	var is IntervalStats
	if err := json.Unmarshal([]byte(out), &is); err != nil {
		t.Fatalf("stats --json: %v\n%s", err, out)
	}
	d := is.Totals.Disk
	// Every cached block (how many depends on how cp's writes became
	// slices) was read once from the disk tier; none missed.
	if d == nil || d.Items < 6 || d.Hits < d.Items || d.Misses != 0 || d.Corrupt != 0 {
		t.Fatalf("disk tier after warmup and reads: %+v", d)
	}
	// One get for the volume marker, one per block for warmup; the reads
	// none.
	if gets := is.Totals.Object["get"].Requests + is.Totals.Object["range_get"].Requests; gets != 1+d.Items {
		t.Errorf("%d object gets for %d blocks: the warm reads went to the object store", gets, d.Items)
	}
	if out := cairn(t, "stats", "--count", "1", "--interval", "100ms", v.mnt); !strings.Contains(out, "disk hit") || !strings.Contains(out, "fuse req/s") {
		t.Errorf("stats table:\n%s", out)
	}
	// The FUSE requests of warmup's walk and the checksum pass: at least
	// one open, read, flush and release per file; the names came with
	// the listings (readdirplus).
	fuseN := map[string]int64{}
	for _, o := range is.Totals.FUSE {
		fuseN[o.Op] = o.Latency.Count
	}
	for _, op := range []string{"open", "read", "flush", "release"} {
		if fuseN[op] < 6 || fuseN["readdirplus"] < 1 {
			t.Errorf("%d FUSE %s requests counted for 6 files read: %v", fuseN[op], op, fuseN)
		}
	}

	resp, err := http.Get("http://127.0.0.1:" + port + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `cairn_cache_hits_total{tier="disk"}`) || !strings.Contains(string(body), `cairn_object_requests_total{kind="put"}`) ||
		!strings.Contains(string(body), `cairn_fuse_requests_total{op="read"}`) || !strings.Contains(string(body), `cairn_fuse_request_seconds_bucket{op="read"`) {
		t.Errorf("/metrics:\n%s", body)
	}
	if _, err := os.Stat(cacheDir); err != nil {
		t.Fatal(err)
	}
}
