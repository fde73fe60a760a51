package meta

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// storeAttr reads ino's attribute from m's store, past every cache.
func storeAttr(t *testing.T, m *Meta, ino base.Ino) base.Attr {
	t.Helper()
	var a base.Attr
	ok(t, m.view(ctx, func(r kv.Reader) (err error) {
		a, err = getAttr(r, ino)
		return err
	}))
	return a
}

// walkUntilListed looks names up in dir on m until a listing of dir is
// held.
func walkUntilListed(t *testing.T, m *Meta, dir base.Ino, names []string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		lookup(t, m, dir, names[i%len(names)])
		m.listings.mu.Lock()
		l := m.listings.dirs[dir]
		m.listings.mu.Unlock()
		if l != nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no listing of %d after %d lookups (loads %d, discarded %d, state %+v)", dir, i+1, m.listings.loads.Load(), m.listings.discarded.Load(), *m.listings.state[dir])
		}
		time.Sleep(time.Millisecond)
	}
}

// TestListingCache runs two clients of one PostgreSQL volume, the second
// with the listing cache: a directory walk is answered from memory with
// the right attributes; what the second client changes it sees at once;
// what the first creates the second finds at once (no cached negatives);
// what the first removes the second may see for at most the TTL.
func TestListingCache(t *testing.T) {
	const ttl = time.Second
	ms := pgClientsWith(t, 2, Options{ListingTTL: ttl})
	a, b := ms[0], ms[1]
	clk := &fakeClock{t: time.Unix(1e9, 0)}
	b.listings.now = clk.now

	dir := mkdir(t, a, root, base.RootIno, "d")
	var names []string
	inos := map[string]base.Ino{}
	for i := range 300 { // more than one attribute batch
		n := fmt.Sprintf("f%03d", i)
		names = append(names, n)
		inos[n] = create(t, a, root, dir, n)
	}
	walkUntilListed(t, b, dir, names)
	hits := b.listings.hits.Load()
	for _, n := range names {
		ino, at, pa, err := b.LookupDir(ctx, root, dir, n)
		ok(t, err)
		if ino != inos[n] || at != storeAttr(t, a, ino) || pa != storeAttr(t, a, dir) {
			t.Fatalf("%s: listed %d %+v (parent %+v), want %d %+v", n, ino, at, pa, inos[n], storeAttr(t, a, ino))
		}
	}
	if got := b.listings.hits.Load() - hits; got != int64(len(names)) {
		t.Fatalf("%d of %d lookups answered from the listing", got, len(names))
	}

	// Own changes are seen at once.
	ok(t, b.Unlink(ctx, root, dir, "f001"))
	_, _, err := b.Lookup(ctx, root, dir, "f001")
	wantErr(t, err, base.ErrNotFound)
	must[base.Attr](t)(b.SetAttr(ctx, root, inos["f002"], SetAttrRequest{Valid: SetMode, Mode: 0o600}))
	_, at, _, err := b.LookupDir(ctx, root, dir, "f002")
	ok(t, err)
	if at.Mode&0o777 != 0o600 {
		t.Fatalf("mode after own chmod: %o", at.Mode)
	}
	ok(t, b.Rename(ctx, root, dir, "f003", dir, "g003", 0))
	_, _, err = b.Lookup(ctx, root, dir, "f003")
	wantErr(t, err, base.ErrNotFound)

	// The other client's new name is found at once; its removal may be
	// missed until the TTL has passed, not after.
	// (A directory this client changed is listed again a TTL later.)
	clk.add(ttl)
	walkUntilListed(t, b, dir, names[10:])
	create(t, a, root, dir, "new")
	lookup(t, b, dir, "new")
	ok(t, a.Unlink(ctx, root, dir, "f100"))
	clk.add(ttl)
	_, _, err = b.Lookup(ctx, root, dir, "f100")
	wantErr(t, err, base.ErrNotFound)

	// A directory's attribute as this client's own commit wrote it is
	// answered from memory, for a TTL; another client's later change is
	// seen once it has passed.
	create(t, b, root, dir, "own")
	hits = b.listings.hits.Load()
	if got, want := must[base.Attr](t)(b.GetAttr(ctx, dir)), storeAttr(t, a, dir); got != want || b.listings.hits.Load() != hits+1 {
		t.Fatalf("own directory attribute %+v (hits %d), want %+v from memory", got, b.listings.hits.Load()-hits, want)
	}
	create(t, a, root, dir, "theirs")
	clk.add(ttl)
	if got, want := must[base.Attr](t)(b.GetAttr(ctx, dir)), storeAttr(t, a, dir); got != want {
		t.Fatalf("directory attribute after the TTL %+v, want %+v", got, want)
	}
	ok(t, b.Unlink(ctx, root, dir, "own"))
	ok(t, b.Unlink(ctx, root, dir, "theirs"))

	// Readdir with attributes (batched on the server) agrees with GetAttr.
	es := must[[]base.Entry](t)(b.Readdir(ctx, root, dir, "", 0, true))
	if len(es) != 299 { // 300, less f001 and f100, and new
		t.Fatalf("%d entries, want 299", len(es))
	}
	for _, e := range es {
		if *e.Attr != storeAttr(t, a, e.Ino) {
			t.Fatalf("readdir %s: %+v, want %+v", e.Name, *e.Attr, storeAttr(t, a, e.Ino))
		}
	}
}

