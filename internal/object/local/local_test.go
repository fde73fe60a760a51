package local_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/object/counted"
	"github.com/cairnfs/cairn/internal/object/local"
	"github.com/cairnfs/cairn/internal/object/objtest"
)

func open(t *testing.T, dir string) *local.Store {
	t.Helper()
	s, err := local.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestConformance runs the object store suite on both ways of Put: unnamed
// files linked into place (where the file system has O_TMPFILE, as the
// test machine's must) and named temporary files renamed.
func TestConformance(t *testing.T) {
	t.Run("unnamed", func(t *testing.T) {
		objtest.Run(t, func(t *testing.T) object.Store {
			s := open(t, t.TempDir())
			if !local.Unnamed(s) {
				t.Fatal("O_TMPFILE not usable in the test directory")
			}
			return s
		})
	})
	t.Run("renamed", func(t *testing.T) {
		objtest.Run(t, func(t *testing.T) object.Store {
			s := open(t, t.TempDir())
			local.SetUnnamed(s, false)
			return s
		})
	})
	t.Run("cold", func(t *testing.T) {
		objtest.Run(t, func(t *testing.T) object.Store {
			return coldStore{open(t, t.TempDir())}
		})
	})
}

// coldStore puts every object as cold data (object.WithCold).
type coldStore struct{ *local.Store }

func (s coldStore) Put(ctx context.Context, key string, data []byte) error {
	return s.Store.Put(object.WithCold(ctx), key, data)
}

func TestOpen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "x", "y")
	s := open(t, dir)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Fatalf("Open did not create %s: %v", dir, err)
	}
	if got, want := s.String(), "file://"+dir; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}

	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, []byte("x"), 0o600)
	if _, err := local.Open(file); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("Open(file): err = %v, want 'not a directory'", err)
	}

	if os.Geteuid() != 0 {
		ro := t.TempDir()
		os.Chmod(ro, 0o500)
		t.Cleanup(func() { os.Chmod(ro, 0o700) })
		if _, err := local.Open(ro); err == nil || !strings.Contains(err.Error(), "not writable") {
			t.Errorf("Open(read-only dir): err = %v, want 'not writable'", err)
		}
	}

	rel := open(t, filepath.Join(t.TempDir(), "."))
	if !filepath.IsAbs(rel.Dir()) {
		t.Errorf("Dir() = %q, want absolute", rel.Dir())
	}
}

// TestTempFilesNotListed plants files like those a crash mid-Put leaves, and
// other strays, and checks that none is listed or readable as an object.
func TestTempFilesNotListed(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	ctx := t.Context()
	if err := s.Put(ctx, "a/b", []byte("real")); err != nil {
		t.Fatal(err)
	}
	strays := []string{
		"\u00b7tmp.123456", "a/\u00b7tmp.999", "\u00b7tmp.dir/c", "caf\u00e9", "a/bad\x01name",
	}
	for _, p := range strays {
		p = filepath.Join(dir, p)
		os.MkdirAll(filepath.Dir(p), 0o700)
		if err := os.WriteFile(p, []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	os.Symlink("b", filepath.Join(dir, "a", "link"))
	var got []string
	s.List(ctx, "", func(i object.Info) bool { got = append(got, i.Key); return true })
	if len(got) != 1 || got[0] != "a/b" {
		t.Fatalf("List = %q, want only a/b", got)
	}
	// A Put into a directory holding a stray temporary file still works,
	// and a Put leaves no temporary file behind.
	if err := s.Put(ctx, "a/c", []byte("more")); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "a"))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := "b bad\x01name c link \u00b7tmp.999"; strings.Join(names, " ") != want {
		t.Errorf("a/ holds %q, want %q", strings.Join(names, " "), want)
	}
}

func TestReopen(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s, err := local.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("cairn"), 1000)
	for _, k := range []string{"x/1", "x/2", "y"} {
		if err := s.Put(ctx, k, data); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s = open(t, dir)
	var keys []string
	s.List(ctx, "", func(i object.Info) bool {
		keys = append(keys, i.Key)
		if i.Size != int64(len(data)) {
			t.Errorf("%s: size %d", i.Key, i.Size)
		}
		return true
	})
	if strings.Join(keys, ",") != "x/1,x/2,y" {
		t.Fatalf("after reopen List = %v", keys)
	}
	got, err := object.ReadAll(ctx, s, "x/2")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("after reopen ReadAll: %d bytes, %v", len(got), err)
	}
}

