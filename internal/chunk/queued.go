package chunk

import (
	"context"

	"github.com/cairnfs/cairn/internal/base"
)

// DeleteQueue is the metadata side of deleting slices: the queue of
// slices waiting for their blocks to be deleted (meta.Meta implements it).
// FinishDeletes removes ids from the queue; it is called only with slices
// whose blocks are all gone, and repeating it for an id already removed
// is fine.
type DeleteQueue interface {
	FinishDeletes(ctx context.Context, ids []uint64) error
}

// SliceError is a slice whose blocks could not be deleted.
type SliceError struct {
	ID  uint64
	Err error
}

// QueuedDeletes is what DeleteQueued did.
type QueuedDeletes struct {
	// Finished are the slices whose blocks were deleted and which were
	// removed from the queue, and Bytes their total size.
	Finished []uint64
	Bytes    uint64
	// BatchErr is why deleting all the slices in batches failed, after
	// which they were deleted one at a time; nil when the batches
	// succeeded.
	BatchErr error
	// Failed are the slices deleted one at a time that failed; they stay
	// queued, to be tried again later.
	Failed []SliceError
}

// DeleteQueued deletes the blocks of ss, slices taken from q's queue of
// pending deletes, and then removes from q those whose blocks are gone.
// It is the one way both the mounts' background delete loop and `cairn gc`
// finish queued deletes: blocks first, then the queue record, so a crash
// in between leaves a record whose blocks are deleted again (deleting a
// missing block is fine), never a block nothing points at.
//
// It deletes in batches (DeleteSlices); when that fails it deletes one
// slice at a time so that one bad slice does not hold back the others.
// A slice that fails is reported in Failed and stays queued. The error is
// that of q.FinishDeletes, in which case Finished is nil: the blocks are
// gone but the records stay queued and a later call finishes them. q is
// not called when no slice was deleted.
func (s *Store) DeleteQueued(ctx context.Context, q DeleteQueue, ss []base.Slice) (QueuedDeletes, error) {
	var r QueuedDeletes
	var done []base.Slice
	if err := s.DeleteSlices(ctx, ss); err == nil {
		done = ss
	} else {
		r.BatchErr = err
		for _, sl := range ss {
			if err := s.DeleteSlice(ctx, sl.ID, sl.Size); err != nil {
				r.Failed = append(r.Failed, SliceError{ID: sl.ID, Err: err})
				continue
			}
			done = append(done, sl)
		}
	}
	if len(done) == 0 {
		return r, nil
	}
	ids := make([]uint64, 0, len(done))
	var bytes uint64
	for _, sl := range done {
		ids = append(ids, sl.ID)
		bytes += uint64(sl.Size)
	}
	if err := q.FinishDeletes(ctx, ids); err != nil {
		return r, err
	}
	r.Finished, r.Bytes = ids, bytes
	return r, nil
}
