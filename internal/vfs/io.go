package vfs

import (
	"context"
	"errors"
	"slices"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/chunk"
	"github.com/cairnfs/cairn/internal/kv"
)

// accessMask converts open flags into an access mask (R=4, W=2).
func accessMask(flags int) uint32 {
	switch flags & syscall.O_ACCMODE {
	case syscall.O_WRONLY:
		return 2
	case syscall.O_RDWR:
		return 6
	}
	return 4
}

// Open opens ino with open(2) flags and returns a handle.
func (v *VFS) Open(ctx context.Context, c *base.Caller, ino base.Ino, flags int) (uint64, syscall.Errno) {
	t, real, e := v.resolve(ino)
	if e != 0 {
		return 0, e
	}
	var a base.Attr
	var first []base.Slice
	var firstOK bool
	var err error
	if t.ro {
		// A snapshot's data cannot change or be freed while the
		// snapshot exists: no hold to record.
		a, err = t.r.GetAttr(ctx, real)
	} else {
		// One transaction reads the attributes and, for a file, records
		// the open (a hold other clients' unlinks respect).
		a, first, firstOK, err = v.m.OpenFileChunk(ctx, ino)
	}
	if err != nil {
		return 0, v.errno("open", err)
	}
	h := &handle{ino: ino, t: t, flags: flags}
	if a.Type == base.TypeFile {
		var created bool
		h.f, created = v.openFileNew(t, ino, real)
		if created {
			// Fresh state, no other handle of this process: the length
			// (and first chunk's slices) the open just read are the
			// file's.
			h.f.setLength(0, int64(a.Length))
			if firstOK {
				h.f.setSlices(0, 0, first)
			}
		} else if !t.ro {
			// Close-to-open: another client may have changed the file
			// since this process cached its chunk maps.
			h.f.invalidate()
		}
		h.r = v.cs.NewReader()
	}
	fail := func(e syscall.Errno) (uint64, syscall.Errno) {
		if h.f != nil {
			_ = v.releaseFile(ctx, h.f)
		}
		return 0, e
	}
	writing := flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0
	if writing && (v.opts.ReadOnly || t.ro) {
		return fail(syscall.EROFS)
	}
	if a.Type == base.TypeDir && writing {
		return fail(syscall.EISDIR)
	}
	if !c.KernelChecked {
		if err := v.access(ctx, t, c, real, accessMask(flags)); err != nil {
			return fail(v.errno("open", err))
		}
	}
	if a.Type == base.TypeFile {
		if flags&syscall.O_TRUNC != 0 && a.Length > 0 {
			if _, e := v.SetAttr(ctx, c, ino, base.SetAttrRequest{Valid: base.SetSize}); e != 0 {
				_ = v.releaseFile(ctx, h.f)
				return 0, e
			}
		}
	}
	return v.newHandle(h), 0
}

// Create makes a regular file and opens it.
func (v *VFS) Create(ctx context.Context, c *base.Caller, parent base.Ino, name string, mode, umask uint32, flags int) (base.Ino, base.Attr, uint64, syscall.Errno) {
	if _, e := v.writable(parent); e != 0 {
		return 0, base.Attr{}, 0, e
	}
	if v.reserved(parent, name) {
		return 0, base.Attr{}, 0, syscall.EEXIST
	}
	ino, a, err := v.m.Create(ctx, c, parent, name, mode, umask)
	for try := 0; errors.Is(err, kv.ErrUnknownOutcome) && flags&syscall.O_EXCL == 0 && try < unknownRetries; try++ {
		// The connection broke after the commit was sent (a database
		// failover): the file may exist. Without O_EXCL, creating it
		// again opens it if it does (below), as open(2) would.
		v.log.Warn("create outcome unknown; creating again", "parent", parent, "name", name, "err", err)
		ino, a, err = v.m.Create(ctx, c, parent, name, mode, umask)
	}
	if errors.Is(err, base.ErrExist) && flags&syscall.O_EXCL == 0 {
		return v.openCreated(ctx, c, parent, name, flags)
	}
	if err != nil {
		return 0, base.Attr{}, 0, v.errno("create", err)
	}
	h := &handle{ino: ino, t: v.root, flags: flags, f: v.openFile(v.root, ino, ino), r: v.cs.NewReader()}
	return ino, a, v.newHandle(h), 0
}

