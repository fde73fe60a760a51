package meta

// Key layout. This file owns ALL key encoding of the metadata engine; no
// other file builds or parses keys by hand. Integers are big-endian so that
// byte order is numeric order.
//
// Unversioned records (one key, overwritten in place):
//
//	"S"                         settings, JSON (Settings)
//	"E"                         live epoch, u64 (starts at 1)
//	"F"                         frozen snapshot epochs, n × u64 ascending (empty: no snapshots)
//	"C" kind                    counter, u64; kind is one byte, see counter*
//	"C" kind shard u8           usage counter delta, int64 (two's complement);
//	                            the usage is "C" kind plus every shard, so
//	                            concurrent clients rarely write the same key
//	"N" sid u64                 session, JSON (SessionInfo)
//	"H" ino u64 sid u64         open-file hold of session sid on ino (empty value)
//	"P" slice u64               pending slice delete; value: size u32
//	"I" slice u64 owner         one chunk record (owner: its logical key)
//	                            stopped referencing slice, which "P" queued
//	                            (empty value). The deleter takes one extra
//	                            owner ("O") off per drop record and frees
//	                            the objects when every owner has dropped
//	                            them; a "P" without any (volumes from before
//	                            drop records) counts as one drop
//	"Q" ino u64                 orphan: ino has nlink 0 and waits for its last close
//	"R" sid u64 start u64       slice ids [start, end) reserved by session sid
//	                            that may still be in flight; value: end u64
//	"W" ino u64 kind u8 sid u64 owner u64
//	                            locks of one owner on ino; kind 'f' flock
//	                            (value: type u8, pid u32) or 'p' POSIX
//	                            (value: n × start u64, end u64, type u8, pid u32)
//	"W" ino u64 'g'             lock guard: written by every lock change of ino
//	"G" sid u64                 expired session, JSON (ExpiredSession)
//	"T" name 0x00               snapshot, JSON (Snapshot); name as in a file name
//	"V" epoch u64 logical       change log: logical (a versioned record's
//	                            logical key) got its first version of epoch
//	                            in that epoch (empty value). Written only
//	                            while a snapshot exists; read by snapshot
//	                            deletion (which versions lost their last
//	                            reader) and diff (what changed between two
//	                            epochs). Entries at or below the oldest
//	                            snapshot (or of a volume without
//	                            snapshots) are dropped.
//	"Y" epoch u64               deletion of the snapshot of epoch in
//	                            progress: its versions still need pruning;
//	                            value: JSON (Snapshot)
//	"O" slice u64               extra owners of a slice: how many chunk
//	                            records besides the one that wrote it
//	                            reference it (restored from a snapshot
//	                            without copying data); value: count u32.
//	                            A pending delete of such a slice takes one
//	                            owner off instead of deleting its objects
//	"B" object key              small block kept in the metadata engine
//	                            instead of the object store (Settings.
//	                            InlineMax, blob.go); the key is the object
//	                            key, so blobs sort as the objects would;
//	                            value: the block object's bytes
//	"J" dir u64                 directory lease of a session (lease.go); value:
//	                            sid u64. While it exists, only that session
//	                            changes the directory's entries or attribute
//	"U" sid u64 dir u64         recall of session sid's lease on dir, asked by
//	                            another client that waits to change dir
//	                            (empty value)
//	"M"                         load in progress (load.go): the store is
//	                            being filled from a dump and is no volume
//	                            until the load finishes; value: JSON
//	                            (loadMarker). Settings are written last
//	"q" dir u64                 directory quota on dir, JSON (quotaRecord)
//	"q" dir u64 shard u8        one usage shard of that quota (quota.go):
//	                            up u64, then bytes used, bytes granted,
//	                            inodes used, inodes granted (i64 each)
//	"r"                         replication state of a destination volume,
//	                            JSON (ReplicaState, replica.go)
//	"Z" shard u8                epoch fence: every transaction that writes a
//	                            versioned record writes one shard (empty
//	                            value); changing "E" or "F" writes them all,
//	                            so no write can commit at an epoch that a
//	                            concurrent snapshot froze (kv.Txn: the
//	                            conflict is materialized)
//
// Versioned records. A versioned record has a logical key and one physical
// key per version: logical || ^epoch (u64). For one logical key the newest
// version sorts first; a read at epoch E seeks to logical||^E and takes the
// first key that still has the logical prefix. The value of every version
// starts with a tag byte: tagLive followed by the payload, or tagTombstone
// alone (the record was deleted at that epoch). Names are terminated by 0x00
// (names never contain NUL), so every version of one logical key is
// contiguous and logical keys sort by name.
//
//	"A" ino u64                 attribute (encodeAttr)
//	"D" parent u64 name 0x00    dentry (encodeDentry: ino u64, type u8)
//	"L" ino u64                 symlink target (raw bytes)
//	"X" ino u64 name 0x00       xattr value (raw bytes)
//	"K" ino u64 index u32       chunk: slice list (encodeSlices, 24 bytes per slice)

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/cairnfs/cairn/internal/base"
)

