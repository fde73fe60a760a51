// Package local is an object.Store kept in a local directory, one file per
// object: key "a/b" is the file DIR/a/b. It is the data store of the
// embedded deployment mode.
//
// Put writes an unnamed file (O_TMPFILE) in the target's directory and
// links it into place, or, where the file system lacks O_TMPFILE, a named
// temporary file it renames. A reader sees the old or the new object, never
// a mix, and a crash leaves either the old object or the new one (and, in
// the second way, perhaps a stray temporary file that is never listed as an
// object). Put does not fsync: it starts the
// object's writeback and notes it; the store implements object.Syncer,
// and Sync makes every object put before it durable by fsyncing the noted
// files and their directories, in one round shared by all concurrent
// callers (group commit). Only those: other files of the file system (a
// disk cache, another program's) are left to the kernel.
//
// The package owns only the layout of files below DIR. It must not hold any
// Cairn concept, and nothing else may write below DIR while a Store is open.
package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/internal/directio"
	"github.com/cairnfs/cairn/internal/object"
)

var (
	_ object.Store        = (*Store)(nil)
	_ object.Syncer       = (*Store)(nil)
	_ object.Spacer       = (*Store)(nil)
	_ object.StreamPutter = (*Store)(nil)
)

// tmpPrefix starts the name of every temporary file. It holds a byte that is
// not printable ASCII, so no temporary file name is ever a valid key segment
// and List can never mistake one (for example a leftover from a crash) for
// an object.
const tmpPrefix = "\u00b7tmp."

// Store is an object store in a directory. It is safe for concurrent use.
type Store struct {
	dir  string // absolute, cleaned
	sync group
	// unsynced are the paths of objects put since the round of Sync that
	// took the previous ones.
	mu       sync.Mutex
	unsynced map[string]struct{}
	// fsync syncs one file or directory; tests count or fail the calls.
	fsync func(path string) error
	// unnamed: Put writes unnamed files and links them (canLinkUnnamed).
	unnamed bool
	// direct writes cold objects (writeObject).
	direct directio.Writer
	// files are the objects read last, kept open (files.go).
	files *openFiles
	// dirsMu guards putting: for each directory below dir, the Puts in
	// flight that need it. Delete removes a directory it left empty only
	// when none does, under dirsMu: otherwise a Put whose directory a
	// concurrent Delete kept removing (between the Put's mkdir and its
	// open or link) could retry until it gave up.
	dirsMu  sync.Mutex
	putting map[string]int
}

// Open opens (creating it if needed) the directory store at dir. It fails if
// dir is not a directory or is not writable.
func Open(dir string) (*Store, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("object/local: open %q: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("object/local: create store directory: %w", err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("object/local: open store directory: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("object/local: %s is not a directory", abs)
	}
	// Probe with a real file: access(2) says nothing of read-only mounts
	// and everything is permitted to root.
	probe, err := os.CreateTemp(abs, tmpPrefix+"probe.*")
	if err != nil {
		return nil, fmt.Errorf("object/local: store directory %s is not writable: %w", abs, err)
	}
	probe.Close()
	os.Remove(probe.Name())
	s := &Store{dir: abs, unsynced: make(map[string]struct{}), fsync: fsyncPath, unnamed: canLinkUnnamed(abs),
		files: newOpenFiles(maxOpenFiles), putting: make(map[string]int)}
	s.sync.fn = s.syncPut
	return s, nil
}

// Close releases the store. It does not sync; call Sync first if the
// objects must be durable. Other methods must not be called after Close.
func (s *Store) Close() error {
	s.files.close()
	return nil
}

// Dir returns the store's absolute directory.
func (s *Store) Dir() string { return s.dir }

// String implements object.Store.
func (s *Store) String() string { return "file://" + s.dir }

// Space implements object.Spacer: the size and free space of the file
// system holding the store's directory (statfs(2)).
func (s *Store) Space(ctx context.Context) (object.Space, error) {
	sp, err := statfsSpace(s.dir)
	if err != nil {
		return object.Space{}, fmt.Errorf("local: statfs %s: %w", s.dir, err)
	}
	return sp, nil
}

