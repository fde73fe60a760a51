// Package object defines the blob-store interface that file content is kept
// in, independent of any Cairn concept: a store holds immutable objects named
// by string keys. It imports nothing of Cairn's.
//
// Backends: object/local (a directory), object/mem (tests), object/faulty
// (fault injection around another store), object/s3 (S3-compatible stores). Every backend
// passes object/objtest.Run.
package object

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
)

// ErrNotFound is returned when an object does not exist.
var ErrNotFound = errors.New("object: not found")

// ErrInvalidKey is returned (wrapped, with the reason) by every Store method
// given a key that breaks the key rules; see ValidKey.
var ErrInvalidKey = errors.New("object: invalid key")

// ErrUnavailable is wrapped by the errors of a store that could not reach
// its server, or kept getting transient failures from it, for as long as
// its outage policy allows (a network store's OutageTimeout): the store
// already retried, and a caller should not retry on its own but report
// the failure (vfs: EIO).
var ErrUnavailable = errors.New("object: store unavailable")

// ErrConflict is returned by Put when the key and an existing key nest, that
// is one is a "directory" of the other ("a" and "a/b"). See Store.
var ErrConflict = errors.New("object: key nests with an existing key")

// Key limits. MaxKeyLen is S3's limit; MaxSegmentLen is the usual file-name
// limit of local file systems.
const (
	MaxKeyLen     = 1024
	MaxSegmentLen = 255
)

// Info describes a stored object.
type Info struct {
	Key  string
	Size int64
}

// Store is a blob store. It is safe for concurrent use.
//
// Keys are slash-separated relative paths of printable ASCII (0x20-0x7E)
// without "." or ".." segments, leading "/" or empty segments, at most
// MaxKeyLen bytes with segments of at most MaxSegmentLen bytes; ValidKey
// checks them and every method rejects other keys with ErrInvalidKey.
//
// Keys should not nest ("a" and "a/b" both); Cairn never makes them. A Put
// that would make them fails with ErrConflict (a directory store could not
// hold both), unless the store has a method AllowsNesting() bool that
// reports true: such a store (S3, where checking would cost a LIST per Put)
// does not check, and the Put may succeed or fail with ErrConflict. Either
// way the existing object is unchanged.
//
// Objects are written whole and never modified in place: Put of an existing
// key replaces it atomically (a reader sees the old or the new object, never
// a mix).
type Store interface {
	// Put stores data under key. When Put returns nil the object is visible
	// to every later Get, Head and List. It is durable (survives a machine
	// crash) when Put returns, unless the store implements Syncer: then it
	// is durable only after a Sync called after Put returned. The store does
	// not retain data.
	Put(ctx context.Context, key string, data []byte) error
	// Get reads length bytes at offset off of the object; length < 0 reads to
	// the end. Reading past the end returns the available bytes (possibly
	// none). off < 0 is an error. A missing object is ErrNotFound. The
	// returned slice is owned by the caller.
	Get(ctx context.Context, key string, off, length int64) ([]byte, error)
	// Head returns the object's size, or ErrNotFound.
	Head(ctx context.Context, key string) (Info, error)
	// Delete removes key. Deleting a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// List calls fn for every object whose key starts with prefix, in
	// ascending key order (byte-wise), until fn returns false. Objects put
	// or deleted during the listing may or may not be seen.
	List(ctx context.Context, prefix string, fn func(Info) bool) error
	// String describes the store for logs and status ("file:///data").
	String() string
}

// WithCold marks the objects put with the returned context as data that is
// unlikely to be read back soon (the whole blocks of a sequential writer).
// It is a hint only: a store may write them past its own caches (the local
// store uses direct I/O), but what it stores and returns is the same.
func WithCold(ctx context.Context) context.Context {
	return context.WithValue(ctx, coldKey{}, true)
}

// Cold reports whether ctx carries the hint of WithCold.
func Cold(ctx context.Context) bool {
	v, _ := ctx.Value(coldKey{}).(bool)
	return v
}

type coldKey struct{}