// Key prefixes. Persisted: never change.
const (
	pSettings = 'S'
	pEpoch    = 'E'
	pFrozen   = 'F'
	pCounter  = 'C'
	pSession  = 'N'
	pHold     = 'H'
	pPending  = 'P'
	pOrphan   = 'Q'
	pReserved = 'R'
	pLock     = 'W'
	pExpired  = 'G'
	pSnapshot = 'T'
	pChange   = 'V'
	pSnapJob  = 'Y'
	pFence    = 'Z'
	pShared   = 'O'
	pBlob     = 'B'
	pLease    = 'J'
	pRecall   = 'U'
	pDrop     = 'I'
	pLoad     = 'M'
	pQuota    = 'q'
	pReplica  = 'r'
	pGrant    = 'g'

	pAttr    = 'A'
	pDentry  = 'D'
	pSymlink = 'L'
	pXattr   = 'X'
	pChunk   = 'K'
)

// Counter kinds (second byte of a counter key). Persisted.
const (
	counterNextInode  = 'i' // next inode number not yet handed out
	counterNextSlice  = 's' // next slice id not yet handed out
	counterUsedBytes  = 'b' // Usage.Bytes
	counterUsedInodes = 'n' // Usage.Inodes
	counterNextSess   = 'x' // next session id
	counterDirMoves   = 'm' // directory moves between parents (a conflict point)
	// counterBackupClaim holds the time (Unix nanoseconds) of the last
	// claim of an automatic metadata backup (backup.go); every claim
	// writes it, so two mounts claiming at once conflict.
	counterBackupClaim = 'k'
	// counterTrashClaim holds the time (Unix nanoseconds) of the last
	// claim of the trash's purge (trash.go), as counterBackupClaim.
	counterTrashClaim = 't'
)

// Version tags, first byte of every versioned value.
const (
	tagTombstone = 0
	tagLive      = 1
)

const epochLen = 8

func u64(b []byte, v uint64) []byte { return binary.BigEndian.AppendUint64(b, v) }
func u32(b []byte, v uint32) []byte { return binary.BigEndian.AppendUint32(b, v) }

// --- unversioned keys ---

func settingsKey() []byte       { return []byte{pSettings} }
func blobKey(key string) []byte { return append([]byte{pBlob}, key...) }

// blobAfter is the first blob key after blobKey(key): where a listing
// resumes.
func blobAfter(key string) []byte { return append(blobKey(key), 0) }

func epochKey() []byte   { return []byte{pEpoch} }
func loadKey() []byte    { return []byte{pLoad} }
func replicaKey() []byte { return []byte{pReplica} }

// versionedPrefixes are the prefixes of the versioned records (the
// namespace a replica holds), in key order.
var versionedPrefixes = []byte{pAttr, pDentry, pChunk, pSymlink, pXattr}

