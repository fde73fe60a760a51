package pebble

// WithoutRedoLog returns o with the redo log turned off, for comparing
// against it.
func WithoutRedoLog(o Options) Options {
	o.noRedoLog = true
	return o
}
