package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	kvcounted "github.com/cairnfs/cairn/internal/kv/counted"
	"github.com/cairnfs/cairn/internal/kv/pebble"
	"github.com/cairnfs/cairn/internal/meta"
	"github.com/cairnfs/cairn/internal/metrics"
	"github.com/cairnfs/cairn/internal/object/counted"
)

// Stats is a snapshot of a volume's counters in this process, cumulative
// since it opened the volume (Bytes, Items, Buffered and Scanning are
// gauges). Two snapshots subtract into rates: that is what cairn stats
// prints.
type Stats struct {
	Time   time.Time                    `json:"time"`
	Volume string                       `json:"volume"`
	Memory TierStats                    `json:"memory"`
	Disk   *TierStats                   `json:"disk,omitempty"` // nil without a disk cache
	Object map[string]counted.KindStats `json:"object"`         // by request kind
	// Inline counts the requests for the blocks of small slices, which
	// the metadata engine keeps (Settings.InlineMax), by kind; each is
	// also one of Meta's transactions. Nil without an inline limit.
	Inline     map[string]counted.KindStats `json:"inline,omitempty"`
	Chunk      ChunkStats                   `json:"chunk"`
	Meta       kvcounted.Stats              `json:"meta"`                        // metadata engine transactions
	OCC        *pebble.OCCStats             `json:"meta_occ,omitempty"`          // how the embedded engine ran updates
	Latest     *meta.LatestCacheStats       `json:"meta_cache,omitempty"`        // attributes and entries kept in memory (embedded engine)
	Listed     *meta.ListingStats           `json:"meta_listings,omitempty"`     // lookups answered from directory listings (shared engines)
	Group      *meta.GroupStats             `json:"meta_group_commit,omitempty"` // creates and unlinks that shared a transaction (shared engines)
	Ahead      *meta.AheadStats             `json:"meta_ahead,omitempty"`        // transactions lookups started for the create that followed (shared engines)
	Contention *meta.ContentionStats        `json:"meta_contention,omitempty"`   // changes of directories other clients change too, queued in the store (shared engines)
	Leases     *meta.LeaseStats             `json:"meta_leases,omitempty"`       // directory leases: lookups answered from memory (shared engines)
	Spec       *meta.SpecStats              `json:"meta_spec,omitempty"`         // creates committed in one round trip under a lease (shared engines)
	WB         *meta.WriteBackStats         `json:"meta_write_back,omitempty"`   // changes acknowledged before their commit (mount --meta-write-back)
	NFS        []NFSProcStats               `json:"nfs,omitempty"`               // procedures called, if an NFS gateway runs
	FUSE       []FUSEOpStats                `json:"fuse,omitempty"`              // requests served, if mounted through FUSE
	Backup     *BackupStats                 `json:"backup,omitempty"`            // scheduled metadata backups, if the mount takes them
}

// TierStats are the counters of one cache tier. Hits and misses count
// lookups; HitBytes are the bytes it served, FillBytes the bytes it was
// given from the tier below (disk: file bytes written).
type TierStats struct {
	Hits           int64                      `json:"hits"`
	Misses         int64                      `json:"misses"`
	HitBytes       int64                      `json:"hit_bytes"`
	FillBytes      int64                      `json:"fill_bytes"`
	Evictions      int64                      `json:"evictions"`
	Bytes          int64                      `json:"bytes"`
	Items          int64                      `json:"items"`
	Dropped        int64                      `json:"dropped,omitempty"`
	SpaceEvictions int64                      `json:"space_evictions,omitempty"`
	Corrupt        int64                      `json:"corrupt,omitempty"`
	Scanning       bool                       `json:"scanning,omitempty"`
	Latency        *metrics.HistogramSnapshot `json:"latency,omitempty"` // of hits
}

