package local

// SetFsync replaces the fsync of s's Sync rounds, to count or fail them.
func SetFsync(s *Store, fn func(path string) error) { s.fsync = fn }

// FsyncPath is the real one.
var FsyncPath = fsyncPath

// Unnamed reports whether s's Put links unnamed files; SetUnnamed turns
// that off, to test the named temporary files used where O_TMPFILE is not.
func Unnamed(s *Store) bool { return s.unnamed }

func SetUnnamed(s *Store, on bool) { s.unnamed = on }

// Direct reports whether s still writes cold objects with direct I/O (the
// file system has not refused it).
func Direct(s *Store) bool { return !s.direct.Refused() }