func (s *Store) path(key string) string {
	return filepath.Join(s.dir, filepath.FromSlash(key))
}

// Put implements object.Store. The object is visible when Put returns and
// durable after a later Sync.
//
// Where the file system has O_TMPFILE (ext4, XFS, btrfs, tmpfs), the data
// is written to an unnamed file in the target's directory, which is then
// linked into place: one directory operation per object instead of the
// create and rename of a named temporary file, and a crash leaves no
// stray file (the kernel frees the unnamed inode). Elsewhere Put writes a
// named temporary file and renames it. Either way a reader sees the old
// object or the new one, never a mix. An object put with a context marked
// object.WithCold is written past the page cache where it can be
// (writeObject). See docs/design/0005.
func (s *Store) Put(ctx context.Context, key string, data []byte) error {
	cold := object.Cold(ctx)
	return s.put(ctx, key, func(f *os.File) error { return s.writeObject(f, data, cold) })
}

// PutStream implements object.StreamPutter: the stream is copied into the
// new file as Put writes data (an unnamed or temporary file, linked or
// renamed into place once r is at its end), so nothing of it is visible
// before it is whole, and a stream that fails leaves no file behind.
func (s *Store) PutStream(ctx context.Context, key string, r io.Reader) error {
	return s.put(ctx, key, func(f *os.File) error {
		if _, err := io.Copy(f, ctxReader{ctx, r}); err != nil {
			return err
		}
		startWriteback(f)
		return nil
	})
}

// ctxReader stops a copy when its context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// put makes the object key of the file write fills; see Put.
func (s *Store) put(ctx context.Context, key string, write func(f *os.File) error) error {
	if err := object.ValidKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	target := s.path(key)
	var err error
	s.files.forget(key)
	s.holdDirs(target, 1)
	defer s.holdDirs(target, -1)
	if s.unnamed {
		err = s.putUnnamed(target, write)
	} else {
		err = s.putRenamed(target, write)
	}
	s.files.forget(key)
	if err == nil {
		s.mu.Lock()
		s.unsynced[target] = struct{}{}
		s.mu.Unlock()
		return nil
	}
	if errors.Is(err, object.ErrConflict) {
		return fmt.Errorf("%w: put %q: a parent is an object", object.ErrConflict, key)
	}
	if errors.Is(err, syscall.EISDIR) || errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
		return fmt.Errorf("%w: put %q: objects exist below it", object.ErrConflict, key)
	}
	return fmt.Errorf("object/local: put %q: %w", key, err)
}