func isDentryKey(logical []byte) bool { return len(logical) > 0 && logical[0] == pDentry }

func frozenKey() []byte        { return []byte{pFrozen} }
func counterKey(k byte) []byte { return []byte{pCounter, k} }
func sessionKey(sid uint64) []byte {
	return u64([]byte{pSession}, sid)
}
func holdKey(ino base.Ino, sid uint64) []byte {
	return u64(u64([]byte{pHold}, uint64(ino)), sid)
}
func holdPrefix(ino base.Ino) []byte { return u64([]byte{pHold}, uint64(ino)) }
func pendingKey(id uint64) []byte    { return u64([]byte{pPending}, id) }

// dropKey records that chunk record owner (a logical chunk key) dropped
// slice id; dropPrefix(id) holds every drop of id.
func dropKey(id uint64, owner []byte) []byte { return append(dropPrefix(id), owner...) }
func dropPrefix(id uint64) []byte            { return u64([]byte{pDrop}, id) }
func orphanKey(ino base.Ino) []byte          { return u64([]byte{pOrphan}, uint64(ino)) }
func prefixOnly(p byte) []byte               { return []byte{p} }

// counterShardKey is the key of one delta shard of a usage counter.
func counterShardKey(k, shard byte) []byte { return []byte{pCounter, k, shard} }

// quotaKey is the record of the quota on directory dir; its usage shards
// follow it (quotaShardKey), so one scan of quotaKey's prefix reads both.
func quotaKey(dir base.Ino) []byte { return u64([]byte{pQuota}, uint64(dir)) }
func quotaShardKey(dir base.Ino, shard byte) []byte {
	return append(quotaKey(dir), shard)
}

// decodeQuotaKey splits a quota key: shard is -1 for the record.
func decodeQuotaKey(k []byte) (dir base.Ino, shard int, err error) {
	if (len(k) != 9 && len(k) != 10) || k[0] != pQuota {
		return 0, 0, fmt.Errorf("quota key %x: %w", k, base.ErrIO)
	}
	dir = base.Ino(binary.BigEndian.Uint64(k[1:]))
	if dir == 0 {
		return 0, 0, fmt.Errorf("quota key %x: directory 0: %w", k, base.ErrIO)
	}
	if len(k) == 9 {
		return dir, -1, nil
	}
	return dir, int(k[9]), nil
}

func reservedPrefix(sid uint64) []byte { return u64([]byte{pReserved}, sid) }
func reservedKey(sid, start uint64) []byte {
	return u64(reservedPrefix(sid), start)
}
func expiredKey(sid uint64) []byte { return u64([]byte{pExpired}, sid) }

// grantKey is the record of session sid's share of the volume limit of
// kind (counterUsedBytes or counterUsedInodes): grant.go.
func grantKey(sid uint64, kind byte) []byte { return append(grantPrefix(sid), kind) }
func grantPrefix(sid uint64) []byte         { return u64([]byte{pGrant}, sid) }

// decodeGrantKey splits a grant key.
func decodeGrantKey(k []byte) (sid uint64, kind byte, err error) {
	if len(k) != 10 || k[0] != pGrant || (k[9] != counterUsedBytes && k[9] != counterUsedInodes) {
		return 0, 0, badKey("grant", k)
	}
	return binary.BigEndian.Uint64(k[1:]), k[9], nil
}
func lockPrefix(ino base.Ino) []byte { return u64([]byte{pLock}, uint64(ino)) }

// lockGuardKey is written by every change of ino's locks, so two
// concurrent changes conflict even though each writes its own record.
func lockGuardKey(ino base.Ino) []byte { return append(lockPrefix(ino), lockGuard) }

// lockKindPrefix is the prefix of the locks of kind on ino.
func lockKindPrefix(ino base.Ino, kind byte) []byte { return append(lockPrefix(ino), kind) }
func lockKey(ino base.Ino, kind byte, sid, owner uint64) []byte {
	return u64(u64(lockKindPrefix(ino, kind), sid), owner)
}