// ChunkStats are the data path's own counters. The Read* counters count,
// once per block a read touches (a whole block, or the segments of it a
// small read needs), which tier served it: memory, else disk, else the
// object store (a disk miss). The tiers' own lookup counters (TierStats)
// also count the data path's internal lookups (a block, then its
// segments), so hit ratios as a reader sees them come from these.
type ChunkStats struct {
	BytesRead        int64 `json:"bytes_read"`    // returned to readers
	BytesWritten     int64 `json:"bytes_written"` // uploaded in blocks
	Prefetches       int64 `json:"prefetches"`
	ChecksumErrors   int64 `json:"checksum_errors"`
	Buffered         int64 `json:"buffered"`
	ReadMemoryHits   int64 `json:"read_memory_hits"`
	ReadMemoryMisses int64 `json:"read_memory_misses"`
	ReadDiskHits     int64 `json:"read_disk_hits"`
	ReadDiskMisses   int64 `json:"read_disk_misses"`
	DiskFills        int64 `json:"disk_fills"`     // whole blocks fetched into the disk tier after small reads
	Compactions      int64 `json:"compactions"`    // slices rewritten to shorten fragmented chunks
	CompactBytes     int64 `json:"compact_bytes"`  // bytes they rewrote
	InlineCommits    int64 `json:"inline_commits"` // small files' blocks committed with their slice into the metadata engine
}

// Stats returns the volume's counters now.
func (v *Volume) Stats() Stats {
	ms := v.memCache.Stats()
	cs := v.Chunks.Stats()
	st := Stats{
		Time:   time.Now(),
		Volume: v.Settings.Name,
		Memory: TierStats{
			Hits: ms.Hits, Misses: ms.Misses, HitBytes: ms.HitBytes, FillBytes: ms.PutBytes,
			Evictions: ms.Evictions, Bytes: ms.Bytes, Items: ms.Items,
		},
		Object: v.objStats.Stats(),
		Meta:   v.kvStats.Stats(),
		NFS:    v.nfsStats.stats(),
		FUSE:   v.fuseStats.stats(),
		Chunk: ChunkStats{
			BytesRead: cs.BytesRead, BytesWritten: cs.BytesWritten, Prefetches: cs.Prefetches,
			ChecksumErrors: cs.ChecksumErrors, Buffered: cs.Buffered,
			ReadMemoryHits: cs.CacheHits, ReadMemoryMisses: cs.CacheMisses,
			ReadDiskHits: cs.DiskHits, ReadDiskMisses: cs.DiskMisses, DiskFills: cs.DiskFills,
			Compactions: cs.Compactions, CompactBytes: cs.CompactBytes, InlineCommits: cs.InlineCommits,
		},
	}
	if v.inlineStats != nil {
		st.Inline = v.inlineStats.Stats()
	}
	if l := v.backups.Load(); l != nil {
		st.Backup = l.stats()
	}
	if v.occ != nil {
		occ := v.occ.OCCStats()
		st.OCC = &occ
	}
	if v.Meta != nil {
		if lc := v.Meta.LatestCacheStats(); lc.Enabled {
			st.Latest = &lc
		}
		if ls, ok := v.Meta.ListingStats(); ok {
			st.Listed = &ls
		}
		if gs, ok := v.Meta.GroupStats(); ok {
			st.Group = &gs
		}
		if as, ok := v.Meta.AheadStats(); ok {
			st.Ahead = &as
		}
		if cs, ok := v.Meta.ContentionStats(); ok {
			st.Contention = &cs
		}
		if ls, ok := v.Meta.LeaseStats(); ok {
			st.Leases = &ls
		}
		if ss, ok := v.Meta.SpecStats(); ok {
			st.Spec = &ss
		}
		if ws, ok := v.Meta.WriteBackStats(); ok {
			st.WB = &ws
		}
	}
	if v.disk != nil {
		ds := v.disk.Stats()
		st.Disk = &TierStats{
			Hits: ds.Hits, Misses: ds.Misses, HitBytes: ds.HitBytes, FillBytes: ds.WriteBytes,
			Evictions: ds.Evictions, Bytes: ds.Bytes, Items: ds.Items, Dropped: ds.Dropped,
			SpaceEvictions: ds.SpaceEvictions, Corrupt: ds.Corrupt, Scanning: ds.Scanning,
			Latency: &ds.ReadLatency,
		}
	}
	return st
}