// putRenamed fills a named temporary file beside target with write and
// renames it into place.
func (s *Store) putRenamed(target string, write func(*os.File) error) error {
	var f *os.File
	err := s.inParent(target, func() (err error) {
		f, err = os.CreateTemp(filepath.Dir(target), tmpPrefix+"*")
		return err
	})
	if err != nil {
		return err
	}
	tmp := f.Name()
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, target)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// putUnnamed fills an unnamed file (O_TMPFILE) in target's directory with
// write and links it into place. A target that exists already is
// replaced: the file is linked under a temporary name and renamed over it.
func (s *Store) putUnnamed(target string, write func(*os.File) error) error {
	var f *os.File
	err := s.inParent(target, func() error {
		fd, err := openUnnamed(filepath.Dir(target))
		if err != nil {
			return &fs.PathError{Op: "open", Path: filepath.Dir(target), Err: err}
		}
		f = os.NewFile(uintptr(fd), target)
		return nil
	})
	if err != nil {
		return err
	}
	defer f.Close()
	if err := write(f); err != nil {
		return err
	}
	fd := int(f.Fd())
	exists := false
	err = s.inParent(target, func() error {
		err := linkFD(fd, target)
		if errors.Is(err, unix.EEXIST) {
			exists = true
			return nil
		}
		return pathErr("link", target, err)
	})
	if err != nil || !exists {
		return err
	}
	// Once linked the file can no longer be linked again after its name
	// is removed: no retry from here.
	tmp := filepath.Join(filepath.Dir(target), tmpPrefix+strconv.FormatUint(rand.Uint64(), 36))
	if err := linkFD(fd, tmp); err != nil {
		return pathErr("link", tmp, err)
	}
	if err := os.Rename(tmp, target); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// writeObject writes data to the new, empty file f and starts its
// writeback, so that Sync later finds little left to write. Cold data is
// written with direct I/O where it can be (directio.Writer: objects of 1
// MiB or more in an aligned buffer, all but their unaligned tail): the
// kernel then moves it from the buffer to the device without copying it
// into the page cache, and no writeback thread copies it out again; a
// sequential writer's blocks cost about a third less CPU (design 0005,
// "Sequential writes: fewer copies").
func (s *Store) writeObject(f *os.File, data []byte, cold bool) error {
	var err error
	if cold {
		_, err = s.direct.WriteAt(f, data, 0)
	} else {
		_, err = f.Write(data)
	}
	if err != nil {
		return err
	}
	startWriteback(f)
	return nil
}

// pathErr wraps a system call's error, nil for nil.
func pathErr(op, path string, err error) error {
	if err == nil {
		return nil
	}
	return &fs.PathError{Op: op, Path: path, Err: err}
}

// inParent runs op, which makes a file in target's directory, and makes
// that directory (and its parents) when op finds it missing. A Delete
// removes the directories it leaves empty, unless a Put in flight holds
// them (holdDirs): one that ran just before this Put's hold can remove
// the directory before op runs (and, for an unnamed file, before it is
// linked), so op is retried. It returns object.ErrConflict when a parent of
// target is an object.
func (s *Store) inParent(target string, op func() error) error {
	var err error
	for range 100 {
		if err = op(); err == nil {
			return nil
		}
		// EEXIST and ENOTDIR can also come from that race, and EPERM:
		// ext4 refuses an unnamed file in a directory already removed.
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.EEXIST) && !errors.Is(err, syscall.ENOTDIR) &&
			!errors.Is(err, syscall.EPERM) {
			return err
		}
		if s.fileAbove(target) {
			return object.ErrConflict
		}
		if mkErr := os.MkdirAll(filepath.Dir(target), 0o700); mkErr != nil && !errors.Is(mkErr, fs.ErrNotExist) &&
			!errors.Is(mkErr, syscall.EEXIST) && !errors.Is(mkErr, syscall.ENOTDIR) {
			return mkErr
		}
	}
	return err
}

// canLinkUnnamed reports whether Put can use unnamed files in dir: the file
// system supports O_TMPFILE and /proc/self/fd links them.
func canLinkUnnamed(dir string) bool {
	fd, err := openUnnamed(dir)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	probe := filepath.Join(dir, tmpPrefix+"probe."+strconv.FormatUint(rand.Uint64(), 36))
	if linkFD(fd, probe) != nil {
		return false
	}
	return os.Remove(probe) == nil
}

// linkFD gives the unnamed file open as fd the name path (linkat(2) of
// /proc/self/fd/N, which needs no privilege, unlike AT_EMPTY_PATH).
func linkFD(fd int, path string) error {
	return unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), unix.AT_FDCWD, path, unix.AT_SYMLINK_FOLLOW)
}

// fileAbove reports whether a proper parent of path below the store
// directory exists and is not a directory.
func (s *Store) fileAbove(path string) bool {
	for dir := range s.dirsAbove(path) {
		if fi, err := os.Lstat(dir); err == nil && !fi.IsDir() {
			return true
		}
	}
	return false
}

// notFound reports whether err means the key names no object: missing, a
// parent is a file, or the path is a directory.
func notFound(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.EISDIR)
}

