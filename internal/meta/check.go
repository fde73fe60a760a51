package meta

// Check (fsck) verifies the invariants of the metadata from one consistent
// view and optionally repairs what it safely can.

import (
	"bytes"
	"context"
	"fmt"
	"sort"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

type checkDentry struct {
	parent base.Ino
	name   string
	ino    base.Ino
	typ    base.FileType
}

type checker struct {
	m        *Meta
	problems []Problem
	fixes    []func(o *op) error
}

func (ck *checker) report(kind string, ino base.Ino, fix func(o *op) error, format string, args ...any) {
	ck.problems = append(ck.problems, Problem{Kind: kind, Ino: ino, Detail: fmt.Sprintf(format, args...)})
	if fix != nil {
		ck.fixes = append(ck.fixes, fix)
	}
}

// Check verifies the volume's invariants and returns the problems found
// (empty for a healthy volume). Kinds: bad-record, orphan-dentry,
// dangling-dentry, type-mismatch, bad-parent, dir-multiple-links,
// bad-nlink, unreachable, unheld-orphan, missing-symlink, orphan-record,
// bad-counter, pending-referenced, bad-shared-count, stale-hold, stale-orphan-record,
// dead-session-record, and for snapshots snapshot-mismatch,
// leaked-version, stale-change-log and, inside a snapshot's tree,
// dangling-dentry, bad-nlink, unreachable, missing-symlink. With
// repair, fixable problems (counters, link counts, dangling entries,
// records of missing inodes, stale holds, unheld orphans) are fixed in one
// transaction; the problems returned are those found before repairing.
// Concurrent modifications during a repairing check may be reported as
// problems; run repairs on a quiet volume.
func (m *Meta) Check(ctx context.Context, repair bool) ([]Problem, error) {
	return m.check(ctx, repair, (*checker).run)
}

// check runs a checker's pass in one view, names the problems' inodes in
// the same view, and with repair applies the fixes in one transaction.
func (m *Meta) check(ctx context.Context, repair bool, pass func(ck *checker, r kv.Reader) error) ([]Problem, error) {
	ck := &checker{m: m}
	if err := m.view(ctx, func(r kv.Reader) error {
		ck.problems, ck.fixes = nil, nil
		if err := pass(ck, r); err != nil {
			return err
		}
		n := newNamer(r, latestEpoch)
		for i := range ck.problems {
			ck.problems[i].Path = n.name(ck.problems[i].Ino)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if repair && len(ck.fixes) > 0 {
		err := m.mutate(ctx, func(o *op) error {
			for _, fix := range ck.fixes {
				if err := fix(o); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return ck.problems, fmt.Errorf("repairing: %w", err)
		}
	}
	return ck.problems, nil
}

// fixAttr is a repair that changes ino's attribute with set (nothing if
// the inode is gone by then).
func fixAttr(ino base.Ino, set func(a *base.Attr)) func(o *op) error {
	return func(o *op) error {
		a, err := o.attr(ino)
		if err != nil {
			return nil
		}
		set(a)
		o.put(ino, a)
		return nil
	}
}

// scanTree reads every live attribute and entry.
func (ck *checker) scanTree(r kv.Reader) (map[base.Ino]base.Attr, []checkDentry, base.Ino, error) {
	attrs := make(map[base.Ino]base.Attr)
	var maxIno base.Ino
	if err := vscan(r, prefixOnly(pAttr), nil, latestEpoch, func(k, v []byte) bool {
		ino, err := decodeAttrKey(k)
		if err != nil {
			ck.report("bad-record", 0, nil, "%v", err)
			return true
		}
		maxIno = max(maxIno, ino)
		a, err := decodeAttr(v)
		if err != nil {
			ck.report("bad-record", ino, nil, "attribute: %v", err)
			return true
		}
		attrs[ino] = a
		return true
	}); err != nil {
		return nil, nil, 0, err
	}
	if _, ok := attrs[base.RootIno]; !ok {
		ck.report("bad-record", base.RootIno, nil, "root directory has no attribute")
	}

	var dentries []checkDentry
	if err := vscan(r, prefixOnly(pDentry), nil, latestEpoch, func(k, v []byte) bool {
		parent, rawName, err := decodeDentryKey(k)
		if err != nil {
			ck.report("bad-record", 0, nil, "%v", err)
			return true
		}
		name := string(rawName)
		ino, typ, err := decodeDentry(v)
		if err != nil {
			ck.report("bad-record", parent, nil, "entry %q: %v", name, err)
			return true
		}
		dentries = append(dentries, checkDentry{parent, name, ino, typ})
		return true
	}); err != nil {
		return nil, nil, 0, err
	}
	return attrs, dentries, maxIno, nil
}

func (ck *checker) run(r kv.Reader) error {
	ck.problems, ck.fixes = nil, nil
	attrs, dentries, maxIno, err := ck.scanTree(r)
	if err != nil {
		return err
	}
	links := make(map[base.Ino]uint32)
	subdirs := make(map[base.Ino]uint32)
	for _, d := range dentries {
		p, ok := attrs[d.parent]
		delDentry := func(o *op) error { return o.vdel(dentryKey(d.parent, d.name)) }
		if !ok || p.Type != base.TypeDir {
			ck.report("orphan-dentry", d.parent, delDentry, "entry %q in missing or non-directory inode %d", d.name, d.parent)
			continue
		}
		a, ok := attrs[d.ino]
		if !ok {
			ck.report("dangling-dentry", d.ino, delDentry, "entry %q in %d points to missing inode %d", d.name, d.parent, d.ino)
			continue
		}
		if a.Type != d.typ {
			ck.report("type-mismatch", d.ino, nil, "entry %q in %d says %s, inode is %s", d.name, d.parent, d.typ, a.Type)
		}
		links[d.ino]++
		if a.Type == base.TypeDir {
			subdirs[d.parent]++
			if a.Parent != d.parent {
				ck.report("bad-parent", d.ino, nil, "directory %q in %d has parent %d", d.name, d.parent, a.Parent)
			}
		}
	}

	holds, orphans, sessions, err := ck.loadHolds(r)
	if err != nil {
		return err
	}
	if err := ck.checkLocks(r, sessions); err != nil {
		return err
	}
	symlinks, err := ownersOf(r, pSymlink)
	if err != nil {
		return err
	}

	var usedBytes uint64
	inos := make([]base.Ino, 0, len(attrs))
	for ino := range attrs {
		inos = append(inos, ino)
	}
	sort.Slice(inos, func(i, j int) bool { return inos[i] < inos[j] })
	for _, ino := range inos {
		a := attrs[ino]
		usedBytes += uint64(usageBytes(&a))
		setNlink := func(n uint32) func(o *op) error {
			return fixAttr(ino, func(a *base.Attr) { a.Nlink = n })
		}
		if a.Type == base.TypeDir {
			want := 2 + subdirs[ino]
			if a.Nlink != want {
				ck.report("bad-nlink", ino, setNlink(want), "directory nlink %d, want %d", a.Nlink, want)
			}
			if ino == base.RootIno {
				if a.Parent != base.RootIno {
					ck.report("bad-parent", ino, nil, "root has parent %d", a.Parent)
				}
			} else if links[ino] == 0 {
				ck.report("unreachable", ino, nil, "directory has no entry")
			} else if links[ino] > 1 {
				ck.report("dir-multiple-links", ino, nil, "directory has %d entries", links[ino])
			}
		} else {
			switch {
			case links[ino] == 0 && a.Nlink == 0:
				if len(holds[ino]) == 0 && ck.m.openCount(ino) == 0 {
					ck.report("unheld-orphan", ino, func(o *op) error { return o.destroyIfOrphan(ino) },
						"unlinked inode is not held open by any session")
				} else if !orphans[ino] {
					ck.report("missing-orphan-record", ino, func(o *op) error { o.Set(orphanKey(ino), nil); return nil },
						"unlinked open inode has no orphan record")
				}
			case links[ino] == 0:
				ck.report("unreachable", ino, nil, "inode with nlink %d has no entry", a.Nlink)
			case a.Nlink != links[ino]:
				ck.report("bad-nlink", ino, setNlink(links[ino]), "nlink %d, %d entries", a.Nlink, links[ino])
			}
		}
		if a.Type == base.TypeSymlink && !symlinks[ino] {
			ck.report("missing-symlink", ino, nil, "symlink has no target record")
		}
	}
	for ino := range orphans {
		if a, ok := attrs[ino]; !ok || a.Nlink != 0 {
			ck.report("stale-orphan-record", ino, func(o *op) error { o.Delete(orphanKey(ino)); return nil },
				"orphan record for a missing or linked inode")
		}
	}
	for ino, sids := range holds {
		for _, sid := range sids {
			if _, ok := attrs[ino]; !ok || (sid != 0 && !sessions[sid]) {
				ck.report("stale-hold", ino, func(o *op) error {
					o.Delete(holdKey(ino, sid))
					return o.destroyIfOrphan(ino)
				}, "hold of session %d on a missing inode or by a gone session", sid)
			}
		}
	}
	for ino := range symlinks {
		if a, ok := attrs[ino]; !ok || a.Type != base.TypeSymlink {
			ck.report("orphan-record", ino, func(o *op) error { return o.vdel(symlinkKey(ino)) },
				"symlink target of a missing or non-symlink inode")
		}
	}
	xowners, err := ownersOf(r, pXattr)
	if err != nil {
		return err
	}
	for ino := range xowners {
		if _, ok := attrs[ino]; !ok {
			ck.report("orphan-record", ino, func(o *op) error { return o.vdelAll(xattrPrefix(ino)) },
				"xattrs of a missing inode")
		}
	}
	maxSlice, err := ck.checkChunks(r, attrs)
	if err != nil {
		return err
	}
	if err := ck.checkSnapshots(r); err != nil {
		return err
	}
	if err := ck.checkQuotas(r, attrs, dentries); err != nil {
		return err
	}
	return ck.checkCounters(r, uint64(len(attrs)), usedBytes, maxIno, maxSlice)
}

func (ck *checker) loadHolds(r kv.Reader) (holds map[base.Ino][]uint64, orphans map[base.Ino]bool, sessions map[uint64]bool, err error) {
	holds = make(map[base.Ino][]uint64)
	orphans = make(map[base.Ino]bool)
	sessions = make(map[uint64]bool)
	err = r.Scan(prefixOnly(pHold), kv.PrefixEnd(prefixOnly(pHold)), false, func(k, _ []byte) bool {
		if ino, sid, err := decodeHoldKey(k); err == nil {
			holds[ino] = append(holds[ino], sid)
		}
		return true
	})
	if err != nil {
		return
	}
	err = r.Scan(prefixOnly(pOrphan), kv.PrefixEnd(prefixOnly(pOrphan)), false, func(k, _ []byte) bool {
		if ino, err := decodeOrphanKey(k); err == nil {
			orphans[ino] = true
		}
		return true
	})
	if err != nil {
		return
	}
	err = r.Scan(prefixOnly(pSession), kv.PrefixEnd(prefixOnly(pSession)), false, func(k, _ []byte) bool {
		if sid, err := decodeSessionKey(k); err == nil {
			sessions[sid] = true
		}
		return true
	})
	return
}

// ownersOf returns the inodes that have a live record under prefix p
// (keys starting with p, ino).
func ownersOf(r kv.Reader, p byte) (map[base.Ino]bool, error) {
	out := make(map[base.Ino]bool)
	err := vscan(r, prefixOnly(p), nil, latestEpoch, func(k, _ []byte) bool {
		if ino, ok := keyIno(k); ok {
			out[ino] = true
		}
		return true
	})
	return out, err
}

// checkChunks verifies chunk records and pending deletes; it returns the
// largest slice id seen.
func (ck *checker) checkChunks(r kv.Reader, attrs map[base.Ino]base.Attr) (uint64, error) {
	referenced := make(map[uint64]bool)
	owners := make(map[uint64]int) // slice → chunk records (any version) referencing it
	var lastOwner []byte
	seenInOwner := make(map[uint64]bool)
	var maxSlice uint64
	bad := make(map[base.Ino]bool)
	// Live chunk records must belong to live files (older versions,
	// which snapshots see, are checked with their snapshot's tree).
	if err := vscan(r, prefixOnly(pChunk), nil, latestEpoch, func(k, _ []byte) bool {
		ino, _, err := decodeChunkKey(k)
		if err != nil {
			ck.report("bad-record", 0, nil, "%v", err)
			return true
		}
		if a, ok := attrs[ino]; (!ok || a.Type != base.TypeFile) && !bad[ino] {
			bad[ino] = true
			ck.report("orphan-record", ino, func(o *op) error { return o.dropChunks(ino, 0) },
				"chunks of a missing or non-file inode")
		}
		return true
	}); err != nil {
		return 0, err
	}
	err := r.Scan(prefixOnly(pChunk), kv.PrefixEnd(prefixOnly(pChunk)), false, func(k, v []byte) bool {
		ki, err := DecodeKey(k)
		if err != nil {
			ck.report("bad-record", 0, nil, "chunk key: %v", err)
			return true
		}
		if len(v) == 1 && v[0] == tagTombstone {
			return true
		}
		if len(v) == 0 || v[0] != tagLive {
			ck.report("bad-record", ki.Ino, nil, "chunk %d: bad version tag", ki.Index)
			return true
		}
		ss, err := decodeSlices(v[1:])
		if err != nil {
			ck.report("bad-record", ki.Ino, nil, "chunk %d: %v", ki.Index, err)
			return true
		}
		if logical, _, err := splitVersion(k); err == nil && string(logical) != string(lastOwner) {
			lastOwner = append(lastOwner[:0], logical...)
			clear(seenInOwner)
		}
		for _, s := range ss {
			referenced[s.ID] = true
			maxSlice = max(maxSlice, base.SliceNumber(s.ID))
			if s.ID != 0 && !seenInOwner[s.ID] {
				seenInOwner[s.ID] = true
				owners[s.ID]++
			}
		}
		return true
	})
	if err != nil {
		return 0, err
	}
	shared := make(map[uint64]uint32)
	err = r.Scan(prefixOnly(pShared), kv.PrefixEnd(prefixOnly(pShared)), false, func(k, v []byte) bool {
		ki, err := DecodeKey(k)
		n, derr := decodeU32(v)
		if err != nil || derr != nil || n == 0 {
			ck.report("bad-record", 0, nil, "shared slice record %x", k)
			return true
		}
		shared[ki.ID] = n
		return true
	})
	if err != nil {
		return 0, err
	}
	pending := make(map[uint64]bool)
	err = r.Scan(prefixOnly(pPending), kv.PrefixEnd(prefixOnly(pPending)), false, func(k, v []byte) bool {
		ki, err := DecodeKey(k)
		if err != nil || len(v) != 4 {
			ck.report("bad-record", 0, nil, "pending delete %x", k)
			return true
		}
		maxSlice = max(maxSlice, base.SliceNumber(ki.ID))
		pending[ki.ID] = true
		if referenced[ki.ID] && shared[ki.ID] == 0 {
			id := ki.ID
			ck.report("pending-referenced", 0, func(o *op) error { o.Delete(pendingKey(id)); return nil },
				"slice %d is queued for deletion but still referenced", id)
		}
		return true
	})
	if err != nil {
		return 0, err
	}
	// Drop records: one per chunk record that stopped referencing a
	// queued slice; without its pending delete, one is left over.
	drops := make(map[uint64]int)
	err = r.Scan(prefixOnly(pDrop), kv.PrefixEnd(prefixOnly(pDrop)), false, func(k, _ []byte) bool {
		id, _, err := decodeDropKey(k)
		if err != nil {
			ck.report("bad-record", 0, nil, "drop record %x", k)
			return true
		}
		drops[id]++
		if !pending[id] {
			key := bytes.Clone(k)
			ck.report("stale-drop", 0, func(o *op) error { o.Delete(key); return nil },
				"slice %d has a drop record but no pending delete", id)
		}
		return true
	})
	if err != nil {
		return 0, err
	}
	// A slice's extra owners: chunk records referencing it beyond the
	// first, plus the drops its pending delete waits to take off (one for
	// a pending delete from before drop records).
	for id, n := range shared {
		want := owners[id] - 1
		if pending[id] {
			want += max(drops[id], 1)
		}
		if int(n) != want {
			id, want := id, want
			ck.report("bad-shared-count", 0, func(o *op) error {
				if want <= 0 {
					o.Delete(sharedKey(id))
				} else {
					o.Set(sharedKey(id), u32(nil, uint32(want)))
				}
				return nil
			}, "slice %d has %d extra owners recorded, %d counted", id, n, want)
		}
	}
	for id, n := range owners {
		if n > 1 && shared[id] == 0 {
			ck.report("bad-shared-count", 0, nil, "slice %d is referenced by %d chunk records but has no owner record", id, n)
		}
	}
	return maxSlice, nil
}

func (ck *checker) checkCounters(r kv.Reader, inodes, bytes uint64, maxIno base.Ino, maxSlice uint64) error {
	get := func(kind byte) (uint64, error) { return counter(r, kind) }
	setTo := func(kind byte, v uint64) func(o *op) error {
		return func(o *op) error { o.Set(counterKey(kind), u64(nil, v)); return nil }
	}
	setUsage := func(kind byte, v uint64) func(o *op) error {
		return func(o *op) error { return o.setUsage(kind, v) }
	}
	n, err := usage(r, counterUsedInodes)
	if err != nil {
		return err
	}
	if n != inodes {
		ck.report("bad-counter", 0, setUsage(counterUsedInodes, inodes), "used inodes %d, counted %d", n, inodes)
	}
	if n, err = usage(r, counterUsedBytes); err != nil {
		return err
	}
	if n != bytes {
		ck.report("bad-counter", 0, setUsage(counterUsedBytes, bytes), "used bytes %d, counted %d", n, bytes)
	}
	if n, err = get(counterNextInode); err != nil {
		return err
	}
	if n <= uint64(maxIno) {
		ck.report("bad-counter", 0, setTo(counterNextInode, uint64(maxIno)+1), "next inode %d, but inode %d exists", n, maxIno)
	}
	if n, err = get(counterNextSlice); err != nil {
		return err
	}
	if n <= maxSlice {
		ck.report("bad-counter", 0, setTo(counterNextSlice, maxSlice+1), "next slice id %d, but slice %d exists", n, maxSlice)
	}
	return nil
}

// checkLocks verifies lock records and reservations: well-formed, and of
// sessions that still exist (others are released when a client next opens
// the volume, or by repair).
func (ck *checker) checkLocks(r kv.Reader, sessions map[uint64]bool) error {
	for _, p := range []byte{pLock, pReserved, pGrant} {
		err := r.Scan(prefixOnly(p), kv.PrefixEnd(prefixOnly(p)), false, func(k, v []byte) bool {
			key := append([]byte(nil), k...)
			drop := func(o *op) error { o.Delete(key); return nil }
			ki, err := DecodeKey(k)
			if err == nil && ki.Kind == "lock-guard" {
				return true
			}
			if err == nil && ki.Kind == "lock" {
				_, err = decodeLocks(ki.Counter, v)
			}
			if err == nil && ki.Kind == "grant" {
				_, err = decodeU64(v)
			}
			if err == nil && ki.Kind == "reserved" {
				var end uint64
				if end, err = decodeU64(v); err == nil && end <= ki.Start {
					err = fmt.Errorf("empty range %d-%d", ki.Start, end)
				}
			}
			switch {
			case err != nil:
				ck.report("bad-record", ki.Ino, drop, "%s %x: %v", ki.Kind, k, err)
			case !sessions[ki.ID]:
				ck.report("dead-session-record", ki.Ino, drop, "%s of session %d, which is gone", ki.Kind, ki.ID)
			}
			return true
		})
		if err != nil {
			return err
		}
	}
	return nil
}
