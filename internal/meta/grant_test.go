package meta

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// setLimits sets the volume's inode limit and capacity, as seen by ms.
func setLimits(t *testing.T, inodes, capacity uint64, ms ...*Meta) {
	t.Helper()
	_, err := ms[0].ChangeSettings(ctx, func(s *Settings) error {
		s.Inodes, s.Capacity = inodes, capacity
		return nil
	})
	ok(t, err)
	for _, m := range ms[1:] {
		ok(t, m.refreshSettings(ctx))
	}
}

// limitedPair is writeBackPair with a file made in d and committed, and
// the volume's usage then: a volume to set limits on.
func limitedPair(t *testing.T) (a, b *Meta, d base.Ino, u Usage) {
	t.Helper()
	a, b, d = writeBackPair(t)
	createLooked(t, a, d, "warm")
	ok(t, a.Sync(ctx))
	return a, b, d, must[Usage](t)(a.Usage(ctx))
}

// storedGrant reads session sid's grant of kind as the store holds it.
func storedGrant(t *testing.T, m *Meta, sid uint64, kind byte) uint64 {
	t.Helper()
	var n uint64
	ok(t, m.view(ctx, func(r kv.Reader) (err error) {
		n, err = grantOf(r, sid, kind)
		return err
	}))
	return n
}

// Under a volume's capacity and inode limit, a client that writes back
// holds a grant of each (grant.go): its creates and data commits are
// written back, charged to the grant, which every other client's check
// counts as used. Before grants, every such change waited for its own
// transaction (TestSharedWriteBackVolumeLimits, near the limit, still
// does).
func TestSharedWriteBackVolumeGrants(t *testing.T) {
	a, b, d, u := limitedPair(t)
	setLimits(t, u.Inodes+100_000, u.Bytes+1<<30, a, b)
	s0 := wbStats(t, a)
	const files, written = 200, 50
	for i := range files {
		ino := createLooked(t, a, d, fmt.Sprint("f", i))
		if i < written {
			writeSlice(t, a, ino, 0, 4096)
		}
	}
	s1 := wbStats(t, a)
	if n := s1.Changes - s0.Changes; n < files+written {
		t.Errorf("%d changes written back of %d creates and %d writes under the limits (%+v)", n, files, written, s1)
	}
	if s1.Grants == s0.Grants {
		t.Errorf("no grant taken: %+v", s1)
	}
	ok(t, a.Sync(ctx))
	sid := a.SessionID()
	if g := storedGrant(t, b, sid, counterUsedInodes); g != grantMax[1]-files {
		t.Errorf("a's inode grant after %d creates: %d, want %d", files, g, grantMax[1]-files)
	}
	if g := storedGrant(t, b, sid, counterUsedBytes); g != grantMax[0]-written*4096 {
		t.Errorf("a's byte grant after %d writes of 4 KiB: %d, want %d", written, g, grantMax[0]-written*4096)
	}
	// What a holds is not free for b.
	st := must[StatFS](t)(b.StatFS(ctx))
	u1 := must[Usage](t)(b.Usage(ctx))
	if want := u.Inodes + 100_000 - u1.Inodes - (grantMax[1] - files); st.AvailFiles != want {
		t.Errorf("b's free inodes %d, want %d (a's grant held)", st.AvailFiles, want)
	}
	// a gives back what it did not charge for a heartbeat interval.
	ok(t, a.wbIdleGrants(ctx)) // charged since: kept
	if storedGrant(t, b, sid, counterUsedInodes) == 0 {
		t.Fatal("a grant charged since the last heartbeat was given back")
	}
	ok(t, a.wbIdleGrants(ctx))
	if g, h := storedGrant(t, b, sid, counterUsedInodes), storedGrant(t, b, sid, counterUsedBytes); g != 0 || h != 0 {
		t.Errorf("idle grants kept: %d inodes, %d bytes", g, h)
	}
	createLooked(t, a, d, "again") // takes one anew
	if s := wbStats(t, a); s.Grants != s1.Grants+1 {
		t.Errorf("grants taken: %d, want %d", s.Grants, s1.Grants+1)
	}
	// The limits change: a's grant, taken under the old ones, is void; its
	// next create takes one under the new ones.
	ok(t, a.Sync(ctx))
	u2 := must[Usage](t)(b.Usage(ctx))
	setLimits(t, u2.Inodes+400, 0, b, a)
	createLooked(t, a, d, "lowered")
	if s := wbStats(t, a); s.Grants != s1.Grants+2 {
		t.Errorf("grants taken after the limits changed: %d, want %d", s.Grants, s1.Grants+2)
	}
	ok(t, a.Sync(ctx))
	if g, want := storedGrant(t, b, sid, counterUsedInodes), uint64(400/grantShare-1); g != want {
		t.Errorf("a's inode grant under the lowered limit: %d, want %d", g, want)
	}
	if g := storedGrant(t, b, sid, counterUsedBytes); g != 0 {
		t.Errorf("a's byte grant with no capacity: %d, want none", g)
	}
	settledClean(t, a, b, "the creates and writes under grants")
	ok(t, a.CloseSession(ctx))
	if g := storedGrant(t, b, sid, counterUsedInodes); g != 0 {
		t.Errorf("a's grant kept after its session closed: %d", g)
	}
}

