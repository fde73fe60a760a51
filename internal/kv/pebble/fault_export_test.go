package pebble

import "github.com/cockroachdb/pebble/v2/vfs"

// WithFS returns o with Pebble writing through fs, for injecting faults.
func WithFS(o Options, fs vfs.FS) Options {
	o.fs = fs
	return o
}
