package meta

// The latest-version cache: on a store this process alone writes
// (kv.Observable: the embedded engine), the newest payload of attribute
// and directory-entry records, kept in memory so that lookups and getattrs
// (most of an NFS client's calls, and FUSE's when the kernel cache misses)
// read no store at all.
//
// Coherence comes from the store's commit observer, called in commit
// order around the moment a commit becomes visible:
//
//   - Committing drops every cached record the commit writes, so from
//     before the commit is visible until Committed, reads of them go to
//     the store; Committed caches the payloads the commit wrote at the
//     live epoch. A reader never sees the cache go back in time from what
//     the store already showed it.
//   - A view that misses fills the cache with what it read from the store
//     only if no commit touched the record's shard since before the view
//     began (a generation per shard, moved by both calls), so a value read
//     before a commit is never cached after it.
//
// Reads at the live view only (snapshots read the store); reads inside
// read-write transactions do not use it (their reads must be recorded by
// the store's conflict checks). Entries are bounded; a full shard drops an
// arbitrary entry.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

const latestShards = 64

// DefaultLatestCacheEntries bounds the cache: at about 200 bytes per
// entry, some 50 MiB.
const DefaultLatestCacheEntries = 1 << 18

type latestCache struct {
	// plain holds the plain records nearly every mutation reads: the
	// epoch records and the usage-counter shards (opPlains). Never
	// evicted; filled at open and by every commit that writes them.
	plainMu  sync.Mutex
	plain    map[string]plainEntry
	plainGen uint64 // moved by every commit that writes a plain record
	// jobs are the pending snapshot-deletion jobs (keys under pSnapJob),
	// known if jobsKnown and no commit writing one is between its two
	// observer calls (jobsBusy).
	jobs      map[string]bool
	jobsKnown bool
	jobsBusy  int

	// fresh are inodes allocated by this client, so never used before:
	// every key under their hold, xattr and chunk prefixes was written by
	// an observed commit, and the cache knows them all (see freshInode).
	freshMu sync.Mutex
	fresh   map[base.Ino]*freshInode

	seed     maphash.Seed
	perShard int
	epoch    atomic.Uint64 // live epoch, from the epoch record
	shards   [latestShards]latestShard
	hits     atomic.Uint64
	misses   atomic.Uint64
}

type latestShard struct {
	mu  sync.Mutex
	gen atomic.Uint64          // changed with mu held; read without it by begin
	m   map[string]latestEntry // logical key → its newest version, live
}

// freshInode lists the keys under a fresh inode's hold, xattr and chunk
// prefixes; busy counts commits writing some between their two observer
// calls, while the list may be behind the store.
type freshInode struct {
	keys map[string]bool
	busy int
	// For a directory: the versions of its entries (physical keys) and
	// how many each name has (made on the first entry); entriesLost once
	// there were more than maxFreshEntries (names are then read from the
	// store).
	dentKeys    map[string]bool
	dents       map[string]int
	entriesLost bool
}

// maxFreshEntries bounds the entries the cache lists per fresh directory.
const maxFreshEntries = 1 << 14

// freshPrefix reports whether key lies under a hold, xattr or chunk
// prefix, and whose.
func freshPrefix(key []byte) (base.Ino, bool) {
	ino, ok := keyIno(key)
	if !ok || key[0] != pHold && key[0] != pXattr && key[0] != pChunk && key[0] != pDentry {
		return 0, false
	}
	return ino, true
}

// absentEntry reports whether the cache knows that the directory entry
// logical (a dentry key) has no version at all: its directory is fresh,
// every entry of it was written by an observed commit, and none by that
// name.
func (c *latestCache) absentEntry(logical []byte) bool {
	dir, ok := keyIno(logical)
	if !ok || len(logical) < 1+8+1 || logical[0] != pDentry {
		return false
	}
	c.freshMu.Lock()
	defer c.freshMu.Unlock()
	f := c.fresh[dir]
	return f != nil && f.busy == 0 && !f.entriesLost && f.dents[string(logical)] == 0
}

// markFresh records that ino was just allocated, never used.
func (c *latestCache) markFresh(ino base.Ino) {
	c.freshMu.Lock()
	defer c.freshMu.Unlock()
	if len(c.fresh) >= c.perShard*latestShards {
		for old := range c.fresh {
			delete(c.fresh, old)
			break
		}
	}
	c.fresh[ino] = &freshInode{keys: map[string]bool{}}
}