// emitStats sends the samples of s to p.
func emitStats(p metricSink, s Stats) {
	tiers := []struct {
		name string
		t    *TierStats
	}{{"memory", &s.Memory}, {"disk", s.Disk}}
	for _, m := range []struct {
		name, help string
		get        func(*TierStats) int64
		gauge      bool
	}{
		{"cairn_cache_hits_total", "Cache lookups that found the block.", func(t *TierStats) int64 { return t.Hits }, false},
		{"cairn_cache_misses_total", "Cache lookups that did not.", func(t *TierStats) int64 { return t.Misses }, false},
		{"cairn_cache_hit_bytes_total", "Bytes served by the cache.", func(t *TierStats) int64 { return t.HitBytes }, false},
		{"cairn_cache_fill_bytes_total", "Bytes put into the cache from the tier below.", func(t *TierStats) int64 { return t.FillBytes }, false},
		{"cairn_cache_evictions_total", "Blocks evicted under the size bound.", func(t *TierStats) int64 { return t.Evictions }, false},
		{"cairn_cache_space_evictions_total", "Blocks evicted under the free-space floor.", func(t *TierStats) int64 { return t.SpaceEvictions }, false},
		{"cairn_cache_dropped_total", "Blocks not cached (queue full, too large, no room).", func(t *TierStats) int64 { return t.Dropped }, false},
		{"cairn_cache_corrupt_total", "Cache files that failed verification and were dropped.", func(t *TierStats) int64 { return t.Corrupt }, false},
		{"cairn_cache_bytes", "Bytes held by the cache.", func(t *TierStats) int64 { return t.Bytes }, true},
		{"cairn_cache_items", "Blocks held by the cache.", func(t *TierStats) int64 { return t.Items }, true},
	} {
		for _, tr := range tiers {
			if tr.t == nil {
				continue
			}
			if m.gauge {
				p.Gauge(m.name, m.help, float64(m.get(tr.t)), "tier", tr.name)
			} else {
				p.Counter(m.name, m.help, float64(m.get(tr.t)), "tier", tr.name)
			}
		}
	}
	if s.Disk != nil && s.Disk.Latency != nil {
		p.Histogram("cairn_cache_hit_seconds", "Latency of cache hits.", *s.Disk.Latency, "tier", "disk")
	}
	kinds := counted.Kinds()
	for _, k := range kinds {
		p.Counter("cairn_object_requests_total", "Object store requests.", float64(s.Object[k.String()].Requests), "kind", k.String())
	}
	for _, k := range kinds {
		p.Counter("cairn_object_errors_total", "Object store requests that failed.", float64(s.Object[k.String()].Errors), "kind", k.String())
	}
	for _, k := range kinds {
		p.Counter("cairn_object_bytes_total", "Bytes sent (put) or received (get) by object store requests.", float64(s.Object[k.String()].Bytes), "kind", k.String())
	}
	for _, k := range kinds {
		p.Histogram("cairn_object_request_seconds", "Latency of object store requests.", s.Object[k.String()].Latency, "kind", k.String())
	}
	if s.Inline != nil {
		for _, k := range kinds {
			p.Counter("cairn_inline_requests_total", "Requests for blocks of small slices kept in the metadata engine.", float64(s.Inline[k.String()].Requests), "kind", k.String())
		}
		for _, k := range kinds {
			p.Counter("cairn_inline_bytes_total", "Bytes put or read by requests for blocks kept in the metadata engine.", float64(s.Inline[k.String()].Bytes), "kind", k.String())
		}
	}
	writeMetaPrometheus(p, s.Meta)
	if s.OCC != nil {
		const help = "Embedded metadata updates by how they ran: optimistic (beside others, committed as run), rerun (what they read changed, run again alone), locked (run alone because optimism was failing)."
		p.Counter("cairn_meta_updates_total", help, float64(s.OCC.Optimistic), "run", "optimistic")
		p.Counter("cairn_meta_updates_total", "", float64(s.OCC.Conflicts), "run", "rerun")
		p.Counter("cairn_meta_updates_total", "", float64(s.OCC.Locked), "run", "locked")
	}
	if s.Latest != nil {
		p.Counter("cairn_meta_cache_reads_total", "Reads of attributes and directory entries by whether the in-memory cache of the embedded engine had them.", float64(s.Latest.Hits), "result", "hit")
		p.Counter("cairn_meta_cache_reads_total", "", float64(s.Latest.Misses), "result", "miss")
		p.Gauge("cairn_meta_cache_entries", "Attributes and directory entries in the in-memory cache.", float64(s.Latest.Entries))
	}
	if s.Listed != nil {
		p.Counter("cairn_meta_listing_hits_total", "Lookups answered from a recent directory listing, and getattrs of directories from this client's own commits (shared engines).", float64(s.Listed.Hits))
		p.Counter("cairn_meta_listing_loads_total", "Directories listed for the listing cache.", float64(s.Listed.Loads))
		p.Counter("cairn_meta_listing_discarded_total", "Listings read and not kept: this client changed the directory's attribute meanwhile.", float64(s.Listed.Discarded))
	}
	if s.Group != nil {
		p.Counter("cairn_meta_group_commits_total", "Transactions that committed several creates or unlinks of this client together (shared engines).", float64(s.Group.Groups))
		p.Counter("cairn_meta_group_members_total", "Creates and unlinks that ran in those transactions.", float64(s.Group.Members))
	}
	if s.Ahead != nil {
		p.Counter("cairn_meta_ahead_started_total", "Transactions lookups started for the create that usually follows (shared engines).", float64(s.Ahead.Started))
		p.Counter("cairn_meta_ahead_used_total", "Of those, the ones a create committed in.", float64(s.Ahead.Used))
		p.Counter("cairn_meta_ahead_abandoned_total", "Of those, the ones rolled back: the name existed, or no create came.", float64(s.Ahead.Abandoned))
	}
	if s.Contention != nil {
		p.Gauge("cairn_meta_contended_directories", "Directories whose entry changes this client queues in the store, because other clients change them too (shared engines).", float64(s.Contention.Directories))
		p.Counter("cairn_meta_contended_total", "Times a directory became contended: a change of its entries conflicted and ran again.", float64(s.Contention.Marked))
		p.Counter("cairn_meta_queued_total", "Changes of a contended directory's entries queued in the store.", float64(s.Contention.Queued))
	}
	if s.Leases != nil {
		p.Gauge("cairn_meta_leases_held", "Directory leases this client holds (shared engines).", float64(s.Leases.Held))
		p.Counter("cairn_meta_leases_acquired_total", "Directory leases taken.", float64(s.Leases.Acquired))
		p.Counter("cairn_meta_leases_released_total", "Directory leases given back.", float64(s.Leases.Released))
		p.Counter("cairn_meta_lease_recalls_total", "Recalls sent to another client's directory lease.", float64(s.Leases.Recalls))
		p.Counter("cairn_meta_lease_lookups_total", "Lookups answered from a directory lease's names.", float64(s.Leases.Answered))
	}
	if s.WB != nil {
		p.Gauge("cairn_meta_write_back_pending", "Changes acknowledged and not yet committed (write-back log).", float64(s.WB.Pending))
		p.Counter("cairn_meta_write_back_changes_total", "Changes acknowledged before their commit.", float64(s.WB.Changes))
		p.Counter("cairn_meta_write_back_batches_total", "Guarded writes that committed the write-back log.", float64(s.WB.Batches))
		p.Counter("cairn_meta_write_back_replays_total", "Write-back logs whose guards failed: their changes ran again one by one.", float64(s.WB.Replays))
		p.Counter("cairn_meta_write_back_lost_total", "Acknowledged changes that failed when run again (reported by the next fsync).", float64(s.WB.Lost))
		p.Counter("cairn_meta_write_back_waits_total", "Operations that committed the write-back log before they ran.", float64(s.WB.Waits))
	}
	if s.Spec != nil {
		p.Counter("cairn_meta_spec_committed_total", "Creates committed in one round trip under a directory lease.", float64(s.Spec.Committed))
		p.Counter("cairn_meta_spec_failed_total", "Of the speculative creates, those whose guard failed (run again as usual).", float64(s.Spec.Failed))
	}
	for _, c := range s.NFS {
		p.Counter("cairn_nfs_calls_total", "Calls served by the NFS gateway, by program and procedure (those called at least once).", float64(c.Latency.Count), "prog", c.Prog, "proc", c.Proc)
	}
	for _, c := range s.FUSE {
		p.Counter("cairn_fuse_requests_total", "FUSE requests served, by kind (those served at least once).", float64(c.Latency.Count), "op", c.Op)
	}
	for _, c := range s.FUSE {
		p.Histogram("cairn_fuse_request_seconds", "Time Cairn took to serve a FUSE request (a blocking lock request includes its wait).", c.Latency, "op", c.Op)
	}
	for _, c := range s.NFS {
		p.Histogram("cairn_nfs_call_seconds", "Time the NFS gateway took to serve a call (after any wait for the write order).", c.Latency, "prog", c.Prog, "proc", c.Proc)
	}
	p.Counter("cairn_read_bytes_total", "Bytes returned to readers by the data path.", float64(s.Chunk.BytesRead))
	p.Counter("cairn_written_bytes_total", "Bytes uploaded in blocks.", float64(s.Chunk.BytesWritten))
	p.Counter("cairn_prefetches_total", "Blocks fetched by read-ahead.", float64(s.Chunk.Prefetches))
	p.Counter("cairn_disk_fills_total", "Blocks fetched whole into the disk tier after small reads missed it.", float64(s.Chunk.DiskFills))
	p.Counter("cairn_compactions_total", "Slices written by compaction (fragmented chunk ranges rewritten as one slice).", float64(s.Chunk.Compactions))
	p.Counter("cairn_compacted_bytes_total", "Bytes rewritten by compaction.", float64(s.Chunk.CompactBytes))
	p.Counter("cairn_read_tier_hits_total", "Blocks (or segment ranges) reads needed that the tier served, once per block a read touches.", float64(s.Chunk.ReadMemoryHits), "tier", "memory")
	p.Counter("cairn_read_tier_hits_total", "", float64(s.Chunk.ReadDiskHits), "tier", "disk")
	p.Counter("cairn_read_tier_misses_total", "Blocks (or segment ranges) reads needed that the tier did not have.", float64(s.Chunk.ReadMemoryMisses), "tier", "memory")
	p.Counter("cairn_read_tier_misses_total", "", float64(s.Chunk.ReadDiskMisses), "tier", "disk")
	p.Counter("cairn_checksum_errors_total", "Blocks from the object store that failed verification.", float64(s.Chunk.ChecksumErrors))
	p.Gauge("cairn_write_buffer_bytes", "Bytes buffered in writers, not yet uploaded.", float64(s.Chunk.Buffered))
	emitBackupStats(p, s.Backup)
}

