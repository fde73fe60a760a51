package meta

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// Contended directories (design/0002-shared-mode.md, "Many clients
// changing one directory").
//
// Every change of a directory's entries writes the directory's attribute
// (its times, and the conflicts the leases and rmdir rely on). When
// clients on several hosts create or remove entries of one directory at
// once, their transactions all write that one record, and under snapshot
// isolation all but one abort and run again, then again: sixteen clients
// creating files in one directory managed fewer creates a second together
// than one alone. A change of a directory's entries that had to run again
// marks the directory contended on this client for contendedFor; while it
// is, the changes of its entries ask the store to queue them on the
// directory (kv.Serialize: on PostgreSQL an advisory lock taken before the
// transaction begins), so that they follow one another instead of
// aborting one another. Clients that have not yet met the contention
// still conflict with the queued ones, run again, and join the queue. The
// record written, and so what conflicts with what, does not change: the
// queue is only a way to lose fewer attempts.
const contendedFor = 10 * time.Second

// contention is the set of directories contended on this client, each
// with when it stops being so. A store with a single writer (the embedded
// engines) has no other clients to contend with: off.
type contention struct {
	off   bool
	n     atomic.Int32 // len(until), for has without the lock
	mu    sync.Mutex
	until map[base.Ino]time.Time
	// marked counts the directories that became contended, queued the
	// updates queued on one (ContentionStats).
	marked, queued atomic.Int64
}

// ContentionStats counts the work of contended directories (shared
// engines).
type ContentionStats struct {
	Directories int64 `json:"directories"` // contended on this client now
	Marked      int64 `json:"marked"`      // times a directory became contended: a change of its entries ran again
	Queued      int64 `json:"queued"`      // changes of a contended directory's entries queued in the store
}

// ContentionStats returns the counters; ok is false on an embedded engine,
// whose updates are not queued.
func (m *Meta) ContentionStats() (s ContentionStats, ok bool) {
	if m.contention.off {
		return s, false
	}
	c := &m.contention
	now := time.Now()
	c.mu.Lock()
	for _, t := range c.until {
		if !now.After(t) {
			s.Directories++
		}
	}
	c.mu.Unlock()
	s.Marked, s.Queued = c.marked.Load(), c.queued.Load()
	return s, true
}

// mark makes dir contended for contendedFor from now.
func (c *contention) mark(dir base.Ino) {
	if c.off {
		return
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.until == nil {
		c.until = make(map[base.Ino]time.Time)
	}
	if len(c.until) >= 1024 {
		for d, t := range c.until {
			if now.After(t) {
				delete(c.until, d)
			}
		}
	}
	if t, ok := c.until[dir]; !ok || now.After(t) {
		c.marked.Add(1)
	}
	c.until[dir] = now.Add(contendedFor)
	c.n.Store(int32(len(c.until)))
}

// has reports whether dir is contended. Every change of entries and
// every lookup on a shared engine asks: with no directory contended, it
// takes no lock.
func (c *contention) has(dir base.Ino) bool {
	if c.n.Load() == 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.until[dir]
	if ok && time.Now().After(t) {
		delete(c.until, dir)
		c.n.Store(int32(len(c.until)))
		return false
	}
	return ok
}

type entriesOfKey struct{}

// changingEntries returns ctx marked for an update that changes the
// entries of directory dir (and so writes its attribute).
func changingEntries(ctx context.Context, dir base.Ino) context.Context {
	return context.WithValue(ctx, entriesOfKey{}, dir)
}

// entryChange is an update that changes the entries of a directory
// (changingEntries), across its attempts.
type entryChange struct {
	c    *contention
	dir  base.Ino
	ok   bool // the update changes dir's entries
	runs int
}

// queueOnDir returns ctx for the store, marked by kv.Serialize with the
// directory's attribute if the update changes the entries of a contended
// directory, and the change, whose attempt the update calls at the start
// of each of its attempts.
func (m *Meta) queueOnDir(ctx context.Context) (context.Context, *entryChange) {
	ch := &entryChange{c: &m.contention}
	ch.dir, ch.ok = ctx.Value(entriesOfKey{}).(base.Ino)
	if ch.ok && m.contention.has(ch.dir) {
		ctx = kv.Serialize(ctx, attrKey(ch.dir))
		m.contention.queued.Add(1)
	}
	return ctx, ch
}

// attempt notes an attempt of the update: one that runs again marks its
// directory contended.
func (ch *entryChange) attempt() {
	if ch.runs++; ch.runs > 1 && ch.ok {
		ch.c.mark(ch.dir)
	}
}
