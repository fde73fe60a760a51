// Package cache holds the client's block caches: a bounded in-memory LRU
// (Memory), a bounded, persistent, self-verifying cache of files in local
// directories (Disk), and a single-flight helper (Group) so that
// concurrent misses for one block fetch it once.
//
// Caches map opaque string keys (object keys of immutable blocks) to bytes.
// They know nothing of files, chunks or the object store, and they never
// decide correctness: a cache may drop anything at any time, so callers must
// be able to refetch. Memory stores what it is given (callers verify before
// they Put); Disk checksums what it writes and never returns a block that
// fails its check, since files on a local disk can rot or be tampered with
// between restarts.
package cache

import (
	"container/list"
	"sync"
	"sync/atomic"
)

// entryOverhead is charged per cached item on top of its key and data, so
// that many tiny items cannot grow the cache without bound.
const entryOverhead = 64

// Stats are a cache's counters. Hits, Misses and Evictions only grow.
type Stats struct {
	Hits      int64 // Get found the key
	Misses    int64 // Get did not
	Bytes     int64 // charged now: len(key)+len(data)+64 per item
	Items     int64 // items now
	Evictions int64 // items dropped to make room (not Deletes or replacements)
	HitBytes  int64 // data bytes returned by hits
	PutBytes  int64 // data bytes given to Put (fetched from the tier below)
}

// Memory is a bounded in-memory block cache with least-recently-used
// eviction by size. It is safe for concurrent use.
//
// Slices stored and returned are shared, never copied: Put takes ownership
// of data, and the slice Get returns must not be modified by anyone.
type Memory struct {
	max     int64
	maxItem int64

	mu    sync.Mutex
	items map[string]*list.Element // of *entry
	lru   list.List                // front is most recently used
	bytes int64                    // guarded by mu; mirrored in stats.bytes

	hits, misses, evictions, bytesNow, itemsNow atomic.Int64
	hitBytes, putBytes                          atomic.Int64
}

type entry struct {
	key  string
	data []byte
}

func cost(key string, data []byte) int64 {
	return int64(len(key)) + int64(len(data)) + entryOverhead
}

// NewMemory returns a cache that holds at most maxBytes (as Stats.Bytes
// counts them). Items costing more than maxBytes/4 are not cached, so that
// one item cannot flush the rest. maxBytes <= 0 makes a cache that holds
// nothing.
func NewMemory(maxBytes int64) *Memory {
	m := &Memory{max: max(maxBytes, 0), items: make(map[string]*list.Element)}
	m.maxItem = m.max / 4
	return m
}

// Max returns the bound the cache holds at most.
func (m *Memory) Max() int64 { return m.max }

// MaxItem returns the cost above which Put ignores items.
func (m *Memory) MaxItem() int64 { return m.maxItem }

// Keeps reports whether Put would keep an item of n bytes under key (its
// cost is at most MaxItem).
func (m *Memory) Keeps(key string, n int) bool {
	return int64(len(key))+int64(n)+entryOverhead <= m.maxItem
}

// Get returns the data cached under key. The slice is shared: do not modify
// it.
func (m *Memory) Get(key string) ([]byte, bool) {
	m.mu.Lock()
	el, ok := m.items[key]
	if ok {
		m.lru.MoveToFront(el)
	}
	m.mu.Unlock()
	if !ok {
		m.misses.Add(1)
		return nil, false
	}
	data := el.Value.(*entry).data
	m.hits.Add(1)
	m.hitBytes.Add(int64(len(data)))
	return data, true
}

// Put caches data under key, replacing what was there, and evicts least
// recently used items until the cache is within its bound. It takes
// ownership of data: the caller must not modify it afterwards. Items that
// cost more than MaxItem are not cached (and any older item under key is
// dropped).
func (m *Memory) Put(key string, data []byte) {
	c := cost(key, data)
	m.putBytes.Add(int64(len(data)))
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.items[key]; ok {
		m.remove(el)
	}
	if c > m.maxItem {
		return
	}
	for m.bytes+c > m.max {
		m.remove(m.lru.Back())
		m.evictions.Add(1)
	}
	m.items[key] = m.lru.PushFront(&entry{key: key, data: data})
	m.bytes += c
	m.bytesNow.Store(m.bytes)
	m.itemsNow.Add(1)
}

// Delete drops key from the cache, if it is there.
func (m *Memory) Delete(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.items[key]; ok {
		m.remove(el)
	}
}

// remove drops el; m.mu is held.
func (m *Memory) remove(el *list.Element) {
	e := m.lru.Remove(el).(*entry)
	delete(m.items, e.key)
	m.bytes -= cost(e.key, e.data)
	m.bytesNow.Store(m.bytes)
	m.itemsNow.Add(-1)
}

// Stats returns the counters. Each is read atomically, but not all at one
// instant.
func (m *Memory) Stats() Stats {
	return Stats{
		Hits:      m.hits.Load(),
		Misses:    m.misses.Load(),
		Bytes:     m.bytesNow.Load(),
		Items:     m.itemsNow.Load(),
		Evictions: m.evictions.Load(),
		HitBytes:  m.hitBytes.Load(),
		PutBytes:  m.putBytes.Load(),
	}
}

// Load returns the data cached under key, or calls fetch to get it, caches
// the result and returns it. Concurrent Loads of one missing key share a
// single fetch through g (which may be shared by several caches or nil for
// no sharing). Errors are not cached. The returned slice is shared: do not
// modify it.
func (m *Memory) Load(g *Group, key string, fetch func() ([]byte, error)) ([]byte, error) {
	if data, ok := m.Get(key); ok {
		return data, nil
	}
	load := func() ([]byte, error) {
		data, err := fetch()
		if err == nil {
			m.Put(key, data)
		}
		return data, err
	}
	if g == nil {
		return load()
	}
	return g.Do(key, load)
}
