package daemon

import (
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/internal/fuse"
	"github.com/cairnfs/cairn/internal/metrics"
)

// fuseCounters count the FUSE requests a mount serves, by kind
// (fuse.Options.OnRequest). The zero value is ready; it is safe for
// concurrent use.
type fuseCounters struct {
	on  atomic.Bool // the volume is mounted through FUSE
	ops [fuse.NumOps]metrics.Histogram
}

func (c *fuseCounters) observe(op fuse.Op, d time.Duration) {
	if op < fuse.NumOps {
		c.ops[op].Observe(d)
	}
}

// FUSEOpStats are the requests of one kind: Op is its name ("lookup",
// "write"); Latency.Count is the number of requests.
type FUSEOpStats struct {
	Op      string                    `json:"op"`
	Latency metrics.HistogramSnapshot `json:"latency"`
}

// stats lists the kinds served at least once, in the order of fuse.Op; nil
// if the volume is not mounted through FUSE.
func (c *fuseCounters) stats() []FUSEOpStats {
	if !c.on.Load() {
		return nil
	}
	out := []FUSEOpStats{}
	eachObserved(fuse.OpNames(), c.ops[:], func(name string, h metrics.HistogramSnapshot) {
		out = append(out, FUSEOpStats{Op: name, Latency: h})
	})
	return out
}
