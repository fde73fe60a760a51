package meta

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/kv/memkv"
	"github.com/cairnfs/cairn/internal/kv/pebble"
	"github.com/cairnfs/cairn/internal/kv/postgres"
)

// TestLatestCacheFollowsWrites: lookups and getattrs are served from the
// cache, and every kind of change is seen at once.
func TestLatestCacheFollowsWrites(t *testing.T) {
	m := newTestMeta(t)
	if !m.LatestCacheStats().Enabled {
		t.Skip("the test store is not observable")
	}
	dir := mkdir(t, m, root, base.RootIno, "d")
	ino := create(t, m, root, dir, "f")
	before := m.LatestCacheStats()
	for range 3 {
		got, a, _, err := m.LookupDir(ctx, root, dir, "f")
		ok(t, err)
		if got != ino || a.Type != base.TypeFile {
			t.Fatalf("lookup: %d (%+v), want %d", got, a, ino)
		}
	}
	after := m.LatestCacheStats()
	// The create cached the entry, the file and the directory; a lookup
	// reads the directory twice: twelve hits.
	if after.Hits-before.Hits != 12 || after.Misses != before.Misses {
		t.Fatalf("3 lookups after the create: %d hits, %d misses; want 12, 0",
			after.Hits-before.Hits, after.Misses-before.Misses)
	}

	must[base.Attr](t)(m.SetAttr(ctx, root, ino, SetAttrRequest{Valid: SetMode, Mode: 0o600}))
	if a := must[base.Attr](t)(m.GetAttr(ctx, ino)); a.Mode&0o7777 != 0o600 {
		t.Fatalf("mode after chmod: %o", a.Mode&0o7777)
	}
	ok(t, m.Rename(ctx, root, dir, "f", dir, "g", 0))
	_, _, _, err := m.LookupDir(ctx, root, dir, "f")
	wantErr(t, err, base.ErrNotFound)
	if got, _, _, err := m.LookupDir(ctx, root, dir, "g"); err != nil || got != ino {
		t.Fatalf("lookup of the new name: %d, %v", got, err)
	}
	ok(t, m.Unlink(ctx, root, dir, "g"))
	_, _, _, err = m.LookupDir(ctx, root, dir, "g")
	wantErr(t, err, base.ErrNotFound)
	_, err = m.GetAttr(ctx, ino)
	wantErr(t, err, base.ErrNotFound)
}

// TestLatestCacheSnapshotsAndOtherClients: a snapshot's epoch change
// keeps the cache right, and a second client of the same store (both
// observe it) sees the first one's changes at once.
func TestLatestCacheSnapshotsAndOtherClients(t *testing.T) {
	m, store := newTestMetaStore(t, Options{})
	if !m.LatestCacheStats().Enabled {
		t.Skip("the test store is not observable")
	}
	m2, err := Open(ctx, store, Options{})
	ok(t, err)
	defer m2.Close()
	ino := create(t, m, root, base.RootIno, "f")
	must[base.Attr](t)(m2.GetAttr(ctx, ino)) // cached in m2
	must[Snapshot](t)(m.CreateSnapshot(ctx, "s1"))
	for i, mode := range []uint32{0o640, 0o604} {
		must[base.Attr](t)(m.SetAttr(ctx, root, ino, SetAttrRequest{Valid: SetMode, Mode: mode}))
		for _, c := range []*Meta{m, m2} {
			if a := must[base.Attr](t)(c.GetAttr(ctx, ino)); a.Mode&0o7777 != mode {
				t.Fatalf("change %d: mode %o, want %o", i, a.Mode&0o7777, mode)
			}
		}
		if i == 0 {
			must[Snapshot](t)(m.CreateSnapshot(ctx, "s2"))
		}
	}
}

