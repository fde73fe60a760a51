package daemon

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"

	"github.com/cairnfs/cairn/internal/metrics"
)

// The metrics page is client_golang's: a registry holding the Go runtime
// and process collectors, cairn_build_info, and a collector over the
// counters the layers already keep (Volume.Stats), read at each scrape.
// The volume's name and UUID label cairn_volume_info and the volume's
// usage gauges: a process serves one volume, and a query joins the other
// series with cairn_volume_info by the scraper's instance label, as
// Prometheus advises for identity labels.

// metricSink receives the samples of emitStats: the collector's sink
// turns them into client_golang metrics.
type metricSink interface {
	Counter(name, help string, v float64, labels ...string)
	Gauge(name, help string, v float64, labels ...string)
	Histogram(name, help string, h metrics.HistogramSnapshot, labels ...string)
}

// constSink makes constant client_golang metrics of the samples it gets,
// one Desc per name: the first help given for a name is its help (later
// samples may give ""), and every sample of a name must have the same
// label names.
type constSink struct {
	ch    chan<- prometheus.Metric
	descs map[string]*prometheus.Desc
	helps map[string]string
}

func newConstSink(ch chan<- prometheus.Metric) *constSink {
	return &constSink{ch: ch, descs: map[string]*prometheus.Desc{}, helps: map[string]string{}}
}

// desc returns the Desc of name, with the label names of labels (name,
// value pairs), and the label values.
func (s *constSink) desc(name, help string, labels []string) (*prometheus.Desc, []string) {
	var names, values []string
	for i := 0; i+1 < len(labels); i += 2 {
		names = append(names, labels[i])
		values = append(values, labels[i+1])
	}
	d, ok := s.descs[name]
	if !ok {
		if help == "" {
			help = name
		}
		d = prometheus.NewDesc(name, help, names, nil)
		s.descs[name] = d
	}
	return d, values
}

func (s *constSink) Counter(name, help string, v float64, labels ...string) {
	d, vals := s.desc(name, help, labels)
	s.ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, vals...)
}

func (s *constSink) Gauge(name, help string, v float64, labels ...string) {
	d, vals := s.desc(name, help, labels)
	s.ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, vals...)
}

func (s *constSink) Histogram(name, help string, h metrics.HistogramSnapshot, labels ...string) {
	d, vals := s.desc(name, help, labels)
	buckets := make(map[float64]uint64, len(metrics.Bounds))
	var cum int64
	for i, n := range h.Buckets {
		cum += n
		if i < len(metrics.Bounds) {
			buckets[metrics.Bounds[i].Seconds()] = uint64(cum)
		}
	}
	s.ch <- prometheus.MustNewConstHistogram(d, uint64(h.Count), float64(h.SumNs)/1e9, buckets, vals...)
}

// statsCollector collects a volume's counters: stats returns them at each
// scrape. It is unchecked (it describes nothing): which series exist
// depends on the volume (a disk cache, an NFS gateway, the engine).
type statsCollector struct {
	stats func() Stats
}

func (c statsCollector) Describe(chan<- *prometheus.Desc) {}

func (c statsCollector) Collect(ch chan<- prometheus.Metric) {
	emitStats(newConstSink(ch), c.stats())
}

// volumeCollector collects the volume's identity and usage: read from its
// metadata engine at each scrape, within a bound; a store that does not
// answer leaves the usage out of that scrape.
type volumeCollector struct {
	v   *Volume
	log *slog.Logger
}

func (c volumeCollector) Describe(chan<- *prometheus.Desc) {}

func (c volumeCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.v.Meta.Settings()
	id := []string{"volume", s.Name, "uuid", s.UUID}
	sink := newConstSink(ch)
	sink.Gauge("cairn_volume_info", "The volume this process serves (always 1): join other series with it by instance.", 1, id...)
	sink.Gauge("cairn_volume_capacity_bytes", "The volume's capacity (0: unlimited).", float64(s.Capacity), id...)
	sink.Gauge("cairn_volume_inode_limit", "The volume's inode limit (0: unlimited).", float64(s.Inodes), id...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	u, err := c.v.Meta.Usage(ctx)
	if err != nil {
		c.log.Warn("metrics: reading the volume's usage", "err", err)
		return
	}
	sink.Gauge("cairn_volume_used_bytes", "Bytes the volume's files hold (rounded up to 4 KiB each).", float64(u.Bytes), id...)
	sink.Gauge("cairn_volume_used_inodes", "Inodes in use.", float64(u.Inodes), id...)
}

// newRegistry returns the registry of a process serving v: the Go and
// process collectors, cairn_build_info, the volume's identity and usage,
// and its counters.
func newRegistry(v *Volume, version string, log *slog.Logger) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	build := prometheus.NewGauge(prometheus.GaugeOpts{Name: "cairn_build_info", Help: "The Cairn build serving (always 1).",
		ConstLabels: prometheus.Labels{"version": version, "goversion": runtime.Version()}})
	build.Set(1)
	reg.MustRegister(build)
	reg.MustRegister(volumeCollector{v: v, log: log}, statsCollector{stats: v.Stats})
	return reg
}

// metricsHandler serves reg's metrics in the format the scraper asks for.
func metricsHandler(reg *prometheus.Registry, log *slog.Logger) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, ErrorLog: promLogger{log}})
}

// promLogger passes promhttp's errors to the log.
type promLogger struct{ log *slog.Logger }

func (l promLogger) Println(v ...any) { l.log.Warn("metrics", "err", v) }

// WritePrometheus writes the counters s in the Prometheus text exposition
// format, as /metrics shows them (without the runtime, process and volume
// series).
func WritePrometheus(w io.Writer, s Stats) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(statsCollector{stats: func() Stats { return s }})
	mfs, err := reg.Gather()
	if err != nil {
		return err
	}
	sort.Slice(mfs, func(i, j int) bool { return mfs[i].GetName() < mfs[j].GetName() })
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(w, mf); err != nil {
			return err
		}
	}
	return nil
}
