package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/daemon"
)

// checkBenchTable checks the markdown table has the header and a row per
// workload, with a number in every figure column but the backend ones.
func checkBenchTable(t *testing.T, out string, serverKnown bool) {
	t.Helper()
	want := []string{"seq-write-8K", "seq-read-8K", "seq-write-32K", "seq-read-32K", "create", "stat", "unlink"}
	var rows []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "| ") && !strings.HasPrefix(l, "| workload") && !strings.HasPrefix(l, "| ---") {
			rows = append(rows, l)
		}
	}
	if !strings.Contains(out, "| workload | ops | ops/s | MB/s | mean µs | p99 µs | client µs/op | server µs/op | meta tx/op | obj req/op |") {
		t.Fatalf("no table header:\n%s", out)
	}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d:\n%s", len(rows), len(want), out)
	}
	for i, r := range rows {
		cells := strings.Split(strings.Trim(r, "| "), " | ")
		if len(cells) != 10 || cells[0] != want[i] {
			t.Fatalf("row %d = %q, want workload %s and 10 cells", i, r, want[i])
		}
		if cells[1] == "0" {
			t.Errorf("%s: no ops", cells[0])
		}
		if got := cells[7] != "n/a"; got != serverKnown {
			t.Errorf("%s: server µs/op %q", cells[0], cells[7])
		}
	}
}

func TestBenchPath(t *testing.T) {
	dir := t.TempDir()
	out, err := run(t, "bench", "--path", dir, "--size", "256K", "--bs", "8K,32K", "--files", "40", "--procs", "2")
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, out)
	}
	checkBenchTable(t, out, false)
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("bench left %d entries behind", len(ents))
	}
	_, err = run(t, "bench", "--path", dir, "--nfs", "127.0.0.1:1")
	wantErr(t, err, "give one target")
	_, err = run(t, "bench", "--path", dir, "--workloads", "mkfs")
	wantErr(t, err, "unknown workload")
}

// TestBenchNFS runs cairn bench against a gateway in this process (so
// --server-pid is this process), in JSON and as a table.
func TestBenchNFS(t *testing.T) {
	dir := t.TempDir()
	meta := "pebble://" + dir + "/meta"
	if out, err := run(t, "format", meta, "benchvol"); err != nil {
		t.Fatalf("format: %v\n%s", err, out)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- daemon.Gateway(ctx, daemon.GatewayOptions{
			Volume: daemon.VolumeOptions{MetaURL: meta},
			Listen: "127.0.0.1:0",
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Ready:  func(addr string) { ready <- addr },
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("gateway: %v", err)
		}
	})
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("gateway: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("gateway not ready")
	}
	pid := fmt.Sprint(os.Getpid())
	out, err := run(t, "bench", "--nfs", addr+"/", "--server-pid", pid, "--size", "256K", "--bs", "8K,32K", "--files", "40", "--procs", "2")
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, out)
	}
	checkBenchTable(t, out, true)
	out, err = run(t, "bench", "--nfs", addr, "--nfs-window", "1", "--json", "--server-pid", pid,
		"--workloads", "seq-read,stat", "--size", "100K", "--bs", "32K", "--files", "10", "--procs", "1")
	if err != nil {
		t.Fatalf("bench --json: %v\n%s", err, out)
	}
	var rep struct {
		Results []struct {
			Workload  string   `json:"workload"`
			Ops       int64    `json:"ops"`
			ServerUs  *float64 `json:"server_us_per_op"`
			MetaTxOp  *float64 `json:"meta_tx_per_op"`
			OpsPerSec float64  `json:"ops_per_sec"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	if len(rep.Results) != 2 || rep.Results[0].Workload != "seq-read-32K" || rep.Results[0].Ops != 4 ||
		rep.Results[1].Workload != "stat" || rep.Results[1].Ops != 10 {
		t.Fatalf("results: %+v", rep.Results)
	}
	for _, r := range rep.Results {
		if r.ServerUs == nil || r.MetaTxOp != nil || r.OpsPerSec <= 0 {
			t.Errorf("%s: server %v, meta %v, ops/s %v", r.Workload, r.ServerUs, r.MetaTxOp, r.OpsPerSec)
		}
	}
}
