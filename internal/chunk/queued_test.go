package chunk

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/object"
)

// memQueue is a DeleteQueue that records what was finished.
type memQueue struct {
	finished []uint64
	fail     error
}

func (q *memQueue) FinishDeletes(ctx context.Context, ids []uint64) error {
	if q.fail != nil {
		return q.fail
	}
	q.finished = append(q.finished, ids...)
	return nil
}

// refuseDelete fails the deletes of keys under prefix.
type refuseDelete struct {
	object.Store
	prefix string
}

func (r refuseDelete) Delete(ctx context.Context, key string) error {
	if r.prefix != "" && strings.HasPrefix(key, r.prefix) {
		return errInjected
	}
	return r.Store.Delete(ctx, key)
}

// TestDeleteQueued finishes the slices whose blocks are gone, keeps the
// one whose delete fails queued, and finishes nothing when the queue
// refuses.
func TestDeleteQueued(t *testing.T) {
	ctx := context.Background()
	obj := memStore()
	ref := &refuseDelete{Store: obj}
	s := newTestStore(t, ref, newMapCache(), Options{BlockSize: testBS})
	c := newCommitter()
	w := s.NewWriter(c)
	defer w.Close()
	for i := range 3 {
		writeFlush(t, w, int64(i)*base.ChunkSize, fill(testBS+i))
	}
	var ss []base.Slice
	for _, idx := range c.indexes() {
		ss = append(ss, c.chunk(idx)...)
	}
	if len(ss) != 3 {
		t.Fatalf("%d slices", len(ss))
	}
	bad := ss[1]
	k := BlockKey(bad.ID, 0, 1) // ".../<id>_0_1"
	ref.prefix = strings.TrimSuffix(k, "0_1")
	q := &memQueue{}
	r, err := s.DeleteQueued(ctx, q, ss)
	if err != nil {
		t.Fatal(err)
	}
	want := []uint64{ss[0].ID, ss[2].ID}
	if !slices.Equal(r.Finished, want) || !slices.Equal(q.finished, want) {
		t.Fatalf("finished %v (queue %v), want %v", r.Finished, q.finished, want)
	}
	if r.Bytes != uint64(ss[0].Size+ss[2].Size) {
		t.Errorf("bytes %d", r.Bytes)
	}
	if r.BatchErr == nil || len(r.Failed) != 1 || r.Failed[0].ID != bad.ID || !errors.Is(r.Failed[0].Err, errInjected) {
		t.Fatalf("batch error %v, failed %v", r.BatchErr, r.Failed)
	}

	// The bad slice now deletes; the queue refuses to finish it.
	ref.prefix = ""
	q.fail = errors.New("queue down")
	r, err = s.DeleteQueued(ctx, q, []base.Slice{bad})
	if err != q.fail || r.Finished != nil || r.BatchErr != nil {
		t.Fatalf("got %+v, %v", r, err)
	}
	if n := countKeys(t, obj); n != 0 {
		t.Fatalf("%d objects left", n)
	}
	// Nothing deleted: the queue is not called.
	r, err = s.DeleteQueued(ctx, q, nil)
	if err != nil || r.Finished != nil {
		t.Fatalf("got %+v, %v", r, err)
	}
}
