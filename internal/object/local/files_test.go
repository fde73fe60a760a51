package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/cairnfs/cairn/internal/object"
)

// TestOpenFiles: a key read again is not opened again; the cache holds at
// most max files and closes those it drops once their readers are done;
// a key forgotten while it was being opened is not kept.
func TestOpenFiles(t *testing.T) {
	dir := t.TempDir()
	opens := map[string]int{}
	opener := func(key string) func() (*os.File, int64, error) {
		return func() (*os.File, int64, error) {
			opens[key]++
			p := filepath.Join(dir, key)
			if err := os.WriteFile(p, []byte(key), 0o600); err != nil {
				return nil, 0, err
			}
			return openObject(p)
		}
	}
	c := newOpenFiles(2)
	get := func(key string) *openFile {
		t.Helper()
		o, err := c.get(key, opener(key))
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	c.put(get("a"))
	a := get("a")
	if opens["a"] != 1 || c.lru.Len() != 1 {
		t.Fatalf("a read twice: %d opens, %d cached", opens["a"], c.lru.Len())
	}
	// a is in use while b and c push it out: it stays open until put.
	c.put(get("b"))
	c.put(get("c"))
	if c.lru.Len() != 2 || c.files["a"] != nil {
		t.Fatalf("cache holds %d files (a: %v), want b and c", c.lru.Len(), c.files["a"] != nil)
	}
	buf := make([]byte, 1)
	if _, err := a.f.ReadAt(buf, 0); err != nil || buf[0] != 'a' {
		t.Fatalf("a dropped while in use: %q %v", buf, err)
	}
	c.put(a)
	if _, err := a.f.ReadAt(buf, 0); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("a dropped and put, still open: %v", err)
	}
	// Forgotten while being opened: used once, not kept.
	o, err := c.get("d", func() (*os.File, int64, error) {
		c.forget("d")
		return opener("d")()
	})
	if err != nil {
		t.Fatal(err)
	}
	c.put(o)
	if c.files["d"] != nil {
		t.Fatal("a key forgotten while being opened was kept")
	}
	if _, err := o.f.ReadAt(buf, 0); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("an uncached file is still open after put: %v", err)
	}
	c.close()
	if c.lru.Len() != 0 {
		t.Fatalf("%d files cached after close", c.lru.Len())
	}
	c.put(get("e"))
	if c.lru.Len() != 0 {
		t.Fatal("a file cached after close")
	}
}

// TestGetAfterReplaceAndDelete: a Get after Put of a key it had read, or
// after its Delete, sees the change, though the old object's file was
// kept open.
func TestGetAfterReplaceAndDelete(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for i := range 3 {
		want := []byte(fmt.Sprint("version ", i))
		if err := s.Put(ctx, "k/x", want); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			got, err := s.Get(ctx, "k/x", 0, -1)
			if err != nil || string(got) != string(want) {
				t.Fatalf("get after put %d: %q %v", i, got, err)
			}
		}
	}
	if s.files.files["k/x"] == nil {
		t.Fatal("the object read is not kept open")
	}
	if err := s.Delete(ctx, "k/x"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "k/x", 0, -1); !errors.Is(err, object.ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
}

// TestDeleteKeepsDirsOfPuts: a Delete does not remove an emptied directory
// that a Put in flight needs (holdDirs), and removes it once none does.
func TestDeleteKeepsDirsOfPuts(t *testing.T) {
	ctx := t.Context()
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pending := s.path("d/e/b")
	s.holdDirs(pending, 1) // a Put of d/e/b has begun
	if err := s.Put(ctx, "d/e/a", []byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "d/e/a"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(pending)); err != nil {
		t.Fatalf("the directory of a Put in flight was removed: %v", err)
	}
	s.holdDirs(pending, -1)
	if len(s.putting) != 0 {
		t.Errorf("holds left after every Put ended: %v", s.putting)
	}
	if err := s.Put(ctx, "d/e/a", []byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "d/e/a"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(s.dir, "d")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("emptied directories kept once no Put needs them: %v", err)
	}
}
