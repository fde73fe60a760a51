package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairnfs/cairn/internal/daemon"
	"github.com/cairnfs/cairn/internal/metrics"
	"github.com/cairnfs/cairn/internal/object/counted"
)

// mountOf returns the Cairn mount point that holds path, and its source.
func mountOf(path string) (mp, src string, err error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", "", err
	}
	mounts, err := daemon.Mounts()
	if err != nil {
		return "", "", err
	}
	if mp, src = innermostMount(mounts, abs); mp == "" {
		return "", "", fmt.Errorf("%s is not inside a mounted Cairn volume", path)
	}
	return mp, src, nil
}

// innermostMount returns the innermost of the Cairn mounts that holds the
// absolute path abs, and its source ("" if none does).
func innermostMount(mounts []daemon.MountInfo, abs string) (mp, src string) {
	best := -1
	for _, m := range mounts {
		if m.FsType != "fuse.cairn" {
			continue
		}
		if abs == m.MountPoint || strings.HasPrefix(abs, strings.TrimSuffix(m.MountPoint, "/")+"/") {
			if len(m.MountPoint) > best {
				best, mp, src = len(m.MountPoint), m.MountPoint, m.Source
			}
		}
	}
	return mp, src
}

// callMount sends req to the process serving mount point mp: through the
// mount's own socket, or else (another user's embedded mount) through the
// volume's control socket.
func callMount(mp, src string, req daemon.Request, w io.Writer) error {
	err := daemon.CallSocket(daemon.MountSocketPath(mp), req, w)
	if err == nil || !isDialError(err) {
		return err
	}
	if loc, lerr := daemon.ParseMetaURL(src); lerr == nil && !loc.Shared() {
		if h, herr := daemon.QueryHolder(loc); herr == nil && h.MountPoint == mp {
			return daemon.CallControl(loc, req, w)
		}
	}
	return fmt.Errorf("cannot reach the mount process of %s through %s (was it mounted by another user, or by an older cairn?): %w", mp, daemon.MountSocketPath(mp), err)
}

func isDialError(err error) bool {
	var op *os.SyscallError
	return errors.As(err, &op) || errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)
}

func fetchStats(mp, src string) (daemon.Stats, error) {
	var out bytes.Buffer
	if err := callMount(mp, src, daemon.Request{Verb: "stats"}, &out); err != nil {
		return daemon.Stats{}, err
	}
	var s daemon.Stats
	if err := json.Unmarshal(out.Bytes(), &s); err != nil {
		return s, fmt.Errorf("stats from %s: %w", mp, err)
	}
	return s, nil
}

// TierRates are one tier's figures over an interval.
type TierRates struct {
	Hits     int64   `json:"hits"`
	Misses   int64   `json:"misses"`
	HitRatio float64 `json:"hit_ratio"` // hits / (hits+misses); 0 without lookups
	MBps     float64 `json:"mb_s"`      // served, 10^6 bytes per second
	MeanUs   float64 `json:"mean_us,omitempty"`
	P99Us    float64 `json:"p99_us,omitempty"`
}

// IntervalStats is one line of cairn stats --json.
type IntervalStats struct {
	Time       time.Time          `json:"time"`
	Seconds    float64            `json:"seconds"`
	Memory     TierRates          `json:"memory"`
	Disk       *TierRates         `json:"disk,omitempty"`
	ObjectReqs map[string]float64 `json:"object_requests_s"` // by kind, per second
	ObjectInMB float64            `json:"object_in_mb_s"`    // received (gets)
	ObjectOut  float64            `json:"object_out_mb_s"`   // sent (puts)
	ReadMBps   float64            `json:"read_mb_s"`         // returned to readers
	Meta       MetaRates          `json:"meta"`
	WriteBack  *WriteBackRates    `json:"write_back,omitempty"` // shared mounts writing back
	FUSE       FUSERates          `json:"fuse"`
	Totals     daemon.Stats       `json:"totals"` // cumulative since mount
}

// MetaRates are the metadata engine's figures over an interval: its
// transactions (all kinds and outcomes) and their retries per second, and
// their mean latency.
type MetaRates struct {
	TxPerSec      float64 `json:"tx_s"`
	RetriesPerSec float64 `json:"retries_s"`
	MeanUs        float64 `json:"mean_us"`
	// Shared engines: changes queued in the store on contended
	// directories per second, and the directories contended now.
	QueuedPerSec float64 `json:"queued_s,omitempty"`
	Contended    int64   `json:"contended_dirs,omitempty"`
}

