package daemon

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/chunk"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/object/faulty"
)

// TestObjectLatency opens a volume with VolumeOptions.ObjectLatency: every
// data store request waits that long and the wait shows in the object
// request latency of Stats, and it is read ahead as a remote store;
// without it the store is not wrapped, and a negative latency is refused.
func TestObjectLatency(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	url := "pebble://" + dir + "/meta"
	if _, err := Format(ctx, FormatOptions{MetaURL: url, Name: "lat", BlockSize: 64 << 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenVolume(ctx, VolumeOptions{MetaURL: url, ObjectLatency: -time.Millisecond}); err == nil || !strings.Contains(err.Error(), "want zero or more") {
		t.Fatalf("negative latency: %v", err)
	}

	plain, err := OpenVolume(ctx, VolumeOptions{MetaURL: url})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := plain.objStats.Unwrap().(*faulty.Store); ok {
		t.Error("a volume without ObjectLatency has its store wrapped")
	}
	if ra := plain.Chunks.Options().ReadAhead; ra != chunk.DefaultReadAhead {
		t.Errorf("read-ahead on a local directory: %d blocks, want %d", ra, chunk.DefaultReadAhead)
	}
	plain.Close()

	const lat = 30 * time.Millisecond
	vol, err := OpenVolume(ctx, VolumeOptions{MetaURL: url, ObjectLatency: lat})
	if err != nil {
		t.Fatal(err)
	}
	defer vol.Close()
	// A slowed store is read ahead as a remote one.
	if ra := vol.Chunks.Options().ReadAhead; ra != RemoteReadAhead {
		t.Errorf("read-ahead on a slowed store: %d blocks, want %d", ra, RemoteReadAhead)
	}
	start := time.Now()
	if err := vol.Objects.Put(ctx, "x/y", []byte("data")); err != nil {
		t.Fatal(err)
	}
	if _, err := object.ReadAll(ctx, vol.Objects, "x/y"); err != nil {
		t.Fatal(err)
	}
	if _, err := vol.Objects.Head(ctx, "x/y"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 3*lat {
		t.Errorf("put, get and head took %s: want at least 3 x %s", took, lat)
	}
	s := vol.Stats()
	// The get of the volume marker by OpenVolume, then ours.
	for _, k := range []string{"get", "put", "head"} {
		h := s.Object[k].Latency
		if h.Count == 0 || h.Mean() < lat {
			t.Errorf("%s: %d requests, mean latency %s: want at least %s", k, h.Count, h.Mean(), lat)
		}
	}
	if err := vol.Chunks.SyncObjects(ctx); err != nil {
		t.Fatal(err)
	}
}
