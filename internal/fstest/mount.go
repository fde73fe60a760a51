// Package fstest holds test-only helpers: it formats and mounts real Cairn
// volumes (Pebble metadata, local-directory data, a real FUSE mount) and
// exports POSIX conformance checks that run against any mount point.
//
// It must only be imported by tests.
package fstest

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/daemon"
	"github.com/cairnfs/cairn/internal/fuse"
	"github.com/cairnfs/cairn/internal/meta"
	"github.com/cairnfs/cairn/internal/testenv"
	"github.com/cairnfs/cairn/internal/vfs"
)

// CanMount reports whether this process can make FUSE mounts (root and
// /dev/fuse); tests that need a mount skip otherwise.
func CanMount() (bool, string) {
	if os.Geteuid() != 0 {
		return false, "FUSE mounts in tests need root"
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return false, "no /dev/fuse"
	}
	return true, ""
}

// Volume is a formatted volume in a temporary directory.
type Volume struct {
	Dir     string // parent of meta/ and data/
	MetaURL string
}

// NewVolume formats a fresh embedded volume under t.TempDir().
func NewVolume(t testing.TB) *Volume {
	t.Helper()
	dir := t.TempDir()
	v := &Volume{Dir: dir, MetaURL: "pebble://" + filepath.Join(dir, "meta")}
	if _, err := daemon.Format(context.Background(), daemon.FormatOptions{MetaURL: v.MetaURL, Name: "test"}); err != nil {
		t.Fatalf("format: %v", err)
	}
	return v
}

// Mount is an in-process FUSE mount of a volume.
type Mount struct {
	Dir string
	Vol *daemon.Volume
	VFS *vfs.VFS
	srv *fuse.Server
	t   testing.TB
	log *testenv.LogBuffer
}

// MountOptions tune MountVolume.
type MountOptions struct {
	AttrTimeout, EntryTimeout time.Duration
	LiveTimeout               time.Duration // fuse.Options.LiveTimeout
	ReadOnly                  bool
	NoWriteback               bool // mount without the FUSE writeback cache
	ExtraProcs                int  // fuse.Options.ExtraProcs
}

// MountVolume mounts v on a fresh directory. Cleanup unmounts it, closes
// the volume and runs fsck, failing the test on any problem.
func MountVolume(t testing.TB, v *Volume, o MountOptions) *Mount {
	t.Helper()
	if ok, why := CanMount(); !ok {
		t.Skip(why)
	}
	ctx := context.Background()
	logBuf := &testenv.LogBuffer{}
	log := slog.New(slog.NewTextHandler(logBuf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	vol, err := daemon.OpenVolume(ctx, daemon.VolumeOptions{MetaURL: v.MetaURL, Logger: log, ReadOnly: o.ReadOnly})
	if err != nil {
		t.Fatalf("open volume: %v", err)
	}
	if _, err := vol.Meta.NewSession(ctx, meta.SessionInfo{Host: "test", Pid: os.Getpid(), Started: time.Now()}); err != nil {
		t.Fatalf("session: %v", err)
	}
	fs := vfs.New(vol.Meta, vol.Chunks, vfs.Options{Logger: log, ReadOnly: o.ReadOnly})
	dir := t.TempDir()
	srv, err := fuse.Mount(fs, dir, fuse.Options{
		FsName: v.MetaURL, AllowOther: true, Logger: log, ReadOnly: o.ReadOnly,
		AttrTimeout: o.AttrTimeout, EntryTimeout: o.EntryTimeout, LiveTimeout: o.LiveTimeout, WritebackCache: !o.NoWriteback,
		KeepCache:  true, // as cairn mount of an embedded volume
		ExtraProcs: o.ExtraProcs,
	})
	if err != nil {
		vol.Close()
		t.Fatalf("mount: %v", err)
	}
	m := &Mount{Dir: dir, Vol: vol, VFS: fs, srv: srv, t: t, log: logBuf}
	t.Cleanup(func() { m.Close() })
	return m
}

// Changed calls fuse.Server.Changed.
func (m *Mount) Changed(parent base.Ino, name string) { m.srv.Changed(parent, name) }

// Close unmounts (retrying while busy), flushes, checks the volume with
// fsck and closes it. Safe to call twice.
func (m *Mount) Close() {
	if m.srv == nil {
		return
	}
	t := m.t
	var err error
	for i := 0; i < 50; i++ {
		if err = m.srv.Unmount(); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Errorf("unmount %s: %v", m.Dir, err)
		return
	}
	m.srv.Wait()
	m.srv = nil
	ctx := context.Background()
	if err := m.VFS.Close(ctx); err != nil {
		t.Errorf("vfs close: %v", err)
	}
	var out bytes.Buffer
	if err := daemon.Fsck(ctx, m.Vol, &out); err != nil {
		t.Errorf("fsck after test: %v\n%s", err, out.String())
	}
	_ = m.Vol.Meta.CloseSession(ctx)
	if err := m.Vol.Close(); err != nil {
		t.Errorf("close volume: %v", err)
	}
	if l := m.log.String(); l != "" {
		t.Logf("mount log:\n%s", l)
	}
}
