package meta

import (
	"testing"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/kv/counted"
)

func TestSessions(t *testing.T) {
	m, store := newTestMetaStore(t, Options{})
	id := must[uint64](t)(m.NewSession(ctx, SessionInfo{Host: "h1", Pid: 1}))
	if id == 0 || m.SessionID() != id {
		t.Fatal("session id")
	}
	_, err := m.NewSession(ctx, SessionInfo{})
	wantErr(t, err, base.ErrExist)
	ok(t, m.Heartbeat(ctx))
	m2 := must[*Meta](t)(Open(ctx, store, Options{}))
	checkOnCleanup(t, m2)
	id2 := must[uint64](t)(m2.NewSession(ctx, SessionInfo{Host: "h2"}))
	ss := must[[]SessionInfo](t)(m.ListSessions(ctx))
	if len(ss) != 2 || ss[0].ID != id || ss[0].Host != "h1" || ss[1].ID != id2 || ss[0].Heartbeat.IsZero() {
		t.Fatalf("sessions %+v", ss)
	}

	// m2 holds a file open; m unlinks it: it survives until m2 closes it
	f := create(t, m, root, base.RootIno, "f")
	must[base.Attr](t)(m2.OpenFile(ctx, f))
	ok(t, m.Unlink(ctx, root, base.RootIno, "f"))
	if a := attr(t, m, f); a.Nlink != 0 {
		t.Fatal("orphan expected")
	}
	ok(t, m2.CloseFile(ctx, f))
	_, err = m.GetAttr(ctx, f)
	wantErr(t, err, base.ErrNotFound)

	// CloseSession releases holds; the in-memory count still protects
	g := create(t, m, root, base.RootIno, "g")
	must[base.Attr](t)(m2.OpenFile(ctx, g))
	ok(t, m.Unlink(ctx, root, base.RootIno, "g"))
	ok(t, m2.CloseSession(ctx))
	if _, err := m.GetAttr(ctx, g); err != nil {
		t.Fatal("open orphan freed by CloseSession")
	}
	ok(t, m2.CloseFile(ctx, g))
	_, err = m.GetAttr(ctx, g)
	wantErr(t, err, base.ErrNotFound)
	if ss := must[[]SessionInfo](t)(m.ListSessions(ctx)); len(ss) != 1 {
		t.Fatalf("sessions %+v", ss)
	}
	wantErr(t, m2.Heartbeat(ctx), base.ErrInvalid)
}

func TestDeadSessionHoldsReleasedAtOpen(t *testing.T) {
	m, store := newTestMetaStore(t, Options{})
	crashed := must[*Meta](t)(Open(ctx, store, Options{}))
	must[uint64](t)(crashed.NewSession(ctx, SessionInfo{Host: "dead"}))
	f := create(t, m, root, base.RootIno, "f")
	must[base.Attr](t)(crashed.OpenFile(ctx, f))
	ok(t, m.Unlink(ctx, root, base.RootIno, "f"))
	// the crashed client's session record disappears (expiry, issue 3)
	ok(t, store.Update(ctx, func(tx kv.Txn) error {
		tx.Delete(sessionKey(crashed.SessionID()))
		return nil
	}))
	// Its hold, and the id ranges it reserved with its session.
	kinds := map[string]int{}
	for _, p := range must[[]Problem](t)(m.Check(ctx, false)) {
		kinds[p.Kind]++
	}
	if len(kinds) != 2 || kinds["stale-hold"] != 1 || kinds["dead-session-record"] != 1 {
		t.Fatalf("problems %v", kinds)
	}
	must[*Meta](t)(Open(ctx, store, Options{}))
	_, err := m.GetAttr(ctx, f)
	wantErr(t, err, base.ErrNotFound)
	if probs := must[[]Problem](t)(m.Check(ctx, false)); len(probs) != 0 {
		t.Fatalf("after the next Open: problems %+v", probs)
	}
}