// WithCRC32C passes sum, the CRC-32C (Castagnoli) of the object put with
// the returned context, as its caller computed it, so that a store that
// sends one with the upload (S3's x-amz-checksum-crc32c, which the server
// checks) need not read the object again to compute it. A wrong sum makes
// such a server refuse the upload; other stores ignore it.
func WithCRC32C(ctx context.Context, sum uint32) context.Context {
	return context.WithValue(ctx, crcKey{}, sum)
}

// CRC32C returns the sum WithCRC32C put in ctx, if any.
func CRC32C(ctx context.Context) (uint32, bool) {
	v, ok := ctx.Value(crcKey{}).(uint32)
	return v, ok
}

type crcKey struct{}

// Syncer is implemented by stores whose Put makes an object visible but not
// yet durable. Sync makes every object whose Put returned before Sync was
// called durable. It is safe to call concurrently with anything.
type Syncer interface {
	Sync(ctx context.Context) error
}

// BatchDeleter is implemented by stores that delete many objects in one
// request (S3's DeleteObjects) or transaction. DeleteMany deletes every
// key, as Delete does each: missing keys are not an error, and on error
// some keys may be deleted and others not. Callers should pass at most
// MaxBatchDelete keys; use DeleteAll.
type BatchDeleter interface {
	DeleteMany(ctx context.Context, keys []string) error
}

// Space is the room of the storage that holds a store's objects, in
// bytes.
type Space struct {
	Total uint64
	Free  uint64 // not in use
	Avail uint64 // left to an unprivileged writer (at most Free)
}

// Spacer is implemented by stores that know the room of the storage
// holding their objects: a local directory, its file system's. S3 has
// no such figure. Space may do I/O and is safe to call concurrently with
// anything. A store that wraps another implements it by passing the call
// on (SpaceOf), so it may return ErrUnknownSpace.
type Spacer interface {
	Space(ctx context.Context) (Space, error)
}

// ErrUnknownSpace is returned by SpaceOf, and a wrapper's Space, for a
// store that cannot tell its room.
var ErrUnknownSpace = errors.New("object: the store cannot tell its space")

// SpaceOf returns the room of s's storage if s is a Spacer, and
// ErrUnknownSpace otherwise.
func SpaceOf(ctx context.Context, s Store) (Space, error) {
	sp, ok := s.(Spacer)
	if !ok {
		return Space{}, fmt.Errorf("%s: %w", s, ErrUnknownSpace)
	}
	return sp.Space(ctx)
}

// MaxBatchDelete is the most keys DeleteAll passes to one DeleteMany
// (S3's limit per request).
const MaxBatchDelete = 1000

// DeleteAll deletes keys from s: in batches of at most MaxBatchDelete
// where s is a BatchDeleter, one Delete each otherwise. It stops at the
// first error.
func DeleteAll(ctx context.Context, s Store, keys []string) error {
	bd, ok := s.(BatchDeleter)
	if !ok {
		for _, k := range keys {
			if err := s.Delete(ctx, k); err != nil {
				return err
			}
		}
		return nil
	}
	for len(keys) > 0 {
		n := min(len(keys), MaxBatchDelete)
		if err := bd.DeleteMany(ctx, keys[:n]); err != nil {
			return err
		}
		keys = keys[n:]
	}
	return nil
}

// StreamPutter is implemented by stores that can store an object read
// from a stream without holding it whole in memory (object/local writes
// it to a file as it comes; object/s3 sends it as a multipart upload, one
// part in memory at a time). Objects too large for a memory buffer (a
// metadata backup of a large volume) go through it; see PutStream.
type StreamPutter interface {
	// PutStream stores the bytes read from r until io.EOF under key, as
	// Put stores data: the object appears whole, atomically, and is
	// visible when PutStream returns nil (and durable then, or after a
	// Sync on an object.Syncer). When r fails (returns an error other
	// than io.EOF) or ctx ends, PutStream returns an error and leaves key
	// as it was: no partial object is ever visible. The store does not
	// retry a failed PutStream as a whole (r cannot be read again); it
	// may retry the requests of parts it still holds. r is read by one
	// goroutine; the store does not retain it.
	PutStream(ctx context.Context, key string, r io.Reader) error
}