// emptyPrefix reports whether the cache knows that no key lies under
// prefix (a hold, xattr or chunk prefix of a fresh inode).
func (c *latestCache) emptyPrefix(prefix []byte) bool {
	if len(prefix) != 9 {
		return false
	}
	ino, ok := freshPrefix(prefix)
	if !ok {
		return false
	}
	c.freshMu.Lock()
	defer c.freshMu.Unlock()
	f := c.fresh[ino]
	if f == nil || f.busy > 0 {
		return false
	}
	for k := range f.keys {
		if k[0] == prefix[0] {
			return false
		}
	}
	return true
}

// freshCommitting and freshCommitted follow commits' writes under fresh
// inodes' prefixes; an inode whose attribute is deleted, or whose commit
// failed, is forgotten.
func (c *latestCache) freshCommitting(ws []kv.Write) {
	c.freshMu.Lock()
	defer c.freshMu.Unlock()
	for _, w := range ws {
		if ino, ok := freshPrefix(w.Key); ok {
			if f := c.fresh[ino]; f != nil {
				f.busy++
			}
		}
	}
}

func (c *latestCache) freshCommitted(ws []kv.Write, ok bool) {
	c.freshMu.Lock()
	defer c.freshMu.Unlock()
	for _, w := range ws {
		if ino, isFresh := freshPrefix(w.Key); isFresh {
			f := c.fresh[ino]
			if f == nil {
				continue
			}
			f.busy--
			switch {
			case !ok:
				delete(c.fresh, ino)
			case w.Key[0] == pDentry:
				f.entryWritten(w)
			case w.Delete:
				delete(f.keys, string(w.Key))
			default:
				f.keys[string(w.Key)] = true
			}
			continue
		}
		if len(w.Key) == 1+8+epochLen && w.Key[0] == pAttr && (w.Delete || len(w.Value) == 1 && w.Value[0] == tagTombstone) {
			if ino, ok := keyIno(w.Key); ok {
				delete(c.fresh, ino)
			}
		}
	}
}

// entryWritten follows a committed write of one version of an entry.
func (f *freshInode) entryWritten(w kv.Write) {
	if f.entriesLost || len(w.Key) < 1+8+1+epochLen {
		return
	}
	if f.dents == nil {
		f.dentKeys, f.dents = map[string]bool{}, map[string]int{}
	}
	lk, _ := versionLogical(w.Key) // long enough: checked above
	logical := string(lk)
	switch had := f.dentKeys[string(w.Key)]; {
	case w.Delete && had:
		delete(f.dentKeys, string(w.Key))
		if f.dents[logical]--; f.dents[logical] <= 0 {
			delete(f.dents, logical)
		}
	case !w.Delete && !had:
		f.dentKeys[string(w.Key)] = true
		f.dents[logical]++
	}
	if len(f.dentKeys) > maxFreshEntries {
		f.dentKeys, f.dents, f.entriesLost = nil, nil, true
	}
}

type plainEntry struct {
	value   []byte // non-nil if present
	present bool
}

// plainCacheable: the plain records the cache holds.
func plainCacheable(key []byte) bool {
	switch {
	case len(key) == 1:
		return key[0] == pEpoch || key[0] == pFrozen
	case len(key) == 3:
		return key[0] == pCounter && (key[1] == counterUsedInodes || key[1] == counterUsedBytes)
	}
	return false
}

// noSnapshotJobs reports that the cache knows no snapshot-deletion job
// is pending.
func (c *latestCache) noSnapshotJobs() bool {
	c.plainMu.Lock()
	defer c.plainMu.Unlock()
	return c.jobsKnown && c.jobsBusy == 0 && len(c.jobs) == 0
}

// getPlain returns the cached value of a plain record (nil: absent).
func (c *latestCache) getPlain(key []byte) (value []byte, ok bool) {
	c.plainMu.Lock()
	e, ok := c.plain[string(key)]
	c.plainMu.Unlock()
	if !ok || !e.present {
		return nil, ok
	}
	return e.value[:len(e.value):len(e.value)], true
}

type latestEntry struct {
	epoch   uint64
	payload []byte
}

func newLatestCache(entries int) *latestCache {
	c := &latestCache{seed: maphash.MakeSeed(), perShard: max(1, entries/latestShards),
		plain: map[string]plainEntry{}, fresh: map[base.Ino]*freshInode{}, jobs: map[string]bool{}}
	for i := range c.shards {
		c.shards[i].m = make(map[string]latestEntry)
	}
	return c
}

