package kv

import "context"

type serializableKey struct{}

// Serializable returns ctx marked for transactions that must be
// serializable with one another, not only snapshot-isolated. A store whose
// updates run under snapshot isolation (Profile.SnapshotIsolation:
// kv/postgres) runs an Update, FirstsAndWrite or WriteIf so marked at its
// serializable level, where the server aborts one of two such
// transactions whose reads and writes cross (each read what the other
// wrote, a write skew) with a conflict, and the store runs it again.
// Stores whose updates are serializable already (memkv, pebble) ignore the
// mark.
//
// Meta marks the two sides of a race no written key orders: an open that
// reads an inode and writes its hold, and a change that reads the holds
// of an inode and destroys it (inode.go, held).
func Serializable(ctx context.Context) context.Context {
	if IsSerializable(ctx) {
		return ctx
	}
	return context.WithValue(ctx, serializableKey{}, true)
}

// IsSerializable reports whether ctx was marked by Serializable.
func IsSerializable(ctx context.Context) bool {
	v, _ := ctx.Value(serializableKey{}).(bool)
	return v
}
