package vfs

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/cache"
	"github.com/cairnfs/cairn/internal/chunk"
	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/object"
)

// peer returns a second client of e's volume: its own Meta (and
// session), chunk store and VFS over the same metadata and object
// stores, as another host's mount has.
func (e *env) peer(t *testing.T, opts Options) *env {
	t.Helper()
	return e.peerCache(t, opts, cache.NewMemory(8<<20))
}

// peerCache is peer with the given memory tier (nil: none).
func (e *env) peerCache(t *testing.T, opts Options, mc chunk.BlockCache) *env {
	t.Helper()
	m, cs, v := newClientCache(t, e.kv, e.fobj, "peer", opts, mc)
	t.Cleanup(func() {
		if err := v.Close(ctx); err != nil {
			t.Errorf("close the peer: %v", err)
		}
	})
	return &env{v: v, m: m, cs: cs, obj: e.obj, fobj: e.fobj, store: e.store, kv: e.kv}
}

func (e *env) openAppend(t *testing.T, name string) uint64 {
	t.Helper()
	_, _, fh, en := e.v.Create(ctx, root, base.RootIno, name, 0o644, 0, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_APPEND)
	if en != 0 {
		t.Fatalf("open %s for appending: %v", name, en)
	}
	return fh
}

// TestAppendsOfTwoClients: two clients append lines to one file, each
// buffering where it sees the end; their flushes interleave, some of them
// in the middle of the other's appends. Every line ends up in the file
// exactly once, each client's lines in its order.
func TestAppendsOfTwoClients(t *testing.T) {
	a := newEnvWith(t, Options{AppendAtEOF: true})
	b := a.peer(t, Options{AppendAtEOF: true})
	fa, fb := a.openAppend(t, "log"), b.openAppend(t, "log")
	var want [2][]string
	for i := 0; i < 300; i++ {
		for k, e := range []*env{a, b} {
			line := fmt.Sprintf("%c %04d\n", 'a'+k, i)
			fh := []uint64{fa, fb}[k]
			// Where the caller thinks the end is does not matter.
			e.write(t, fh, 0, []byte(line))
			want[k] = append(want[k], line)
			if i%7 == k*3 {
				if en := e.v.Fsync(ctx, fh); en != 0 {
					t.Fatalf("fsync: %v", en)
				}
			}
		}
	}
	a.release(t, fa)
	b.release(t, fb)
	ino, at, en := a.v.Lookup(ctx, root, base.RootIno, "log")
	if en != 0 {
		t.Fatal(en)
	}
	fh, en := a.v.Open(ctx, root, ino, syscall.O_RDONLY)
	if en != 0 {
		t.Fatal(en)
	}
	got := a.read(t, fh, 0, int(at.Length)+100)
	a.release(t, fh)
	if len(got) != 2*300*7 {
		t.Errorf("file has %d bytes, want %d", len(got), 2*300*7)
	}
	var seen [2][]string
	for _, l := range bytes.SplitAfter(got, []byte("\n")) {
		if len(l) == 0 {
			continue
		}
		k := int(l[0] - 'a')
		if k < 0 || k > 1 || len(l) != 7 {
			t.Fatalf("garbage line %q in the file", l)
		}
		seen[k] = append(seen[k], string(l))
	}
	for k := range want {
		if fmt.Sprint(seen[k]) != fmt.Sprint(want[k]) {
			t.Errorf("client %d: %d lines in the file, want its %d in order", k, len(seen[k]), len(want[k]))
		}
	}
}

