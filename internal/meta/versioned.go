package meta

// Versioned records: every file-system record is stored as one physical key
// per epoch in which it was written (see keys.go). Reads take the newest
// version at or below the reading epoch; writes go to the live epoch and
// drop older versions that no frozen snapshot can see any more.

import (
	"bytes"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// latestEpoch reads the newest version of every record. No version is ever
// newer than the live epoch, so this is the live view without having to
// read the epoch record.
const latestEpoch = ^uint64(0)

type version struct {
	epoch uint64
	value []byte // tagged
}

// vget returns the payload of logical at epoch; ok is false if the record
// does not exist (no version at or below epoch, or a tombstone).
//
// A reader with the latest-version cache answers from it (cachedGet, the
// read hook of latestcache.go).
func vget(r kv.Reader, logical []byte, epoch uint64) (payload []byte, ok bool, err error) {
	if payload, ok, done, err := cachedGet(r, logical, epoch); done {
		return payload, ok, err
	}
	payload, _, ok, err = vgetStore(r, logical, epoch)
	return payload, ok, err
}

// vgetStore is vget from the store (or what this transaction read); at is
// the epoch of the version read.
func vgetStore(r kv.Reader, logical []byte, epoch uint64) (payload []byte, at uint64, ok bool, err error) {
	var val []byte
	found := false
	if c, isTxn := r.(topCache); isTxn && epoch == latestEpoch {
		if p, ok := c.topsOf().pre[string(logical)]; ok {
			if p.key == nil {
				c.topsOf().remember(logical, topVersion{})
				return nil, 0, false, nil
			}
			val, found = p.value, true
			_, at, _ = splitVersion(p.key)
			c.topsOf().remember(logical, topVersion{epoch: at, exists: true})
			payload, ok, err = decodeVersion(logical, val)
			return payload, at, ok, err
		}
	}
	err = r.Scan(versionKey(logical, epoch), kv.PrefixEnd(logical), false, func(k, v []byte) bool {
		if len(k) == len(logical)+epochLen {
			val = append([]byte(nil), v...)
			_, at, _ = splitVersion(k)
			found = true
			return false
		}
		return true
	})
	if err != nil {
		return nil, 0, false, err
	}
	if c, isTxn := r.(topCache); isTxn && epoch == latestEpoch {
		c.topsOf().remember(logical, topVersion{epoch: at, exists: found})
	}
	if !found {
		return nil, 0, false, nil
	}
	payload, ok, err = decodeVersion(logical, val)
	return payload, at, ok, err
}

// decodeVersion splits a version's value into its payload, or reports a
// tombstone (ok false).
func decodeVersion(logical, val []byte) (payload []byte, ok bool, err error) {
	switch {
	case len(val) == 1 && val[0] == tagTombstone:
		return nil, false, nil
	case len(val) >= 1 && val[0] == tagLive:
		return append([]byte(nil), val[1:]...), true, nil
	}
	return nil, false, fmt.Errorf("record %x: bad version tag: %w", logical, base.ErrIO)
}

// versions lists every physical version of logical, newest first.
func versions(r kv.Reader, logical []byte) ([]version, error) {
	var vs []version
	err := r.Scan(logical, kv.PrefixEnd(logical), false, func(k, v []byte) bool {
		if len(k) == len(logical)+epochLen {
			_, e, _ := splitVersion(k)
			vs = append(vs, version{e, append([]byte(nil), v...)})
		}
		return true
	})
	return vs, err
}

// versionsBelow lists the physical versions of logical older than epoch,
// newest first.
func versionsBelow(r kv.Reader, logical []byte, epoch uint64) ([]version, error) {
	var vs []version
	err := r.Scan(versionKey(logical, epoch-1), kv.PrefixEnd(logical), false, func(k, v []byte) bool {
		if len(k) == len(logical)+epochLen {
			_, e, _ := splitVersion(k)
			vs = append(vs, version{e, append([]byte(nil), v...)})
		}
		return true
	})
	return vs, err
}

// vscan calls fn for every logical key under prefix, from start (or the
// prefix itself if start is nil) in key order, with the payload of its
// newest version at or below epoch; deleted records are skipped. fn runs
// inside the store's scan: it must not use the transaction and must copy
// the slices it keeps. fn returns false to stop.
func vscan(r kv.Reader, prefix, start []byte, epoch uint64, fn func(logical, payload []byte) bool) error {
	return vscanKeys(r, prefix, start, epoch, func(logical, _, payload []byte) bool { return fn(logical, payload) })
}

// vscanKeys is vscan that also passes fn the physical key of the version
// it read (its tagged value is the tag byte followed by payload).
func vscanKeys(r kv.Reader, prefix, start []byte, epoch uint64, fn func(logical, key, payload []byte) bool) error {
	if start == nil || bytes.Compare(start, prefix) < 0 {
		start = prefix
	}
	return vscanRange(r, start, kv.PrefixEnd(prefix), epoch, fn)
}

// vscanRange is vscanKeys over the physical keys [start, end): start must
// be a logical key or the start of one, end the end of one (so that no
// logical key has versions on both sides).
func vscanRange(r kv.Reader, start, end []byte, epoch uint64, fn func(logical, key, payload []byte) bool) error {
	var last []byte // logical key already decided
	var ferr error
	err := r.Scan(start, end, false, func(k, v []byte) bool {
		logical, e, err := splitVersion(k)
		if err != nil {
			ferr = err
			return false
		}
		if last != nil && bytes.Equal(logical, last) {
			return true
		}
		if e > epoch {
			return true
		}
		last = append(last[:0], logical...)
		if len(v) == 1 && v[0] == tagTombstone {
			return true
		}
		if len(v) < 1 || v[0] != tagLive {
			ferr = fmt.Errorf("record %x: bad version tag: %w", logical, base.ErrIO)
			return false
		}
		return fn(logical, k, v[1:])
	})
	if err != nil {
		return err
	}
	return ferr
}

// wtx is a read-write transaction of a Meta operation: the kv transaction
// plus the epoch state, loaded on first versioned write.
type wtx struct {
	kv.Txn
	loaded bool
	epoch  uint64   // live epoch
	frozen []uint64 // snapshot epochs, ascending

	deletesQueued bool // a pending slice delete was added
	fenced        bool // the epoch fence shard is written

	// quotaPlains are quota usage shards the operation expects to charge
	// (quotaHints), read with opPlains.
	quotaPlains [][]byte

	// tops caches, per logical key read or written in this transaction,
	// the epoch of its newest physical version (exists false: none), so
	// a write after a read does not read the versions again.
	tops map[string]topVersion

	// pre and plain hold what prefetch read: the newest version of logical
	// keys and the values of plain keys (nil: absent). A write to a key
	// drops its entry.
	pre   map[string]preVersion
	plain map[string][]byte
	// empty are key prefixes prefetch found without any key.
	empty map[string]bool
	// fetched are the inodes prefetchUnlink read what prefetchInode reads.
	fetched map[base.Ino]bool
	// soleChunk are the inodes prefetchUnlink found with one chunk record,
	// index 0, whose newest version is in pre: chunks needs no scan. A
	// write to a chunk of the inode drops the entry.
	soleChunk map[base.Ino]bool
	// holdDropped are the hold records this attempt deleted (op.held).
	holdDropped map[string]bool
	// flusher: the write-back log's own replay, or a transaction run
	// with the log held (updateIn): no change over the log runs
	// meanwhile.
	flusher bool
	// shard is the usage-counter shard this transaction updates.
	shard byte
	wrote bool // Set or Delete was called
	// epochSeen keeps the live epoch each update reads; epochGuess is the
	// one the last update read, for prefetches that need it before this
	// update has read it (0: none).
	epochSeen  *atomic.Uint64
	epochGuess uint64
	// older holds what prefetchUnlink read of versions older than the
	// live epoch it guessed (newestBelow).
	older map[string]olderVersion
	// txnAccel is the accelerators' state in this transaction (accel.go).
	// The versioned store holds it and calls only its hooks: writing
	// before each versioned write, prefetchPlains in each prefetch.
	txnAccel
}

// olderVersion is the first pair of [versionKey(logical, bound),
// PrefixEnd(logical)), read ahead: the newest version of logical at or
// before epoch bound, if its key is one.
type olderVersion struct {
	bound      uint64
	key, value []byte
}

// rewriteVersions writes every physical version of logical back as it
// is: on a store with snapshot isolation, the transaction then conflicts
// with any concurrent one that writes or deletes one of them.
func (t *wtx) rewriteVersions(logical []byte) error {
	vs, err := versions(t, logical)
	if err != nil {
		return err
	}
	for _, v := range vs {
		t.Set(versionKey(logical, v.epoch), v.value)
	}
	return nil
}

// newestBelow is newest(t, logical, epoch), from what prefetchUnlink read
// when it guessed that epoch.
func (t *wtx) newestBelow(logical []byte, epoch uint64) (version, bool, error) {
	if o, ok := t.older[string(logical)]; ok && o.bound == epoch {
		if o.key == nil || len(o.key) != len(logical)+epochLen {
			return version{}, false, nil
		}
		_, e, _ := splitVersion(o.key)
		return version{e, o.value}, true, nil
	}
	return newest(t, logical, epoch)
}

// newestRange is the key range whose first pair is the newest version of
// logical (or a longer key sharing its prefix, or nothing).
func newestRange(logical []byte) kv.Range {
	return kv.Range{Start: versionKey(logical, latestEpoch), End: kv.PrefixEnd(logical)}
}

// newestOf decodes p, the first pair of newestRange(logical), read
// without a transaction's caches: the payload of logical's newest
// version, or ok false if it has none or that is a tombstone.
func newestOf(logical []byte, p kv.Pair) (payload []byte, ok bool, err error) {
	if p.Key == nil {
		return nil, false, nil
	}
	if len(p.Key) != len(logical)+epochLen {
		return nil, false, fmt.Errorf("record %x: read %x as its newest version: %w", logical, p.Key, base.ErrIO)
	}
	return decodeVersion(logical, p.Value)
}

// Get serves prefetched plain keys from memory.
func (t *wtx) Get(key []byte) ([]byte, error) {
	if v, ok := t.plain[string(key)]; ok {
		if v == nil {
			return nil, nil
		}
		return append([]byte{}, v...), nil
	}
	return t.Txn.Get(key)
}

// Set and Delete drop what prefetch read of the key.
func (t *wtx) Set(key, value []byte) {
	t.forget(key)
	t.wrote = true
	t.keyWritten(key, false)
	t.Txn.Set(key, value)
}

func (t *wtx) Delete(key []byte) {
	if len(key) > 0 && key[0] == pHold {
		if t.holdDropped == nil {
			t.holdDropped = make(map[string]bool)
		}
		t.holdDropped[string(key)] = true
	}
	t.forget(key)
	t.wrote = true
	t.keyWritten(key, true)
	t.Txn.Delete(key)
}

func (t *wtx) forget(key []byte) {
	if t.plain != nil {
		delete(t.plain, string(key))
	}
	if t.pre != nil {
		if logical, ok := versionLogical(key); ok {
			delete(t.pre, string(logical))
		}
	}
	for p := range t.empty {
		if bytes.HasPrefix(key, []byte(p)) {
			delete(t.empty, p)
		}
	}
	if len(t.soleChunk) != 0 {
		if ino, ok := keyIno(key); ok && key[0] == pChunk {
			delete(t.soleChunk, ino)
		}
	}
}

type topVersion struct {
	epoch  uint64
	exists bool
}

// topCache is implemented by *wtx (and types embedding it): readers that
// can remember what newest versions they saw.
type topCache interface{ topsOf() *wtx }

func (t *wtx) topsOf() *wtx { return t }

func (t *wtx) remember(logical []byte, tp topVersion) {
	if t.tops == nil {
		t.tops = make(map[string]topVersion)
	}
	t.tops[string(logical)] = tp
}

func (t *wtx) loadEpochs() error {
	if t.loaded {
		return nil
	}
	// "E" and "F" are adjacent: one range read fetches both, unless a
	// prefetch already did.
	var v, f []byte
	_, pe := t.plain[string(epochKey())]
	_, pf := t.plain[string(frozenKey())]
	if pe && pf {
		v, f = t.plain[string(epochKey())], t.plain[string(frozenKey())]
	}
	var err error
	if !pe || !pf {
		err = t.Scan(epochKey(), kv.PrefixEnd(frozenKey()), false, func(k, val []byte) bool {
			switch {
			case bytes.Equal(k, epochKey()):
				v = append([]byte(nil), val...)
			case bytes.Equal(k, frozenKey()):
				f = append([]byte(nil), val...)
			}
			return true
		})
	}
	if err != nil {
		return err
	}
	e, err := decodeU64(v)
	if err != nil {
		return fmt.Errorf("epoch record: %w", err)
	}
	if e == 0 {
		return fmt.Errorf("volume has no live epoch (not formatted?): %w", base.ErrIO)
	}
	fr, err := decodeU64s(f)
	if err != nil {
		return fmt.Errorf("snapshot epochs record: %w", err)
	}
	t.epoch, t.frozen, t.loaded = e, fr, true
	if t.epochSeen != nil {
		t.epochSeen.Store(e)
	}
	return nil
}

// retained reports whether a version written at epoch e and superseded at
// epoch next is visible to some frozen snapshot S (e <= S < next).
func (t *wtx) retained(e, next uint64) bool {
	i, _ := slices.BinarySearch(t.frozen, e)
	return i < len(t.frozen) && t.frozen[i] < next
}

// pruneOlder deletes the versions older than the live epoch in vs (newest
// first) that no snapshot retains once a version at the live epoch
// supersedes them, and reports whether any older version remains with a
// live payload as its newest survivor. payload is the new live version's
// (nil when the record is being deleted): slices of a deleted chunk
// version that neither it nor a surviving version references are queued
// for deletion.
func (t *wtx) pruneOlder(logical []byte, vs []version, payload []byte) (olderVisible bool, err error) {
	next := t.epoch
	first := true
	var victims, kept []version
	for _, v := range vs {
		if v.epoch >= t.epoch {
			continue
		}
		if t.retained(v.epoch, next) {
			if first {
				olderVisible = len(v.value) > 0 && v.value[0] == tagLive
			}
			first = false
			kept = append(kept, v)
		} else {
			t.Delete(versionKey(logical, v.epoch))
			victims = append(victims, v)
		}
		next = v.epoch
	}
	if len(victims) > 0 && logical[0] == pChunk {
		if payload != nil {
			kept = append(kept, version{value: append([]byte{tagLive}, payload...)})
		}
		err = t.releaseVersions(logical, victims, kept)
	}
	return olderVisible, err
}

// releaseVersions queues for deletion the slices of the deleted chunk
// versions victims that no version in kept references.
func (t *wtx) releaseVersions(logical []byte, victims, kept []version) error {
	keptLists, err := sliceLists(logical, kept)
	if err != nil {
		return err
	}
	victimLists, err := sliceLists(logical, victims)
	if err != nil {
		return err
	}
	return t.freeSlices(logical, slices.Concat(victimLists...), keptLists...)
}

// sliceLists decodes the slice lists of chunk versions (tombstones give
// none).
func sliceLists(logical []byte, vs []version) ([][]base.Slice, error) {
	out := make([][]base.Slice, 0, len(vs))
	for _, v := range vs {
		ss, err := versionSlices(logical, v)
		if err != nil {
			return nil, err
		}
		out = append(out, ss)
	}
	return out, nil
}

// freeSlices queues for deletion each slice of dropped that no list in
// kept references (zero slices hold no data), which chunk record owner (a
// logical chunk key; its versions count as one owner, as in Check) no
// longer references: the pending delete ("P") and the owner's drop record
// ("I"). Both are blind writes; the deleter counts the drop records of a
// slice against its extra owners ("O") and frees the objects only when
// every owner has dropped them. The same record dropping a slice twice
// (its live version and older ones released together) writes the same
// drop record.
func (t *wtx) freeSlices(owner []byte, dropped []base.Slice, kept ...[]base.Slice) error {
	used := make(map[uint64]bool)
	for _, ss := range kept {
		for _, s := range ss {
			used[s.ID] = true
		}
	}
	for _, s := range dropped {
		if s.ID == 0 || used[s.ID] {
			continue
		}
		used[s.ID] = true
		t.Set(pendingKey(s.ID), u32(nil, s.Size))
		t.Set(dropKey(s.ID, owner), nil)
		t.deletesQueued = true
	}
	return nil
}

// versionSlices decodes the slice list of a chunk version (none for a
// tombstone).
func versionSlices(logical []byte, v version) ([]base.Slice, error) {
	if len(v.value) == 0 || v.value[0] != tagLive {
		return nil, nil
	}
	ss, err := decodeSlices(v.value[1:])
	if err != nil {
		return nil, fmt.Errorf("chunk record %x at epoch %d: %w", logical, v.epoch, err)
	}
	return ss, nil
}

// keepVersions decides which of vs (every version of one record, newest
// first) must stay: the newest (what the live volume sees) and every
// version some snapshot sees; a tombstone only while an older version it
// hides stays too.
func (t *wtx) keepVersions(vs []version) []bool {
	keep := make([]bool, len(vs))
	for i, v := range vs {
		keep[i] = i == 0 || t.retained(v.epoch, vs[i-1].epoch)
	}
	older := false
	for i := len(vs) - 1; i >= 0; i-- {
		if !keep[i] {
			continue
		}
		if len(vs[i].value) == 1 && vs[i].value[0] == tagTombstone && !older {
			keep[i] = false
			continue
		}
		older = true
	}
	return keep
}

// compactVersions deletes the versions of logical that no view can see
// any more under the current snapshot list (after a snapshot was
// deleted), queueing the slices only they referenced. It returns the
// bytes of the slices it queued.
func (t *wtx) compactVersions(logical []byte) error {
	if err := t.loadEpochs(); err != nil {
		return err
	}
	vs, err := versions(t, logical)
	if err != nil || len(vs) == 0 {
		return err
	}
	keep := t.keepVersions(vs)
	var victims, kept []version
	for i, v := range vs {
		if keep[i] {
			kept = append(kept, v)
			continue
		}
		victims = append(victims, v)
		t.Delete(versionKey(logical, v.epoch))
	}
	if len(victims) > 0 && logical[0] == pChunk {
		return t.releaseVersions(logical, victims, kept)
	}
	return nil
}

// fence writes this transaction's epoch fence shard (keys.go): a snapshot
// created or deleted concurrently conflicts with it, so the epoch this
// transaction read is still the live one when it commits.
func (t *wtx) fence() {
	if !t.fenced {
		t.Set(fenceKey(t.shard), nil)
		t.fenced = true
	}
}

// logChange records that logical gets its first version of the live epoch
// (keys.go, change log). Only needed while a snapshot exists.
func (t *wtx) logChange(logical []byte) {
	if len(t.frozen) > 0 {
		t.Set(changeKey(t.epoch, logical), nil)
	}
}

// newest returns the newest physical version of logical at or below
// epoch. It reads one key: listing every version would make the engine
// step over all the overwritten copies of a hot record (an LSM keeps them
// until compaction), which made each chunk update cost O(writes so far).
func newest(r kv.Reader, logical []byte, epoch uint64) (version, bool, error) {
	var v version
	found := false
	err := r.Scan(versionKey(logical, epoch), kv.PrefixEnd(logical), false, func(k, val []byte) bool {
		if len(k) == len(logical)+epochLen {
			_, e, _ := splitVersion(k)
			v = version{e, append([]byte(nil), val...)}
			found = true
		}
		return false
	})
	return v, found, err
}

// newestTop is newest(t, logical, latestEpoch), from what a prefetch read
// when it can.
func (t *wtx) newestTop(logical []byte) (version, bool, error) {
	if p, ok := t.pre[string(logical)]; ok {
		if p.key == nil {
			return version{}, false, nil
		}
		_, e, _ := splitVersion(p.key)
		return version{e, p.value}, true, nil
	}
	return newest(t, logical, latestEpoch)
}

// vset writes payload as the version of logical at the live epoch.
func (t *wtx) vset(logical, payload []byte) error {
	if err := t.loadEpochs(); err != nil {
		return err
	}
	if err := t.writing(logical, false); err != nil {
		return err
	}
	// Versions older than the live epoch were pruned when the first version
	// at the live epoch was written; only a record not yet written in this
	// epoch needs the full list.
	tp, known := t.tops[string(logical)]
	if !known {
		v, ok, err := newest(t, logical, latestEpoch)
		if err != nil {
			return err
		}
		tp = topVersion{epoch: v.epoch, exists: ok}
	}
	t.fence()
	if !tp.exists || tp.epoch < t.epoch {
		t.logChange(logical)
	}
	if tp.exists && tp.epoch < t.epoch {
		vs, err := versions(t, logical)
		if err != nil {
			return err
		}
		if _, err := t.pruneOlder(logical, vs, payload); err != nil {
			return err
		}
	}
	val := make([]byte, 0, 1+len(payload))
	t.Set(versionKey(logical, t.epoch), append(append(val, tagLive), payload...))
	t.remember(logical, topVersion{epoch: t.epoch, exists: true})
	return nil
}

// vdel deletes logical at the live epoch: a tombstone if a snapshot still
// sees an older version, otherwise every physical version is removed.
func (t *wtx) vdel(logical []byte) error {
	if err := t.loadEpochs(); err != nil {
		return err
	}
	top, ok, err := t.newestTop(logical)
	if err != nil || !ok {
		return err
	}
	if err := t.writing(logical, true); err != nil {
		return err
	}
	t.fence()
	var olderVisible bool
	if top.epoch < t.epoch {
		t.logChange(logical)
		vs, err := versions(t, logical)
		if err != nil {
			return err
		}
		if olderVisible, err = t.pruneOlder(logical, vs, nil); err != nil {
			return err
		}
	} else if t.epoch > 0 && !t.singleVersions() {
		// Older versions still present are the ones snapshots retain.
		prev, ok, err := t.newestBelow(logical, t.epoch-1)
		if err != nil {
			return err
		}
		olderVisible = ok && len(prev.value) > 0 && prev.value[0] == tagLive
	}
	if olderVisible {
		t.Set(versionKey(logical, t.epoch), []byte{tagTombstone})
	} else {
		t.Delete(versionKey(logical, t.epoch))
	}
	delete(t.tops, string(logical))
	return nil
}
