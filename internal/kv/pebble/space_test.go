package pebble_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/kv/pebble"
	"github.com/cairnfs/cairn/internal/testenv"
)

func free(t *testing.T, dir string) uint64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return st.Bavail * uint64(st.Bsize)
}

// fill grows the filler file in dir until about leave bytes are free, and
// waits until a store's free-space guard, which measures at most every
// 100 ms, has seen it.
func fill(t *testing.T, dir string, leave uint64) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, "filler"), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	have := free(t, dir)
	if have <= leave {
		t.Fatalf("only %d bytes free; want to leave %d", have, leave)
	}
	if err := syscall.Fallocate(int(f.Fd()), 0, fi.Size(), int64(have-leave)); err != nil {
		t.Fatalf("fallocate: %v", err)
	}
	time.Sleep(150 * time.Millisecond)
}

func unfill(t *testing.T, dir string) {
	t.Helper()
	if err := os.Remove(filepath.Join(dir, "filler")); err != nil {
		t.Fatal(err)
	}
}

func value(i int) []byte {
	return []byte(fmt.Sprintf("%04d", i) + strings.Repeat("v", 4000))
}

func set(s kv.Store, ctx context.Context, key string, v []byte) error {
	return s.Update(ctx, func(tx kv.Txn) error {
		tx.Set([]byte(key), v)
		return nil
	})
}

// A full metadata disk (issue 32): writes fail with ErrNoSpace rather than
// taking Pebble to its fatal path (it used to panic with "pebble: fatal
// commit error … no space left on device"), reads go on, deletes go on
// down to the hard floor, and writes resume once space is freed.
func TestFullDisk(t *testing.T) {
	dir := filepath.Join(testenv.Tmpfs(t, "64m"), "meta")
	opts := pebble.Options{MemTableSize: 1 << 20, FreeSpaceReserve: 8 << 20}
	s := open(t, dir, opts)
	t.Cleanup(func() { _ = s.Close() }) // before the unmount
	ctx := context.Background()
	for i := range 100 {
		if err := set(s, ctx, fmt.Sprintf("k%04d", i), value(i)); err != nil {
			t.Fatal(err)
		}
	}

	// Below the reserve: writes are refused, reads and deletes are not.
	fill(t, filepath.Dir(dir), 6<<20)
	err := set(s, ctx, "new", value(0))
	if !errors.Is(err, base.ErrNoSpace) || !strings.Contains(err.Error(), "nearly full") {
		t.Fatalf("write below the reserve: %v; want ErrNoSpace saying the disk is nearly full", err)
	}
	if v := lookup(t, s, "k0001"); string(v) != string(value(1)) {
		t.Fatalf("read below the reserve: %.10q", v)
	}
	del := func(key string) error {
		return s.Update(kv.Freeing(ctx), func(tx kv.Txn) error {
			tx.Delete([]byte(key))
			return nil
		})
	}
	if err := del("k0000"); err != nil {
		t.Fatalf("delete below the reserve, above the floor: %v", err)
	}

	// Below the hard floor nothing is written, however long one tries
	// (this is what used to crash: 8 MiB of commits on a full disk).
	fill(t, filepath.Dir(dir), 2<<20)
	if err := del("k0002"); !errors.Is(err, base.ErrNoSpace) {
		t.Fatalf("delete below the floor: %v; want ErrNoSpace", err)
	}
	for i := range 2000 {
		if err := set(s, ctx, fmt.Sprintf("x%04d", i), value(i)); !errors.Is(err, base.ErrNoSpace) {
			t.Fatalf("write %d on a full disk: %v; want ErrNoSpace", i, err)
		}
	}
	if err := s.Sync(ctx); err != nil {
		t.Fatalf("Sync on a full disk: %v", err)
	}
	if v := lookup(t, s, "k0099"); string(v) != string(value(99)) {
		t.Fatalf("read on a full disk: %.10q", v)
	}

	// Space freed: writes resume at once, through flushes and compactions.
	unfill(t, filepath.Dir(dir))
	for i := range 4000 {
		if err := set(s, ctx, fmt.Sprintf("y%04d", i), value(i)); err != nil {
			t.Fatalf("write %d after freeing space: %v", i, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir, opts)
	for _, k := range []string{"k0001", "k0099", "y0000", "y3999"} {
		if lookup(t, s, k) == nil {
			t.Errorf("%s lost", k)
		}
	}
	for _, k := range []string{"k0000", "new", "x0000"} {
		if lookup(t, s, k) != nil {
			t.Errorf("%s present", k)
		}
	}
}

// Opening a store read-write on a disk below the reserve fails at once
// with a message that says what to do (fsck and mount used to spin,
// logging Pebble's failed flushes for minutes).
func TestOpenFullDisk(t *testing.T) {
	dir := filepath.Join(testenv.Tmpfs(t, "64m"), "meta")
	opts := pebble.Options{MemTableSize: 1 << 20, FreeSpaceReserve: 8 << 20}
	s := open(t, dir, opts)
	t.Cleanup(func() { _ = s.Close() }) // before the unmount
	if err := set(s, context.Background(), "a", value(1)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	fill(t, filepath.Dir(dir), 6<<20)
	start := time.Now()
	_, err := pebble.Open(dir, opts)
	if !errors.Is(err, base.ErrNoSpace) || !strings.Contains(err.Error(), "metadata disk "+dir+" is full") ||
		!strings.Contains(err.Error(), "free space and retry") {
		t.Fatalf("Open on a full disk: %v; want ErrNoSpace saying %s is full", err, dir)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Open on a full disk took %v", d)
	}
	unfill(t, filepath.Dir(dir))
	s = open(t, dir, opts)
	if lookup(t, s, "a") == nil {
		t.Fatal("a lost")
	}
}

// The last line of defence: a WAL write that fails anyway (here an
// injected ENOSPC) makes Pebble call its logger's Fatalf. The store turns
// that into an error, refuses writes from then on, and the process and
// the reads go on.
func TestPebbleFatalError(t *testing.T) {
	var failing atomic.Bool
	fs := errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if failing.Load() && op.Kind == errorfs.OpFileWrite && strings.HasSuffix(op.Path, ".log") {
			return syscall.ENOSPC
		}
		return nil
	}))
	s := open(t, t.TempDir(), pebble.WithFS(pebble.Options{}, fs))
	ctx := context.Background()
	if err := set(s, ctx, "a", value(1)); err != nil {
		t.Fatal(err)
	}
	failing.Store(true)
	// The commit itself only fills Pebble's WAL buffer; the sync that
	// writes it fails.
	_ = set(s, ctx, "b", value(2))
	err := s.Sync(ctx)
	if !errors.Is(err, base.ErrIO) || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("Sync with failing WAL writes: %v; want ErrIO naming the cause", err)
	}
	done := make(chan error, 1)
	go func() { done <- set(s, ctx, "c", value(3)) }()
	select {
	case err := <-done:
		if !errors.Is(err, base.ErrIO) || !strings.Contains(err.Error(), "restart") {
			t.Fatalf("write after a fatal error: %v; want ErrIO", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("write after a fatal error hangs")
	}
	if v := lookup(t, s, "a"); string(v) != string(value(1)) {
		t.Fatalf("read after a fatal error: %.10q", v)
	}
	go func() { done <- s.Close() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close after a fatal error hangs")
	}
}