func snapshotKey(name string) []byte {
	return append(append([]byte{pSnapshot}, name...), 0)
}
func changePrefix(epoch uint64) []byte { return u64([]byte{pChange}, epoch) }
func changeKey(epoch uint64, logical []byte) []byte {
	return append(changePrefix(epoch), logical...)
}
func snapJobKey(epoch uint64) []byte { return u64([]byte{pSnapJob}, epoch) }
func fenceKey(shard byte) []byte     { return []byte{pFence, shard} }
func sharedKey(id uint64) []byte     { return u64([]byte{pShared}, id) }
func leaseKey(dir base.Ino) []byte   { return u64([]byte{pLease}, uint64(dir)) }
func recallPrefix(sid uint64) []byte { return u64([]byte{pRecall}, sid) }
func recallKey(sid uint64, dir base.Ino) []byte {
	return u64(recallPrefix(sid), uint64(dir))
}

// --- versioned logical keys ---

func attrKey(ino base.Ino) []byte    { return u64([]byte{pAttr}, uint64(ino)) }
func symlinkKey(ino base.Ino) []byte { return u64([]byte{pSymlink}, uint64(ino)) }
func dentryPrefix(parent base.Ino) []byte {
	return u64([]byte{pDentry}, uint64(parent))
}
func dentryKey(parent base.Ino, name string) []byte {
	return append(append(dentryPrefix(parent), name...), 0)
}

// dentryAfter is the first logical key after every version of the entry
// name of parent, and before the next name: where a listing resumes.
func dentryAfter(parent base.Ino, name string) []byte {
	return append(append(dentryPrefix(parent), name...), 1)
}
func xattrPrefix(ino base.Ino) []byte { return u64([]byte{pXattr}, uint64(ino)) }
func xattrKey(ino base.Ino, name string) []byte {
	return append(append(xattrPrefix(ino), name...), 0)
}
func chunkPrefix(ino base.Ino) []byte { return u64([]byte{pChunk}, uint64(ino)) }
func chunkKey(ino base.Ino, index uint32) []byte {
	return u32(chunkPrefix(ino), index)
}

// versionKey returns the physical key of the version of logical at epoch.
func versionKey(logical []byte, epoch uint64) []byte {
	k := make([]byte, 0, len(logical)+epochLen)
	return u64(append(k, logical...), ^epoch)
}

// splitVersion splits a physical versioned key into logical key and epoch.
func splitVersion(key []byte) (logical []byte, epoch uint64, err error) {
	if len(key) < 1+epochLen {
		return nil, 0, fmt.Errorf("versioned key %x too short: %w", key, base.ErrIO)
	}
	n := len(key) - epochLen
	return key[:n], ^binary.BigEndian.Uint64(key[n:]), nil
}

// --- typed decoders ---
//
// Each decoder parses one kind of key (a logical key for versioned
// records) and returns its fields by value: the names it returns alias
// key, nothing is allocated unless the key is malformed. A key of another
// kind or of the wrong shape is an error wrapping base.ErrIO; none panics.

// badKey is the error of a malformed key. It copies key, so that key
// does not escape in the decoders' callers.
//
//go:noinline
func badKey(kind string, key []byte) error {
	return fmt.Errorf("bad %s key %x: %w", kind, bytes.Clone(key), base.ErrIO)
}

// decodeID parses a key of prefix p followed by one u64.
func decodeID(kind string, p byte, key []byte) (uint64, error) {
	if len(key) != 1+8 || key[0] != p {
		return 0, badKey(kind, key)
	}
	return binary.BigEndian.Uint64(key[1:]), nil
}

// decodeIDPair parses a key of prefix p followed by two u64s.
func decodeIDPair(kind string, p byte, key []byte) (uint64, uint64, error) {
	if len(key) != 1+16 || key[0] != p {
		return 0, 0, badKey(kind, key)
	}
	return binary.BigEndian.Uint64(key[1:]), binary.BigEndian.Uint64(key[9:]), nil
}

