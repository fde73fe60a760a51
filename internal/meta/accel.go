package meta

import (
	"strings"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// Accelerators are the speed-ups meta runs beside its plain paths, each
// one a layer the plain path is correct without (STYLE 16). Open chooses
// them once, from the store's declared profile (kv.Profile) and Options,
// in chooseAccelerators; nothing else decides whether one runs.
type Accelerators struct {
	// LatestCache: the newest attributes and entries in memory, kept
	// exact by the commit observer (latestcache.go). Single-writer stores.
	LatestCache bool
	// MemoryHolds: open-file holds in memory, not in records (Options.
	// MemoryHolds; with the latest cache, on a store with kv.Toucher).
	MemoryHolds bool
	// ListingCache: lookups answered from listings at most this old
	// (listingcache.go); 0 is off. Stores others write.
	ListingCache time.Duration
	// GroupCommit: concurrent creates and unlinks in one transaction
	// (groupcommit.go). Stores others write.
	GroupCommit bool
	// StartAhead: a lookup starts the transaction of the create that
	// usually follows it (startahead.go, kv.Starter).
	StartAhead bool
	// Leases: directory leases and speculative creates (lease.go,
	// speculative.go, kv.GuardedWriter), for clients with a session.
	Leases bool
	// WriteBack: creates and unlinks in leased directories acknowledged
	// before they commit, committed in batches (writeback.go).
	WriteBack bool
	// BlindOpens: the first open of a file reads it and writes its hold
	// in one round trip (open.go, openBlind; kv.BlindWriter, or an
	// ordinary update where the store has no such ability). Stores
	// without the latest-version cache.
	BlindOpens bool
}

// chooseAccelerators decides which accelerators run on a store with
// profile p: the latest-version cache where this process is the only
// writer, else the ones that save round trips to a server.
func chooseAccelerators(p kv.Profile, o Options) Accelerators {
	var a Accelerators
	a.LatestCache = p.SingleWriter && p.Observable && o.LatestCacheEntries >= 0
	if a.LatestCache {
		a.MemoryHolds = o.MemoryHolds && !o.ReadOnly && p.Toucher
		return a
	}
	if o.ListingTTL > 0 {
		a.ListingCache = o.ListingTTL
	}
	a.GroupCommit = !o.NoGroupCommit
	a.StartAhead = p.Starter && !o.ReadOnly
	a.Leases = p.GuardedWriter && !o.ReadOnly && !o.NoLeases
	a.WriteBack = a.Leases && o.WriteBack
	a.BlindOpens = !o.NoBlindOpens && !o.ReadOnly
	return a
}

// String lists the accelerators that run, for status: "latest cache,
// memory holds", or "none".
func (a Accelerators) String() string {
	var on []string
	for _, x := range []struct {
		on   bool
		name string
	}{
		{a.LatestCache, "latest-version cache"}, {a.MemoryHolds, "open-file holds in memory"},
		{a.ListingCache > 0, "listing cache (" + a.ListingCache.String() + ")"}, {a.GroupCommit, "group commit"},
		{a.StartAhead, "started-ahead creates"}, {a.Leases, "directory leases and speculative creates"},
		{a.WriteBack, "write-back of creates and unlinks"},
		{a.BlindOpens, "one-round-trip opens"},
	} {
		if x.on {
			on = append(on, x.name)
		}
	}
	if len(on) == 0 {
		return "none"
	}
	return strings.Join(on, ", ")
}

// Accelerators returns the accelerators this client runs.
func (m *Meta) Accelerators() Accelerators { return m.accel }

// Profile returns the profile of the store this client opened.
func (m *Meta) Profile() kv.Profile { return m.profile }

// txnAccel is the accelerators' state in one attempt of a transaction
// (wtx embeds it). The versioned store (versioned.go, prefetch.go) knows
// nothing of it beyond its hooks: writing, before each versioned write;
// prefetchPlains, in each prefetch; and the operations call dirWriting
// before writing or destroying a directory's attributes.
type txnAccel struct {
	// lc, if set, may answer prefetches before the first write: the store
	// checks reads at commit and takes cached ones (kv.ReadNoter;
	// latestcache.go).
	lc *latestCache
	// touched, if set, collects the records this update writes, for the
	// listing cache and the leases (listingcache.go, lease.go); dirAttrs are
	// the directory attributes this attempt wrote (only if touched is set).
	touched  *touchLog
	dirAttrs map[base.Ino]base.Attr
	// leaseCheck: changes of a directory check its lease (lease.go), as
	// session leaseSid (0: none); leaseOK are the directories checked.
	leaseCheck bool
	leaseSid   uint64
	leaseOK    map[base.Ino]bool
	// leaseOut, if set, receives the value of the lease record of the
	// directory prefetchEntry reads (a lookup's: lookupLoose).
	leaseOut *[]byte
}

// keyWritten is the hook the store calls when it writes (del: deletes)
// the record key, of any kind: the write-back log's knowledge of fresh
// inodes and of lease records a change deletes (writeback.go).
func (t *wtx) keyWritten(key []byte, del bool) {
	if t.touched != nil {
		t.touched.noteKey(key, del)
	}
}

// entryLease is the hook prefetchEntry calls: the range of parent's
// lease record, to read with the entry, if the lookup wants it
// (leaseOut).
func (t *wtx) entryLease(parent base.Ino) (kv.Range, bool) {
	if t.leaseOut == nil {
		return kv.Range{}, false
	}
	return exactRange(leaseKey(parent)), true
}

// entryLeaseRead receives what entryLease's range held.
func (t *wtx) entryLeaseRead(p kv.Pair) {
	*t.leaseOut = p.Value
}

// writing is the hook the versioned store calls before it writes (or,
// del, deletes) logical: a new entry in a directory another client leases
// is refused (leasedError), and the listing cache notes the record.
func (t *wtx) writing(logical []byte, del bool) error {
	if !del {
		if dir, ok := keyIno(logical); ok && logical[0] == pDentry && len(logical) > 9 {
			if err := t.checkLease(dir); err != nil {
				return err
			}
		}
	}
	if t.touched != nil {
		t.touched.note(logical)
		t.touched.noteKey(logical, del) // versioned writes reach the store past wtx.Set
	}
	return nil
}

// dirWriting is the hook an operation calls before it writes the
// attributes of directory ino as a, or destroys it (a nil): a directory
// another client leases is refused, and the listing cache keeps a.
func (t *wtx) dirWriting(ino base.Ino, a *base.Attr) error {
	if err := t.checkLease(ino); err != nil {
		return err
	}
	if a != nil && t.touched != nil {
		if t.dirAttrs == nil {
			t.dirAttrs = make(map[base.Ino]base.Attr)
		}
		t.dirAttrs[ino] = *a
	}
	return nil
}

// prefetchPlains is the hook a prefetch of logicals calls to add plain
// keys to read with plains: the lease records of the directories whose
// attributes or entries they are (withLeases).
func (t *wtx) prefetchPlains(plains, logicals [][]byte) [][]byte {
	return t.withLeases(plains, logicals)
}
