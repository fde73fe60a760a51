package pebble

// WithoutRedoLog returns o with the redo log turned off, for comparing
// against it.
func WithoutRedoLog(o Options) Options {
	o.noRedoLog = true
	return o
}

// Pessimistic returns o with optimistic transactions turned off: every
// Update runs alone under the writer slot.
func Pessimistic(o Options) Options {
	o.pessimistic = true
	return o
}
