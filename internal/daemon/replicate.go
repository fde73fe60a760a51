package daemon

// Asynchronous replication of a volume to a second volume, cycle by cycle
// (docs/design/0010-replication.md). A cycle takes a snapshot of the
// source, reads the namespace records that changed since the last
// replicated snapshot (the change log), copies the objects of the slices
// the destination lacks, and writes the records on the destination in
// one transaction together with the pair's new state. The destination
// also takes a snapshot of the same name after each cycle: the anchor a
// reverse resynchronisation starts from.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/chunk"
	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/meta"
	"github.com/cairnfs/cairn/internal/object"
)

// ReplicateOptions configures a Replicator.
type ReplicateOptions struct {
	Source, Dest string // metadata URLs
	// MaxOutOfSync bounds how old the destination may be: cycles start
	// so that the last replicated snapshot is never older than this
	// (default 5 minutes); a cycle that cannot keep it is reported.
	MaxOutOfSync time.Duration
	// BWLimit bounds the bytes per second of object copying (0: none).
	BWLimit int64
	// Batch is the number of records per transaction of the first copy
	// (default 4096).
	Batch     int
	Logger    *slog.Logger
	StoreWait StoreWait
}

// Replicator runs the cycles of one pair.
type Replicator struct {
	o        ReplicateOptions
	src, dst *Volume
	ownSrc   bool // src was opened here (Close closes it)
	log      *slog.Logger
	limit    *rateLimit
	seen     map[uint64]time.Time // destination deletes, when first seen

	// Progress of the running cycle and totals, for status and metrics.
	phase                atomic.Value // string
	done, total          atomic.Int64
	cycles, missed       atomic.Int64
	bytesTotal, objTotal atomic.Int64
	linked               atomic.Int64 // objects made by the stores themselves (CopyFrom)
	last                 atomic.Value // meta.ReplicaState after the last cycle
}

// replicaDeleteDelay is how long a slice the destination no longer
// references stays before its objects go: readers of the destination
// that took a slice list before the cycle finish their reads (and a read
// that still misses takes the list again, vfs.readPart).
const replicaDeleteDelay = 10 * time.Second

