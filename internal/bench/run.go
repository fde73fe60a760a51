package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Workload names.
const (
	SeqWrite = "seq-write"
	SeqRead  = "seq-read"
	Create   = "create"
	Stat     = "stat"
	Unlink   = "unlink"
	// Append extends a file of its own with AppendRecord-sized records,
	// opened for appending, to FileSize bytes, then fsyncs it: the
	// extending writes of a cluster file system's scaling study.
	Append = "append"
)

// AllWorkloads are the workloads in the order they run.
var AllWorkloads = []string{Append, SeqWrite, SeqRead, Create, Stat, Unlink}

// DefaultWorkloads run when Options.Workloads is empty.
var DefaultWorkloads = []string{SeqWrite, SeqRead, Create, Stat, Unlink}

// DefaultAppendRecord is the record size of the append workload.
const DefaultAppendRecord = 1 << 20

// Options say what to run and where the server's counters are.
type Options struct {
	// Workloads to run, a subset of AllWorkloads (default all); they
	// run in AllWorkloads order whatever the order given.
	Workloads []string
	// BlockSizes of the sequential workloads, in bytes (default 8K, 32K,
	// 128K): each runs once per size, seq-write then seq-read.
	BlockSizes []int
	// FileSize of the sequential workloads (default 256 MiB).
	FileSize int64
	// AppendRecord is the size of each write of the append workload
	// (default DefaultAppendRecord, at most 16 MiB).
	AppendRecord int
	// Files is how many files create, stat and unlink work on in all
	// (default 2000), split evenly over Procs workers, each in a
	// directory of its own (default 4 workers).
	Files, Procs int
	// SharedDir, if set, is a directory (relative to the target's root,
	// made if missing and never removed) where every worker of the
	// metadata workloads makes its files instead of a directory of its
	// own, under names unique to this run: several runs at once, from
	// several clients, then create and stat in one directory.
	SharedDir string
	// SeqFile, if set, is the file of the sequential workloads (relative
	// to the target's root), instead of one in the run's directory, and
	// it is kept at the end: a later run can read it back alone (seq-read
	// without seq-write reads the file if it has FileSize bytes, else
	// writes it first), so that many clients' reads can begin together.
	SeqFile string
	// StartAt, if not zero, is when the first workload starts: runs
	// started on several clients at about the same time wait for it, so
	// that their workloads overlap from their first operation.
	StartAt time.Time
	// ServerPID, if not zero, is the server process whose CPU time is
	// read from /proc before and after each workload.
	ServerPID int
	// MetricsURL, if set, is a Prometheus endpoint of the server (a
	// Cairn mount's --metrics) read before and after each workload.
	MetricsURL string
	// BeforeRead, if set, runs before each seq-read (outside the
	// measurement), e.g. DropPageCache.
	BeforeRead func() error
	// Progress, if set, gets one line per workload as it ends.
	Progress io.Writer
}

func (o *Options) setDefaults() {
	if len(o.Workloads) == 0 {
		o.Workloads = DefaultWorkloads
	}
	if o.AppendRecord == 0 {
		o.AppendRecord = DefaultAppendRecord
	}
	if len(o.BlockSizes) == 0 {
		o.BlockSizes = []int{8 << 10, 32 << 10, 128 << 10}
	}
	if o.FileSize == 0 {
		o.FileSize = 256 << 20
	}
	if o.Files == 0 {
		o.Files = 2000
	}
	if o.Procs == 0 {
		o.Procs = 4
	}
}

// Validate fills in defaults and checks the options.
func (o *Options) Validate() error {
	o.setDefaults()
	for _, w := range o.Workloads {
		if !has(AllWorkloads, w) {
			return fmt.Errorf("unknown workload %q (want %s)", w, strings.Join(AllWorkloads, ", "))
		}
	}
	for _, bs := range o.BlockSizes {
		if bs <= 0 || bs > 1<<20 {
			return fmt.Errorf("block size %d: want 1 byte to 1 MiB", bs)
		}
	}
	if o.AppendRecord < 0 || o.AppendRecord > 16<<20 {
		return fmt.Errorf("append record %d: want 1 byte to 16 MiB", o.AppendRecord)
	}
	if strings.Contains("/"+o.SeqFile+"/", "/../") || (o.SeqFile != "" && strings.Trim(o.SeqFile, "/") == "") {
		return fmt.Errorf("sequential file %q: want a file below the target's root", o.SeqFile)
	}
	if strings.HasPrefix(o.SharedDir, "/") || strings.Contains("/"+o.SharedDir+"/", "/../") {
		return fmt.Errorf("shared directory %q: want a path below the target's root", o.SharedDir)
	}
	if o.FileSize < 0 || o.Files < 0 || o.Procs < 0 {
		return errors.New("sizes and counts must be positive")
	}
	if o.Procs > o.Files {
		o.Procs = o.Files
	}
	return nil
}

