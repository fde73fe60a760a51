package vfs

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// peer returns a second client of e's volume: its own Meta (and
// session), chunk store and VFS over the same metadata and object
// stores, as another host's mount has.
func (e *env) peer(t *testing.T, opts Options) *env {
	t.Helper()
	m, cs, v := newClient(t, e.kv, e.fobj, "peer", opts)
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
// transaction that writes a chunk record once armed: the commit took
// effect, the client does not know it.
type lostChunkCommit struct {
	kv.Store
	armed atomic.Bool
}

func (s *lostChunkCommit) Update(ctx context.Context, fn func(kv.Txn) error) error {
	kinds, err := watchedUpdate(ctx, s.Store, fn)
	if err == nil && kinds["chunk"] && s.armed.CompareAndSwap(true, false) {
		return fmt.Errorf("commit sent, connection lost: %w", kv.ErrUnknownOutcome)
	}
	return err
}

// TestAppendUnknownOutcomeNotRepeated: an append whose commit took effect
// but reported an unknown outcome is committed again by the next flush,
// and the retry does not append the bytes a second time.
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
	if en := e.v.Fsync(ctx, fh); en == 0 {
		t.Fatal("fsync whose commit was lost succeeded")
	}
	e.release(t, fh) // flushes again: the retry
	ino, _, en := e.v.Lookup(ctx, root, base.RootIno, "log")
	if en != 0 {
		t.Fatal(en)
	}
	if got := e.readAll(t, ino); string(got) != "first\nsecond\n" {
		t.Fatalf("file holds %q, want each line once", got)
	}
}
