package daemon

// The replication verbs around the engine: status (from the destination's
// state and the running replicator's status file), failover, reverse and
// stop.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/meta"
)

// ReplicaStatusPath is where the replicator of destination destURL
// writes its status file (every second while it runs): a file named by
// a hash of the URL in a directory private to the user, as the control
// sockets are.
func ReplicaStatusPath(destURL string) string {
	sum := sha256.Sum256([]byte(destURL))
	return filepath.Join(os.TempDir(), "cairn-"+strconv.Itoa(os.Getuid()), "replicate-"+hex.EncodeToString(sum[:8])+".json")
}

// RunningReplica is what a running replicator reports in its status file.
type RunningReplica struct {
	PID     int                `json:"pid"`
	Source  string             `json:"source"`
	Dest    string             `json:"dest"`
	Phase   string             `json:"phase"` // idle, first copy, diff, copy, apply, paused: …
	Done    int64              `json:"done"`  // records of the cycle in progress
	Total   int64              `json:"total"` // 0: not known yet
	Cycles  int64              `json:"cycles"`
	Missed  int64              `json:"missed"` // cycles that ended past the bound
	Objects int64              `json:"objects"`
	Bytes   int64              `json:"bytes"`
	Bound   time.Duration      `json:"bound"`
	State   *meta.ReplicaState `json:"state,omitempty"`
	Updated time.Time          `json:"updated"`
}

// Running returns the replicator's current report.
func (r *Replicator) Running() RunningReplica {
	rr := RunningReplica{PID: os.Getpid(), Source: r.src.Loc.Display(), Dest: r.dst.Loc.Display(),
		Phase: r.phase.Load().(string), Done: r.done.Load(), Total: r.total.Load(),
		Cycles: r.cycles.Load(), Missed: r.missed.Load(), Objects: r.objTotal.Load(), Bytes: r.bytesTotal.Load(),
		Bound: r.o.MaxOutOfSync, Updated: time.Now()}
	if st, ok := r.last.Load().(meta.ReplicaState); ok {
		rr.State = &st
	}
	return rr
}

