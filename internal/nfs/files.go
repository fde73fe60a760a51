package nfs

import (
	"context"
	"log/slog"
	"sync"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/vfs"
)

// fileCache keeps vfs handles of files that READ and WRITE use, since
// NFS has no open and close: a file is opened at its first READ or
// WRITE and closed after FileIdle without use, on REMOVE of its name,
// when the cache is full, and at shutdown. Closing commits buffered writes (vfs flushes
// on release). Handles are opened as root: the gateway checks each
// request's caller against the file's attributes before using them
// (mayIO).
type fileCache struct {
	v    *vfs.VFS
	idle time.Duration
	max  int
	log  *slog.Logger

	mu sync.Mutex
	m  map[base.Ino]*openFile
}

type openFile struct {
	ino      base.Ino
	fh       uint64
	writable bool
	refs     int       // requests using it; guarded by fileCache.mu
	last     time.Time // last use; guarded by fileCache.mu
	retired  bool      // out of the map: closed by the last put

	// The file's attributes as last known to READ and WRITE (attrCache),
	// guarded by fileCache.mu: read from the store at attrAt, under the
	// server's attribute epoch attrEpoch, with this gateway's writes
	// since applied. Zero attrAt: none.
	attr      base.Attr
	attrAt    time.Time
	attrEpoch uint64
}

func newFileCache(v *vfs.VFS, idle time.Duration, max int, log *slog.Logger) *fileCache {
	return &fileCache{v: v, idle: idle, max: max, log: log, m: map[base.Ino]*openFile{}}
}

// get returns an open handle of ino, writable if write is set; the
// caller returns it with put.
func (c *fileCache) get(ctx context.Context, ino base.Ino, write bool) (*openFile, syscall.Errno) {
	c.mu.Lock()
	if f := c.m[ino]; f != nil && (f.writable || !write) {
		f.refs++
		c.mu.Unlock()
		return f, 0
	}
	c.mu.Unlock()
	flags := syscall.O_RDONLY
	if write {
		flags = syscall.O_RDWR
	}
	fh, e := c.v.Open(ctx, base.RootCaller, ino, flags)
	if e != 0 {
		return nil, e
	}
	nf := &openFile{ino: ino, fh: fh, writable: write, refs: 1, last: time.Now()}
	var drop []*openFile
	c.mu.Lock()
	old := c.m[ino]
	switch {
	case old != nil && (old.writable || !write):
		// Another request opened it meanwhile: use theirs.
		old.refs++
		c.mu.Unlock()
		c.close(ctx, nf)
		return old, 0
	case old != nil:
		old.retired = true
		if old.refs == 0 {
			drop = append(drop, old)
		}
	}
	c.m[ino] = nf
	if len(c.m) > c.max {
		drop = append(drop, c.evictLocked(len(c.m)-c.max)...)
	}
	c.mu.Unlock()
	for _, f := range drop {
		c.close(ctx, f)
	}
	return nf, 0
}

// evictLocked takes up to n unused files, oldest first, out of the map.
func (c *fileCache) evictLocked(n int) []*openFile {
	var out []*openFile
	for n > 0 {
		var oldest *openFile
		for _, f := range c.m {
			if f.refs == 0 && (oldest == nil || f.last.Before(oldest.last)) {
				oldest = f
			}
		}
		if oldest == nil {
			break
		}
		delete(c.m, oldest.ino)
		out = append(out, oldest)
		n--
	}
	return out
}

// put returns a handle taken with get.
func (c *fileCache) put(ctx context.Context, f *openFile) {
	c.mu.Lock()
	f.refs--
	f.last = time.Now()
	done := f.retired && f.refs == 0
	c.mu.Unlock()
	if done {
		c.close(ctx, f)
	}
}

// release closes ino's handle (after the requests using it) and returns
// the error of the commit of its buffered writes when it closes at once.
func (c *fileCache) release(ctx context.Context, ino base.Ino) syscall.Errno {
	c.mu.Lock()
	f := c.m[ino]
	if f == nil {
		c.mu.Unlock()
		return 0
	}
	delete(c.m, ino)
	f.retired = true
	now := f.refs == 0
	c.mu.Unlock()
	if now {
		return c.close(ctx, f)
	}
	return 0
}

// expire closes the files unused for the idle time.
func (c *fileCache) expire(ctx context.Context, now time.Time) {
	var drop []*openFile
	c.mu.Lock()
	for ino, f := range c.m {
		if f.refs == 0 && now.Sub(f.last) >= c.idle {
			delete(c.m, ino)
			drop = append(drop, f)
		}
	}
	c.mu.Unlock()
	for _, f := range drop {
		c.close(ctx, f)
	}
}

// closeAll closes every cached file; requests must have finished.
func (c *fileCache) closeAll(ctx context.Context) error {
	c.mu.Lock()
	all := make([]*openFile, 0, len(c.m))
	for _, f := range c.m {
		all = append(all, f)
	}
	clear(c.m)
	c.mu.Unlock()
	var first error
	for _, f := range all {
		if e := c.close(ctx, f); e != 0 && first == nil {
			first = e
		}
	}
	return first
}

func (c *fileCache) close(ctx context.Context, f *openFile) syscall.Errno {
	e := c.v.Release(ctx, f.fh)
	if e != 0 {
		c.log.Warn("nfs: closing a cached file", "ino", f.ino, "errno", e)
	}
	return e
}

// cachedAttr returns the attributes kept with ino's open file, if they
// were read from the store under epoch at most ttl ago.
func (c *fileCache) cachedAttr(ino base.Ino, epoch uint64, ttl time.Duration, now time.Time) (base.Attr, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.m[ino]
	if f == nil || f.attrAt.IsZero() || f.attrEpoch != epoch || now.Sub(f.attrAt) >= ttl {
		return base.Attr{}, false
	}
	return f.attr, true
}

// keepAttr keeps a, read from the store at at under epoch, with ino's
// open file, if there is one and it keeps no later read. same tells
// that the file's length and times are those kept before (of any
// epoch): nothing changed the file's content meanwhile.
func (c *fileCache) keepAttr(ino base.Ino, a *base.Attr, at time.Time, epoch uint64) (same bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.m[ino]
	if f == nil {
		return false
	}
	k := &f.attr
	same = !f.attrAt.IsZero() && k.Length == a.Length && k.Mtime == a.Mtime && k.Ctime == a.Ctime
	if f.attrEpoch == epoch && f.attrAt.After(at) {
		return same
	}
	f.attr, f.attrAt, f.attrEpoch = *a, at, epoch
	return same
}

// wroteAttr applies a WRITE of this gateway to the attributes kept with
// ino's file, if they are of epoch: its end and its time (a, the kept
// attributes with the write applied). WRITEs of one file run
// concurrently: the length and times never go back.
func (c *fileCache) wroteAttr(ino base.Ino, a *base.Attr, epoch uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.m[ino]
	if f == nil || f.attrAt.IsZero() || f.attrEpoch != epoch {
		return
	}
	f.attr.Length = max(f.attr.Length, a.Length)
	f.attr.Mtime = max(f.attr.Mtime, a.Mtime)
	f.attr.Ctime = max(f.attr.Ctime, a.Ctime)
}

// peek returns ino's cached handle, if any, taken like get.
func (c *fileCache) peek(ino base.Ino) *openFile {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.m[ino]
	if f != nil {
		f.refs++
	}
	return f
}
