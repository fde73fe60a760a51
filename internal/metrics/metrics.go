// Package metrics holds what Cairn's layers use to measure themselves: a
// lock-free latency Histogram. It imports nothing of Cairn's, so every
// layer (object decorators included) may use it. It keeps no global
// registry: each component owns its counters and the composition root
// (daemon) collects them for Prometheus (client_golang, daemon/prom.go).
package metrics

import (
	"math"
	"sort"
	"sync/atomic"
	"time"
)

// Bounds are the upper bounds of the Histogram buckets; a last, unbounded
// bucket follows them.
var Bounds = [...]time.Duration{
	25 * time.Microsecond, 50 * time.Microsecond, 100 * time.Microsecond,
	250 * time.Microsecond, 500 * time.Microsecond, time.Millisecond,
	2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond,
	25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond,
	250 * time.Millisecond, 500 * time.Millisecond, time.Second,
	2500 * time.Millisecond, 10 * time.Second,
}

// Histogram counts durations in the buckets of Bounds, with their count
// and sum. The zero value is ready; it is safe for concurrent use and
// never blocks.
type Histogram struct {
	buckets [len(Bounds) + 1]atomic.Int64
	count   atomic.Int64
	sum     atomic.Int64 // nanoseconds
}

// Observe records one duration.
func (h *Histogram) Observe(d time.Duration) {
	i := sort.Search(len(Bounds), func(i int) bool { return d <= Bounds[i] })
	h.buckets[i].Add(1)
	h.count.Add(1)
	h.sum.Add(int64(d))
}

// Since records the time elapsed since t.
func (h *Histogram) Since(t time.Time) { h.Observe(time.Since(t)) }

// Snapshot returns the counters. Each is read atomically, not all at one
// instant.
func (h *Histogram) Snapshot() HistogramSnapshot {
	s := HistogramSnapshot{Count: h.count.Load(), SumNs: h.sum.Load(), Buckets: make([]int64, len(h.buckets))}
	for i := range h.buckets {
		s.Buckets[i] = h.buckets[i].Load()
	}
	return s
}

// HistogramSnapshot is a copy of a Histogram's counters: Buckets[i] counts
// durations in (Bounds[i-1], Bounds[i]], the last one those above every
// bound. Snapshots taken at two instants subtract (Sub) into the
// histogram of the interval between them.
type HistogramSnapshot struct {
	Count   int64   `json:"count"`
	SumNs   int64   `json:"sum_ns"`
	Buckets []int64 `json:"buckets,omitempty"`
}

// Sub returns s minus prev (the observations made after prev was taken).
func (s HistogramSnapshot) Sub(prev HistogramSnapshot) HistogramSnapshot {
	out := HistogramSnapshot{Count: s.Count - prev.Count, SumNs: s.SumNs - prev.SumNs, Buckets: make([]int64, len(s.Buckets))}
	for i := range s.Buckets {
		out.Buckets[i] = s.Buckets[i]
		if i < len(prev.Buckets) {
			out.Buckets[i] -= prev.Buckets[i]
		}
	}
	return out
}

// Add returns s plus o (the observations of both).
func (s HistogramSnapshot) Add(o HistogramSnapshot) HistogramSnapshot {
	out := HistogramSnapshot{Count: s.Count + o.Count, SumNs: s.SumNs + o.SumNs, Buckets: make([]int64, max(len(s.Buckets), len(o.Buckets)))}
	for i := range out.Buckets {
		if i < len(s.Buckets) {
			out.Buckets[i] += s.Buckets[i]
		}
		if i < len(o.Buckets) {
			out.Buckets[i] += o.Buckets[i]
		}
	}
	return out
}

// Mean returns the mean duration, or 0 without observations.
func (s HistogramSnapshot) Mean() time.Duration {
	if s.Count <= 0 {
		return 0
	}
	return time.Duration(s.SumNs / s.Count)
}

// Quantile returns the upper bound of the bucket holding quantile q (0 <
// q <= 1), so it over-estimates by at most one bucket; 0 without
// observations. Durations above the last bound report twice that bound.
func (s HistogramSnapshot) Quantile(q float64) time.Duration {
	if s.Count <= 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(s.Count)))
	var seen int64
	for i, n := range s.Buckets {
		seen += n
		if seen >= rank {
			if i < len(Bounds) {
				return Bounds[i]
			}
			break
		}
	}
	return 2 * Bounds[len(Bounds)-1]
}
