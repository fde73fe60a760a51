package vfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/cache"
	"github.com/cairnfs/cairn/internal/chunk"
	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/kv/counted"
	"github.com/cairnfs/cairn/internal/kv/memkv"
	"github.com/cairnfs/cairn/internal/meta"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/object/faulty"
	"github.com/cairnfs/cairn/internal/object/mem"
)

var ctx = context.Background()

var root = &base.Caller{}

type env struct {
	v     *VFS
	m     *meta.Meta
	cs    *chunk.Store
	obj   *mem.Store
	fobj  *faulty.Store // obj with faults, what cs uses
	store *memkv.Store
	kv    *counted.Store // store, counted: what meta uses
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, Options{})
}

// newEnvWith is newEnv with VFS options (FlushInterval is set for the
// tests, and DeleteDelay unless given).
func newEnvWith(t *testing.T, opts Options) *env {
	t.Helper()
	return newEnvOver(t, opts, nil)
}

// newEnvOver is newEnvWith whose metadata store is wrap's wrapper of the
// counted store (nil: none), for injecting faults.
func newEnvOver(t *testing.T, opts Options, wrap func(kv.Store) kv.Store) *env {
	t.Helper()
	store := memkv.New()
	if err := meta.Format(ctx, store, meta.Settings{Name: "t", BlockSize: 64 << 10}, false); err != nil {
		t.Fatal(err)
	}
	cstore := counted.New(store)
	var mstore kv.Store = cstore
	if wrap != nil {
		mstore = wrap(cstore)
	}
	obj := mem.New()
	fobj := faulty.New(obj, 1)
	m, cs, v := newClient(t, mstore, fobj, "t", opts)
	t.Cleanup(func() {
		if err := v.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
		problems, err := m.Check(ctx, false)
		if err != nil || len(problems) > 0 {
			t.Errorf("check after test: %v %v", err, problems)
		}
	})
	return &env{v: v, m: m, cs: cs, obj: obj, fobj: fobj, store: store, kv: cstore}
}

// newClient opens a client of the volume in mstore and objs, as one
// host's mount: its Meta (with a session), chunk store and VFS (with
// FlushInterval set for the tests, and DeleteDelay unless given).
func newClient(t *testing.T, mstore kv.Store, objs object.Store, host string, opts Options) (*meta.Meta, *chunk.Store, *VFS) {
	t.Helper()
	return newClientCache(t, mstore, objs, host, opts, cache.NewMemory(8<<20))
}

// newClientCache is newClient with the given memory tier (nil: none, so
// every read goes to the object store).
func newClientCache(t *testing.T, mstore kv.Store, objs object.Store, host string, opts Options, mc chunk.BlockCache) (*meta.Meta, *chunk.Store, *VFS) {
	t.Helper()
	m, err := meta.Open(ctx, mstore, meta.Options{CompactThreshold: 16})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.NewSession(ctx, meta.SessionInfo{Host: host}); err != nil {
		t.Fatal(err)
	}
	cs, err := chunk.New(objs, mc, chunk.Options{BlockSize: 64 << 10, Logger: opts.Logger})
	if err != nil {
		t.Fatal(err)
	}
	opts.FlushInterval = time.Hour
	if opts.DeleteDelay == 0 {
		opts.DeleteDelay = time.Millisecond
	}
	return m, cs, New(m, cs, opts)
}

func (e *env) create(t *testing.T, name string) (base.Ino, uint64) {
	t.Helper()
	ino, _, fh, en := e.v.Create(ctx, root, base.RootIno, name, 0o644, 0, syscall.O_RDWR)
	if en != 0 {
		t.Fatalf("create %s: %v", name, en)
	}
	return ino, fh
}

func (e *env) write(t *testing.T, fh uint64, off int64, p []byte) {
	t.Helper()
	if n, en := e.v.Write(ctx, fh, off, p); en != 0 || n != len(p) {
		t.Fatalf("write: %d %v", n, en)
	}
}

// release closes handle fh and fails the test on an error.
func (e *env) release(t *testing.T, fh uint64) {
	t.Helper()
	if en := e.v.Release(ctx, fh); en != 0 {
		t.Fatal(en)
	}
}

func (e *env) read(t *testing.T, fh uint64, off int64, n int) []byte {
	t.Helper()
	buf := make([]byte, n)
	got, en := e.v.Read(ctx, fh, off, buf)
	if en != 0 {
		t.Fatalf("read: %v", en)
	}
	return buf[:got]
}

