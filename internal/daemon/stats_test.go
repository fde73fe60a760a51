package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/vfs"
	"github.com/prometheus/common/expfmt"
)

// TestStatsThroughVFS writes and reads a file through vfs on a real
// volume (Pebble, local data directory, memory and disk caches) and checks
// that every tier's counters move as they should, across a restart that
// keeps the disk cache; then reads them over the control socket and the
// metrics endpoint.
func TestStatsThroughVFS(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	url := "pebble://" + dir + "/meta"
	const bs = 64 << 10
	const nblocks = 3
	if _, err := Format(ctx, FormatOptions{MetaURL: url, Name: "st", BlockSize: bs}); err != nil {
		t.Fatal(err)
	}
	vo := VolumeOptions{MetaURL: url, CacheDirs: []string{dir + "/cache"}, CacheOnStoreFS: true, CacheSize: 16 << 20, CacheFreeRatio: -1}
	data := bytes.Repeat([]byte("cairn-stats "), nblocks*bs/12+1)[:nblocks*bs]
	root := &base.Caller{}

	open := func() (*Volume, *vfs.VFS) {
		vol, err := OpenVolume(ctx, vo)
		if err != nil {
			t.Fatal(err)
		}
		for vol.disk.Scanning() {
			time.Sleep(time.Millisecond)
		}
		return vol, vfs.New(vol.Meta, vol.Chunks, vfs.Options{})
	}
	read := func(v *vfs.VFS, ino base.Ino) {
		t.Helper()
		fh, errno := v.Open(ctx, root, ino, syscall.O_RDONLY)
		if errno != 0 {
			t.Fatal(errno)
		}
		buf := make([]byte, len(data))
		if n, errno := v.Read(ctx, fh, 0, buf); errno != 0 || n != len(data) || !bytes.Equal(buf, data) {
			t.Fatalf("read %d bytes, %v", n, errno)
		}
		v.Release(ctx, fh)
	}

	vol, v := open()
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
	before := vol.Stats()
	read(v, ino) // cold: memory and disk miss, object gets
	for vol.disk.Stats().Items < nblocks {
		time.Sleep(time.Millisecond)
	}
	read(v, ino) // memory hits
	s := vol.Stats()
	if got := s.Object["put"].Requests - before.Object["put"].Requests; got != 0 {
		t.Errorf("%d puts while reading", got)
	}
	if s.Object["put"].Requests < nblocks || s.Object["get"].Requests-before.Object["get"].Requests != nblocks {
		t.Errorf("object requests: %+v", s.Object)
	}
	if s.Memory.Hits < nblocks || s.Memory.FillBytes < int64(len(data)) || s.Disk.Misses != nblocks || s.Disk.Hits != 0 || s.Disk.Items != nblocks {
		t.Errorf("cold then warm read: memory %+v disk %+v", s.Memory, *s.Disk)
	}
	if s.Chunk.BytesRead != 2*int64(len(data)) {
		t.Errorf("chunk bytes read %d", s.Chunk.BytesRead)
	}
	_ = v.Close(ctx)
	vol.Close()

	// Restart: the memory tier is empty, the disk tier is not.
	vol, v = open()
	defer vol.Close()
	defer v.Close(ctx)
	read(v, ino)
	s = vol.Stats()
	if s.Disk.Hits != nblocks || s.Object["get"].Requests != 1 || s.Disk.Latency.Count != nblocks {
		// One get: the volume marker read by OpenVolume.
		t.Errorf("after restart: disk %+v, object %+v", *s.Disk, s.Object)
	}

	// The same counters over the control socket and the metrics endpoint.
	srv, err := ServeControlAt(dir+"/m.sock", vol, Holder{}, RunAdmin)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var out bytes.Buffer
	if err := CallSocket(dir+"/m.sock", Request{Verb: "stats"}, &out); err != nil {
		t.Fatal(err)
	}
	var got Stats
	if err := json.Unmarshal(out.Bytes(), &got); err != nil || got.Disk == nil || got.Disk.Hits != nblocks || got.Volume != "st" {
		t.Fatalf("stats over the socket: %v\n%s", err, out.String())
	}
	ms, err := ServeMetrics("127.0.0.1:0", vol, "test", vol.Log)
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	resp, err := http.Get("http://" + ms.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		"# TYPE cairn_cache_hits_total counter",
		`cairn_cache_hits_total{tier="disk"} 3`,
		`cairn_object_requests_total{kind="get"} 1`,
		`cairn_object_request_seconds_bucket{kind="get",le="+Inf"} 1`,
		`cairn_cache_items{tier="disk"} 3`,
		`cairn_build_info{goversion="` + runtime.Version() + `",version="test"} 1`,
		`cairn_volume_info{uuid="` + vol.Settings.UUID + `",volume="st"} 1`,
		`cairn_volume_used_inodes{uuid="` + vol.Settings.UUID + `",volume="st"} `,
		"go_goroutines ",
		"process_resident_memory_bytes ",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
	// The page is valid exposition format, as Prometheus parses it.
	var parser expfmt.TextParser
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("the metrics page does not parse: %v", err)
	}
	if h := families["cairn_object_request_seconds"]; h == nil || h.GetType().String() != "HISTOGRAM" {
		t.Errorf("cairn_object_request_seconds: %v", h)
	}
	// The example dashboard asks for series that exist (the NFS ones need
	// a gateway).
	dash, err := os.ReadFile("../../docs/examples/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range regexp.MustCompile(`\b(cairn|go|process)_[a-z_]+`).FindAllString(string(dash), -1) {
		base := strings.TrimSuffix(name, "_bucket")
		if families[base] == nil && !strings.HasPrefix(name, "cairn_nfs_") {
			t.Errorf("the dashboard asks for %s, which /metrics lacks", name)
		}
	}
}