// decodeNamed parses a logical key of prefix p: an inode and a name
// terminated by 0x00.
func decodeNamed(kind string, p byte, key []byte) (base.Ino, []byte, error) {
	if len(key) < 1+8+2 || key[0] != p || key[len(key)-1] != 0 {
		return 0, nil, badKey(kind, key)
	}
	name := key[1+8 : len(key)-1]
	if bytes.IndexByte(name, 0) >= 0 {
		return 0, nil, badKey(kind, key)
	}
	return base.Ino(binary.BigEndian.Uint64(key[1:])), name, nil
}

func decodeSessionKey(key []byte) (sid uint64, err error) { return decodeID("session", pSession, key) }
func decodePendingKey(key []byte) (slice uint64, err error) {
	return decodeID("pending", pPending, key)
}
func decodeSharedKey(key []byte) (slice uint64, err error) { return decodeID("shared", pShared, key) }

// decodeDropKey returns the slice and the owner (a sub-slice of key) of a
// drop record.
func decodeDropKey(key []byte) (slice uint64, owner []byte, err error) {
	if len(key) < 9 || key[0] != pDrop {
		return 0, nil, badKey("drop", key)
	}
	owner = key[9:]
	if _, _, err := decodeChunkKey(owner); err != nil {
		return 0, nil, badKey("drop", key)
	}
	return binary.BigEndian.Uint64(key[1:]), owner, nil
}
func decodeSnapJobKey(key []byte) (epoch uint64, err error) {
	return decodeID("snapshot job", pSnapJob, key)
}
func decodeOrphanKey(key []byte) (base.Ino, error) {
	ino, err := decodeID("orphan", pOrphan, key)
	return base.Ino(ino), err
}
func decodeHoldKey(key []byte) (ino base.Ino, sid uint64, err error) {
	i, sid, err := decodeIDPair("hold", pHold, key)
	return base.Ino(i), sid, err
}
func decodeReservedKey(key []byte) (sid, start uint64, err error) {
	return decodeIDPair("reserved", pReserved, key)
}
func decodeRecallKey(key []byte) (sid uint64, dir base.Ino, err error) {
	sid, d, err := decodeIDPair("recall", pRecall, key)
	return sid, base.Ino(d), err
}

// decodeLockKey parses a lock record's key (not the guard's).
func decodeLockKey(key []byte) (ino base.Ino, kind byte, sid, owner uint64, err error) {
	if len(key) != 1+8+1+16 || key[0] != pLock || key[9] != lockFlock && key[9] != lockPosix {
		return 0, 0, 0, 0, badKey("lock", key)
	}
	be := binary.BigEndian
	return base.Ino(be.Uint64(key[1:])), key[9], be.Uint64(key[10:]), be.Uint64(key[18:]), nil
}

// decodeBlobKey returns the object key of a blob record.
func decodeBlobKey(key []byte) ([]byte, error) {
	if len(key) == 0 || key[0] != pBlob {
		return nil, badKey("blob", key)
	}
	return key[1:], nil
}

// blobSlice returns the slice id in a blob key (an object key
// chunks/…/<id>_<index>_<length>); ok is false for a key that is not one.
func blobSlice(key []byte) (uint64, bool) {
	obj, err := decodeBlobKey(key)
	if err != nil {
		return 0, false
	}
	name := obj[bytes.LastIndexByte(obj, '/')+1:]
	idStr, _, ok := bytes.Cut(name, []byte{'_'})
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseUint(string(idStr), 10, 64)
	return id, err == nil
}