func TestDeleteRemovesEmptyDirs(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	ctx := t.Context()
	s.Put(ctx, "p/q/r", []byte("1"))
	s.Put(ctx, "p/s", []byte("2"))
	s.Delete(ctx, "p/q/r")
	if _, err := os.Stat(filepath.Join(dir, "p", "q")); !os.IsNotExist(err) {
		t.Errorf("empty directory p/q left behind: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "p")); err != nil {
		t.Errorf("non-empty directory p removed: %v", err)
	}
	s.Delete(ctx, "p/s")
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("store directory removed: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("store directory not empty: %v", entries)
	}
}

// TestPutDeleteRace puts and deletes sibling keys concurrently: Delete's
// removal of empty directories must never make a Put fail.
func TestPutDeleteRace(t *testing.T) {
	for _, unnamed := range []bool{true, false} {
		s := open(t, t.TempDir())
		local.SetUnnamed(s, unnamed)
		putDeleteRace(t, s)
	}
}

func putDeleteRace(t *testing.T, s *local.Store) {
	ctx := t.Context()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			key := "d/e/" + string(rune('a'+w))
			for range 200 {
				if err := s.Put(ctx, key, []byte("x")); err != nil {
					t.Error(err)
					return
				}
				if err := s.Delete(ctx, key); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestSyncGroup(t *testing.T) {
	s := open(t, t.TempDir())
	ctx := t.Context()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 5 {
				key := "s/" + string(rune('a'+w)) + "/" + string(rune('0'+i))
				if err := s.Put(ctx, key, []byte(key)); err != nil {
					t.Error(err)
					return
				}
				if err := s.Sync(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.Sync(cctx); err != context.Canceled {
		// The round may have finished before ctx was looked at.
		if err != nil {
			t.Errorf("Sync with cancelled ctx: %v", err)
		}
	}
	if err := s.Sync(ctx); err != nil {
		t.Errorf("Sync after a cancelled Sync: %v", err)
	}
}

// TestSyncOnlyPutObjects checks that Sync fsyncs exactly the objects put
// since the last successful Sync and their directories up to the store's:
// nothing when nothing was put (an idle client's background sync), never
// a file of the file system that is not such an object, and again after
// a failed round.
func TestSyncOnlyPutObjects(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	ctx := t.Context()
	var mu sync.Mutex // the round fsyncs in parallel
	var synced []string
	var fail error
	local.SetFsync(s, func(p string) error {
		mu.Lock()
		defer mu.Unlock()
		if fail != nil {
			return fail
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		synced = append(synced, filepath.ToSlash(rel))
		return local.FsyncPath(p)
	})
	check := func(want ...string) {
		t.Helper()
		synced = nil
		if err := s.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		slices.Sort(synced)
		slices.Sort(want)
		if !slices.Equal(synced, want) {
			t.Fatalf("synced %q, want %q", synced, want)
		}
	}
	check() // nothing put yet
	if err := os.WriteFile(filepath.Join(dir, "..", filepath.Base(dir)+"-other"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a/b/c", "a/d"} {
		if err := s.Put(ctx, k, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	check("a/b/c", "a/d", "a/b", "a", ".")
	check()
	if err := s.Delete(ctx, "a/d"); err != nil {
		t.Fatal(err)
	}
	check() // deletions need no sync

	// A failed round leaves its objects for the next one.
	if err := s.Put(ctx, "e", []byte("y")); err != nil {
		t.Fatal(err)
	}
	fail = errors.New("injected")
	if err := s.Sync(ctx); !errors.Is(err, fail) {
		t.Fatalf("Sync = %v, want the injected error", err)
	}
	fail = nil
	check("e", ".")
	check()
}

// TestCopyFrom: an object of another local store on the same file system
// becomes a hard link (same bytes; removing the source's name leaves it);
// a missing one is ErrNotFound; a wrapped store is seen through; a store
// on another file system is not copied.
func TestCopyFrom(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src, dst := open(t, filepath.Join(dir, "a")), open(t, filepath.Join(dir, "b"))
	data := bytes.Repeat([]byte("block"), 1000)
	if err := src.Put(ctx, "chunks/1/2", data); err != nil {
		t.Fatal(err)
	}
	ok, err := dst.CopyFrom(ctx, counted.New(src), "chunks/1/2")
	if !ok || err != nil {
		t.Fatalf("CopyFrom: %v %v", ok, err)
	}
	if err := src.Delete(ctx, "chunks/1/2"); err != nil {
		t.Fatal(err)
	}
	got, err := object.ReadAll(ctx, dst, "chunks/1/2")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("linked object after the source's delete: %d bytes, %v", len(got), err)
	}
	if err := dst.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := dst.CopyFrom(ctx, src, "chunks/none"); !ok || !errors.Is(err, object.ErrNotFound) {
		t.Fatalf("CopyFrom of a missing object: %v %v, want ErrNotFound", ok, err)
	}
	if other, err := os.MkdirTemp("/dev/shm", "cairn-copy"); err == nil {
		defer os.RemoveAll(other)
		far := open(t, other)
		if err := far.Put(ctx, "chunks/1/3", data); err != nil {
			t.Fatal(err)
		}
		if ok, _ := dst.CopyFrom(ctx, far, "chunks/1/3"); ok {
			t.Fatal("CopyFrom across file systems claimed to link")
		}
	}
}
