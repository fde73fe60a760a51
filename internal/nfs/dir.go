package nfs

import (
	"context"
	"log/slog"
	"sync"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/nfs/proto"
	"github.com/cairnfs/cairn/internal/vfs"
)

// Directory listings. A READDIR cookie is vfs's position in the listing
// stream (the offset of the last entry returned). A listing in progress
// keeps its vfs directory handle in dirCache under (directory, next
// cookie), so the next READDIR continues the stream where it stopped
// instead of reading the directory again from its start: a directory of
// any size lists with one batch of entries in memory. A cookie nobody
// parked (another gateway's, or expired) restarts the stream and skips to
// the position. The cookie verifier is the gateway's instance verifier: a
// cookie from before a restart gets NFS3ERR_BAD_COOKIE and the client
// lists again from the start.

// maxParkedDirs bounds the listings kept between READDIRs.
const maxParkedDirs = 256

type dirKey struct {
	ino    base.Ino
	cookie uint64
}

type parkedDir struct {
	fh   uint64
	last time.Time
}

type dirCache struct {
	v    *vfs.VFS
	idle time.Duration
	log  *slog.Logger

	mu sync.Mutex
	m  map[dirKey]parkedDir
}

func newDirCache(v *vfs.VFS, idle time.Duration, log *slog.Logger) *dirCache {
	return &dirCache{v: v, idle: idle, log: log, m: map[dirKey]parkedDir{}}
}

// take returns a directory handle positioned at cookie if one is parked,
// or opens one.
func (c *dirCache) take(ctx context.Context, ino base.Ino, cookie uint64) (uint64, syscall.Errno) {
	k := dirKey{ino, cookie}
	c.mu.Lock()
	p, ok := c.m[k]
	delete(c.m, k)
	c.mu.Unlock()
	if ok {
		return p.fh, 0
	}
	return c.v.OpenDir(ctx, base.RootCaller, ino)
}

// park keeps a handle for the READDIR that continues at cookie.
func (c *dirCache) park(ino base.Ino, cookie, fh uint64) {
	k := dirKey{ino, cookie}
	c.mu.Lock()
	var drop []uint64
	if old, ok := c.m[k]; ok {
		drop = append(drop, old.fh)
	}
	c.m[k] = parkedDir{fh: fh, last: time.Now()}
	for len(c.m) > maxParkedDirs {
		var ok bool
		var oldest dirKey
		for k, p := range c.m {
			if !ok || p.last.Before(c.m[oldest].last) {
				oldest, ok = k, true
			}
		}
		drop = append(drop, c.m[oldest].fh)
		delete(c.m, oldest)
	}
	c.mu.Unlock()
	for _, fh := range drop {
		c.v.ReleaseDir(fh)
	}
}

func (c *dirCache) expire(now time.Time) {
	var drop []uint64
	c.mu.Lock()
	for k, p := range c.m {
		if now.Sub(p.last) >= c.idle {
			drop = append(drop, p.fh)
			delete(c.m, k)
		}
	}
	c.mu.Unlock()
	for _, fh := range drop {
		c.v.ReleaseDir(fh)
	}
}

func (c *dirCache) closeAll() { c.expire(time.Now().Add(365 * 24 * time.Hour)) }

// Sizes used to keep a reply within the client's count.
const (
	readdirHeader = 4 + 4 + 84 + 8 + 4 + 4 // status, post_op_attr, verifier, list end, eof
	entryBase     = 4 + 8 + 4 + 8          // follows, fileid, name length, cookie
	entryPlusMore = 4 + 84 + 4 + 4 + handleSize
)

func nfsReadDir(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	return s.readDir(ctx, req, args, w, false)
}

func nfsReadDirPlus(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	return s.readDir(ctx, req, args, w, true)
}

func (s *Server) readDir(ctx context.Context, req *request, args *proto.Reader, w *proto.Writer, plus bool) bool {
	ino, st := s.fileHandle(ctx, args)
	cookie := args.Uint64()
	verf := args.Fixed(proto.CookieSize)
	dircount := args.Uint32()
	maxcount := dircount
	if plus {
		maxcount = args.Uint32()
	}
	if args.Err() != nil {
		return false
	}
	a, st := s.handleAttr(ctx, ino, st)
	switch {
	case st != proto.NFS3OK:
	case a.Type != base.TypeDir:
		st = proto.NFS3ErrNotDir
	case cookie != 0 && string(verf) != string(s.verf[:]):
		w.Uint32(proto.NFS3ErrBadCookie)
		s.putAttr(w, ino, &a)
		return true
	default:
		st = nfsStatus(s.v.Access(ctx, req.caller, ino, base.MayRead))
	}
	if st != proto.NFS3OK {
		w.Uint32(st)
		s.postOp(ctx, w, ino)
		return true
	}
	budget := int(min(maxcount, uint32(s.opts.MaxIO))) - readdirHeader
	var entries proto.Writer
	n := 0
	full := false
	last := cookie
	fh, e := s.dirs.take(ctx, ino, cookie)
	if e == 0 {
		attrs := vfs.NoAttrs
		if plus {
			attrs = vfs.AllAttrs
		}
		e = s.v.ReadDir(ctx, req.caller, fh, cookie, attrs, func(de vfs.DirEntry) bool {
			size := entryBase + (len(de.Name)+3)&^3
			if plus {
				size += entryPlusMore
			}
			if size > budget {
				full = true
				return false
			}
			budget -= size
			entries.Bool(true)
			entries.Uint64(s.fileid(de.Ino))
			entries.String(de.Name)
			entries.Uint64(de.Off)
			if plus {
				s.putAttr(&entries, de.Ino, de.Attr)
				if fh := s.handle(de.Ino); fh != nil {
					entries.Bool(true)
					entries.Opaque(fh)
				} else {
					entries.Bool(false)
				}
			}
			last = de.Off
			n++
			return true
		})
		if e != 0 || !full {
			s.v.ReleaseDir(fh)
		} else {
			s.dirs.park(ino, last, fh)
		}
	}
	if e == 0 && n == 0 && full {
		e = syscall.ERANGE
		w.Uint32(proto.NFS3ErrTooSmall)
		s.putAttr(w, ino, &a)
		return true
	}
	w.Uint32(nfsStatus(e))
	s.putAttr(w, ino, &a)
	if e != 0 {
		return true
	}
	w.Fixed(s.verf[:])
	w.B = append(w.B, entries.B...)
	w.Bool(false)
	w.Bool(!full)
	return true
}

// parked returns how many listings are parked.
func (c *dirCache) parked() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
