package memkv_test

import (
	"context"
	"testing"

	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/kv/kvtest"
	"github.com/cairnfs/cairn/internal/kv/memkv"
)

func TestConformance(t *testing.T) {
	kvtest.Run(t, func(t *testing.T) kv.Store { return memkv.New() })
}

func BenchmarkUpdate(b *testing.B) {
	s := memkv.New()
	defer s.Close()
	key, value := []byte("key"), make([]byte, 100)
	ctx := context.Background()
	for b.Loop() {
		err := s.Update(ctx, func(tx kv.Txn) error {
			tx.Set(key, value)
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}
