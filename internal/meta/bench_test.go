package meta

import (
	"fmt"
	"testing"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv/pebble"
)

// benchMeta formats an embedded (Pebble) volume and opens a client on it
// with the daemon's options for such a volume, so that the benchmarks
// measure what a mount's metadata operations cost, without FUSE.
func benchMeta(b *testing.B) *Meta {
	b.Helper()
	store, err := pebble.Open(b.TempDir(), pebble.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = store.Close() })
	if err := Format(ctx, store, Settings{Name: "bench"}, false); err != nil {
		b.Fatal(err)
	}
	m, err := Open(ctx, store, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = m.Close() })
	return m
}

// benchFiles creates n files in a new directory; with size > 0 each gets
// one inline slice of that many bytes, stored with its block, as the data
// path writes a small file.
func benchFiles(b *testing.B, m *Meta, n, size int) (base.Ino, []string) {
	b.Helper()
	dir := mkdir(b, m, root, base.RootIno, fmt.Sprintf("d%d", size))
	blob := make([]byte, size)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("f%d", i)
		ino := create(b, m, root, dir, names[i])
		if size == 0 {
			continue
		}
		id, err := m.NewSliceID(ctx)
		if err != nil {
			b.Fatal(err)
		}
		id |= base.InlineBit
		s := base.Slice{ID: id, Size: uint32(size), Len: uint32(size)}
		key := fmt.Sprintf("chunks/%d_0_%d", id, size)
		if _, err := m.WriteSlices(ctx, ino, []SliceWrite{{Slice: s, BlobKey: key, Blob: blob}}, 1); err != nil {
			b.Fatal(err)
		}
	}
	return dir, names
}

// BenchmarkCreate measures a create (Mknod of a regular file) on Pebble.
func BenchmarkCreate(b *testing.B) {
	m := benchMeta(b)
	dir := mkdir(b, m, root, base.RootIno, "d")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, _, err := m.Mknod(ctx, root, dir, fmt.Sprintf("f%d", i), base.TypeFile, 0o644, 0, 0, ""); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUnlink measures unlinking an empty file and a small one (one
// 4 KiB inline slice) on Pebble.
func BenchmarkUnlink(b *testing.B) {
	for _, size := range []int{0, 4096} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			m := benchMeta(b)
			dir, names := benchFiles(b, m, b.N, size)
			b.ReportAllocs()
			b.ResetTimer()
			for _, name := range names {
				if err := m.Unlink(ctx, root, dir, name); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