// TestLatestCacheNeverGoesBack: while one goroutine changes a file's
// mtime, readers never see an mtime older than one a finished SetAttr
// wrote, through the cache or around it.
func TestLatestCacheNeverGoesBack(t *testing.T) {
	m := newTestMeta(t)
	if !m.LatestCacheStats().Enabled {
		t.Skip("the test store is not observable")
	}
	ino := create(t, m, root, base.RootIno, "f")
	var done atomic.Int64 // the last mtime whose SetAttr returned
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for r := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				floor := done.Load()
				var a base.Attr
				var err error
				if r%2 == 0 {
					a, err = m.GetAttr(ctx, ino)
				} else {
					_, a, _, err = m.LookupDir(ctx, root, base.RootIno, "f")
				}
				if err != nil {
					errs <- err.Error()
					return
				}
				if a.Mtime < floor {
					errs <- "read went back in time"
					return
				}
			}
		}()
	}
	for i := int64(1); i <= 1500; i++ {
		must[base.Attr](t)(m.SetAttr(ctx, root, ino, SetAttrRequest{Valid: SetMtime, Mtime: i * 1000}))
		done.Store(i * 1000)
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	if st := m.LatestCacheStats(); st.Hits == 0 {
		t.Fatal("no read was served from the cache")
	}
}

// TestLatestCacheBounded: the cache holds at most its bound, and evicted
// records are read from the store again.
func TestLatestCacheBounded(t *testing.T) {
	m, _ := newTestMetaStore(t, Options{LatestCacheEntries: 128})
	if !m.LatestCacheStats().Enabled {
		t.Skip("the test store is not observable")
	}
	inos := make([]base.Ino, 300)
	for i := range inos {
		inos[i] = create(t, m, root, base.RootIno, "f"+string(rune('A'+i%26))+string(rune('a'+i/26)))
		// Each file's size is its inode number, to tell the attributes apart.
		must[base.Attr](t)(m.SetAttr(ctx, root, inos[i], SetAttrRequest{Valid: SetSize, Size: uint64(inos[i])}))
	}
	for range 2 {
		for _, ino := range inos {
			if a := must[base.Attr](t)(m.GetAttr(ctx, ino)); a.Length != uint64(ino) {
				t.Fatalf("getattr %d: size %d", ino, a.Length)
			}
		}
	}
	if st := m.LatestCacheStats(); st.Entries > 128 || st.Misses == 0 {
		t.Fatalf("bound 128: %d entries, %d misses", st.Entries, st.Misses)
	}
}

// TestLatestCacheOnlyWhereObservable: on by default over an observable
// store, off when asked, and never over a store other processes write.
func TestLatestCacheOnlyWhereObservable(t *testing.T) {
	store := memkv.New()
	ok(t, Format(ctx, store, Settings{Name: "test"}, false))
	on, err := Open(ctx, store, Options{})
	ok(t, err)
	defer on.Close()
	off, err := Open(ctx, store, Options{LatestCacheEntries: -1})
	ok(t, err)
	defer off.Close()
	if !on.LatestCacheStats().Enabled || off.LatestCacheStats().Enabled {
		t.Fatalf("enabled: default %v, off %v", on.LatestCacheStats().Enabled, off.LatestCacheStats().Enabled)
	}
	var shared kv.Store = (*postgres.Store)(nil)
	if _, ok := shared.(kv.Observable); ok {
		t.Fatal("the PostgreSQL store claims to see every commit")
	}
}