// blobSplit is a key between the blob keys of slices below id and those
// of id and above, when the keys follow chunk.BlockKey's layout
// (chunks/<id/1e6>/<id/1e3>/<id>_…) and the ids have as many digits (as
// inline slice ids, which all have base.InlineBit, do): where a parallel
// scan of the blobs splits them.
func blobSplit(id uint64) []byte {
	return blobKey("chunks/" + strconv.FormatUint(id/1_000_000, 10) + "/" + strconv.FormatUint(id/1_000, 10) + "/" + strconv.FormatUint(id, 10))
}

// inodeKinds are the prefixes of the records keyed by an inode (the
// parent, for entries): the per-inode records a dump carries, attributes
// first.
var inodeKinds = []byte{pAttr, pDentry, pSymlink, pXattr, pChunk}

// inodeFrom is the first key of kind p (one of inodeKinds) whose inode
// field is ino or more.
func inodeFrom(p byte, ino uint64) []byte { return u64([]byte{p}, ino) }

// keySession returns the session a hold, lock, reservation or recall key
// belongs to; ok is false for other or malformed keys.
func keySession(key []byte) (sid uint64, ok bool) {
	var err error
	if len(key) == 0 {
		return 0, false
	}
	switch key[0] {
	case pHold:
		_, sid, err = decodeHoldKey(key)
	case pLock:
		_, _, sid, _, err = decodeLockKey(key)
	case pReserved:
		sid, _, err = decodeReservedKey(key)
	case pRecall:
		sid, _, err = decodeRecallKey(key)
	case pGrant:
		sid, _, err = decodeGrantKey(key)
	default:
		return 0, false
	}
	return sid, err == nil
}

// Logical keys of versioned records.

func decodeAttrKey(logical []byte) (base.Ino, error) {
	ino, err := decodeID("attribute", pAttr, logical)
	return base.Ino(ino), err
}
func decodeSymlinkKey(logical []byte) (base.Ino, error) {
	ino, err := decodeID("symlink", pSymlink, logical)
	return base.Ino(ino), err
}
func decodeDentryKey(logical []byte) (parent base.Ino, name []byte, err error) {
	return decodeNamed("dentry", pDentry, logical)
}
func decodeXattrKey(logical []byte) (ino base.Ino, name []byte, err error) {
	return decodeNamed("xattr", pXattr, logical)
}
func decodeChunkKey(logical []byte) (ino base.Ino, index uint32, err error) {
	if len(logical) != 1+8+4 || logical[0] != pChunk {
		return 0, 0, badKey("chunk", logical)
	}
	return base.Ino(binary.BigEndian.Uint64(logical[1:])), binary.BigEndian.Uint32(logical[9:]), nil
}

// decodeChangeKey parses a change log key into its epoch and the logical
// key that changed (aliasing key).
func decodeChangeKey(key []byte) (epoch uint64, logical []byte, err error) {
	if len(key) < 1+8+1 || key[0] != pChange {
		return 0, nil, badKey("change log", key)
	}
	return binary.BigEndian.Uint64(key[1:]), key[1+8:], nil
}

// versionLogical returns the logical part of a physical versioned key
// (aliasing key); ok is false if key is too short to be one.
func versionLogical(key []byte) (logical []byte, ok bool) {
	if len(key) < 1+epochLen {
		return nil, false
	}
	return key[:len(key)-epochLen], true
}

// keyAfter returns a new key that sorts right after k and before any
// other key: the end of a range holding k alone, or where a scan resumes
// after k.
func keyAfter(k []byte) []byte {
	return append(append(make([]byte, 0, len(k)+1), k...), 0)
}

// keyIno returns the inode that leads a key whose first field is an inode:
// attribute, dentry (the parent), symlink, xattr, chunk (logical or
// physical), hold, orphan, lock and lease keys. It checks the prefix and
// the length of that field only; ok is false for keys of other kinds.
func keyIno(key []byte) (ino base.Ino, ok bool) {
	if len(key) < 1+8 {
		return 0, false
	}
	switch key[0] {
	case pAttr, pDentry, pSymlink, pXattr, pChunk, pHold, pOrphan, pLock, pLease:
		return base.Ino(binary.BigEndian.Uint64(key[1:])), true
	}
	return 0, false
}

