package meta

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/kv/counted"
	"github.com/cairnfs/cairn/internal/kv/postgres"
	"github.com/cairnfs/cairn/internal/testenv/pgtest"
)

// Races between clients on a real PostgreSQL, whose transactions are
// snapshot-isolated (not serial like memkv's): the conflicts meta
// materializes must hold.

func TestMain(m *testing.M) { pgtest.Main(m) }

func pgClients(t *testing.T, n int) []*Meta {
	t.Helper()
	return pgClientsWith(t, n, Options{})
}

// pgClientsWith is pgClients with opts for every client.
func pgClientsWith(t *testing.T, n int, opts Options) []*Meta {
	t.Helper()
	url := pgtest.NewDatabase(t)
	open := func() kv.Store {
		s, err := postgres.Open(context.Background(), url, postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	first := open()
	ok(t, Format(ctx, first, Settings{Name: "pg"}, false))
	var out []*Meta
	for i := 0; i < n; i++ {
		s := first
		if i > 0 {
			s = open()
		}
		m, err := Open(ctx, s, opts)
		ok(t, err)
		must[uint64](t)(m.NewSession(ctx, SessionInfo{Host: fmt.Sprint("c", i)}))
		out = append(out, m)
	}
	t.Cleanup(func() {
		for _, m := range out {
			_ = m.Close()
		}
	})
	checkOnCleanup(t, out[0]) // runs first: cleanups run last-in first-out
	return out
}

func TestSharedLockRace(t *testing.T) {
	ms := pgClients(t, 3)
	ino := create(t, ms[0], root, base.RootIno, "f")
	for round := 0; round < 30; round++ {
		var wg sync.WaitGroup
		won := make([]bool, len(ms))
		errs := make([]error, len(ms))
		for i, m := range ms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := m.SetPosixLock(ctx, ino, 1, Lock{Type: WriteLock, Start: 10, End: 20}, false)
				if err == nil {
					won[i] = true
				} else if !errors.Is(err, base.ErrWouldBlock) {
					errs[i] = err
				}
			}()
		}
		wg.Wait()
		n := 0
		for i := range ms {
			ok(t, errs[i])
			if won[i] {
				n++
				ok(t, ms[i].SetPosixLock(ctx, ino, 1, Lock{Type: Unlock, Start: 0, End: LockEOF}, false))
			}
		}
		if n != 1 {
			t.Fatalf("round %d: %d clients got the same write lock", round, n)
		}
	}
}

func TestSharedDirectoryMoveRace(t *testing.T) {
	ms := pgClients(t, 2)
	a, b := ms[0], ms[1]
	for round := 0; round < 20; round++ {
		pa := mkdir(t, a, root, base.RootIno, fmt.Sprint("pa", round))
		pb := mkdir(t, a, root, base.RootIno, fmt.Sprint("pb", round))
		da := mkdir(t, a, root, pa, "a")
		db := mkdir(t, a, root, pb, "b")
		ax := mkdir(t, a, root, da, "x")
		bc := mkdir(t, a, root, db, "c")
		var wg sync.WaitGroup
		errs := make([]error, 2)
		wg.Add(2)
		go func() { defer wg.Done(); errs[0] = a.Rename(ctx, root, pa, "a", bc, "a", 0) }()
		go func() { defer wg.Done(); errs[1] = b.Rename(ctx, root, pb, "b", ax, "b", 0) }()
		wg.Wait()
		if errs[0] == nil && errs[1] == nil {
			t.Fatalf("round %d: both moves committed: a directory cycle", round)
		}
		probs := must[[]Problem](t)(a.Check(ctx, false))
		if len(probs) > 0 {
			t.Fatalf("round %d: %+v", round, probs)
		}
	}
}

