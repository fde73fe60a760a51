package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

// Sync implements object.Syncer: every object whose Put returned before Sync
// was called is durable when Sync returns nil. Concurrent callers share one
// round; a caller that arrives while a round is in flight waits for the
// next round, which starts after it arrived. If ctx ends first Sync returns
// ctx.Err() and the round completes in the background.
//
// A round fsyncs the objects put since the previous round took its own,
// then the directories holding them up to the store's: their names (and
// directories made for them) are durable too. With nothing put, a round
// costs nothing: a client's once-a-second background sync is free while
// it only reads. Files of the file system that are not objects put here
// are not flushed (syncfs(2) would write back everything dirty on the file
// system: a disk cache sharing it, or another program's writes).
func (s *Store) Sync(ctx context.Context) error {
	return s.sync.do(ctx)
}

// syncWorkers bounds the fsyncs a round runs at once.
const syncWorkers = 8

// syncPut is one round of Sync.
func (s *Store) syncPut() error {
	s.mu.Lock()
	files := s.unsynced
	s.unsynced = make(map[string]struct{})
	s.mu.Unlock()
	if len(files) == 0 {
		return nil
	}
	dirs := make(map[string]struct{})
	for p := range files {
		for d := filepath.Dir(p); ; d = filepath.Dir(d) {
			if _, seen := dirs[d]; seen {
				break
			}
			dirs[d] = struct{}{}
			if len(d) <= len(s.dir) { // the store's directory, the last
				break
			}
		}
	}
	err := s.fsyncAll(files)
	if err == nil {
		err = s.fsyncAll(dirs)
	}
	if err != nil {
		// Not known durable: the next round tries them again.
		s.mu.Lock()
		for p := range files {
			s.unsynced[p] = struct{}{}
		}
		s.mu.Unlock()
	}
	return err
}

// fsyncAll fsyncs paths, syncWorkers at a time, and returns the first
// error. A path gone meanwhile (an object deleted after its Put) is fine.
func (s *Store) fsyncAll(paths map[string]struct{}) error {
	work := make(chan string)
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	for range min(syncWorkers, len(paths)) {
		wg.Go(func() {
			for p := range work {
				if err := s.fsync(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		})
	}
	for p := range paths {
		work <- p
	}
	close(work)
	wg.Wait()
	return first
}

// fsyncPath opens path (a file or a directory) and fsyncs it.
func fsyncPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("object/local: fsync %s: %w", path, err)
	}
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