// openCreated opens the file another client created under name between
// the caller's lookup (which found nothing) and its create: open(2) with
// O_CREAT and without O_EXCL opens an existing file, so both opens
// succeed on the same file. The caller's rights to the file were not
// checked by anyone (the kernel checked the create), so Open checks them.
// A directory gives EISDIR; another type keeps EEXIST (the kernel, which
// would follow a symbolic link, did not see one).
func (v *VFS) openCreated(ctx context.Context, c *base.Caller, parent base.Ino, name string, flags int) (base.Ino, base.Attr, uint64, syscall.Errno) {
	ino, a, e := v.Lookup(ctx, c, parent, name)
	if e != 0 {
		return 0, base.Attr{}, 0, e
	}
	switch a.Type {
	case base.TypeFile:
	case base.TypeDir:
		return 0, base.Attr{}, 0, syscall.EISDIR
	default:
		return 0, base.Attr{}, 0, syscall.EEXIST
	}
	checked := *c
	checked.KernelChecked = false
	fh, e := v.Open(ctx, &checked, ino, flags)
	if e != 0 {
		return 0, base.Attr{}, 0, e
	}
	if a, e = v.GetAttr(ctx, ino); e != 0 {
		_ = v.Release(ctx, fh)
		return 0, base.Attr{}, 0, e
	}
	return ino, a, fh, 0
}

// Read reads into buf at off and returns the number of bytes read (short
// at end of file).
func (v *VFS) Read(ctx context.Context, fh uint64, off int64, buf []byte) (int, syscall.Errno) {
	h := v.handle(fh)
	if h == nil || h.f == nil {
		return 0, syscall.EBADF
	}
	if h.flags&syscall.O_ACCMODE == syscall.O_WRONLY {
		return 0, syscall.EBADF
	}
	f := h.f
	ctx = readingFile(ctx, h.ino)
	if e := v.checkSnapshot(ctx, f.t, false); e != 0 {
		return 0, e
	}
	// Buffered writes are read from the buffer, over the committed
	// content: no commit first (chunk.Overlay).
	size, committed, parts, err := f.readPlan(ctx, off, len(buf))
	if err != nil {
		return 0, v.errno("read", err)
	}
	if off >= size {
		return 0, 0
	}
	done := 0
	for _, p := range parts {
		dst := buf[done : done+p.n]
		got, err := v.readPart(ctx, h, f, &p, dst)
		if err != nil {
			if e := v.checkSnapshot(ctx, f.t, true); e != 0 {
				// Deleted meanwhile: its blocks may be gone.
				return done, e
			}
			return done, v.errno("read", err)
		}
		if got < p.n {
			clear(dst[got:])
		}
		// Past the committed length (a read that buffered writes extend
		// the file for) the file is zeros under the buffered writes,
		// whatever old slices hold there.
		if pos := off + int64(done); committed < pos+int64(p.n) {
			clear(dst[max(committed-pos, 0):])
		}
		if err := p.ov.Apply(ctx, dst); err != nil {
			return done, v.errno("read", err)
		}
		done += p.n
	}
	if idx, from, upTo, ok := h.r.NextChunk(); ok && int64(idx)*base.ChunkSize < committed {
		// Read-ahead into the next chunk needs its slices: look them up
		// off the read's path.
		go func() {
			if slices, err := f.slices(context.WithoutCancel(ctx), idx); err == nil {
				h.r.PrefetchNext(slices, from, upTo)
			}
		}()
	}
	return done, 0
}