// KeyInfo is a decoded key, for fsck, dumps and debugging.
type KeyInfo struct {
	Kind    string // "settings", "epoch", "frozen", "counter", "session", "hold", "pending", "drop", "orphan", "attr", "dentry", "symlink", "xattr", "chunk", "reserved", "lock", "expired", "snapshot", "change", "snapshot-job", "fence", "shared", "lease", "recall", "quota", "replica", "grant"
	Ino     base.Ino
	Parent  base.Ino // dentry
	Name    string   // dentry or xattr name
	Index   uint32   // chunk index
	ID      uint64   // session id (session, hold, reserved, lock, expired, recall, grant) or slice id (pending, shared)
	Counter byte     // counter kind (of a counter or a grant); lock kind for locks
	Shard   int      // counter delta or quota usage shard plus one; 0 for the base counter or quota record
	Start   uint64   // first slice id of a reservation
	Owner   uint64   // lock owner
	Epoch   uint64   // versioned records; change log, snapshot job
	Logical string   // change log: the logical key that changed (raw bytes)
}

// DecodeKey parses any key of the layout above. It returns an error wrapping
// base.ErrIO for keys that do not belong to the layout; it never panics.
func DecodeKey(key []byte) (KeyInfo, error) {
	bad := func(why string) (KeyInfo, error) {
		return KeyInfo{}, fmt.Errorf("bad key %x: %s: %w", key, why, base.ErrIO)
	}
	if len(key) == 0 {
		return bad("empty")
	}
	rest := key[1:]
	fixed := func(n int) bool { return len(rest) == n }
	switch key[0] {
	case pSettings, pEpoch, pFrozen, pLoad, pReplica:
		if !fixed(0) {
			return bad("trailing bytes")
		}
		return KeyInfo{Kind: map[byte]string{pSettings: "settings", pEpoch: "epoch", pFrozen: "frozen", pLoad: "load", pReplica: "replica"}[key[0]]}, nil
	case pCounter:
		switch {
		case fixed(1):
			return KeyInfo{Kind: "counter", Counter: rest[0]}, nil
		case fixed(2):
			return KeyInfo{Kind: "counter", Counter: rest[0], Shard: int(rest[1]) + 1}, nil
		}
		return bad("counter length")
	case pSession, pExpired:
		if !fixed(8) {
			return bad("session length")
		}
		kind := "session"
		if key[0] == pExpired {
			kind = "expired"
		}
		return KeyInfo{Kind: kind, ID: binary.BigEndian.Uint64(rest)}, nil
	case pReserved:
		if !fixed(16) {
			return bad("reservation length")
		}
		return KeyInfo{Kind: "reserved", ID: binary.BigEndian.Uint64(rest), Start: binary.BigEndian.Uint64(rest[8:])}, nil
	case pGrant:
		sid, kind, err := decodeGrantKey(key)
		if err != nil {
			return bad("grant key")
		}
		return KeyInfo{Kind: "grant", ID: sid, Counter: kind}, nil
	case pLock:
		if fixed(9) && rest[8] == lockGuard {
			return KeyInfo{Kind: "lock-guard", Ino: base.Ino(binary.BigEndian.Uint64(rest))}, nil
		}
		if !fixed(25) || (rest[8] != lockFlock && rest[8] != lockPosix) {
			return bad("lock key shape")
		}
		return KeyInfo{Kind: "lock", Ino: base.Ino(binary.BigEndian.Uint64(rest)), Counter: rest[8],
			ID: binary.BigEndian.Uint64(rest[9:]), Owner: binary.BigEndian.Uint64(rest[17:])}, nil
	case pHold:
		if !fixed(16) {
			return bad("hold length")
		}
		return KeyInfo{Kind: "hold", Ino: base.Ino(binary.BigEndian.Uint64(rest)), ID: binary.BigEndian.Uint64(rest[8:])}, nil
	case pPending, pShared:
		if !fixed(8) {
			return bad("slice key length")
		}
		kind := "pending"
		if key[0] == pShared {
			kind = "shared"
		}
		return KeyInfo{Kind: kind, ID: binary.BigEndian.Uint64(rest)}, nil
	case pDrop:
		id, owner, err := decodeDropKey(key)
		if err != nil {
			return bad("drop key")
		}
		ino, index, _ := decodeChunkKey(owner)
		return KeyInfo{Kind: "drop", ID: id, Ino: ino, Index: index}, nil
	case pQuota:
		dir, shard, err := decodeQuotaKey(key)
		if err != nil {
			return bad("quota key")
		}
		return KeyInfo{Kind: "quota", Ino: dir, Shard: shard + 1}, nil
	case pLease:
		if !fixed(8) {
			return bad("lease length")
		}
		return KeyInfo{Kind: "lease", Ino: base.Ino(binary.BigEndian.Uint64(rest))}, nil
	case pRecall:
		if !fixed(16) {
			return bad("recall length")
		}
		return KeyInfo{Kind: "recall", ID: binary.BigEndian.Uint64(rest), Ino: base.Ino(binary.BigEndian.Uint64(rest[8:]))}, nil
	case pOrphan:
		if !fixed(8) {
			return bad("orphan length")
		}
		return KeyInfo{Kind: "orphan", Ino: base.Ino(binary.BigEndian.Uint64(rest))}, nil
	case pSnapshot:
		if len(rest) < 2 || rest[len(rest)-1] != 0 || bytes.IndexByte(rest[:len(rest)-1], 0) >= 0 {
			return bad("snapshot name shape")
		}
		return KeyInfo{Kind: "snapshot", Name: string(rest[:len(rest)-1])}, nil
	case pChange:
		if len(rest) < 8+1 {
			return bad("change log length")
		}
		return KeyInfo{Kind: "change", Epoch: binary.BigEndian.Uint64(rest), Logical: string(rest[8:])}, nil
	case pSnapJob:
		if !fixed(8) {
			return bad("snapshot job length")
		}
		return KeyInfo{Kind: "snapshot-job", Epoch: binary.BigEndian.Uint64(rest)}, nil
	case pFence:
		if !fixed(1) {
			return bad("fence length")
		}
		return KeyInfo{Kind: "fence", Shard: int(rest[0]) + 1}, nil
	}
	logical, epoch, err := splitVersion(key)
	if err != nil {
		return KeyInfo{}, err
	}
	rest = logical[1:]
	switch key[0] {
	case pAttr, pSymlink:
		if len(rest) != 8 {
			return bad("inode key length")
		}
		kind := "attr"
		if key[0] == pSymlink {
			kind = "symlink"
		}
		return KeyInfo{Kind: kind, Ino: base.Ino(binary.BigEndian.Uint64(rest)), Epoch: epoch}, nil
	case pChunk:
		if len(rest) != 12 {
			return bad("chunk key length")
		}
		return KeyInfo{Kind: "chunk", Ino: base.Ino(binary.BigEndian.Uint64(rest)),
			Index: binary.BigEndian.Uint32(rest[8:]), Epoch: epoch}, nil
	case pDentry, pXattr:
		if len(rest) < 8+2 || rest[len(rest)-1] != 0 {
			return bad("name key shape")
		}
		name := rest[8 : len(rest)-1]
		if bytes.IndexByte(name, 0) >= 0 {
			return bad("NUL in name")
		}
		ino := base.Ino(binary.BigEndian.Uint64(rest))
		if key[0] == pDentry {
			return KeyInfo{Kind: "dentry", Parent: ino, Name: string(name), Epoch: epoch}, nil
		}
		return KeyInfo{Kind: "xattr", Ino: ino, Name: string(name), Epoch: epoch}, nil
	}
	return bad("unknown prefix")
}
