package object_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/object/mem"
)

// batching is a store with DeleteMany that records its batch sizes.
type batching struct {
	*mem.Store
	batches []int
}

func (b *batching) DeleteMany(ctx context.Context, keys []string) error {
	b.batches = append(b.batches, len(keys))
	for _, k := range keys {
		if err := b.Delete(ctx, k); err != nil {
			return err
		}
	}
	return nil
}

func TestDeleteAll(t *testing.T) {
	ctx := context.Background()
	keys := make([]string, 2*object.MaxBatchDelete+5)
	for _, s := range []object.Store{mem.New(), &batching{Store: mem.New()}} {
		for i := range keys {
			keys[i] = fmt.Sprintf("k/%d", i)
			if err := s.Put(ctx, keys[i], nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := object.DeleteAll(ctx, s, keys); err != nil {
			t.Fatal(err)
		}
		n := 0
		if err := s.List(ctx, "", func(object.Info) bool { n++; return true }); err != nil || n != 0 {
			t.Fatalf("%d objects left (%v)", n, err)
		}
		if b, ok := s.(*batching); ok && fmt.Sprint(b.batches) != fmt.Sprint([]int{1000, 1000, 5}) {
			t.Fatalf("batches %v", b.batches)
		}
	}
}