// OpenReplicator opens both volumes of a pair and checks that they can
// be one: the destination is new and empty (or this pair's), its blocks
// have the source's size and format, and the data stores differ.
// src, if not nil, is the source volume already open (a mount's, with
// --replicate-to); it stays open after Close.
func OpenReplicator(ctx context.Context, o ReplicateOptions, src *Volume) (*Replicator, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MaxOutOfSync == 0 {
		o.MaxOutOfSync = 5 * time.Minute
	}
	if o.MaxOutOfSync < time.Second {
		return nil, fmt.Errorf("--max-out-of-sync %s: want at least 1s", o.MaxOutOfSync)
	}
	if o.Batch <= 0 {
		o.Batch = 4096
	}
	if o.BWLimit < 0 {
		return nil, fmt.Errorf("--bwlimit %d: want zero (none) or more", o.BWLimit)
	}
	ownSrc := src == nil
	if ownSrc {
		var err error
		if src, err = OpenVolume(ctx, VolumeOptions{MetaURL: o.Source, Logger: o.Logger, StoreWait: o.StoreWait, CacheMem: 64 << 20}); err != nil {
			return nil, fmt.Errorf("source: %w", err)
		}
	}
	if src.ReadOnly {
		if ownSrc {
			src.Close()
		}
		return nil, fmt.Errorf("source %q is open read-only (a replication destination, or --read-only): it cannot take the snapshots of a cycle", src.Settings.Name)
	}
	dst, err := OpenVolume(ctx, VolumeOptions{MetaURL: o.Dest, Logger: o.Logger, StoreWait: o.StoreWait, CacheMem: 16 << 20, Replicator: true})
	if err != nil {
		if ownSrc {
			src.Close()
		}
		return nil, fmt.Errorf("destination: %w", err)
	}
	r := &Replicator{o: o, src: src, ownSrc: ownSrc, dst: dst, log: o.Logger, seen: map[uint64]time.Time{}}
	if o.BWLimit > 0 {
		r.limit = &rateLimit{rate: float64(o.BWLimit)}
	}
	r.phase.Store("idle")
	if err := r.check(ctx); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

func (r *Replicator) check(ctx context.Context) error {
	s, d := r.src.Settings, r.dst.Settings
	if s.UUID == d.UUID {
		return fmt.Errorf("source and destination are the same volume %q (uuid %s)", s.Name, s.UUID)
	}
	if s.BlockSize != d.BlockSize || s.BoundBlocks() != d.BoundBlocks() {
		return fmt.Errorf("destination %q has blocks of %d bytes (format %d), the source %q of %d (format %d): format the destination with --block-size %d", d.Name, d.BlockSize, d.FormatVersion, s.Name, s.BlockSize, s.FormatVersion, s.BlockSize/1024)
	}
	if s.DataURL == d.DataURL {
		return fmt.Errorf("source and destination share the data store %s: a destination needs its own (its deletes would remove the source's objects)", object.RedactURL(s.DataURL))
	}
	st, ok, err := r.dst.Meta.ReplicaState(ctx)
	if err != nil {
		return err
	}
	if ok {
		switch {
		case st.SourceUUID != s.UUID:
			return fmt.Errorf("destination %q belongs to replication pair %s, whose source is volume %q (uuid %s), not %q: refused", d.Name, st.Pair, st.SourceName, st.SourceUUID, s.Name)
		case st.Promoted:
			return fmt.Errorf("destination %q was failed over at %s and is writable: 'cairn replicate reverse' replicates it back to %q", d.Name, st.PromotedAt.Format(time.RFC3339), s.Name)
		}
		r.last.Store(st)
		return nil
	}
	if st, ok, err := r.src.Meta.ReplicaState(ctx); err != nil {
		return err
	} else if ok && !st.Promoted {
		return fmt.Errorf("source %q is itself the destination of pair %s: replicate from its source, or fail it over first", s.Name, st.Pair)
	}
	empty, err := r.dst.Meta.ReplicaEmpty(ctx)
	if err != nil {
		return err
	}
	snaps, err := r.dst.Meta.Snapshots(ctx)
	if err != nil {
		return err
	}
	if !empty || len(snaps) > 0 {
		return fmt.Errorf("destination %q is not empty (it has files or snapshots): a new pair needs a newly formatted volume; refused, nothing was changed", d.Name)
	}
	return nil
}

// Close closes the destination and the source it opened.
func (r *Replicator) Close() {
	if r.ownSrc {
		r.src.Close()
	}
	r.dst.Close()
}

// Source and Dest return the pair's volumes.
func (r *Replicator) Source() *Volume { return r.src }
func (r *Replicator) Dest() *Volume   { return r.dst }

// Cycle runs one cycle: the first copy, or an incremental one.
func (r *Replicator) Cycle(ctx context.Context) (meta.ReplicaState, error) {
	defer r.phase.Store("idle")
	st, ok, err := r.dst.Meta.ReplicaState(ctx)
	if err != nil {
		return st, err
	}
	if !ok {
		s := r.src.Settings
		st = meta.ReplicaState{Pair: newUUID(), SourceUUID: s.UUID, SourceName: s.Name, Source: object.RedactURL(r.o.Source)}
	}
	if st.Promoted {
		return st, fmt.Errorf("destination was failed over: %w", meta.ErrReplicaMoved)
	}
	if st.Snapshot == "" {
		st, err = r.firstCopy(ctx, st, !ok)
	} else {
		st, err = r.incremental(ctx, st)
	}
	if err == nil {
		r.cycles.Add(1)
		r.last.Store(st)
		if lag := time.Since(st.Taken); lag > r.o.MaxOutOfSync {
			r.missed.Add(1)
			r.log.Warn("replication missed its bound: the cycle took longer than the bound allows", "lag", lag.Round(time.Millisecond), "bound", r.o.MaxOutOfSync, "cycle", st.LastCycle.Duration.Round(time.Millisecond), "bytes", st.LastCycle.Bytes, "records", st.LastCycle.Records)
		}
	}
	return st, err
}

func (r *Replicator) snapshotName(st meta.ReplicaState) string {
	return fmt.Sprintf("%s%s.%d", meta.ReplicaSnapshotPrefix, st.Pair[:8], st.Cycles+1)
}

// firstCopy writes every record of a new source snapshot on the
// destination, in batches (the destination cannot be mounted meanwhile),
// resuming after the last batch that committed.
func (r *Replicator) firstCopy(ctx context.Context, st meta.ReplicaState, first bool) (meta.ReplicaState, error) {
	start := time.Now()
	var snap meta.Snapshot
	var err error
	if st.Copying != "" {
		snap, err = r.src.Meta.SnapshotByName(ctx, st.Copying)
		if errors.Is(err, base.ErrNotFound) {
			err = fmt.Errorf("the source lost snapshot %s of the interrupted first copy (deleted by hand?): format the destination again and start the pair anew", st.Copying)
		}
		if err != nil {
			return st, err
		}
	}
	if err := r.dropStale(ctx, r.src.Meta, st, st.Copying); err != nil {
		return st, err
	}
	if st.Copying == "" {
		snap, err = r.src.Meta.CreateSnapshot(ctx, r.snapshotName(st))
		if err != nil {
			return st, fmt.Errorf("source snapshot: %w", err)
		}
		next := st
		next.Copying, next.Resume = snap.Name, nil
		if err := r.dst.Meta.ApplyReplica(ctx, meta.ReplicaApply{First: first, ExpectSnapshot: "", ExpectCopying: "", State: next}); err != nil {
			return st, err
		}
		st = next
		r.log.Info("replication: first copy started", "pair", st.Pair, "snapshot", snap.Name)
	}
	var info meta.CycleInfo
	r.phase.Store("first copy")
	r.done.Store(0)
	r.total.Store(0)
	for {
		recs, next, err := r.src.Meta.ReplicaScan(ctx, snap, st.Resume, r.o.Batch)
		if err != nil {
			return st, err
		}
		a := meta.ReplicaApply{Records: recs, ExpectCopying: snap.Name}
		if err := r.prepare(ctx, &a, &info); err != nil {
			return st, err
		}
		nst := st
		nst.Resume = next
		if next == nil {
			info.Duration, info.Finished = time.Since(start), time.Now()
			nst = replicated(nst, snap)
			nst.Copying, nst.Resume = "", nil
			nst.LastCycle = info
			if err := r.finalParts(ctx, &a); err != nil {
				return st, err
			}
		}
		a.State = nst
		if err := r.dst.Meta.ApplyReplica(ctx, a); err != nil {
			return st, err
		}
		r.done.Add(int64(len(recs)))
		st = nst
		if next == nil {
			break
		}
	}
	if _, err := r.dst.Meta.CreateSnapshot(ctx, snap.Name); err != nil {
		return st, fmt.Errorf("destination anchor snapshot: %w", err)
	}
	r.log.Info("replication: first copy done", "pair", st.Pair, "snapshot", snap.Name, "records", info.Records, "objects", info.Objects, "bytes", info.Bytes, "took", info.Duration.Round(time.Millisecond))
	return st, nil
}

// prepare copies the objects the records of a need and the destination
// lacks, and adds the extra owners of those slices.
func (r *Replicator) prepare(ctx context.Context, a *meta.ReplicaApply, info *meta.CycleInfo) error {
	gained, err := r.dst.Meta.ReplicaGained(ctx, a.Records)
	if err != nil {
		return err
	}
	ids := make([]uint64, len(gained))
	for i, s := range gained {
		ids[i] = s.ID
	}
	if a.Owners, err = r.src.Meta.ReplicaOwners(ctx, ids); err != nil {
		return err
	}
	var objs, gainedInline []base.Slice
	var blobKeys []string
	for _, s := range gained {
		if s.ID&base.InlineBit != 0 && r.src.Settings.FormatVersion >= 2 {
			// An inline block travels in the records' transaction.
			blobKeys = append(blobKeys, chunk.BlockKey(s.ID, 0, int(s.Size)))
			gainedInline = append(gainedInline, s)
		} else {
			objs = append(objs, s)
		}
	}
	if len(blobKeys) > 0 {
		if a.Blobs, err = r.src.Meta.ReplicaBlobs(ctx, blobKeys); err != nil {
			return err
		}
		for i, key := range blobKeys {
			s := gainedInline[i]
			if _, err := chunk.DecodeBlock(a.Blobs[key], chunk.BlockID{Slice: s.ID, Index: 0, Length: int(s.Size)}, blockFormat(r.src.Settings)); err != nil {
				return fmt.Errorf("source inline block %s fails its checks, not copied: %w", key, err)
			}
			info.Objects++
			info.Bytes += int64(len(a.Blobs[key]))
		}
	}
	linked := r.linked.Load()
	n, bytes, err := r.copySlices(ctx, objs)
	info.Linked += int(r.linked.Load() - linked)
	info.Objects += n
	info.Bytes += bytes
	if err != nil {
		return err
	}
	info.Records += len(a.Records)
	for _, rec := range a.Records {
		if meta.IsAttrKey(rec.Key) {
			info.Files++
		}
	}
	return nil
}

// finalParts adds what the last transaction of a cycle carries besides
// records: the source's quotas and id counters.
func (r *Replicator) finalParts(ctx context.Context, a *meta.ReplicaApply) error {
	q, err := r.src.Meta.ReplicaQuotas(ctx)
	if err != nil {
		return err
	}
	if q == nil {
		q = []kv.Pair{} // none: the destination's go too
	}
	a.Quotas = q
	a.Counters, err = r.src.Meta.ReplicaCountersNow(ctx)
	return err
}

// incremental replicates the changes since the last replicated snapshot
// in one destination transaction.
func (r *Replicator) incremental(ctx context.Context, st meta.ReplicaState) (meta.ReplicaState, error) {
	start := time.Now()
	r.phase.Store("diff")
	prev, err := r.src.Meta.SnapshotByName(ctx, st.Snapshot)
	if errors.Is(err, base.ErrNotFound) {
		return st, fmt.Errorf("the source no longer has snapshot %s, the last one replicated (deleted by hand?): this pair cannot go on; format the destination again and start a new pair", st.Snapshot)
	}
	if err != nil {
		return st, err
	}
	anchor, err := r.anchor(ctx, st.Snapshot)
	if err != nil {
		return st, err
	}
	if err := r.dropStale(ctx, r.src.Meta, st, prev.Name); err != nil {
		return st, err
	}
	if err := r.dropStale(ctx, r.dst.Meta, st, prev.Name); err != nil {
		return st, err
	}
	r.drainDeletes(ctx)
	snap, err := r.src.Meta.CreateSnapshot(ctx, r.snapshotName(st))
	if err != nil {
		return st, fmt.Errorf("source snapshot: %w", err)
	}
	// The user's snapshots taken since the last cycle are replicated as
	// snapshots of the destination: the cycle goes through each in turn
	// (one transaction each), then to its own. The state names the
	// replicated snapshot only at the end: a cycle interrupted after a
	// step starts again from the last one, and what the steps applied is
	// among the destination's changes since its anchor, put back.
	steps, err := r.userSnapshots(ctx, prev, snap)
	if err != nil {
		return st, err
	}
	steps = append(steps, snap)
	var info meta.CycleInfo
	nst := replicated(st, snap)
	var gone []string
	from := prev
	for n, step := range steps {
		keys, err := r.src.Meta.ReplicaChanged(ctx, from, &step)
		if err != nil {
			return st, err
		}
		if n == 0 {
			// Whatever changed on the destination since its anchor
			// (nothing, unless it was written, as an old source is
			// before a reverse, or a step of an interrupted cycle
			// applied) is put back to the source's state too.
			dkeys, err := r.dst.Meta.ReplicaChanged(ctx, anchor, nil)
			if err != nil {
				return st, err
			}
			keys = unionKeys(keys, dkeys)
		}
		r.phase.Store("copy")
		r.done.Store(0)
		r.total.Store(int64(len(keys)))
		var recs []meta.ReplicaRecord
		for i := 0; i < len(keys); i += 8192 {
			part, err := r.src.Meta.ReplicaValues(ctx, step, keys[i:min(i+8192, len(keys))])
			if err != nil {
				return st, err
			}
			recs = append(recs, part...)
		}
		a := meta.ReplicaApply{Records: recs, ExpectSnapshot: prev.Name, State: st}
		if err := r.prepare(ctx, &a, &info); err != nil {
			return st, err
		}
		last := n == len(steps)-1
		if last {
			if err := r.finalParts(ctx, &a); err != nil {
				return st, err
			}
			info.Duration, info.Finished = time.Since(start), time.Now()
			if gone, err = r.mirror(ctx, &nst, steps[:n]); err != nil {
				return st, err
			}
			nst.LastCycle = info
			a.State = nst
		}
		r.phase.Store("apply")
		if err := r.dst.Meta.ApplyReplica(ctx, a); err != nil {
			return st, err
		}
		r.done.Store(int64(len(keys)))
		if !last {
			if err := r.userSnapshotOnDest(ctx, step); err != nil {
				return st, err
			}
		}
		from = step
	}
	// The new anchor, then the old snapshots go (an interruption here is
	// finished by the next cycle: anchor, dropStale).
	if _, err := r.anchor(ctx, snap.Name); err != nil {
		return nst, err
	}
	if err := r.dropStale(ctx, r.dst.Meta, nst, snap.Name); err != nil {
		return nst, err
	}
	if err := r.dropStale(ctx, r.src.Meta, nst, snap.Name); err != nil {
		return nst, err
	}
	for _, name := range gone {
		if err := r.dst.Meta.DeleteSnapshot(ctx, name, nil); err != nil && !errors.Is(err, base.ErrNotFound) {
			return nst, fmt.Errorf("deleting snapshot %s on the destination (gone from the source): %w", name, err)
		}
	}
	r.log.Info("replication: cycle done", "pair", st.Pair, "snapshot", snap.Name, "records", info.Records, "files", info.Files, "objects", info.Objects, "bytes", info.Bytes, "took", info.Duration.Round(time.Millisecond))
	return nst, nil
}

// userSnapshots returns the source's snapshots taken by users after prev
// and before snap, oldest first.
func (r *Replicator) userSnapshots(ctx context.Context, prev, snap meta.Snapshot) ([]meta.Snapshot, error) {
	all, err := r.src.Meta.Snapshots(ctx)
	if err != nil {
		return nil, err
	}
	var out []meta.Snapshot
	for _, s := range all {
		if !strings.HasPrefix(s.Name, meta.ReplicaSnapshotPrefix) && s.Epoch > prev.Epoch && s.Epoch < snap.Epoch {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Epoch < out[j].Epoch })
	return out, nil
}

// userSnapshotOnDest takes, on the destination that now holds the state
// of the source's snapshot s, the snapshot of the same name (unless a
// cycle interrupted after taking it did already).
func (r *Replicator) userSnapshotOnDest(ctx context.Context, s meta.Snapshot) error {
	if _, err := r.dst.Meta.SnapshotByName(ctx, s.Name); err == nil {
		return nil
	} else if !errors.Is(err, base.ErrNotFound) {
		return err
	}
	if _, err := r.dst.Meta.CreateSnapshot(ctx, s.Name); err != nil {
		return fmt.Errorf("destination snapshot %s: %w", s.Name, err)
	}
	return nil
}

// mirror updates the names of the mirrored snapshots in st: those of
// added (taken on the destination by this cycle) join; those the source
// no longer has leave and are returned, for deletion on the destination
// once the state that forgets them is committed. (An interruption in
// between leaves such a snapshot on the destination, no longer
// mirrored: 'cairn snapshot delete' removes it.)
func (r *Replicator) mirror(ctx context.Context, st *meta.ReplicaState, added []meta.Snapshot) (gone []string, err error) {
	have, err := r.src.Meta.Snapshots(ctx)
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, s := range have {
		names[s.Name] = true
	}
	var keep []string
	for _, name := range st.Mirrored {
		if names[name] {
			keep = append(keep, name)
		} else {
			gone = append(gone, name)
		}
	}
	for _, s := range added {
		if names[s.Name] && !slices.Contains(keep, s.Name) {
			keep = append(keep, s.Name)
		} else if !names[s.Name] {
			gone = append(gone, s.Name)
		}
	}
	st.Mirrored = keep
	return gone, nil
}

// replicated is st once source snapshot snap is replicated: one more
// cycle, the destination as of snap.
func replicated(st meta.ReplicaState, snap meta.Snapshot) meta.ReplicaState {
	st.Snapshot, st.Epoch, st.Taken = snap.Name, snap.Epoch, snap.Created
	st.Cycles++
	return st
}

// anchor returns the destination's snapshot name, taking it if missing:
// the destination is read-only, so its live state is still the one
// replicated as name.
func (r *Replicator) anchor(ctx context.Context, name string) (meta.Snapshot, error) {
	s, err := r.dst.Meta.SnapshotByName(ctx, name)
	if errors.Is(err, base.ErrNotFound) {
		s, err = r.dst.Meta.CreateSnapshot(ctx, name)
	}
	if err != nil {
		return s, fmt.Errorf("destination anchor snapshot %s: %w", name, err)
	}
	return s, nil
}

// dropStale deletes the pair's snapshots on m other than keep: those of
// interrupted cycles and the ones a finished cycle replaced.
func (r *Replicator) dropStale(ctx context.Context, m *meta.Meta, st meta.ReplicaState, keep string) error {
	snaps, err := m.Snapshots(ctx)
	if err != nil {
		return err
	}
	prefix := meta.ReplicaSnapshotPrefix + st.Pair[:8] + "."
	for _, s := range snaps {
		if strings.HasPrefix(s.Name, prefix) && s.Name != keep {
			if err := m.DeleteSnapshot(ctx, s.Name, nil); err != nil && !errors.Is(err, base.ErrNotFound) {
				return fmt.Errorf("deleting replication snapshot %s: %w", s.Name, err)
			}
		}
	}
	return nil
}

// drainDeletes deletes the objects of the destination's slices that its
// records stopped referencing at least replicaDeleteDelay ago.
func (r *Replicator) drainDeletes(ctx context.Context) {
	ss, err := r.dst.Meta.TakeDeletes(ctx, 4096)
	if err != nil {
		r.log.Warn("listing the destination's pending deletes", "err", err)
		return
	}
	now := time.Now()
	var due []base.Slice
	for _, s := range ss {
		first, ok := r.seen[s.ID]
		if !ok {
			r.seen[s.ID], first = now, now
		}
		if now.Sub(first) >= replicaDeleteDelay {
			due = append(due, s)
		}
	}
	if len(due) == 0 {
		return
	}
	res, err := r.dst.Chunks.DeleteQueued(ctx, r.dst.Meta, due)
	if err != nil {
		r.log.Warn("deleting the destination's freed slices", "err", err)
		return
	}
	for _, id := range res.Finished {
		delete(r.seen, id)
	}
}

// copySlices copies every block object of ss that the destination lacks,
// verified against its checksums on the way, 8 at a time.
func (r *Replicator) copySlices(ctx context.Context, ss []base.Slice) (objects int, bytes int64, err error) {
	type job struct {
		key string
		id  chunk.BlockID
	}
	var jobs []job
	for _, s := range ss {
		for i, n := range chunk.BlockLens(s.Size, r.src.Settings.BlockSize) {
			jobs = append(jobs, job{chunk.BlockKey(s.ID, i, n), chunk.BlockID{Slice: s.ID, Index: i, Length: n}})
		}
	}
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
		sem   = make(chan struct{}, 8)
	)
	for _, j := range jobs {
		mu.Lock()
		stop := first != nil
		mu.Unlock()
		if stop {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			n, err := r.copyObject(ctx, j.key, j.id)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && first == nil {
				first = err
			}
			if err == nil && n >= 0 {
				objects++
				bytes += n
			}
		}()
	}
	wg.Wait()
	r.objTotal.Add(int64(objects))
	r.bytesTotal.Add(bytes)
	return objects, bytes, first
}