func TestSessionAfterOpen(t *testing.T) {
	// files opened before NewSession get holds when the session starts
	store := newStore(t, Settings{Name: "v"})
	m := must[*Meta](t)(Open(ctx, store, Options{}))
	f := create(t, m, root, base.RootIno, "f")
	must[base.Attr](t)(m.OpenFile(ctx, f))
	must[uint64](t)(m.NewSession(ctx, SessionInfo{}))
	other := must[*Meta](t)(Open(ctx, store, Options{}))
	ok(t, other.Unlink(ctx, root, base.RootIno, "f"))
	if a := attr(t, m, f); a.Nlink != 0 {
		t.Fatal("orphan expected")
	}
	ok(t, m.Close()) // closes the session; in-memory handle keeps it
	if _, err := other.GetAttr(ctx, f); err != nil {
		t.Fatalf("freed: %v", err)
	}
	// the closed client cannot close the file any more: check reports the
	// orphan as held only while this client is alive, so repair cleans it
	probs, err := other.Check(ctx, true)
	ok(t, err)
	if len(probs) != 1 || probs[0].Kind != "unheld-orphan" {
		t.Fatalf("problems %+v", probs)
	}
	_, err = other.GetAttr(ctx, f)
	wantErr(t, err, base.ErrNotFound)
	checkOnCleanup(t, other)
}

// TestSessionReservesIDs: a client that may write reserves its first
// inode and slice id ranges with its session, so that its first create
// and its first block upload run no transaction on the volume-wide
// counters; the slice ids are recorded for gc from the start, as a
// reservation made later would be; a read-only client reserves nothing.
func TestSessionReservesIDs(t *testing.T) {
	store := counted.New(testStore(t))
	ok(t, Format(ctx, store, Settings{Name: "test"}, false))
	a := must[*Meta](t)(Open(ctx, store, Options{InodeBatch: 8, SliceBatch: 8}))
	checkOnCleanup(t, a)
	b := must[*Meta](t)(Open(ctx, store, Options{InodeBatch: 8, SliceBatch: 8}))
	checkOnCleanup(t, b)
	ro := must[*Meta](t)(Open(ctx, store, Options{ReadOnly: true}))
	checkOnCleanup(t, ro)
	sa := must[uint64](t)(a.NewSession(ctx, SessionInfo{Host: "a"}))
	sb := must[uint64](t)(b.NewSession(ctx, SessionInfo{Host: "b"}))
	must[uint64](t)(ro.NewSession(ctx, SessionInfo{Host: "ro"}))
	ro.idMu.Lock()
	if ro.maxIno != 0 || ro.maxSlic != 0 {
		t.Errorf("a read-only session reserved inodes up to %d, slices up to %d", ro.maxIno, ro.maxSlic)
	}
	ro.idMu.Unlock()

	txns := func() int64 { return store.Stats().Total().Transactions }
	before := txns()
	var ids []uint64
	for range 8 {
		ids = append(ids, must[uint64](t)(a.NewSliceID(ctx)), must[uint64](t)(b.NewSliceID(ctx)))
		_ = must[base.Ino](t)(a.allocIno(ctx))
		_ = must[base.Ino](t)(b.allocIno(ctx))
	}
	if n := txns() - before; n != 0 {
		t.Errorf("the first 8 inodes and slice ids of two sessions took %d transactions, want 0", n)
	}
	seen := map[uint64]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("slice id %d handed out twice", id)
		}
		seen[id] = true
	}
	// gc keeps away from every id handed out and not committed.
	g := must[SliceGuard](t)(a.SliceGuard(ctx))
	for _, id := range ids {
		if !g.Protects(id) {
			t.Errorf("slice id %d, handed out by session %d or %d, is not protected from gc", id, sa, sb)
		}
	}
	// The ninth of each needs a new range: one transaction each.
	before = txns()
	must[uint64](t)(a.NewSliceID(ctx))
	_ = must[base.Ino](t)(a.allocIno(ctx))
	if n := txns() - before; n != 2 {
		t.Errorf("the ninth inode and slice id took %d transactions, want 2", n)
	}
	for _, id := range ids {
		a.ForgetSlice(id)
		b.ForgetSlice(id)
	}
}
