package vfs

import (
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/cache"
	"github.com/cairnfs/cairn/internal/chunk"
	"github.com/cairnfs/cairn/internal/kv/memkv"
	"github.com/cairnfs/cairn/internal/meta"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/object/counted"
	"github.com/cairnfs/cairn/internal/object/faulty"
	"github.com/cairnfs/cairn/internal/object/local"
	"github.com/cairnfs/cairn/internal/object/mem"
	"github.com/cairnfs/cairn/internal/object/split"
	"github.com/cairnfs/cairn/internal/testenv"
)

// TestStatFSOfDataStore: a volume without a capacity whose data store is
// a directory on a 48 MiB file system reports that file system's size and
// free space (what df shows), through the wrappers the daemon puts around
// the store; with a capacity it reports the capacity, and over a store
// that cannot tell (S3, here memory) the virtual size.
func TestStatFSOfDataStore(t *testing.T) {
	dir := testenv.Tmpfs(t, "48m")
	ls, err := local.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ls.Close() })
	wrapped := split.New(counted.New(faulty.New(ls, 1)), mem.New(), chunk.InlineBlock)
	statfs := func(capacity uint64, obj object.Store, write int) base.StatFS {
		t.Helper()
		store := memkv.New()
		if err := meta.Format(ctx, store, meta.Settings{Name: "t", Capacity: capacity}, false); err != nil {
			t.Fatal(err)
		}
		m, err := meta.Open(ctx, store, meta.Options{})
		if err != nil {
			t.Fatal(err)
		}
		cs, err := chunk.New(obj, cache.NewMemory(8<<20), chunk.Options{})
		if err != nil {
			t.Fatal(err)
		}
		v := New(m, cs, Options{FlushInterval: time.Hour})
		defer func() {
			if err := v.Close(ctx); err != nil {
				t.Errorf("close: %v", err)
			}
			m.Close()
		}()
		if write > 0 {
			_, _, fh, en := v.Create(ctx, root, base.RootIno, "f", 0o644, 0, syscall.O_RDWR)
			if en != 0 {
				t.Fatal(en)
			}
			if _, en := v.Write(ctx, fh, 0, make([]byte, write)); en != 0 {
				t.Fatal(en)
			}
			if en := v.Release(ctx, fh); en != 0 {
				t.Fatal(en)
			}
		}
		s, en := v.StatFS(ctx, 0)
		if en != 0 {
			t.Fatal(en)
		}
		return s
	}
	empty := statfs(0, wrapped, 0)
	if empty.TotalBytes != 48<<20 || empty.AvailBytes > empty.TotalBytes || empty.AvailBytes < 47<<20 {
		t.Fatalf("volume on a 48 MiB store: %+v", empty)
	}
	full := statfs(0, wrapped, 16<<20)
	if full.TotalBytes != 48<<20 || empty.AvailBytes-full.AvailBytes < 16<<20 || full.UsedBytes != 16<<20 {
		t.Fatalf("after writing 16 MiB: %+v (empty: %+v)", full, empty)
	}
	if s := statfs(1<<30, wrapped, 0); s.TotalBytes != 1<<30 {
		t.Fatalf("volume with a 1 GiB capacity: %+v", s)
	}
	if s := statfs(0, counted.New(mem.New()), 0); s.TotalBytes != meta.VirtualCapacity {
		t.Fatalf("volume on a store that cannot tell its space: %+v", s)
	}
}
