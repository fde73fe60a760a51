package meta

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// Listing cache: lookups on a shared engine answered from a recent listing
// of the directory.
//
// On a store other processes write (PostgreSQL), every lookup the kernel
// sends once its entry has expired costs a statement on the server. A
// program that walks a directory (stat of each file, ls -l, a backup)
// sends one per file. Once lookups that find their name keep coming for
// one directory, the client reads the whole directory with its entries'
// attributes in a few statements (Readdir with attributes batched) and
// answers the next lookups of names it holds from memory, for at most
// ListingTTL after the read began: the same bound the kernel's own entry
// and attribute caches have, so no lookup sees anything older than the
// kernel could have kept.
//
// What this client changes it drops first, before the operation returns:
// every committed write of an entry (vset, vdel) drops that name from the
// directory's listing, and of an attribute the entries naming the inode;
// a listed directory's own attribute is replaced by the one its commit
// wrote (the listing is dropped if the outcome is unknown). A listing
// read while this client commits leaves out the names and inodes the
// commit wrote, and is discarded if the directory's own attribute changed
// to a value this client does not know. A name a listing does not hold
// is looked up in the store (negative answers are never cached: a file
// another client has just created is seen at once), so a listing less
// some names is still right.
//
// Each listing dropped or discarded before it paid for itself doubles the
// lookups its directory needs to be listed again (up to
// listingMaxTrigger; back to listingTrigger once a listing lasts its
// TTL). Hard-linked files are not cached (one inode under several names
// in several listings), nor directories of more than listingMaxEntries
// entries.
//
// The same TTL bounds the directory attributes this client's own commits
// wrote, which answer getattrs of those directories (dirAttr).
const (
	// listingTrigger is the number of lookups that found their name in the
	// store, within one TTL, that make a directory worth listing.
	listingTrigger = 8
	// listingMaxTrigger bounds the doubled trigger of a directory whose
	// listings this client keeps dropping.
	listingMaxTrigger = 4096
	// listingMaxEntries bounds one listing.
	listingMaxEntries = 16384
	// listingMaxDirs bounds the directories listed at once.
	listingMaxDirs = 256
)

type listed struct {
	ino  base.Ino
	attr base.Attr
}

type listing struct {
	at      time.Time // when the read began
	parent  base.Attr
	entries map[string]listed // nil: too large, not cached until at+ttl
	hits    int
}

// dirState is what the cache knows of one directory besides its listing.
type dirState struct {
	found   int       // lookups found in the store since window
	window  time.Time // start of the counting window
	trigger int       // found that starts a listing; 0: listingTrigger
}

// listingLoad is a listing being read: commits meanwhile note what they
// wrote, which the listing then leaves out.
type listingLoad struct {
	names map[string]bool   // entries of the directory written meanwhile
	inos  map[base.Ino]bool // attributes written meanwhile
}

type listingCache struct {
	ttl time.Duration
	now func() time.Time

	mu      sync.Mutex
	own     map[base.Ino]ownAttr // directory attributes this client committed
	dirs    map[base.Ino]*listing
	byIno   map[base.Ino]dirName // listed inode -> where it is listed (no hard links: one name)
	state   map[base.Ino]*dirState
	loading map[base.Ino]*listingLoad
	// opened are the attributes opens of files read in their transaction,
	// for the GETATTR that follows (the front end drops the kernel's
	// cached attributes at every open): each answers one getattr within
	// the TTL. attrGen moves with every commit of this client that writes
	// attributes, so an attribute read before one is not kept.
	opened  map[base.Ino]ownAttr
	attrGen uint64

	hits, loads, discarded atomic.Int64
}

func newListingCache(ttl time.Duration) *listingCache {
	return &listingCache{
		ttl: ttl, now: time.Now,
		own:     make(map[base.Ino]ownAttr),
		dirs:    make(map[base.Ino]*listing),
		byIno:   make(map[base.Ino]dirName),
		state:   make(map[base.Ino]*dirState),
		loading: make(map[base.Ino]*listingLoad),
		opened:  make(map[base.Ino]ownAttr),
	}
}

// forgetOpened drops the attribute an earlier open of ino kept, and
// returns the generation to pass to openedAt for attributes read from now
// on.
func (c *listingCache) forgetOpened(ino base.Ino) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.opened, ino)
	return c.attrGen
}