func has(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Report is one run's results.
type Report struct {
	Target    string    `json:"target"`
	Started   time.Time `json:"started"`
	FileSize  int64     `json:"file_size"`
	Files     int       `json:"files"`
	Procs     int       `json:"procs"`
	SharedDir string    `json:"shared_dir,omitempty"`
	ServerPID int       `json:"server_pid,omitempty"`
	Metrics   string    `json:"server_metrics,omitempty"`
	Results   []Figures `json:"results"`
}

// Run runs the workloads against t in a directory of its own under t's
// root, which it removes at the end.
func Run(ctx context.Context, t Target, o Options) (*Report, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	r := &runner{t: t, o: o, http: &http.Client{Timeout: 10 * time.Second}}
	rep := &Report{Target: t.Describe(), Started: time.Now(), FileSize: o.FileSize,
		Files: o.Files, Procs: o.Procs, SharedDir: o.SharedDir, ServerPID: o.ServerPID, Metrics: o.MetricsURL}
	main, err := t.Conn()
	if err != nil {
		return nil, err
	}
	defer main.Close()
	r.base = fmt.Sprintf("cairn-bench-%d-%d", os.Getpid(), time.Now().UnixNano()%1e9)
	if err := main.Mkdir(r.base); err != nil {
		return nil, fmt.Errorf("mkdir %s: %w", r.base, err)
	}
	if d := path.Dir(strings.Trim(o.SeqFile, "/")); o.SeqFile != "" && d != "." {
		// Made before the start: clients started together should not
		// meet in a directory they all create in while they are timed.
		if err := mkdirAll(main, d); err != nil {
			return nil, err
		}
	}
	if !o.StartAt.IsZero() {
		select {
		case <-time.After(time.Until(o.StartAt)):
		case <-ctx.Done():
		}
	}
	runErr := r.run(ctx, main, rep)
	if err := r.cleanup(main); err != nil && runErr == nil {
		runErr = fmt.Errorf("cleanup: %w", err)
	}
	return rep, runErr
}

type runner struct {
	t       Target
	o       Options
	http    *http.Client
	base    string
	seqFile string
	appFile string
	workers []Conn
	made    []int // files each worker has made and not removed
}

func (r *runner) run(ctx context.Context, main Conn, rep *Report) error {
	want := func(w string) bool { return has(r.o.Workloads, w) }
	if want(Append) {
		r.appFile = r.base + "/append.dat"
		f, err := r.measure(fmt.Sprintf("%s-%s", Append, sizeName(r.o.AppendRecord)), r.o.FileSize, func() (int64, []time.Duration, error) {
			return appendFile(main, r.appFile, r.o.AppendRecord, r.o.FileSize)
		})
		if err != nil {
			return err
		}
		r.add(rep, f)
	}
	if want(SeqWrite) || want(SeqRead) {
		r.seqFile = r.base + "/seq.dat"
		if r.o.SeqFile != "" {
			r.seqFile = strings.Trim(r.o.SeqFile, "/")
		}
		for _, bs := range r.o.BlockSizes {
			if err := ctx.Err(); err != nil {
				return err
			}
			if want(SeqWrite) || !r.fileReady(main) {
				f, err := r.measure(fmt.Sprintf("%s-%s", SeqWrite, sizeName(bs)), r.o.FileSize, func() (int64, []time.Duration, error) {
					return seqWrite(main, r.seqFile, bs, r.o.FileSize)
				})
				if err != nil {
					return err
				}
				if want(SeqWrite) {
					r.add(rep, f)
				}
			}
			if want(SeqRead) {
				if r.o.BeforeRead != nil {
					if err := r.o.BeforeRead(); err != nil {
						return err
					}
				}
				f, err := r.measure(fmt.Sprintf("%s-%s", SeqRead, sizeName(bs)), r.o.FileSize, func() (int64, []time.Duration, error) {
					return seqRead(main, r.seqFile, bs, r.o.FileSize)
				})
				if err != nil {
					return err
				}
				r.add(rep, f)
			}
		}
	}
	if !want(Create) && !want(Stat) && !want(Unlink) || r.o.Files == 0 {
		return nil
	}
	if err := r.setupWorkers(); err != nil {
		return err
	}
	for _, w := range []string{Create, Stat, Unlink} {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !want(w) && !(w == Create && (want(Stat) || want(Unlink))) {
			continue // stat and unlink need the files
		}
		f, err := r.measure(w, 0, func() (int64, []time.Duration, error) { return r.meta(w) })
		if err != nil {
			return err
		}
		if want(w) {
			r.add(rep, f)
		}
	}
	return nil
}

func (r *runner) add(rep *Report, f Figures) {
	rep.Results = append(rep.Results, f)
	if r.o.Progress != nil {
		fmt.Fprintf(r.o.Progress, "%-16s %8d ops %10.0f ops/s %9.1f µs mean\n", f.Workload, f.Ops, f.OpsPerSec, f.MeanLatencyUs)
	}
}

// fileReady tells whether the sequential file has been written whole.
func (r *runner) fileReady(c Conn) bool {
	n, err := c.Stat(r.seqFile)
	return err == nil && n == r.o.FileSize
}

// measure runs fn between two readings of the counters.
func (r *runner) measure(name string, bytes int64, fn func() (int64, []time.Duration, error)) (Figures, error) {
	var before map[string]float64
	if r.o.MetricsURL != "" {
		before, _ = ScrapeMetrics(r.http, r.o.MetricsURL)
	}
	sb, serr := r.serverCPU()
	cb := ClientCPU()
	t0 := time.Now()
	ops, lats, err := fn()
	elapsed := time.Since(t0)
	ca := ClientCPU()
	sa, serr2 := r.serverCPU()
	if err != nil {
		return Figures{}, fmt.Errorf("%s: %w", name, err)
	}
	s := Sample{Workload: name, Ops: ops, Bytes: bytes, Start: t0, Elapsed: elapsed, Latencies: lats, ClientCPU: ca - cb}
	if r.o.ServerPID != 0 && serr == nil && serr2 == nil {
		s.ServerCPU, s.ServerKnown = sa-sb, true
	}
	if before != nil {
		if after, err := ScrapeMetrics(r.http, r.o.MetricsURL); err == nil {
			s.Backend = diff(before, after)
		}
	}
	return Compute(s), nil
}

func (r *runner) serverCPU() (time.Duration, error) {
	if r.o.ServerPID == 0 {
		return 0, nil
	}
	return ProcessCPU(r.o.ServerPID)
}

func sizeName(bs int) string {
	switch {
	case bs%(1<<20) == 0:
		return fmt.Sprintf("%dM", bs>>20)
	case bs%(1<<10) == 0:
		return fmt.Sprintf("%dK", bs>>10)
	}
	return fmt.Sprint(bs)
}

// pattern fills b with bytes that no layer can compress or skip as zeros.
func pattern(b []byte) {
	x := uint32(2463534242)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
}

// timed collects per-call latencies, or the ones the writer or reader
// timed itself.
func timedLats(own []time.Duration, x any) []time.Duration {
	if lr, ok := x.(latencyReporter); ok {
		if l := lr.Latencies(); l != nil {
			return l
		}
	}
	return own
}

func seqWrite(c Conn, path string, bs int, size int64) (int64, []time.Duration, error) {
	w, err := c.OpenWrite(path)
	if err != nil {
		return 0, nil, err
	}
	return writeSynced(w, bs, size)
}

// writeSynced writes size bytes to w in blocks of bs, timing each write,
// then fsyncs and closes it (also on an error).
func writeSynced(w Writer, bs int, size int64) (int64, []time.Duration, error) {
	buf := make([]byte, bs)
	pattern(buf)
	lats := make([]time.Duration, 0, size/int64(bs)+1)
	var ops int64
	for off := int64(0); off < size; off += int64(bs) {
		n := min(int64(bs), size-off)
		t0 := time.Now()
		if err := w.Write(buf[:n]); err != nil {
			w.Close()
			return ops, nil, err
		}
		lats = append(lats, time.Since(t0))
		ops++
	}
	if err := w.Sync(); err != nil {
		w.Close()
		return ops, nil, err
	}
	if err := w.Close(); err != nil {
		return ops, nil, err
	}
	return ops, timedLats(lats, w), nil
}

// appendFile extends path (made if missing) with records of rs bytes to
// size bytes, then fsyncs it. A Conn that can open for appending
// (O_APPEND) is asked to; others write at the end as they go.
func appendFile(c Conn, path string, rs int, size int64) (int64, []time.Duration, error) {
	open := c.OpenWrite
	if a, ok := c.(appendOpener); ok {
		open = a.OpenAppend
	}
	w, err := open(path)
	if err != nil {
		return 0, nil, err
	}
	ops, lats, err := writeSynced(w, rs, size)
	if err != nil {
		return ops, nil, err
	}
	if n, err := c.Stat(path); err != nil || n != size {
		return ops, nil, fmt.Errorf("appended %d bytes to %s, its size is %d (%v)", size, path, n, err)
	}
	return ops, lats, nil
}

func seqRead(c Conn, path string, bs int, size int64) (int64, []time.Duration, error) {
	rd, err := c.OpenRead(path)
	if err != nil {
		return 0, nil, err
	}
	defer rd.Close()
	buf := make([]byte, bs)
	lats := make([]time.Duration, 0, size/int64(bs)+1)
	var ops, got int64
	for {
		t0 := time.Now()
		n, err := rd.Read(buf)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return ops, nil, err
		}
		lats = append(lats, time.Since(t0))
		ops++
		got += int64(n)
	}
	if got != size {
		return ops, nil, fmt.Errorf("read %d bytes of a %d-byte file", got, size)
	}
	return ops, timedLats(lats, rd), nil
}

