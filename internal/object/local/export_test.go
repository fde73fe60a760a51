package local

// SetFsync replaces the fsync of s's Sync rounds, to count or fail them.
func SetFsync(s *Store, fn func(path string) error) { s.fsync = fn }

// FsyncPath is the real one.
var FsyncPath = fsyncPath