func TestSharedConcurrentCreates(t *testing.T) {
	ms := pgClients(t, 2)
	dirs := []base.Ino{mkdir(t, ms[0], root, base.RootIno, "d0"), mkdir(t, ms[0], root, base.RootIno, "d1")}
	var wg sync.WaitGroup
	for i, m := range ms {
		for j := 0; j < 2; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := 0; k < 50; k++ {
					if _, _, err := m.Create(ctx, root, dirs[(i+j)%2], fmt.Sprintf("c%d-%d-%d", i, j, k), 0o644, 0); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	u := must[Usage](t)(ms[1].Usage(ctx))
	if u.Inodes != 1+2+200 {
		t.Fatalf("usage counts %d inodes, want %d", u.Inodes, 203)
	}
	for _, m := range ms {
		ok(t, m.CloseSession(ctx))
	}
}

// A close (releasing the last hold) racing an unlink (removing the last
// name) must not leave an unlinked inode that nobody holds.
func TestSharedCloseUnlinkRace(t *testing.T) {
	ms := pgClients(t, 2)
	a, b := ms[0], ms[1]
	for round := 0; round < 40; round++ {
		name := fmt.Sprint("f", round)
		ino := create(t, a, root, base.RootIno, name)
		must[base.Attr](t)(a.OpenFile(ctx, ino))
		var wg sync.WaitGroup
		errs := make([]error, 2)
		wg.Add(2)
		go func() { defer wg.Done(); errs[0] = a.CloseFile(ctx, ino) }()
		go func() { defer wg.Done(); errs[1] = b.Unlink(ctx, root, base.RootIno, name) }()
		wg.Wait()
		ok(t, errs[0])
		ok(t, errs[1])
		if _, err := a.GetAttr(ctx, ino); !errors.Is(err, base.ErrNotFound) {
			t.Fatalf("round %d: inode %d survives its last close and last name (%v)", round, ino, err)
		}
	}
}

// Snapshots taken while other clients write: a write whose transaction
// read the epoch before a snapshot froze it must not commit into the
// frozen epoch (the epoch fence), or it would escape write-write conflict
// detection with writes of the new epoch: two links racing a snapshot
// would both commit and one nlink increment would be lost (Check reports
// bad-nlink). Each snapshot must also show a consistent tree.
func TestSharedSnapshotFence(t *testing.T) {
	ms := pgClients(t, 3)
	f := create(t, ms[1], root, base.RootIno, "f")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 1; i < len(ms); i++ {
		for j := 0; j < 2; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := 0; ; k++ {
					select {
					case <-stop:
						return
					default:
					}
					if _, err := ms[i].Link(ctx, root, f, base.RootIno, fmt.Sprintf("l%d-%d-%d", i, j, k)); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	for n := 0; n < 40; n++ {
		must[Snapshot](t)(ms[0].CreateSnapshot(ctx, fmt.Sprint("s", n)))
	}
	close(stop)
	wg.Wait()
	probs := must[[]Problem](t)(ms[0].Check(ctx, false))
	for _, p := range probs {
		t.Errorf("check: %s %s", p.Kind, p.Detail)
	}
	// Delete half of them while the others stay, then the rest.
	for n := 0; n < 40; n += 2 {
		ok(t, ms[n%3].DeleteSnapshot(ctx, fmt.Sprint("s", n), nil))
	}
	for n := 1; n < 40; n += 2 {
		ok(t, ms[0].DeleteSnapshot(ctx, fmt.Sprint("s", n), nil))
	}
	for _, m := range ms {
		ok(t, m.CloseSession(ctx))
	}
}

// TestSharedUnlinkFollows unlinks on PostgreSQL, where the entry's inode,
// its holds, xattrs and chunks are read through kv.Follow in the first
// round trip: a file with an xattr and data is destroyed and its slices
// queued; a file another client holds open is kept until its close.
func TestSharedUnlinkFollows(t *testing.T) {
	ms := pgClients(t, 2)
	a, b := ms[0], ms[1]
	f := create(t, a, root, base.RootIno, "data")
	ok(t, a.SetXattr(ctx, root, f, "user.k", []byte("v"), 0))
	s := newSlice(t, a, 0, 100)
	_, err := a.WriteSlice(ctx, f, 3, s, 1000)
	ok(t, err)
	ok(t, a.Unlink(ctx, root, base.RootIno, "data"))
	if _, err := b.GetAttr(ctx, f); !errors.Is(err, base.ErrNotFound) {
		t.Fatalf("unlinked file with data: %v", err)
	}
	pd := must[[]base.Slice](t)(a.listPending(ctx, 0))
	if len(pd) != 1 || pd[0].ID != s.ID {
		t.Fatalf("pending deletes %v, want slice %d", pd, s.ID)
	}

	h := create(t, a, root, base.RootIno, "held")
	must[base.Attr](t)(b.OpenFile(ctx, h))
	ok(t, a.Unlink(ctx, root, base.RootIno, "held"))
	if at, err := a.GetAttr(ctx, h); err != nil || at.Nlink != 0 {
		t.Fatalf("held file after unlink: %+v, %v", at, err)
	}
	ok(t, b.CloseFile(ctx, h))
	if _, err := a.GetAttr(ctx, h); !errors.Is(err, base.ErrNotFound) {
		t.Fatalf("held file after its last close: %v", err)
	}
}

// TestSharedUnlinkAcrossSnapshots removes files on PostgreSQL, where an
// unlink reads the versions older than the live epoch in its first round
// trip for the epoch the client last saw: right after a snapshot of its
// own, and after one by another client (its guess is then stale and the
// unlink looks again). Each snapshot keeps what it saw; Check (at
// cleanup) finds no version left that nothing sees.
func TestSharedUnlinkAcrossSnapshots(t *testing.T) {
	ms := pgClients(t, 2)
	a, b := ms[0], ms[1]
	var snaps []Snapshot
	var gone []string
	for round, snapper := range []*Meta{a, b, a} {
		names := []string{fmt.Sprint("old", round), fmt.Sprint("new", round)}
		create(t, a, root, base.RootIno, names[0])
		snaps = append(snaps, must[Snapshot](t)(snapper.CreateSnapshot(ctx, fmt.Sprint("s", round))))
		create(t, a, root, base.RootIno, names[1])
		for _, n := range names {
			ok(t, a.Unlink(ctx, root, base.RootIno, n))
			gone = append(gone, n)
		}
		for _, n := range gone {
			_, _, err := a.Lookup(ctx, root, base.RootIno, n)
			wantErr(t, err, base.ErrNotFound)
		}
		// Snapshot i has only the old file of round i (the earlier ones
		// were removed before it), none of the new ones.
		for i, s := range snaps {
			for r := range round + 1 {
				_, _, err := a.View(s).Lookup(ctx, root, base.RootIno, fmt.Sprint("old", r))
				if r == i {
					ok(t, err)
				} else {
					wantErr(t, err, base.ErrNotFound)
				}
				_, _, err = a.View(s).Lookup(ctx, root, base.RootIno, fmt.Sprint("new", r))
				wantErr(t, err, base.ErrNotFound)
			}
		}
	}
	for i := range snaps {
		ok(t, b.DeleteSnapshot(ctx, fmt.Sprint("s", i), nil))
	}
}

// scanCounter is a store whose update transactions count their Scans
// (each a statement on a server) and pass kv.FirstReader on.
type scanCounter struct {
	kv.Store
	scans atomic.Int64
}

type scanCountTxn struct {
	kv.Txn
	c *scanCounter
}

func (s *scanCounter) Update(ctx context.Context, fn func(tx kv.Txn) error) error {
	return s.Store.Update(ctx, func(tx kv.Txn) error { return fn(scanCountTxn{tx, s}) })
}

func (t scanCountTxn) Scan(start, end []byte, reverse bool, fn func(k, v []byte) bool) error {
	t.c.scans.Add(1)
	return t.Txn.Scan(start, end, reverse, fn)
}

func (t scanCountTxn) Firsts(ranges []kv.Range) ([]kv.Pair, error) { return kv.Firsts(t.Txn, ranges) }

// TestSharedUnlinkReadsAhead checks that an unlink on PostgreSQL, once
// the client knows the live epoch, reads everything in its first round
// trip (no Scan after it): the versions older than the live epoch too.
func TestSharedUnlinkReadsAhead(t *testing.T) {
	url := pgtest.NewDatabase(t)
	s, err := postgres.Open(ctx, url, postgres.Options{})
	ok(t, err)
	t.Cleanup(func() { _ = s.Close() })
	ok(t, Format(ctx, s, Settings{Name: "pg"}, false))
	sc := &scanCounter{Store: s}
	m, err := Open(ctx, sc, Options{})
	ok(t, err)
	t.Cleanup(func() { _ = m.Close() })
	for i := range 5 {
		create(t, m, root, base.RootIno, fmt.Sprint("f", i))
	}
	for i := range 5 {
		before := sc.scans.Load()
		ok(t, m.Unlink(ctx, root, base.RootIno, fmt.Sprint("f", i)))
		if n := sc.scans.Load() - before; n != 0 {
			t.Fatalf("unlink %d: %d scans after the first round trip", i, n)
		}
	}
}

// TestSharedLookupAhead: once most lookups that reach the server are
// followed by a create of the name, a lookup starts the create's
// transaction (startahead.go). Creates in it are whole and seen by another
// client; a lookup that finds its name, or whose create does not come,
// rolls its transaction back; a create racing another client's create of
// the same name fails with ErrExist; Close ends parked transactions.
func TestSharedLookupAhead(t *testing.T) {
	ms := pgClients(t, 2)
	m, o := ms[1], ms[0] // the cleanup's fsck runs on ms[0]
	d := mkdir(t, m, root, base.RootIno, "d")
	stats := func() AheadStats {
		s, ok := m.AheadStats()
		if !ok {
			t.Fatal("lookups start no transactions on PostgreSQL")
		}
		return s
	}
	inos := map[string]base.Ino{}
	for i := 0; i < 60; i++ {
		name := fmt.Sprint("f", i)
		if _, _, err := m.Lookup(ctx, root, d, name); !errors.Is(err, base.ErrNotFound) {
			t.Fatalf("lookup of %s before its create: %v", name, err)
		}
		ino, _, err := m.Create(ctx, root, d, name, 0o640, 0)
		ok(t, err)
		ok(t, m.CloseFile(ctx, ino))
		inos[name] = ino
	}
	s := stats()
	if s.Used < 30 || s.Score < 50 {
		t.Fatalf("after 60 lookups each followed by a create: %+v", s)
	}
	for name, ino := range inos {
		got, a, err := o.Lookup(ctx, root, d, name)
		ok(t, err)
		if got != ino || a.Mode&0o7777 != 0o640 || a.Nlink != 1 {
			t.Fatalf("the other client finds %s as inode %d %+v, want inode %d", name, got, a, ino)
		}
	}
	u := must[Usage](t)(o.Usage(ctx))
	if u.Inodes != 1+1+60 {
		t.Fatalf("usage counts %d inodes, want 62", u.Inodes)
	}

	// A lookup that finds its name: rolled back at once.
	s = stats()
	got, _, err := m.Lookup(ctx, root, d, "f1")
	ok(t, err)
	if got != inos["f1"] {
		t.Fatalf("lookup of f1 = %d, want %d", got, inos["f1"])
	}
	if n := stats(); n.Started == s.Started || n.Abandoned != s.Abandoned+1 {
		t.Fatalf("a lookup that found its name: %+v, then %+v", s, n)
	}

	// No create follows: rolled back after aheadWait; a later create of
	// the name runs on its own.
	s = stats()
	_, _, err = m.Lookup(ctx, root, d, "late")
	if !errors.Is(err, base.ErrNotFound) {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for stats().Abandoned == s.Abandoned {
		if time.Now().After(deadline) {
			t.Fatalf("a parked transaction without a create is kept: %+v", stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	ino, _, err := m.Create(ctx, root, d, "late", 0o644, 0)
	ok(t, err)
	ok(t, m.CloseFile(ctx, ino))

	// Another client creates the name between the lookup and the create:
	// the create in the older snapshot conflicts, runs again, and finds it.
	s = stats()
	_, _, err = m.Lookup(ctx, root, d, "race")
	if !errors.Is(err, base.ErrNotFound) {
		t.Fatal(err)
	}
	other := create(t, o, root, d, "race")
	if _, _, err := m.Create(ctx, root, d, "race", 0o644, 0); !errors.Is(err, base.ErrExist) {
		t.Fatalf("create of a name another client created after the lookup: %v, want ErrExist", err)
	}
	if n := stats(); n.Used != s.Used+1 || n.Retried != s.Retried+1 {
		t.Fatalf("the racing create did not run in the started transaction and again: %+v, then %+v", s, n)
	}
	if got, _, err := o.Lookup(ctx, root, d, "race"); err != nil || got != other {
		t.Fatalf("race is inode %d (%v), want the other client's %d", got, err, other)
	}

	// Close with a transaction parked: it ends, and so does the store.
	_, _, err = m.Lookup(ctx, root, d, "parked")
	if !errors.Is(err, base.ErrNotFound) {
		t.Fatal(err)
	}
	ok(t, m.Close())
	if _, _, err := m.Create(ctx, root, d, "parked", 0o644, 0); err == nil {
		t.Fatal("create after Close succeeded")
	}
}

// TestSharedOpenReadsFirstChunk: on PostgreSQL an open returns, from the
// round trip that reads the attributes, the slices of the file's first
// chunk as another client committed them; nothing for an empty file, nil
// for a first chunk that is a hole.
func TestSharedOpenReadsFirstChunk(t *testing.T) {
	ms := pgClients(t, 2)
	w, r := ms[0], ms[1]
	f := create(t, w, root, base.RootIno, "f")
	_, first, ok2, err := r.OpenFileChunk(ctx, f)
	ok(t, err)
	if ok2 || first != nil {
		t.Fatalf("open of an empty file returned a first chunk: %v %v", first, ok2)
	}
	ok(t, r.CloseFile(ctx, f))
	s1, s2 := newSlice(t, w, 0, 100), newSlice(t, w, 50, 100)
	_, err = w.WriteSlice(ctx, f, 0, s1, 1)
	ok(t, err)
	_, err = w.WriteSlice(ctx, f, 0, s2, 2)
	ok(t, err)
	a, first, ok2, err := r.OpenFileChunk(ctx, f)
	ok(t, err)
	want := must[[]base.Slice](t)(r.ReadChunk(ctx, f, 0))
	if !ok2 || a.Length != 150 || fmt.Sprint(first) != fmt.Sprint(want) || len(first) != 2 {
		t.Fatalf("open returned %v (%v), length %d; the chunk holds %v", first, ok2, a.Length, want)
	}
	ok(t, r.CloseFile(ctx, f))

	// A file whose first chunk is a hole.
	g := create(t, w, root, base.RootIno, "g")
	_, err = w.WriteSlice(ctx, g, 1, newSlice(t, w, 0, 10), 3)
	ok(t, err)
	a, first, ok2, err = r.OpenFileChunk(ctx, g)
	ok(t, err)
	if !ok2 || first != nil || a.Length != base.ChunkSize+10 {
		t.Fatalf("open of a file with a hole first: %v %v, length %d", first, ok2, a.Length)
	}
	ok(t, r.CloseFile(ctx, g))
}

// TestSharedOpenedAttr: with the listing cache, the first getattr of a
// file after its open is answered with the attributes the open read (the
// front end drops the kernel's at every open); once, and not after this
// client changed them, nor across a later open.
func TestSharedOpenedAttr(t *testing.T) {
	ms := pgClientsWith(t, 2, Options{ListingTTL: time.Minute})
	w, r := ms[0], ms[1]
	f := create(t, w, root, base.RootIno, "f")
	hits := func() int64 { s, _ := r.ListingStats(); return s.Hits }
	mode := func(m *Meta) uint32 { return attr(t, m, f).Mode & 0o7777 }
	chmod := func(m *Meta, mode uint32) {
		_, err := m.SetAttr(ctx, root, f, SetAttrRequest{Valid: SetMode, Mode: mode})
		ok(t, err)
	}

	must[base.Attr](t)(r.OpenFile(ctx, f))
	chmod(w, 0o600) // another client, after the open
	h := hits()
	if got := mode(r); got != 0o644 || hits() != h+1 {
		t.Fatalf("first getattr after the open: mode %o, %d hits (want the open's 644, one hit)", got, hits()-h)
	}
	if got := mode(r); got != 0o600 {
		t.Fatalf("second getattr: mode %o, want the server's 600", got)
	}
	ok(t, r.CloseFile(ctx, f))

	// A later open reads anew.
	must[base.Attr](t)(r.OpenFile(ctx, f))
	chmod(r, 0o640) // this client's own change drops what the open kept
	if got := mode(r); got != 0o640 {
		t.Fatalf("getattr after this client's chmod: mode %o, want 640", got)
	}
	ok(t, r.CloseFile(ctx, f))
	chmod(w, 0o604)
	must[base.Attr](t)(r.OpenFile(ctx, f))
	if got := mode(r); got != 0o604 {
		t.Fatalf("getattr after a new open: mode %o, want 604", got)
	}
	ok(t, r.CloseFile(ctx, f))
}

// Concurrent creates of one client in their own directories touch no
// record in common, and its transactions in flight hold different usage
// and fence shards (shards.go): none runs twice. With shards drawn at
// random, about 3% did (a pair of the four in flight shared one).
func TestSharedCreatesDoNotConflict(t *testing.T) {
	url := pgtest.NewDatabase(t)
	inner, err := postgres.Open(ctx, url, postgres.Options{})
	ok(t, err)
	t.Cleanup(func() { _ = inner.Close() })
	s := counted.New(inner)
	ok(t, Format(ctx, s, Settings{Name: "pg"}, false))
	m, err := Open(ctx, s, Options{})
	ok(t, err)
	t.Cleanup(func() { _ = m.Close() })
	must[uint64](t)(m.NewSession(ctx, SessionInfo{Host: "c"}))
	checkOnCleanup(t, m)
	const workers, files = 4, 150
	var dirs []base.Ino
	for i := range workers {
		dirs = append(dirs, mkdir(t, m, root, base.RootIno, fmt.Sprint("d", i)))
	}
	before := s.Stats().Total()
	var wg sync.WaitGroup
	for _, d := range dirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range files {
				name := fmt.Sprint("f", k)
				// As the kernel does: a lookup, then the create.
				if _, _, err := m.Lookup(ctx, root, d, name); !errors.Is(err, base.ErrNotFound) {
					t.Errorf("lookup of %s: %v", name, err)
					return
				}
				if err := createClose(m, d, name); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	after := s.Stats().Total()
	if n := after.Retries - before.Retries; n != 0 {
		t.Fatalf("%d creates in %d directories ran %d transactions again", workers*files, workers, n)
	}
	if n := after.Transactions - before.Transactions; n < int64(workers*files) {
		t.Fatalf("%d transactions counted for %d creates", n, workers*files)
	}
	u := must[Usage](t)(m.Usage(ctx))
	if u.Inodes != 1+workers+workers*files {
		t.Fatalf("usage counts %d inodes, want %d", u.Inodes, 1+workers+workers*files)
	}
}

// TestSharedOpenBlind: on PostgreSQL an open reads the attributes and
// writes the hold in one round trip, before it knows what it opens. The
// hold must stay only for a regular file: an open of a directory or of a
// missing inode takes it back, and an open of a file another client
// unlinked while holding it keeps it alive past that client's close.
func TestSharedOpenBlind(t *testing.T) {
	ms := pgClients(t, 2)
	a, b := ms[0], ms[1]
	holds := func(ino base.Ino) int { return holdCount(t, a, ino) }
	f := create(t, a, root, base.RootIno, "f")
	if attr := must[base.Attr](t)(b.OpenFile(ctx, f)); attr.Type != base.TypeFile || holds(f) != 1 {
		t.Fatalf("open of a file: type %v, %d holds; want a file and 1", attr.Type, holds(f))
	}
	ok(t, b.CloseFile(ctx, f))

	d := mkdir(t, a, root, base.RootIno, "d")
	if attr := must[base.Attr](t)(b.OpenFile(ctx, d)); attr.Type != base.TypeDir || holds(d) != 0 {
		t.Fatalf("open of a directory: type %v, %d holds; want a directory and none", attr.Type, holds(d))
	}
	const missing = base.Ino(1 << 40)
	if _, err := b.OpenFile(ctx, missing); !errors.Is(err, base.ErrNotFound) || holds(missing) != 0 {
		t.Fatalf("open of a missing inode: %v, %d holds; want ErrNotFound and none", err, holds(missing))
	}

	// A first chunk that does not decode: the open fails, and takes its
	// hold back.
	g := create(t, a, root, base.RootIno, "g")
	_, err := a.WriteSlice(ctx, g, 0, newSlice(t, a, 0, 10), 1)
	ok(t, err)
	bad := versionKey(chunkKey(g, 0), 1<<62) // newer than every version written
	ok(t, a.store.Update(ctx, func(tx kv.Txn) error { tx.Set(bad, []byte{tagLive, 0xff, 0xff}); return nil }))
	if _, err := b.OpenFile(ctx, g); err == nil || holds(g) != 0 {
		t.Fatalf("open of a file whose first chunk does not decode: %v, %d holds; want an error and none", err, holds(g))
	}
	ok(t, a.store.Update(ctx, func(tx kv.Txn) error { tx.Delete(bad); return nil }))

	// a holds f and unlinks it; b opens it by inode (as the NFS gateway
	// would), then a closes: b's hold keeps f until b closes.
	must[base.Attr](t)(a.OpenFile(ctx, f))
	ok(t, a.Unlink(ctx, root, base.RootIno, "f"))
	if attr := must[base.Attr](t)(b.OpenFile(ctx, f)); attr.Nlink != 0 || holds(f) != 2 {
		t.Fatalf("open of an unlinked file: nlink %d, %d holds; want 0 and 2", attr.Nlink, holds(f))
	}
	ok(t, a.CloseFile(ctx, f))
	if _, err := b.GetAttr(ctx, f); err != nil {
		t.Fatalf("unlinked file held by b destroyed at a's close: %v", err)
	}
	ok(t, b.CloseFile(ctx, f))
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := a.GetAttr(ctx, f); errors.Is(err, base.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("unlinked file not destroyed after its last close")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if holds(f) != 0 {
		t.Fatalf("%d holds left on a destroyed file", holds(f))
	}
}