// setupWorkers opens a connection per worker and makes its directory.
func (r *runner) setupWorkers() error {
	for i := 0; i < r.o.Procs; i++ {
		c, err := r.t.Conn()
		if err != nil {
			return err
		}
		r.workers = append(r.workers, c)
		r.made = append(r.made, 0)
		if r.o.SharedDir != "" {
			continue
		}
		if err := c.Mkdir(r.workerDir(i)); err != nil {
			return err
		}
	}
	if r.o.SharedDir != "" {
		return r.mkdirShared()
	}
	return nil
}

// mkdirShared makes SharedDir and its parents, if other runs have not.
func (r *runner) mkdirShared() error {
	return mkdirAll(r.workers[0], r.o.SharedDir)
}

// mkdirAll makes dir and its parents where they are missing; another run
// may be making them at the same time.
func mkdirAll(c Conn, dir string) error {
	parts := strings.Split(strings.Trim(dir, "/"), "/")
	for i := range parts {
		p := strings.Join(parts[:i+1], "/")
		if _, err := c.Stat(p); err == nil {
			continue
		}
		if err := c.Mkdir(p); err != nil {
			if _, serr := c.Stat(p); serr != nil { // not made by another run meanwhile
				return fmt.Errorf("mkdir %s: %w", p, err)
			}
		}
	}
	return nil
}

