// Package split joins two object stores into one: each key lives in the
// store a fixed rule picks for it, and listings merge both in key order.
// Cairn uses it to keep the blocks of small slices in the metadata engine
// and every other object in the object store; the package itself knows
// nothing of either and imports nothing of Cairn's but package object.
package split

import (
	"context"
	"errors"
	"io"

	"github.com/cairnfs/cairn/internal/object"
)

// Store routes every request for a key to Side when Route(key) reports
// true and to Main otherwise. Route must be a pure function of the key:
// the same key always goes to the same store, or objects would be lost.
//
// Store allows nesting keys (see object.Store): a key in one store and a
// key nested with it in the other are not checked for, which would cost a
// request to the other store per Put. It is safe for concurrent use when
// both stores are.
type Store struct {
	main, side object.Store
	route      func(key string) bool
}

var (
	_ object.Store        = (*Store)(nil)
	_ object.Syncer       = (*Store)(nil)
	_ io.Closer           = (*Store)(nil)
	_ object.BatchDeleter = (*Store)(nil)
	_ object.Spacer       = (*Store)(nil)
)

// New returns a store over main and side.
func New(main, side object.Store, route func(key string) bool) *Store {
	return &Store{main: main, side: side, route: route}
}

func (s *Store) pick(key string) object.Store {
	if s.route(key) {
		return s.side
	}
	return s.main
}

// String implements object.Store: the main store's description.
func (s *Store) String() string { return s.main.String() }

// AllowsNesting reports true; see Store.
func (s *Store) AllowsNesting() bool { return true }

// Put implements object.Store.
func (s *Store) Put(ctx context.Context, key string, data []byte) error {
	if err := object.ValidKey(key); err != nil {
		return err
	}
	return s.pick(key).Put(ctx, key, data)
}

// Get implements object.Store.
func (s *Store) Get(ctx context.Context, key string, off, length int64) ([]byte, error) {
	if err := object.ValidKey(key); err != nil {
		return nil, err
	}
	return s.pick(key).Get(ctx, key, off, length)
}

// Head implements object.Store.
func (s *Store) Head(ctx context.Context, key string) (object.Info, error) {
	if err := object.ValidKey(key); err != nil {
		return object.Info{}, err
	}
	return s.pick(key).Head(ctx, key)
}

// Delete implements object.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := object.ValidKey(key); err != nil {
		return err
	}
	return s.pick(key).Delete(ctx, key)
}

// DeleteMany implements object.BatchDeleter: each store deletes its keys,
// in batches where it can (object.DeleteAll).
func (s *Store) DeleteMany(ctx context.Context, keys []string) error {
	var main, side []string
	for _, k := range keys {
		if err := object.ValidKey(k); err != nil {
			return err
		}
		if s.route(k) {
			side = append(side, k)
		} else {
			main = append(main, k)
		}
	}
	if err := object.DeleteAll(ctx, s.main, main); err != nil {
		return err
	}
	return object.DeleteAll(ctx, s.side, side)
}

// List implements object.Store: both stores' objects under prefix, merged
// in key order. A key that (against Route) is in both stores is listed
// once, with the size Get would see.
func (s *Store) List(ctx context.Context, prefix string, fn func(object.Info) bool) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The side store is listed in a goroutine and merged into the main
	// store's listing as it goes, so neither listing is held in memory.
	sideCh := make(chan object.Info, 256)
	sideErr := make(chan error, 1)
	go func() {
		defer close(sideCh)
		sideErr <- s.side.List(ctx, prefix, func(info object.Info) bool {
			select {
			case sideCh <- info:
				return true
			case <-ctx.Done():
				return false
			}
		})
	}()
	next, more := <-sideCh
	stopped := false
	emit := func(info object.Info) bool {
		if !fn(info) {
			stopped = true
		}
		return !stopped
	}
	err := s.main.List(ctx, prefix, func(info object.Info) bool {
		for more && next.Key <= info.Key {
			if next.Key == info.Key {
				// In both stores: the routed one is the one that counts.
				if s.route(info.Key) {
					info = next
				}
			} else if !emit(next) {
				return false
			}
			next, more = <-sideCh
		}
		return emit(info)
	})
	for err == nil && !stopped && more {
		emit(next)
		next, more = <-sideCh
	}
	cancel()
	for more {
		_, more = <-sideCh
	}
	serr := <-sideErr
	switch {
	case err != nil:
		return err
	case stopped:
		return nil // the side listing may have ended on the cancel
	default:
		return serr // it ran to its end: the channel was drained
	}
}

// Sync implements object.Syncer: it syncs each store that implements it.
func (s *Store) Sync(ctx context.Context) error {
	var errs []error
	for _, st := range []object.Store{s.main, s.side} {
		if sy, ok := st.(object.Syncer); ok {
			errs = append(errs, sy.Sync(ctx))
		}
	}
	return errors.Join(errs...)
}

// Space implements object.Spacer: the main store's (the side store
// holds the few small objects Route picks).
func (s *Store) Space(ctx context.Context) (object.Space, error) {
	return object.SpaceOf(ctx, s.main)
}

// Close closes each store that has a Close method.
func (s *Store) Close() error {
	var errs []error
	for _, st := range []object.Store{s.main, s.side} {
		if c, ok := st.(io.Closer); ok {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}
