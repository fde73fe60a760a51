package meta

// Diff: what changed between two snapshots, or a snapshot and the live
// volume, found through the change log (its cost follows the changes).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// ChangeOp is the kind of a Change.
type ChangeOp string

// Change kinds reported by Diff.
const (
	Created  ChangeOp = "created"
	Deleted  ChangeOp = "deleted"
	Modified ChangeOp = "modified" // content, attributes or xattrs changed
	Renamed  ChangeOp = "renamed"  // OldPath → Path (content may have changed too)
)

// Change is one path that differs between two points in time. Paths are
// absolute within the volume ("/a/b").
type Change struct {
	Op      ChangeOp
	Path    string // the path at the newer point (for Deleted: at the older one)
	OldPath string // Renamed: the path at the older point
	Ino     base.Ino
	Type    base.FileType
}

// Diff calls fn for every path that differs between the snapshot called
// from and the snapshot called to ("" for the live volume). It reads one
// consistent view; its cost follows the number of records changed between
// the two (the change log), plus one scan of each directory whose entry
// names it must recover. Changes are reported inode by inode: a file
// renamed and modified is one Renamed change; a directory whose entries
// changed is also Modified. fn's first error stops the walk and is
// returned. Errors: ErrNotFound (no such snapshot), ErrInvalid (from is
// not older than to).
func (m *Meta) Diff(ctx context.Context, from, to string, fn func(Change) error) error {
	var changes []Change
	err := m.view(ctx, func(r kv.Reader) error {
		changes = changes[:0]
		d, err := newDiffer(r, from, to)
		if err != nil {
			return err
		}
		changes, err = d.run()
		return err
	})
	if err != nil {
		return err
	}
	for _, c := range changes {
		if err := fn(c); err != nil {
			return err
		}
	}
	return nil
}

type link struct {
	parent base.Ino
	name   string
}

type differ struct {
	r        kv.Reader
	a, b     uint64 // epochs read: older and newer (latestEpoch: live)
	logEnd   uint64 // last epoch of the change log to read
	namesA   *namer
	namesB   *namer
	removed  map[base.Ino][]link // entries that named ino at a and do not at b
	added    map[base.Ino][]link // entries that name ino at b and did not at a
	touched  map[base.Ino]bool   // inode records (attr, chunk, xattr, symlink) changed
	inodeSet []base.Ino          // every inode concerned, in first-seen order
	seen     map[base.Ino]bool
}

func snapshotIn(r kv.Reader, name string) (Snapshot, error) {
	v, err := r.Get(snapshotKey(name))
	if err != nil {
		return Snapshot{}, err
	}
	if v == nil {
		return Snapshot{}, fmt.Errorf("snapshot %q: %w", name, base.ErrNotFound)
	}
	return decodeSnapshot(snapshotKey(name), v)
}

func newDiffer(r kv.Reader, from, to string) (*differ, error) {
	sa, err := snapshotIn(r, from)
	if err != nil {
		return nil, err
	}
	t := &wtx{Txn: readTxn{r}}
	if err := t.loadEpochs(); err != nil {
		return nil, err
	}
	d := &differ{r: r, a: sa.Epoch, b: latestEpoch, logEnd: t.epoch,
		removed: map[base.Ino][]link{}, added: map[base.Ino][]link{},
		touched: map[base.Ino]bool{}, seen: map[base.Ino]bool{}}
	if to != "" {
		sb, err := snapshotIn(r, to)
		if err != nil {
			return nil, err
		}
		if sb.Epoch <= sa.Epoch {
			return nil, fmt.Errorf("diff %q %q: %q is not older than %q: %w", from, to, from, to, base.ErrInvalid)
		}
		d.b, d.logEnd = sb.Epoch, sb.Epoch
	}
	d.namesA, d.namesB = newNamer(r, d.a), newNamer(r, d.b)
	return d, nil
}

func (d *differ) note(ino base.Ino) {
	if !d.seen[ino] {
		d.seen[ino] = true
		d.inodeSet = append(d.inodeSet, ino)
	}
}

func (d *differ) run() ([]Change, error) {
	if err := d.readLog(); err != nil {
		return nil, err
	}
	var out []Change
	for _, ino := range d.inodeSet {
		cs, err := d.inode(ino)
		if err != nil {
			return nil, err
		}
		out = append(out, cs...)
	}
	return out, nil
}

