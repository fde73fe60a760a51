package kv

import "context"

type serializeKey struct{}

// Serialize returns ctx marked for an update likely to conflict with
// concurrent updates over key: many clients changing the entries of one
// directory all write its attribute, and under snapshot isolation all but
// one of them abort and run again, over and over. A store whose updates
// run concurrently on a server may queue the updates marked with one key
// before their transactions begin (kv/postgres: an advisory lock taken
// before BEGIN, given back with the COMMIT), so that they follow one
// another instead of aborting one another. Other stores ignore the mark.
//
// The mark is a hint: the update must be correct without it, and updates
// not marked still conflict with marked ones as before.
func Serialize(ctx context.Context, key []byte) context.Context {
	return context.WithValue(ctx, serializeKey{}, key)
}

// SerializeKey returns the key ctx was marked with by Serialize, if any.
func SerializeKey(ctx context.Context) ([]byte, bool) {
	k, ok := ctx.Value(serializeKey{}).([]byte)
	return k, ok
}