// readPart reads part p of a Read into dst. A block object missing from
// the store is most often one a compaction deleted after the read took the
// chunk's slice list: a compaction by this client invalidates its cached
// list but not the list a read in flight holds, and one by another client
// is seen only at the next open (close-to-open), while the replaced
// slices' objects go DeleteDelay after it. So a miss takes the list from
// the metadata again and reads again while it changes (up to
// staleListRetries times, p.slices updated); only a block missing under
// the current list is an error, logged as a bad block. A snapshot's lists
// never change (its deletion is Read's check).
func (v *VFS) readPart(ctx context.Context, h *handle, f *file, p *readPart, dst []byte) (int, error) {
	for try := 0; ; try++ {
		rctx := ctx
		retry := !f.t.ro && try < staleListRetries
		if retry {
			rctx = chunk.QuietMissing(ctx)
		}
		got, err := h.r.ReadChunk(rctx, p.index, p.slices, p.cpos, dst)
		if err == nil || !retry || !chunk.Missing(err) {
			return got, err
		}
		f.invalidateChunks(false, p.index)
		fresh, lerr := f.slices(ctx, p.index)
		if lerr != nil {
			return 0, errors.Join(err, lerr)
		}
		if slices.Equal(fresh, p.slices) {
			// The list stands: read once more, reporting the block.
			try = staleListRetries - 1
		}
		p.slices = fresh
	}
}

// staleListRetries bounds the reads of one part again with a fresh slice
// list: each needs a compaction of the chunk between the list's read and
// the block's, a delete delay apart.
const staleListRetries = 3

// Write buffers data at off. The data reaches the object store and the
// metadata on Flush (close), Fsync, memory pressure or the background
// flush. It holds the file's write lock only while buffering: it never
// waits for a flush (only for buffer memory, see chunk.Writer).
func (v *VFS) Write(ctx context.Context, fh uint64, off int64, data []byte) (int, syscall.Errno) {
	h := v.handle(fh)
	if h == nil || h.f == nil {
		return 0, syscall.EBADF
	}
	if h.flags&syscall.O_ACCMODE == syscall.O_RDONLY {
		return 0, syscall.EBADF
	}
	if v.opts.ReadOnly {
		return 0, syscall.EROFS
	}
	if off < 0 || off+int64(len(data)) > base.MaxFileSize {
		return 0, syscall.EFBIG
	}
	f := h.f
	f.wmu.Lock()
	defer f.wmu.Unlock()
	if h.flags&syscall.O_APPEND != 0 && v.opts.AppendAtEOF {
		// Where this process sees the end, committed and buffered
		// together (a background commit must not move a write from one
		// to the other between): the bytes are buffered there, but the
		// commit places them at the end the file has then, after what
		// other clients appended meanwhile (chunk.Writer.Append).
		err := f.w.HoldCommits(func() error {
			n, err := f.committedLength(ctx)
			off = max(n, f.w.Len())
			return err
		})
		if err != nil {
			return 0, v.errno("append", err)
		}
		if off+int64(len(data)) > base.MaxFileSize {
			return 0, syscall.EFBIG
		}
		if err := f.w.Append(ctx, off, data); err != nil {
			return 0, v.errno("append", err)
		}
		f.lastWrite.Store(time.Now().UnixNano())
		return len(data), 0
	}
	if err := f.w.Write(ctx, off, data); err != nil {
		return 0, v.errno("write", err)
	}
	f.lastWrite.Store(time.Now().UnixNano())
	return len(data), 0
}

// Flush is called on every close(2) of a descriptor: it commits the
// file's buffered writes so they are visible to other clients (close-to-
// open) and reports any write error to the closing process.
func (v *VFS) Flush(ctx context.Context, fh uint64) syscall.Errno {
	h := v.handle(fh)
	if h == nil {
		return syscall.EBADF
	}
	if h.f == nil {
		return 0
	}
	return v.errno("flush", h.f.flush(ctx))
}