// occStatter is the ability of the embedded engine (kv/pebble) to say how
// its updates ran.
type occStatter interface{ OCCStats() pebble.OCCStats }

// writeMetaPrometheus writes the metadata engine's counters.
func writeMetaPrometheus(p metricSink, m kvcounted.Stats) {
	kinds := kvcounted.Kinds()
	for _, k := range kinds {
		for _, o := range kvcounted.Outcomes() {
			p.Counter("cairn_meta_transactions_total", "Metadata engine transactions, by kind and outcome (ok, aborted by the caller, conflict after retries, failed).",
				float64(m.Kinds[k.String()].Outcomes[o.String()]), "kind", k.String(), "outcome", o.String())
		}
	}
	for _, k := range kinds {
		p.Counter("cairn_meta_retries_total", "Metadata transactions re-run after a conflict (or a connection lost before the commit).", float64(m.Kinds[k.String()].Retries), "kind", k.String())
	}
	for _, k := range kinds {
		p.Histogram("cairn_meta_transaction_seconds", "Latency of metadata engine transactions, retries included.", m.Kinds[k.String()].Latency, "kind", k.String())
	}
	p.Histogram("cairn_meta_sync_seconds", "Latency of metadata engine syncs (making committed transactions durable).", m.Sync)
}

// MetricsServer serves /metrics (Prometheus text format) and /stats
// (JSON) for a volume.
type MetricsServer struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
}

