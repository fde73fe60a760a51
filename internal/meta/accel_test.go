package meta

import (
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/kv"
)

// TestChooseAccelerators: the table of which accelerators run on which
// engine profile with which options.
func TestChooseAccelerators(t *testing.T) {
	embedded := kv.Profile{Engine: "pebble", SingleWriter: true, Observable: true, Toucher: true}
	server := kv.Profile{Engine: "postgres", Starter: true, GuardedWriter: true, BlindWriter: true, LooseViewer: true, Notifier: true}
	plain := kv.Profile{Engine: "test"}
	for _, c := range []struct {
		name string
		p    kv.Profile
		o    Options
		want Accelerators
	}{
		{"embedded", embedded, Options{}, Accelerators{LatestCache: true}},
		{"embedded, memory holds", embedded, Options{MemoryHolds: true}, Accelerators{LatestCache: true, MemoryHolds: true}},
		{"embedded read-only", embedded, Options{MemoryHolds: true, ReadOnly: true}, Accelerators{LatestCache: true}},
		{"embedded without the cache", embedded, Options{LatestCacheEntries: -1}, Accelerators{GroupCommit: true, BlindOpens: true}},
		{"server", server, Options{}, Accelerators{GroupCommit: true, StartAhead: true, Leases: true, BlindOpens: true}},
		{"server, listing", server, Options{ListingTTL: time.Second}, Accelerators{ListingCache: time.Second, GroupCommit: true, StartAhead: true, Leases: true, BlindOpens: true}},
		{"server, no leases, no group, no blind opens", server, Options{NoLeases: true, NoGroupCommit: true, NoBlindOpens: true}, Accelerators{StartAhead: true}},
		{"server read-only", server, Options{ReadOnly: true}, Accelerators{GroupCommit: true}},
		{"plain", plain, Options{}, Accelerators{GroupCommit: true, BlindOpens: true}},
	} {
		if got := chooseAccelerators(c.p, c.o); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

// TestAcceleratorsOfOpen: Open runs what the profile of its store
// chooses, and says so.
func TestAcceleratorsOfOpen(t *testing.T) {
	m := newTestMeta(t)
	a := m.Accelerators()
	if a.LatestCache != (m.lc != nil) || a.GroupCommit != (m.group != nil) || a.Leases != (m.leases != nil) ||
		a.StartAhead != (m.ahead != nil) || (a.ListingCache > 0) != (m.listings != nil) || a.MemoryHolds != (m.holdToucher != nil) {
		t.Fatalf("Accelerators() = %+v does not say what runs (latest %v, group %v, leases %v, ahead %v, listings %v, holds %v)",
			a, m.lc != nil, m.group != nil, m.leases != nil, m.ahead != nil, m.listings != nil, m.holdToucher != nil)
	}
	if m.Profile().Engine == "" {
		t.Errorf("profile %+v names no engine", m.Profile())
	}
	t.Logf("profile %v; accelerators %v", m.Profile(), a)
}
