package gc

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/chunk"
	"github.com/cairnfs/cairn/internal/meta"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/object/mem"
)

// fakeMeta references live slices, queues queued, and guards ids from
// next on.
type fakeMeta struct {
	live     []uint64
	queued   []base.Slice
	next     uint64
	sessions int
	finished []uint64
}

func (f *fakeMeta) ResumeSnapshotJobs(ctx context.Context, progress func(int)) error {
	progress(3)
	return nil
}
func (f *fakeMeta) SliceGuard(ctx context.Context) (meta.SliceGuard, error) {
	return meta.SliceGuard{Next: f.next}, nil
}
func (f *fakeMeta) InFlightSlices() map[uint64]bool { return nil }
func (f *fakeMeta) ForEachSlice(ctx context.Context, fn func(meta.SliceUse) error) error {
	for _, id := range f.live {
		if err := fn(meta.SliceUse{ID: id}); err != nil {
			return err
		}
	}
	return nil
}
func (f *fakeMeta) TakeDeletes(ctx context.Context, max int) ([]base.Slice, error) {
	return f.queued, nil
}
func (f *fakeMeta) FinishDeletes(ctx context.Context, ids []uint64) error {
	f.finished = append(f.finished, ids...)
	return nil
}
func (f *fakeMeta) ListSessions(ctx context.Context) ([]meta.SessionInfo, error) {
	return make([]meta.SessionInfo, f.sessions), nil
}
func (f *fakeMeta) SessionID() uint64 { return 0 }

// fakeChunks deletes queued slices by finishing them, failing fail.
type fakeChunks struct{ fail uint64 }

func (c fakeChunks) DeleteQueued(ctx context.Context, q chunk.DeleteQueue, ss []base.Slice) (chunk.QueuedDeletes, error) {
	var r chunk.QueuedDeletes
	for _, s := range ss {
		if s.ID == c.fail {
			r.Failed = append(r.Failed, chunk.SliceError{ID: s.ID, Err: errors.New("refused")})
			continue
		}
		r.Finished = append(r.Finished, s.ID)
		r.Bytes += uint64(s.Size)
	}
	return r, q.FinishDeletes(ctx, r.Finished)
}

func put(t *testing.T, s object.Store, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if err := s.Put(context.Background(), k, []byte("0123456789")); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCollect(t *testing.T) {
	ctx := context.Background()
	objs := mem.New()
	live, orphan, queued, guarded := chunk.BlockKey(1, 0, 10), chunk.BlockKey(2, 0, 10), chunk.BlockKey(3, 0, 10), chunk.BlockKey(9, 0, 10)
	put(t, objs, live, orphan, queued, guarded, chunk.KeyPrefix+"stray")
	m := &fakeMeta{live: []uint64{1}, queued: []base.Slice{{ID: 3, Size: 10}}, next: 5}

	r, err := Collect(ctx, m, objs, fakeChunks{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := Report{Resumed: 3, Foreign: []string{chunk.KeyPrefix + "stray"}, Listed: true, Objects: 5, Bytes: 50,
		Referenced: 1, Orphans: []object.Info{{Key: orphan, Size: 10}}, OrphanBytes: 10, Pending: 2}
	if !equal(r, want) {
		t.Fatalf("report\n%+v\nwant\n%+v", r, want)
	}
	if _, err := objs.Head(ctx, orphan); err != nil || m.finished != nil {
		t.Fatalf("a report-only collection deleted: %v, finished %v", err, m.finished)
	}

	// A mounted client keeps the queued slices to itself.
	m.sessions = 1
	r, err = Collect(ctx, m, objs, fakeChunks{}, Options{Delete: true})
	if err != nil || r.Deleted != 1 || !r.QueuedLeft || r.QueuedSlices != 1 || m.finished != nil {
		t.Fatalf("got %+v, %v; finished %v", r, err, m.finished)
	}
	if _, err := objs.Head(ctx, orphan); !errors.Is(err, object.ErrNotFound) {
		t.Fatalf("orphan left: %v", err)
	}

	// No client mounted: the queued slices are deleted and finished.
	m.sessions = 0
	r, err = Collect(ctx, m, objs, fakeChunks{}, Options{Delete: true})
	if err != nil || r.QueuedLeft || !slices.Equal(r.Queued.Finished, []uint64{3}) || !slices.Equal(m.finished, []uint64{3}) {
		t.Fatalf("got %+v, %v; finished %v", r, err, m.finished)
	}

	// A slice that cannot be deleted is an error, and stays queued.
	m.finished = nil
	r, err = Collect(ctx, m, objs, fakeChunks{fail: 3}, Options{Delete: true})
	if err == nil || len(r.Queued.Failed) != 1 || m.finished != nil {
		t.Fatalf("got %+v, %v; finished %v", r, err, m.finished)
	}
}

func equal(a, b Report) bool {
	return a.Resumed == b.Resumed && slices.Equal(a.Foreign, b.Foreign) && a.Listed == b.Listed &&
		a.Objects == b.Objects && a.Bytes == b.Bytes && a.Referenced == b.Referenced &&
		slices.Equal(a.Orphans, b.Orphans) && a.OrphanBytes == b.OrphanBytes && a.Pending == b.Pending &&
		a.Deleted == b.Deleted && a.QueuedSlices == b.QueuedSlices && a.QueuedLeft == b.QueuedLeft
}

// TestCollectOnlyBlocks: a collection looks only below the block prefix:
// what else the data store holds (the volume's marker, the metadata
// backups the daemon keeps under cairn/backups/) is neither listed,
// counted, reported nor deleted, however it is named.
func TestCollectOnlyBlocks(t *testing.T) {
	ctx := context.Background()
	objs := &listRecorder{Store: mem.New()}
	others := []string{"cairn/volume.json", "cairn/backups/20300101T000000.000Z-1a2b3c4d-auto.cdump", "cairn/backups/stray", "zzz"}
	orphan := chunk.BlockKey(2, 0, 10)
	put(t, objs, append([]string{orphan}, others...)...)
	r, err := Collect(ctx, &fakeMeta{next: 5}, objs, fakeChunks{}, Options{Delete: true})
	if err != nil || r.Objects != 1 || r.Deleted != 1 || len(r.Foreign) != 0 {
		t.Fatalf("got %+v, %v", r, err)
	}
	for _, k := range others {
		if _, err := objs.Head(ctx, k); err != nil {
			t.Errorf("%s: %v", k, err)
		}
	}
	if !slices.Equal(objs.prefixes, []string{chunk.KeyPrefix}) {
		t.Errorf("listed prefixes %q, want only %q", objs.prefixes, chunk.KeyPrefix)
	}
}

// listRecorder records the prefixes listed.
type listRecorder struct {
	*mem.Store
	prefixes []string
}

func (l *listRecorder) List(ctx context.Context, prefix string, fn func(object.Info) bool) error {
	l.prefixes = append(l.prefixes, prefix)
	return l.Store.List(ctx, prefix, fn)
}
