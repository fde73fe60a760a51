package pebble_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cairnfs/cairn/internal/kv/pebble"
	"github.com/cairnfs/cairn/internal/testenv"
)

// TestMustExist: with MustExist, Open of a directory that holds no
// database (or of no directory) fails with ErrNotExist and leaves the
// place exactly as it was; a database that exists opens.
func TestMustExist(t *testing.T) {
	parent := t.TempDir()
	unrelated := filepath.Join(parent, "unrelated")
	if err := os.MkdirAll(filepath.Join(unrelated, "sub"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(unrelated, "notes.txt"), []byte("mine"), 0o640); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(parent, "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, path string }{
		{"unrelated directory", unrelated},
		{"empty directory", t.TempDir()},
		{"missing directory", filepath.Join(parent, "missing", "meta")},
		{"a file", file},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := testenv.Tree(t, parent, true) + testenv.Tree(t, c.path, true)
			for _, ro := range []bool{false, true} {
				s, err := pebble.Open(c.path, pebble.Options{MustExist: true, ReadOnly: ro})
				if err == nil {
					s.Close()
					t.Fatalf("Open(ReadOnly %v) of %s succeeded", ro, c.path)
				}
				if !errors.Is(err, pebble.ErrNotExist) {
					t.Fatalf("Open(ReadOnly %v) of %s: %v, want ErrNotExist", ro, c.path, err)
				}
				if ok, err := pebble.Exists(c.path); ok || err != nil {
					t.Fatalf("Exists(%s) = %v, %v", c.path, ok, err)
				}
			}
			if after := testenv.Tree(t, parent, true) + testenv.Tree(t, c.path, true); after != before {
				t.Fatalf("Open changed %s:\nbefore:\n%s\nafter:\n%s", c.path, before, after)
			}
		})
	}

	dir := filepath.Join(parent, "db")
	open(t, dir, pebble.Options{}).Close()
	if ok, err := pebble.Exists(dir); !ok || err != nil {
		t.Fatalf("Exists of a database = %v, %v", ok, err)
	}
	s := open(t, dir, pebble.Options{MustExist: true})
	if ok, err := pebble.Exists(dir); !ok || err != nil { // held by s
		t.Fatalf("Exists of an open database = %v, %v", ok, err)
	}
	s.Close()
}