// Get implements object.Store with pread(2); the file is immutable once
// renamed into place, so a concurrent Put cannot tear the read. The files
// of the objects read last stay open (files.go).
func (s *Store) Get(ctx context.Context, key string, off, length int64) ([]byte, error) {
	if err := object.ValidKey(key); err != nil {
		return nil, err
	}
	if off < 0 {
		return nil, fmt.Errorf("object/local: get %q: negative offset %d", key, off)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	o, err := s.files.get(key, func() (*os.File, int64, error) { return openObject(s.path(key)) })
	if err != nil {
		if notFound(err) || errors.Is(err, errNotRegular) {
			return nil, fmt.Errorf("get %q: %w", key, object.ErrNotFound)
		}
		return nil, fmt.Errorf("object/local: get %q: %w", key, err)
	}
	defer s.files.put(o)
	n := max(o.size-off, 0)
	if length >= 0 {
		n = min(n, length)
	}
	buf := make([]byte, n)
	got, err := o.f.ReadAt(buf, off)
	if err != nil && !(errors.Is(err, io.EOF) && int64(got) == n) {
		return nil, fmt.Errorf("object/local: get %q: %w", key, err)
	}
	return buf, nil
}

var errNotRegular = errors.New("not a regular file")

// openObject opens the object file at path for reading and returns its size.
func openObject(path string) (*os.File, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = errNotRegular
	}
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, fi.Size(), nil
}

// Head implements object.Store.
func (s *Store) Head(ctx context.Context, key string) (object.Info, error) {
	if err := object.ValidKey(key); err != nil {
		return object.Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return object.Info{}, err
	}
	fi, err := os.Lstat(s.path(key))
	if err != nil && !notFound(err) {
		return object.Info{}, fmt.Errorf("object/local: head %q: %w", key, err)
	}
	if err != nil || !fi.Mode().IsRegular() {
		return object.Info{}, fmt.Errorf("head %q: %w", key, object.ErrNotFound)
	}
	return object.Info{Key: key, Size: fi.Size()}, nil
}

// Delete implements object.Store. It also removes the parent directories the
// deletion left empty, so that a later Put of a key that was a directory
// ("a" after "a/b" is gone) does not conflict.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := object.ValidKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	p := s.path(key)
	s.files.forget(key)
	defer s.files.forget(key)
	// unlink(2), not os.Remove: that would also remove an empty directory.
	if err := syscall.Unlink(p); err != nil {
		if notFound(err) || errors.Is(err, syscall.EPERM) && isDir(p) {
			return nil
		}
		return fmt.Errorf("object/local: delete %q: %w", key, &fs.PathError{Op: "unlink", Path: p, Err: err})
	}
	s.dirsMu.Lock()
	defer s.dirsMu.Unlock()
	for dir := range s.dirsAbove(p) {
		if s.putting[dir] > 0 || syscall.Rmdir(dir) != nil {
			break // a Put needs it, or not empty (or already gone): stop
		}
	}
	return nil
}

// dirsAbove yields the directories above path below the store's, the
// nearest first.
func (s *Store) dirsAbove(path string) iter.Seq[string] {
	return func(yield func(string) bool) {
		for dir := filepath.Dir(path); dir != s.dir && strings.HasPrefix(dir, s.dir); dir = filepath.Dir(dir) {
			if !yield(dir) {
				return
			}
		}
	}
}

// holdDirs adds n to the Puts in flight that need each directory above
// path, up to the store's.
func (s *Store) holdDirs(path string, n int) {
	s.dirsMu.Lock()
	defer s.dirsMu.Unlock()
	for dir := range s.dirsAbove(path) {
		if s.putting[dir] += n; s.putting[dir] == 0 {
			delete(s.putting, dir)
		}
	}
}

func isDir(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.IsDir()
}

// List implements object.Store. It reads only the directories that can hold
// keys with the prefix, one at a time, so a listing of a huge store costs
// memory proportional to the largest directory, not to the store.
func (s *Store) List(ctx context.Context, prefix string, fn func(object.Info) bool) error {
	// Start in the deepest directory the prefix names in full.
	base := prefix[:strings.LastIndexByte(prefix, '/')+1]
	if base != "" && object.ValidKey(strings.TrimSuffix(base, "/")) != nil {
		return nil // no valid key lies below an invalid path
	}
	_, err := s.walk(ctx, base, prefix, fn)
	return err
}

