package daemon

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/testenv"
)

// TestCacheDirOnStoreFS: a --cache-dir on the file system of the local
// data store is left out, with a log line and a warmup error that say why;
// it is kept with CacheOnStoreFS, with an object latency (the store then
// stands for a remote one), and on another file system.
func TestCacheDirOnStoreFS(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	url := "pebble://" + dir + "/meta"
	if _, err := Format(ctx, FormatOptions{MetaURL: url, Name: "sf", BlockSize: 64 << 10}); err != nil {
		t.Fatal(err)
	}
	// The warning is logged by OpenVolume itself; background work (the
	// disk cache's scan) logs on after it returns, so the log is locked
	// and only warnings are kept.
	open := func(vo VolumeOptions) (*Volume, string) {
		t.Helper()
		logs := &testenv.LogBuffer{}
		vo.MetaURL, vo.CacheFreeRatio = url, -1
		vo.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
		vol, err := OpenVolume(ctx, vo)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { vol.Close() })
		return vol, logs.String()
	}
	same := dir + "/cache" // not created yet: its parent decides
	vol, logs := open(VolumeOptions{CacheDirs: []string{same}})
	if vol.disk != nil || vol.Stats().Disk != nil {
		t.Fatal("a disk cache on the store's file system is used")
	}
	if !strings.Contains(logs, "not used") || !strings.Contains(logs, same) {
		t.Errorf("log does not say the cache directory is left out:\n%s", logs)
	}
	err := Warmup(ctx, vol, nil, 0, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--cache-on-store-fs") || !strings.Contains(err.Error(), same) {
		t.Errorf("warmup without the skipped disk cache: %v", err)
	}
	if _, err := os.Stat(same); err == nil {
		t.Errorf("the skipped cache directory %s was created", same)
	}
	vol.Close()

	vol, _ = open(VolumeOptions{CacheDirs: []string{same}, CacheOnStoreFS: true})
	if vol.disk == nil {
		t.Error("CacheOnStoreFS: no disk cache")
	}
	vol.Close()
	vol, _ = open(VolumeOptions{CacheDirs: []string{same}, ObjectLatency: time.Microsecond})
	if vol.disk == nil {
		t.Error("with an object latency: no disk cache")
	}
	vol.Close()

	// Another file system: /dev/shm is a tmpfs on most Linux systems.
	other, err := os.MkdirTemp("/dev/shm", "cairn-samefs-")
	if err != nil || sameFS(other, dir) {
		t.Skipf("no second file system to put a cache on (/dev/shm: %v)", err)
	}
	t.Cleanup(func() { os.RemoveAll(other) })
	vol, logs = open(VolumeOptions{CacheDirs: []string{same, other}})
	if vol.disk == nil {
		t.Fatal("a cache directory on another file system is not used")
	}
	if !strings.Contains(logs, same) || strings.Contains(logs, other) {
		t.Errorf("log should name %s alone:\n%s", same, logs)
	}
}
