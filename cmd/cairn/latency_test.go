package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/daemon"
)

// TestE2EObjectLatency mounts with --object-latency and --metrics, reads a
// file back after a remount (so its blocks come from the data store) and
// checks in /stats that every object request took at least the latency;
// a negative latency is refused before anything is mounted.
func TestE2EObjectLatency(t *testing.T) {
	v := newE2EVolume(t)
	if out, err := cairnErr(t, "mount", "-d", "--object-latency", "-5ms", v.meta, v.mnt); err == nil {
		t.Fatalf("negative --object-latency accepted:\n%s", out)
	}
	const lat = 25 * time.Millisecond
	port := freePort(t)
	mount := func() {
		cairn(t, "mount", "-d", "--log", v.dir+"/mount.log", "--object-latency", lat.String(),
			"--metrics", "127.0.0.1:"+port, v.meta, v.mnt)
	}
	mount()
	t.Cleanup(func() { v.unmount(t) })
	data := make([]byte, 3<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if err := os.WriteFile(filepath.Join(v.mnt, "f"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	v.unmount(t)
	mount()
	start := time.Now()
	got, err := os.ReadFile(filepath.Join(v.mnt, "f"))
	if err != nil || string(got) != string(data) {
		t.Fatalf("read back: %v", err)
	}
	if took := time.Since(start); took < lat {
		t.Errorf("a cold read took %s, less than one object request (%s)", took, lat)
	}
	resp, err := http.Get("http://127.0.0.1:" + port + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var s daemon.Stats
	if err := json.Unmarshal(body, &s); err != nil {
		t.Fatalf("/stats: %v\n%s", err, body)
	}
	n := 0
	for kind, k := range s.Object {
		if k.Latency.Count == 0 {
			continue
		}
		n += int(k.Latency.Count)
		if k.Latency.Mean() < lat {
			t.Errorf("%s: mean latency %s over %d requests, want at least %s", kind, k.Latency.Mean(), k.Latency.Count, lat)
		}
	}
	if n < 2 { // the volume marker and the file's block
		t.Errorf("%d object requests since the remount:\n%s", n, body)
	}
}