// readLog reads the change log between the two epochs into removed,
// added, touched and inodeSet.
func (d *differ) readLog() error {
	// Every record with a version written in (a, logEnd] has a change log
	// entry in that span.
	logicals := map[string]bool{}
	var order [][]byte
	var derr error
	err := d.r.Scan(changePrefix(d.a+1), changePrefix(d.logEnd+1), false, func(k, _ []byte) bool {
		_, l, err := decodeChangeKey(k)
		if err != nil {
			derr = err
			return false
		}
		if !logicals[string(l)] {
			logicals[string(l)] = true
			order = append(order, append([]byte(nil), l...))
		}
		return true
	})
	if err == nil {
		err = derr
	}
	if err != nil {
		return err
	}
	for _, l := range order {
		ki, err := DecodeKey(versionKey(l, 0))
		if err != nil {
			return fmt.Errorf("change log: %w", err)
		}
		switch ki.Kind {
		case "dentry":
			if err := d.entry(ki.Parent, ki.Name); err != nil {
				return err
			}
		case "attr", "chunk", "symlink", "xattr":
			if d.changed(l) {
				d.touched[ki.Ino] = true
				d.note(ki.Ino)
			}
		}
	}
	return nil
}

// changed reports whether record l reads differently at a and b.
func (d *differ) changed(l []byte) bool {
	va, oka, erra := vget(d.r, l, d.a)
	vb, okb, errb := vget(d.r, l, d.b)
	return erra != nil || errb != nil || oka != okb || !bytes.Equal(va, vb)
}

func (d *differ) entry(parent base.Ino, name string) error {
	ia, _, oka, err := getDentryAt(d.r, parent, name, d.a)
	if err != nil {
		return err
	}
	ib, _, okb, err := getDentryAt(d.r, parent, name, d.b)
	if err != nil {
		return err
	}
	if oka && okb && ia == ib {
		return nil
	}
	if oka {
		d.removed[ia] = append(d.removed[ia], link{parent, name})
		d.note(ia)
	}
	if okb {
		d.added[ib] = append(d.added[ib], link{parent, name})
		d.note(ib)
	}
	return nil
}