// openedAt keeps a, the attribute of file ino an open read after
// forgetOpened returned gen, for the next getattr of ino, unless this
// client committed attributes meanwhile.
func (c *listingCache) openedAt(ino base.Ino, a base.Attr, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.attrGen != gen {
		return
	}
	if len(c.opened) >= 4096 {
		clear(c.opened)
	}
	c.opened[ino] = ownAttr{attr: a, at: c.now()}
}

// openedAttr returns, once, the attribute an open of ino read less than a
// TTL ago.
func (c *listingCache) openedAttr(ino base.Ino) (base.Attr, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o, ok := c.opened[ino]
	if !ok {
		return base.Attr{}, false
	}
	delete(c.opened, ino)
	if c.now().Sub(o.at) >= c.ttl {
		return base.Attr{}, false
	}
	c.hits.Add(1)
	return o.attr, true
}

// ListingStats counts the listing cache's work.
type ListingStats struct {
	Hits      int64 `json:"hits"`      // lookups answered from a listing, getattrs of directories from own commits
	Loads     int64 `json:"loads"`     // directories listed
	Discarded int64 `json:"discarded"` // listings read and not kept: this client changed the directory's attribute meanwhile
	Dirs      int   `json:"dirs"`      // listings held
}

// ListingStats returns the listing cache's counters; ok is false when the
// cache is off.
func (m *Meta) ListingStats() (s ListingStats, ok bool) {
	c := m.listings
	if c == nil {
		return s, false
	}
	c.mu.Lock()
	s.Dirs = len(c.dirs)
	c.mu.Unlock()
	s.Hits, s.Loads, s.Discarded = c.hits.Load(), c.loads.Load(), c.discarded.Load()
	return s, true
}

// lookup answers a lookup of name in parent from a fresh listing, or
// reports ok false. The parent's permissions are checked as the store
// path checks them; a denial goes to the store path, which reports it.
func (c *listingCache) lookup(cl *Caller, parent base.Ino, name string) (base.Ino, base.Attr, base.Attr, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.dirs[parent]
	if l == nil || l.entries == nil || c.now().Sub(l.at) >= c.ttl {
		return 0, base.Attr{}, base.Attr{}, false
	}
	e, ok := l.entries[name]
	if !ok {
		return 0, base.Attr{}, base.Attr{}, false
	}
	p := l.parent
	if access(cl, &p, MayExec) != nil {
		return 0, base.Attr{}, base.Attr{}, false
	}
	l.hits++
	c.hits.Add(1)
	return e.ino, e.attr, p, true
}

// found notes a lookup in parent that found its name in the store, and
// reports whether parent should be listed now (the caller then calls
// load, once).
func (c *listingCache) found(parent base.Ino) bool {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.stateOf(parent, now)
	if now.Sub(st.window) >= c.ttl {
		st.found, st.window = 0, now
	}
	st.found++
	if st.found < max(st.trigger, listingTrigger) || c.loading[parent] != nil {
		return false
	}
	if l := c.dirs[parent]; l != nil {
		if now.Sub(l.at) < c.ttl {
			return false // fresh (or known too large)
		}
		if l.entries != nil {
			st.trigger = 0 // it lasted: list as eagerly as at first
		}
		c.dropListing(parent)
	}
	st.found = 0
	c.loading[parent] = &listingLoad{}
	return true
}

// stateOf returns the state of dir, made if missing; c.mu is held.
func (c *listingCache) stateOf(dir base.Ino, now time.Time) *dirState {
	st := c.state[dir]
	if st == nil {
		if len(c.state) >= 4*listingMaxDirs {
			c.prune(now)
		}
		st = &dirState{window: now}
		c.state[dir] = st
	}
	return st
}

// backOff doubles the lookups that start a listing of the directory.
func (st *dirState) backOff() {
	st.trigger = min(2*max(st.trigger, listingTrigger), listingMaxTrigger)
}

// prune drops expired listings and idle directory states; c.mu is held.
func (c *listingCache) prune(now time.Time) {
	for d, l := range c.dirs {
		if now.Sub(l.at) >= c.ttl {
			c.dropListing(d)
		}
	}
	for d, st := range c.state {
		if now.Sub(st.window) >= c.ttl && st.trigger == 0 && c.loading[d] == nil {
			delete(c.state, d)
		}
	}
}