// latestCacheable: the records the cache holds.
func latestCacheable(logical []byte) bool {
	return len(logical) > 0 && (logical[0] == pAttr || logical[0] == pDentry)
}

func (c *latestCache) shardIndex(logical []byte) int {
	return int(maphash.Bytes(c.seed, logical) % latestShards)
}

func (c *latestCache) shard(logical []byte) *latestShard {
	return &c.shards[c.shardIndex(logical)]
}

// latestGens are the shards' generations when a view began.
type latestGens [latestShards]uint64

// begin records the generations before a view's reads: what the view
// reads may be cached only if no commit touched its shard since.
func (c *latestCache) begin() *latestGens {
	var g latestGens
	for i := range c.shards {
		g[i] = c.shards[i].gen.Load()
	}
	return &g
}

// get returns logical's cached payload and the epoch of that version.
// The payload is shared with the cache: callers only read it (decode it),
// and its capacity is its length, so an append copies.
func (c *latestCache) get(logical []byte) (payload []byte, epoch uint64, ok bool) {
	sh := c.shard(logical)
	sh.mu.Lock()
	e, ok := sh.m[string(logical)]
	sh.mu.Unlock()
	if ok {
		c.hits.Add(1)
		return e.payload[:len(e.payload):len(e.payload)], e.epoch, true
	}
	c.misses.Add(1)
	return nil, 0, false
}

// fill caches payload, the version at epoch, read by a view that began at
// gens, unless a commit touched the record's shard since.
func (c *latestCache) fill(logical, payload []byte, epoch uint64, gens *latestGens) {
	i := c.shardIndex(logical)
	sh := &c.shards[i]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.gen.Load() != gens[i] {
		return
	}
	sh.put(string(logical), latestEntry{epoch, append([]byte(nil), payload...)}, c.perShard)
}

// put stores e under k, dropping an arbitrary entry from a full shard.
// Called with sh.mu held.
func (sh *latestShard) put(k string, e latestEntry, limit int) {
	if _, ok := sh.m[k]; !ok && len(sh.m) >= limit {
		for old := range sh.m {
			delete(sh.m, old)
			break
		}
	}
	sh.m[k] = e
}

// latestWrite is what one commit did to a cached record.
type latestWrite struct {
	logical string
	payload []byte // newest live payload written at the live epoch
	epoch   uint64 // that epoch
	known   bool   // payload is the record's newest version after the commit
}

// summarize reduces ws to the cached records they touch. A record's
// newest version after the commit is known when the commit set a live
// version at the live epoch and deleted no version at or above it.
func (c *latestCache) summarize(ws []kv.Write) []latestWrite {
	live := c.epoch.Load()
	var out []latestWrite
	idx := map[string]int{}
	for _, w := range ws {
		if len(w.Key) == len(epochKey()) && w.Key[0] == pEpoch && !w.Delete && len(w.Value) == 8 {
			live = binary.BigEndian.Uint64(w.Value)
			c.epoch.Store(live)
			continue
		}
		if len(w.Key) < 1+epochLen || !latestCacheable(w.Key) {
			continue
		}
		logical, epoch, _ := splitVersion(w.Key)
		i, seen := idx[string(logical)]
		if !seen {
			i = len(out)
			idx[string(logical)] = i
			out = append(out, latestWrite{logical: string(logical)})
		}
		lw := &out[i]
		switch {
		case epoch != live:
			// A version below the live epoch (pruning, or a job on a
			// snapshot's versions): the newest may be another one.
			if !w.Delete {
				lw.known, lw.payload = false, nil
			}
		case w.Delete:
			lw.known, lw.payload = false, nil
		case len(w.Value) >= 1 && w.Value[0] == tagLive:
			lw.known, lw.payload, lw.epoch = true, w.Value[1:], epoch
		default: // tombstone
			lw.known, lw.payload = false, nil
		}
	}
	return out
}

// Committing implements kv.CommitObserver.
func (c *latestCache) Committing(ws []kv.Write) {
	c.freshCommitting(ws)
	c.plainMu.Lock()
	for _, w := range ws {
		if plainCacheable(w.Key) {
			delete(c.plain, string(w.Key))
			c.plainGen++
		}
		if len(w.Key) > 0 && w.Key[0] == pSnapJob {
			c.jobsBusy++
			c.plainGen++
		}
	}
	c.plainMu.Unlock()
	c.touch(ws, true)
}

