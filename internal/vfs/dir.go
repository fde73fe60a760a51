package vfs

import (
	"context"
	"sync"
	"syscall"

	"github.com/cairnfs/cairn/internal/base"
)

// dirBatch is how many entries a directory handle reads from meta at a
// time; a listing is streamed, never loaded whole.
const dirBatch = 512

// dirState streams a directory listing. Offsets handed to the front end
// are positions in the stream ("." is 1, ".." is 2, the n-th entry n+2);
// continuing from the offset of the last entry returned is cheap, other
// offsets restart the stream.
type dirState struct {
	mu     sync.Mutex
	t      *tree
	rino   base.Ino // the directory's number in t
	ino    base.Ino
	parent base.Ino
	buf    []base.Entry // entries buffered from meta
	bufOff uint64       // stream offset of buf[0]
	last   string       // name of the last entry fetched from meta
	eof    bool
	plus   bool
}

// DirEntry is one entry returned by ReadDir with the offset a caller
// passes back to continue after it.
type DirEntry struct {
	base.Entry
	Off uint64
}

// DirAttrs says which entries ReadDir passes with their attributes.
type DirAttrs uint8

const (
	// NoAttrs: names, numbers and types only (READDIR).
	NoAttrs DirAttrs = iota
	// EntryAttrs: the attributes of every entry but "." and "..". FUSE's
	// READDIRPLUS: the kernel ignores theirs, and on a shared volume each
	// is a read of the metadata store (two per listing, three round trips
	// with the listing's own).
	EntryAttrs
	// AllAttrs: every entry's attributes, "." and ".." too (NFS
	// READDIRPLUS, which returns them).
	AllAttrs
)

// OpenDir opens a directory for listing.
func (v *VFS) OpenDir(ctx context.Context, c *base.Caller, ino base.Ino) (uint64, syscall.Errno) {
	t, real, e := v.resolve(ino)
	if e != 0 {
		return 0, e
	}
	a, err := t.r.GetAttr(ctx, real)
	if err != nil {
		return 0, v.errno("opendir", err)
	}
	if a.Type != base.TypeDir {
		return 0, syscall.ENOTDIR
	}
	if !c.KernelChecked {
		if err := v.access(ctx, t, c, real, base.MayRead); err != nil {
			return 0, v.errno("opendir", err)
		}
	}
	t.outAttr(real, &a)
	d := &dirState{t: t, rino: real, ino: ino, parent: a.Parent, bufOff: 2}
	return v.newHandle(&handle{ino: ino, t: t, dir: d}), 0
}

// ReadDir passes the entries after offset off (0 = from the start) to fn
// until fn returns false (the caller's buffer is full: that entry is not
// consumed and comes first next time) or the directory ends. attrs says
// which entries carry their attributes.
func (v *VFS) ReadDir(ctx context.Context, c *base.Caller, fh uint64, off uint64, attrs DirAttrs, fn func(DirEntry) bool) syscall.Errno {
	h := v.handle(fh)
	if h == nil || h.dir == nil {
		return syscall.EBADF
	}
	d := h.dir
	d.mu.Lock()
	defer d.mu.Unlock()
	plus, dots := attrs != NoAttrs, attrs == AllAttrs
	add := func(e base.Entry, o uint64) bool {
		return fn(DirEntry{Entry: e, Off: o})
	}
	if off == 0 {
		dot := base.Entry{Name: ".", Ino: d.ino, Type: base.TypeDir}
		if dots {
			a, e := v.GetAttr(ctx, d.ino)
			if e != 0 {
				return e
			}
			dot.Attr = &a
		}
		if !add(dot, 1) {
			return 0
		}
		off = 1
	}
	if off == 1 {
		dd := base.Entry{Name: "..", Ino: d.parent, Type: base.TypeDir}
		if d.parent == 0 {
			dd.Ino = d.ino
		}
		if dots {
			a, e := v.GetAttr(ctx, dd.Ino)
			if e != 0 {
				a, e = v.GetAttr(ctx, d.ino)
				if e != 0 {
					return e
				}
			}
			dd.Attr = &a
		}
		if !add(dd, 2) {
			return 0
		}
		off = 2
	}
	// bufOff is the offset of the last entry consumed from the stream;
	// buf[0] has offset bufOff+1. Seeking backwards (rewinddir, seekdir,
	// a second listing through one handle) restarts the stream; seeking
	// forwards skips.
	if off < d.bufOff || d.plus != plus {
		d.buf, d.bufOff, d.last, d.eof, d.plus = nil, 2, "", false, plus
	}
	for d.bufOff < off {
		if len(d.buf) == 0 {
			if d.eof {
				return 0
			}
			if e := v.fill(ctx, c, d); e != 0 {
				return e
			}
			continue
		}
		d.buf = d.buf[1:]
		d.bufOff++
	}
	for {
		if len(d.buf) == 0 {
			if d.eof {
				break
			}
			if e := v.fill(ctx, c, d); e != 0 {
				return e
			}
			continue
		}
		e := d.buf[0]
		if plus && e.Attr != nil {
			v.overlay(e.Ino, e.Attr)
		}
		if !add(e, d.bufOff+1) {
			break
		}
		d.buf = d.buf[1:]
		d.bufOff++
	}
	return 0
}

// fill reads the next batch of entries. The root's listing leaves out
// .snapshots: the virtual directory is found by lookup only, and a real
// entry of that name is shadowed by it.
func (v *VFS) fill(ctx context.Context, c *base.Caller, d *dirState) syscall.Errno {
	ents, err := d.t.r.Readdir(ctx, c, d.rino, d.last, dirBatch, d.plus)
	if err != nil {
		return v.errno("readdir", err)
	}
	if len(ents) < dirBatch {
		d.eof = true
	}
	if len(ents) > 0 {
		d.last = ents[len(ents)-1].Name
	}
	hide := v.reserved(d.ino, SnapshotsDir)
	for _, e := range ents {
		if hide && e.Name == SnapshotsDir {
			continue
		}
		if e.Attr != nil {
			d.t.outAttr(e.Ino, e.Attr)
		}
		e.Ino = d.t.outIno(e.Ino)
		d.buf = append(d.buf, e)
	}
	return 0
}

// ReleaseDir closes a directory handle.
func (v *VFS) ReleaseDir(fh uint64) {
	v.dropHandle(fh)
}