// Fsync commits the file's buffered writes and makes them and the
// metadata durable.
func (v *VFS) Fsync(ctx context.Context, fh uint64) syscall.Errno {
	h := v.handle(fh)
	if h == nil {
		return syscall.EBADF
	}
	if h.f != nil {
		if err := h.f.flush(ctx); err != nil {
			return v.errno("fsync", err)
		}
	}
	return v.errno("fsync", v.syncAll(ctx))
}

// Release closes a handle.
func (v *VFS) Release(ctx context.Context, fh uint64) syscall.Errno {
	h := v.dropHandle(fh)
	if h == nil {
		return syscall.EBADF
	}
	if h.f != nil {
		return v.errno("release", v.releaseFile(ctx, h.f))
	}
	return 0
}

// fallocate(2) mode bits.
const (
	fallocKeepSize  = 0x01
	fallocPunchHole = 0x02
	fallocZeroRange = 0x10
)

// Fallocate supports allocation (mode 0 or KEEP_SIZE: Cairn stores no
// blocks for unwritten ranges, so only the size may change), PUNCH_HOLE and
// ZERO_RANGE (both write a zero slice over the range: no data is stored or
// copied). Other modes get EOPNOTSUPP.
func (v *VFS) Fallocate(ctx context.Context, c *base.Caller, fh uint64, mode uint32, off, length int64) syscall.Errno {
	h := v.handle(fh)
	if h == nil || h.f == nil {
		return syscall.EBADF
	}
	if mode&^(fallocKeepSize|fallocPunchHole|fallocZeroRange) != 0 ||
		mode&fallocPunchHole != 0 && mode&fallocKeepSize == 0 ||
		mode&fallocPunchHole != 0 && mode&fallocZeroRange != 0 {
		return syscall.EOPNOTSUPP
	}
	if off < 0 || length <= 0 {
		return syscall.EINVAL
	}
	if off+length > base.MaxFileSize {
		return syscall.EFBIG
	}
	if h.flags&syscall.O_ACCMODE == syscall.O_RDONLY {
		return syscall.EBADF
	}
	if v.opts.ReadOnly {
		return syscall.EROFS
	}
	f := h.f
	if err := f.flush(ctx); err != nil {
		return v.errno("fallocate", err)
	}
	a, e := v.GetAttr(ctx, h.ino)
	if e != 0 {
		return e
	}
	end := off + length
	if mode&(fallocPunchHole|fallocZeroRange) != 0 {
		zend := end
		if mode&fallocKeepSize != 0 && zend > int64(a.Length) {
			zend = int64(a.Length)
		}
		if e := v.zeroRange(ctx, f, off, zend); e != 0 {
			return e
		}
	}
	if mode&fallocKeepSize == 0 && uint64(end) > a.Length {
		_, e = v.SetAttr(ctx, base.RootCaller, h.ino, base.SetAttrRequest{Valid: base.SetSize, Size: uint64(end)})
		return e
	}
	return 0
}

// zeroRange makes [off, end) of the file read as zeros by adding zero
// slices, chunk by chunk.
func (v *VFS) zeroRange(ctx context.Context, f *file, off, end int64) syscall.Errno {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	// Writes that raced with the caller's flush commit before the zeros.
	if err := f.w.Flush(ctx); err != nil {
		return v.errno("fallocate", err)
	}
	now := time.Now().UnixNano()
	for pos := off; pos < end; {
		index := uint32(pos / base.ChunkSize)
		cpos := pos % base.ChunkSize
		n := min(end-pos, base.ChunkSize-cpos)
		s := base.Slice{Pos: uint32(cpos), ID: 0, Len: uint32(n)}
		if _, err := v.m.WriteSlice(ctx, f.ino, index, s, now); err != nil {
			return v.errno("fallocate", err)
		}
		pos += n
	}
	f.invalidate()
	return 0
}