// PutStream stores the bytes read from r under key through s's
// StreamPutter ability, or, where s has none, reads r whole into memory
// and puts it (test stores; every store a volume runs on has the
// ability). See StreamPutter for what it guarantees.
func PutStream(ctx context.Context, s Store, key string, r io.Reader) error {
	if sp, ok := s.(StreamPutter); ok {
		return sp.PutStream(ctx, key, r)
	}
	if err := ValidKey(key); err != nil {
		return err
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(r); err != nil {
		return fmt.Errorf("put %q: reading its stream: %w", key, err)
	}
	return s.Put(ctx, key, buf.Bytes())
}

// rangeReadSize is how much a Reader asks of its store at a time.
const rangeReadSize = 8 << 20

// Reader reads one object from start to end as a stream, in range Gets of
// at most 8 MiB, so that an object of any size is read in bounded
// memory. It is not safe for concurrent use.
type Reader struct {
	ctx  context.Context
	s    Store
	key  string
	size int64 // the object's size when the Reader was made
	off  int64 // next offset to fetch
	buf  []byte
}

// NewReader returns a Reader of the object at key, whose size it reads
// first (Head): a missing object is ErrNotFound here, and an object that
// gets shorter while it is read ends the stream with
// io.ErrUnexpectedEOF. The object should not change while it is read.
func NewReader(ctx context.Context, s Store, key string) (*Reader, error) {
	info, err := s.Head(ctx, key)
	if err != nil {
		return nil, err
	}
	return &Reader{ctx: ctx, s: s, key: key, size: info.Size}, nil
}

// Size returns the object's size.
func (r *Reader) Size() int64 { return r.size }

// Read implements io.Reader.
func (r *Reader) Read(p []byte) (int, error) {
	if len(r.buf) == 0 {
		if r.off >= r.size {
			return 0, io.EOF
		}
		n := min(int64(rangeReadSize), r.size-r.off)
		b, err := r.s.Get(r.ctx, r.key, r.off, n)
		if err != nil {
			return 0, fmt.Errorf("reading %s at offset %d: %w", r.key, r.off, err)
		}
		if int64(len(b)) < n {
			return 0, fmt.Errorf("reading %s at offset %d: %d bytes, want %d (did it change?): %w", r.key, r.off, len(b), n, io.ErrUnexpectedEOF)
		}
		r.buf, r.off = b, r.off+n
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// ReadAll is a convenience that reads a whole object.
func ReadAll(ctx context.Context, s Store, key string) ([]byte, error) {
	return s.Get(ctx, key, 0, -1)
}

// ValidKey reports whether key follows the key rules of Store. The error
// wraps ErrInvalidKey and says what is wrong.
func ValidKey(key string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w %q: %s", ErrInvalidKey, key, why)
	}
	switch {
	case key == "":
		return bad("empty")
	case len(key) > MaxKeyLen:
		return bad(fmt.Sprintf("longer than %d bytes", MaxKeyLen))
	case key[0] == '/':
		return bad(`leading "/"`)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c > 0x7e {
			return bad(fmt.Sprintf("byte %#02x at %d is not printable ASCII", c, i))
		}
	}
	for seg := range strings.SplitSeq(key, "/") {
		switch {
		case seg == "":
			return bad("empty path segment")
		case seg == "." || seg == "..":
			return bad(fmt.Sprintf("%q segment", seg))
		case len(seg) > MaxSegmentLen:
			return bad(fmt.Sprintf("segment longer than %d bytes", MaxSegmentLen))
		}
	}
	return nil
}

// Copier is implemented by stores that can make an object of another
// store's object without its bytes passing through the caller: a hard
// link between two local stores on one file system, a server-side copy
// between two buckets of one S3 endpoint. CopyFrom returns ok false, and
// does nothing, when src is not such a store (the caller copies); else it
// makes key from src's key as Put would (visible at once, durable after a
// Sync on a Syncer), or fails (ErrNotFound: src has no such object).
type Copier interface {
	CopyFrom(ctx context.Context, src Store, key string) (ok bool, err error)
}

// Base returns the store under s's wrappers (those with an Unwrap method
// returning a Store), for a Copier to recognise its own kind.
func Base(s Store) Store {
	for {
		u, ok := s.(interface{ Unwrap() Store })
		if !ok {
			return s
		}
		s = u.Unwrap()
	}
}
