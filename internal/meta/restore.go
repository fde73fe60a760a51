package meta

// Restore: copy a file or tree of a snapshot back into the live volume
// without copying data. The copies are new inodes whose chunk records
// reference the snapshot's slices; each such slice gains an owner (keys.go
// "O"), so neither the snapshot's deletion nor the copy's deletion frees
// objects the other still reads.

import (
	"context"
	"fmt"
	"path"
	"strings"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// RestoreStats counts what Restore created.
type RestoreStats struct {
	Files, Dirs, Symlinks, Others, Links int
	Bytes                                uint64 // logical bytes of the restored files
}

// ResolvePath walks an absolute path ("/a/b") from the root at the live
// volume (snap nil) or a snapshot, and returns the inode it names.
func (m *Meta) ResolvePath(ctx context.Context, c *Caller, snap *Snapshot, p string) (base.Ino, base.Attr, error) {
	lookup := m.Lookup
	getattr := m.GetAttr
	if snap != nil {
		v := m.View(*snap)
		lookup, getattr = v.Lookup, v.GetAttr
	}
	ino := base.RootIno
	a, err := getattr(ctx, ino)
	if err != nil {
		return 0, base.Attr{}, err
	}
	for _, name := range strings.Split(strings.Trim(path.Clean("/"+p), "/"), "/") {
		if name == "" {
			continue
		}
		if ino, a, err = lookup(ctx, c, ino, name); err != nil {
			return 0, base.Attr{}, fmt.Errorf("%s: %w", p, err)
		}
	}
	return ino, a, nil
}

// Restore copies src (an absolute path in the snapshot called snap) to
// dst (an absolute path in the live volume, which must not exist; its
// parent must). Files keep their mode, owner, times and xattrs and share
// the snapshot's slices; hard links inside the copied tree stay links.
// Each inode is copied in its own transaction, so a failure half-way
// leaves a partial copy that is a valid tree (and can be removed).
// progress, if not nil, is called after each inode with the stats so far.
func (m *Meta) Restore(ctx context.Context, c *Caller, snap, src, dst string, progress func(RestoreStats)) (RestoreStats, error) {
	var st RestoreStats
	s, err := m.SnapshotByName(ctx, snap)
	if err != nil {
		return st, err
	}
	sino, _, err := m.ResolvePath(ctx, c, &s, src)
	if err != nil {
		return st, fmt.Errorf("in snapshot %q: %w", snap, err)
	}
	dst = path.Clean("/" + dst)
	if dst == "/" {
		return st, fmt.Errorf("restore onto the root directory: %w", base.ErrExist)
	}
	dparent, _, err := m.ResolvePath(ctx, c, nil, path.Dir(dst))
	if err != nil {
		return st, err
	}
	r := &restorer{m: m, c: c, snap: s, copies: map[base.Ino]base.Ino{}, progress: progress}
	err = r.copy(ctx, sino, dparent, path.Base(dst))
	return r.st, err
}

type restorer struct {
	m        *Meta
	c        *Caller
	snap     Snapshot
	copies   map[base.Ino]base.Ino // snapshot inode → its copy (hard links)
	st       RestoreStats
	progress func(RestoreStats)
}

// copy copies inode ino of the snapshot as name in live directory parent,
// then its entries if it is a directory.
func (r *restorer) copy(ctx context.Context, ino, parent base.Ino, name string) error {
	if err := createName(name); err != nil {
		return err
	}
	if dup, ok := r.copies[ino]; ok {
		if _, err := r.m.Link(ctx, r.c, dup, parent, name); err != nil {
			return err
		}
		r.st.Links++
		return nil
	}
	nino, err := r.m.allocIno(ctx)
	if err != nil {
		return err
	}
	var a base.Attr
	err = r.m.mutate(ctx, func(o *op) error {
		ok, err := frozenAt(o, r.snap.Epoch)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("snapshot %q was deleted: %w", r.snap.Name, base.ErrStale)
		}
		e := r.snap.Epoch
		if a, err = getAttrAt(o, ino, e); err != nil {
			return err
		}
		p, err := o.freeName(r.c, parent, name, "restore")
		if err != nil {
			return err
		}
		na := a
		na.Nlink, na.Parent, na.Ctime, na.Quota = 1, parent, o.now, p.Quota
		na.Flags &^= base.AttrFlagTrash | base.AttrFlagTrashed // a copy out of a snapshot's trash is an ordinary inode
		switch a.Type {
		case base.TypeDir:
			na.Nlink = 2
		case base.TypeSymlink:
			t, err := readlinkAt(o, ino, e)
			if err != nil {
				return err
			}
			if err := o.vset(symlinkKey(nino), []byte(t)); err != nil {
				return err
			}
		case base.TypeFile:
			if err := o.copyChunks(ino, nino, e); err != nil {
				return err
			}
			if err := o.chargeBytes(nino, &na, usageBytes(&na)); err != nil {
				return err
			}
		}
		var xs [][2][]byte
		var derr error
		if err := vscan(o, xattrPrefix(ino), nil, e, func(k, v []byte) bool {
			_, name, err := decodeXattrKey(k)
			if err != nil {
				derr = err
				return false
			}
			xs = append(xs, [2][]byte{append([]byte(nil), name...), append([]byte(nil), v...)})
			return true
		}); err != nil {
			return err
		}
		if derr != nil {
			return derr
		}
		for _, x := range xs {
			if err := o.vset(xattrKey(nino, string(x[0])), x[1]); err != nil {
				return err
			}
		}
		return o.addInode(nino, &na, parent, p, name)
	})
	if err != nil {
		return fmt.Errorf("restore %q: %w", name, err)
	}
	r.copies[ino] = nino
	switch a.Type {
	case base.TypeDir:
		r.st.Dirs++
	case base.TypeFile:
		r.st.Files++
		r.st.Bytes += a.Length
	case base.TypeSymlink:
		r.st.Symlinks++
	default:
		r.st.Others++
	}
	if r.progress != nil {
		r.progress(r.st)
	}
	if a.Type != base.TypeDir {
		return nil
	}
	after := ""
	v := r.m.View(r.snap)
	for {
		es, err := v.Readdir(ctx, RootCaller, ino, after, 1000, false)
		if err != nil {
			return err
		}
		if len(es) == 0 {
			// Adding the entries touched the copy: give it back the
			// snapshot's times, as cp -a does.
			return r.m.mutate(ctx, func(o *op) error {
				na, err := o.attr(nino)
				if err != nil {
					return err
				}
				na.Atime, na.Mtime = a.Atime, a.Mtime
				o.put(nino, na)
				return nil
			})
		}
		for _, ent := range es {
			if err := r.copy(ctx, ent.Ino, nino, ent.Name); err != nil {
				return err
			}
		}
		after = es[len(es)-1].Name
	}
}