// WriteBackRates are the write-back log's figures over an interval
// (design 0011): changes acknowledged before their commit, and batches
// committed, per second; changes waiting now; directory leases this
// mount gave back (recalled by other clients, or idle) per second.
type WriteBackRates struct {
	Pending        int64   `json:"pending"`
	ChangesPerSec  float64 `json:"changes_s"`
	BatchesPerSec  float64 `json:"batches_s"`
	ReleasesPerSec float64 `json:"leases_given_back_s"`
}

// FUSERates are the FUSE requests of an interval: all kinds per second,
// their mean service time, and the three most frequent kinds per second.
type FUSERates struct {
	ReqPerSec float64            `json:"req_s"`
	MeanUs    float64            `json:"mean_us"`
	Top       map[string]float64 `json:"top,omitempty"`
}

func fuseRates(cur, prev daemon.Stats, secs float64) FUSERates {
	before := map[string]metrics.HistogramSnapshot{}
	for _, o := range prev.FUSE {
		before[o.Op] = o.Latency
	}
	var all metrics.HistogramSnapshot
	type kind struct {
		op string
		n  int64
	}
	var kinds []kind
	for _, o := range cur.FUSE {
		h := o.Latency.Sub(before[o.Op])
		all = all.Add(h)
		if h.Count > 0 {
			kinds = append(kinds, kind{o.Op, h.Count})
		}
	}
	r := FUSERates{ReqPerSec: float64(all.Count) / secs, MeanUs: float64(all.Mean()) / 1e3}
	sort.Slice(kinds, func(i, j int) bool { return kinds[i].n > kinds[j].n })
	for i, k := range kinds {
		if i == 3 {
			break
		}
		if r.Top == nil {
			r.Top = map[string]float64{}
		}
		r.Top[k.op] = float64(k.n) / secs
	}
	return r
}

func metaRates(cur, prev daemon.Stats, secs float64) MetaRates {
	c, p := cur.Meta.Total(), prev.Meta.Total()
	r := MetaRates{
		TxPerSec:      float64(c.Transactions-p.Transactions) / secs,
		RetriesPerSec: float64(c.Retries-p.Retries) / secs,
		MeanUs:        float64(c.Latency.Sub(p.Latency).Mean()) / 1e3,
	}
	if cur.Contention != nil && prev.Contention != nil {
		r.QueuedPerSec = float64(cur.Contention.Queued-prev.Contention.Queued) / secs
		r.Contended = cur.Contention.Directories
	}
	return r
}

func tierRates(cur, prev daemon.TierStats, secs float64) TierRates {
	r := TierRates{Hits: cur.Hits - prev.Hits, Misses: cur.Misses - prev.Misses, MBps: float64(cur.HitBytes-prev.HitBytes) / 1e6 / secs}
	if n := r.Hits + r.Misses; n > 0 {
		r.HitRatio = float64(r.Hits) / float64(n)
	}
	if cur.Latency != nil && prev.Latency != nil {
		h := cur.Latency.Sub(*prev.Latency)
		r.MeanUs = float64(h.Mean().Microseconds())
		r.P99Us = float64(h.Quantile(0.99).Microseconds())
	}
	return r
}

func interval(cur, prev daemon.Stats) IntervalStats {
	secs := max(cur.Time.Sub(prev.Time).Seconds(), 1e-9)
	is := IntervalStats{
		Time: cur.Time, Seconds: secs, Memory: tierRates(cur.Memory, prev.Memory, secs),
		ObjectReqs: map[string]float64{}, Totals: cur,
		ReadMBps: float64(cur.Chunk.BytesRead-prev.Chunk.BytesRead) / 1e6 / secs,
		Meta:     metaRates(cur, prev, secs),
		FUSE:     fuseRates(cur, prev, secs),
	}
	if cur.Disk != nil && prev.Disk != nil {
		r := tierRates(*cur.Disk, *prev.Disk, secs)
		is.Disk = &r
	}
	if c, p := cur.WB, prev.WB; c != nil && p != nil {
		is.WriteBack = &WriteBackRates{Pending: c.Pending,
			ChangesPerSec: float64(c.Changes-p.Changes) / secs, BatchesPerSec: float64(c.Batches-p.Batches) / secs}
		if cur.Leases != nil && prev.Leases != nil {
			is.WriteBack.ReleasesPerSec = float64(cur.Leases.Released-prev.Leases.Released) / secs
		}
	}
	for _, k := range counted.Kinds() {
		c, p := cur.Object[k.String()], prev.Object[k.String()]
		is.ObjectReqs[k.String()] = float64(c.Requests-p.Requests) / secs
		mb := float64(c.Bytes-p.Bytes) / 1e6 / secs
		if k == counted.Put {
			is.ObjectOut += mb
		} else {
			is.ObjectInMB += mb
		}
	}
	return is
}

