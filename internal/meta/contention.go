package meta

import (
	"context"
	"sync"
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
// with when it stops being so.
type contention struct {
	mu    sync.Mutex
	until map[base.Ino]time.Time
}

// mark makes dir contended for contendedFor from now.
func (c *contention) mark(dir base.Ino) {
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
	c.until[dir] = now.Add(contendedFor)
}

// has reports whether dir is contended.
func (c *contention) has(dir base.Ino) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.until[dir]
	if ok && time.Now().After(t) {
		delete(c.until, dir)
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

// queueOnDir returns ctx for the store: marked by kv.Serialize with
// dir's attribute if the update changes the entries of a directory dir
// (changingEntries) that is contended. ok reports whether it changes one.
func (m *Meta) queueOnDir(ctx context.Context) (_ context.Context, dir base.Ino, ok bool) {
	dir, ok = ctx.Value(entriesOfKey{}).(base.Ino)
	if ok && m.contention.has(dir) {
		ctx = kv.Serialize(ctx, attrKey(dir))
	}
	return ctx, dir, ok
}