// copyChunks gives file to the chunk records of file from as of epoch e,
// adding an owner to every slice they reference.
func (o *op) copyChunks(from, to base.Ino, e uint64) error {
	cs, err := chunksAt(o, from, e)
	if err != nil {
		return err
	}
	owners := map[uint64]bool{}
	for _, c := range cs {
		if err := o.vset(chunkKey(to, c.Index), encodeSlices(c.Slices)); err != nil {
			return err
		}
		for _, s := range c.Slices {
			if s.ID != 0 {
				owners[s.ID] = true
			}
		}
	}
	if len(owners) == 0 {
		return nil
	}
	ids := make([]uint64, 0, len(owners))
	ranges := make([]kv.Range, 0, len(owners))
	for id := range owners {
		k := sharedKey(id)
		ids = append(ids, id)
		ranges = append(ranges, kv.Range{Start: k, End: keyAfter(k)})
	}
	got, err := kv.Firsts(o, ranges)
	if err != nil {
		return err
	}
	for i, id := range ids {
		n := uint32(0)
		if got[i].Key != nil {
			if n, err = decodeU32(got[i].Value); err != nil {
				return fmt.Errorf("slice %d owners: %w", id, err)
			}
		}
		o.Set(sharedKey(id), u32(nil, n+1))
	}
	return nil
}
