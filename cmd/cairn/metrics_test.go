package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/internal/bench"
	"github.com/cairnfs/cairn/internal/nfs/nfsclient"
	"github.com/cairnfs/cairn/internal/nfs/proto"
)

// scrape reads a /metrics endpoint: the samples summed per name, and the
// text.
func scrape(t *testing.T, addr string) (map[string]float64, string) {
	t.Helper()
	m, err := bench.ScrapeMetrics(http.DefaultClient, "http://"+addr+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return m, string(body)
}

// TestE2EMountMetaMetrics mounts with --metrics and checks that creating
// a file through the mount makes cairn_meta_transactions_total (what
// cairn bench reads for "meta tx/op") grow, and that cairn stats shows the
// metadata engine.
func TestE2EMountMetaMetrics(t *testing.T) {
	v := newE2EVolume(t)
	addr := "127.0.0.1:" + freePort(t)
	cairn(t, "mount", "-d", "--log", v.dir+"/mount.log", "--metrics", addr, v.meta, v.mnt)
	t.Cleanup(func() { v.unmount(t) })

	before, text := scrape(t, addr)
	for _, want := range []string{
		"# TYPE cairn_meta_transactions_total counter",
		`cairn_meta_transactions_total{kind="update",outcome="ok"}`,
		`cairn_meta_retries_total{kind="update"}`,
		`cairn_meta_transaction_seconds_bucket{kind="view",le="+Inf"}`,
		`cairn_meta_updates_total{run="optimistic"}`, // embedded engine: how updates ran
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "cairn_nfs_calls_total") {
		t.Error("/metrics of a mount without --nfs-listen has NFS counters")
	}
	if err := os.WriteFile(filepath.Join(v.mnt, "new"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	after, _ := scrape(t, addr)
	if d := after[bench.MetricMetaTx] - before[bench.MetricMetaTx]; d < 1 {
		t.Errorf("%s grew by %g after a file create", bench.MetricMetaTx, d)
	}

	out := cairn(t, "stats", "--count", "1", "--interval", "100ms", v.mnt)
	if !strings.Contains(out, "meta tx/s retry/s  mean ms") {
		t.Errorf("stats table has no meta columns:\n%s", out)
	}
	out = cairn(t, "stats", "--count", "1", "--interval", "100ms", "--json", v.mnt)
	var is IntervalStats
	if err := json.Unmarshal([]byte(out), &is); err != nil {
		t.Fatalf("stats --json: %v\n%s", err, out)
	}
	if tot := is.Totals.Meta.Total(); tot.Transactions < int64(after[bench.MetricMetaTx]) || tot.Latency.Count != tot.Transactions {
		t.Errorf("stats totals: %+v, /metrics had %g transactions", tot, after[bench.MetricMetaTx])
	}
}

// TestE2EGatewayMetrics runs cairn gateway nfs with --metrics and checks
// that its endpoint serves the metadata transactions and the calls per
// NFS procedure of a client that creates a file.
func TestE2EGatewayMetrics(t *testing.T) {
	bin := cairnBinary(t)
	v := newE2EVolume(t)
	port := freePort(t)
	addr := "127.0.0.1:" + freePort(t)
	g := startGateway(t, bin, v.meta, port, v.dir+"/gateway.log", "--metrics", addr)

	before, _ := scrape(t, addr)
	c, err := nfsclient.Dial("127.0.0.1:" + port)
	if err != nil {
		t.Fatal(err)
	}
	root, err := c.Mount("/")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create(root, "f", proto.CreateUnchecked, proto.Sattr3{}, [8]byte{}); err != nil {
		t.Fatal(err)
	}
	c.Close()
	after, text := scrape(t, addr)
	if d := after[bench.MetricMetaTx] - before[bench.MetricMetaTx]; d < 1 {
		t.Errorf("%s grew by %g after an NFS create", bench.MetricMetaTx, d)
	}
	for _, want := range []string{
		`cairn_nfs_calls_total{proc="mnt",prog="mount"} 1`,
		`cairn_nfs_calls_total{proc="create",prog="nfs"} 1`,
		`cairn_nfs_call_seconds_count{proc="create",prog="nfs"} 1`,
		`cairn_object_requests_total{kind="get"}`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, text)
		}
	}
	stopGateway(t, g)
	cairn(t, "fsck", v.meta)
}
