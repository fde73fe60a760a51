// Package mem is an in-memory object.Store for tests and for tools that need
// a throwaway store. It copies data in and out, so callers may reuse their
// buffers, and it enforces the same key rules as every other backend. It is
// not durable and does not implement object.Syncer.
package mem

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/cairnfs/cairn/internal/object"
)

var _ object.Store = (*Store)(nil)

// Store is an in-memory object store, safe for concurrent use.
type Store struct {
	mu      sync.RWMutex
	objects map[string][]byte
	// dirs counts, for every proper "directory" prefix of a stored key
	// ("a" and "a/b" for "a/b/c"), how many stored keys lie below it; it
	// enforces the no-nesting rule without scanning.
	dirs map[string]int
}

// New returns an empty store.
func New() *Store {
	return &Store{objects: make(map[string][]byte), dirs: make(map[string]int)}
}

// String implements object.Store.
func (s *Store) String() string { return fmt.Sprintf("mem://%p", s) }

// Put implements object.Store.
func (s *Store) Put(ctx context.Context, key string, data []byte) error {
	if err := object.ValidKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	data = slices.Clone(data)
	if data == nil {
		data = []byte{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.objects[key]; ok {
		s.objects[key] = data
		return nil
	}
	if s.dirs[key] > 0 {
		return fmt.Errorf("%w: %q has objects below it", object.ErrConflict, key)
	}
	for dir := range parents(key) {
		if _, ok := s.objects[dir]; ok {
			return fmt.Errorf("%w: %q is an object", object.ErrConflict, dir)
		}
	}
	for dir := range parents(key) {
		s.dirs[dir]++
	}
	s.objects[key] = data
	return nil
}

// Get implements object.Store.
func (s *Store) Get(ctx context.Context, key string, off, length int64) ([]byte, error) {
	if err := object.ValidKey(key); err != nil {
		return nil, err
	}
	if off < 0 {
		return nil, fmt.Errorf("object: get %q: negative offset %d", key, off)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	data, ok := s.objects[key]
	if !ok {
		return nil, fmt.Errorf("get %q: %w", key, object.ErrNotFound)
	}
	if off >= int64(len(data)) {
		return []byte{}, nil
	}
	data = data[off:]
	if length >= 0 && length < int64(len(data)) {
		data = data[:length]
	}
	return slices.Clone(data), nil
}

// Head implements object.Store.
func (s *Store) Head(ctx context.Context, key string) (object.Info, error) {
	if err := object.ValidKey(key); err != nil {
		return object.Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return object.Info{}, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	data, ok := s.objects[key]
	if !ok {
		return object.Info{}, fmt.Errorf("head %q: %w", key, object.ErrNotFound)
	}
	return object.Info{Key: key, Size: int64(len(data))}, nil
}

// Delete implements object.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := object.ValidKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.objects[key]; !ok {
		return nil
	}
	delete(s.objects, key)
	for dir := range parents(key) {
		if s.dirs[dir]--; s.dirs[dir] == 0 {
			delete(s.dirs, dir)
		}
	}
	return nil
}

// List implements object.Store. It works on a snapshot of the matching keys
// taken at the start, so fn may call back into the store.
func (s *Store) List(ctx context.Context, prefix string, fn func(object.Info) bool) error {
	s.mu.RLock()
	var infos []object.Info
	for k, v := range s.objects {
		if strings.HasPrefix(k, prefix) {
			infos = append(infos, object.Info{Key: k, Size: int64(len(v))})
		}
	}
	s.mu.RUnlock()
	slices.SortFunc(infos, func(a, b object.Info) int { return strings.Compare(a.Key, b.Key) })
	for _, info := range infos {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !fn(info) {
			return nil
		}
	}
	return nil
}

// parents yields the proper directory prefixes of key: "a", "a/b" for "a/b/c".
func parents(key string) func(yield func(string) bool) {
	return func(yield func(string) bool) {
		for i := 0; i < len(key); i++ {
			if key[i] == '/' && !yield(key[:i]) {
				return
			}
		}
	}
}
