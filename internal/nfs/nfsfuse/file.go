package nfsfuse

import (
	"context"
	"syscall"

	"github.com/cairnfs/cairn/internal/nfs/proto"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// file is one FUSE handle of an open file.
type file struct {
	m  *mount
	of *openFile
}

var (
	_ fs.FileReader   = (*file)(nil)
	_ fs.FileWriter   = (*file)(nil)
	_ fs.FileFlusher  = (*file)(nil)
	_ fs.FileFsyncer  = (*file)(nil)
	_ fs.FileReleaser = (*file)(nil)
)

// opened counts a new FUSE handle of the file with handle fh and fileid
// ino and returns it.
func (m *mount) opened(fh []byte, ino uint64) *file {
	m.mu.Lock()
	defer m.mu.Unlock()
	of := m.open[ino]
	if of == nil {
		of = &openFile{fh: fh, ino: ino}
		m.open[ino] = of
	}
	of.opens++
	return &file{m: m, of: of}
}

func (f *file) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	got := 0
	for got < len(dest) {
		n := min(len(dest)-got, int(f.m.rtmax))
		k, err := f.m.c.SendRead(f.of.fh, uint64(off)+uint64(got), uint32(n))
		if err != nil {
			return nil, errno(err)
		}
		data, eof, err := k.Wait()
		if err != nil {
			return nil, errno(err)
		}
		got += copy(dest[got:], data)
		k.Release()
		if eof || len(data) == 0 {
			break
		}
	}
	return fuse.ReadResultData(dest[:got]), 0
}

func (f *file) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	done := 0
	for done < len(data) {
		n := min(len(data)-done, int(f.m.wtmax))
		res, err := f.m.c.Write(f.of.fh, uint64(off)+uint64(done), data[done:done+n], proto.Unstable)
		if err != nil {
			return 0, errno(err)
		}
		if res.Count == 0 || int(res.Count) > n {
			return 0, syscall.EIO
		}
		f.m.wrote(f.of, res.Committed, res.Verf)
		done += int(res.Count)
	}
	return uint32(done), 0
}

// wrote notes a WRITE's answer.
func (m *mount) wrote(of *openFile, committed uint32, verf [8]byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case of.unstable && verf != of.verf:
		of.lost = true
	case committed != proto.FileSync && !of.unstable:
		of.unstable, of.verf = true, verf
	}
}

// commit commits the file's unstable writes, if any.
func (m *mount) commit(of *openFile) syscall.Errno {
	m.mu.Lock()
	if !of.unstable {
		m.mu.Unlock()
		return 0
	}
	verf, lost := of.verf, of.lost
	of.unstable, of.lost = false, false
	m.mu.Unlock()
	got, err := m.c.Commit(of.fh)
	switch {
	case err != nil:
		m.mu.Lock()
		if !of.unstable {
			of.unstable, of.verf = true, verf
		}
		of.lost = of.lost || lost
		m.mu.Unlock()
		return errno(err)
	case lost || got != verf:
		// The server restarted since the writes: they may be gone, and
		// there is no copy here to send again.
		return syscall.EIO
	}
	return 0
}

// Flush is called at every close(2): the writes are committed, so the
// next open, here or at another client, sees them (close-to-open).
func (f *file) Flush(ctx context.Context) syscall.Errno { return f.m.commit(f.of) }

func (f *file) Fsync(ctx context.Context, flags uint32) syscall.Errno { return f.m.commit(f.of) }

// Release commits what a shared mapping wrote back since the last
// close, and at the last release removes the file if it was hidden when
// unlinked.
func (f *file) Release(ctx context.Context) syscall.Errno {
	e := f.m.commit(f.of)
	if ce := f.m.closed(f.of); e == 0 {
		e = ce
	}
	return e
}

// closed uncounts a FUSE handle of of; the last one removes the file if
// it was hidden.
func (m *mount) closed(of *openFile) syscall.Errno {
	m.mu.Lock()
	defer m.mu.Unlock()
	of.opens--
	if of.opens > 0 {
		return 0
	}
	delete(m.open, of.ino)
	if of.hiddenIn == nil {
		return 0
	}
	return errno(m.c.Remove(of.hiddenIn, of.hiddenAs))
}