// copyObject copies one block object unless the destination has it
// (resumed cycles resend nothing: -1), returning the bytes sent (0 when
// the stores made it themselves).
func (r *Replicator) copyObject(ctx context.Context, key string, id chunk.BlockID) (int64, error) {
	if _, err := r.dst.Objects.Head(ctx, key); err == nil {
		return -1, nil // arrived before (a resumed cycle)
	} else if !errors.Is(err, object.ErrNotFound) {
		return 0, fmt.Errorf("destination object %s: %w", key, err)
	}
	if cp, ok := object.Base(r.dst.objStats).(object.Copier); ok {
		// The same file system, or the same S3 endpoint: no bytes
		// travel through this process (a hard link, a server-side copy).
		done, err := cp.CopyFrom(ctx, object.Base(r.src.objStats), key)
		if done {
			if err != nil {
				return 0, fmt.Errorf("destination object %s from the source's store: %w", key, err)
			}
			r.linked.Add(1)
			return 0, nil
		}
	}
	data, err := object.ReadAll(ctx, r.src.Objects, key)
	if err != nil {
		return 0, fmt.Errorf("source object %s: %w", key, err)
	}
	if _, err := chunk.DecodeBlock(data, id, blockFormat(r.src.Settings)); err != nil {
		return 0, fmt.Errorf("source object %s fails its checks, not copied: %w", key, err)
	}
	if r.limit != nil {
		if err := r.limit.wait(ctx, len(data)); err != nil {
			return 0, err
		}
	}
	if err := r.dst.Objects.Put(ctx, key, data); err != nil {
		return 0, fmt.Errorf("destination object %s: %w", key, err)
	}
	return int64(len(data)), nil
}

