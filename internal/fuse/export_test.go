package fuse

import "sync"

// ResetProcsOnce lets the next mount with ExtraProcs raise GOMAXPROCS
// again (tests only).
func ResetProcsOnce() { procsOnce = sync.Once{} }