// dropListing forgets the listing of dir; c.mu is held.
func (c *listingCache) dropListing(dir base.Ino) {
	l := c.dirs[dir]
	if l == nil {
		return
	}
	for _, e := range l.entries {
		if c.byIno[e.ino].dir == dir {
			delete(c.byIno, e.ino)
		}
	}
	delete(c.dirs, dir)
}

// load lists parent (found returned true) and keeps the listing, less
// what this client's commits wrote meanwhile.
func (c *listingCache) load(ctx context.Context, m *Meta, parent base.Ino) {
	start := c.now()
	var p base.Attr
	var ents []base.Entry
	err := m.view(ctx, func(r kv.Reader) (err error) {
		p, ents, err = readdirDir(r, RootCaller, parent, "", listingMaxEntries+1, true, latestEpoch, false)
		return err
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	ld := c.loading[parent]
	delete(c.loading, parent)
	if err != nil {
		return // the lookups go on through the store
	}
	c.loads.Add(1)
	// What this client wrote meanwhile may or may not be in what was
	// read: the names and inodes it wrote are left out (looked up in the
	// store), the directory's attribute is the one it committed, if known.
	if ld.inos[parent] {
		o, ok := c.own[parent]
		if !ok || o.attr.Ctime < p.Ctime {
			c.discarded.Add(1)
			c.stateOf(parent, c.now()).backOff()
			return
		}
		p = o.attr
	}
	l := &listing{at: start, parent: p}
	if len(ents) <= listingMaxEntries {
		l.entries = make(map[string]listed, len(ents))
		for _, e := range ents {
			if ld.inos[e.Ino] || ld.names[e.Name] {
				continue
			}
			if e.Attr == nil || e.Attr.Type != base.TypeDir && e.Attr.Nlink > 1 {
				continue // hard links are not cached
			}
			l.entries[e.Name] = listed{ino: e.Ino, attr: *e.Attr}
		}
	}
	c.dropListing(parent)
	if len(c.dirs) >= listingMaxDirs {
		c.prune(c.now())
		if len(c.dirs) >= listingMaxDirs {
			return
		}
	}
	c.dirs[parent] = l
	for name, e := range l.entries {
		if old, ok := c.byIno[e.ino]; ok && old.dir != parent {
			// The same inode listed elsewhere (a directory moved between
			// the two reads): keep neither.
			c.dropListing(old.dir)
		}
		c.byIno[e.ino] = dirName{parent, name}
	}
}

// touched drops the listed names a commit of this client wrote, and marks
// the reads of listings in flight it touched. It runs before the
// operation returns. A listing that no longer holds a name is still right
// about the others: lookups of that name go to the store, which has this
// client's change. (Attributes are settled by committed.)
func (c *listingCache) touched(inos []base.Ino, names []dirName) {
	if len(inos) == 0 && len(names) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range names {
		if l := c.dirs[n.dir]; l != nil {
			if e, ok := l.entries[n.name]; ok {
				delete(l.entries, n.name)
				if c.byIno[e.ino] == n {
					delete(c.byIno, e.ino)
				}
			}
		}
	}
	for d, ld := range c.loading {
		for _, n := range names {
			if n.dir == d {
				if ld.names == nil {
					ld.names = make(map[string]bool)
				}
				ld.names[n.name] = true
			}
		}
		if ld.inos == nil && len(inos) > 0 {
			ld.inos = make(map[base.Ino]bool)
		}
		for _, ino := range inos {
			ld.inos[ino] = true
		}
	}
}

// ownAttr is a directory's attribute as this client's commit wrote it.
type ownAttr struct {
	attr base.Attr
	at   time.Time
}

// dirAttr returns the attribute of directory ino as this client last
// committed it, if that was less than a TTL ago. Creating or removing
// files invalidates the directory's attributes in the kernel, which asks
// for them again (for its permission checks) before the next operation
// in it: one statement per create or unlink, answered here instead. The
// answer is no older than the kernel could have kept; another client's
// change may be missed for as long.
func (c *listingCache) dirAttr(ino base.Ino) (base.Attr, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o, ok := c.own[ino]
	if !ok || c.now().Sub(o.at) >= c.ttl {
		return base.Attr{}, false
	}
	c.hits.Add(1)
	return o.attr, true
}

// committed records the directory attributes an update wrote (written:
// those of its last attempt, valid only if err is nil) and forgets the
// other attributes it touched (inos), whatever the outcome. Of two
// updates of one directory, the later commit wrote the later ctime (it
// read the earlier one's record): an older one is never put back.
//
// A listing of such a directory takes the attribute its commit wrote as
// its own (permission checks and the parent attribute of lookups use it);
// if the outcome is unknown, or the directory was removed, the listing
// is dropped.
func (c *listingCache) committed(inos []base.Ino, written map[base.Ino]base.Attr, err error) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(inos) > 0 {
		c.attrGen++
		for _, ino := range inos {
			delete(c.opened, ino)
		}
	}
	for _, ino := range inos {
		a, ok := written[ino]
		if err != nil || !ok {
			c.dropEntry(ino)
			delete(c.own, ino)
			if l := c.dirs[ino]; l != nil {
				st := c.stateOf(ino, now)
				if l.entries != nil && now.Sub(l.at) < c.ttl && l.hits < max(st.trigger, listingTrigger) {
					st.backOff() // dropped before it saved the lookups it took
				}
				c.dropListing(ino)
				st.found = 0
			}
			continue
		}
		if l := c.dirs[ino]; l != nil && l.parent.Ctime <= a.Ctime {
			l.parent = a
		}
		c.entryAttr(ino, a)
		if o, had := c.own[ino]; had && o.attr.Ctime > a.Ctime {
			continue
		}
		if len(c.own) >= listingMaxEntries {
			for k, o := range c.own {
				if now.Sub(o.at) >= c.ttl {
					delete(c.own, k)
				}
			}
			if len(c.own) >= listingMaxEntries {
				continue
			}
		}
		c.own[ino] = ownAttr{attr: a, at: now}
	}
}

// entryAttr gives the listed entry of directory ino the attribute this
// client's commit wrote (unless it holds a later one); c.mu is held.
func (c *listingCache) entryAttr(ino base.Ino, a base.Attr) {
	at, ok := c.byIno[ino]
	if !ok {
		return
	}
	if l := c.dirs[at.dir]; l != nil {
		if e, ok := l.entries[at.name]; ok && e.ino == ino && e.attr.Ctime <= a.Ctime {
			l.entries[at.name] = listed{ino: ino, attr: a}
		}
	}
}

// dropEntry drops the listed entry naming ino; c.mu is held.
func (c *listingCache) dropEntry(ino base.Ino) {
	at, ok := c.byIno[ino]
	if !ok {
		return
	}
	if l := c.dirs[at.dir]; l != nil {
		if e, ok := l.entries[at.name]; ok && e.ino == ino {
			delete(l.entries, at.name)
		}
	}
	delete(c.byIno, ino)
}

// touchLog collects, across the attempts of one update, the inodes whose
// attribute and the names whose entries it wrote.
type touchLog struct {
	mu    sync.Mutex
	inos  []base.Ino
	names []dirName
	// owned are the inodes whose own records (freshPrefixes) the update
	// wrote, for the write-back log's knowledge of fresh inodes; noted
	// only if keys (write-back is on).
	keys  bool
	owned []base.Ino
	// unleased are the directories whose lease records it deleted.
	unleased []base.Ino
	// deciding are the inodes whose holds it read outside the write-back
	// log (op.decidingHeld), once per read.
	deciding []base.Ino
}

// noteKey records a write (del: a delete) of the record key (any kind).
func (l *touchLog) noteKey(key []byte, del bool) {
	if !l.keys {
		return
	}
	ino, ok := keyIno(key)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if freshPrefixes[key[0]] {
		l.owned = append(l.owned, ino)
	}
	if key[0] == pLease && del && len(key) == 9 {
		l.unleased = append(l.unleased, ino)
	}
}

// dirName is an entry's name in its directory.
type dirName struct {
	dir  base.Ino
	name string
}

// note records a write of the versioned record logical.
func (l *touchLog) note(logical []byte) {
	ino, ok := keyIno(logical)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch logical[0] {
	case pAttr:
		l.inos = append(l.inos, ino)
	case pDentry:
		if _, name, err := decodeDentryKey(logical); err == nil {
			l.names = append(l.names, dirName{ino, string(name)})
		}
	}
}