// touch moves the generation of the shard of every cached record ws
// writes, dropping the record too if drop.
func (c *latestCache) touch(ws []kv.Write, drop bool) {
	for _, w := range ws {
		logical, ok := versionLogical(w.Key)
		if !ok || !latestCacheable(w.Key) {
			continue
		}
		sh := c.shard(logical)
		sh.mu.Lock()
		if drop {
			delete(sh.m, string(logical))
		}
		sh.gen.Add(1)
		sh.mu.Unlock()
	}
}

// Committed implements kv.CommitObserver.
func (c *latestCache) Committed(ws []kv.Write, ok bool) {
	c.freshCommitted(ws, ok)
	c.touch(ws, false)
	c.plainMu.Lock()
	for _, w := range ws {
		if len(w.Key) > 0 && w.Key[0] == pSnapJob {
			c.jobsBusy--
			if !ok {
				c.jobsKnown = false // whether the job was written is unknown
			}
		}
	}
	c.plainMu.Unlock()
	if !ok {
		return
	}
	c.plainMu.Lock()
	for _, w := range ws {
		if plainCacheable(w.Key) {
			c.plain[string(w.Key)] = plainEntry{value: append([]byte{}, w.Value...), present: !w.Delete}
			c.plainGen++
		}
		if len(w.Key) > 0 && w.Key[0] == pSnapJob {
			if w.Delete {
				delete(c.jobs, string(w.Key))
			} else {
				c.jobs[string(w.Key)] = true
			}
		}
	}
	c.plainMu.Unlock()
	for _, lw := range c.summarize(ws) {
		if !lw.known {
			continue
		}
		sh := c.shard([]byte(lw.logical))
		sh.mu.Lock()
		sh.put(lw.logical, latestEntry{lw.epoch, append([]byte(nil), lw.payload...)}, c.perShard)
		sh.mu.Unlock()
	}
}

// errNeedStore is what cacheOnly's reads return: the read needs the store.
var errNeedStore = errors.New("meta: not in the latest-version cache")

// cacheOnly is the reader of a loose view's first try, from the cache
// alone: every read that reaches it fails with errNeedStore.
type cacheOnly struct{}

func (cacheOnly) Get([]byte) ([]byte, error) { return nil, errNeedStore }
func (cacheOnly) Scan(_, _ []byte, _ bool, _ func(k, v []byte) bool) error {
	return errNeedStore
}

// latestReader is a reader whose live-view reads may use a latestCache.
type latestReader interface {
	latest() (*latestCache, *latestGens)
}

// cachedReader is a loose view's reader with the cache and the
// generations from before the view began.
type cachedReader struct {
	kv.Reader
	lc   *latestCache
	gens *latestGens
}

func (r cachedReader) latest() (*latestCache, *latestGens) { return r.lc, r.gens }

// Firsts passes the reader's kv.FirstReader ability on.
func (r cachedReader) Firsts(ranges []kv.Range) ([]kv.Pair, error) {
	return kv.Firsts(r.Reader, ranges)
}

// latest is the cache of a read-only wtx over a cachedReader; nil for a
// read-write transaction.
func (t *wtx) latest() (*latestCache, *latestGens) {
	if rt, ok := t.Txn.(readTxn); ok {
		if cr, ok := rt.Reader.(cachedReader); ok {
			return cr.lc, cr.gens
		}
	}
	return nil, nil
}

// cachedGet is vget's read hook: where r has the latest-version cache and
// logical is a record it keeps, the newest payload from the cache, or else
// from the store, filling the cache (done false: no cache for this read).
func cachedGet(r kv.Reader, logical []byte, epoch uint64) (payload []byte, ok, done bool, err error) {
	lc, gens := latestOf(r, logical, epoch)
	if lc == nil {
		return nil, false, false, nil
	}
	if p, _, ok := lc.get(logical); ok {
		return p, true, true, nil
	}
	if lc.absentEntry(logical) {
		return nil, false, true, nil
	}
	payload, at, ok, err := vgetStore(r, logical, epoch)
	if err == nil && ok && gens != nil {
		lc.fill(logical, payload, at, gens)
	}
	return payload, ok, true, err
}