// TestWarmup fills the disk cache of a volume through the warmup verb.
func TestWarmup(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	url := "pebble://" + dir + "/meta"
	if _, err := Format(ctx, FormatOptions{MetaURL: url, Name: "w", BlockSize: 64 << 10}); err != nil {
		t.Fatal(err)
	}
	// Short blocks written stay out of the disk cache, so that warmup
	// has every block to fetch.
	vol, err := OpenVolume(ctx, VolumeOptions{MetaURL: url, CacheDirs: []string{dir + "/cache"}, CacheOnStoreFS: true, CacheFreeRatio: -1, NoCacheSmallWrites: true})
	if err != nil {
		t.Fatal(err)
	}
	defer vol.Close()
	v := vfs.New(vol.Meta, vol.Chunks, vfs.Options{})
	defer v.Close(ctx)
	root := &base.Caller{}
	var inos []string
	for i, size := range []int{0, 1000, 200 << 10} {
		ino, _, fh, errno := v.Create(ctx, root, base.RootIno, "f"+string(rune('a'+i)), 0o644, 0, syscall.O_RDWR)
		if errno != 0 {
			t.Fatal(errno)
		}
		if _, errno := v.Write(ctx, fh, 0, make([]byte, size)); errno != 0 {
			t.Fatal(errno)
		}
		v.Release(ctx, fh)
		inos = append(inos, jsonNum(ino))
	}
	written := vol.Stats().Memory.Items // short blocks are kept on write
	var out strings.Builder
	if err := RunAdmin(ctx, vol, Request{Verb: "warmup", Args: inos}, &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var last WarmupProgress
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		t.Fatal(err)
	}
	if !last.Done || last.Files != 3 || last.Bytes != 1000+200<<10 || last.Fetched != last.Bytes || last.Errors != 0 {
		t.Fatalf("warmup: %+v", last)
	}
	if s := vol.Stats(); s.Disk.Items != 5 || s.Memory.Items != written {
		t.Errorf("after warmup: disk %+v memory %+v", *s.Disk, s.Memory)
	}
	// Without a disk cache, warmup says what to do.
	vol2 := &Volume{Settings: vol.Settings}
	if err := Warmup(ctx, vol2, nil, 0, io.Discard); err == nil || !strings.Contains(err.Error(), "--cache-dir") {
		t.Errorf("warmup without a disk cache: %v", err)
	}
}

func jsonNum(ino base.Ino) string { b, _ := json.Marshal(uint64(ino)); return string(b) }
