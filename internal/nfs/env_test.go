package nfs

import (
	"context"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/cache"
	"github.com/cairnfs/cairn/internal/chunk"
	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/kv/memkv"
	"github.com/cairnfs/cairn/internal/meta"
	"github.com/cairnfs/cairn/internal/nfs/nfsclient"
	"github.com/cairnfs/cairn/internal/nfs/proto"
	"github.com/cairnfs/cairn/internal/object/mem"
	"github.com/cairnfs/cairn/internal/vfs"
)

var ctx = context.Background()

const testUUID = "6f0c1c9e-5d1e-4c39-9d3e-test-volume"

// env is a volume in memory (memkv, mem objects), its vfs, and a gateway
// on a loopback port.
type env struct {
	v    *vfs.VFS
	m    *meta.Meta
	cs   *chunk.Store
	srv  *Server
	addr string
}

func newVFS(t testing.TB) (*vfs.VFS, *meta.Meta, *chunk.Store) {
	t.Helper()
	return newVFSOver(t, nil)
}

// newVFSOver is newVFS whose metadata store is wrap's wrapper of the
// memkv store (wrap nil: the memkv store itself).
func newVFSOver(t testing.TB, wrap func(kv.Store) kv.Store) (*vfs.VFS, *meta.Meta, *chunk.Store) {
	t.Helper()
	var store kv.Store = memkv.New()
	if err := meta.Format(ctx, store, meta.Settings{Name: "t", UUID: testUUID, BlockSize: 64 << 10}, false); err != nil {
		t.Fatal(err)
	}
	if wrap != nil {
		store = wrap(store)
	}
	m, err := meta.Open(ctx, store, meta.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.NewSession(ctx, meta.SessionInfo{Host: "t"}); err != nil {
		t.Fatal(err)
	}
	cs, err := chunk.New(mem.New(), cache.NewMemory(8<<20), chunk.Options{BlockSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	v := vfs.New(m, cs, vfs.Options{FlushInterval: time.Hour, DeleteDelay: time.Millisecond})
	t.Cleanup(func() {
		if err := v.Close(ctx); err != nil {
			t.Errorf("vfs close: %v", err)
		}
		problems, err := m.Check(ctx, false)
		if err != nil || len(problems) > 0 {
			t.Errorf("check after test: %v %v", err, problems)
		}
	})
	return v, m, cs
}

func newEnv(t testing.TB) *env {
	return newEnvWith(t, Options{})
}

func newEnvWith(t testing.TB, o Options) *env {
	t.Helper()
	v, m, cs := newVFS(t)
	e := &env{v: v, m: m, cs: cs}
	e.start(t, o)
	return e
}

// sibling is another gateway of e's volume with a vfs of its own, as a
// second gateway process (or the same one restarted) would have: nothing
// of e's vfs state (open files, snapshot slots) is shared.
func (e *env) sibling(t testing.TB, o Options) *env {
	t.Helper()
	v := vfs.New(e.m, e.cs, vfs.Options{FlushInterval: time.Hour, DeleteDelay: time.Millisecond})
	s := &env{v: v, m: e.m, cs: e.cs}
	t.Cleanup(func() {
		if err := v.Close(ctx); err != nil {
			t.Errorf("sibling vfs close: %v", err)
		}
	})
	s.start(t, o)
	return s
}

// start runs a gateway over e.v; it is closed at cleanup (before the vfs).
func (e *env) start(t testing.TB, o Options) {
	t.Helper()
	o.VolumeUUID = testUUID
	if os.Getenv("NFS_DEBUG") != "" {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	srv, err := New(e.v, o)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(l) }()
	e.srv, e.addr = srv, l.Addr().String()
	t.Cleanup(func() {
		if err := srv.Close(ctx); err != nil {
			t.Errorf("gateway close: %v", err)
		}
	})
}

// client connects and mounts the root.
func (e *env) client(t testing.TB) (*nfsclient.Client, []byte) {
	t.Helper()
	c, err := nfsclient.Dial(e.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	root, err := c.Mount("/")
	if err != nil {
		t.Fatal(err)
	}
	return c, root
}

// createFile creates name in dir (GUARDED, with mode) and returns its
// handle.
func createFile(t testing.TB, c *nfsclient.Client, dir []byte, name string, mode uint32) []byte {
	t.Helper()
	fh, err := c.Create(dir, name, proto.CreateGuarded, proto.Sattr3{Mode: u32(mode)}, [8]byte{})
	if err != nil {
		t.Fatal(err)
	}
	return fh
}
