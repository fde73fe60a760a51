package counted_test

import (
	"context"
	"testing"

	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/object/counted"
	"github.com/cairnfs/cairn/internal/object/mem"
	"github.com/cairnfs/cairn/internal/object/objtest"
)

func TestConformance(t *testing.T) {
	objtest.Run(t, func(*testing.T) object.Store { return counted.New(mem.New()) })
}

func TestCounts(t *testing.T) {
	ctx := context.Background()
	s := counted.New(mem.New())
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.Put(ctx, "a", make([]byte, 100)))
	must(s.Put(ctx, "b", make([]byte, 50)))
	_, err := s.Get(ctx, "a", 0, -1)
	must(err)
	_, err = s.Get(ctx, "a", 10, 20)
	must(err)
	if _, err := s.Get(ctx, "missing", 0, -1); err == nil {
		t.Fatal("Get of a missing key succeeded")
	}
	must(s.Delete(ctx, "b"))
	must(s.List(ctx, "", func(object.Info) bool { return true }))
	st := s.Stats()
	for _, tc := range []struct {
		kind                    string
		requests, errors, bytes int64
	}{
		{"put", 2, 0, 150},
		{"get", 2, 1, 100},
		{"range_get", 1, 0, 20},
		{"delete", 1, 0, 0},
		{"list", 1, 0, 0},
		{"head", 0, 0, 0},
	} {
		got := st[tc.kind]
		if got.Requests != tc.requests || got.Errors != tc.errors || got.Bytes != tc.bytes || got.Latency.Count != tc.requests {
			t.Errorf("%s: %+v, want %d requests, %d errors, %d bytes", tc.kind, got, tc.requests, tc.errors, tc.bytes)
		}
	}
}
