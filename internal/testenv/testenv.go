// Package testenv holds what the packages that run real servers for tests
// (pgtest, s3test) share: one server per test binary, started on first
// use, stopped when the package's TestMain ends; a missing server binary
// skips the test, or fails it when CAIRN_REQUIRE_SHARED=1 (CI).
package testenv

import (
	"os"
	"sync"
	"sync/atomic"
	"testing"
)

// EnvRequire, when "1", turns a missing server binary from a skip into a
// test failure (for CI, where the servers must be there).
const EnvRequire = "CAIRN_REQUIRE_SHARED"

// Server is one lazily started server of type S for a test binary.
type Server[S any] struct {
	// Name prefixes messages ("pgtest").
	Name string
	// Hint says how to make a missing binary available.
	Hint string
	// Find locates the server binary, or says why it cannot.
	Find func() (bin, why string)
	// Start starts the server; Stop stops it and removes its files.
	Start func(bin string) (S, error)
	Stop  func(S)

	main    atomic.Bool
	once    sync.Once
	srv     S
	started bool
	skip    string // why the server is unavailable, if it is
	err     error  // why it failed to start, if it did
}

// Wrap runs run (the tests) and then stops the server if a test started
// it. TestMain calls it (through the package's Main or Wrap).
func (s *Server[S]) Wrap(run func()) {
	s.main.Store(true)
	run()
	if s.started {
		s.Stop(s.srv)
	}
}

// Get returns the server, starting it on the first call; it skips or
// fails tb as the package doc says.
func (s *Server[S]) Get(tb testing.TB) S {
	tb.Helper()
	if !s.main.Load() {
		tb.Fatalf("%s: the package's TestMain must call %s.Main(m), which stops the server at the end", s.Name, s.Name)
	}
	s.once.Do(func() {
		bin, why := s.Find()
		if bin == "" {
			s.skip = why
			return
		}
		s.srv, s.err = s.Start(bin)
		s.started = s.err == nil
	})
	switch {
	case s.skip != "" && os.Getenv(EnvRequire) == "1":
		tb.Fatalf("%s: %s (and %s=1 requires it)", s.Name, s.skip, EnvRequire)
	case s.skip != "":
		tb.Skipf("%s: %s; %s to run this test", s.Name, s.skip, s.Hint)
	case s.err != nil:
		tb.Fatalf("%s: %v", s.Name, s.err)
	}
	return s.srv
}
