package kv

import "context"

type freeingKey struct{}

// Freeing returns ctx marked for transactions that free space: removing a
// file's last link or a directory. A store that refuses writes while its
// disk is nearly full (kv/pebble, see its package doc) admits these down to
// a lower floor, so that a user can make room by deleting files through a
// mount that is still up. Stores without such a limit ignore the mark.
//
// The mark is a hint, not a promise: a transaction marked so may write as
// much as any other (the store does not check what it writes), so mark
// only operations whose purpose is to delete.
func Freeing(ctx context.Context) context.Context {
	return context.WithValue(ctx, freeingKey{}, true)
}

// IsFreeing reports whether ctx was marked by Freeing.
func IsFreeing(ctx context.Context) bool {
	v, _ := ctx.Value(freeingKey{}).(bool)
	return v
}
