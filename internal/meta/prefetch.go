package meta

// Prefetch: a mutation names up front the records it will read, and one
// round trip (kv.FirstReader, kv.Follow where the store has them) reads
// them all; the transaction then serves them from memory (wtx.Get and the
// versioned reads) until it writes them.

import (
	"bytes"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// keepVersion records p, the first pair of newestRange(logical), as what
// this transaction knows of logical's newest version. A longer key under
// the same prefix (a name that extends this one) is no version of
// logical: nothing is recorded and vget looks itself.
func (t *wtx) keepVersion(logical []byte, p kv.Pair) {
	if p.Key != nil && len(p.Key) != len(logical)+epochLen {
		return
	}
	if t.pre == nil {
		t.pre = make(map[string]preVersion)
	}
	t.pre[string(logical)] = preVersion{key: p.Key, value: p.Value}
}

// entryFollow follows a directory entry's version to the keys prefix ||
// the inode it names || [start, end) (the inode number follows the
// version tag in the entry's value).
func entryFollow(prefix byte, start, end []byte) *kv.Follow {
	return &kv.Follow{Offset: 1, Length: 8, Prefix: prefixOnly(prefix), StartSuffix: start, EndSuffix: end}
}

// prefetchEntry reads, in one round trip where the store can, the
// attributes of parent, its entry name, and the attributes of the inode
// the entry names (kv.Follow: the entry's value holds the inode number
// after its version tag).
func (t *wtx) prefetchEntry(parent base.Ino, name string) error {
	dk := dentryKey(parent, name)
	entry := newestRange(dk)
	entry.Follow = entryFollow(pAttr, u64(nil, ^latestEpoch), bytes.Repeat([]byte{0xff}, epochLen+1))
	ranges := []kv.Range{newestRange(attrKey(parent)), entry}
	if r, ok := t.entryLease(parent); ok {
		ranges = append(ranges, r)
	}
	ps, err := kv.Firsts(t.Txn, ranges)
	if err != nil {
		return err
	}
	if len(ps) > 2 {
		t.entryLeaseRead(ps[2])
	}
	t.keepVersion(attrKey(parent), ps[0])
	e := ps[1]
	if e.Key != nil && len(e.Key) != len(dk)+epochLen {
		return nil // not a version of dk: let vget look
	}
	t.keepVersion(dk, e)
	if e.Key == nil || len(e.Value) != 1+dentryLen || e.Value[0] != tagLive || e.Followed == nil {
		return nil
	}
	ino, _, err := decodeDentry(e.Value[1:])
	if err != nil {
		return nil // vget reports it
	}
	// The follow's range lies inside the inode's attribute prefix.
	t.keepVersion(attrKey(ino), *e.Followed)
	return nil
}

// prefetchInode reads, in one round trip, the newest attribute of ino and
// whether it has any holds, xattrs, chunks or entries: removing an inode
// needs to know, and usually the answer is none.
func (t *wtx) prefetchInode(ino base.Ino) error {
	if t.fetched[ino] {
		return nil // by prefetchUnlink
	}
	prefixes := [][]byte{holdPrefix(ino), xattrPrefix(ino), chunkPrefix(ino), dentryPrefix(ino)}
	ranges := []kv.Range{newestRange(attrKey(ino))}
	for _, p := range prefixes {
		ranges = append(ranges, kv.Range{Start: p, End: kv.PrefixEnd(p)})
	}
	ps, err := kv.Firsts(t.Txn, ranges)
	if err != nil {
		return err
	}
	if t.empty == nil {
		t.empty = make(map[string]bool)
	}
	t.keepVersion(attrKey(ino), ps[0])
	for i, p := range prefixes {
		if ps[i+1].Key == nil {
			t.empty[string(p)] = true
		}
	}
	return nil
}

// prefetchUnlink is prefetchOp for removing the entry name of parent,
// and also reads, in the same round trip (kv.Follow from the entry to
// the inode it names), what prefetchInode would read about that inode:
// its newest attribute and whether it has holds, xattrs or chunks. On a
// server this saves a round trip per unlink.
func (t *wtx) prefetchUnlink(parent base.Ino, name string) error {
	dk := dentryKey(parent, name)
	if done, err := t.prefetchUnlinkCached(parent, dk); done || err != nil {
		return err
	}
	// Keys under an inode's hold, xattr and chunk prefixes continue with
	// at most 12 bytes (a session id; an index and an epoch) or with an
	// xattr name, which starts with its ASCII namespace: all sort before
	// 16 bytes of 0xff.
	under := bytes.Repeat([]byte{0xff}, 16)
	fol := func(prefix byte, start, end []byte) kv.Range {
		r := newestRange(dk)
		r.Follow = entryFollow(prefix, start, end)
		return r
	}
	anyEpoch := bytes.Repeat([]byte{0xff}, epochLen+1)
	extra := []kv.Range{
		fol(pAttr, u64(nil, ^latestEpoch), anyEpoch),
		fol(pHold, nil, under), fol(pXattr, nil, under), fol(pChunk, nil, under),
	}
	// Removing the entry and the inode looks for their versions older than
	// the live epoch (vdel: a snapshot may retain one). The epoch is read
	// in this same round trip, so the last one this client saw stands in:
	// if it is still live, those reads are done here too.
	//
	// ps holds the entry's newest version (followed to the inode's
	// attribute, holds, xattrs and chunks: ps[0..3]), then these two.
	const olderEntry, olderAttr = 4, 5
	below := t.epochGuess - 1
	if t.epochGuess > 0 {
		extra = append(extra,
			kv.Range{Start: versionKey(dk, below), End: kv.PrefixEnd(dk)},
			fol(pAttr, u64(nil, ^below), anyEpoch))
	}
	ps, err := t.prefetchWith([][]byte{attrKey(parent), dk}, t.prefetchPlains(t.opPlains(), [][]byte{attrKey(parent)}), extra)
	if err != nil {
		return err
	}
	if t.epochGuess > 0 {
		t.keepOlder(dk, below, ps[olderEntry])
	}
	e := ps[0]
	if e.Key == nil || len(e.Key) != len(dk)+epochLen || len(e.Value) != 1+dentryLen || e.Value[0] != tagLive {
		return nil // no live entry: the caller's lookup says so
	}
	ino, _, err := decodeDentry(e.Value[1:])
	if err != nil {
		return nil
	}
	for _, p := range ps[:olderEntry] {
		if p.Followed == nil {
			return nil
		}
	}
	if t.epochGuess > 0 && ps[olderAttr].Followed == nil {
		return nil
	}
	t.keepVersion(attrKey(ino), *ps[0].Followed)
	if t.epochGuess > 0 {
		t.keepOlder(attrKey(ino), below, *ps[olderAttr].Followed)
	}
	if t.empty == nil {
		t.empty = make(map[string]bool)
	}
	for i, prefix := range [][]byte{holdPrefix(ino), xattrPrefix(ino), chunkPrefix(ino)} {
		if ps[i+1].Followed.Key == nil {
			t.empty[string(prefix)] = true
		}
	}
	if t.fetched == nil {
		t.fetched = make(map[base.Ino]bool)
	}
	t.fetched[ino] = true
	return nil
}

// keepOlder records p as the first pair at or below epoch bound of
// logical's versions (newestBelow).
func (t *wtx) keepOlder(logical []byte, bound uint64, p kv.Pair) {
	if t.older == nil {
		t.older = make(map[string]olderVersion)
	}
	t.older[string(logical)] = olderVersion{bound: bound, key: p.Key, value: p.Value}
}

// isEmpty reports that prefetch found no key under prefix (and none was
// written since).
func (t *wtx) isEmpty(prefix []byte) bool { return t.empty[string(prefix)] }

type preVersion struct {
	key, value []byte // physical key and value; key nil: no version
}

// prefetchOp prefetches what nearly every mutation reads besides logicals:
// the epoch records and this transaction's usage shards.
func (t *wtx) prefetchOp(logicals ...[]byte) error {
	return t.prefetch(logicals, t.prefetchPlains(t.opPlains(), logicals))
}

// opPlains are the plain keys nearly every mutation reads.
func (t *wtx) opPlains() [][]byte {
	return append([][]byte{epochKey(), frozenKey(),
		counterShardKey(counterUsedInodes, t.shard), counterShardKey(counterUsedBytes, t.shard)}, t.quotaPlains...)
}

// prefetch reads, in one round trip where the store can (kv.FirstReader),
// the newest versions of logicals and the values of plains; later reads
// of them in this transaction come from memory.
func (t *wtx) prefetch(logicals, plains [][]byte) error {
	_, err := t.prefetchWith(logicals, plains, nil)
	return err
}

// prefetchWith is prefetch that also reads the ranges extra in the same
// round trip and returns their first pairs.
func (t *wtx) prefetchWith(logicals, plains [][]byte, extra []kv.Range) ([]kv.Pair, error) {
	logicals = t.cachedLogicals(logicals)
	plains = t.cachedPlains(plains)
	ranges := make([]kv.Range, 0, len(logicals)+len(plains)+len(extra))
	for _, l := range logicals {
		ranges = append(ranges, newestRange(l))
	}
	for _, k := range plains {
		ranges = append(ranges, kv.Range{Start: k, End: keyAfter(k)})
	}
	ranges = append(ranges, extra...)
	ps, err := kv.Firsts(t.Txn, ranges)
	if err != nil {
		return nil, err
	}
	for i, l := range logicals {
		t.keepVersion(l, ps[i])
	}
	if t.plain == nil {
		t.plain = make(map[string][]byte)
	}
	for i, k := range plains {
		p := ps[len(logicals)+i]
		if p.Key != nil && !bytes.Equal(p.Key, k) {
			p.Value = nil
		}
		t.plain[string(k)] = p.Value
	}
	return ps[len(logicals)+len(plains):], nil
}
