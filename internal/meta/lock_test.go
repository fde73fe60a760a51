package meta

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

func TestApplyLock(t *testing.T) {
	r := func(typ LockType, s, e uint64) Lock { return Lock{Type: typ, Start: s, End: e} }
	cases := []struct {
		name     string
		mine     []Lock
		req      Lock
		want     []Lock
		released bool
	}{
		{"take", nil, r(WriteLock, 0, 9), []Lock{r(WriteLock, 0, 9)}, false},
		{"merge adjacent", []Lock{r(ReadLock, 0, 9)}, r(ReadLock, 10, 19), []Lock{r(ReadLock, 0, 19)}, false},
		{"split by unlock", []Lock{r(WriteLock, 0, 99)}, r(Unlock, 10, 19), []Lock{r(WriteLock, 0, 9), r(WriteLock, 20, 99)}, true},
		{"downgrade middle", []Lock{r(WriteLock, 0, 99)}, r(ReadLock, 10, 19),
			[]Lock{r(WriteLock, 0, 9), r(ReadLock, 10, 19), r(WriteLock, 20, 99)}, true},
		{"upgrade", []Lock{r(ReadLock, 0, 9)}, r(WriteLock, 0, 9), []Lock{r(WriteLock, 0, 9)}, false},
		{"unlock all to EOF", []Lock{r(ReadLock, 5, 9), r(WriteLock, 20, LockEOF)}, r(Unlock, 0, LockEOF), nil, true},
		{"unlock elsewhere", []Lock{r(ReadLock, 5, 9)}, r(Unlock, 100, 200), []Lock{r(ReadLock, 5, 9)}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, released := applyLock(append([]Lock(nil), c.mine...), c.req)
			if len(got) == 0 {
				got = nil
			}
			if !reflect.DeepEqual(got, c.want) || released != c.released {
				t.Fatalf("applyLock(%v, %v) = %v, %v; want %v, %v", c.mine, c.req, got, released, c.want, c.released)
			}
			if len(got) > 0 {
				back, err := decodeLocks(lockPosix, encodeLocks(lockPosix, got))
				if err != nil || !reflect.DeepEqual(back, got) {
					t.Fatalf("round trip %v: %v, %v", got, back, err)
				}
			}
		})
	}
}

// twoClients opens two clients with sessions on one store.
func twoClients(t *testing.T) (a, b *Meta, store kv.Store) {
	t.Helper()
	a, store = newTestMetaStore(t, Options{})
	b, err := Open(ctx, store, Options{})
	ok(t, err)
	must[uint64](t)(a.NewSession(ctx, SessionInfo{Host: "a"}))
	must[uint64](t)(b.NewSession(ctx, SessionInfo{Host: "b"}))
	t.Cleanup(func() { _ = b.Close() })
	return a, b, store
}

func setRecheck(t *testing.T, d time.Duration) {
	old := LockRecheck
	LockRecheck = d
	t.Cleanup(func() { LockRecheck = old })
}

// waitLock runs a blocking lock request in the background.
func waitLock(fn func(ctx context.Context) error) (done chan error, cancel func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done = make(chan error, 1)
	go func() { done <- fn(ctx) }()
	return done, cancel
}

func wantBlocked(t *testing.T, done chan error) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("lock request returned %v while it should wait", err)
	case <-time.After(100 * time.Millisecond):
	}
}

func wantGranted(t *testing.T, done chan error, within time.Duration) {
	t.Helper()
	select {
	case err := <-done:
		ok(t, err)
	case <-time.After(within):
		t.Fatalf("lock not granted within %v", within)
	}
}