// walk lists directory dirKey ("" or ending in "/"), calling fn for objects
// with the prefix. It returns false when fn asked to stop.
func (s *Store) walk(ctx context.Context, dirKey, prefix string, fn func(object.Info) bool) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	entries, err := os.ReadDir(s.path(dirKey))
	if err != nil {
		if notFound(err) {
			return true, nil // removed under us, or prefix names no directory
		}
		return false, fmt.Errorf("object/local: list %q: %w", prefix, err)
	}
	// Key order is not directory order: "a.c" < "a/b" because '.' < '/'.
	// Ordering a directory by name+"/" restores key order exactly.
	type entry struct {
		key string // full key; directories end in "/"
		de  fs.DirEntry
	}
	list := make([]entry, 0, len(entries))
	for _, de := range entries {
		name := de.Name()
		if object.ValidKey(name) != nil || strings.Contains(name, "/") {
			continue // temporary files, and anything else that is no key
		}
		k := dirKey + name
		switch {
		case de.IsDir():
			k += "/"
			if !strings.HasPrefix(k, prefix) && !strings.HasPrefix(prefix, k) {
				continue
			}
		case de.Type().IsRegular():
			if !strings.HasPrefix(k, prefix) {
				continue
			}
		default:
			continue
		}
		list = append(list, entry{k, de})
	}
	slices.SortFunc(list, func(a, b entry) int { return strings.Compare(a.key, b.key) })
	for _, e := range list {
		if e.de.IsDir() {
			if more, err := s.walk(ctx, e.key, prefix, fn); !more || err != nil {
				return more, err
			}
			continue
		}
		fi, err := e.de.Info()
		if err != nil {
			if notFound(err) {
				continue // deleted since ReadDir
			}
			return false, fmt.Errorf("object/local: list %q: %w", prefix, err)
		}
		if !fn(object.Info{Key: e.key, Size: fi.Size()}) {
			return false, nil
		}
	}
	return true, nil
}

// CopyFrom implements object.Copier: an object of another local store on
// the same file system becomes a hard link to its file. Objects never
// change once written, so two names may share one file, and deleting one
// leaves the other. The file's data is as durable as the source made it;
// the new name is durable after a later Sync, as a Put's.
func (s *Store) CopyFrom(ctx context.Context, src object.Store, key string) (bool, error) {
	o, ok := object.Base(src).(*Store)
	if !ok || o == s {
		return false, nil
	}
	var a, b unix.Stat_t
	if unix.Stat(s.dir, &a) != nil || unix.Stat(o.dir, &b) != nil || a.Dev != b.Dev {
		return false, nil
	}
	if err := object.ValidKey(key); err != nil {
		return true, err
	}
	if err := ctx.Err(); err != nil {
		return true, err
	}
	from, target := o.path(key), s.path(key)
	if _, err := os.Lstat(from); errors.Is(err, fs.ErrNotExist) {
		return true, fmt.Errorf("object/local: copy %q from %s: %w", key, o.dir, object.ErrNotFound)
	} else if err != nil {
		return true, err
	}
	s.files.forget(key)
	s.holdDirs(target, 1)
	defer s.holdDirs(target, -1)
	err := s.inParent(target, func() error {
		err := os.Link(from, target)
		if errors.Is(err, fs.ErrExist) {
			if _, serr := os.Lstat(target); serr == nil {
				return nil // made meanwhile: the same bytes
			}
		}
		return err
	})
	if err != nil {
		return true, fmt.Errorf("object/local: link %q from %s: %w", key, o.dir, err)
	}
	s.mu.Lock()
	s.unsynced[target] = struct{}{}
	s.mu.Unlock()
	return true, nil
}