// inode turns what changed about ino into changes.
func (d *differ) inode(ino base.Ino) ([]Change, error) {
	aa, erra := getAttrAt(d.r, ino, d.a)
	ab, errb := getAttrAt(d.r, ino, d.b)
	for _, err := range []error{erra, errb} {
		if err != nil && !isNotFound(err) {
			return nil, err
		}
	}
	inA, inB := erra == nil, errb == nil
	var out []Change
	add := func(op ChangeOp, typ base.FileType, names *namer, l link, old string) error {
		p, err := names.join(l)
		if err != nil {
			return err
		}
		out = append(out, Change{Op: op, Path: p, OldPath: old, Ino: ino, Type: typ})
		return nil
	}
	switch {
	case !inA && !inB:
		return nil, nil // created and deleted in between
	case !inA:
		for _, l := range d.added[ino] {
			if err := add(Created, ab.Type, d.namesB, l, ""); err != nil {
				return nil, err
			}
		}
		return out, nil
	case !inB:
		for _, l := range d.removed[ino] {
			if err := add(Deleted, aa.Type, d.namesA, l, ""); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	rem, addl := d.removed[ino], d.added[ino]
	n := min(len(rem), len(addl))
	for i := 0; i < n; i++ {
		old, err := d.namesA.join(rem[i])
		if err != nil {
			return nil, err
		}
		if err := add(Renamed, ab.Type, d.namesB, addl[i], old); err != nil {
			return nil, err
		}
	}
	for _, l := range rem[n:] {
		if err := add(Deleted, aa.Type, d.namesA, l, ""); err != nil {
			return nil, err
		}
	}
	for _, l := range addl[n:] {
		if err := add(Created, ab.Type, d.namesB, l, ""); err != nil {
			return nil, err
		}
	}
	if n == 0 && d.touched[ino] {
		p, err := d.namesB.path(ino, &ab)
		if err != nil {
			return nil, err
		}
		out = append(out, Change{Op: Modified, Path: p, Ino: ino, Type: ab.Type})
	}
	return out, nil
}

func isNotFound(err error) bool { return errors.Is(err, base.ErrNotFound) }

// namer recovers path names of inodes as of one epoch: directories walk
// their parent pointers, other files start from their parent hint; a
// directory's entries are scanned at most once to find names by inode,
// and if a hint is wrong every directory is scanned once.
type namer struct {
	r      kv.Reader
	epoch  uint64
	byDir  map[base.Ino]map[base.Ino]string // directory → inode → one name in it
	paths  map[base.Ino]string
	global map[base.Ino]link // every entry, built on first need
}

func newNamer(r kv.Reader, epoch uint64) *namer {
	return &namer{r: r, epoch: epoch, byDir: map[base.Ino]map[base.Ino]string{}, paths: map[base.Ino]string{base.RootIno: "/"}}
}

func (n *namer) join(l link) (string, error) {
	dir, err := n.dirPath(l.parent)
	if err != nil {
		return "", err
	}
	return path.Join(dir, l.name), nil
}

// dirPath is the path of directory ino.
func (n *namer) dirPath(ino base.Ino) (string, error) {
	if p, ok := n.paths[ino]; ok {
		return p, nil
	}
	a, err := getAttrAt(n.r, ino, n.epoch)
	if err != nil {
		return "", err
	}
	return n.path(ino, &a)
}

// path is the path of ino (attribute a) by its parent pointer or hint.
func (n *namer) path(ino base.Ino, a *base.Attr) (string, error) {
	if p, ok := n.paths[ino]; ok {
		return p, nil
	}
	if a.Parent != 0 {
		names, err := n.dir(a.Parent)
		if err != nil {
			return "", err
		}
		if name, ok := names[ino]; ok {
			dir, err := n.dirPath(a.Parent)
			if err != nil {
				return "", err
			}
			p := path.Join(dir, name)
			n.paths[ino] = p
			return p, nil
		}
	}
	// The hint is missing or stale (the name was unlinked or the inode
	// predates hints): find any entry naming ino.
	if n.global == nil {
		n.global = map[base.Ino]link{}
		err := vscan(n.r, prefixOnly(pDentry), nil, n.epoch, func(k, v []byte) bool {
			ino, _, err := decodeDentry(v)
			parent, name, kerr := decodeDentryKey(k)
			if err == nil && kerr == nil {
				n.global[ino] = link{parent, string(name)}
			}
			return true
		})
		if err != nil {
			return "", err
		}
	}
	l, ok := n.global[ino]
	if !ok {
		return "", fmt.Errorf("inode %d has no name at epoch %d: %w", ino, n.epoch, base.ErrNotFound)
	}
	p, err := n.join(l)
	if err == nil {
		n.paths[ino] = p
	}
	return p, err
}

// name is a path of ino, or "" if it has none (unlinked, missing, or a
// record too damaged to follow).
func (n *namer) name(ino base.Ino) string {
	if ino == 0 {
		return ""
	}
	a, err := getAttrAt(n.r, ino, n.epoch)
	if err != nil {
		return ""
	}
	p, err := n.path(ino, &a)
	if err != nil {
		return ""
	}
	return p
}

// Paths returns a path name of each of inos that has one, as of now.
func (m *Meta) Paths(ctx context.Context, inos []base.Ino) (map[base.Ino]string, error) {
	out := make(map[base.Ino]string, len(inos))
	err := m.view(ctx, func(r kv.Reader) error {
		n := newNamer(r, latestEpoch)
		for _, ino := range inos {
			if p := n.name(ino); p != "" {
				out[ino] = p
			}
		}
		return nil
	})
	return out, err
}

// dir returns inode → name for the entries of directory ino.
func (n *namer) dir(ino base.Ino) (map[base.Ino]string, error) {
	if m, ok := n.byDir[ino]; ok {
		return m, nil
	}
	m := map[base.Ino]string{}
	err := vscan(n.r, dentryPrefix(ino), nil, n.epoch, func(k, v []byte) bool {
		child, _, err := decodeDentry(v)
		_, name, kerr := decodeDentryKey(k)
		if err == nil && kerr == nil {
			if _, dup := m[child]; !dup {
				m[child] = string(name)
			}
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	n.byDir[ino] = m
	return m, nil
}
