package local_test

import (
	"context"
	"testing"

	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/object/local"
	"github.com/cairnfs/cairn/internal/testenv"
)

// TestSpace: a store in a 48 MiB file system reports its size, and the
// space its objects take.
func TestSpace(t *testing.T) {
	ctx := context.Background()
	s, err := local.Open(testenv.Tmpfs(t, "48m"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	before, err := object.SpaceOf(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if before.Total != 48<<20 || before.Avail > before.Free || before.Free > before.Total || before.Avail < 47<<20 {
		t.Fatalf("space of an empty 48 MiB tmpfs: %+v", before)
	}
	if err := s.Put(ctx, "a/b", make([]byte, 8<<20)); err != nil {
		t.Fatal(err)
	}
	after, err := s.Space(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.Total != before.Total || before.Avail-after.Avail < 8<<20 {
		t.Fatalf("an 8 MiB object took %d bytes: %+v, then %+v", before.Avail-after.Avail, before, after)
	}
}