// ServeMetrics listens on addr (host:port) and serves the volume's
// counters until Close.
func ServeMetrics(addr string, v *Volume, version string, log *slog.Logger) (*MetricsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", metricsHandler(newRegistry(v, version, log), log))
	mux.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v.Stats())
	})
	return serveHTTP(ln, mux, log), nil
}

// serveHTTP serves mux on ln until the returned server is closed.
func serveHTTP(ln net.Listener, mux *http.ServeMux, log *slog.Logger) *MetricsServer {
	m := &MetricsServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, ln: ln, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		if err := m.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("metrics listener", "err", err)
		}
	}()
	return m
}

// serveMetrics serves the volume's counters on addr, if it is set, and
// returns the function that stops serving them.
func serveMetrics(addr string, v *Volume, version string, log *slog.Logger) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	ms, err := ServeMetrics(addr, v, version, log)
	if err != nil {
		return nil, err
	}
	log.Info("serving metrics", "addr", ms.Addr())
	return func() { _ = ms.Close() }, nil
}

// Addr returns the address it listens on.
func (m *MetricsServer) Addr() string { return m.ln.Addr().String() }

// Close stops serving.
func (m *MetricsServer) Close() error {
	err := m.srv.Close()
	<-m.done
	return err
}

// MountSocketPath is where the process serving mount point mp listens for
// requests about that mount (stats, warmup), whatever its volume's kind:
// a socket named by a hash of the mount point in a directory private to
// the user (TMPDIR/cairn-UID).
func MountSocketPath(mp string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(mp)))
	return filepath.Join(os.TempDir(), "cairn-"+strconv.Itoa(os.Getuid()), hex.EncodeToString(sum[:8])+".sock")
}

