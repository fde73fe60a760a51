package meta

import (
	"sync"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// newMemHoldMeta opens a client with holds in memory and a session, as a
// mount of an embedded volume does.
func newMemHoldMeta(t *testing.T) *Meta {
	t.Helper()
	m, _ := newTestMetaStore(t, Options{MemoryHolds: true})
	if m.holdToucher == nil {
		t.Fatal("MemoryHolds not in effect on the test store")
	}
	must[uint64](t)(m.NewSession(ctx, SessionInfo{Host: "here"}))
	return m
}

func TestMemoryHolds(t *testing.T) {
	m := newMemHoldMeta(t)
	f := createOpen(t, m, "f")
	if n := holdCount(t, m, f); n != 0 {
		t.Fatalf("create wrote %d hold records", n)
	}
	_, err := m.WriteSlice(ctx, f, 0, newSlice(t, m, 0, 10), 1)
	ok(t, err)
	ok(t, m.CloseFile(ctx, f))
	must[base.Attr](t)(m.OpenFile(ctx, f))
	must[base.Attr](t)(m.OpenFile(ctx, f))
	if n := holdCount(t, m, f); n != 0 {
		t.Fatalf("open wrote %d hold records", n)
	}
	ok(t, m.Unlink(ctx, root, base.RootIno, "f"))
	if a := attr(t, m, f); a.Nlink != 0 {
		t.Fatalf("open file destroyed or still linked: %+v", a)
	}
	if probs := must[[]Problem](t)(m.Check(ctx, false)); len(probs) != 0 {
		t.Fatalf("problems with an open orphan: %+v", probs)
	}
	ok(t, m.CloseFile(ctx, f))
	if _, err := m.GetAttr(ctx, f); err != nil {
		t.Fatalf("destroyed with a handle open: %v", err)
	}
	// an orphan may be opened again (by handle) while held
	must[base.Attr](t)(m.OpenFile(ctx, f))
	ok(t, m.CloseFile(ctx, f))
	ok(t, m.CloseFile(ctx, f))
	_, err = m.GetAttr(ctx, f)
	wantErr(t, err, base.ErrNotFound)
	if got := pendingIDs(t, m); len(got) != 1 {
		t.Fatalf("pending slices %v, want the file's one", got)
	}
	_, err = m.OpenFile(ctx, f)
	wantErr(t, err, base.ErrNotFound)
	if n := m.openCount(f); n != 0 {
		t.Fatalf("failed open left count %d", n)
	}
	wantErr(t, m.CloseFile(ctx, f), base.ErrBadFD)
	if u := must[Usage](t)(m.Usage(ctx)); u.Bytes != 0 || u.Inodes != 1 {
		t.Fatalf("usage %+v", u)
	}
}

// A process that ends with an unlinked file open leaves an orphan with no
// hold record: the next client with holds in memory destroys it.
func TestMemoryHoldsOrphanOfEndedProcess(t *testing.T) {
	ended, store := newTestMetaStore(t, Options{MemoryHolds: true})
	f := create(t, ended, root, base.RootIno, "f")
	_, err := ended.WriteSlice(ctx, f, 0, newSlice(t, ended, 0, 10), 1)
	ok(t, err)
	must[base.Attr](t)(ended.OpenFile(ctx, f))
	ok(t, ended.Unlink(ctx, root, base.RootIno, "f"))
	// ended stops here, without closing anything.

	other := must[*Meta](t)(Open(ctx, store, Options{}))
	if probs := must[[]Problem](t)(other.Check(ctx, false)); len(probs) != 1 || probs[0].Kind != "unheld-orphan" {
		t.Fatalf("problems %+v, want the unheld orphan", probs)
	}
	next := must[*Meta](t)(Open(ctx, store, Options{MemoryHolds: true}))
	checkOnCleanup(t, next)
	_, err = next.GetAttr(ctx, f)
	wantErr(t, err, base.ErrNotFound)
	if got := pendingIDs(t, next); len(got) != 1 {
		t.Fatalf("pending slices %v, want the file's one", got)
	}
}

// runInHeld runs fn the first time m's unlink of ino reads the open count,
// inside its transaction, and waits for it at most a moment: an engine
// that runs one transaction at a time keeps fn waiting until the unlink
// commits.
func runInHeld(t *testing.T, m *Meta, ino base.Ino, fn func()) (wait func()) {
	var once sync.Once
	done := make(chan struct{})
	m.heldHook = func(got base.Ino, _ int) {
		if got != ino {
			return
		}
		once.Do(func() {
			go func() {
				defer close(done)
				fn()
			}()
			select {
			case <-done:
			case <-time.After(100 * time.Millisecond):
			}
		})
	}
	return func() {
		<-done
		m.heldHook = nil
	}
}

// An open that starts while an unlink of the file's last name runs must
// either fail (the unlink committed first) or keep the file alive.
func TestMemoryHoldsOpenDuringUnlink(t *testing.T) {
	m := newMemHoldMeta(t)
	f := createOpen(t, m, "f")
	ok(t, m.CloseFile(ctx, f))
	var openErr error
	wait := runInHeld(t, m, f, func() { _, openErr = m.OpenFile(ctx, f) })
	ok(t, m.Unlink(ctx, root, base.RootIno, "f"))
	wait()
	_, err := m.GetAttr(ctx, f)
	switch {
	case openErr == nil && err != nil:
		t.Fatalf("open succeeded but the unlink destroyed the file: %v", err)
	case openErr == nil:
		ok(t, m.CloseFile(ctx, f))
		_, err = m.GetAttr(ctx, f)
		wantErr(t, err, base.ErrNotFound)
	default:
		wantErr(t, openErr, base.ErrNotFound)
		wantErr(t, err, base.ErrNotFound)
		if n := m.openCount(f); n != 0 {
			t.Fatalf("failed open left count %d", n)
		}
	}
}

// A last close that runs while an unlink of the file's last name runs must
// not leave an orphan nobody will close.
func TestMemoryHoldsCloseDuringUnlink(t *testing.T) {
	m := newMemHoldMeta(t)
	f := createOpen(t, m, "f")
	var closeErr error
	wait := runInHeld(t, m, f, func() { closeErr = m.CloseFile(ctx, f) })
	ok(t, m.Unlink(ctx, root, base.RootIno, "f"))
	wait()
	ok(t, closeErr)
	_, err := m.GetAttr(ctx, f)
	wantErr(t, err, base.ErrNotFound) // else checkOnCleanup reports the unheld orphan
}

// Opens, closes and unlinks of the same files from many goroutines leave
// no file destroyed while open and no orphan behind.
func TestMemoryHoldsConcurrent(t *testing.T) {
	m := newMemHoldMeta(t)
	const files, rounds = 8, 30
	for round := 0; round < rounds; round++ {
		inos := make([]base.Ino, files)
		for i := range inos {
			inos[i] = createOpen(t, m, name(i))
			ok(t, m.CloseFile(ctx, inos[i]))
		}
		var wg sync.WaitGroup
		errs := make(chan error, 4*files)
		for i, ino := range inos {
			wg.Go(func() {
				if err := m.Unlink(ctx, root, base.RootIno, name(i)); err != nil {
					errs <- err
				}
			})
			for range 2 {
				wg.Go(func() {
					if _, err := m.OpenFile(ctx, ino); err != nil {
						if !errorsIs(err, base.ErrNotFound) {
							errs <- err
						}
						return
					}
					// Open: the inode must stay readable until closed.
					time.Sleep(time.Duration(i) * 50 * time.Microsecond)
					if _, err := m.GetAttr(ctx, ino); err != nil {
						errs <- err
					}
					if err := m.CloseFile(ctx, ino); err != nil {
						errs <- err
					}
				})
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		for _, ino := range inos {
			if a, err := m.GetAttr(ctx, ino); !errorsIs(err, base.ErrNotFound) {
				var orphan []byte
				_ = m.store.View(ctx, func(r kv.Reader) (err error) { orphan, err = r.Get(orphanKey(ino)); return err })
				t.Fatalf("round %d: inode %d not destroyed after its last close: %v (nlink %d, open count %d, orphan record %v)", round, ino, err, a.Nlink, m.openCount(ino), orphan != nil)
			}
		}
	}
}

func name(i int) string { return "f" + string(rune('a'+i)) }

// createOpen creates a file in the root as open(O_CREAT) does: open.
func createOpen(t *testing.T, m *Meta, name string) base.Ino {
	t.Helper()
	ino, _, err := m.Create(ctx, root, base.RootIno, name, 0o644, 0)
	ok(t, err)
	return ino
}
