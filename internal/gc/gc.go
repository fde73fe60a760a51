// Package gc finds the block objects of a volume that no metadata
// references and, when asked, deletes them and the slices queued for
// deletion. It returns what it found and did as a Report; it prints
// nothing (the daemon's admin verb does) and never decides policy for a
// mount: the mounts' own delete loops (vfs) finish queued deletes while
// clients are mounted, through the same chunk.Store.DeleteQueued.
//
// It sits beside the front ends, above meta and chunk: it may import
// meta, chunk and object, and only the daemon imports it.
package gc

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/chunk"
	"github.com/cairnfs/cairn/internal/meta"
	"github.com/cairnfs/cairn/internal/object"
)

// Meta is what a collection reads and changes in the metadata.
type Meta interface {
	// ResumeSnapshotJobs finishes interrupted snapshot deletions.
	ResumeSnapshotJobs(ctx context.Context, progress func(done int)) error
	// SliceGuard and InFlightSlices name the slices that writes still in
	// flight may own, in any client and in this one.
	SliceGuard(ctx context.Context) (meta.SliceGuard, error)
	InFlightSlices() map[uint64]bool
	// ForEachSlice walks every referenced slice.
	ForEachSlice(ctx context.Context, fn func(meta.SliceUse) error) error
	// TakeDeletes lists the queue of slices waiting for deletion;
	// FinishDeletes (chunk.DeleteQueue) removes slices from it.
	TakeDeletes(ctx context.Context, max int) ([]base.Slice, error)
	chunk.DeleteQueue
	// ListSessions and SessionID tell whether a client is mounted.
	ListSessions(ctx context.Context) ([]meta.SessionInfo, error)
	SessionID() uint64
}

var _ Meta = (*meta.Meta)(nil)

// Chunks deletes the blocks of queued slices and finishes them.
type Chunks interface {
	DeleteQueued(ctx context.Context, q chunk.DeleteQueue, ss []base.Slice) (chunk.QueuedDeletes, error)
}

var _ Chunks = (*chunk.Store)(nil)

// Options says what a collection does.
type Options struct {
	// Delete deletes the orphans found and, when no client is mounted and
	// this process is not one, the slices queued for deletion. Without it
	// Collect only reports.
	Delete bool
	// DataURL names the data store in errors; default objs.String().
	DataURL string
}

// maxQueued bounds the slices queued for deletion that one collection
// reads (and may delete).
const maxQueued = 1 << 30

// Report is what a collection found and did. When Collect returns an
// error, the report holds what was done before it: the fields of the
// steps not reached are zero (Listed false, Deleted short of
// len(Orphans), Queued.Finished nil).
type Report struct {
	// Resumed is the number of changed records pruned by finishing
	// interrupted snapshot deletions, done first so that the versions only
	// they could see stop holding blocks.
	Resumed int
	// Foreign are the keys under the block prefix that are not block
	// objects; they are left alone.
	Foreign []string
	// Listed says the listing of the data store finished, so that the
	// counts below are complete.
	Listed bool
	// Objects and Bytes count the objects under the block prefix.
	Objects, Bytes int64
	// Referenced is the number of slices the metadata references.
	Referenced int
	// Orphans are the block objects of slices nothing references, in key
	// order, and OrphanBytes their total size.
	Orphans     []object.Info
	OrphanBytes int64
	// Pending counts the unreferenced block objects kept because their
	// slice is queued for deletion or may belong to a write in flight.
	Pending int64
	// Deleted is how many orphans were deleted (Options.Delete).
	Deleted int
	// QueuedSlices is the number of slices queued for deletion.
	QueuedSlices int
	// QueuedLeft says the queued slices were left to the delete loops of
	// the mounted clients: a session is recorded, or this process is a
	// mount.
	QueuedLeft bool
	// Queued is what deleting the queued slices did (Options.Delete, no
	// client mounted).
	Queued chunk.QueuedDeletes
}