func (r *runner) workerDir(i int) string { return fmt.Sprintf("%s/w%d", r.base, i) }

// filePath is the path of worker i's file j: in its own directory, or in
// SharedDir under a name that holds this run's base name.
func (r *runner) filePath(i, j int) string {
	if r.o.SharedDir != "" {
		return fmt.Sprintf("%s/%s-w%d-f%d", strings.Trim(r.o.SharedDir, "/"), r.base, i, j)
	}
	return fmt.Sprintf("%s/f%d", r.workerDir(i), j)
}

// meta runs one metadata workload on every worker at once.
func (r *runner) meta(w string) (int64, []time.Duration, error) {
	per := r.o.Files / r.o.Procs
	lats := make([][]time.Duration, len(r.workers))
	errs := make([]error, len(r.workers))
	var wg sync.WaitGroup
	for i, c := range r.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := make([]time.Duration, 0, per)
			for j := 0; j < per; j++ {
				p := r.filePath(i, j)
				t0 := time.Now()
				var err error
				switch w {
				case Create:
					err = c.Create(p)
				case Stat:
					_, err = c.Stat(p)
				case Unlink:
					err = c.Remove(p)
				}
				if err != nil {
					errs[i] = fmt.Errorf("%s %s: %w", w, p, err)
					break
				}
				l = append(l, time.Since(t0))
				switch w {
				case Create:
					r.made[i]++
				case Unlink:
					r.made[i]--
				}
			}
			lats[i] = l
		}()
	}
	wg.Wait()
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	return int64(len(all)), all, errors.Join(errs...)
}

// cleanup removes what the run made, best effort, and closes the worker
// connections.
func (r *runner) cleanup(main Conn) error {
	var errs []error
	for i, c := range r.workers {
		if r.made[i] > 0 {
			for j := 0; j < r.o.Files/r.o.Procs; j++ {
				_ = c.Remove(r.filePath(i, j))
			}
		}
		if r.o.SharedDir == "" {
			errs = append(errs, c.Rmdir(r.workerDir(i)))
		}
		c.Close()
	}
	for _, f := range []string{r.seqFile, r.appFile} {
		if f == "" || f == strings.Trim(r.o.SeqFile, "/") {
			continue
		}
		if err := main.Remove(f); err != nil && !isNotExist(err) {
			errs = append(errs, err)
		}
	}
	errs = append(errs, main.Rmdir(r.base))
	return errors.Join(errs...)
}

func isNotExist(err error) bool {
	return errors.Is(err, os.ErrNotExist) || strings.Contains(err.Error(), "nfs status 2")
}

// DropPageCache syncs and drops the kernel's page cache, dentries and
// inodes (needs root): reads after it come from the file system, not the
// client's memory. A server's own caches are not dropped.
func DropPageCache() error {
	syscall.Sync()
	return os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0o200)
}