// latestOf returns r's cache for a live-view read of logical, or nil.
func latestOf(r kv.Reader, logical []byte, epoch uint64) (*latestCache, *latestGens) {
	if epoch != latestEpoch || !latestCacheable(logical) {
		return nil, nil
	}
	if lr, ok := r.(latestReader); ok {
		return lr.latest()
	}
	return nil, nil
}

// LatestCacheStats counts the latest-version cache's reads.
type LatestCacheStats struct {
	Enabled bool   `json:"-"`
	Hits    uint64 `json:"hits"`
	Misses  uint64 `json:"misses"`
	Entries int    `json:"entries"`
}

// LatestCacheStats reports the cache's counters (Enabled false: the store
// is shared with other processes, or the cache is off).
func (m *Meta) LatestCacheStats() LatestCacheStats {
	c := m.lc
	if c == nil {
		return LatestCacheStats{}
	}
	st := LatestCacheStats{Enabled: true, Hits: c.hits.Load(), Misses: c.misses.Load()}
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		st.Entries += len(sh.m)
		sh.mu.Unlock()
	}
	return st
}

// openLatestCache starts the cache if the store reports every commit.
func (m *Meta) openLatestCache(ctx context.Context) error {
	if m.opts.LatestCacheEntries < 0 {
		return nil
	}
	ob, ok := m.store.(kv.Observable)
	if !ok {
		return nil
	}
	c := newLatestCache(m.opts.LatestCacheEntries)
	stop, ok := ob.Observe(c)
	if !ok {
		return nil
	}
	// Read after observing: an epoch committed since is already in c.
	// The plain records are cached only if no commit wrote any of them
	// meanwhile (then each is cached by the next commit that writes it,
	// and read from the store until then).
	keys := [][]byte{epochKey(), frozenKey()}
	for _, kind := range []byte{counterUsedInodes, counterUsedBytes} {
		for i := range usageShards {
			keys = append(keys, counterShardKey(kind, byte(i)))
		}
	}
	vals := make([][]byte, len(keys))
	var jobs []string
	c.plainMu.Lock()
	gen := c.plainGen
	c.plainMu.Unlock()
	err := m.store.View(ctx, func(r kv.Reader) error {
		for i, k := range keys {
			v, err := r.Get(k)
			if err != nil {
				return err
			}
			vals[i] = v
		}
		return r.Scan(prefixOnly(pSnapJob), kv.PrefixEnd(prefixOnly(pSnapJob)), false, func(k, _ []byte) bool {
			jobs = append(jobs, string(k))
			return true
		})
	})
	var e uint64
	if err == nil && vals[0] != nil {
		e, err = decodeU64(vals[0])
	}
	if err != nil {
		stop()
		return fmt.Errorf("epoch record: %w", err)
	}
	c.epoch.CompareAndSwap(0, e)
	c.plainMu.Lock()
	if c.plainGen == gen {
		for i, k := range keys {
			c.plain[string(k)] = plainEntry{value: vals[i], present: vals[i] != nil}
		}
		for _, k := range jobs {
			c.jobs[k] = true
		}
		c.jobsKnown = true
	}
	c.plainMu.Unlock()
	m.lc, m.stopLatest = c, stop
	return nil
}

// singleVersions reports, from the latest-version cache, that no record
// has a version older than its newest: no snapshot is frozen (t.frozen,
// read by this transaction) and no deletion of one is still pruning
// versions (noted as read). Every write prunes older versions that no
// snapshot sees, so then each record has one. Called after loadEpochs.
func (t *wtx) singleVersions() bool {
	if t.lc == nil || len(t.frozen) != 0 {
		return false
	}
	rn, ok := t.Txn.(kv.ReadNoter)
	if !ok || !t.lc.noSnapshotJobs() {
		return false
	}
	start := prefixOnly(pSnapJob)
	rn.NoteFirst(start, kv.PrefixEnd(start), kv.Pair{})
	return true
}

// cacheNoter returns the transaction's kv.ReadNoter when values of the
// latest-version cache may stand in for its reads: there is a cache and
// the transaction has written nothing yet.
func (t *wtx) cacheNoter() (kv.ReadNoter, bool) {
	if t.lc == nil || t.wrote {
		return nil, false
	}
	rn, ok := t.Txn.(kv.ReadNoter)
	return rn, ok
}