// Collect lists the block objects in objs that no metadata in m
// references (orphans of writes that never committed, or of deletes that
// did not finish) and, with opts.Delete, deletes them. Slices being
// written by a live client of this volume are never touched. It first
// finishes the snapshot deletions that were interrupted.
//
// With opts.Delete it then deletes the slices queued for deletion (by a
// snapshot deletion or unlinks while no client was mounted) through
// cs.DeleteQueued, when no client could still be reading them: no
// session of any client is recorded and m has none. Otherwise the
// mounts' delete loops remove them after their delay.
//
// It stops at the first error; see Report for what is then filled in.
func Collect(ctx context.Context, m Meta, objs object.Store, cs Chunks, opts Options) (Report, error) {
	var r Report
	resumed := 0
	if err := m.ResumeSnapshotJobs(ctx, func(done int) { resumed = done }); err != nil {
		return r, fmt.Errorf("finishing interrupted snapshot deletions: %w", err)
	}
	r.Resumed = resumed
	// The guard is read first: a slice committed after it is referenced in
	// the scan below, and one handed out after it is above guard.Next.
	guard, err := m.SliceGuard(ctx)
	if err != nil {
		return r, err
	}
	inflight := m.InFlightSlices()
	live := map[uint64]bool{}
	if err := m.ForEachSlice(ctx, func(u meta.SliceUse) error {
		live[u.ID] = true
		return nil
	}); err != nil {
		return r, err
	}
	pd, err := m.TakeDeletes(ctx, maxQueued)
	if err != nil {
		return r, err
	}
	pending := make(map[uint64]bool, len(pd))
	for _, s := range pd {
		pending[s.ID] = true
	}
	err = objs.List(ctx, chunk.KeyPrefix, func(info object.Info) bool {
		r.Objects++
		r.Bytes += info.Size
		id, _, _, perr := chunk.ParseBlockKey(info.Key)
		if perr != nil {
			r.Foreign = append(r.Foreign, info.Key)
			return true
		}
		if live[id] {
			return true
		}
		if pending[id] || inflight[base.SliceNumber(id)] || guard.Protects(id) {
			r.Pending++
			return true
		}
		r.Orphans = append(r.Orphans, info)
		r.OrphanBytes += info.Size
		return true
	})
	if err != nil {
		where := opts.DataURL
		if where == "" {
			where = objs.String()
		}
		return r, fmt.Errorf("listing %s: %w", where, err)
	}
	r.Listed = true
	r.Referenced = len(live)
	sort.Slice(r.Orphans, func(i, j int) bool { return r.Orphans[i].Key < r.Orphans[j].Key })
	if !opts.Delete {
		return r, nil
	}
	for _, o := range r.Orphans {
		if err := objs.Delete(ctx, o.Key); err != nil {
			return r, fmt.Errorf("deleting %s: %w (deleted %d of %d)", o.Key, err, r.Deleted, len(r.Orphans))
		}
		r.Deleted++
	}
	return r, deleteQueued(ctx, m, cs, pd, &r)
}

// deleteQueued deletes the slices pd queued for deletion unless a client
// is mounted; see Collect.
func deleteQueued(ctx context.Context, m Meta, cs Chunks, pd []base.Slice, r *Report) error {
	r.QueuedSlices = len(pd)
	if len(pd) == 0 {
		return nil
	}
	sessions, err := m.ListSessions(ctx)
	if err != nil {
		return err
	}
	if m.SessionID() != 0 || len(sessions) > 0 {
		r.QueuedLeft = true
		return nil
	}
	r.Queued, err = cs.DeleteQueued(ctx, m, pd)
	if err != nil {
		return err
	}
	var errs []error
	for _, f := range r.Queued.Failed {
		errs = append(errs, fmt.Errorf("deleting slice %d: %w", f.ID, f.Err))
	}
	return errors.Join(errs...)
}
