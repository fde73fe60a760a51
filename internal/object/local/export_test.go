package local

import "os"

// SetSyncFS replaces the syncfs of s, to count or fail its calls.
func SetSyncFS(s *Store, fn func(*os.File) error) { s.syncFS = fn }

// Syncfs is the real syncfs.
var Syncfs = syncfs
