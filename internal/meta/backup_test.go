package meta

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv/memkv"
)

// TestClaimBackup: one claim per interval (Unix time truncated to it),
// none within half an interval of the last, and a released claim lets the
// interval be claimed again.
func TestClaimBackup(t *testing.T) {
	m := newTestMeta(t)
	const iv = time.Hour
	t0 := time.Date(2030, 5, 6, 7, 0, 0, 0, time.UTC)
	claim := func(at time.Time) (BackupClaim, bool) {
		t.Helper()
		c, ok, err := m.ClaimBackup(ctx, at, iv)
		if err != nil {
			t.Fatal(err)
		}
		return c, ok
	}
	if last, err := m.LastBackupClaim(ctx); err != nil || !last.IsZero() {
		t.Fatalf("LastBackupClaim of a new volume: %v, %v", last, err)
	}
	c1, ok := claim(t0.Add(50 * time.Minute))
	if !ok || !c1.Previous.IsZero() {
		t.Fatalf("first claim: %v %+v", ok, c1)
	}
	if _, ok := claim(t0.Add(55 * time.Minute)); ok {
		t.Fatal("a second claim in the same interval succeeded")
	}
	if _, ok := claim(t0.Add(65 * time.Minute)); ok {
		t.Fatal("a claim in the next interval but 15 minutes after the last (less than half an interval) succeeded")
	}
	c2, ok := claim(t0.Add(81 * time.Minute))
	if !ok || !c2.Previous.Equal(c1.At) {
		t.Fatalf("claim in the next interval: %v %+v", ok, c2)
	}
	if last, err := m.LastBackupClaim(ctx); err != nil || !last.Equal(c2.At) {
		t.Fatalf("LastBackupClaim: %v, %v; want %v", last, err, c2.At)
	}
	// A failed backup gives its interval back.
	ok2(t, m.ReleaseBackupClaim(ctx, c2))
	c3, ok := claim(t0.Add(90 * time.Minute))
	if !ok || !c3.Previous.Equal(c1.At) {
		t.Fatalf("claim after a release: %v %+v", ok, c3)
	}
	// A release after another claim took over changes nothing.
	ok2(t, m.ReleaseBackupClaim(ctx, c2))
	if last, _ := m.LastBackupClaim(ctx); !last.Equal(c3.At) {
		t.Fatalf("a stale release moved the claim to %v", last)
	}
	ok2(t, m.ReleaseBackupClaim(ctx, c3))
	ok2(t, m.ReleaseBackupClaim(ctx, c1))
	if last, _ := m.LastBackupClaim(ctx); !last.IsZero() {
		t.Fatalf("releasing the first claim left %v", last)
	}
}

func ok2(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestClaimBackupRace: clients of one PostgreSQL database claiming the
// same interval at once: exactly one gets it, every time.
func TestClaimBackupRace(t *testing.T) {
	ms := pgClients(t, 4)
	const iv = time.Minute
	base0 := time.Now().Truncate(iv)
	for round := range 8 {
		at := base0.Add(time.Duration(round+1) * iv)
		var wg sync.WaitGroup
		var mu sync.Mutex
		won := 0
		for i, m := range ms {
			wg.Go(func() {
				_, ok, err := m.ClaimBackup(ctx, at.Add(time.Duration(i)*time.Second), iv)
				if err != nil {
					t.Error(err)
				}
				if ok {
					mu.Lock()
					won++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if won != 1 {
			t.Fatalf("round %d: %d clients claimed the interval, want 1", round, won)
		}
	}
}

// TestLoadSkipSlices: a load with SkipSlices hands out slice ids past the
// dumped volume's by that much, and the loaded volume is consistent.
func TestLoadSkipSlices(t *testing.T) {
	m := newTestMeta(t)
	richTree(t, m)
	dump := dumpOf(t, m, DumpOptions{})
	g0, err := m.SliceGuard(ctx)
	ok2(t, err)
	store := memkv.New()
	if _, err := Load(ctx, store, bytes.NewReader(dump), LoadOptions{SkipSlices: 1 << 40}); err != nil {
		t.Fatal(err)
	}
	l, err := Open(ctx, store, Options{})
	ok2(t, err)
	t.Cleanup(func() { _ = l.Close() })
	checkOnCleanup(t, l)
	g, err := l.SliceGuard(ctx)
	ok2(t, err)
	if g.Next != g0.Next+1<<40 {
		t.Fatalf("next slice after the load: %d, want %d + 2^40", g.Next, g0.Next)
	}
	id, err := l.NewSliceID(ctx)
	ok2(t, err)
	if base.SliceNumber(id) < g0.Next+1<<40 {
		t.Fatalf("a new slice got id %d, below the skipped range", id)
	}
}