const statsHeader = "time     |  fuse req/s  mean ms |  memory hit  miss  ratio   MB/s |    disk hit  miss  ratio   MB/s  p99ms |  object get  rget   put   del  list  in MB/s out MB/s |  meta tx/s retry/s  mean ms"

func (is IntervalStats) line() string {
	tier := func(r *TierRates) string {
		if r == nil {
			return fmt.Sprintf("%10s %5s %6s %6s", "-", "-", "-", "-")
		}
		return fmt.Sprintf("%10d %5d %5.1f%% %6.1f", r.Hits, r.Misses, 100*r.HitRatio, r.MBps)
	}
	p99 := "     -"
	if is.Disk != nil {
		p99 = fmt.Sprintf("%6.2f", is.Disk.P99Us/1000)
	}
	o := is.ObjectReqs
	m := is.Meta
	line := fmt.Sprintf("%s | %11.0f %8.3f | %s | %s %s | %10.0f %5.0f %5.0f %5.0f %5.0f %8.1f %8.1f | %10.0f %7.0f %8.3f",
		is.Time.Format("15:04:05"), is.FUSE.ReqPerSec, is.FUSE.MeanUs/1000, tier(&is.Memory), tier(is.Disk), p99,
		o["get"], o["range_get"], o["put"], o["delete"], o["list"], is.ObjectInMB, is.ObjectOut,
		m.TxPerSec, m.RetriesPerSec, m.MeanUs/1000)
	if wb := is.WriteBack; wb != nil {
		line += fmt.Sprintf(" | %7d %9.0f %9.1f %9.1f", wb.Pending, wb.ChangesPerSec, wb.BatchesPerSec, wb.ReleasesPerSec)
	}
	return line
}

// writeBackHeader extends statsHeader on mounts writing back.
const writeBackHeader = " | wb pend changes/s batches/s  leases/s"