func TestPosixLocksAcrossClients(t *testing.T) {
	setRecheck(t, time.Minute) // grants must come from notifications
	a, b, _ := twoClients(t)
	ino := create(t, a, root, base.RootIno, "f")

	ok(t, a.SetPosixLock(ctx, ino, 1, Lock{Type: WriteLock, Start: 0, End: 99, Pid: 10}, false))
	wantErr(t, b.SetPosixLock(ctx, ino, 1, Lock{Type: ReadLock, Start: 50, End: 60}, false), base.ErrWouldBlock)
	// Disjoint ranges and the same owner's own ranges do not conflict.
	ok(t, b.SetPosixLock(ctx, ino, 1, Lock{Type: WriteLock, Start: 100, End: LockEOF}, false))
	ok(t, a.SetPosixLock(ctx, ino, 1, Lock{Type: ReadLock, Start: 0, End: 9}, false))

	got, err := b.GetPosixLock(ctx, ino, 1, Lock{Type: ReadLock, Start: 20, End: 30})
	ok(t, err)
	if got.Type != WriteLock || got.Start != 10 || got.End != 99 || got.Pid != 0 || got.Session != a.SessionID() {
		t.Fatalf("GetPosixLock conflict = %+v", got)
	}
	got, err = a.GetPosixLock(ctx, ino, 2, Lock{Type: ReadLock, Start: 20, End: 30})
	ok(t, err)
	if got.Pid != 10 {
		t.Fatalf("own client's conflicting lock should carry its pid: %+v", got)
	}
	if got, _ = b.GetPosixLock(ctx, ino, 1, Lock{Type: ReadLock, Start: 0, End: 9}); got.Type != Unlock {
		t.Fatalf("read over a read lock should be free, got %+v", got)
	}

	done, cancel := waitLock(func(ctx context.Context) error {
		return b.SetPosixLock(ctx, ino, 1, Lock{Type: WriteLock, Start: 0, End: 99}, true)
	})
	defer cancel()
	wantBlocked(t, done)
	ok(t, a.SetPosixLock(ctx, ino, 1, Lock{Type: Unlock, Start: 10, End: 99}, false)) // still holds 0-9
	wantBlocked(t, done)
	ok(t, a.SetPosixLock(ctx, ino, 1, Lock{Type: Unlock, Start: 0, End: LockEOF}, false))
	wantGranted(t, done, 5*time.Second)

	_, posix, err := a.listLocks(ctx, ino)
	ok(t, err)
	if len(posix) != 1 || posix[0].Session != b.SessionID() || posix[0].Start != 0 || posix[0].End != LockEOF {
		t.Fatalf("locks after grant: %+v", posix)
	}
	ok(t, b.SetPosixLock(ctx, ino, 1, Lock{Type: Unlock, Start: 0, End: LockEOF}, false))
}

func TestFlockAcrossClients(t *testing.T) {
	setRecheck(t, time.Minute)
	a, b, _ := twoClients(t)
	ino := create(t, a, root, base.RootIno, "f")

	ok(t, a.Flock(ctx, ino, 7, ReadLock, 1, false))
	ok(t, b.Flock(ctx, ino, 7, ReadLock, 2, false)) // shared
	wantErr(t, b.Flock(ctx, ino, 8, WriteLock, 2, false), base.ErrWouldBlock)

	done, cancel := waitLock(func(ctx context.Context) error { return b.Flock(ctx, ino, 8, WriteLock, 2, true) })
	defer cancel()
	wantBlocked(t, done)
	ok(t, a.Flock(ctx, ino, 7, Unlock, 1, false))
	wantBlocked(t, done) // b's own other owner (7) still holds a read lock
	ok(t, b.Flock(ctx, ino, 7, Unlock, 2, false))
	wantGranted(t, done, 5*time.Second)

	// A blocked request ends when its context does.
	done2, cancel2 := waitLock(func(ctx context.Context) error { return a.Flock(ctx, ino, 9, ReadLock, 1, true) })
	wantBlocked(t, done2)
	cancel2()
	select {
	case err := <-done2:
		wantErr(t, err, base.ErrInterrupted)
	case <-time.After(5 * time.Second):
		t.Fatal("cancelled lock wait did not return")
	}
	ok(t, b.CloseSession(ctx)) // releases owner 8's lock
	flock, _, err := a.listLocks(ctx, ino)
	ok(t, err)
	if len(flock) != 0 {
		t.Fatalf("locks left after the session closed: %+v", flock)
	}
}

func TestExpiredSessionReleasesLocksAndReservations(t *testing.T) {
	setRecheck(t, time.Minute)
	a, b, store := twoClients(t)
	ino := create(t, a, root, base.RootIno, "f")
	ok(t, a.SetPosixLock(ctx, ino, 1, Lock{Type: WriteLock, Start: 0, End: LockEOF}, false))
	id := must[uint64](t)(a.NewSliceID(ctx)) // in flight in a
	g := must[SliceGuard](t)(b.SliceGuard(ctx))
	if !g.Protects(id) {
		t.Fatalf("slice %d in flight in a live session is not protected: %+v", id, g)
	}

	done, cancel := waitLock(func(ctx context.Context) error {
		return b.SetPosixLock(ctx, ino, 3, Lock{Type: ReadLock, Start: 0, End: 10}, true)
	})
	defer cancel()
	wantBlocked(t, done)

	time.Sleep(20 * time.Millisecond)
	ok(t, b.Heartbeat(ctx))
	exp := must[[]SessionInfo](t)(b.ExpireSessions(ctx, 10*time.Millisecond))
	if len(exp) != 1 || exp[0].ID != a.SessionID() {
		t.Fatalf("expired %+v, want a's session %d", exp, a.SessionID())
	}
	wantGranted(t, done, 5*time.Second)
	g = must[SliceGuard](t)(b.SliceGuard(ctx))
	if g.Protects(id) {
		t.Fatalf("slice %d of an expired session still protected: %+v", id, g)
	}
	gone := must[[]ExpiredSession](t)(b.ListExpiredSessions(ctx))
	if len(gone) != 1 || gone[0].ID != exp[0].ID || gone[0].ExpiredBy != b.SessionID() {
		t.Fatalf("expired list %+v", gone)
	}

	// a comes back: its heartbeat finds the session gone and renews it.
	old := a.SessionID()
	err := a.Heartbeat(ctx)
	if !errors.Is(err, base.ErrStale) || a.SessionID() == old || a.SessionID() == 0 {
		t.Fatalf("heartbeat of an expired session: %v (session %d -> %d)", err, old, a.SessionID())
	}
	ok(t, a.Heartbeat(ctx))
	// The slice in flight when a was declared dead cannot be committed:
	// gc may have taken its blocks.
	_, err = a.WriteSlices(ctx, ino, []SliceWrite{{Slice: base.Slice{ID: id, Size: 10, Len: 10}}}, 1)
	wantErr(t, err, base.ErrStale)
	a.ForgetSlice(id)
	// New slices of the renewed session commit.
	id2 := must[uint64](t)(a.NewSliceID(ctx))
	must[[]uint32](t)(a.WriteSlices(ctx, ino, []SliceWrite{{Slice: base.Slice{ID: id2, Size: 10, Len: 10}}}, 1))
	ok(t, b.SetPosixLock(ctx, ino, 3, Lock{Type: Unlock, Start: 0, End: LockEOF}, false))
	_ = store
}

