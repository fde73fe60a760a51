package meta

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/kv/counted"
	"github.com/cairnfs/cairn/internal/kv/postgres"
	"github.com/cairnfs/cairn/internal/testenv/pgtest"
)

// leaseClients opens n clients of one new PostgreSQL volume, each with a
// session of the given timeout (leases need one). The first one's store
// is counted.
func leaseClients(t *testing.T, n int, timeout time.Duration) ([]*Meta, *counted.Store) {
	t.Helper()
	return leaseClientsWith(t, make([]Options, n), timeout)
}

// leaseClientsWith is leaseClients, client i opened with opts[i].
func leaseClientsWith(t *testing.T, opts []Options, timeout time.Duration) ([]*Meta, *counted.Store) {
	t.Helper()
	n := len(opts)
	url := pgtest.NewDatabase(t)
	var first *counted.Store
	var out []*Meta
	for i := range n {
		s, err := postgres.Open(ctx, url, postgres.Options{})
		ok(t, err)
		t.Cleanup(func() { _ = s.Close() })
		var st kv.Store = s
		if i == 0 {
			first = counted.New(s)
			st = first
			ok(t, Format(ctx, st, Settings{Name: "pg"}, false))
		}
		m, err := Open(ctx, st, opts[i])
		ok(t, err)
		must[uint64](t)(m.NewSession(ctx, SessionInfo{Host: fmt.Sprint("c", i), Timeout: timeout}))
		out = append(out, m)
	}
	t.Cleanup(func() {
		for _, m := range out {
			_ = m.Close()
		}
	})
	checkOnCleanup(t, out[0])
	return out, first
}

func specStats(t *testing.T, m *Meta) SpecStats {
	t.Helper()
	s, ok := m.SpecStats()
	if !ok {
		t.Fatal("speculative creates are off on PostgreSQL")
	}
	return s
}

func leaseStats(t *testing.T, m *Meta) LeaseStats {
	t.Helper()
	s, ok := m.LeaseStats()
	if !ok {
		t.Fatal("leases are off on PostgreSQL")
	}
	return s
}