// WriteStatusFile keeps the status file of the replicator up to date
// until ctx ends, then removes it.
func (r *Replicator) WriteStatusFile(ctx context.Context) {
	path := ReplicaStatusPath(r.o.Dest)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		r.log.Warn("replication status file", "err", err)
		return
	}
	defer os.Remove(path)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		js, _ := json.Marshal(r.Running())
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, js, 0o600); err == nil {
			_ = os.Rename(tmp, path)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// ReplicaStatus is the status of a pair, as seen from its destination.
type ReplicaStatus struct {
	Dest    string            `json:"dest"`
	State   meta.ReplicaState `json:"state"`
	Lag     time.Duration     `json:"lag"` // now minus when the replicated snapshot was taken
	Running *RunningReplica   `json:"running,omitempty"`
}

// ReplicaStatusOf reads the status of the pair whose destination is at
// destURL: its state record (or, while a running replicator holds an
// embedded destination, the replicator's last report of it) and the
// running replicator's report, if one runs on this host.
func ReplicaStatusOf(ctx context.Context, destURL string) (ReplicaStatus, error) {
	out := ReplicaStatus{Dest: destURL}
	if js, err := os.ReadFile(ReplicaStatusPath(destURL)); err == nil {
		var rr RunningReplica
		if json.Unmarshal(js, &rr) == nil && processAlive(rr.PID) {
			out.Running = &rr
		}
	}
	v, err := OpenVolume(ctx, VolumeOptions{MetaURL: destURL, ReadOnly: true, Replicator: true})
	switch {
	case err == nil:
		defer v.Close()
		out.Dest = v.Loc.Display()
		st, ok, err := v.Meta.ReplicaState(ctx)
		if err != nil {
			return out, err
		}
		if !ok {
			return out, fmt.Errorf("volume %q is no replication destination", v.Settings.Name)
		}
		out.State = st
	case out.Running != nil && out.Running.State != nil:
		out.State = *out.Running.State // the replicator holds the store
	default:
		return out, err
	}
	if !out.State.Taken.IsZero() {
		out.Lag = time.Since(out.State.Taken)
	}
	return out, nil
}

func processAlive(pid int) bool {
	return pid > 0 && syscall.Kill(pid, 0) == nil
}

// PrintReplicaStatus prints s for people (asJSON: as JSON).
func PrintReplicaStatus(w io.Writer, s ReplicaStatus, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	st := s.State
	state := "destination (read-only)"
	switch {
	case st.Promoted:
		state = "failed over at " + st.PromotedAt.Format(time.RFC3339) + " (writable)"
	case st.Snapshot == "" && st.Copying != "":
		state = "first copy in progress"
	}
	fmt.Fprintf(w, "pair         %s\n", st.Pair)
	fmt.Fprintf(w, "source       %s (%s, uuid %s)\n", st.SourceName, st.Source, st.SourceUUID)
	fmt.Fprintf(w, "destination  %s: %s\n", s.Dest, state)
	if st.Snapshot != "" {
		fmt.Fprintf(w, "replicated   %s, taken %s (%s ago), %d cycles\n", st.Snapshot, st.Taken.Format(time.RFC3339), s.Lag.Round(time.Second), st.Cycles)
		c := st.LastCycle
		fmt.Fprintf(w, "last cycle   %d records (%d inodes), %d objects (%d made by the stores), %s sent, in %s\n", c.Records, c.Files, c.Objects, c.Linked, base.IBytes(uint64(c.Bytes)), c.Duration.Round(time.Millisecond))
	}
	if r := s.Running; r != nil {
		fmt.Fprintf(w, "replicator   pid %d, bound %s, %d cycles run, %d missed the bound; %s", r.PID, r.Bound, r.Cycles, r.Missed, r.Phase)
		if r.Total > 0 {
			fmt.Fprintf(w, " %s", progressBar(r.Done, r.Total))
		} else if r.Done > 0 {
			fmt.Fprintf(w, " (%d records)", r.Done)
		}
		fmt.Fprintln(w)
	} else if !st.Promoted {
		fmt.Fprintln(w, "replicator   not running on this host")
	}
	return nil
}

func progressBar(done, total int64) string {
	const width = 30
	n := int(done * width / max(total, 1))
	bar := make([]byte, width)
	for i := range bar {
		bar[i] = '.'
		if i < n {
			bar[i] = '#'
		}
	}
	return fmt.Sprintf("[%s] %d/%d", bar, done, total)
}

// ReplicaFailover makes the destination at destURL writable at its last
// replicated snapshot, and recounts its quotas' usage.
func ReplicaFailover(ctx context.Context, destURL string, w io.Writer) error {
	if js, err := os.ReadFile(ReplicaStatusPath(destURL)); err == nil {
		var rr RunningReplica
		if json.Unmarshal(js, &rr) == nil && processAlive(rr.PID) {
			return fmt.Errorf("a replicator (pid %d) still runs for this destination: stop it first (cairn replicate stop)", rr.PID)
		}
	}
	v, err := OpenVolume(ctx, VolumeOptions{MetaURL: destURL, Replicator: true})
	if err != nil {
		return err
	}
	defer v.Close()
	st, err := v.Meta.PromoteReplica(ctx, time.Now())
	if err != nil {
		return err
	}
	if _, err := v.Meta.CheckQuotas(ctx, true); err != nil {
		return fmt.Errorf("recounting the quotas after the failover: %w", err)
	}
	_, err = fmt.Fprintf(w, "volume %q is writable, at source snapshot %s taken %s (%s before the failover); 'cairn replicate reverse %s SOURCE-META-URL' replicates it back to the old source\n",
		v.Settings.Name, st.Snapshot, st.Taken.Format(time.RFC3339), st.PromotedAt.Sub(st.Taken).Round(time.Second), v.Loc.Display())
	return err
}

// ReplicaReverse turns a failed-over pair around: the promoted
// destination at newSource becomes the source, and the old source at
// newDest its destination (read-only from now on), holding their last
// common snapshot as the state to go on from. The next cycle sends what
// changed on the new source since then and puts back what changed on the
// old source after it (writes that never replicated).
func ReplicaReverse(ctx context.Context, newSource, newDest string, w io.Writer) error {
	src, err := OpenVolume(ctx, VolumeOptions{MetaURL: newSource, Replicator: true})
	if err != nil {
		return fmt.Errorf("new source: %w", err)
	}
	defer src.Close()
	st, ok, err := src.Meta.ReplicaState(ctx)
	if err != nil {
		return err
	}
	if !ok || !st.Promoted {
		return fmt.Errorf("volume %q is no failed-over destination (run 'cairn replicate failover' on it first)", src.Settings.Name)
	}
	dst, err := OpenVolume(ctx, VolumeOptions{MetaURL: newDest, Replicator: true})
	if err != nil {
		return fmt.Errorf("new destination (the old source): %w", err)
	}
	defer dst.Close()
	if dst.Settings.UUID != st.SourceUUID {
		return fmt.Errorf("volume %q (uuid %s) is not the source of pair %s, volume %q (uuid %s): refused", dst.Settings.Name, dst.Settings.UUID, st.Pair, st.SourceName, st.SourceUUID)
	}
	anchor, err := src.Meta.SnapshotByName(ctx, st.Snapshot)
	if err != nil {
		return fmt.Errorf("the new source's anchor snapshot %s: %w", st.Snapshot, err)
	}
	if _, err := dst.Meta.SnapshotByName(ctx, st.Snapshot); errors.Is(err, base.ErrNotFound) {
		return fmt.Errorf("the old source no longer has snapshot %s, the last one both sides share: a reverse needs it (format the old source again and start a new pair instead)", st.Snapshot)
	} else if err != nil {
		return err
	}
	rst := meta.ReplicaState{Pair: st.Pair, SourceUUID: src.Settings.UUID, SourceName: src.Settings.Name, Source: src.Loc.Display(),
		Snapshot: st.Snapshot, Epoch: anchor.Epoch, Taken: anchor.Created}
	if _, err := dst.Meta.SetReplicaState(ctx, func(s *meta.ReplicaState, ok bool) error {
		if ok && !s.Promoted {
			return fmt.Errorf("volume %q is already the destination of pair %s", dst.Settings.Name, s.Pair)
		}
		*s = rst
		return nil
	}); err != nil {
		return err
	}
	if err := src.Meta.ClearReplicaState(ctx); err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "pair %s reversed: %q now replicates to %q (read-only from now on), from their common snapshot %s\n", st.Pair, src.Settings.Name, dst.Settings.Name, st.Snapshot)
	return err
}