func TestSliceReservationsPruned(t *testing.T) {
	m, _ := newTestMetaStore(t, Options{SliceBatch: 4})
	must[uint64](t)(m.NewSession(ctx, SessionInfo{}))
	var ids []uint64
	for range 10 {
		ids = append(ids, must[uint64](t)(m.NewSliceID(ctx)))
	}
	g := must[SliceGuard](t)(m.SliceGuard(ctx))
	for _, id := range ids {
		if !g.Protects(id) {
			t.Fatalf("slice %d not protected: %+v", id, g)
		}
	}
	for _, id := range ids[:8] {
		m.ForgetSlice(id)
	}
	ok(t, m.Heartbeat(ctx))
	g = must[SliceGuard](t)(m.SliceGuard(ctx))
	for i, id := range ids {
		if g.Protects(id) != (i >= 8) {
			t.Fatalf("after pruning, Protects(%d) = %v: %+v", id, g.Protects(id), g)
		}
	}
	for _, id := range ids[8:] {
		m.ForgetSlice(id)
	}
	ok(t, m.CloseSession(ctx))
	g = must[SliceGuard](t)(m.SliceGuard(ctx))
	if len(g.Reserved) != 0 {
		t.Fatalf("reservations left after CloseSession: %+v", g)
	}
}

func TestCheckFlagsLocksOfGoneSessions(t *testing.T) {
	m, store := newTestMetaStore(t, Options{})
	ino := create(t, m, root, base.RootIno, "f")
	ok(t, store.Update(ctx, func(tx kv.Txn) error {
		tx.Set(lockKey(ino, lockFlock, 42, 1), encodeLocks(lockFlock, []Lock{{Type: WriteLock, End: LockEOF}}))
		tx.Set(lockKey(ino, lockPosix, 42, 2), []byte{1, 2, 3})
		return nil
	}))
	probs := must[[]Problem](t)(m.Check(ctx, true))
	kinds := map[string]int{}
	for _, p := range probs {
		kinds[p.Kind]++
	}
	if kinds["dead-session-record"] != 1 || kinds["bad-record"] != 1 {
		t.Fatalf("problems %+v", probs)
	}
	// Repaired: the cleanup check finds nothing.
}

func TestLazyHoldRelease(t *testing.T) {
	m, _ := newTestMetaStore(t, Options{HoldReleaseDelay: 20 * time.Millisecond})
	must[uint64](t)(m.NewSession(ctx, SessionInfo{}))
	ino := create(t, m, root, base.RootIno, "f")
	holds := func() int { return holdCount(t, m, ino) }
	must[base.Attr](t)(m.OpenFile(ctx, ino))
	ok(t, m.CloseFile(ctx, ino))
	if holds() != 1 {
		t.Fatal("hold deleted at once despite HoldReleaseDelay")
	}
	// Opened again before the release: the hold stays and survives it.
	must[base.Attr](t)(m.OpenFile(ctx, ino))
	time.Sleep(60 * time.Millisecond)
	if holds() != 1 {
		t.Fatal("hold of a reopened file released")
	}
	// Unlinked while open, then closed: destroyed after the delay.
	ok(t, m.Unlink(ctx, root, base.RootIno, "f"))
	ok(t, m.CloseFile(ctx, ino))
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := m.GetAttr(ctx, ino); errors.Is(err, base.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("unlinked file not destroyed after its last close")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if holds() != 0 {
		t.Fatal("hold left after release")
	}
}
