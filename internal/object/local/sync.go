package local

import (
	"context"
	"sync"
)

// Sync implements object.Syncer: every object whose Put returned before Sync
// was called is durable when Sync returns nil. Concurrent callers share one
// syncfs(2) of the file system holding the store directory; a caller that
// arrives while a round is in flight waits for the next round, which starts
// after it arrived. If ctx ends first Sync returns ctx.Err() and the round
// completes in the background.
//
// A round finds out first whether any Put or Delete finished since the
// last round that synced; if none did it has nothing to do. Callers such
// as the client's once-a-second background sync then cost nothing while
// nothing is written, and do not flush the unrelated files of the same
// file system.
//
// The store directory must not span file systems (no mount points below it):
// only the file system of the directory itself is synced.
func (s *Store) Sync(ctx context.Context) error {
	return s.sync.do(ctx)
}

func (s *Store) syncfs() error {
	// Every change counted here finished before this load, so before the
	// syncfs below: a later round that finds the same count has nothing
	// new to make durable.
	n := s.changes.Load()
	if n == s.synced.Load() {
		return nil
	}
	if err := s.syncFS(s.root); err != nil {
		return err
	}
	s.synced.Store(n)
	return nil
}

// group runs fn in rounds: callers join the next round that has not started,
// and one goroutine runs rounds back to back while any caller waits.
type group struct {
	fn      func() error
	mu      sync.Mutex
	running bool   // a goroutine is in run
	next    *round // round not yet started, nil if nobody waits
}

type round struct {
	done chan struct{}
	err  error
}

func (g *group) do(ctx context.Context) error {
	g.mu.Lock()
	if g.next == nil {
		g.next = &round{done: make(chan struct{})}
	}
	r := g.next
	if !g.running {
		g.running = true
		go g.run()
	}
	g.mu.Unlock()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *group) run() {
	g.mu.Lock()
	for g.next != nil {
		r := g.next
		g.next = nil
		g.mu.Unlock()
		r.err = g.fn()
		close(r.done)
		g.mu.Lock()
	}
	g.running = false
	g.mu.Unlock()
}
