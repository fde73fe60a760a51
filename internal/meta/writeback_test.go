package meta

import (
	"errors"
	"fmt"
	"slices"
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

func wbStats(t *testing.T, m *Meta) WriteBackStats {
	t.Helper()
	s, ok := m.WriteBackStats()
	if !ok {
		t.Fatal("write-back is off")
	}
	return s
}

// Creates and unlinks in a leased directory are acknowledged before they
// commit, committed in batches, and seen by another client as soon as it
// looks (its lookup or readdir recalls the lease, and the holder commits
// first).
func TestSharedWriteBack(t *testing.T) {
	ms, counter := leaseClientsWith(t, []Options{{WriteBack: true, HoldReleaseDelay: 20 * time.Millisecond}, {}}, 30*time.Second)
	a, b := ms[0], ms[1]
	d := mkdir(t, a, root, base.RootIno, "d")
	leaseOf(t, a, d)
	createLooked(t, a, d, "warm")
	ok(t, a.Sync(ctx))

	before := counter.Stats().Total().Transactions
	s0 := wbStats(t, a)
	const files = 200
	inos := map[string]base.Ino{}
	for i := range files {
		name := fmt.Sprint("f", i)
		inos[name] = createLooked(t, a, d, name)
	}
	s := wbStats(t, a)
	// Each create, and each close: the hold of a fresh file.
	if n := s.Changes - s0.Changes; n != 2*files {
		t.Fatalf("%d changes written back for %d creates and closes, want %d: %+v", n, files, 2*files, s)
	}
	// The closes release their holds in batches (HoldReleaseDelay is 0
	// here: at once, a transaction each, after committing the log).
	n := counter.Stats().Total().Transactions - before
	t.Logf("%d creates: %d transactions, %+v", files, n, s)

	// The other client finds every file: its readdir recalls the lease.
	got := names(t, b, d)
	if len(got) != files+1 {
		t.Fatalf("the other client lists %d entries, want %d", len(got), files+1)
	}
	for name, ino := range inos {
		x, _, err := b.Lookup(ctx, root, d, name)
		ok(t, err)
		if x != ino {
			t.Fatalf("%s: inode %d, want %d", name, x, ino)
		}
	}
	if ls := leaseStats(t, b); ls.Recalls == 0 {
		t.Fatalf("the other client read a written-back directory without a recall: %+v", ls)
	}

	// Unlinks, written back too; the other client's lookup sees them gone.
	leaseOf(t, a, d)
	s0 = wbStats(t, a)
	for i := range files / 2 {
		ok(t, a.Unlink(ctx, root, d, fmt.Sprint("f", i)))
	}
	if s := wbStats(t, a); s.Changes-s0.Changes != files/2 {
		t.Fatalf("%d of %d unlinks written back: %+v", s.Changes-s0.Changes, files/2, s)
	}
	if _, _, err := b.Lookup(ctx, root, d, "f0"); !errors.Is(err, base.ErrNotFound) {
		t.Fatalf("f0 after its unlink, from the other client: %v", err)
	}
	if n := len(names(t, b, d)); n != files/2+1 {
		t.Fatalf("%d entries after the unlinks, want %d", n, files/2+1)
	}
	u := must[Usage](t)(b.Usage(ctx))
	if u.Inodes != 1+1+1+files/2 {
		t.Fatalf("usage counts %d inodes, want %d", u.Inodes, 3+files/2)
	}
}

// A change's reads are its own log's writes: a file created then removed
// then created again, and a directory's nlink, come out right.
func TestSharedWriteBackChains(t *testing.T) {
	a, b, d := writeBackPair(t)
	for round := range 3 {
		x := createLooked(t, a, d, "x")
		ok(t, a.Unlink(ctx, root, d, "x"))
		y := createLooked(t, a, d, "x")
		if x == y {
			t.Fatalf("round %d: the same inode twice", round)
		}
		sub, _, err := a.Mknod(ctx, root, d, fmt.Sprint("sub", round), base.TypeDir, 0o755, 0, 0, "")
		ok(t, err)
		// The new directory is only in the log: reading it commits it.
		if attr := must[base.Attr](t)(a.GetAttr(ctx, sub)); attr.Type != base.TypeDir {
			t.Fatalf("sub: %+v", attr)
		}
		if round < 2 {
			ok(t, a.Unlink(ctx, root, d, "x"))
		}
	}
	// Lost nothing, kept nothing extra.
	if s := wbStats(t, a); s.Lost != 0 {
		t.Fatalf("lost changes: %+v", s)
	}
	if got := names(t, b, d); len(got) != 4 {
		t.Fatalf("entries %v, want x and sub0..2", got)
	}
	if attr := must[base.Attr](t)(b.GetAttr(ctx, d)); attr.Nlink != 5 {
		t.Fatalf("d has nlink %d, want 5", attr.Nlink)
	}
}

// A snapshot another client takes includes every change acknowledged
// before it: it recalls the write-back leases first.
func TestSharedWriteBackSnapshot(t *testing.T) {
	a, b, d := writeBackPair(t)
	createLooked(t, a, d, "warm")
	ok(t, a.Sync(ctx))
	for i := range 20 {
		createLooked(t, a, d, fmt.Sprint("f", i))
	}
	if s := wbStats(t, a); s.Pending == 0 {
		t.Skip("the log committed before the snapshot (a slow machine): nothing to show")
	}
	snap := must[Snapshot](t)(b.CreateSnapshot(ctx, "s1"))
	v := b.View(snap)
	ents, err := v.Readdir(ctx, root, d, "", 1000, false)
	ok(t, err)
	if len(ents) != 21 {
		t.Fatalf("the snapshot holds %d entries of d, want 21", len(ents))
	}
}

// A guard that fails at commit (another client changed what a change
// read, through a name outside the leased directory) runs the log's
// changes again, one by one: nothing is lost, the outcome is the store's.
func TestSharedWriteBackReplay(t *testing.T) {
	a, b, d, f := replayPair(t)
	// The unlink reads f's attribute; b changes it through e/f2 before
	// a's log commits.
	var wg sync.WaitGroup
	ok(t, a.Unlink(ctx, root, d, "f"))
	for i := range 5 {
		createLooked(t, a, d, fmt.Sprint("g", i))
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, err := b.SetAttr(ctx, root, f, SetAttrRequest{Valid: SetMode, Mode: 0o600})
		if err != nil {
			t.Error(err)
		}
	}()
	wg.Wait()
	ok(t, a.Sync(ctx))
	s := wbStats(t, a)
	t.Logf("%+v", s)
	if s.Lost != 0 {
		t.Fatalf("lost changes: %+v", s)
	}
	attr := must[base.Attr](t)(b.GetAttr(ctx, f))
	if attr.Nlink != 1 || attr.Mode&0o7777 != 0o600 {
		t.Fatalf("f after the unlink and the chmod: %+v", attr)
	}
	if got := names(t, b, d); len(got) != 6 {
		t.Fatalf("d holds %v", got)
	}
}

// A client that stops without committing its log loses those changes,
// never part of one: the volume checks clean.
func TestSharedWriteBackCrash(t *testing.T) {
	ms, _ := leaseClientsWith(t, []Options{{WriteBack: true, HoldReleaseDelay: 20 * time.Millisecond}, {}}, 2*time.Second)
	a, b := ms[0], ms[1]
	d := mkdir(t, a, root, base.RootIno, "d")
	leaseOf(t, a, d)
	createLooked(t, a, d, "kept")
	ok(t, a.Sync(ctx))
	for i := range 30 {
		createLooked(t, a, d, fmt.Sprint("f", i))
	}
	// The crash: the log goes with the process; the store closes under
	// it (every later commit fails).
	a.wb.mu.Lock()
	for a.wb.fl != nil {
		a.wb.ended.Wait()
	}
	pending := len(a.wb.cur.ops)
	a.wb.cur = newWbBatch()
	a.wb.n.Store(0)
	a.wb.mu.Unlock()
	t.Logf("%d changes lost with the client", pending)
	// b waits out a's lease (its session expires) and finds what was
	// committed.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok(t, b.releaseDeadSessions(ctx))
		got := names(t, b, d)
		if len(got) >= 1 {
			if _, _, err := b.Lookup(ctx, root, d, "kept"); err != nil {
				t.Fatalf("kept, committed before the crash: %v", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("d unreadable")
		}
		time.Sleep(100 * time.Millisecond)
	}
	probs, err := b.Check(ctx, false)
	ok(t, err)
	if len(probs) != 0 {
		t.Fatalf("fsck after the crash: %+v", probs)
	}
}

// takeLeaseNow takes the lease of dir, if this client can, before it
// returns (tests: as two lookups of missing names would, later).
func (m *Meta) takeLeaseNow(dir base.Ino) {
	l := m.leases
	if l == nil {
		return
	}
	l.mu.Lock()
	if l.timeout == 0 || l.dirs[dir] != nil || l.busy[dir] || l.releasing[dir] > 0 {
		l.mu.Unlock()
		return
	}
	delete(l.back, dir)
	l.busy[dir] = true
	l.noted[dir] = &dirLease{names: make(map[string]struct{})}
	l.mu.Unlock()
	m.acquireLease(dir)
}

// A file made, closed, opened again, unlinked while open, written and
// closed: its last close destroys it (no orphan is left unheld), as
// without write-back.
func TestSharedWriteBackUnlinkedOpen(t *testing.T) {
	a, b, d := writeBackPair(t)
	for i := range 10 {
		name := fmt.Sprint("gone", i)
		ino, _, err := a.Create(ctx, root, d, name, 0o644, 0)
		ok(t, err)
		id, _ := a.NewSliceID(ctx)
		_, err = a.WriteSlices(ctx, ino, []SliceWrite{{Index: 0, Slice: base.Slice{ID: id, Size: 10, Len: 10}}}, 0)
		ok(t, err)
		ok(t, a.CloseFile(ctx, ino))
		_, _, _, err = a.OpenFileChunk(ctx, ino)
		ok(t, err)
		ok(t, a.Unlink(ctx, root, d, name))
		id, _ = a.NewSliceID(ctx)
		_, err = a.WriteSlices(ctx, ino, []SliceWrite{{Index: 0, Slice: base.Slice{ID: id, Pos: 10, Size: 1, Len: 1}}}, 0)
		ok(t, err)
		ok(t, a.CloseFile(ctx, ino))
	}
	settledClean(t, a, b, "unlinks of open files")
}

// As go-fuse's posixtest FstatDeleted: ten files made and closed, each
// opened again and unlinked; all closed at the end.
func TestSharedWriteBackFstatDeleted(t *testing.T) {
	a, b, d := writeBackPair(t)
	var open []base.Ino
	for i := range 10 {
		name := fmt.Sprint(i)
		ino, _, err := a.Create(ctx, root, d, name, 0o644, 0)
		ok(t, err)
		if i > 0 {
			id, _ := a.NewSliceID(ctx)
			_, err = a.WriteSlices(ctx, ino, []SliceWrite{{Index: 0, Slice: base.Slice{ID: id, Size: uint32(i), Len: uint32(i)}}}, 0)
			ok(t, err)
		}
		ok(t, a.CloseFile(ctx, ino))
		must[base.Attr](t)(a.GetAttr(ctx, ino))
		_, _, _, err = a.OpenFileChunk(ctx, ino)
		ok(t, err)
		open = append(open, ino)
		ok(t, a.Unlink(ctx, root, d, name))
	}
	for _, ino := range open {
		must[base.Attr](t)(a.GetAttr(ctx, ino))
	}
	for i := len(open) - 1; i >= 0; i-- {
		ok(t, a.CloseFile(ctx, open[i]))
	}
	settledClean(t, a, b, "unlinks of open files")
}

// writeBackPair opens two clients of a new PostgreSQL volume, a writing
// back as mounts do (hold releases delayed), and a directory d that a
// leases.
func writeBackPair(t *testing.T) (a, b *Meta, d base.Ino) {
	t.Helper()
	ms, _ := leaseClientsWith(t, []Options{{WriteBack: true, HoldReleaseDelay: 20 * time.Millisecond}, {}}, 30*time.Second)
	a, b = ms[0], ms[1]
	d = mkdir(t, a, root, base.RootIno, "d")
	leaseOf(t, a, d)
	return a, b, d
}

// While a batch whose guard failed runs again, change by change, the
// changes made during its flight (the next batch, run again after it)
// are not in the store yet: a read of one of their inodes waits for the
// replays, never reports it missing (a CI run caught a write to a file
// just created failing with ENOENT in that window).
func TestSharedWriteBackReplayReads(t *testing.T) {
	a, b, d, f := replayPair(t)

	var (
		mu    sync.Mutex
		later []base.Ino // created while the first batch is in flight
		reads sync.WaitGroup
		fails = make(chan error, 16)
	)
	// In flight: the unlink's batch. Meanwhile a creates more (the next
	// batch) and b changes f through e/f2, so the unlink's guard fails.
	replayInFlight(a, b, d, f, fails, func(ino base.Ino) {
		mu.Lock()
		later = append(later, ino)
		mu.Unlock()
	})
	// Replaying: a reads the files created in flight.
	a.wb.replayHook = func() {
		mu.Lock()
		inos := slices.Clone(later)
		mu.Unlock()
		for _, ino := range inos {
			reads.Add(1)
			go func() {
				defer reads.Done()
				if _, err := a.GetAttr(ctx, ino); err != nil {
					fails <- fmt.Errorf("getattr of inode %d created in flight, during the replays: %w", ino, err)
				}
			}()
		}
		time.Sleep(50 * time.Millisecond) // long enough for a read that does not wait
	}
	ok(t, a.Unlink(ctx, root, d, "f"))
	ok(t, a.Sync(ctx))
	reads.Wait()
	close(fails)
	for err := range fails {
		t.Error(err)
	}
	s := wbStats(t, a)
	t.Logf("%+v", s)
	if s.Replays == 0 || len(later) != 5 {
		t.Fatalf("no replay with changes made in flight (%d): %+v", len(later), s)
	}
	if s.Lost != 0 {
		t.Fatalf("lost changes: %+v", s)
	}
	if got := names(t, b, d); len(got) != 6 {
		t.Fatalf("d holds %v", got)
	}
}

// What tar -x does to each directory and file it unpacks (mkdir; create,
// set its times, owner and mode, close) is written back without a read of
// the store: every record those changes read is predicted, the lease
// records of the new inodes among them (a change reads the lease record
// of every inode whose attribute it reads, a new directory's create its
// own; before, each file and each directory cost a loose read of it).
func TestSharedWriteBackUnpackNoReads(t *testing.T) {
	ms, counter := leaseClientsWith(t, []Options{{WriteBack: true, HoldReleaseDelay: 20 * time.Millisecond}, {}}, 30*time.Second)
	a := ms[0]
	d := mkdir(t, a, root, base.RootIno, "d")
	leaseOf(t, a, d)
	unpack := func(d base.Ino, name string) {
		if _, _, err := a.Lookup(ctx, root, d, name); !errors.Is(err, base.ErrNotFound) {
			t.Fatalf("lookup of %s before its create: %v", name, err)
		}
		ino, _, err := a.Create(ctx, root, d, name, 0o600, 0)
		ok(t, err)
		for _, req := range []SetAttrRequest{
			{Valid: SetMtime, Mtime: 1_700_000_000_000_000_000},
			{Valid: SetUid | SetGid, Uid: 0, Gid: 0},
			{Valid: SetMode, Mode: 0o644},
		} {
			_, err := a.SetAttr(ctx, root, ino, req)
			ok(t, err)
		}
		ok(t, a.CloseFile(ctx, ino))
	}
	unpack(d, "warm") // learns the directory's records
	ok(t, a.Sync(ctx))
	loose := func() int64 { return counter.Stats().Kinds[counted.LooseView.String()].Transactions }
	before, s0 := loose(), wbStats(t, a)
	const dirs, files = 10, 5
	for i := range dirs {
		name := fmt.Sprint("d", i)
		if _, _, err := a.Lookup(ctx, root, d, name); !errors.Is(err, base.ErrNotFound) {
			t.Fatalf("lookup of %s before its mkdir: %v", name, err)
		}
		sub := mkdir(t, a, root, d, name)
		for j := range files {
			unpack(sub, fmt.Sprint("f", j))
		}
	}
	s := wbStats(t, a)
	if n, want := s.Changes-s0.Changes, int64(dirs*(1+5*files)); n != want {
		t.Fatalf("%d changes written back for %d directories of %d files, want %d: %+v", n, dirs, files, want, s)
	}
	if n := loose() - before; n > 2 {
		t.Fatalf("%d directories of %d files unpacked with %d loose reads of the store, want none", dirs, files, n)
	}
	ok(t, a.Sync(ctx))
}

// replayPair opens two clients of a new PostgreSQL volume, a writing back
// in directory d, which it leases and which holds file f; f is also
// e/f2, a name outside d through which b can change f's attribute while
// a's log holds a change that read it (its guard then fails at commit).
// replayInFlight makes a's batch in flight fail its guard (replayPair's
// a, b, d and f): once, while it flies, a creates g0 … g4 in d (the next
// batch), passing each to made, and b changes f through e/f2. Errors go
// to fails.
func replayInFlight(a, b *Meta, d, f base.Ino, fails chan<- error, made func(base.Ino)) {
	var once sync.Once
	a.wb.flyHook = func() {
		once.Do(func() {
			for i := range 5 {
				name := fmt.Sprint("g", i)
				if _, _, err := a.Lookup(ctx, root, d, name); !errors.Is(err, base.ErrNotFound) {
					fails <- fmt.Errorf("lookup of %s before its create: %v", name, err)
				}
				ino, _, err := a.Create(ctx, root, d, name, 0o640, 0)
				if err == nil {
					err = a.CloseFile(ctx, ino)
				}
				if err != nil {
					fails <- err
					continue
				}
				made(ino)
			}
			if _, err := b.SetAttr(ctx, root, f, SetAttrRequest{Valid: SetMode, Mode: 0o600}); err != nil {
				fails <- err
			}
		})
	}
}

func replayPair(t *testing.T) (a, b *Meta, d, f base.Ino) {
	t.Helper()
	ms, _ := leaseClientsWith(t, []Options{{WriteBack: true, HoldReleaseDelay: 20 * time.Millisecond}, {}}, 30*time.Second)
	a, b = ms[0], ms[1]
	d = mkdir(t, a, root, base.RootIno, "d")
	e := mkdir(t, a, root, base.RootIno, "e")
	f = create(t, a, root, d, "f")
	_, err := a.Link(ctx, root, f, e, "f2")
	ok(t, err)
	leaseOf(t, a, d)
	createLooked(t, a, d, "warm")
	ok(t, a.Sync(ctx))
	return a, b, d, f
}

// TestSharedWriteBackAttrAfterCommit: a listing (or a lookup) reads a
// file's attribute from the store while the log holds an unlink of
// another of its names; the log commits before the read looks at the
// log. The attribute read is older than the store now is, and the log no
// longer says so: it is read again (wbLog.seq). Metamorphic seed 24.
func TestSharedWriteBackAttrAfterCommit(t *testing.T) {
	a, _, d, f := replayPair(t)
	e, _, err := a.Lookup(ctx, root, base.RootIno, "e")
	ok(t, err)
	var commits atomic.Int64
	a.wb.attrHook = func() {
		if a.wb.n.Load() > 0 {
			commits.Add(1)
			ok(t, a.Sync(ctx))
		}
	}
	for _, read := range []string{"readdir", "lookup"} {
		name := "f2"
		if read == "lookup" {
			// Another name of f in e, and another name to unlink.
			_, err = a.Link(ctx, root, f, e, "f3")
			ok(t, err)
			name = "f3"
			ok(t, a.Sync(ctx))
		}
		// The unlink of f's name in d: written back, f's link count
		// lowered in the log only.
		ok(t, a.Unlink(ctx, root, d, map[string]string{"readdir": "f", "lookup": "f4"}[read]))
		if a.wb.n.Load() == 0 {
			t.Fatalf("%s: the unlink was not written back", read)
		}
		want := map[string]uint32{"readdir": 1, "lookup": 2}[read]
		before := commits.Load()
		var got uint32
		switch read {
		case "readdir":
			es := must[[]base.Entry](t)(a.Readdir(ctx, root, e, "", 0, true))
			for _, en := range es {
				if en.Name == name {
					got = en.Attr.Nlink
				}
			}
		case "lookup":
			_, at, err := a.Lookup(ctx, root, e, name)
			ok(t, err)
			got = at.Nlink
		}
		if commits.Load() == before {
			t.Fatalf("%s: the log did not commit between the read and its check", read)
		}
		if got != want {
			t.Errorf("%s: link count %d, the file has %d", read, got, want)
		}
		if read == "readdir" {
			// f4: f's name in d again, for the lookup round.
			_, err = a.Link(ctx, root, f, d, "f4")
			ok(t, err)
			ok(t, a.Sync(ctx))
		}
	}
}

// A rename in a leased directory is written back (git renames its
// temporary files into place); replacing a name drops the replaced file.
func TestSharedWriteBackRename(t *testing.T) {
	a, b, d := writeBackPair(t)
	createLooked(t, a, d, "old")
	tmp := createLooked(t, a, d, "tmp")
	s0 := wbStats(t, a)
	ok(t, a.Rename(ctx, root, d, "tmp", d, "final", 0))
	ok(t, a.Rename(ctx, root, d, "final", d, "old", 0)) // replaces old
	if s := wbStats(t, a); s.Changes-s0.Changes != 2 {
		t.Fatalf("%d of 2 renames written back: %+v", s.Changes-s0.Changes, s)
	}
	lookupIs(t, b, d, "old", tmp)
	if n := names(t, b, d); len(n) != 1 {
		t.Fatalf("d holds %v, want [old]", n)
	}
}

// TestSharedWriteBackReleaseDuringChange: the lease is given back (a
// recall) while a change that found it held runs over an empty log. The
// release must commit that change before it deletes the lease record:
// otherwise another client renames the same name in the store, both are
// told success, and the holder's change is lost when its batch commits
// (a clean-clone CI run caught this in TestSharedNamespace's rename race).
func TestSharedWriteBackReleaseDuringChange(t *testing.T) {
	a, b, d := writeBackPair(t)
	createLooked(t, a, d, "race")
	ok(t, a.Sync(ctx))
	var (
		once     sync.Once
		released sync.WaitGroup
	)
	a.wb.ranHook = func() {
		once.Do(func() {
			released.Add(1)
			go func() {
				defer released.Done()
				a.releaseLease(ctx, d, true)
			}()
			time.Sleep(100 * time.Millisecond) // long enough for a release that does not wait
		})
	}
	s0 := wbStats(t, a)
	ok(t, a.Rename(ctx, root, d, "race", d, "by-a", 0))
	released.Wait()
	if s := wbStats(t, a); s.Changes == s0.Changes {
		t.Fatalf("the rename was not written back: %+v", s)
	}
	if err := b.Rename(ctx, root, d, "race", d, "by-b", 0); !errors.Is(err, base.ErrNotFound) {
		t.Errorf("b renamed the name a renamed, after a's lease went: %v", err)
	}
	if err := a.Sync(ctx); err != nil {
		t.Errorf("a's sync: %v", err)
	}
	if s := wbStats(t, a); s.Lost != 0 {
		t.Errorf("lost changes: %+v", s)
	}
	if n := names(t, b, d); !slices.Equal(n, []string{"by-a"}) {
		t.Errorf("d holds %v, want [by-a]", n)
	}
}

// TestSharedWriteBackLink: a file linked again in the directory it was
// made in (git writes an object to a temporary name, links it to its own
// name, and unlinks the temporary one) stays fresh, and the link and the
// unlink are written back; another client sees the result. A link into
// another directory is committed, and ends the file's freshness.
func TestSharedWriteBackLink(t *testing.T) {
	a, b, d := writeBackPair(t)
	tmp := createLooked(t, a, d, "tmp")
	s0 := wbStats(t, a)
	at, err := a.Link(ctx, root, tmp, d, "obj")
	ok(t, err)
	if at.Nlink != 2 {
		t.Fatalf("link count after the link: %d, want 2", at.Nlink)
	}
	ok(t, a.Unlink(ctx, root, d, "tmp"))
	if s := wbStats(t, a); s.Changes-s0.Changes != 2 {
		t.Fatalf("%d of the link and the unlink written back: %+v", s.Changes-s0.Changes, s)
	}
	if _, ok := a.freshDir(tmp); !ok {
		t.Fatal("a link in the file's own directory ended its freshness")
	}
	if _, err := a.Link(ctx, root, tmp, d, "obj"); !errors.Is(err, base.ErrExist) {
		t.Fatalf("a link over an existing name, written back: %v", err)
	}
	// Into another directory: committed, and no longer fresh.
	e := mkdir(t, a, root, base.RootIno, "e")
	f := createLooked(t, a, d, "f")
	if _, ok := a.freshDir(f); !ok {
		t.Fatal("a file made in a leased directory is not fresh")
	}
	s0 = wbStats(t, a)
	_, err = a.Link(ctx, root, f, e, "f2")
	ok(t, err)
	if s := wbStats(t, a); s.Changes != s0.Changes {
		t.Fatalf("a link into another directory was written back: %+v", s)
	}
	if _, ok := a.freshDir(f); ok {
		t.Fatal("a file linked into another directory is still fresh")
	}
	// The other client sees both.
	lookupIs(t, b, d, "obj", tmp)
	if n := names(t, b, d); len(n) != 2 {
		t.Fatalf("d holds %v, want [f obj]", n)
	}
	ab := must[base.Attr](t)(b.GetAttr(ctx, tmp))
	if ab.Nlink != 1 {
		t.Fatalf("link count seen by the other client: %d, want 1", ab.Nlink)
	}
	lookupIs(t, b, e, "f2", f)
}

// TestSharedWriteBackOpen: the open of a fresh file (git reading back
// the objects it wrote) goes over the log, and its hold reaches the
// store before another client can reach the file: that client's unlink
// leaves it to the holder until the last close.
func TestSharedWriteBackOpen(t *testing.T) {
	a, b, d := writeBackPair(t)
	f := createLooked(t, a, d, "f")
	s0 := wbStats(t, a)
	at := must[base.Attr](t)(a.OpenFile(ctx, f))
	if s := wbStats(t, a); s.Changes-s0.Changes != 1 {
		t.Fatalf("%d changes written back for the open of a fresh file, want 1: %+v", s.Changes-s0.Changes, s)
	}
	if at.Type != base.TypeFile || at.Nlink != 1 {
		t.Fatalf("open of a fresh file: %+v", at)
	}
	// The other client unlinks it (its lookup recalls the lease: the
	// holder commits the log, the hold with it).
	ok(t, b.Unlink(ctx, root, d, "f"))
	if got, err := a.GetAttr(ctx, f); err != nil || got.Nlink != 0 {
		t.Fatalf("an open file unlinked by another client: %+v, %v (want it kept, unlinked)", got, err)
	}
	ok(t, a.CloseFile(ctx, f))
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := b.GetAttr(ctx, f)
		if errors.Is(err, base.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the unlinked file outlived its last close: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// lookupIs checks that name in dir is inode want, as m looks it up.
func lookupIs(t *testing.T, m *Meta, dir base.Ino, name string, want base.Ino) {
	t.Helper()
	got, _, err := m.Lookup(ctx, root, dir, name)
	ok(t, err)
	if got != want {
		t.Fatalf("%s in %d is inode %d, want %d", name, dir, got, want)
	}
}

// Creates that use up the client's inode range wait for no commit of the
// log: the next range is reserved ahead, in a transaction that does not
// commit the log first (it writes no record the log writes).
func TestSharedWriteBackInodeRanges(t *testing.T) {
	ms, _ := leaseClientsWith(t, []Options{{WriteBack: true, InodeBatch: 16}}, 30*time.Second)
	a := ms[0]
	d := mkdir(t, a, root, base.RootIno, "d")
	leaseOf(t, a, d)
	createLooked(t, a, d, "warm")
	ok(t, a.Sync(ctx))
	s0 := wbStats(t, a)
	const files = 200 // over 12 ranges of 16
	seen := map[base.Ino]bool{}
	for i := range files {
		ino := createLooked(t, a, d, fmt.Sprint("f", i))
		if seen[ino] {
			t.Fatalf("inode %d handed out twice", ino)
		}
		seen[ino] = true
	}
	s := wbStats(t, a)
	if n := s.Changes - s0.Changes; n != 2*files {
		t.Fatalf("%d changes written back for %d creates and closes, want %d", n, files, 2*files)
	}
	if s.Waits != s0.Waits {
		t.Fatalf("%d operations waited for the log's commit during %d creates: %+v", s.Waits-s0.Waits, files, s)
	}
	ok(t, a.Sync(ctx))
	if n := len(names(t, a, d)); n != files+1 {
		t.Fatalf("%d entries, want %d", n, files+1)
	}
}

// The close of a fresh file while a lease is being installed: the close
// holds Meta.mu and asks the leases whether the file is fresh; the
// acquisition held the leases' lock and read the session id (Meta.mu),
// and each waited for the other for ever (a create benchmark hung).
func TestSharedWriteBackCloseDuringAcquire(t *testing.T) {
	ms, _ := leaseClientsWith(t, []Options{{WriteBack: true}}, 30*time.Second)
	a := ms[0]
	d := mkdir(t, a, root, base.RootIno, "d")
	e := mkdir(t, a, root, base.RootIno, "e")
	leaseOf(t, a, d)
	f, _, err := a.Create(ctx, root, d, "f", 0o644, 0)
	ok(t, err)
	if _, fresh := a.freshDir(f); !fresh {
		t.Fatal("a file made in a leased directory is not fresh")
	}
	closed := make(chan error, 1)
	var once sync.Once
	a.leases.mu.Lock()
	a.leases.installHook = func(dir base.Ino) {
		if dir != e {
			return
		}
		once.Do(func() {
			// The close runs up to the leases' lock, held here.
			go func() { closed <- a.CloseFile(ctx, f) }()
			time.Sleep(100 * time.Millisecond)
		})
	}
	a.leases.mu.Unlock()
	// Lookups that miss in e make a acquire its lease (leaseOf, off the
	// test's goroutine: a deadlock must fail the test, not hang it).
	leased := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			if a.leases.holds(e) {
				leased <- nil
				return
			}
			if _, _, err := a.Lookup(ctx, root, e, fmt.Sprint("probe", i)); !errors.Is(err, base.ErrNotFound) {
				leased <- fmt.Errorf("lookup of a missing name: %w", err)
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	select {
	case err := <-leased:
		ok(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("the lease of e was not installed in 20 s: deadlocked with a close")
	}
	select {
	case err := <-closed:
		ok(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("the close did not end in 20 s: deadlocked with a lease acquisition")
	}
}

// A change in a transaction a lookup started (startahead.go) holds one of
// the store's connections; waiting for the log's commit with it held
// could leave that commit none. With one connection: the started
// transaction holds it, the log holds a create, and the change must not
// wait for ever.
func TestSharedWriteBackStartedTxnFreesConnection(t *testing.T) {
	url := pgtest.NewDatabase(t)
	s, err := postgres.Open(ctx, url, postgres.Options{MaxConns: 1})
	ok(t, err)
	t.Cleanup(func() { _ = s.Close() })
	ok(t, Format(ctx, s, Settings{Name: "pg"}, false))
	a, err := Open(ctx, s, Options{WriteBack: true})
	ok(t, err)
	t.Cleanup(func() { _ = a.Close() })
	must[uint64](t)(a.NewSession(ctx, SessionInfo{Host: "c0", Timeout: 30 * time.Second}))
	d := mkdir(t, a, root, base.RootIno, "d")
	u := mkdir(t, a, root, base.RootIno, "u")
	leaseOf(t, a, d)
	// The log's commit is held before it asks for the connection until
	// the started transaction has it.
	flying, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	a.wb.mu.Lock()
	a.wb.flyHook = func() {
		once.Do(func() {
			close(flying)
			<-proceed
		})
	}
	a.wb.mu.Unlock()
	createLooked(t, a, d, "f")
	if n := a.wb.n.Load(); n == 0 {
		t.Fatal("the create in the leased directory was not written back")
	}
	<-flying
	st, err := s.StartUpdate(ctx, []kv.Range{exactRange(attrKey(u))})
	ok(t, err)
	close(proceed)
	shard := a.shards.get()
	defer a.shards.put(shard)
	done := make(chan error, 1)
	go func() {
		done <- a.updateIn(ctx, st, shard, func(t *wtx) error {
			o := a.newOp(t)
			at, err := o.attr(u)
			if err != nil {
				return err
			}
			at.Mode = at.Mode&^0o7777 | 0o700
			o.put(u, at)
			return o.flush()
		})
	}()
	select {
	case err := <-done:
		ok(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("a change in a started transaction waited 20 s for the log, whose commit waited for its connection")
	}
	if got := must[base.Attr](t)(a.GetAttr(ctx, u)); got.Mode&0o777 != 0o700 {
		t.Fatalf("mode of u after the change: %o", got.Mode)
	}
}

// TestSharedWriteBackOpenDuringReplace: a file is opened while a rename
// over it runs over the log (posixtest's OpenSymlinkRace: one thread
// renames a file and a symlink over one name, another opens it and
// fstats the descriptor). The rename found the file not open and
// destroyed it in the log; the open, counted meanwhile, must then fail
// with ENOENT, or succeed on a file that stays readable until its close:
// not read the store's state from before the log and hold a file the
// log destroys (a CI run got fstat ENOENT after a successful open).
// (A rename over a file this client did not make is not written back:
// it reads the file's holds from the store.)
func TestSharedWriteBackOpenDuringReplace(t *testing.T) {
	for i := range 3 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			a, b, d := writeBackPair(t)
			f := createLooked(t, a, d, "f")
			createLooked(t, a, d, "tmp")
			if i > 0 {
				// f committed (the open's read of f then waits for no
				// commit of its own), tmp too or not.
				ok(t, a.Sync(ctx))
				if i > 1 {
					createLooked(t, a, d, "other")
				}
			}
			if _, ok := a.freshDir(f); !ok {
				t.Fatal("f is not fresh")
			}
			type result struct {
				a   base.Attr
				err error
			}
			opened := make(chan result, 1)
			var once sync.Once
			a.wb.ranHook = func() {
				once.Do(func() {
					go func() {
						at, err := a.OpenFile(ctx, f)
						opened <- result{at, err}
					}()
					// Until the open is counted (then it waits for the log,
					// or reads the store).
					for deadline := time.Now().Add(5 * time.Second); a.openCount(f) == 0 && time.Now().Before(deadline); {
						time.Sleep(time.Millisecond)
					}
					time.Sleep(50 * time.Millisecond)
				})
			}
			s0 := wbStats(t, a)
			ok(t, a.Rename(ctx, root, d, "tmp", d, "f", 0))
			a.wb.ranHook = nil
			if s := wbStats(t, a); s.Changes == s0.Changes {
				t.Fatalf("the rename was not written back: %+v", s)
			}
			r := <-opened
			openRaced(t, a, f, r.err)
			settledClean(t, a, b, "the race")
		})
	}
}

// TestSharedWriteBackOpenDuringReplaceOutside: as
// TestSharedWriteBackOpenDuringReplace, with the rename run outside the
// log (as when its predictions miss): it read the file's open count as
// zero and is about to destroy it when the open runs. The open must not
// read what the log knew of the fresh file before that transaction (a
// clean file, linked) and hold a file the transaction destroys.
func TestSharedWriteBackOpenDuringReplaceOutside(t *testing.T) {
	a, b, d := writeBackPair(t)
	f := createLooked(t, a, d, "f")
	createLooked(t, a, d, "tmp")
	ok(t, a.Sync(ctx))
	if _, ok := a.freshDir(f); !ok {
		t.Fatal("f is not fresh")
	}
	// What the log knows of f (its fresh records) answers the open.
	must[base.Attr](t)(a.OpenFile(ctx, f))
	ok(t, a.CloseFile(ctx, f))
	ok(t, a.Sync(ctx))
	type result struct {
		a   base.Attr
		err error
	}
	opened := make(chan result, 1)
	var once sync.Once
	var ran atomic.Bool
	a.wb.skipHook = func() bool { return true }
	a.wb.decideHook = func(ino base.Ino, n int) {
		if ino != f || n != 0 {
			return
		}
		once.Do(func() {
			ran.Store(true)
			a.wb.skipHook = nil
			go func() {
				at, err := a.OpenFile(ctx, f)
				opened <- result{at, err}
			}()
			// Until the open is done, or waits for this transaction.
			for deadline := time.Now().Add(time.Second); len(opened) == 0 && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
		})
	}
	ok(t, a.Rename(ctx, root, d, "tmp", d, "f", 0))
	a.wb.decideHook, a.wb.skipHook = nil, nil
	if !ran.Load() {
		t.Fatal("the rename did not read f's holds outside the log")
	}
	r := <-opened
	openRaced(t, a, f, r.err)
	settledClean(t, a, b, "the race")
	markedNone(t, a)
}

// markedNone checks that no inode of a is marked as decided outside the
// log (decidingHeld) once every transaction and batch ended.
func markedNone(t *testing.T, a *Meta) {
	t.Helper()
	a.wb.fmu.Lock()
	left, after, n := len(a.wb.deciding), len(a.wb.decided), a.wb.ndecide.Load()
	a.wb.fmu.Unlock()
	if left != 0 || after != 0 || n != 0 {
		t.Errorf("inodes still marked after every transaction and batch ended: %d deciding, %d decided, count %d", left, after, n)
	}
}

// TestSharedWriteBackLinkDuringUnlinkOutside: a link over the log of a
// fresh file joins while an unlink outside the log (its predictions
// missed) has read the file's link count from the store and not yet
// decided whether to destroy it. The unlink runs again after the log
// and sees the link: the file stays, under its new name, and nothing
// acknowledged is lost. Before, the unlink destroyed the file, the
// link's batch failed its guard, and the link's replay found no file:
// counted lost, the next fsync failed with EIO, the name was gone.
func TestSharedWriteBackLinkDuringUnlinkOutside(t *testing.T) {
	a, b, d := writeBackPair(t)
	f := createLooked(t, a, d, "f")
	ok(t, a.Sync(ctx))
	if _, ok := a.freshDir(f); !ok {
		t.Fatal("f is not fresh")
	}
	var once sync.Once
	var linked error
	ran := false
	a.wb.skipHook = func() bool { return true }
	a.wb.markHook = func(ino base.Ino) {
		if ino != f {
			return
		}
		once.Do(func() {
			ran = true
			a.wb.skipHook = nil
			_, linked = a.Link(ctx, root, f, d, "g")
		})
	}
	ok(t, a.Unlink(ctx, root, d, "f"))
	a.wb.markHook, a.wb.skipHook = nil, nil
	if !ran {
		t.Fatal("the unlink did not decide on f outside the log")
	}
	ok(t, linked)
	settledClean(t, a, b, "the race")
	if s := wbStats(t, a); s.Lost != 0 {
		t.Fatalf("lost changes: %+v", s)
	}
	if n := names(t, a, d); !slices.Equal(n, []string{"g"}) {
		t.Fatalf("d holds %v, want [g]", n)
	}
	at := must[base.Attr](t)(a.GetAttr(ctx, f))
	if at.Nlink != 1 {
		t.Fatalf("f has %d links, want 1", at.Nlink)
	}
	markedNone(t, a)
}

// openRaced checks the outcome err of a's open of f that raced a rename
// over it: ENOENT, or a file readable until its close.
func openRaced(t *testing.T, a *Meta, f base.Ino, err error) {
	t.Helper()
	switch {
	case errors.Is(err, base.ErrNotFound):
	case err != nil:
		t.Fatalf("open during the rename over the file: %v", err)
	default:
		if _, err := a.GetAttr(ctx, f); err != nil {
			t.Errorf("getattr of a file opened during a rename over it: %v", err)
		}
		ok(t, a.CloseFile(ctx, f))
	}
}

// settledClean commits a's log and drops the holds of its closed files,
// then checks the volume through b: no problem after what happened.
func settledClean(t *testing.T, a, b *Meta, after string) {
	t.Helper()
	ok(t, a.Sync(ctx))
	ok(t, a.FlushReleases(ctx))
	probs, err := b.Check(ctx, false)
	ok(t, err)
	if len(probs) != 0 {
		t.Fatalf("after %s: %+v (%+v)", after, probs, wbStats(t, a))
	}
}

// TestSharedWriteBackOpenRenameStress is posixtest's OpenSymlinkRace on
// one client: a thread makes a file and a symlink by turns under one
// name (each renamed over it, or the name unlinked and made again),
// another looks the name up, opens what it finds, reads its attributes
// through the open handle and changes its mode now and then (open, and
// after its close), and another client looks at the name now and then
// (recalling the lease). Some of the changes run outside the log
// (skipHook), some batches commit at once.
// An open either fails with ENOENT or holds a file whose attributes stay
// readable until its close; the volume checks clean after.
func TestSharedWriteBackOpenRenameStress(t *testing.T) {
	t.Run("alone", func(t *testing.T) { openRenameStress(t, 100, false) })
	t.Run("recalled", func(t *testing.T) { openRenameStress(t, 200, true) })
}

func openRenameStress(t *testing.T, rounds int, recalled bool) {
	a, b, d := writeBackPair(t)
	createLooked(t, a, d, "path")
	var n atomic.Uint64
	a.wb.skipHook = func() bool { return n.Add(1)%5 == 0 }
	done := make(chan struct{})
	shuffler := make(chan error, 1)
	go func() {
		defer close(done)
		shuffler <- func() error {
			for i := range rounds {
				ino, _, err := a.Create(ctx, root, d, "tmp", 0o600, 0)
				if err != nil {
					return fmt.Errorf("create: %w", err)
				}
				if err := a.CloseFile(ctx, ino); err != nil {
					return fmt.Errorf("close: %w", err)
				}
				if err := a.Rename(ctx, root, d, "tmp", d, "path", 0); err != nil {
					return fmt.Errorf("rename of the file: %w", err)
				}
				if i%3 == 2 {
					// Unlinked instead, and the name made again.
					if err := a.Unlink(ctx, root, d, "path"); err != nil {
						return fmt.Errorf("unlink: %w", err)
					}
					if _, _, err := a.Mknod(ctx, root, d, "path", base.TypeSymlink, 0o777, 0, 0, "/etc/passwd"); err != nil {
						return fmt.Errorf("symlink: %w", err)
					}
					continue
				}
				if _, _, err := a.Mknod(ctx, root, d, "tmp", base.TypeSymlink, 0o777, 0, 0, "/etc/passwd"); err != nil {
					return fmt.Errorf("symlink: %w", err)
				}
				if err := a.Rename(ctx, root, d, "tmp", d, "path", 0); err != nil {
					return fmt.Errorf("rename of the symlink: %w", err)
				}
				if i%50 == 49 {
					if err := a.Sync(ctx); err != nil {
						return fmt.Errorf("sync: %w", err)
					}
				}
			}
			return nil
		}()
	}()
	// The other client looks now and then: its lookup recalls a's
	// lease (a commits its log), and a takes it again later.
	looker := make(chan error, 1)
	go func() {
		looker <- func() error {
			for recalled {
				select {
				case <-done:
					return nil
				case <-time.After(250 * time.Millisecond):
				}
				if _, _, err := b.Lookup(ctx, root, d, "path"); err != nil && !errors.Is(err, base.ErrNotFound) {
					return fmt.Errorf("the other client's lookup: %w", err)
				}
			}
			return nil
		}()
	}()
	opens, gone := 0, 0
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		ino, at, err := a.Lookup(ctx, root, d, "path")
		if errors.Is(err, base.ErrNotFound) {
			continue
		}
		ok(t, err)
		if at.Type != base.TypeFile {
			continue
		}
		if _, err := a.OpenFile(ctx, ino); errors.Is(err, base.ErrNotFound) {
			gone++
			continue
		} else {
			ok(t, err)
		}
		opens++
		if _, err := a.GetAttr(ctx, ino); err != nil {
			t.Fatalf("getattr of open inode %d (open %d): %v", ino, opens, err)
		}
		mode := SetAttrRequest{Valid: base.SetMode, Mode: uint32(0o600 + opens%2*0o40)}
		if opens%2 == 0 {
			// While open: the file is there.
			if _, err := a.SetAttr(ctx, root, ino, mode); err != nil {
				t.Fatalf("setattr of open inode %d (open %d): %v", ino, opens, err)
			}
		}
		ok(t, a.CloseFile(ctx, ino))
		if opens%3 == 0 {
			// Closed: the shuffler may destroy it meanwhile.
			if _, err := a.SetAttr(ctx, root, ino, mode); err != nil && !errors.Is(err, base.ErrNotFound) {
				t.Fatalf("setattr of closed inode %d: %v", ino, err)
			}
		}
	}
	ok(t, <-shuffler)
	ok(t, <-looker)
	a.wb.skipHook = nil
	t.Logf("%d opens, %d of a file gone meanwhile; %+v", opens, gone, wbStats(t, a))
	if opens == 0 {
		t.Fatal("no open found a file")
	}
	settledClean(t, a, b, "the race")
	if s := wbStats(t, a); s.Lost != 0 {
		t.Errorf("lost changes: %+v", s)
	}
}

// TestSharedWriteBackRemoveUncommitted: another client's unlink, rmdir
// or rename of a name made under a write-back lease and not committed
// yet recalls the lease and finds the name (not ENOENT): without a
// lookup first, as an NFS gateway's REMOVE or RENAME runs.
func TestSharedWriteBackRemoveUncommitted(t *testing.T) {
	a, b, d := writeBackPair(t)
	for _, name := range []string{"u", "r"} {
		ino, _, err := a.Create(ctx, root, d, name, 0o644, 0)
		ok(t, err)
		ok(t, a.CloseFile(ctx, ino))
	}
	must[base.Ino](t)(mknodDir(a, d, "sub"))
	if s := wbStats(t, a); s.Pending == 0 {
		t.Fatalf("nothing pending in a's log: %+v", s)
	}
	ok(t, b.Unlink(ctx, root, d, "u"))
	leaseOf(t, a, d)
	ino, _, err := a.Create(ctx, root, d, "r2", 0o644, 0)
	ok(t, err)
	ok(t, a.CloseFile(ctx, ino))
	ok(t, b.Rename(ctx, root, d, "r2", d, "r3", 0))
	leaseOf(t, a, d)
	_, _, err = a.Mknod(ctx, root, d, "sub2", base.TypeDir, 0o755, 0, 0, "")
	ok(t, err)
	ok(t, b.Rmdir(ctx, root, d, "sub2"))
	if n := names(t, a, d); !slices.Equal(n, []string{"r", "r3", "sub"}) {
		t.Fatalf("d holds %v, want [r r3 sub]", n)
	}
}

func mknodDir(m *Meta, dir base.Ino, name string) (base.Ino, error) {
	ino, _, err := m.Mknod(ctx, root, dir, name, base.TypeDir, 0o755, 0, 0, "")
	return ino, err
}

// A client takes a directory's lease only after its write-back log has
// committed: acquireLease runs through rawUpdate, whose barrier commits
// the log first. Design 0011 ("When two replays could wait for each
// other") rests on it: a lease a change read when it was acknowledged,
// and whose holder its replay then waits for, was taken after the
// change, by a client that had committed its own log before.
func TestSharedWriteBackAcquireCommitsLogFirst(t *testing.T) {
	ms, _ := leaseClientsWith(t, []Options{{WriteBack: true, HoldReleaseDelay: 20 * time.Millisecond}}, 30*time.Second)
	a := ms[0]
	d := mkdir(t, a, root, base.RootIno, "d")
	leaseOf(t, a, d)
	createLooked(t, a, d, "warm")
	ok(t, a.Sync(ctx))
	var mu sync.Mutex
	pending := map[base.Ino]int64{} // at each acquisition, in its transaction
	a.leases.acquireHook = func(dir base.Ino) {
		mu.Lock()
		pending[dir] = a.wb.n.Load()
		mu.Unlock()
	}
	for i := range 5 {
		e := mkdir(t, a, root, base.RootIno, fmt.Sprint("e", i))
		ok(t, a.Sync(ctx))
		createLooked(t, a, d, fmt.Sprint("f", i))
		if n := wbStats(t, a).Pending; n == 0 {
			t.Fatalf("round %d: the create in the leased directory is not waiting in the log", i)
		}
		leaseOf(t, a, e) // lookups of missing names in e: the lease is taken
		mu.Lock()
		n, seen := pending[e]
		mu.Unlock()
		if !seen {
			t.Fatalf("round %d: the lease of %d was not acquired", i, e)
		}
		if n != 0 {
			t.Fatalf("round %d: the lease of %d was taken with %d changes not committed in the write-back log", i, e, n)
		}
	}
}

// Another client reaches a directory by its number, with no lookup in the
// leased parent (a process's working directory inside it on another
// host, an NFS handle), and creates in it. An rmdir of it, or a rename
// over it, acknowledged before that create was a change lost on its
// replay ("directory not empty", EIO on the next sync) and the directory
// stayed: now such a change waits for the log and runs at once, unless
// this client holds the directory's own lease (a directory it made
// there), when the other client's create recalls that lease first. A
// sticky directory's rule that rests on a file's owner, which another
// client may change by the file's number, likewise.
func TestSharedWriteBackRemoveReachedByNumber(t *testing.T) {
	ms, _ := leaseClientsWith(t, []Options{{WriteBack: true, HoldReleaseDelay: 20 * time.Millisecond}, {}, {NoLeases: true}}, 30*time.Second)
	a, b, c := ms[0], ms[1], ms[2]
	// c, which takes no leases, makes what a removes and b reaches by
	// number: no lease of them is held when a decides.
	d := mkdir(t, c, root, base.RootIno, "d")
	e := mkdir(t, c, root, d, "e")
	tg := mkdir(t, c, root, d, "t")
	s := mkdir(t, c, root, d, "s")
	_, err := c.SetAttr(ctx, root, s, SetAttrRequest{Valid: SetMode, Mode: 0o1777})
	ok(t, err)
	user := &Caller{Uid: 1000, Gid: 1000}
	g := create(t, c, user, s, "g")
	leaseOf(t, a, d)
	leaseOf(t, a, s)
	for _, n := range []string{"e", "t"} {
		_, _, err := a.Lookup(ctx, root, d, n)
		ok(t, err)
	}
	written := func(what string, want int64, do func()) {
		t.Helper()
		s0 := wbStats(t, a)
		do()
		if n := wbStats(t, a).Changes - s0.Changes; n != want {
			t.Fatalf("%s: %d changes written back, want %d", what, n, want)
		}
	}

	// The other client's create comes first in each check: the build
	// before failed it (the create succeeded, the removal was lost).
	written("rmdir of c's directory", 0, func() {
		ok(t, a.Rmdir(ctx, root, d, "e"))
		if _, _, err := b.Create(ctx, root, e, "x", 0o644, 0); !errors.Is(err, base.ErrNotFound) {
			t.Fatalf("create in a directory removed before it: %v (%+v)", err, wbStats(t, a))
		}
	})
	written("mkdir", 1, func() { mkdir(t, a, root, d, "u") })
	written("rename over c's directory", 0, func() {
		ok(t, a.Rename(ctx, root, d, "u", d, "t", 0))
		if _, _, err := b.Create(ctx, root, tg, "x", 0o644, 0); !errors.Is(err, base.ErrNotFound) {
			t.Fatalf("create in a directory renamed over before it: %v (%+v)", err, wbStats(t, a))
		}
	})
	// A directory a made (its lease a's since its create): written back.
	written("mkdir and rmdir of a's own", 2, func() {
		mkdir(t, a, root, d, "n")
		ok(t, a.Rmdir(ctx, root, d, "n"))
	})
	// In the sticky directory: g is user's, made by c; user removes it.
	written("sticky unlink of c's file", 0, func() {
		ok(t, a.Unlink(ctx, user, s, "g"))
		// A chown through g's number: after the unlink, g is gone.
		if _, err := b.SetAttr(ctx, root, g, SetAttrRequest{Valid: SetUid, Uid: 2000}); !errors.Is(err, base.ErrNotFound) {
			t.Fatalf("chown of a file unlinked before it: %v (%+v)", err, wbStats(t, a))
		}
	})
	written("sticky create, close and unlink of a's own", 3, func() {
		if _, _, err := a.Lookup(ctx, user, s, "h"); !errors.Is(err, base.ErrNotFound) {
			t.Fatalf("lookup of h before its create: %v", err)
		}
		h, _, err := a.Create(ctx, user, s, "h", 0o644, 0)
		ok(t, err)
		ok(t, a.CloseFile(ctx, h))
		ok(t, a.Unlink(ctx, user, s, "h"))
	})
	if _, err := b.GetAttr(ctx, g); !errors.Is(err, base.ErrNotFound) {
		t.Fatalf("g after its unlink: %v", err)
	}
	settledClean(t, a, b, "the removals")
	if st := wbStats(t, a); st.Lost != 0 {
		t.Fatalf("lost changes: %+v", st)
	}
}

// A volume's inode limit and capacity are checked against every client's
// count, as a quota is: what they charge is not acknowledged before that
// count is committed. Before, a fresh file's data commit was written back;
// b's write then filled the volume, and a's, run again at its commit,
// failed with ENOSPC after it was acknowledged (lost; EIO at the next
// sync). A create under an inode limit was kept out of the log only by
// its prediction misses (six tries, then the usual path). Now a client
// writes back what its grant of a limit covers (grant_test.go); this
// close to the limits it takes none (grantMin), and every change waits
// for its transaction.
func TestSharedWriteBackVolumeLimits(t *testing.T) {
	a, b, d, u := limitedPair(t)
	setLimits(t, u.Inodes+2, u.Bytes+10000, a, b)
	leaseOf(t, a, d)
	y := create(t, b, root, base.RootIno, "y")
	s0 := wbStats(t, a)
	if _, _, err := a.Lookup(ctx, root, d, "x"); !errors.Is(err, base.ErrNotFound) {
		t.Fatalf("lookup of x before its create: %v", err)
	}
	x, _, err := a.Create(ctx, root, d, "x", 0o644, 0)
	ok(t, err)
	defer func() { ok(t, a.CloseFile(ctx, x)) }()
	// The inode limit: a's create counted, b's first fills the volume.
	if _, _, err := b.Create(ctx, root, base.RootIno, "y2", 0o644, 0); !errors.Is(err, base.ErrNoSpace) {
		t.Errorf("a create past the inode limit, after a's: %v, want ENOSPC", err)
	}
	// The capacity: a's 6,000 bytes first, b's 6,000 more do not fit.
	write := func(m *Meta, ino base.Ino) error {
		id, err := m.NewSliceID(ctx)
		ok(t, err)
		_, err = m.WriteSlices(ctx, ino, []SliceWrite{{Index: 0, Slice: base.Slice{ID: id, Size: 6000, Len: 6000}}}, 0)
		return err
	}
	ok(t, write(a, x))
	if err := write(b, y); !errors.Is(err, base.ErrNoSpace) {
		t.Errorf("a write past the capacity, after a's: %v, want ENOSPC", err)
	}
	ok(t, a.Sync(ctx))
	if st := wbStats(t, a); st.Lost != 0 || st.Changes != s0.Changes {
		t.Errorf("a create and a write under volume limits: %d written back, %d lost, want none (%+v)", st.Changes-s0.Changes, st.Lost, st)
	}
	if got := must[base.Attr](t)(b.GetAttr(ctx, x)); got.Length != 6000 {
		t.Errorf("a's file: %d bytes, want 6000", got.Length)
	}
}
