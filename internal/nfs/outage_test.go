package nfs

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/nfs/nfsclient"
	"github.com/cairnfs/cairn/internal/nfs/proto"
)

// unreachableError is what a metadata store on a server reports once an
// outage has lasted its timeout, as kv/postgres does: it wraps
// kv.ErrUnavailable and the dial error inside, here a stopped
// PostgreSQL's missing Unix socket, whose errno is ENOENT.
type unreachableError struct{ waited time.Duration }

func (e unreachableError) Error() string {
	return fmt.Sprintf("cannot reach PostgreSQL at unix socket /tmp/pg/.s.PGSQL.5432 (gave up after %v): dial error", e.waited)
}

func (e unreachableError) Unwrap() []error {
	return []error{kv.ErrUnavailable, &net.OpError{Op: "dial", Net: "unix",
		Err: os.NewSyscallError("connect", syscall.ENOENT)}}
}

// outageStore is a metadata store whose server can be taken away. While
// it is down, a call waits for it until the outage has lasted timeout
// (one clock for the store, as kv/postgres keeps: a call that starts
// later fails at once), then fails with an unreachableError. A call
// still waiting when the server comes back goes on.
type outageStore struct {
	kv.Store
	timeout time.Duration

	mu     sync.Mutex
	downAt time.Time // zero while up
	after  int       // ≥ 0: down after so many more calls
	calls  int       // calls made
	failed int       // calls that failed
}

func (s *outageStore) setDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.after = -1
	if !down {
		s.downAt = time.Time{}
	} else if s.downAt.IsZero() {
		s.downAt = time.Now()
	}
}

// downAfter takes the server away once n more calls have reached it.
func (s *outageStore) downAfter(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.downAt, s.after = time.Time{}, n
}