func countObjects(t *testing.T, s object.Store) int {
	n := 0
	if err := s.List(ctx, "chunks/", func(object.Info) bool { n++; return true }); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestReadYourWritesAndSizeOverlay(t *testing.T) {
	e := newEnv(t)
	ino, fh := e.create(t, "f")
	e.write(t, fh, 0, []byte("hello"))
	e.write(t, fh, 100000, []byte("world"))
	a, en := e.v.GetAttr(ctx, ino)
	if en != 0 || a.Length != 100005 {
		t.Fatalf("size while buffered: %d %v", a.Length, en)
	}
	got := e.read(t, fh, 0, 200000)
	want := make([]byte, 100005)
	copy(want, "hello")
	copy(want[100000:], "world")
	if !bytes.Equal(got, want) {
		t.Fatal("read-your-writes mismatch")
	}
	e.release(t, fh)
}

func TestUnlinkOpenFileFreesDataAtClose(t *testing.T) {
	e := newEnv(t)
	_, fh := e.create(t, "f")
	e.write(t, fh, 0, bytes.Repeat([]byte{1}, 300<<10))
	if en := e.v.Flush(ctx, fh); en != 0 {
		t.Fatal(en)
	}
	if n := countObjects(t, e.obj); n == 0 {
		t.Fatal("no objects after flush")
	}
	if en := e.v.Unlink(ctx, root, base.RootIno, "f"); en != 0 {
		t.Fatal(en)
	}
	if got := e.read(t, fh, 0, 10); !bytes.Equal(got, bytes.Repeat([]byte{1}, 10)) {
		t.Fatalf("unlinked open file unreadable: %v", got)
	}
	e.release(t, fh)
	deadline := time.Now().Add(5 * time.Second)
	for countObjects(t, e.obj) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d objects left after the last close of an unlinked file", countObjects(t, e.obj))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestCompactionKeepsContent(t *testing.T) {
	e := newEnv(t)
	ino, fh := e.create(t, "f")
	model := make([]byte, 256<<10)
	for i := 0; i < 100; i++ {
		off := (i * 7919) % (len(model) - 1000)
		p := bytes.Repeat([]byte{byte(i + 1)}, 1000)
		e.write(t, fh, int64(off), p)
		copy(model[off:], p)
		if en := e.v.Flush(ctx, fh); en != 0 { // one slice per write
			t.Fatal(en)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		s, err := e.m.ReadChunk(ctx, ino, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(s) <= 16 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("chunk still has %d slices", len(s))
		}
		time.Sleep(20 * time.Millisecond)
	}
	a, _ := e.v.GetAttr(ctx, ino)
	got := e.read(t, fh, 0, int(a.Length))
	if !bytes.Equal(got, model[:a.Length]) {
		t.Fatal("content changed by compaction")
	}
	e.v.Release(ctx, fh)
}

func TestPunchHole(t *testing.T) {
	e := newEnv(t)
	ino, fh := e.create(t, "f")
	e.write(t, fh, 0, bytes.Repeat([]byte{9}, 10000))
	if en := e.v.Fallocate(ctx, root, fh, fallocPunchHole|fallocKeepSize, 1000, 2000); en != 0 {
		t.Fatal(en)
	}
	got := e.read(t, fh, 0, 10000)
	for i, b := range got {
		want := byte(9)
		if i >= 1000 && i < 3000 {
			want = 0
		}
		if b != want {
			t.Fatalf("byte %d = %d, want %d", i, b, want)
		}
	}
	if en := e.v.Fallocate(ctx, root, fh, fallocPunchHole|fallocKeepSize, 9000, 5000); en != 0 {
		t.Fatal(en)
	}
	if a, _ := e.v.GetAttr(ctx, ino); a.Length != 10000 {
		t.Fatalf("punch hole changed the size to %d", a.Length)
	}
	if en := e.v.Fallocate(ctx, root, fh, 0, 0, 20000); en != 0 {
		t.Fatal(en)
	}
	if a, _ := e.v.GetAttr(ctx, ino); a.Length != 20000 {
		t.Fatalf("fallocate did not extend: %d", a.Length)
	}
	if en := e.v.Fallocate(ctx, root, fh, 0x08, 0, 4096); en != syscall.EOPNOTSUPP {
		t.Fatalf("collapse range: %v", en)
	}
	e.v.Release(ctx, fh)
}

func TestReadDirStreamsWithRefusals(t *testing.T) {
	e := newEnv(t)
	for i := 0; i < 1500; i++ {
		_, fh := e.create(t, fmt.Sprintf("n%04d", i))
		e.v.Release(ctx, fh)
	}
	fh, en := e.v.OpenDir(ctx, root, base.RootIno)
	if en != 0 {
		t.Fatal(en)
	}
	var names []string
	off := uint64(0)
	for {
		n := 0
		en := e.v.ReadDir(ctx, root, fh, off, NoAttrs, func(d DirEntry) bool {
			if n == 37 { // buffer full
				return false
			}
			n++
			names = append(names, d.Name)
			off = d.Off
			return true
		})
		if en != 0 {
			t.Fatal(en)
		}
		if n == 0 {
			break
		}
	}
	if len(names) != 1502 || names[0] != "." || names[1] != ".." || names[2] != "n0000" || names[1501] != "n1499" {
		t.Fatalf("listed %d names: %v ... %v", len(names), names[:3], names[len(names)-1])
	}
	for i := 2; i < len(names); i++ {
		if names[i] != fmt.Sprintf("n%04d", i-2) {
			t.Fatalf("entry %d is %s", i, names[i])
		}
	}
	// Rewind restarts the stream.
	var first string
	e.v.ReadDir(ctx, root, fh, 2, NoAttrs, func(d DirEntry) bool { first = d.Name; return false })
	if first != "n0000" {
		t.Fatalf("after rewind got %q", first)
	}
	e.v.ReleaseDir(fh)
}

// TestReadDirAttrs: which entries ReadDir passes with attributes in each
// mode; "." and ".." carry theirs only with AllAttrs (NFS), not with
// EntryAttrs (FUSE, whose kernel ignores them).
func TestReadDirAttrs(t *testing.T) {
	e := newEnv(t)
	for i := range 3 {
		_, fh := e.create(t, fmt.Sprintf("f%d", i))
		e.v.Release(ctx, fh)
	}
	for _, tc := range []struct {
		attrs      DirAttrs
		dots, ents bool
	}{{NoAttrs, false, false}, {EntryAttrs, false, true}, {AllAttrs, true, true}} {
		fh, en := e.v.OpenDir(ctx, root, base.RootIno)
		if en != 0 {
			t.Fatal(en)
		}
		n := 0
		en = e.v.ReadDir(ctx, root, fh, 0, tc.attrs, func(d DirEntry) bool {
			n++
			want := tc.ents
			if d.Name == "." || d.Name == ".." {
				want = tc.dots
			}
			if (d.Attr != nil) != want {
				t.Errorf("mode %d: %q has attributes %v, want %v", tc.attrs, d.Name, d.Attr != nil, want)
			}
			if d.Attr != nil && d.Name == "." && d.Attr.Type != base.TypeDir {
				t.Errorf("mode %d: \".\" has type %v", tc.attrs, d.Attr.Type)
			}
			return true
		})
		e.v.ReleaseDir(fh)
		if en != 0 || n != 5 {
			t.Fatalf("mode %d: %d entries, %v; want 5", tc.attrs, n, en)
		}
	}
}

func TestReadOnly(t *testing.T) {
	e := newEnv(t)
	e.v.opts.ReadOnly = true
	if _, _, _, en := e.v.Create(ctx, root, base.RootIno, "x", 0o644, 0, syscall.O_RDWR); en != syscall.EROFS {
		t.Fatalf("create on read-only: %v", en)
	}
}

func TestErrnoMapping(t *testing.T) {
	cases := map[error]syscall.Errno{
		fmt.Errorf("x: %w", base.ErrNotFound): syscall.ENOENT,
		base.ErrChecksum:                      syscall.EIO,
		fmt.Errorf("unknown"):                 syscall.EIO,
		syscall.EXDEV:                         syscall.EXDEV,
		context.Canceled:                      syscall.EINTR,
		// A store's socket error is not a file system's answer.
		fmt.Errorf("put: dial tcp: %w", syscall.ECONNREFUSED): syscall.EIO,
		fmt.Errorf("put: %w", syscall.ETIMEDOUT):              syscall.EIO,
		fmt.Errorf("write: %w", syscall.ENOSPC):               syscall.ENOSPC,
		// A stopped PostgreSQL: its Unix socket is gone (ENOENT).
		fmt.Errorf("lookup: %w", errors.Join(kv.ErrUnavailable, fmt.Errorf("dial unix: %w", syscall.ENOENT))): syscall.EIO,
		fmt.Errorf("get: %w", errors.Join(object.ErrUnavailable, syscall.ENOENT)):                             syscall.EIO,
	}
	for err, want := range cases {
		if got := Errno(err); got != want {
			t.Errorf("Errno(%v) = %v, want %v", err, got, want)
		}
	}
}

// TestSetAttrAfterUnlink checks that a SETATTR of a file this VFS's unlink
// destroyed (the kernel's writeback of a cached mtime at eviction) is
// ENOENT without a metadata transaction, and that a file unlinked while
// open is not taken for gone.
func TestSetAttrAfterUnlink(t *testing.T) {
	e := newEnv(t)
	updates := func() int64 { return e.kv.Stats().Kinds[counted.Update.String()].Transactions }
	mtime := base.SetAttrRequest{Valid: base.SetMtime, Mtime: 5}

	ino, fh := e.create(t, "closed")
	e.release(t, fh)
	if en := e.v.Unlink(ctx, root, base.RootIno, "closed"); en != 0 {
		t.Fatal(en)
	}
	// Background loops (slice deletion) may update meanwhile: count over
	// many calls, each of which would otherwise be an update.
	const calls = 50
	before := updates()
	for i := 0; i < calls; i++ {
		if _, en := e.v.SetAttr(ctx, root, ino, mtime); en != syscall.ENOENT {
			t.Fatalf("setattr of a destroyed file: %v, want ENOENT", en)
		}
	}
	if n := updates() - before; n >= calls/2 {
		t.Errorf("%d setattrs of a destroyed file ran %d metadata updates, want none of their own", calls, n)
	}

	open, ofh := e.create(t, "open")
	if en := e.v.Unlink(ctx, root, base.RootIno, "open"); en != 0 {
		t.Fatal(en)
	}
	if a, en := e.v.SetAttr(ctx, root, open, mtime); en != 0 || a.Mtime != 5 {
		t.Fatalf("setattr of an unlinked open file: %v, mtime %d", en, a.Mtime)
	}
	if en := e.v.Release(ctx, ofh); en != 0 {
		t.Fatal(en)
	}
}

// TestReadOverBufferedWrites: a read never commits the file's buffered
// writes; it reads them from the buffer over the committed content, and
// sees every completed write.
func TestReadOverBufferedWrites(t *testing.T) {
	e := newEnv(t)
	ino, fh := e.create(t, "f")
	base := bytes.Repeat([]byte{1}, 256<<10)
	e.write(t, fh, 0, base)
	if en := e.v.Flush(ctx, fh); en != 0 {
		t.Fatal(en)
	}
	f := e.v.files[ino]
	e.write(t, fh, 200<<10, []byte{2, 2, 2, 2})
	if got := e.read(t, fh, 0, 100); !bytes.Equal(got, base[:100]) {
		t.Fatalf("read beside the buffered write: %v", got[:8])
	}
	if got := e.read(t, fh, 200<<10-2, 8); !bytes.Equal(got, []byte{1, 1, 2, 2, 2, 2, 1, 1}) {
		t.Fatalf("read over the buffered write: %v", got)
	}
	if !f.w.Pending() {
		t.Fatal("a read over a buffered write committed it")
	}

	// A buffered write past the end: the gap reads as zeros, the length
	// includes it.
	e.write(t, fh, 300<<10, []byte{3})
	if got := e.read(t, fh, 270<<10, 10); !bytes.Equal(got, make([]byte, 10)) {
		t.Fatalf("read inside the gap before a buffered write past the end: %v", got)
	}
	got := e.read(t, fh, 256<<10, 64<<10)
	if want := append(make([]byte, 44<<10), 3); !bytes.Equal(got, want) {
		t.Fatalf("read of the gap before a buffered write past the end: %d bytes, want %d", len(got), len(want))
	}
	if got := e.read(t, fh, 300<<10, 10); !bytes.Equal(got, []byte{3}) {
		t.Fatalf("read at the buffered end: %v", got)
	}
	if !f.w.Pending() {
		t.Fatal("reads committed the buffered writes")
	}
	// Committed, the same content.
	want := e.read(t, fh, 0, 400<<10)
	if en := e.v.Fsync(ctx, fh); en != 0 {
		t.Fatal(en)
	}
	if got := e.read(t, fh, 0, 400<<10); !bytes.Equal(got, want) {
		t.Fatal("content changed by the commit")
	}
	e.release(t, fh)
}