// Two clients fill the volume to its inode limit, a writing back under
// grants, b checking against the store: b's check counts what a's grant
// holds (with it not counted, b filled the volume and a's grant then took
// it past its limit), none of a's acknowledged creates is lost, and the
// volume ends exactly full (a's last grant, taken near the limit, is
// none: grantMin).
func TestSharedWriteBackGrantsToTheLimit(t *testing.T) {
	a, b, d, u := limitedPair(t)
	lim := u.Inodes + 600
	setLimits(t, lim, 0, a, b)
	s0 := wbStats(t, a)
	createLooked(t, a, d, "a") // takes a's grant: 600/8
	g := a.wb.grants.left[1] + 1
	if g != 600/grantShare {
		t.Fatalf("a's grant: %d, want %d", g, 600/grantShare)
	}
	// b alone: what is neither used nor granted to a.
	nb := 0
	for ; ; nb++ {
		_, _, err := b.Create(ctx, root, base.RootIno, fmt.Sprint("b", nb), 0o644, 0)
		if errors.Is(err, base.ErrNoSpace) {
			break
		}
		ok(t, err)
		if nb > 600 {
			t.Fatal("b passed the limit")
		}
	}
	if want := 600 - int(g); nb != want {
		t.Errorf("b made %d files before ENOSPC, want %d (a's grant held)", nb, want)
	}
	// a: its grant, then (none left to grant) ENOSPC.
	na := 1
	for ; ; na++ {
		name := fmt.Sprint("a", na)
		if _, _, err := a.Lookup(ctx, root, d, name); !errors.Is(err, base.ErrNotFound) {
			t.Fatalf("lookup of %s: %v", name, err)
		}
		ino, _, err := a.Create(ctx, root, d, name, 0o644, 0)
		if errors.Is(err, base.ErrNoSpace) {
			break
		}
		ok(t, err)
		ok(t, a.CloseFile(ctx, ino))
		if na > 600 {
			t.Fatal("a passed the limit")
		}
	}
	ok(t, a.Sync(ctx))
	if got := must[Usage](t)(b.Usage(ctx)).Inodes; got != lim {
		t.Errorf("inodes used at the end: %d, limit %d (a made %d, b %d)", got, lim, na, nb)
	}
	if _, _, err := b.Create(ctx, root, base.RootIno, "late", 0o644, 0); !errors.Is(err, base.ErrNoSpace) {
		t.Errorf("b's create on a full volume: %v", err)
	}
	s := wbStats(t, a)
	if s.Lost != 0 || s.Changes-s0.Changes < int64(g) {
		t.Errorf("a's creates: %d changes written back, %d lost (%+v)", s.Changes-s0.Changes, s.Lost, s)
	}
	if got := names(t, b, d); len(got) != na+1 {
		t.Errorf("d holds %d names, a made %d", len(got), na+1)
	}
	settledClean(t, a, b, "filling the volume")
}

// A batch charged to a grant whose guard fails runs again change by
// change; each change charges the grant in the store once (the batch's
// record of what was left is not written), and none is refused.
func TestSharedWriteBackGrantReplay(t *testing.T) {
	a, b, d, f := replayPair(t)
	u := must[Usage](t)(a.Usage(ctx))
	setLimits(t, u.Inodes+100_000, 0, a, b)
	createLooked(t, a, d, "first") // takes the grant
	ok(t, a.Sync(ctx))
	sid := a.SessionID()
	g0 := storedGrant(t, b, sid, counterUsedInodes)
	fails := make(chan error, 8)
	replayInFlight(a, b, d, f, fails, func(base.Ino) {})
	ok(t, a.Unlink(ctx, root, d, "f"))
	ok(t, a.Sync(ctx))
	close(fails)
	for err := range fails {
		t.Error(err)
	}
	s := wbStats(t, a)
	if s.Replays == 0 || s.Lost != 0 {
		t.Fatalf("want a replay and nothing lost: %+v", s)
	}
	if g := storedGrant(t, b, sid, counterUsedInodes); g != g0-5 {
		t.Errorf("a's grant after 5 creates run again: %d, want %d", g, g0-5)
	}
	createLooked(t, a, d, "after") // a grant taken anew
	settledClean(t, a, b, "the replays under a grant")
}

// A grant of a session that is gone is fsck's dead-session-record, and
// the next client to open the volume releases it.
func TestGrantOfDeadSession(t *testing.T) {
	a, b, _ := writeBackPair(t)
	ok(t, b.store.Update(ctx, func(tx kv.Txn) error {
		tx.Set(grantKey(999_999, counterUsedBytes), u64(nil, 1<<20))
		return nil
	}))
	probs := must[[]Problem](t)(b.Check(ctx, false))
	found := false
	for _, p := range probs {
		found = found || p.Kind == "dead-session-record"
	}
	if !found {
		t.Fatalf("fsck: %+v, want a dead-session-record", probs)
	}
	ok(t, a.releaseDeadSessions(ctx))
	if g := storedGrant(t, b, 999_999, counterUsedBytes); g != 0 {
		t.Errorf("a dead session's grant kept: %d", g)
	}
	if probs := must[[]Problem](t)(b.Check(ctx, false)); len(probs) != 0 {
		t.Errorf("fsck after: %+v", probs)
	}
}