func newStatsCommand() *cobra.Command {
	var (
		count  int
		every  time.Duration
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "stats [--count N] [--interval D] [--json] MOUNTPOINT",
		Short: "Show live cache, object-store and metadata statistics of a mount, like iostat",
		Long: `Print, once per interval, what the mount at MOUNTPOINT did in that interval:
the FUSE requests it served per second and their mean service time in
milliseconds (by kind in --json); for the memory and the disk cache tiers,
lookups that hit and missed, the
hit ratio and the MB/s they served (and the disk tier's p99 hit latency);
for the object store, requests per second by kind and MB/s in and out; for
the metadata engine, transactions per second (read-only views and updates
together), the retries of conflicting ones per second, and their mean
latency in milliseconds (in --json on a shared mount also the changes
queued per second on directories other clients change at the same time,
and how many such directories there are); on a shared mount writing back (mount
--meta-write-back), the changes waiting in its log, the changes acknowledged
and the batches committed per second, and the directory leases it gave
back per second (recalled by other clients, or idle).

--json prints one JSON object per interval instead, with the same figures
and the mount's cumulative counters ("totals"). The same counters are
served in the Prometheus text format by 'cairn mount --metrics ADDR' (and
'cairn gateway nfs --metrics ADDR').`,
		Example: "  cairn stats /mnt/cairn\n  cairn stats --count 5 --interval 2s --json /mnt/cairn",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if every <= 0 {
				return fmt.Errorf("--interval %v: want a positive duration", every)
			}
			mp, src, err := mountOf(args[0])
			if err != nil {
				return err
			}
			prev, err := fetchStats(mp, src)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			enc := json.NewEncoder(w)
			for i := 0; count <= 0 || i < count; i++ {
				select {
				case <-time.After(every):
				case <-cmd.Context().Done():
					return nil
				}
				cur, err := fetchStats(mp, src)
				if err != nil {
					return err
				}
				is := interval(cur, prev)
				prev = cur
				if asJSON {
					if err := enc.Encode(is); err != nil {
						return err
					}
					continue
				}
				if i%20 == 0 {
					if is.WriteBack != nil {
						fmt.Fprintln(w, statsHeader+writeBackHeader)
					} else {
						fmt.Fprintln(w, statsHeader)
					}
				}
				fmt.Fprintln(w, is.line())
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&count, "count", 0, "print this many intervals, then exit (default: until interrupted)")
	f.DurationVar(&every, "interval", time.Second, "length of one interval")
	f.BoolVar(&asJSON, "json", false, "print one JSON object per interval")
	return cmd
}

func newWarmupCommand() *cobra.Command {
	var quiet bool
	cmd := &cobra.Command{
		Use:   "warmup [--quiet] PATH...",
		Short: "Fill the disk cache with the blocks of files and directory trees",
		Long: `Read the blocks of the given files, and of every file under the given
directories, into the disk cache of the mount that holds them (mounted with
--cache-dir), so that later reads are served locally.

The blocks are read by the mount process itself (asked through its socket),
not through the mount: they do not pass through, or evict anything from,
the kernel's page cache or the memory block cache. Blocks already in the
disk cache are not fetched again. Shows a progress bar on a terminal and a
summary at the end.`,
		Example: "  cairn warmup /mnt/cairn/db\n  cairn warmup /mnt/cairn/a.dat /mnt/cairn/b.dat",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			type target struct {
				mp, src string
				inos    []string
				bytes   int64
			}
			var targets []*target
			byMount := map[string]*target{}
			seen := map[uint64]bool{}
			for _, p := range args {
				mp, src, err := mountOf(p)
				if err != nil {
					return err
				}
				tg := byMount[mp]
				if tg == nil {
					tg = &target{mp: mp, src: src}
					byMount[mp] = tg
					targets = append(targets, tg)
				}
				err = filepath.WalkDir(p, func(path string, de fs.DirEntry, err error) error {
					if err != nil {
						return err
					}
					if de.IsDir() && de.Name() == ".snapshots" && filepath.Dir(path) == mp {
						return filepath.SkipDir
					}
					if !de.Type().IsRegular() {
						return nil
					}
					fi, err := de.Info()
					if err != nil {
						return err
					}
					st := fi.Sys().(*syscall.Stat_t)
					if !seen[st.Ino] {
						seen[st.Ino] = true
						tg.inos = append(tg.inos, strconv.FormatUint(st.Ino, 10))
						tg.bytes += fi.Size()
					}
					return nil
				})
				if err != nil {
					return err
				}
			}
			bar := &progressBar{w: cmd.ErrOrStderr(), quiet: quiet || !isTerminal(cmd.ErrOrStderr())}
			var total daemon.WarmupProgress
			start := time.Now()
			var errs []error
			for _, tg := range targets {
				bar.files, bar.bytes, bar.start = int64(len(tg.inos)), tg.bytes, time.Now()
				const batch = 5000
				for i := 0; i < len(tg.inos); i += batch {
					bar.base = total
					pw := &progressWriter{fn: func(p daemon.WarmupProgress) {
						if p.Done {
							total.Files += p.Files
							total.Bytes += p.Bytes
							total.Fetched += p.Fetched
							total.Errors += p.Errors
							if p.Error != "" {
								errs = append(errs, errors.New(p.Error))
							}
						}
						bar.draw(p)
					}}
					req := daemon.Request{Verb: "warmup", Args: tg.inos[i:min(i+batch, len(tg.inos))]}
					if err := callMount(tg.mp, tg.src, req, pw); err != nil {
						bar.clear()
						return err
					}
				}
			}
			bar.clear()
			d := time.Since(start)
			fmt.Fprintf(cmd.OutOrStdout(), "warmed %d files, %s in %s (%.1f MB/s): %s fetched from the object store, %s already cached\n",
				total.Files, mib(total.Bytes), d.Round(time.Millisecond), float64(total.Bytes)/1e6/max(d.Seconds(), 1e-9),
				mib(total.Fetched), mib(total.Bytes-total.Fetched))
			if total.Errors > 0 {
				return fmt.Errorf("%d files could not be warmed; first error: %w", total.Errors, errors.Join(errs...))
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress bar")
	return cmd
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progressWriter parses the warmup verb's JSON lines.
type progressWriter struct {
	buf []byte
	fn  func(daemon.WarmupProgress)
}

func (p *progressWriter) Write(b []byte) (int, error) {
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			return len(b), nil
		}
		var wp daemon.WarmupProgress
		if err := json.Unmarshal(p.buf[:i], &wp); err == nil {
			p.fn(wp)
		}
		p.buf = p.buf[i+1:]
	}
}

// progressBar draws one line: bar, files, bytes and rate.
type progressBar struct {
	w            io.Writer
	quiet        bool
	files, bytes int64
	base         daemon.WarmupProgress // batches done before this one
	start        time.Time
}

func (b *progressBar) draw(p daemon.WarmupProgress) {
	if b.quiet {
		return
	}
	files, done := b.base.Files+p.Files, b.base.Bytes+p.Bytes
	frac := 1.0
	if b.bytes > 0 {
		frac = min(float64(done)/float64(b.bytes), 1)
	}
	const width = 30
	n := int(frac * width)
	rate := float64(done) / 1e6 / max(time.Since(b.start).Seconds(), 1e-9)
	fmt.Fprintf(b.w, "\r[%s%s] %d/%d files  %s/%s  %.1f MB/s ", strings.Repeat("#", n), strings.Repeat(".", width-n),
		files, b.files, mib(done), mib(b.bytes), rate)
}

func (b *progressBar) clear() {
	if !b.quiet {
		fmt.Fprint(b.w, "\r\033[K")
	}
}