// leaseOf looks names up in dir (not found) until m holds dir's lease
// (at once: a recall's back-off is forgotten).
func leaseOf(t *testing.T, m *Meta, dir base.Ino) {
	t.Helper()
	m.leases.mu.Lock()
	delete(m.leases.back, dir)
	m.leases.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		m.leases.mu.Lock()
		held := m.leases.dirs[dir] != nil
		m.leases.mu.Unlock()
		if held {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no lease of directory %d after %d lookups: %+v", dir, i, leaseStats(t, m))
		}
		if _, _, err := m.Lookup(ctx, root, dir, fmt.Sprint("probe", i)); !errors.Is(err, base.ErrNotFound) {
			t.Fatalf("lookup of a missing name: %v", err)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// createClose creates name in dir and closes it; it returns the error,
// for callers off the test's goroutine.
func createClose(m *Meta, dir base.Ino, name string) error {
	ino, _, err := m.Create(ctx, root, dir, name, 0o644, 0)
	if err == nil {
		err = m.CloseFile(ctx, ino)
	}
	return err
}

// createLooked is a create as the kernel makes it: a lookup, then the
// create.
func createLooked(t *testing.T, m *Meta, dir base.Ino, name string) base.Ino {
	t.Helper()
	if _, _, err := m.Lookup(ctx, root, dir, name); !errors.Is(err, base.ErrNotFound) {
		t.Fatalf("lookup of %s before its create: %v", name, err)
	}
	ino, _, err := m.Create(ctx, root, dir, name, 0o640, 0)
	ok(t, err)
	ok(t, m.CloseFile(ctx, ino))
	return ino
}

func TestSharedLeaseCreates(t *testing.T) {
	ms, counter := leaseClients(t, 2, 30*time.Second)
	a, b := ms[0], ms[1]
	d := mkdir(t, a, root, base.RootIno, "d")
	leaseOf(t, a, d)

	// In a leased directory a create and its lookup cost one round trip.
	createLooked(t, a, d, "warm") // learns what it reads
	before, spec0 := counter.Stats().Total().Transactions, specStats(t, a)
	kinds0 := counter.Stats().Kinds
	inos := map[string]base.Ino{}
	const files = 40
	for i := range files {
		name := fmt.Sprint("f", i)
		inos[name] = createLooked(t, a, d, name)
	}
	spec := specStats(t, a)
	if n := spec.Committed - spec0.Committed; n != files {
		t.Fatalf("%d of %d creates ran speculatively: %+v", n, files, spec)
	}
	if spec.Missed != spec0.Missed || spec.Failed != spec0.Failed {
		t.Fatalf("creates with known predictions missed or failed: %+v, before %+v", spec, spec0)
	}
	// Each create: the guarded write, and the close's hold release (a
	// second transaction of its own).
	n := counter.Stats().Total().Transactions - before
	t.Logf("%d creates with their lookups and closes: %d transactions", files, n)
	if n > 2*files {
		for k, v := range counter.Stats().Kinds {
			t.Logf("%s: %d", k, v.Transactions-kinds0[k].Transactions)
		}
		t.Fatalf("%d creates with their lookups and closes took %d round trips, want at most %d (%+v, %+v)", files, n, 2*files, specStats(t, a), leaseStats(t, a))
	}

	// The other client sees every file (close-to-open).
	for name, ino := range inos {
		got, attr, err := b.Lookup(ctx, root, d, name)
		ok(t, err)
		if got != ino || attr.Mode&0o7777 != 0o640 {
			t.Fatalf("%s: inode %d %+v, want %d", name, got, attr, ino)
		}
	}
	// Its create in d recalls the lease, then runs.
	s0 := leaseStats(t, a)
	x := createLooked(t, b, d, "from-b")
	if s := leaseStats(t, a); s.Held != 0 || s.Released != s0.Released+1 {
		t.Fatalf("after the other client's create: %+v (before %+v)", s, s0)
	}
	if s := leaseStats(t, b); s.Recalls == 0 {
		t.Fatalf("the other client created in a leased directory without a recall: %+v", s)
	}
	// And the former holder sees it.
	got, _, err := a.Lookup(ctx, root, d, "from-b")
	ok(t, err)
	if got != x {
		t.Fatalf("the former holder finds from-b as %d, want %d", got, x)
	}
	u := must[Usage](t)(b.Usage(ctx))
	if u.Inodes != 1+1+1+files+1 { // root, d, warm, the files, from-b
		t.Fatalf("usage counts %d inodes, want %d", u.Inodes, 4+files)
	}
	// warm, the files, from-b, and the probes' names are not entries.
	if n := len(names(t, b, d)); n != 1+files+1 {
		t.Fatalf("%d entries, want %d", n, 2+files)
	}
}

func TestSharedLeaseChangesRecall(t *testing.T) {
	ms, _ := leaseClients(t, 2, 30*time.Second)
	a, b := ms[0], ms[1]
	d := mkdir(t, a, root, base.RootIno, "d")
	f := create(t, a, root, d, "f")
	for i, change := range []func() error{
		func() error {
			return createClose(b, d, "new")
		},
		func() error { return b.Unlink(ctx, root, d, "new") },
		func() error { _, _, err := b.Mknod(ctx, root, d, "sub", base.TypeDir, 0o755, 0, 0, ""); return err },
		func() error { return b.Rename(ctx, root, d, "f", d, "g", 0) },
		func() error { return b.Rename(ctx, root, d, "g", base.RootIno, "g", 0) },
		func() error {
			_, err := b.SetAttr(ctx, root, d, SetAttrRequest{Valid: SetMode, Mode: 0o700})
			return err
		},
	} {
		leaseOf(t, a, d)
		if err := change(); err != nil {
			t.Fatalf("change %d: %v", i, err)
		}
		if s := leaseStats(t, a); s.Held != 0 {
			t.Fatalf("change %d: the lease is still held: %+v", i, s)
		}
	}
	// What b did, a sees.
	if _, _, err := a.Lookup(ctx, root, d, "sub"); err != nil {
		t.Fatal(err)
	}
	if got, _, err := a.Lookup(ctx, root, base.RootIno, "g"); err != nil || got != f {
		t.Fatalf("g: %d %v, want %d", got, err, f)
	}
	if attr := must[base.Attr](t)(a.GetAttr(ctx, d)); attr.Mode&0o7777 != 0o700 {
		t.Fatalf("mode %o after the other client's chmod", attr.Mode&0o7777)
	}
}

// A snapshot changes what a speculative create predicted: its guard
// fails and it runs again as usual.
func TestSharedLeaseSpecGuard(t *testing.T) {
	ms, _ := leaseClients(t, 2, 30*time.Second)
	a, b := ms[0], ms[1]
	d := mkdir(t, a, root, base.RootIno, "d")
	leaseOf(t, a, d)
	createLooked(t, a, d, "before")
	createLooked(t, a, d, "before2")
	must[Snapshot](t)(b.CreateSnapshot(ctx, "s"))
	s0 := specStats(t, a)
	ino := createLooked(t, a, d, "after")
	s1 := specStats(t, a)
	if s1.Failed != s0.Failed+1 {
		t.Fatalf("create after a snapshot: %+v, before %+v", s1, s0)
	}
	createLooked(t, a, d, "after2")
	if s2 := specStats(t, a); s2.Committed != s1.Committed+1 {
		t.Fatalf("the next create did not run speculatively: %+v", s2)
	}
	got, _, err := b.Lookup(ctx, root, d, "after")
	ok(t, err)
	if got != ino {
		t.Fatalf("after: %d, want %d", got, ino)
	}
	// The snapshot does not have it.
	v := b.View(must[Snapshot](t)(b.SnapshotByName(ctx, "s")))
	if _, _, err := v.Lookup(ctx, root, d, "after"); !errors.Is(err, base.ErrNotFound) {
		t.Fatalf("the snapshot sees a later file: %v", err)
	}
	if _, _, err := v.Lookup(ctx, root, d, "before2"); err != nil {
		t.Fatal(err)
	}
}

// The leases of a client that stops answering are released when its
// session is declared dead; a waiting change then runs.
func TestSharedLeaseDeadHolder(t *testing.T) {
	ms, _ := leaseClients(t, 2, time.Second)
	a, b := ms[0], ms[1]
	d := mkdir(t, a, root, base.RootIno, "d")
	leaseOf(t, a, d)
	// It no longer hears recalls, as if it were stopped, but keeps its
	// lease until it stops trusting it.
	a.leases.mu.Lock()
	stop := a.leases.stopSub
	a.leases.stopSub = nil
	a.leases.mu.Unlock()
	stop()
	done := make(chan error, 1)
	go func() {
		done <- createClose(b, d, "x")
	}()
	select {
	case err := <-done:
		t.Fatalf("a create in a directory whose holder is alive did not wait: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	// b heartbeats, as a mount does, until it may judge a (reach.go).
	var expired []SessionInfo
	for deadline := time.Now().Add(10 * time.Second); len(expired) == 0 && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		ok(t, b.Heartbeat(ctx))
		expired = must[[]SessionInfo](t)(b.ExpireSessions(ctx, time.Second))
	}
	if len(expired) != 1 {
		t.Fatalf("expired %d sessions, want 1", len(expired))
	}
	select {
	case err := <-done:
		ok(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the create still waits after the holder's session expired")
	}
	// The dead holder no longer trusts its lease (half its session
	// timeout after its last heartbeat): it sees x.
	a.leases.mu.Lock()
	held := a.leases.dirs[d] != nil
	a.leases.mu.Unlock()
	if !held {
		t.Fatal("the stopped holder forgot its lease: the test shows nothing")
	}
	if _, _, err := a.Lookup(ctx, root, d, "x"); err != nil {
		t.Fatalf("the expired holder: %v", err)
	}
	ctx2, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := a.Heartbeat(ctx2); !errors.Is(err, base.ErrStale) {
		t.Fatalf("heartbeat of the expired session: %v", err)
	}
}

// Creates in several leased directories at once: their guarded writes
// share transactions (specGroup) and every file is there after.
func TestSharedLeaseConcurrentCreates(t *testing.T) {
	ms, _ := leaseClients(t, 2, 30*time.Second)
	a, b := ms[0], ms[1]
	const workers, files = 4, 30
	var dirs []base.Ino
	for i := range workers {
		d := mkdir(t, a, root, base.RootIno, fmt.Sprint("d", i))
		leaseOf(t, a, d)
		dirs = append(dirs, d)
	}
	s0 := specStats(t, a)
	errs := make(chan error, workers)
	for _, d := range dirs {
		go func() {
			for k := range files {
				name := fmt.Sprint("f", k)
				if _, _, err := a.Lookup(ctx, root, d, name); !errors.Is(err, base.ErrNotFound) {
					errs <- fmt.Errorf("lookup of %s: %v", name, err)
					return
				}
				if err := createClose(a, d, name); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		ok(t, <-errs)
	}
	if s := specStats(t, a); s.Committed-s0.Committed < workers*files/2 {
		t.Fatalf("few creates ran speculatively: %+v, before %+v", s, s0)
	}
	for _, d := range dirs {
		if n := len(names(t, b, d)); n != files {
			t.Fatalf("directory %d has %d entries, want %d", d, n, files)
		}
	}
	if u := must[Usage](t)(b.Usage(ctx)); u.Inodes != 1+workers+workers*files {
		t.Fatalf("usage counts %d inodes, want %d", u.Inodes, 1+workers+workers*files)
	}
}

// A lookup answered from a lease answers as the store would: search
// permission first, then the name's validity.
func TestSharedLeaseLookupErrors(t *testing.T) {
	ms, _ := leaseClients(t, 1, 30*time.Second)
	a := ms[0]
	d := mkdir(t, a, root, base.RootIno, "d")
	leaseOf(t, a, d)
	long := string(bytes.Repeat([]byte("n"), MaxNameLen+1))
	if _, _, err := a.Lookup(ctx, root, d, long); !errors.Is(err, base.ErrNameTooLong) {
		t.Fatalf("lookup of a name of %d bytes: %v", len(long), err)
	}
	_, err := a.SetAttr(ctx, root, d, SetAttrRequest{Valid: SetMode, Mode: 0o700})
	ok(t, err)
	other := &Caller{Uid: 1000, Gid: 1000}
	if _, _, err := a.Lookup(ctx, other, d, "x"); !errors.Is(err, base.ErrAccess) {
		t.Fatalf("lookup without search permission: %v", err)
	}
	if s := leaseStats(t, a); s.Held != 1 || s.Answered < 2 {
		t.Fatalf("the lookups were not answered from the lease: %+v", s)
	}
}

// A client with leases off takes none, and still waits for others'.
func TestSharedNoLeases(t *testing.T) {
	ms, _ := leaseClientsWith(t, []Options{{}, {NoLeases: true}}, 30*time.Second)
	a, b := ms[0], ms[1]
	if _, ok := b.LeaseStats(); ok {
		t.Fatal("leases are on with NoLeases")
	}
	d := mkdir(t, a, root, base.RootIno, "d")
	e := mkdir(t, b, root, base.RootIno, "e")
	for i := range 20 {
		createLooked(t, b, e, fmt.Sprint("f", i))
	}
	ok(t, b.store.View(ctx, func(r kv.Reader) error {
		v, err := r.Get(leaseKey(e))
		if v != nil || err != nil {
			t.Fatalf("a client with leases off leased a directory: %x %v", v, err)
		}
		return nil
	}))
	leaseOf(t, a, d)
	createLooked(t, b, d, "x")
	if s := leaseStats(t, a); s.Held != 0 || s.Released == 0 {
		t.Fatalf("the lease was not recalled: %+v", s)
	}
	if _, _, err := a.Lookup(ctx, root, d, "x"); err != nil {
		t.Fatal(err)
	}
}

// Two clients, two goroutines each, create, unlink and rename in three
// directories at once, taking and recalling leases; every name either
// lists is found by both, and no lease answers "absent" for a name that
// exists.
func TestSharedLeaseStress(t *testing.T) {
	t.Run("leases", func(t *testing.T) { leaseStress(t, false) })
	t.Run("no-leases", func(t *testing.T) { leaseStress(t, true) })
}

func leaseStress(t *testing.T, off bool) {
	ms, _ := leaseClientsWith(t, []Options{{NoLeases: off}, {NoLeases: off}}, 30*time.Second)
	for _, m := range ms {
		if m.leases != nil {
			m.leases.mu.Lock()
			m.leases.backoff = time.Millisecond // leases change hands often
			m.leases.mu.Unlock()
		}
	}
	var dirs []base.Ino
	for i := range 3 {
		dirs = append(dirs, mkdir(t, ms[0], root, base.RootIno, fmt.Sprint("d", i)))
	}
	const ops = 150
	errs := make(chan error, 4)
	for w := range 4 {
		m := ms[w%2]
		go func() {
			rng := uint64(w*7919 + 1)
			next := func(n int) int {
				rng = rng*6364136223846793005 + 1442695040888963407
				return int(rng>>33) % n
			}
			for range ops {
				d, name := dirs[next(len(dirs))], fmt.Sprint("n", next(40))
				var err error
				switch next(4) {
				case 0, 1:
					if _, _, err = m.Lookup(ctx, root, d, name); errors.Is(err, base.ErrNotFound) {
						err = createClose(m, d, name)
					}
				case 2:
					err = m.Unlink(ctx, root, d, name)
				case 3:
					err = m.Rename(ctx, root, d, name, dirs[next(len(dirs))], fmt.Sprint("n", next(40)), 0)
				}
				if err != nil && !errors.Is(err, base.ErrExist) && !errors.Is(err, base.ErrNotFound) {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 4 {
		ok(t, <-errs)
	}
	total := 0
	for _, d := range dirs {
		listed := names(t, ms[1], d)
		total += len(listed)
		if other := names(t, ms[0], d); len(other) != len(listed) {
			t.Fatalf("directory %d: the clients list %d and %d names", d, len(other), len(listed))
		}
		for _, n := range listed {
			for i, m := range ms {
				if _, _, err := m.Lookup(ctx, root, d, n); err != nil {
					var held, has bool
					if m.leases != nil {
						m.leases.mu.Lock()
						if dl := m.leases.dirs[d]; dl != nil {
							held = true
							_, has = dl.names[n]
						}
						m.leases.mu.Unlock()
					}
					var ino base.Ino
					var a, pa base.Attr
					var lease []byte
					serr := m.lookupLoose(ctx, root, d, n, &ino, &a, &pa, &lease)
					t.Fatalf("client %d does not find %s in %d: %v (lease held %v, name in it %v; store: %d %v)", i, n, d, err, held, has, ino, serr)
				}
			}
		}
	}
	if u := must[Usage](t)(ms[1].Usage(ctx)); u.Inodes != uint64(1+len(dirs)+total) {
		t.Fatalf("usage counts %d inodes, want %d", u.Inodes, 1+len(dirs)+total)
	}
	if !off {
		t.Logf("%d files; leases %+v and %+v", total, leaseStats(t, ms[0]), leaseStats(t, ms[1]))
	}
}

// Another client creates a name while the lease is being taken, in a
// directory whose attribute a kept snapshot holds (so the create writes a
// new version of it, not the newest one): the taking conflicts with the
// create and runs again, and its name set holds the new name.
func TestSharedLeaseRacesCreateAfterSnapshot(t *testing.T) {
	ms, _ := leaseClientsWith(t, []Options{{}, {NoLeases: true}}, 30*time.Second)
	a, b := ms[0], ms[1]
	d := mkdir(t, a, root, base.RootIno, "d")
	_, err := a.CreateSnapshot(ctx, "kept")
	ok(t, err)
	var once sync.Once
	created := make(chan error, 1)
	a.leases.mu.Lock()
	a.leases.acquireHook = func(dir base.Ino) {
		once.Do(func() {
			created <- createClose(b, dir, "x")
		})
	}
	a.leases.mu.Unlock()
	leaseOf(t, a, d)
	ok(t, <-created)
	if _, _, err := a.Lookup(ctx, root, d, "x"); err != nil {
		t.Fatalf("the lease holder does not find the name created while it took the lease: %v", err)
	}
}

// A sweep that declares the session dead while it takes a lease: the
// taking conflicts with the sweep, and no lease record of the dead
// session is left behind.
func TestSharedLeaseRacesSessionEnd(t *testing.T) {
	ms, _ := leaseClientsWith(t, []Options{{}, {NoLeases: true}}, 30*time.Second)
	a, b := ms[0], ms[1]
	d := mkdir(t, a, root, base.RootIno, "d")
	sid := a.sessionID()
	var once sync.Once
	swept := make(chan error, 1)
	a.leases.mu.Lock()
	a.leases.acquireHook = func(base.Ino) {
		once.Do(func() {
			swept <- b.mutateRaw(ctx, func(o *op) error {
				o.Delete(sessionKey(sid))
				return o.releaseSessions(map[uint64]bool{sid: true})
			})
		})
	}
	a.leases.mu.Unlock()
	for i := 0; i < 2 || len(swept) == 0; i++ {
		if _, _, err := a.Lookup(ctx, root, d, fmt.Sprint("probe", i)); !errors.Is(err, base.ErrNotFound) {
			t.Fatalf("lookup of a missing name: %v", err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	ok(t, <-swept)
	// The acquisition ends (with no lease) before its busy mark goes.
	for deadline := time.Now().Add(10 * time.Second); ; {
		a.leases.mu.Lock()
		busy := a.leases.busy[d]
		a.leases.mu.Unlock()
		if !busy {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the acquisition did not end")
		}
		time.Sleep(time.Millisecond)
	}
	err := b.store.View(ctx, func(r kv.Reader) error {
		v, err := r.Get(leaseKey(d))
		if err == nil && v != nil {
			err = fmt.Errorf("lease record %x of the ended session %d is left", v, sid)
		}
		return err
	})
	ok(t, err)
}

// A lease record whose holder has no session (left by an end that raced
// an acquisition) does not stop changes of the directory: the first one
// deletes it.
func TestSharedStaleLease(t *testing.T) {
	ms, _ := leaseClientsWith(t, []Options{{NoLeases: true}}, 30*time.Second)
	m := ms[0]
	d := mkdir(t, m, root, base.RootIno, "d")
	ok(t, m.rawUpdate(ctx, func(t *wtx) error {
		t.Set(leaseKey(d), binary.BigEndian.AppendUint64(nil, 99999))
		return nil
	}))
	done := make(chan error, 1)
	go func() {
		done <- createClose(m, d, "f")
	}()
	select {
	case err := <-done:
		ok(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("a create waits for the lease of an ended session")
	}
	ok(t, m.store.View(ctx, func(r kv.Reader) error {
		if v, err := r.Get(leaseKey(d)); err != nil || v != nil {
			return fmt.Errorf("the stale lease record is still there: %x %v", v, err)
		}
		return nil
	}))
}