// TestReadAcrossPeerCompaction: a client keeps a file open for reading,
// its slice list cached, while another client rewrites part of the file
// and compacts the chunk, whose replaced objects are then deleted. The
// reader's next read finds its block gone, takes the list again and reads
// the current content: no EIO, no bad block logged.
func TestReadAcrossPeerCompaction(t *testing.T) {
	a := newEnv(t)
	var logged bytes.Buffer
	c := a.peerCache(t, Options{Logger: slog.New(slog.NewTextHandler(&logged, nil))}, nil) // every read from the store
	b := a.peer(t, Options{})
	const n = 64 << 10
	want := bytes.Repeat([]byte{1}, n)
	ino, fh := a.create(t, "f")
	a.write(t, fh, 0, want)
	a.release(t, fh)

	rfh, en := c.v.Open(ctx, root, ino, syscall.O_RDONLY)
	if en != 0 {
		t.Fatal(en)
	}
	if got := c.read(t, rfh, 0, n); !bytes.Equal(got, want) {
		t.Fatal("first read: wrong content")
	}
	wfh, en := b.v.Open(ctx, root, ino, syscall.O_RDWR)
	if en != 0 {
		t.Fatal(en)
	}
	for i := 0; i < 4; i++ { // four slices in the first block
		p := bytes.Repeat([]byte{byte(i + 2)}, 4096)
		b.write(t, wfh, int64(i*8192), p)
		copy(want[i*8192:], p)
		if en := b.v.Flush(ctx, wfh); en != 0 {
			t.Fatal(en)
		}
	}
	b.release(t, wfh)
	if err := b.v.compact(ctx, compactJob{ino, 0}); err != nil {
		t.Fatal(err)
	}
	if s, err := b.m.ReadChunk(ctx, ino, 0); err != nil || len(s) != 1 {
		t.Fatalf("after the compaction the chunk has %d slices (%v), want 1", len(s), err)
	}
	// The first write's object and the four new ones go after the
	// delete delay; the merged slice stays.
	deadline := time.Now().Add(10 * time.Second)
	for countObjects(t, a.obj) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d objects still in the store, want 1", countObjects(t, a.obj))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := c.read(t, rfh, 0, n); !bytes.Equal(got, want) {
		t.Fatal("read after the compaction: wrong content")
	}
	c.release(t, rfh)
	if strings.Contains(logged.String(), "missing") {
		t.Errorf("a block replaced by a compaction was logged as missing:\n%s", logged.String())
	}
	// A block missing under the current list is still an error, logged
	// once as missing.
	key := firstObject(t, a.obj)
	data, err := object.ReadAll(ctx, a.obj, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.obj.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	rfh, en = c.v.Open(ctx, root, ino, syscall.O_RDONLY)
	if en != 0 {
		t.Fatal(en)
	}
	if _, en := c.v.Read(ctx, rfh, 0, make([]byte, n)); en != syscall.EIO {
		t.Errorf("read of a block missing under the current list: %v, want EIO", en)
	}
	c.release(t, rfh)
	if got := strings.Count(logged.String(), "block object missing"); got != 1 {
		t.Errorf("the missing block logged %d times, want once:\n%s", got, logged.String())
	}
	if err := a.obj.Put(ctx, key, data); err != nil { // the volume whole again for the check at the end
		t.Fatal(err)
	}
}

func firstObject(t *testing.T, s object.Store) string {
	t.Helper()
	var key string
	if err := s.List(ctx, "chunks/", func(i object.Info) bool { key = i.Key; return false }); err != nil || key == "" {
		t.Fatalf("no object in the store (%v)", err)
	}
	return key
}

// TestCreateRaceOpensExisting: a create without O_EXCL of a name another
// client created after this one looked it up opens that file; with
// O_EXCL it fails with EEXIST.
func TestCreateRaceOpensExisting(t *testing.T) {
	a := newEnv(t)
	b := a.peer(t, Options{})
	ino, fh := b.create(t, "f")
	b.write(t, fh, 0, []byte("hello"))
	b.release(t, fh)
	got, at, fa, en := a.v.Create(ctx, root, base.RootIno, "f", 0o600, 0, syscall.O_RDWR|syscall.O_CREAT)
	if en != 0 {
		t.Fatalf("create without O_EXCL of an existing name: %v", en)
	}
	if got != ino || at.Length != 5 {
		t.Fatalf("opened inode %d of length %d, want %d of length 5", got, at.Length, ino)
	}
	if s := a.read(t, fa, 0, 10); string(s) != "hello" {
		t.Fatalf("read %q", s)
	}
	a.release(t, fa)
	if _, _, _, en := a.v.Create(ctx, root, base.RootIno, "f", 0o600, 0, syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL); en != syscall.EEXIST {
		t.Fatalf("O_EXCL create of an existing name: %v, want EEXIST", en)
	}
	// O_TRUNC applies to the file found.
	_, at, fa, en = a.v.Create(ctx, root, base.RootIno, "f", 0o600, 0, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_TRUNC)
	if en != 0 || at.Length != 0 {
		t.Fatalf("O_TRUNC create of an existing file: %v, length %d", en, at.Length)
	}
	a.release(t, fa)
}

// lostChunkCommit reports kv.ErrUnknownOutcome for the first committed
// transaction that writes a record of kind (default: a chunk record) once
// armed: the commit took effect, the client does not know it.
type lostChunkCommit struct {
	kv.Store
	armed atomic.Bool
	kind  string
}

