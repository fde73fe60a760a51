package main

import (
	"bytes"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/testenv"
)

// fillTo grows a filler file on the file system of dir until about leave
// bytes are free, and gives the mount's free-space guard (which measures
// every 100 ms) time to see it.
func fillTo(t *testing.T, dir string, leave uint64) {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	have := st.Bavail * uint64(st.Bsize)
	if have <= leave {
		t.Fatalf("only %d bytes free in %s; want to leave %d", have, dir, leave)
	}
	f, err := os.OpenFile(filepath.Join(dir, "filler"), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	if err := syscall.Fallocate(int(f.Fd()), 0, fi.Size(), int64(have-leave)); err != nil {
		t.Fatalf("fallocate: %v", err)
	}
	time.Sleep(300 * time.Millisecond)
}

// A full metadata disk (issue 32) used to crash the mount (a write got
// EIO, then Pebble's fatal commit error panicked the process), and fsck
// and mount -d on it then spun for minutes. Now: with less than the
// reserve (64 MiB) free, writes get ENOSPC, reads and deletes work, and
// writes resume when space returns; fsck and mount -d on a full disk fail
// at once, saying so.
func TestE2EFullMetadataDisk(t *testing.T) {
	cairnBinary(t) // skips without root or FUSE
	dir := t.TempDir()
	metaFS := testenv.Tmpfs(t, "160m") // unmounted after the volume, whose unmount is registered later
	v := &e2eVolume{dir: dir, meta: "pebble://" + metaFS + "/meta", mnt: filepath.Join(dir, "mnt")}
	if err := os.Mkdir(v.mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	cairn(t, "format", "--data", "file://"+dir+"/data", v.meta, "full")
	v.mount(t)

	write := func(name string, data []byte) error {
		f, err := os.Create(filepath.Join(v.mnt, name))
		if err != nil {
			return err
		}
		if _, err := f.Write(data); err != nil {
			f.Close()
			return err
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	random := func(n int) []byte {
		b := make([]byte, n)
		rand.Read(b)
		return b
	}
	keep, small := random(5<<20), random(3000)
	for name, data := range map[string][]byte{"keep": keep, "small": small, "trash": random(2 << 20)} {
		if err := write(name, data); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}

	// Between the hard floor (32 MiB) and the reserve (64 MiB).
	fillTo(t, metaFS, 48<<20)
	if err := write("new", []byte("x")); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("create on a full metadata disk: %v; want ENOSPC", err)
	}
	for name, want := range map[string][]byte{"keep": keep, "small": small} {
		if got, err := os.ReadFile(filepath.Join(v.mnt, name)); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("reading %s on a full metadata disk: %v (same bytes: %v)", name, err, bytes.Equal(got, want))
		}
	}
	more := random(1 << 20)
	f, err := os.OpenFile(filepath.Join(v.mnt, "keep"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(more); err != nil {
		t.Fatalf("buffered append: %v", err)
	}
	if err := f.Sync(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("fsync of an append on a full metadata disk: %v; want ENOSPC", err)
	}
	if err := os.Remove(filepath.Join(v.mnt, "trash")); err != nil {
		t.Fatalf("deleting a file on a nearly full metadata disk: %v", err)
	}

	// Space back: the failed fsync's data commits, new files can be made.
	if err := os.Remove(filepath.Join(metaFS, "filler")); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync again once space is back: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	fresh := random(300 << 10)
	if err := write("new", fresh); err != nil {
		t.Fatalf("create once space is back: %v", err)
	}
	keep = append(keep, more...)
	check := func() {
		t.Helper()
		for name, want := range map[string][]byte{"keep": keep, "small": small, "new": fresh} {
			if got, err := os.ReadFile(filepath.Join(v.mnt, name)); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s: %v (same bytes: %v)", name, err, bytes.Equal(got, want))
			}
		}
		if _, err := os.Stat(filepath.Join(v.mnt, "trash")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("trash: %v; want it gone", err)
		}
	}
	check()
	v.unmount(t)
	logb, _ := os.ReadFile(v.dir + "/mount.log")
	if log := string(logb); !strings.Contains(log, "metadata disk is nearly full") ||
		strings.Contains(log, "panic") || strings.Count(log, "\n") > 50 {
		t.Fatalf("mount log: want a line saying the disk is nearly full, no panic, a few lines:\n%s", log)
	}
	cairn(t, "fsck", v.meta)

	// A full disk at start: fsck and mount -d fail at once and say why.
	fillTo(t, metaFS, 40<<20)
	for _, args := range [][]string{
		{"fsck", v.meta},
		{"mount", "-d", "--log", dir + "/mount-full.log", v.meta, v.mnt},
	} {
		start := time.Now()
		out, err := cairnErr(t, args...)
		if err == nil || !strings.Contains(out, "metadata disk "+metaFS+"/meta is full") || !strings.Contains(out, "free space and retry") {
			t.Fatalf("cairn %s on a full metadata disk: %v; want it to fail saying the disk is full:\n%s", args[0], err, out)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("cairn %s on a full metadata disk took %v", args[0], d)
		}
	}
	if _, ok := mountedAt(v.mnt); ok {
		t.Fatal("mount -d on a full disk left a mount")
	}
	if err := os.Remove(filepath.Join(metaFS, "filler")); err != nil {
		t.Fatal(err)
	}
	cairn(t, "fsck", v.meta)
	v.mount(t)
	check()
}
