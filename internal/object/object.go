// Package object defines the blob-store interface that file content is kept
// in, independent of any Cairn concept: a store holds immutable objects named
// by string keys. It imports nothing of Cairn's.
//
// Backends: object/local (a directory), object/mem (tests), object/faulty
// (fault injection around another store), object/s3 (later). Every backend
// passes object/objtest.Run.
package object

import (
	"context"
	"errors"
)

// ErrNotFound is returned when an object does not exist.
var ErrNotFound = errors.New("object: not found")

// Info describes a stored object.
type Info struct {
	Key  string
	Size int64
}

// Store is a blob store. It is safe for concurrent use.
//
// Keys are slash-separated relative paths of printable ASCII without "..",
// leading "/" or empty segments. Objects are written whole and never
// modified in place: Put of an existing key replaces it atomically (a
// reader sees the old or the new object, never a mix).
type Store interface {
	// Put stores data under key. When Put returns nil the object is durable
	// (survives a machine crash). The store does not retain data.
	Put(ctx context.Context, key string, data []byte) error
	// Get reads length bytes at offset off of the object; length < 0 reads to
	// the end. Reading past the end returns the available bytes (possibly
	// none). A missing object is ErrNotFound. The returned slice is owned by
	// the caller.
	Get(ctx context.Context, key string, off, length int64) ([]byte, error)
	// Head returns the object's size, or ErrNotFound.
	Head(ctx context.Context, key string) (Info, error)
	// Delete removes key. Deleting a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// List calls fn for every object whose key starts with prefix, in
	// ascending key order, until fn returns false.
	List(ctx context.Context, prefix string, fn func(Info) bool) error
	// String describes the store for logs and status ("file:///data").
	String() string
}

// ReadAll is a convenience that reads a whole object.
func ReadAll(ctx context.Context, s Store, key string) ([]byte, error) {
	return s.Get(ctx, key, 0, -1)
}