// ReplicaStop stops the replicator of destination destURL running on
// this host (SIGTERM: a cycle in flight is abandoned whole, nothing is
// half-applied) and waits up to timeout for it to exit.
func ReplicaStop(destURL string, timeout time.Duration, w io.Writer) error {
	js, err := os.ReadFile(ReplicaStatusPath(destURL))
	if err != nil {
		return fmt.Errorf("no replicator of this destination runs on this host")
	}
	var rr RunningReplica
	if err := json.Unmarshal(js, &rr); err != nil || !processAlive(rr.PID) {
		return fmt.Errorf("no replicator of this destination runs on this host")
	}
	if err := syscall.Kill(rr.PID, syscall.SIGTERM); err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for processAlive(rr.PID) {
		if time.Now().After(deadline) {
			return fmt.Errorf("replicator pid %d did not exit within %s", rr.PID, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, err = fmt.Fprintf(w, "replicator pid %d stopped; 'cairn replicate resume' starts it again\n", rr.PID)
	return err
}

// ServeReplicaMetrics serves the replicator's metrics on addr (Prometheus
// text at /metrics, the status report as JSON at /status), with the Go
// and process collectors.
func (r *Replicator) ServeReplicaMetrics(addr string) (*MetricsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics %s: %w", addr, err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	gauge := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
	}
	counter := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f))
	}
	state := func() (meta.ReplicaState, bool) {
		st, ok := r.last.Load().(meta.ReplicaState)
		return st, ok
	}
	gauge("cairn_replica_lag_seconds", "Age of the source snapshot the destination holds.", func() float64 {
		if st, ok := state(); ok && !st.Taken.IsZero() {
			return time.Since(st.Taken).Seconds()
		}
		return math.NaN()
	})
	gauge("cairn_replica_bound_seconds", "The pair's --max-out-of-sync.", func() float64 { return r.o.MaxOutOfSync.Seconds() })
	gauge("cairn_replica_last_cycle_seconds", "Duration of the last finished cycle.", func() float64 {
		st, _ := state()
		return st.LastCycle.Duration.Seconds()
	})
	gauge("cairn_replica_cycle_done", "Records of the cycle in progress handled so far.", func() float64 { return float64(r.done.Load()) })
	gauge("cairn_replica_cycle_total", "Records of the cycle in progress (0: not known yet).", func() float64 { return float64(r.total.Load()) })
	counter("cairn_replica_cycles_total", "Cycles finished by this process.", func() float64 { return float64(r.cycles.Load()) })
	counter("cairn_replica_bound_missed_total", "Cycles that finished with the destination older than the bound.", func() float64 { return float64(r.missed.Load()) })
	counter("cairn_replica_objects_total", "Block objects copied.", func() float64 { return float64(r.objTotal.Load()) })
	counter("cairn_replica_bytes_total", "Bytes of block objects copied.", func() float64 { return float64(r.bytesTotal.Load()) })
	counter("cairn_replica_objects_linked_total", "Block objects the stores made themselves (hard link, server-side copy).", func() float64 { return float64(r.linked.Load()) })
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(r.Running())
	})
	return serveHTTP(ln, mux, r.log), nil
}