func (s *lostChunkCommit) Update(ctx context.Context, fn func(kv.Txn) error) error {
	kind := s.kind
	if kind == "" {
		kind = "chunk"
	}
	kinds, err := watchedUpdate(ctx, s.Store, fn)
	if err == nil && kinds[kind] && s.armed.CompareAndSwap(true, false) {
		return fmt.Errorf("commit sent, connection lost: %w", kv.ErrUnknownOutcome)
	}
	return err
}

// TestCreateUnknownOutcome: a create whose commit took effect but reported
// an unknown outcome is sent again; without O_EXCL it then opens the file
// it made (open(2) with O_CREAT opens an existing file), so the caller
// gets the file, not EIO. With O_EXCL it cannot tell whose file it is:
// EIO.
func TestCreateUnknownOutcome(t *testing.T) {
	store := &lostChunkCommit{kind: "dentry"}
	e := newEnvOver(t, Options{}, func(s kv.Store) kv.Store { store.Store = s; return store })
	store.armed.Store(true)
	ino, _, fh, en := e.v.Create(ctx, root, base.RootIno, "f", 0o644, 0, syscall.O_RDWR|syscall.O_CREAT)
	if en != 0 {
		t.Fatalf("create whose commit's outcome was lost: %v, want the file", en)
	}
	if store.armed.Load() {
		t.Fatal("the lost commit was not exercised")
	}
	if got, _, en := e.v.Lookup(ctx, root, base.RootIno, "f"); en != 0 || got != ino {
		t.Fatalf("lookup: %d %v, want %d", got, en, ino)
	}
	e.write(t, fh, 0, []byte("x"))
	e.release(t, fh)
	store.armed.Store(true)
	if _, _, _, en := e.v.Create(ctx, root, base.RootIno, "g", 0o644, 0, syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL); en != syscall.EIO {
		t.Fatalf("O_EXCL create whose outcome was lost: %v, want EIO", en)
	}
}

// TestAppendUnknownOutcomeNotRepeated: an append whose commit took effect
// but reported an unknown outcome is committed again at once, as a retry:
// the fsync succeeds, and the retry does not append the bytes a second
// time.
func TestAppendUnknownOutcomeNotRepeated(t *testing.T) {
	store := &lostChunkCommit{}
	e := newEnvOver(t, Options{AppendAtEOF: true}, func(s kv.Store) kv.Store { store.Store = s; return store })
	fh := e.openAppend(t, "log")
	e.write(t, fh, 0, []byte("first\n"))
	if en := e.v.Fsync(ctx, fh); en != 0 {
		t.Fatal(en)
	}
	e.write(t, fh, 0, []byte("second\n"))
	store.armed.Store(true)
	if en := e.v.Fsync(ctx, fh); en != 0 {
		t.Fatalf("fsync whose commit's outcome was lost: %v, want it retried", en)
	}
	if store.armed.Load() {
		t.Fatal("the lost commit was not exercised")
	}
	e.release(t, fh)
	ino, _, en := e.v.Lookup(ctx, root, base.RootIno, "log")
	if en != 0 {
		t.Fatal(en)
	}
	if got := e.readAll(t, ino); string(got) != "first\nsecond\n" {
		t.Fatalf("file holds %q, want each line once", got)
	}
}

// TestWriteUnknownOutcomeNotRepeated: a write whose commit took effect but
// reported an unknown outcome is retried at once without placing its
// slice again (placed again, it would land over later writes).
func TestWriteUnknownOutcomeNotRepeated(t *testing.T) {
	store := &lostChunkCommit{}
	e := newEnvOver(t, Options{}, func(s kv.Store) kv.Store { store.Store = s; return store })
	ino, fh := e.create(t, "f")
	e.write(t, fh, 0, bytes.Repeat([]byte("a"), 1000))
	store.armed.Store(true)
	if en := e.v.Fsync(ctx, fh); en != 0 {
		t.Fatalf("fsync whose commit's outcome was lost: %v, want it retried", en)
	}
	if store.armed.Load() {
		t.Fatal("the lost commit was not exercised")
	}
	ss, err := e.m.ReadChunk(ctx, ino, 0)
	if err != nil || len(ss) != 1 {
		t.Fatalf("chunk holds %d slices (%v), want the write's once", len(ss), err)
	}
	e.release(t, fh)
}