// TestLatestCacheUnlinkRacesLink: on the embedded engine, parallel creates
// (their usage counters come from the cache), then unlinks whose records
// come from the cache racing links of the same files. An unlink that read
// a link count the link then changed must not commit it: every file ends
// with the link count of its remaining names, and the usage counters
// match the inodes, which Check verifies.
func TestLatestCacheUnlinkRacesLink(t *testing.T) {
	store, err := pebble.Open(t.TempDir(), pebble.Options{})
	ok(t, err)
	t.Cleanup(func() { _ = store.Close() }) // after the check below
	ok(t, Format(ctx, store, Settings{Name: "race"}, false))
	m, err := Open(ctx, store, Options{})
	ok(t, err)
	checkOnCleanup(t, m)
	const n = 300
	inos := make([]base.Ino, n)
	// Concurrent creates in four directories: nothing conflicts but the
	// usage counters, which come from the cache.
	var dirs [4]base.Ino
	for w := range dirs {
		dirs[w] = mkdir(t, m, root, base.RootIno, fmt.Sprintf("d%d", w))
	}
	dirOf := func(i int) base.Ino { return dirs[i%4] }
	var cwg sync.WaitGroup
	for w := range 4 {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			for i := w; i < n; i += 4 {
				inos[i] = create(t, m, root, dirOf(i), fmt.Sprintf("f%d", i))
			}
		}()
	}
	cwg.Wait()
	before := m.LatestCacheStats()
	var wg sync.WaitGroup
	linked := make([]bool, n)
	errs := make(chan error, 2*n)
	for _, half := range []int{0, 1} {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := half; i < n; i += 2 {
				if err := m.Unlink(ctx, root, dirOf(i), fmt.Sprintf("f%d", i)); err != nil {
					errs <- err
				}
			}
		}()
		go func() {
			defer wg.Done()
			for i := half; i < n; i += 2 {
				_, err := m.Link(ctx, root, inos[i], dirOf(i), fmt.Sprintf("h%d", i))
				switch {
				case err == nil:
					linked[i] = true
				case !errors.Is(err, base.ErrNotFound):
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i, ino := range inos {
		a, err := m.GetAttr(ctx, ino)
		switch {
		case linked[i] && (err != nil || a.Nlink != 1):
			t.Fatalf("file %d, linked then unlinked: nlink %d, %v", i, a.Nlink, err)
		case !linked[i] && !errors.Is(err, base.ErrNotFound):
			t.Fatalf("file %d, unlinked: %+v, %v", i, a, err)
		}
	}
	if m.LatestCacheStats().Hits == before.Hits {
		t.Fatal("no unlink read the cache")
	}
}

// TestLatestCacheFreshInodes: the cache knows a new inode has no holds,
// xattrs or chunks until a commit writes some, and an unlink then finds
// and removes them (Check, on cleanup, finds no orphan record).
func TestLatestCacheFreshInodes(t *testing.T) {
	m := newTestMeta(t)
	if m.lc == nil {
		t.Skip("the test store is not observable")
	}
	f := create(t, m, root, base.RootIno, "x")
	for _, p := range [][]byte{holdPrefix(f), xattrPrefix(f), chunkPrefix(f)} {
		if !m.lc.emptyPrefix(p) {
			t.Fatalf("new inode: prefix %x not known empty", p)
		}
	}
	ok(t, m.SetXattr(ctx, root, f, "user.a", []byte("v"), 0))
	if m.lc.emptyPrefix(xattrPrefix(f)) || !m.lc.emptyPrefix(chunkPrefix(f)) {
		t.Fatal("after setxattr: xattrs still known empty, or chunks not")
	}
	ok(t, m.Unlink(ctx, root, base.RootIno, "x"))

	g := create(t, m, root, base.RootIno, "c")
	_, err := m.WriteSlice(ctx, g, 0, newSlice(t, m, 0, 100), 1)
	ok(t, err)
	if m.lc.emptyPrefix(chunkPrefix(g)) {
		t.Fatal("after a write: chunks still known empty")
	}
	ok(t, m.Unlink(ctx, root, base.RootIno, "c"))

	h := create(t, m, root, base.RootIno, "o")
	must[base.Attr](t)(m.OpenFile(ctx, h))
	ok(t, m.Unlink(ctx, root, base.RootIno, "o"))
	if a, err := m.GetAttr(ctx, h); err != nil || a.Nlink != 0 {
		t.Fatalf("open file unlinked: %+v, %v; want it kept with nlink 0", a, err)
	}
	ok(t, m.CloseFile(ctx, h))
	_, err = m.GetAttr(ctx, h)
	wantErr(t, err, base.ErrNotFound)
}

// TestLatestCacheSingleVersions: with no snapshot frozen and no deletion
// of one pending, an unlink skips looking for older versions; one after a
// snapshot was taken and deleted (its versions pruned) leaves nothing that
// could make the file reappear.
func TestLatestCacheSingleVersions(t *testing.T) {
	m := newTestMeta(t)
	if m.lc == nil {
		t.Skip("the test store is not observable")
	}
	if !m.lc.noSnapshotJobs() {
		t.Fatal("a new volume has snapshot jobs pending, says the cache")
	}
	f := create(t, m, root, base.RootIno, "f")
	must[Snapshot](t)(m.CreateSnapshot(ctx, "s1"))
	must[base.Attr](t)(m.SetAttr(ctx, root, f, SetAttrRequest{Valid: SetMode, Mode: 0o600}))
	ok(t, m.DeleteSnapshot(ctx, "s1", nil))
	if !m.lc.noSnapshotJobs() {
		t.Fatal("snapshot jobs still pending after DeleteSnapshot returned")
	}
	ok(t, m.Unlink(ctx, root, base.RootIno, "f"))
	_, _, _, err := m.LookupDir(ctx, root, base.RootIno, "f")
	wantErr(t, err, base.ErrNotFound)
	_, err = m.GetAttr(ctx, f)
	wantErr(t, err, base.ErrNotFound)
}

// TestLatestCacheFreshDirectories: in a directory this client made, the
// cache knows which names are absent, and follows creates, renames and
// unlinks by this client and by another one of the same store.
func TestLatestCacheFreshDirectories(t *testing.T) {
	m, store := newTestMetaStore(t, Options{})
	if m.lc == nil {
		t.Skip("the test store is not observable")
	}
	m2, err := Open(ctx, store, Options{})
	ok(t, err)
	defer m2.Close()
	d := mkdir(t, m, root, base.RootIno, "d")
	a := create(t, m, root, d, "a")
	if !m.lc.absentEntry(dentryKey(d, "x")) || m.lc.absentEntry(dentryKey(d, "a")) {
		t.Fatal("fresh directory: x not known absent, or a known absent")
	}
	_, _, _, err = m.LookupDir(ctx, root, d, "x")
	wantErr(t, err, base.ErrNotFound)
	ok(t, m.Rename(ctx, root, d, "a", d, "x", 0))
	if got, _, _, err := m.LookupDir(ctx, root, d, "x"); err != nil || got != a {
		t.Fatalf("lookup after rename: %d, %v", got, err)
	}
	_, _, _, err = m.LookupDir(ctx, root, d, "a")
	wantErr(t, err, base.ErrNotFound)
	ok(t, m.Unlink(ctx, root, d, "x"))
	_, _, _, err = m.LookupDir(ctx, root, d, "x")
	wantErr(t, err, base.ErrNotFound)
	y := create(t, m2, root, d, "y") // another client of the store
	if got, _, _, err := m.LookupDir(ctx, root, d, "y"); err != nil || got != y {
		t.Fatalf("lookup of the other client's file: %d, %v", got, err)
	}
	_, _, err = m.Create(ctx, root, d, "y", 0o644, 0)
	wantErr(t, err, base.ErrExist)
}

// TestLatestCacheFreshDirectoryRaces: on the embedded engine, two
// goroutines create the same names in a fresh directory, both told by the
// cache that the name is absent; each name is made exactly once (the
// absence is noted as read, and so is the directory's attribute, which
// both creates change).
func TestLatestCacheFreshDirectoryRaces(t *testing.T) {
	store, err := pebble.Open(t.TempDir(), pebble.Options{})
	ok(t, err)
	t.Cleanup(func() { _ = store.Close() })
	ok(t, Format(ctx, store, Settings{Name: "race"}, false))
	m, err := Open(ctx, store, Options{})
	ok(t, err)
	checkOnCleanup(t, m)
	d := mkdir(t, m, root, base.RootIno, "d")
	const n = 300
	var made atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				_, _, err := m.Create(ctx, root, d, fmt.Sprintf("f%d", i), 0o644, 0)
				switch {
				case err == nil:
					made.Add(1)
				case !errors.Is(err, base.ErrExist):
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if made.Load() != n {
		t.Fatalf("%d creates succeeded for %d names", made.Load(), n)
	}
}