// cachedLogicals takes the records the latest-version cache holds, or
// knows absent (an entry of a fresh directory), as prefetched (noting them
// as read) and returns the others.
func (t *wtx) cachedLogicals(logicals [][]byte) [][]byte {
	rn, ok := t.cacheNoter()
	if !ok || len(logicals) == 0 {
		return logicals
	}
	var rest [][]byte
	for _, l := range logicals {
		var p kv.Pair
		if !latestCacheable(l) {
			rest = append(rest, l)
			continue
		}
		if v, epoch, ok := t.lc.get(l); ok {
			p = kv.Pair{Key: versionKey(l, epoch), Value: append([]byte{tagLive}, v...)}
		} else if !t.lc.absentEntry(l) {
			rest = append(rest, l)
			continue
		}
		r := newestRange(l)
		rn.NoteFirst(r.Start, r.End, p)
		t.keepVersion(l, p)
	}
	return rest
}

// cachedPlains takes the plain keys the latest-version cache holds as
// prefetched (noting them as read) and returns the others.
func (t *wtx) cachedPlains(plains [][]byte) [][]byte {
	rn, ok := t.cacheNoter()
	if !ok || len(plains) == 0 {
		return plains
	}
	var rest [][]byte
	for _, k := range plains {
		v, ok := t.lc.getPlain(k)
		if !ok {
			rest = append(rest, k)
			continue
		}
		p := kv.Pair{}
		if v != nil {
			p = kv.Pair{Key: k, Value: v}
		}
		rn.NoteFirst(k, append(bytes.Clone(k), 0), p)
		if t.plain == nil {
			t.plain = make(map[string][]byte)
		}
		t.plain[string(k)] = v
	}
	return rest
}

// prefetchUnlinkCached is prefetchUnlink where the latest-version cache
// holds parent's attribute, the entry and its inode's attribute: only the
// plain keys and the inode's hold, xattr and chunk ranges are read. done
// is false if the cache cannot answer.
func (t *wtx) prefetchUnlinkCached(parent base.Ino, dk []byte) (done bool, err error) {
	if t.lc == nil || t.wrote {
		return false, nil
	}
	p, _, ok := t.lc.get(dk)
	if !ok || len(p) != dentryLen {
		return false, nil
	}
	ino, _, err := decodeDentry(p)
	if err != nil {
		return false, nil
	}
	if len(t.cachedLogicals([][]byte{attrKey(parent), dk, attrKey(ino)})) != 0 {
		return false, nil // the caller's reads replace what was kept
	}
	if t.empty == nil {
		t.empty = make(map[string]bool)
	}
	rn := t.Txn.(kv.ReadNoter) // cachedLogicals checked
	var read [][]byte
	var extra []kv.Range
	chunks := -1 // index in read of the chunk prefix
	for _, pr := range [][]byte{holdPrefix(ino), xattrPrefix(ino), chunkPrefix(ino)} {
		// As the follows of prefetchUnlink: every key under these
		// prefixes sorts before 16 bytes of 0xff.
		r := kv.Range{Start: pr, End: append(bytes.Clone(pr), bytes.Repeat([]byte{0xff}, 16)...)}
		if t.lc.emptyPrefix(pr) {
			rn.NoteFirst(r.Start, r.End, kv.Pair{})
			t.empty[string(pr)] = true
			continue
		}
		if pr[0] == pChunk {
			chunks = len(read)
		}
		read, extra = append(read, pr), append(extra, r)
	}
	if chunks >= 0 {
		// And whether a chunk beyond index 0 exists: a small file has
		// none, and then the first version read is all of its chunks.
		extra = append(extra, kv.Range{Start: chunkKey(ino, 1), End: extra[chunks].End})
	}
	ps, err := t.prefetchWith(nil, t.opPlains(), extra)
	if err != nil {
		return true, err
	}
	for i, pr := range read {
		if ps[i].Key == nil {
			t.empty[string(pr)] = true
		}
	}
	if chunks >= 0 {
		first, beyond, k0 := ps[chunks], ps[len(read)], chunkKey(ino, 0)
		if beyond.Key == nil && len(first.Key) == len(k0)+epochLen && bytes.HasPrefix(first.Key, k0) &&
			len(first.Value) > 0 && first.Value[0] == tagLive {
			t.keepVersion(k0, first)
			if t.soleChunk == nil {
				t.soleChunk = make(map[base.Ino]bool)
			}
			t.soleChunk[ino] = true
		}
	}
	if t.fetched == nil {
		t.fetched = make(map[base.Ino]bool)
	}
	t.fetched[ino] = true
	return true, nil
}
