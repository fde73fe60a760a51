package bench

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Metric names read from a Cairn server's /metrics endpoint. Each is
// summed over its labels. A name the server does not export leaves the
// figure "n/a".
const (
	MetricMetaTx     = "cairn_meta_transactions_total"
	MetricObjectReqs = "cairn_object_requests_total"
)

// Sample is what one workload measured: the client operations, their
// latencies, and the counters read before and after (as differences).
type Sample struct {
	Workload  string
	Ops       int64
	Bytes     int64     // data moved (sequential workloads), else 0
	Start     time.Time // when the first operation began (zero: unknown)
	Elapsed   time.Duration
	Latencies []time.Duration // one per op; sorted in place by Compute
	ClientCPU time.Duration
	// ServerCPU is valid only when ServerKnown.
	ServerCPU   time.Duration
	ServerKnown bool
	// Backend holds, per metric name, how much the server's counter grew;
	// nil when no metrics endpoint was read.
	Backend map[string]float64
}

// Figures are the five figures of one workload (and what they come from).
// Pointer fields are nil when not measured ("n/a").
type Figures struct {
	Workload string  `json:"workload"`
	Ops      int64   `json:"ops"`
	Bytes    int64   `json:"bytes,omitempty"`
	Seconds  float64 `json:"seconds"`
	// Start and End are Unix times in seconds, so that runs on several
	// clients at once can be put on one time line (0: unknown).
	Start         float64  `json:"start,omitempty"`
	End           float64  `json:"end,omitempty"`
	OpsPerSec     float64  `json:"ops_per_sec"`
	MBPerSec      *float64 `json:"mb_per_sec,omitempty"` // 10^6 bytes/s, sequential workloads
	MeanLatencyUs float64  `json:"mean_latency_us"`
	P99LatencyUs  float64  `json:"p99_latency_us"`
	ClientUsPerOp float64  `json:"client_us_per_op"`
	ServerUsPerOp *float64 `json:"server_us_per_op"`
	MetaTxPerOp   *float64 `json:"meta_tx_per_op"`
	ObjReqPerOp   *float64 `json:"object_requests_per_op"`
}

// Compute turns a sample into figures. Latencies are sorted in place.
func Compute(s Sample) Figures {
	f := Figures{Workload: s.Workload, Ops: s.Ops, Bytes: s.Bytes, Seconds: s.Elapsed.Seconds()}
	if !s.Start.IsZero() {
		f.Start = float64(s.Start.UnixNano()) / 1e9
		f.End = float64(s.Start.Add(s.Elapsed).UnixNano()) / 1e9
	}
	if s.Elapsed > 0 {
		f.OpsPerSec = float64(s.Ops) / s.Elapsed.Seconds()
		if s.Bytes > 0 {
			mb := float64(s.Bytes) / 1e6 / s.Elapsed.Seconds()
			f.MBPerSec = &mb
		}
	}
	f.MeanLatencyUs, f.P99LatencyUs = latency(s.Latencies)
	if s.Ops <= 0 {
		return f
	}
	ops := float64(s.Ops)
	f.ClientUsPerOp = us(s.ClientCPU) / ops
	if s.ServerKnown {
		v := us(s.ServerCPU) / ops
		f.ServerUsPerOp = &v
	}
	if s.Backend != nil {
		if d, ok := s.Backend[MetricMetaTx]; ok {
			v := d / ops
			f.MetaTxPerOp = &v
		}
		if d, ok := s.Backend[MetricObjectReqs]; ok {
			v := d / ops
			f.ObjReqPerOp = &v
		}
	}
	return f
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// latency returns the mean and the 99th percentile (nearest rank) in µs,
// sorting ls.
func latency(ls []time.Duration) (mean, p99 float64) {
	if len(ls) == 0 {
		return 0, 0
	}
	slices.Sort(ls)
	var sum time.Duration
	for _, l := range ls {
		sum += l
	}
	rank := int(math.Ceil(0.99*float64(len(ls)))) - 1
	return us(sum) / float64(len(ls)), us(ls[max(rank, 0)])
}

// ClientCPU returns the CPU time (user + system) this process has used.
func ClientCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// clockTick is USER_HZ, the unit of /proc/PID/stat times: 100 on every
// Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

// ProcessCPU returns the CPU time (utime + stime, all threads) of process
// pid from /proc/PID/stat, at a resolution of 10 ms.
func ProcessCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseProcStat(string(b))
}

// parseProcStat reads utime and stime (fields 14 and 15) from the text of
// /proc/PID/stat; the command name (field 2) may hold spaces and
// parentheses, so fields are counted after its last ')'.
func parseProcStat(s string) (time.Duration, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("proc stat: no command name")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("proc stat: %d fields after the command name", len(f))
	}
	var ticks int64
	for _, x := range f[11:13] {
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("proc stat: %w", err)
		}
		ticks += n
	}
	return time.Duration(ticks) * clockTick, nil
}

// ScrapeMetrics fetches a Prometheus text endpoint and returns every
// sample summed per metric name (over labels).
func ScrapeMetrics(client *http.Client, url string) (map[string]float64, error) {
	resp, err := client.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return parseProm(resp.Body)
}

// parseProm sums the samples of a Prometheus text exposition per metric
// name. Comments, and lines that do not parse, are skipped.
func parseProm(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest := line, ""
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name, rest = line[:i], line[i:]
		}
		if strings.HasPrefix(rest, "{") {
			j := strings.LastIndexByte(rest, '}')
			if j < 0 {
				continue
			}
			rest = rest[j+1:]
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		out[name] += v
	}
	return out, sc.Err()
}

// diff returns after - before for every name in after.
func diff(before, after map[string]float64) map[string]float64 {
	out := make(map[string]float64, len(after))
	for k, v := range after {
		out[k] = v - before[k]
	}
	return out
}