// count returns the calls made so far.
func (s *outageStore) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// reach waits for the server as the store's outage policy says; nil
// means it answers.
func (s *outageStore) reach(ctx context.Context) error {
	s.mu.Lock()
	s.calls++
	if s.downAt.IsZero() && s.after >= 0 {
		if s.after == 0 {
			s.downAt = time.Now()
		}
		s.after--
	}
	s.mu.Unlock()
	for {
		s.mu.Lock()
		at := s.downAt
		s.mu.Unlock()
		if at.IsZero() {
			return nil
		}
		if waited := time.Since(at); waited >= s.timeout {
			s.mu.Lock()
			s.failed++
			s.mu.Unlock()
			return unreachableError{waited: waited}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (s *outageStore) Update(ctx context.Context, fn func(kv.Txn) error) error {
	if err := s.reach(ctx); err != nil {
		return err
	}
	return s.Store.Update(ctx, fn)
}

func (s *outageStore) View(ctx context.Context, fn func(kv.Reader) error) error {
	if err := s.reach(ctx); err != nil {
		return err
	}
	return s.Store.View(ctx, fn)
}

func (s *outageStore) Sync(ctx context.Context) error {
	if err := s.reach(ctx); err != nil {
		return err
	}
	return s.Store.Sync(ctx)
}

// outageEnv is a gateway over an outageStore, with a directory d that
// holds a file f of content data and a symlink l.
type outageEnv struct {
	*env
	store *outageStore
	c     *nfsclient.Client
	root  []byte
	d, f  []byte
	l     []byte
	data  []byte
}

func newOutageEnv(t *testing.T, timeout time.Duration) *outageEnv {
	t.Helper()
	store := &outageStore{timeout: timeout, after: -1}
	v, m, cs := newVFSOver(t, func(s kv.Store) kv.Store { store.Store = s; return store })
	e := &outageEnv{env: &env{v: v, m: m, cs: cs}, store: store}
	e.start(t, Options{})
	e.c, e.root = e.client(t)
	t.Cleanup(func() { store.setDown(false) }) // before the gateway and vfs close
	var err error
	if e.d, err = e.c.Mkdir(e.root, "d", 0o755); err != nil {
		t.Fatal(err)
	}
	if e.f, err = e.c.Create(e.d, "f", proto.CreateGuarded, proto.Sattr3{Mode: u32(0o644)}, [8]byte{}); err != nil {
		t.Fatal(err)
	}
	e.data = randBytes(100<<10, 7)
	if _, err := e.c.Write(e.f, 0, e.data, proto.FileSync); err != nil {
		t.Fatal(err)
	}
	if e.l, err = e.c.Symlink(e.d, "l", "f"); err != nil {
		t.Fatal(err)
	}
	return e
}

// storeProcs are the NFS procedures that need the metadata store, each
// run on names of its own for round (so that each round finds what it
// needs), given what prepare made before the round.
func (e *outageEnv) storeProcs() []struct {
	name    string
	prepare func(round int) error
	run     func(round int) error
} {
	c := e.c
	name := func(what string, round int) string { return fmt.Sprintf("%s-%d", what, round) }
	return []struct {
		name    string
		prepare func(round int) error
		run     func(round int) error
	}{
		{name: "GETATTR", run: func(int) error { _, err := c.GetAttr(e.f); return err }},
		{name: "SETATTR", run: func(round int) error {
			return c.SetAttr(e.f, proto.Sattr3{Mode: u32(0o640 + uint32(round))})
		}},
		{name: "LOOKUP", run: func(int) error { _, _, err := c.Lookup(e.d, "f"); return err }},
		{name: "LOOKUP missing", run: func(round int) error {
			_, _, err := c.Lookup(e.d, name("none", round))
			if status(err) == proto.NFS3ErrNoEnt {
				return nil // the store answered: no such name
			}
			return err
		}},
		{name: "ACCESS", run: func(int) error {
			got, err := c.Access(e.f, proto.AccessRead|proto.AccessModify)
			if err == nil && got != proto.AccessRead|proto.AccessModify {
				return fmt.Errorf("ACCESS granted %#x", got)
			}
			return err
		}},
		{name: "READLINK", run: func(int) error { _, err := c.Readlink(e.l); return err }},
		{name: "READ", run: func(int) error {
			got, _, err := c.Read(e.f, 0, uint32(len(e.data)))
			if err == nil && !bytes.Equal(got, e.data) {
				return fmt.Errorf("READ returned %d bytes that differ", len(got))
			}
			return err
		}},
		{name: "WRITE", run: func(int) error {
			_, err := c.Write(e.f, 0, e.data[:4096], proto.Unstable)
			return err
		}},
		{name: "WRITE stable", run: func(int) error {
			_, err := c.Write(e.f, 0, e.data[:4096], proto.FileSync)
			return err
		}},
		{name: "COMMIT", run: func(int) error { _, err := c.Commit(e.f); return err }},
		{
			// A write buffered before the outage, committed during it.
			name: "COMMIT of a buffered write",
			prepare: func(round int) error {
				_, err := c.Write(e.f, 4096, e.data[4096:8192], proto.Unstable)
				return err
			},
			run: func(int) error { _, err := c.Commit(e.f); return err },
		},
		{name: "CREATE unchecked", run: func(round int) error {
			_, err := c.Create(e.d, name("new", round), proto.CreateUnchecked, proto.Sattr3{}, [8]byte{})
			return err
		}},
		{name: "CREATE unchecked existing", run: func(int) error {
			_, err := c.Create(e.d, "f", proto.CreateUnchecked, proto.Sattr3{}, [8]byte{})
			return err
		}},
		{name: "CREATE guarded", run: func(round int) error {
			_, err := c.Create(e.d, name("guarded", round), proto.CreateGuarded, proto.Sattr3{}, [8]byte{})
			return err
		}},
		{name: "CREATE exclusive", run: func(round int) error {
			_, err := c.Create(e.d, name("excl", round), proto.CreateExclusive, proto.Sattr3{}, [8]byte{1, 2, 3, 4, 5, 6, 7, byte(round)})
			return err
		}},
		{name: "MKDIR", run: func(round int) error { _, err := c.Mkdir(e.d, name("dir", round), 0o755); return err }},
		{name: "SYMLINK", run: func(round int) error { _, err := c.Symlink(e.d, name("sym", round), "f"); return err }},
		{name: "MKNOD", run: func(round int) error {
			_, err := c.Mknod(e.d, name("fifo", round), proto.NF3FIFO, 0o644, 0, 0)
			return err
		}},
		{name: "LINK", run: func(round int) error { return c.Link(e.f, e.d, name("link", round)) }},
		{
			name: "REMOVE",
			prepare: func(round int) error {
				_, err := c.Create(e.d, name("rm", round), proto.CreateGuarded, proto.Sattr3{}, [8]byte{})
				return err
			},
			run: func(round int) error { return c.Remove(e.d, name("rm", round)) },
		},
		{
			name: "RMDIR",
			prepare: func(round int) error {
				_, err := c.Mkdir(e.d, name("rmdir", round), 0o755)
				return err
			},
			run: func(round int) error { return c.Rmdir(e.d, name("rmdir", round)) },
		},
		{
			name: "RENAME",
			prepare: func(round int) error {
				_, err := c.Create(e.d, name("mv", round), proto.CreateGuarded, proto.Sattr3{}, [8]byte{})
				return err
			},
			run: func(round int) error { return c.Rename(e.d, name("mv", round), e.d, name("moved", round)) },
		},
		{name: "READDIR", run: func(int) error { _, err := c.ReadDir(e.d, 64<<10); return err }},
		{name: "READDIRPLUS", run: func(int) error { _, _, err := c.ReadDirPlus(e.d, 64<<10); return err }},
		{name: "FSSTAT", run: func(int) error { _, _, err := c.FSStat(e.root); return err }},
	}
}

// TestStoreOutageStatus: with the metadata store unreachable past its
// timeout, every procedure that needs the store answers NFS3ERR_IO — not
// NFS3ERR_STALE (which makes clients drop their handles) nor
// NFS3ERR_NOENT, which the error's errno (a missing Unix socket) would
// say — and answers again once the store is back.
func TestStoreOutageStatus(t *testing.T) {
	e := newOutageEnv(t, 0)
	procs := e.storeProcs()
	for round, down := range []bool{true, false} {
		e.store.setDown(false)
		for _, p := range procs {
			if p.prepare != nil {
				if err := p.prepare(round); err != nil {
					t.Fatalf("%s: preparing: %v", p.name, err)
				}
			}
		}
		e.store.setDown(down)
		for _, p := range procs {
			err := p.run(round)
			switch {
			case down && status(err) != proto.NFS3ErrIO:
				t.Errorf("%s with the store down: %v (status %d); want NFS3ERR_IO (%d)", p.name, err, status(err), proto.NFS3ErrIO)
			case !down && err != nil:
				t.Errorf("%s with the store back: %v", p.name, err)
			}
		}
	}
	if e.store.failed == 0 {
		t.Fatal("no store call failed")
	}
	// What was committed before the outage is intact.
	got, _, err := e.c.Read(e.f, 0, uint32(len(e.data)))
	if err != nil || !bytes.Equal(got, e.data) {
		t.Errorf("after the outage READ = %d bytes, %v; want the %d written", len(got), err, len(e.data))
	}
}

// TestStoreOutageBound: an outage that lasts past the store's timeout
// costs each procedure at most about the timeout, however many store
// calls it makes (the handle's attributes, then the operation, then
// the post-operation attributes), and none once the outage has lasted
// the timeout.
func TestStoreOutageBound(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out store timeouts")
	}
	const timeout = 500 * time.Millisecond
	e := newOutageEnv(t, timeout)
	for _, p := range e.storeProcs() {
		if p.prepare != nil {
			if err := p.prepare(0); err != nil {
				t.Fatalf("%s: preparing: %v", p.name, err)
			}
		}
	}
	for _, p := range e.storeProcs() {
		t.Run(p.name, func(t *testing.T) {
			// A fresh outage for each procedure: its first store call
			// waits the timeout, the later ones must not wait again.
			e.store.setDown(false)
			e.store.setDown(true)
			start := time.Now()
			err := p.run(0)
			took := time.Since(start)
			if status(err) != proto.NFS3ErrIO {
				t.Errorf("%v (status %d); want NFS3ERR_IO", err, status(err))
			}
			if took > timeout*3/2 {
				t.Errorf("took %v with a store timeout of %v: it waited for the store more than once", took, timeout)
			}
			// The outage has lasted the timeout: no wait at all.
			start = time.Now()
			_ = p.run(0)
			if took := time.Since(start); took > timeout/2 {
				t.Errorf("again after the timeout: took %v; want an answer at once", took)
			}
		})
	}
	e.store.setDown(false)
}

// TestStoreFailsMidCall: a store that becomes unreachable in the middle
// of a procedure, at each of its store calls in turn, makes it answer
// NFS3ERR_IO, or succeed if what failed was optional (post-operation
// attributes); never another status (a LOOKUP that finds no name and
// then cannot read the directory must not say NOENT, an ACCESS whose
// permission check fails must not deny).
func TestStoreFailsMidCall(t *testing.T) {
	e := newOutageEnv(t, 0)
	round := 0
	for _, p := range e.storeProcs() {
		t.Run(p.name, func(t *testing.T) {
			try := func(after int) (calls int, err error) {
				round++
				e.store.setDown(false)
				if p.prepare != nil {
					if err := p.prepare(round); err != nil {
						t.Fatalf("preparing: %v", err)
					}
				}
				start := e.store.count()
				e.store.downAfter(after)
				err = p.run(round)
				calls = e.store.count() - start
				e.store.setDown(false)
				return calls, err
			}
			calls, err := try(1 << 30)
			if err != nil {
				t.Fatalf("with the store up: %v", err)
			}
			t.Logf("%d store calls", calls)
			for after := range calls {
				if _, err := try(after); err != nil && status(err) != proto.NFS3ErrIO {
					t.Errorf("store down after %d of its %d calls: %v; want NFS3ERR_IO or success", after, calls, err)
				}
			}
		})
	}
}
