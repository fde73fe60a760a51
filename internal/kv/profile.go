package kv

import "strings"

// Profile is what a store says about itself: its engine, whether it is
// the only writer of its data, and which optional abilities it has. Meta
// chooses its accelerators from it once, when it opens (meta.Accelerators),
// and cairn status prints both.
type Profile struct {
	// Engine names the backend: "pebble", "postgres", "memkv".
	Engine string
	// SingleWriter: no other process writes the store while this one has
	// it open (embedded engines hold a lock; memkv lives in one process).
	SingleWriter bool
	// SnapshotIsolation: updates run under snapshot isolation, which
	// lets two transactions that each read what the other writes both
	// commit (a write skew) unless they write a key in common; the
	// caller materializes such conflicts (Txn, Write.Touch).
	SnapshotIsolation bool

	Observable    bool // Observable: commits can be observed
	Toucher       bool // Toucher: changes in memory ordered against transactions
	Starter       bool // Starter: updates begun with their first reads
	GuardedWriter bool // GuardedWriter: guarded writes in one round trip
	BlindWriter   bool // BlindWriter: reads and independent writes in one round trip
	LooseViewer   bool // LooseViewer: reads outside a transaction
	Notifier      bool // Notifier: notifications to other clients
	Exclusive     bool // Exclusive: updates that take their keys' locks first
}

// Profiler is implemented by a store that declares its profile; a wrapper
// (kv/counted) forwards the profile of the store it wraps.
type Profiler interface {
	Profile() Profile
}

// ProfileOf returns the profile s declares, or else the one its optional
// abilities show (a test's wrapper that declares nothing: only what its
// own methods offer). It is the one place that looks for abilities to
// decide which accelerators to run.
func ProfileOf(s Store) Profile {
	if p, ok := s.(Profiler); ok {
		return p.Profile()
	}
	var p Profile
	_, p.Observable = s.(Observable)
	p.SingleWriter = p.Observable
	p.Toucher = CanTouch(s)
	_, p.Starter = s.(Starter)
	_, p.GuardedWriter = s.(GuardedWriter)
	_, p.BlindWriter = s.(BlindWriter)
	_, p.LooseViewer = s.(LooseViewer)
	_, p.Notifier = s.(Notifier)
	_, p.Exclusive = s.(Exclusive)
	return p
}

// String lists the engine, its writers and its abilities, for status:
// "postgres: shared; started updates, guarded writes, ...".
func (p Profile) String() string {
	engine := p.Engine
	if engine == "" {
		engine = "unnamed engine"
	}
	who := "shared"
	if p.SingleWriter {
		who = "single writer"
	}
	if p.SnapshotIsolation {
		who += ", snapshot isolation"
	}
	var abilities []string
	for _, a := range []struct {
		on   bool
		name string
	}{
		{p.Observable, "observed commits"}, {p.Toucher, "touch"}, {p.Starter, "started updates"},
		{p.GuardedWriter, "guarded writes"}, {p.BlindWriter, "blind writes"},
		{p.LooseViewer, "loose views"}, {p.Notifier, "notifications"}, {p.Exclusive, "exclusive updates"},
	} {
		if a.on {
			abilities = append(abilities, a.name)
		}
	}
	if len(abilities) == 0 {
		return engine + ": " + who
	}
	return engine + ": " + who + "; " + strings.Join(abilities, ", ")
}
