package vfs

import (
	"bytes"
	"log/slog"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/cache"
	"github.com/cairnfs/cairn/internal/chunk"
	"github.com/cairnfs/cairn/internal/kv/memkv"
	"github.com/cairnfs/cairn/internal/meta"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/object/mem"
	"github.com/cairnfs/cairn/internal/testenv"
)

// newLoggedEnv returns a VFS over obj whose vfs and chunk layers log to
// logs, with a fresh memory cache.
func newLoggedEnv(t *testing.T, store *memkv.Store, obj object.Store, logs *testenv.LogBuffer) *VFS {
	t.Helper()
	log := slog.New(slog.NewTextHandler(logs, nil))
	m, err := meta.Open(ctx, store, meta.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := chunk.New(obj, cache.NewMemory(8<<20), chunk.Options{BlockSize: 1 << 20, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	v := New(m, cs, Options{Logger: log, FlushInterval: time.Hour})
	t.Cleanup(func() {
		if err := v.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
		m.Close()
	})
	return v
}

// TestSwappedBlockEIO: file A's block object copied over file B's (same
// length) makes reads of B fail with EIO, not return A's bytes; a pass
// over B in 4 KiB reads logs one error line, naming B's inode and the
// object.
func TestSwappedBlockEIO(t *testing.T) {
	store := memkv.New()
	if err := meta.Format(ctx, store, meta.Settings{Name: "t", BlockSize: 1 << 20}, false); err != nil {
		t.Fatal(err)
	}
	obj := mem.New()
	var logs testenv.LogBuffer
	v := newLoggedEnv(t, store, obj, &logs)
	const size = 1 << 20
	a, b := bytes.Repeat([]byte("A"), size), bytes.Repeat([]byte("B"), size)
	inos := map[string]base.Ino{}
	for name, data := range map[string][]byte{"a": a, "b": b} {
		ino, _, fh, en := v.Create(ctx, root, base.RootIno, name, 0o644, 0, syscall.O_RDWR)
		if en != 0 {
			t.Fatal(en)
		}
		inos[name] = ino
		if n, en := v.Write(ctx, fh, 0, data); en != 0 || n != size {
			t.Fatalf("write %s: %d %v", name, n, en)
		}
		if en := v.Release(ctx, fh); en != 0 {
			t.Fatal(en)
		}
	}
	key := func(name string) string {
		sl, err := v.m.ReadChunk(ctx, inos[name], 0)
		if err != nil || len(sl) != 1 {
			t.Fatalf("%s: slices %v %v", name, sl, err)
		}
		return chunk.BlockKey(sl[0].ID, 0, size)
	}
	objA, err := object.ReadAll(ctx, obj, key("a"))
	if err != nil {
		t.Fatal(err)
	}
	if err := obj.Put(ctx, key("b"), objA); err != nil {
		t.Fatal(err)
	}

	// A client that has not read B yet: nothing of it cached.
	logs = testenv.LogBuffer{}
	v = newLoggedEnv(t, store, obj, &logs)
	for _, seq := range []bool{true, false} {
		fh, en := v.Open(ctx, root, inos["b"], syscall.O_RDONLY)
		if en != 0 {
			t.Fatal(en)
		}
		buf := make([]byte, 4096)
		for i := range size / len(buf) {
			off := i * len(buf)
			if !seq {
				off = i * 7919 % (size / len(buf)) * len(buf) // scattered
			}
			n, en := v.Read(ctx, fh, int64(off), buf)
			if en != syscall.EIO {
				t.Fatalf("read of B at %d: %d bytes, %v (A's bytes: %v); want EIO", off, n, en, bytes.Equal(buf[:n], a[:n]))
			}
		}
		if en := v.Release(ctx, fh); en != 0 {
			t.Fatal(en)
		}
	}
	var lines []string
	for l := range strings.Lines(logs.String()) {
		if strings.Contains(l, "level=ERROR") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "key="+key("b")) || !strings.Contains(lines[0], "ino="+strconv.FormatUint(uint64(inos["b"]), 10)) {
		t.Fatalf("two passes over B logged %d error lines, want one naming the object and the inode:\n%s", len(lines), logs.String())
	}
}