// TestListingChangedWhileRead checks that a listing read while this client
// commits changes leaves out the names and inodes they wrote, is
// discarded when the directory's own attribute changed in a way this
// client does not know (each such read doubling the lookups that start
// the next), and that a listing held survives this client's own changes,
// less the names they wrote.
func TestListingChangedWhileRead(t *testing.T) {
	ms := pgClientsWith(t, 1, Options{ListingTTL: time.Hour})
	m := ms[0]
	dir := mkdir(t, m, root, base.RootIno, "d")
	f := create(t, m, root, dir, "f")
	e := create(t, m, root, dir, "e")
	c := m.listings
	readWhile := func(inos []base.Ino, names []dirName) map[string]listed {
		t.Helper()
		c.mu.Lock()
		c.dropListing(dir)
		c.loading[dir] = &listingLoad{}
		c.mu.Unlock()
		c.touched(inos, names)
		c.load(ctx, m, dir)
		c.mu.Lock()
		defer c.mu.Unlock()
		if l := c.dirs[dir]; l != nil {
			return l.entries
		}
		return nil
	}
	if got := readWhile(nil, []dirName{{dir, "f"}}); len(got) != 1 || got["e"].ino != e {
		t.Fatalf("read while f was written: %v, want e alone", got)
	}
	if got := readWhile([]base.Ino{e}, nil); len(got) != 1 || got["f"].ino != f {
		t.Fatalf("read while e's attribute was written: %v, want f alone", got)
	}
	c.mu.Lock()
	delete(c.own, dir) // the directory's attribute, as this client wrote it, unknown
	c.mu.Unlock()
	before := c.discarded.Load()
	if got := readWhile([]base.Ino{dir}, nil); got != nil || c.discarded.Load() != before+1 {
		t.Fatalf("read while the directory's attribute changed unknown to us kept: %v", got)
	}

	// The discarded read doubled the lookups that start one.
	lookups := func() int {
		for i := 1; ; i++ {
			lookup(t, m, dir, "f")
			c.mu.Lock()
			listed, loading := c.dirs[dir] != nil, c.loading[dir] != nil
			c.mu.Unlock()
			if loading {
				for loading {
					time.Sleep(time.Millisecond)
					c.mu.Lock()
					listed, loading = c.dirs[dir] != nil, c.loading[dir] != nil
					c.mu.Unlock()
				}
			}
			if listed {
				return i
			}
			if i > 2*listingMaxTrigger {
				t.Fatal("never listed")
			}
		}
	}
	if n := lookups(); n != 2*listingTrigger {
		t.Fatalf("listed after %d lookups, want %d", n, 2*listingTrigger)
	}
	// This client's own changes keep the listing: the names they wrote
	// are dropped from it (and looked up in the store), the others stay.
	g := create(t, m, root, dir, "g")
	create(t, m, root, dir, "h")
	ok(t, m.Unlink(ctx, root, dir, "h"))
	c.mu.Lock()
	_, listed := c.dirs[dir]
	c.mu.Unlock()
	if !listed {
		t.Fatal("listing dropped by this client's own creates")
	}
	hits := c.hits.Load()
	if lookup(t, m, dir, "g") != g || c.hits.Load() != hits {
		t.Fatal("new name not looked up in the store")
	}
	_, _, err := m.Lookup(ctx, root, dir, "h")
	wantErr(t, err, base.ErrNotFound)
	if lookup(t, m, dir, "f") != f || c.hits.Load() != hits+1 {
		t.Fatal("unchanged name not answered from the listing")
	}
}