// WarmupProgress is one line of the warmup verb's output: totals so far.
type WarmupProgress struct {
	Files   int64  `json:"files"`
	Bytes   int64  `json:"bytes"`   // of the blocks warmed
	Fetched int64  `json:"fetched"` // of those, bytes fetched from the object store
	Errors  int64  `json:"errors"`
	Done    bool   `json:"done,omitempty"`
	Error   string `json:"error,omitempty"` // the first error
}

// Warmup fills the disk cache with the blocks of the files with the given
// inodes (directories are not walked here: the caller lists their files),
// a few files at a time, and writes a WarmupProgress JSON line to w every
// interval and a final one with Done set. Files that fail are counted and
// the first error is reported; the rest go on.
func Warmup(ctx context.Context, v *Volume, inos []base.Ino, interval time.Duration, w io.Writer) error {
	if v.disk == nil {
		why := "mount it with --cache-dir DIR"
		if v.diskSkipped != "" {
			why = v.diskSkipped
		}
		return fmt.Errorf("the mount of volume %q has no disk cache: %s", v.Settings.Name, why)
	}
	var files, bytesN, fetched, nerr atomic.Int64
	var firstErr error
	var errMu sync.Mutex
	report := func(done bool) {
		p := WarmupProgress{Files: files.Load(), Bytes: bytesN.Load(), Fetched: fetched.Load(), Errors: nerr.Load(), Done: done}
		errMu.Lock()
		if firstErr != nil {
			p.Error = firstErr.Error()
		}
		errMu.Unlock()
		b, _ := json.Marshal(p)
		_, _ = w.Write(append(b, '\n'))
	}
	stop := make(chan struct{})
	ticked := make(chan struct{})
	go func() {
		defer close(ticked)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				report(false)
			}
		}
	}()
	work := make(chan base.Ino)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for ino := range work {
				err := warmFile(ctx, v, ino, func(n int, cached bool) {
					bytesN.Add(int64(n))
					if !cached {
						fetched.Add(int64(n))
					}
				})
				if err != nil {
					nerr.Add(1)
					errMu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("inode %d: %w", ino, err)
					}
					errMu.Unlock()
				}
				files.Add(1)
			}
		})
	}
	for _, ino := range slices.Compact(slices.Sorted(slices.Values(inos))) {
		if ctx.Err() != nil {
			break
		}
		work <- ino
	}
	close(work)
	wg.Wait()
	close(stop)
	<-ticked
	report(true)
	return ctx.Err()
}

func warmFile(ctx context.Context, v *Volume, ino base.Ino, progress func(int, bool)) error {
	chunks, err := v.Meta.Chunks(ctx, ino)
	if err != nil {
		return err
	}
	for _, c := range chunks {
		if err := v.Chunks.Warm(ctx, c.Slices, progress); err != nil {
			return err
		}
	}
	return nil
}
