package bench

import (
	"strings"
	"testing"
	"time"
)

func ptr(v float64) *float64 { return &v }

func eqOpt(a, b *float64) bool {
	if a == nil || b == nil {
		return a == b
	}
	d := *a - *b
	return d < 1e-9 && d > -1e-9
}

func TestCompute(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name string
		s    Sample
		want Figures
	}{{
		name: "metadata, nothing from the server",
		s: Sample{Workload: "create", Ops: 4, Elapsed: 2 * ms, ClientCPU: 400 * time.Microsecond,
			Latencies: []time.Duration{4 * ms, 1 * ms, 3 * ms, 2 * ms}},
		want: Figures{Workload: "create", Ops: 4, Seconds: 0.002, OpsPerSec: 2000,
			MeanLatencyUs: 2500, P99LatencyUs: 4000, ClientUsPerOp: 100},
	}, {
		name: "sequential, server CPU and backend counters",
		s: Sample{Workload: "seq-write-8K", Ops: 100, Bytes: 2e6, Elapsed: time.Second,
			ClientCPU: 50 * ms, ServerCPU: 30 * ms, ServerKnown: true,
			Backend: map[string]float64{MetricObjectReqs: 25, MetricMetaTx: 10, "other": 7}},
		want: Figures{Workload: "seq-write-8K", Ops: 100, Bytes: 2e6, Seconds: 1, OpsPerSec: 100,
			MBPerSec: ptr(2), ClientUsPerOp: 500, ServerUsPerOp: ptr(300), MetaTxPerOp: ptr(0.1), ObjReqPerOp: ptr(0.25)},
	}, {
		name: "server known, used no CPU; metrics without the meta counter",
		s: Sample{Workload: "stat", Ops: 10, Elapsed: ms, ServerKnown: true,
			Backend: map[string]float64{MetricObjectReqs: 0}},
		want: Figures{Workload: "stat", Ops: 10, Seconds: 0.001, OpsPerSec: 10000,
			ServerUsPerOp: ptr(0), ObjReqPerOp: ptr(0)},
	}, {
		name: "no ops",
		s:    Sample{Workload: "unlink", Elapsed: ms, ServerKnown: true},
		want: Figures{Workload: "unlink", Seconds: 0.001},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := Compute(tc.s)
			w := tc.want
			if got.Workload != w.Workload || got.Ops != w.Ops || got.Bytes != w.Bytes ||
				got.Seconds != w.Seconds || got.OpsPerSec != w.OpsPerSec ||
				got.MeanLatencyUs != w.MeanLatencyUs || got.P99LatencyUs != w.P99LatencyUs ||
				got.ClientUsPerOp != w.ClientUsPerOp || !eqOpt(got.MBPerSec, w.MBPerSec) ||
				!eqOpt(got.ServerUsPerOp, w.ServerUsPerOp) || !eqOpt(got.MetaTxPerOp, w.MetaTxPerOp) ||
				!eqOpt(got.ObjReqPerOp, w.ObjReqPerOp) {
				t.Errorf("got  %+v\nwant %+v", got, w)
			}
		})
	}
}

func TestLatencyPercentile(t *testing.T) {
	mk := func(n int) []time.Duration {
		var ls []time.Duration
		for i := n; i >= 1; i-- {
			ls = append(ls, time.Duration(i)*time.Microsecond)
		}
		return ls
	}
	for _, tc := range []struct {
		n         int
		mean, p99 float64
	}{{0, 0, 0}, {1, 1, 1}, {2, 1.5, 2}, {100, 50.5, 99}, {101, 51, 100}, {1000, 500.5, 990}} {
		mean, p99 := latency(mk(tc.n))
		if mean != tc.mean || p99 != tc.p99 {
			t.Errorf("n=%d: mean %v p99 %v, want %v %v", tc.n, mean, p99, tc.mean, tc.p99)
		}
	}
}

func TestParseProcStat(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  string
	}{
		{in: "4242 (cairn) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 31 0 0 20 0 12 0 100 0 0", want: 2810 * time.Millisecond},
		{in: "7 (a) b (c d)) R 1 7 7 0 -1 0 0 0 0 0 3 4 0 0", want: 70 * time.Millisecond},
		{in: "7 (x) R 1 2 3", err: "fields"},
		{in: "garbage", err: "no command name"},
		{in: "7 (x) R 1 7 7 0 -1 0 0 0 0 0 abc 4 0", err: "proc stat"},
	} {
		got, err := parseProcStat(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %v %v, want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestProcessCPUSelf(t *testing.T) {
	if _, err := ProcessCPU(1 << 30); err == nil {
		t.Error("no error for a process that does not exist")
	}
	// Burn some CPU; /proc sees it at 10 ms resolution.
	deadline := time.Now().Add(50 * time.Millisecond)
	for x := 0; time.Now().Before(deadline); x++ {
		_ = x * x
	}
	if _, err := ProcessCPU(osGetpid()); err != nil {
		t.Fatal(err)
	}
}

func TestParseProm(t *testing.T) {
	in := `# HELP cairn_object_requests_total Object store requests.
# TYPE cairn_object_requests_total counter
cairn_object_requests_total{kind="get"} 12
cairn_object_requests_total{kind="put",x="a b}"} 30
cairn_meta_transactions_total 7.5
cairn_write_buffer_bytes 1e3
cairn_object_request_seconds_bucket{kind="get",le="+Inf"} 12
broken{ 3
novalue
`
	got, err := parseProm(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{MetricObjectReqs: 42, MetricMetaTx: 7.5, "cairn_write_buffer_bytes": 1000,
		"cairn_object_request_seconds_bucket": 12}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	d := diff(map[string]float64{MetricObjectReqs: 40}, got)
	if d[MetricObjectReqs] != 2 || d[MetricMetaTx] != 7.5 {
		t.Errorf("diff %v", d)
	}
}

func TestNames(t *testing.T) {
	for bs, want := range map[int]string{8 << 10: "8K", 128 << 10: "128K", 1 << 20: "1M", 1000: "1000"} {
		if got := sizeName(bs); got != want {
			t.Errorf("sizeName(%d) = %s, want %s", bs, got, want)
		}
	}
	for in, want := range map[string][2]string{
		"127.0.0.1:2049":          {"127.0.0.1:2049", "/"},
		"host:20490/":             {"host:20490", "/"},
		"host:20491/srv/export/x": {"host:20491", "/srv/export/x"},
	} {
		a, e := ParseNFSAddr(in)
		if a != want[0] || e != want[1] {
			t.Errorf("ParseNFSAddr(%q) = %s %s, want %v", in, a, e, want)
		}
	}
}

func TestRowNA(t *testing.T) {
	r := Row(Figures{Workload: "stat", Ops: 3, OpsPerSec: 1.6, MeanLatencyUs: 2.25})
	want := []string{"stat", "3", "2", "—", "2.2", "0.0", "0.0", "n/a", "n/a", "n/a"}
	if strings.Join(r, "|") != strings.Join(want, "|") {
		t.Errorf("row %q, want %q", r, want)
	}
}