func unionKeys(a, b [][]byte) [][]byte {
	if len(b) == 0 {
		return a
	}
	seen := make(map[string]bool, len(a))
	for _, k := range a {
		seen[string(k)] = true
	}
	for _, k := range b {
		if !seen[string(k)] {
			seen[string(k)] = true
			a = append(a, k)
		}
	}
	sort.Slice(a, func(i, j int) bool { return string(a[i]) < string(a[j]) })
	return a
}

// Run runs cycles until ctx ends: each starts early enough that the
// destination stays within MaxOutOfSync of the source, given how long the
// last cycle took; an error pauses the pair (with growing waits, up to a
// minute) until a cycle succeeds again.
func (r *Replicator) Run(ctx context.Context) error {
	backoff := time.Second
	for {
		st, err := r.Cycle(ctx)
		wait := time.Duration(0)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, meta.ErrReplicaMoved) {
				return err
			}
			r.phase.Store("paused: " + err.Error())
			r.log.Warn("replication cycle failed; the pair pauses and tries again", "err", err, "retry_in", backoff)
			wait, backoff = backoff, min(2*backoff, time.Minute)
		} else {
			backoff = time.Second
			wait = nextCycleWait(st, r.o.MaxOutOfSync, time.Now())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// nextCycleWait is how long to wait before the next cycle: half the bound
// after the last replicated snapshot, less what the last cycle took (so
// that a cycle of the same length lands well within the bound), at least
// a tenth of a second.
func nextCycleWait(st meta.ReplicaState, bound time.Duration, now time.Time) time.Duration {
	due := st.Taken.Add(bound/2 - st.LastCycle.Duration)
	return max(due.Sub(now), 100*time.Millisecond)
}

// rateLimit spaces writes so that they average at most rate bytes a
// second.
type rateLimit struct {
	mu   sync.Mutex
	rate float64
	next time.Time
}

func (l *rateLimit) wait(ctx context.Context, n int) error {
	l.mu.Lock()
	now := time.Now()
	at := l.next
	if at.Before(now) {
		at = now
	}
	l.next = at.Add(time.Duration(math.Ceil(float64(n) / l.rate * float64(time.Second))))
	l.mu.Unlock()
	select {
	case <-time.After(time.Until(at)):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// startReplication runs the replicator of a mount (--replicate-to) in the
// background: it opens the destination (again every 30 s while that
// fails: a destination that is down does not keep the volume from being
// mounted) and runs cycles until the returned function is called.
func startReplication(o ReplicateOptions, src *Volume, log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			r, err := OpenReplicator(ctx, o, src)
			if err == nil {
				log.Info("replicating", "to", r.dst.Loc.Display(), "max_out_of_sync", o.MaxOutOfSync)
				fileDone := make(chan struct{})
				go func() { defer close(fileDone); r.WriteStatusFile(ctx) }()
				if err := r.Run(ctx); err != nil {
					log.Error("replication stopped", "err", err)
				}
				<-fileDone
				r.Close()
				return
			}
			log.Error("replication: cannot open the pair; trying again in 30 s", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(30 * time.Second):
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
