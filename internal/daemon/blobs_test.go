package daemon

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/chunk"
	"github.com/cairnfs/cairn/internal/kv/memkv"
	"github.com/cairnfs/cairn/internal/meta"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/object/objtest"
	"github.com/cairnfs/cairn/internal/vfs"
)

// The metadata engine's blobs keep the object.Store contract.
func TestMetaBlobsConformance(t *testing.T) {
	objtest.Run(t, func(t *testing.T) object.Store { return &metaBlobs{m: newBlobMeta(t)} })
}

// newBlobMeta returns a Meta over a new in-memory volume with an inline
// limit, closed when t ends.
func newBlobMeta(t *testing.T) *meta.Meta {
	t.Helper()
	ctx := context.Background()
	store := memkv.New()
	if err := meta.Format(ctx, store, meta.Settings{Name: "blobs", InlineMax: 4096}, false); err != nil {
		t.Fatal(err)
	}
	m, err := meta.Open(ctx, store, meta.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// TestListBlobsPages lists more blobs than one page of ListBlobs, from a
// prefix and after stopping.
func TestListBlobsPages(t *testing.T) {
	ctx := context.Background()
	m := newBlobMeta(t)
	for i := range 2500 {
		if err := m.PutBlob(ctx, fmt.Sprintf("p/%05d", i), make([]byte, i%7)); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.PutBlob(ctx, "q", []byte("other prefix")); err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := m.ListBlobs(ctx, "p/", func(key string, size int64) bool {
		if want := fmt.Sprintf("p/%05d", n); key != want || size != int64(n%7) {
			t.Fatalf("blob %d: %s (%d bytes), want %s (%d)", n, key, size, want, n%7)
		}
		n++
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if n != 2500 {
		t.Fatalf("listed %d blobs, want 2500", n)
	}
	n = 0
	if err := m.ListBlobs(ctx, "", func(string, int64) bool { n++; return n < 1200 }); err != nil || n != 1200 {
		t.Fatalf("stopped listing: %d calls, %v", n, err)
	}
}

// TestInlineBlocks: on a volume with an inline limit, files written in one
// piece up to the limit cost no object PUT and read back after a restart;
// larger ones go to the data store; freeing a small file deletes its blob;
// gc finds and deletes an orphan blob; fsck is clean.
func TestInlineBlocks(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	url := "pebble://" + dir + "/meta"
	const limit = 16 << 10
	s, err := Format(ctx, FormatOptions{MetaURL: url, Name: "inl", BlockSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if s.InlineMax != limit || s.FormatVersion != meta.CurrentFormatVersion {
		t.Fatalf("default format: inline limit %d, format version %d", s.InlineMax, s.FormatVersion)
	}
	root := &base.Caller{}
	files := map[string][]byte{
		"one-byte": []byte("x"),
		"small":    bytes.Repeat([]byte("small file "), 500),
		"at-limit": bytes.Repeat([]byte{7}, limit),
		"above":    bytes.Repeat([]byte{8}, limit+1),
		"large":    bytes.Repeat([]byte("large file "), (3<<20)/11),
	}
	// one-byte, small, at-limit, and the append to small below
	const inline = 4

	vol, err := OpenVolume(ctx, VolumeOptions{MetaURL: url})
	if err != nil {
		t.Fatal(err)
	}
	v := vfs.New(vol.Meta, vol.Chunks, vfs.Options{})
	inos := map[string]base.Ino{}
	for name, data := range files {
		ino, _, fh, errno := v.Create(ctx, root, base.RootIno, name, 0o644, 0, syscall.O_RDWR)
		if errno != 0 {
			t.Fatal(errno)
		}
		inos[name] = ino
		if _, errno := v.Write(ctx, fh, 0, data); errno != 0 {
			t.Fatal(errno)
		}
		if errno := v.Fsync(ctx, fh); errno != 0 {
			t.Fatal(errno)
		}
		if errno := v.Release(ctx, fh); errno != 0 {
			t.Fatal(errno)
		}
	}
	// A small write into a large file is not inline (it would cost the
	// metadata engine a transaction per random write); an append that
	// keeps a file within the limit is.
	for _, w := range []struct {
		name string
		off  int
		data []byte
	}{
		{"large", 2 << 20, bytes.Repeat([]byte("R"), 4096)},
		{"small", len(files["small"]), []byte("appended")},
	} {
		fh, errno := v.Open(ctx, root, inos[w.name], syscall.O_RDWR)
		if errno != 0 {
			t.Fatal(errno)
		}
		if _, errno := v.Write(ctx, fh, int64(w.off), w.data); errno != 0 {
			t.Fatal(errno)
		}
		if errno := v.Release(ctx, fh); errno != 0 {
			t.Fatal(errno)
		}
		f := files[w.name]
		files[w.name] = append(f[:w.off:w.off], append(w.data, f[min(len(f), w.off+len(w.data)):]...)...)
	}
	st := vol.Stats()
	// "above" is one object, "large" three (1 MiB blocks) and the write
	// into it a fourth.
	const objects = 5
	if puts := st.Object["put"].Requests; puts != objects {
		t.Errorf("object puts = %d, want %d (the small files' blocks are inline)", puts, objects)
	}
	// Each inline block went into the metadata engine with its slice, in
	// the slice's commit, not by a put of its own.
	if puts := st.Inline["put"].Requests; puts != 0 {
		t.Errorf("inline puts = %d, want 0 (the blocks are committed with their slices)", puts)
	}
	if n := st.Chunk.InlineCommits; n != inline {
		t.Errorf("inline blocks committed with their slices = %d, want %d", n, inline)
	}
	var chunkObjects int
	if err := vol.objStats.List(ctx, chunk.KeyPrefix, func(info object.Info) bool {
		chunkObjects++
		if chunk.InlineBlock(info.Key) {
			t.Errorf("inline block %s is in the data store", info.Key)
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if chunkObjects != objects {
		t.Errorf("%d block objects in the data store, want %d", chunkObjects, objects)
	}
	blobs := listBlobs(t, vol)
	if len(blobs) != inline {
		t.Fatalf("blobs %v, want %d", blobs, inline)
	}
	_ = v.Close(ctx)
	vol.Close()

	// After a restart every file reads back, the small ones from the
	// metadata engine alone.
	vol, err = OpenVolume(ctx, VolumeOptions{MetaURL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer vol.Close()
	v = vfs.New(vol.Meta, vol.Chunks, vfs.Options{DeleteDelay: time.Millisecond})
	defer v.Close(ctx)
	for name, data := range files {
		fh, errno := v.Open(ctx, root, inos[name], syscall.O_RDONLY)
		if errno != 0 {
			t.Fatal(errno)
		}
		buf := make([]byte, len(data)+10)
		n, errno := v.Read(ctx, fh, 0, buf)
		if errno != 0 || !bytes.Equal(buf[:n], data) {
			t.Fatalf("%s read back %d bytes (%v), want %d", name, n, errno, len(data))
		}
		// A range inside the block: a partial read of the blob.
		if len(data) > 100 {
			n, errno = v.Read(ctx, fh, 37, buf[:50])
			if errno != 0 || !bytes.Equal(buf[:n], data[37:87]) {
				t.Fatalf("%s range read: %d bytes, %v", name, n, errno)
			}
		}
		v.Release(ctx, fh)
	}
	if gets := vol.Stats().Object["get"].Requests + vol.Stats().Object["range_get"].Requests; gets == 0 {
		t.Errorf("no object gets: the large files were not read from the data store")
	}
	var out strings.Builder
	if err := Fsck(ctx, vol, &out); err != nil {
		t.Fatalf("fsck: %v\n%s", err, out.String())
	}

	// Unlinking a small file frees its two slices and deletes their blobs.
	before := listBlobs(t, vol)
	if errno := v.Unlink(ctx, root, base.RootIno, "small"); errno != 0 {
		t.Fatal(errno)
	}
	for deadline := time.Now().Add(10 * time.Second); len(listBlobs(t, vol)) != inline-2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("blob of the unlinked file not deleted: %v", listBlobs(t, vol))
		}
	}
	if err := vol.Meta.FlushReleases(ctx); err != nil {
		t.Fatal(err)
	}

	// A blob whose slice was never committed (a client that died between
	// the put and the commit) is an orphan to gc, and only it. The freed
	// slice's key stands in for one: its id is below the id counter and
	// reserved by no session.
	var orphan string
	for key := range before {
		if !listBlobs(t, vol)[key] && orphan == "" {
			orphan = key
		}
	}
	if err := vol.Objects.Put(ctx, orphan, []byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := GC(ctx, vol, true, &out); err != nil {
		t.Fatalf("gc: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "orphan "+orphan) || !strings.Contains(out.String(), "1 orphans") {
		t.Fatalf("gc did not report the orphan blob:\n%s", out.String())
	}
	left := listBlobs(t, vol)
	if len(left) != inline-2 || left[orphan] {
		t.Fatalf("after gc: blobs %v", left)
	}
	out.Reset()
	if err := Fsck(ctx, vol, &out); err != nil {
		t.Fatalf("fsck after gc: %v\n%s", err, out.String())
	}
}

func listBlobs(t *testing.T, vol *Volume) map[string]bool {
	t.Helper()
	got := map[string]bool{}
	if err := vol.Meta.ListBlobs(context.Background(), "", func(key string, _ int64) bool {
		got[key] = true
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

// newInlineVolume formats and opens an embedded volume with the default
// inline limit, with a vfs over it whose freed slices are deleted at once;
// both are closed when t ends.
func newInlineVolume(t *testing.T, name string) (*Volume, *vfs.VFS) {
	t.Helper()
	ctx := context.Background()
	vol, _ := newVolume(t, name)
	v := vfs.New(vol.Meta, vol.Chunks, vfs.Options{DeleteDelay: time.Millisecond})
	t.Cleanup(func() { v.Close(ctx) })
	return vol, v
}

// TestInlineBlocksSnapshots: a snapshot keeps the blob of a small file
// alive after the file is overwritten and deleted; a restore from the
// snapshot shares it; the blob is deleted only when nothing references
// its slice any more.
func TestInlineBlocksSnapshots(t *testing.T) {
	ctx := context.Background()
	vol, v := newInlineVolume(t, "snap")
	root := &base.Caller{}
	var out strings.Builder
	write := func(name string, ino base.Ino, data string) base.Ino {
		t.Helper()
		var fh uint64
		var errno syscall.Errno
		if ino == 0 {
			ino, _, fh, errno = v.Create(ctx, root, base.RootIno, name, 0o644, 0, syscall.O_RDWR)
		} else {
			fh, errno = v.Open(ctx, root, ino, syscall.O_RDWR)
		}
		if errno != 0 {
			t.Fatal(errno)
		}
		if _, errno := v.Write(ctx, fh, 0, []byte(data)); errno != 0 {
			t.Fatal(errno)
		}
		if errno := v.Release(ctx, fh); errno != 0 {
			t.Fatal(errno)
		}
		return ino
	}
	read := func(ino base.Ino) string {
		t.Helper()
		fh, errno := v.Open(ctx, root, ino, syscall.O_RDONLY)
		if errno != 0 {
			t.Fatal(errno)
		}
		defer v.Release(ctx, fh)
		buf := make([]byte, 100)
		n, errno := v.Read(ctx, fh, 0, buf)
		if errno != 0 {
			t.Fatal(errno)
		}
		return string(buf[:n])
	}
	waitBlobs := func(want int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); len(listBlobs(t, vol)) != want; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("blobs %v, want %d", listBlobs(t, vol), want)
			}
		}
	}

	f := write("f", 0, "version one")
	if err := SnapshotCreate(ctx, vol, "s1", &out); err != nil {
		t.Fatal(err)
	}
	write("", f, "version two")
	waitBlobs(2) // the snapshot still references the first slice
	if err := SnapshotRestore(ctx, vol, "s1", "/f", "/g", &out); err != nil {
		t.Fatal(err)
	}
	if errno := v.Unlink(ctx, root, base.RootIno, "f"); errno != 0 {
		t.Fatal(errno)
	}
	if err := vol.Meta.FlushReleases(ctx); err != nil {
		t.Fatal(err)
	}
	waitBlobs(1) // "version two" is freed; "version one" is the snapshot's and g's
	g, _, errno := v.Lookup(ctx, root, base.RootIno, "g")
	if errno != 0 {
		t.Fatal(errno)
	}
	if got := read(g); got != "version one" {
		t.Fatalf("restored file reads %q", got)
	}
	if err := SnapshotDelete(ctx, vol, "s1", &out); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	waitBlobs(1) // still g's
	if got := read(g); got != "version one" {
		t.Fatalf("restored file after the snapshot's deletion reads %q", got)
	}
	if errno := v.Unlink(ctx, root, base.RootIno, "g"); errno != 0 {
		t.Fatal(errno)
	}
	if err := vol.Meta.FlushReleases(ctx); err != nil {
		t.Fatal(err)
	}
	waitBlobs(0)
	out.Reset()
	if err := Fsck(ctx, vol, &out); err != nil {
		t.Fatalf("fsck: %v\n%s", err, out.String())
	}
	out.Reset()
	if err := GC(ctx, vol, false, &out); err != nil || !strings.Contains(out.String(), " 0 orphans") {
		t.Fatalf("gc: %v\n%s", err, out.String())
	}
}

// TestInlineCompaction: a small file written in more pieces than the
// compaction threshold is compacted into an inline slice, not an object.
func TestInlineCompaction(t *testing.T) {
	ctx := context.Background()
	vol, v := newInlineVolume(t, "compact")
	root := &base.Caller{}
	ino, _, fh, errno := v.Create(ctx, root, base.RootIno, "log", 0o644, 0, syscall.O_RDWR)
	if errno != 0 {
		t.Fatal(errno)
	}
	var want []byte
	for i := range 80 {
		line := fmt.Appendf(nil, "line %03d of a log written one line at a time\n", i)
		if _, errno := v.Write(ctx, fh, int64(len(want)), line); errno != 0 {
			t.Fatal(errno)
		}
		want = append(want, line...)
		if errno := v.Fsync(ctx, fh); errno != 0 { // one slice per line
			t.Fatal(errno)
		}
	}
	if errno := v.Release(ctx, fh); errno != 0 {
		t.Fatal(errno)
	}
	var slices []base.Slice
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if slices, err = vol.Meta.ReadChunk(ctx, ino, 0); err != nil {
			t.Fatal(err)
		}
		if len(slices) < 64 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not compacted: %d slices", len(slices))
		}
	}
	for _, s := range slices {
		if s.ID&base.InlineBit == 0 {
			t.Errorf("slice %+v of the compacted small file is not inline", s)
		}
	}
	if puts := vol.Stats().Object["put"].Requests; puts != 0 {
		t.Errorf("%d object puts for a small file", puts)
	}
	fh, errno = v.Open(ctx, root, ino, syscall.O_RDONLY)
	if errno != 0 {
		t.Fatal(errno)
	}
	defer v.Release(ctx, fh)
	buf := make([]byte, len(want)+10)
	if n, errno := v.Read(ctx, fh, 0, buf); errno != 0 || !bytes.Equal(buf[:n], want) {
		t.Fatalf("read back %d bytes (%v), want %d", n, errno, len(want))
	}
}
