package meta

// Check of snapshots: the snapshot list, the versions kept for them, the
// change log, and the namespace of every snapshot's tree.

import (
	"bytes"
	"slices"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

func (ck *checker) checkSnapshots(r kv.Reader) error {
	snaps, err := listSnapshots(r)
	if err != nil {
		ck.report("bad-record", 0, nil, "snapshot list: %v", err)
		return nil
	}
	t := &wtx{Txn: readTxn{r}}
	if err := t.loadEpochs(); err != nil {
		return err
	}
	var epochs []uint64
	for _, s := range snaps {
		epochs = append(epochs, s.Epoch)
		if s.Epoch >= t.epoch {
			ck.report("snapshot-mismatch", 0, nil, "snapshot %q has epoch %d, not below the live epoch %d", s.Name, s.Epoch, t.epoch)
		}
	}
	if !slices.Equal(epochs, t.frozen) {
		ck.report("snapshot-mismatch", 0, nil, "snapshot records have epochs %v, frozen epochs are %v", epochs, t.frozen)
	}
	jobs := false
	if err := r.Scan(prefixOnly(pSnapJob), kv.PrefixEnd(prefixOnly(pSnapJob)), false, func(_, _ []byte) bool {
		jobs = true
		return false
	}); err != nil {
		return err
	}
	// While a deletion is unfinished its versions and change log are
	// expected to be there; gc or the next deletion finishes it.
	if !jobs {
		if err := ck.checkVersions(r, t); err != nil {
			return err
		}
	}
	for _, s := range snaps {
		if err := ck.checkTree(r, s); err != nil {
			return err
		}
	}
	return nil
}

// checkVersions reports versions that no view can see and change log
// entries that nothing needs.
func (ck *checker) checkVersions(r kv.Reader, t *wtx) error {
	for _, p := range []byte{pAttr, pDentry, pSymlink, pXattr, pChunk} {
		var cur []byte
		var vs []version
		flush := func() {
			if cur == nil {
				return
			}
			for i, keep := range t.keepVersions(vs) {
				if !keep {
					ck.report("leaked-version", 0, nil, "record %x: version of epoch %d is seen by no snapshot", cur, vs[i].epoch)
				}
			}
		}
		err := r.Scan(prefixOnly(p), kv.PrefixEnd(prefixOnly(p)), false, func(k, v []byte) bool {
			logical, e, err := splitVersion(k)
			if err != nil {
				ck.report("bad-record", 0, nil, "key %x: %v", k, err)
				return true
			}
			if !bytes.Equal(logical, cur) {
				flush()
				cur, vs = append(cur[:0:0], logical...), vs[:0]
			}
			vs = append(vs, version{e, append([]byte(nil), v...)})
			return true
		})
		if err != nil {
			return err
		}
		flush()
	}
	bound := t.epoch
	if len(t.frozen) > 0 {
		bound = t.frozen[0]
	}
	n := 0
	if err := r.Scan(prefixOnly(pChange), changePrefix(bound+1), false, func(_, _ []byte) bool {
		n++
		return true
	}); err != nil {
		return err
	}
	if n > 0 {
		ck.report("stale-change-log", 0, nil, "%d change log entries at or below epoch %d, which no snapshot needs", n, bound)
	}
	return nil
}

// checkTree checks the namespace of one snapshot: entries point to
// inodes, link counts match, every inode is reachable (or an unlinked
// file that was open when the snapshot was taken), symlinks have targets.
func (ck *checker) checkTree(r kv.Reader, s Snapshot) error {
	e := s.Epoch
	attrs := make(map[base.Ino]base.Attr)
	if err := vscan(r, prefixOnly(pAttr), nil, e, func(k, v []byte) bool {
		ino, err := decodeAttrKey(k)
		if err != nil {
			ck.report("bad-record", 0, nil, "snapshot %q: %v", s.Name, err)
			return true
		}
		a, err := decodeAttr(v)
		if err != nil {
			ck.report("bad-record", ino, nil, "snapshot %q: attribute: %v", s.Name, err)
			return true
		}
		attrs[ino] = a
		return true
	}); err != nil {
		return err
	}
	if _, ok := attrs[base.RootIno]; !ok {
		ck.report("bad-record", base.RootIno, nil, "snapshot %q: root directory has no attribute", s.Name)
	}
	links := make(map[base.Ino]uint32)
	subdirs := make(map[base.Ino]uint32)
	if err := vscan(r, prefixOnly(pDentry), nil, e, func(k, v []byte) bool {
		parent, rawName, err := decodeDentryKey(k)
		if err != nil {
			ck.report("bad-record", 0, nil, "snapshot %q: %v", s.Name, err)
			return true
		}
		name := string(rawName)
		ino, _, err := decodeDentry(v)
		if err != nil {
			ck.report("bad-record", parent, nil, "snapshot %q: entry %q: %v", s.Name, name, err)
			return true
		}
		a, ok := attrs[ino]
		if !ok {
			ck.report("dangling-dentry", ino, nil, "snapshot %q: entry %q in %d points to missing inode %d", s.Name, name, parent, ino)
			return true
		}
		links[ino]++
		if a.Type == base.TypeDir {
			subdirs[parent]++
		}
		return true
	}); err != nil {
		return err
	}
	symlinks := make(map[base.Ino]bool)
	if err := vscan(r, prefixOnly(pSymlink), nil, e, func(k, _ []byte) bool {
		ino, err := decodeSymlinkKey(k)
		if err != nil {
			ck.report("bad-record", 0, nil, "snapshot %q: %v", s.Name, err)
			return true
		}
		symlinks[ino] = true
		return true
	}); err != nil {
		return err
	}
	for ino, a := range attrs {
		switch {
		case a.Type == base.TypeDir:
			if want := 2 + subdirs[ino]; a.Nlink != want {
				ck.report("bad-nlink", ino, nil, "snapshot %q: directory nlink %d, want %d", s.Name, a.Nlink, want)
			}
			if ino != base.RootIno && links[ino] != 1 {
				ck.report("unreachable", ino, nil, "snapshot %q: directory has %d entries", s.Name, links[ino])
			}
		case a.Nlink != links[ino]:
			ck.report("bad-nlink", ino, nil, "snapshot %q: nlink %d, %d entries", s.Name, a.Nlink, links[ino])
		}
		if a.Type == base.TypeSymlink && !symlinks[ino] {
			ck.report("missing-symlink", ino, nil, "snapshot %q: symlink has no target record", s.Name)
		}
	}
	return nil
}
