package vfs

// Snapshots in the namespace. Every mount of the live volume has a
// virtual directory /.snapshots: reachable by lookup, absent from the
// root's listing. Its entries are the volume's snapshots, read from meta
// at each call, so a snapshot taken by another client or the CLI shows at
// once; /.snapshots/NAME is that snapshot's root directory, and
// everything under it is read through a meta.View. A VFS can also serve
// one snapshot at its root (Options.Snapshot: cairn mount --snapshot).
//
// Inode numbers. The front end's inode numbers (FUSE node ids) must tell
// the trees apart, since a snapshot shows the same inode numbers as the
// live volume. A front-end number is slot<<48 | ino: slot 0 is the tree at
// the root (the live volume, or the mounted snapshot), slot s ≥ 1 the s-th
// snapshot this VFS met (slots are per VFS, assigned on first use, keyed
// by the snapshot's epoch and never reused, so a number the kernel still
// holds never names another snapshot's inode). /.snapshots itself is
// SnapshotsIno, in the reserved slot 0xFFFF. Live inode numbers stay below
// 2^48 (meta allocates them upwards from 1).
//
// Modifications. Anything under /.snapshots (and /.snapshots itself)
// refuses every modification with EROFS. Creating an entry named
// .snapshots in the root fails with EEXIST: the name exists, as lookup
// shows. Removing, renaming or replacing it fails with EROFS. An entry of
// that name made before snapshots existed is shadowed (hidden from the
// listing, the name resolving to the virtual directory); a snapshot mount
// of the volume still shows it.
//
// Open snapshot files record no hold in meta (nothing can free their data
// while the snapshot exists) and cache their chunk maps for as long as
// they are open (nothing can change them). Whether the snapshot still
// exists is checked by every metadata read of a View, and by reads of
// open files at least every Options.SnapshotCheck: once it is deleted,
// everything under it fails with ESTALE. Locks on snapshot files are
// granted without being recorded: the data cannot change, so there is
// nothing for them to protect, and programs that lock before reading
// (SQLite) still work.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/meta"
)

// SnapshotsDir is the name of the virtual directory of snapshots in the
// root of every mount of the live volume.
const SnapshotsDir = ".snapshots"

const (
	slotShift = 48
	inoMask   = 1<<slotShift - 1
	// snapshotsSlot is reserved for SnapshotsIno; maxSlot is the last
	// slot given to a snapshot.
	snapshotsSlot = 1<<(64-slotShift) - 1
	maxSlot       = snapshotsSlot - 1
)

// SnapshotsIno is the front-end inode number of /.snapshots.
const SnapshotsIno = base.Ino(snapshotsSlot<<slotShift | 1)

// AtRoot reports whether front-end inode number ino is in the tree at
// the root of the mount (the live volume, or the mounted snapshot), not
// /.snapshots nor a snapshot under it.
func AtRoot(ino base.Ino) bool { return uint64(ino)>>slotShift == 0 }

// reader is the read half of the metadata engine that vfs uses: the live
// volume (meta.FS), a snapshot (*meta.View), or the /.snapshots
// directory. Every method is safe for concurrent use and returns meta's
// errors (base.ErrNotFound, base.ErrNotDir, base.ErrAccess, ...); a View
// of a deleted snapshot returns base.ErrStale. Returned slices belong to
// the caller.
type reader interface {
	Lookup(ctx context.Context, c *base.Caller, parent base.Ino, name string) (base.Ino, base.Attr, error)
	GetAttr(ctx context.Context, ino base.Ino) (base.Attr, error)
	Readdir(ctx context.Context, c *base.Caller, dir base.Ino, after string, limit int, plus bool) ([]base.Entry, error)
	Readlink(ctx context.Context, ino base.Ino) (string, error)
	GetXattr(ctx context.Context, c *base.Caller, ino base.Ino, name string) ([]byte, error)
	ListXattr(ctx context.Context, c *base.Caller, ino base.Ino) ([]string, error)
	ReadChunk(ctx context.Context, ino base.Ino, index uint32) ([]base.Slice, error)
	Access(ctx context.Context, c *base.Caller, ino base.Ino, mask uint32) error
}

var (
	_ reader = meta.FS(nil)
	_ reader = (*meta.View)(nil)
	_ reader = snapshotsDir{}
)

// tree is one tree of inodes a VFS serves.
type tree struct {
	r    reader
	slot uint64 // the high bits of its front-end inode numbers
	// ro: a snapshot or /.snapshots. Every modification is EROFS, opens
	// record no hold, cached chunk maps stay valid, locks are not
	// recorded.
	ro   bool
	snap *meta.Snapshot // the snapshot it shows, if any

	mu      sync.Mutex
	checked time.Time // when the snapshot was last seen to exist
	stale   bool      // the snapshot was deleted
}

// outIno converts an inode number of the tree to the front end's.
func (t *tree) outIno(ino base.Ino) base.Ino {
	return base.Ino(t.slot<<slotShift) | ino
}

// outAttr converts the inode numbers in the attributes of ino. The root
// of a snapshot under /.snapshots has /.snapshots as its parent.
func (t *tree) outAttr(ino base.Ino, a *base.Attr) {
	if t.slot == 0 || a.Parent == 0 {
		return
	}
	if ino == base.RootIno {
		a.Parent = SnapshotsIno
		return
	}
	a.Parent = t.outIno(a.Parent)
}

// resolve finds the tree of a front-end inode number and the number
// within it. An unknown slot is ESTALE.
func (v *VFS) resolve(ino base.Ino) (*tree, base.Ino, syscall.Errno) {
	if ino == SnapshotsIno && v.snapsDir != nil {
		return v.snapsDir, ino, 0
	}
	slot := uint64(ino) >> slotShift
	if slot == 0 {
		return v.root, ino, 0
	}
	v.slotMu.Lock()
	defer v.slotMu.Unlock()
	if slot > uint64(len(v.bySlot)) {
		return nil, 0, syscall.ESTALE
	}
	return v.bySlot[slot-1], ino & inoMask, 0
}

// writable resolves ino for a modification: EROFS on a read-only VFS and
// for anything in a snapshot.
func (v *VFS) writable(ino base.Ino) (base.Ino, syscall.Errno) {
	if e := v.roCheck(); e != 0 {
		return 0, e
	}
	t, real, e := v.resolve(ino)
	if e != 0 {
		return 0, e
	}
	if t.ro {
		return 0, syscall.EROFS
	}
	return real, 0
}

// reserved reports whether name in the front-end directory parent is
// /.snapshots.
func (v *VFS) reserved(parent base.Ino, name string) bool {
	return v.snapsDir != nil && parent == base.RootIno && name == SnapshotsDir
}

// snapshotTree returns the tree of snap under /.snapshots, giving it a
// slot on first use.
func (v *VFS) snapshotTree(snap meta.Snapshot) (*tree, error) {
	v.slotMu.Lock()
	defer v.slotMu.Unlock()
	if t := v.byEpoch[snap.Epoch]; t != nil {
		return t, nil
	}
	if len(v.bySlot) >= maxSlot {
		return nil, fmt.Errorf("snapshot %q: this mount has shown %d snapshots, its limit; remount to see more: %w",
			snap.Name, len(v.bySlot), base.ErrNoSpace)
	}
	t := &tree{r: v.m.View(snap), slot: uint64(len(v.bySlot)) + 1, ro: true, snap: &snap}
	v.bySlot = append(v.bySlot, t)
	v.byEpoch[snap.Epoch] = t
	return t, nil
}

// checkSnapshot returns ESTALE if t shows a snapshot that was deleted.
// The answer is cached for Options.SnapshotCheck unless fresh is set.
func (v *VFS) checkSnapshot(ctx context.Context, t *tree, fresh bool) syscall.Errno {
	if t.snap == nil {
		return 0
	}
	t.mu.Lock()
	stale, recent := t.stale, time.Since(t.checked) < v.opts.SnapshotCheck
	t.mu.Unlock()
	if stale {
		return syscall.ESTALE
	}
	if recent && !fresh {
		return 0
	}
	// Every read of a View first checks that its snapshot exists.
	_, err := t.r.GetAttr(ctx, base.RootIno)
	e := Errno(err)
	switch e {
	case 0:
		t.mu.Lock()
		t.checked = time.Now()
		t.mu.Unlock()
	case syscall.ESTALE:
		t.mu.Lock()
		t.stale = true
		t.mu.Unlock()
	default:
		v.log.Warn("checking that a snapshot exists", "snapshot", t.snap.Name, "err", err)
	}
	return e
}

// access checks an access(2) mask on ino of t.
func (v *VFS) access(ctx context.Context, t *tree, c *base.Caller, ino base.Ino, mask uint32) error {
	return t.r.Access(ctx, c, ino, mask)
}

// snapshotsDir is /.snapshots as a reader. It answers for SnapshotsIno
// only and returns front-end inode numbers (its tree has slot 0).
type snapshotsDir struct{ v *VFS }

func (d snapshotsDir) Lookup(ctx context.Context, c *base.Caller, parent base.Ino, name string) (base.Ino, base.Attr, error) {
	switch name {
	case ".":
		a, err := d.GetAttr(ctx, SnapshotsIno)
		return SnapshotsIno, a, err
	case "..":
		a, err := d.v.root.r.GetAttr(ctx, base.RootIno)
		return base.RootIno, a, err
	}
	if strings.ContainsRune(name, '/') {
		return 0, base.Attr{}, fmt.Errorf("%q: %w", name, base.ErrInvalid)
	}
	s, err := d.v.m.SnapshotByName(ctx, name)
	if err != nil {
		return 0, base.Attr{}, err
	}
	return d.snapshotRoot(ctx, s)
}

// snapshotRoot returns the front-end number and attributes of the root
// of snapshot s.
func (d snapshotsDir) snapshotRoot(ctx context.Context, s meta.Snapshot) (base.Ino, base.Attr, error) {
	t, err := d.v.snapshotTree(s)
	if err != nil {
		return 0, base.Attr{}, err
	}
	a, err := t.r.GetAttr(ctx, base.RootIno)
	if err != nil {
		return 0, base.Attr{}, err
	}
	t.outAttr(base.RootIno, &a)
	return t.outIno(base.RootIno), a, nil
}

// GetAttr describes /.snapshots: owned by root, r-x for everyone, one
// link per snapshot (their ".."), and the time of the newest snapshot
// (of the volume's root when there is none).
func (d snapshotsDir) GetAttr(ctx context.Context, ino base.Ino) (base.Attr, error) {
	if ino != SnapshotsIno {
		return base.Attr{}, fmt.Errorf("inode %d: %w", ino, base.ErrStale)
	}
	snaps, err := d.v.m.Snapshots(ctx)
	if err != nil {
		return base.Attr{}, err
	}
	a := base.Attr{Type: base.TypeDir, Mode: 0o555, Nlink: 2 + uint32(len(snaps)), Parent: base.RootIno}
	if n := len(snaps); n > 0 {
		t := snaps[n-1].Created.UnixNano()
		a.Atime, a.Mtime, a.Ctime, a.Btime = t, t, t, t
	} else {
		r, err := d.v.root.r.GetAttr(ctx, base.RootIno)
		if err != nil {
			return base.Attr{}, err
		}
		a.Atime, a.Mtime, a.Ctime, a.Btime = r.Btime, r.Btime, r.Btime, r.Btime
	}
	return a, nil
}

// Access grants read and search to everyone (mode 0555); write is EROFS
// before it gets here.
func (d snapshotsDir) Access(ctx context.Context, c *base.Caller, ino base.Ino, mask uint32) error {
	if mask&base.MayWrite != 0 {
		return base.ErrReadOnly
	}
	return nil
}

// Readdir lists the snapshots in name order.
func (d snapshotsDir) Readdir(ctx context.Context, c *base.Caller, dir base.Ino, after string, limit int, plus bool) ([]base.Entry, error) {
	snaps, err := d.v.m.Snapshots(ctx)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(snaps, func(a, b meta.Snapshot) int { return strings.Compare(a.Name, b.Name) })
	var out []base.Entry
	for _, s := range snaps {
		if s.Name <= after {
			continue
		}
		if limit > 0 && len(out) == limit {
			break
		}
		ino, a, err := d.snapshotRoot(ctx, s)
		if err != nil {
			if Errno(err) == syscall.ESTALE {
				continue // deleted since the listing
			}
			return nil, err
		}
		e := base.Entry{Name: s.Name, Ino: ino, Type: base.TypeDir}
		if plus {
			e.Attr = &a
		}
		out = append(out, e)
	}
	return out, nil
}

func (d snapshotsDir) Readlink(ctx context.Context, ino base.Ino) (string, error) {
	return "", fmt.Errorf("readlink %s: %w", SnapshotsDir, base.ErrInvalid)
}

func (d snapshotsDir) GetXattr(ctx context.Context, c *base.Caller, ino base.Ino, name string) ([]byte, error) {
	return nil, fmt.Errorf("xattr %q of %s: %w", name, SnapshotsDir, base.ErrNoAttr)
}

func (d snapshotsDir) ListXattr(ctx context.Context, c *base.Caller, ino base.Ino) ([]string, error) {
	return nil, nil
}

func (d snapshotsDir) ReadChunk(ctx context.Context, ino base.Ino, index uint32) ([]base.Slice, error) {
	return nil, fmt.Errorf("read %s: %w", SnapshotsDir, base.ErrIsDir)
}

// InoKind tells what a front-end inode number names (see SplitIno).
type InoKind uint8

const (
	// InoRoot is an inode of the tree at the root: the live volume, or
	// the snapshot a VFS with Options.Snapshot serves.
	InoRoot InoKind = iota
	// InoSnapshot is an inode of a snapshot under /.snapshots.
	InoSnapshot
	// InoSnapshotsDir is /.snapshots itself (SnapshotsIno).
	InoSnapshotsDir
)

// SplitIno tells what the front-end inode number ino names, in terms that
// outlive this VFS: its kind, the epoch of its snapshot (InoSnapshot
// only), and its inode number in that tree. Front ends that must name
// inodes across restarts or processes (NFS file handles) store these and
// turn them back into a front-end number with SnapshotIno. A number in a
// slot this VFS never gave out is ESTALE.
func (v *VFS) SplitIno(ino base.Ino) (kind InoKind, epoch uint64, real base.Ino, e syscall.Errno) {
	t, real, e := v.resolve(ino)
	switch {
	case e != 0:
		return 0, 0, 0, e
	case t == v.snapsDir:
		return InoSnapshotsDir, 0, real, 0
	case t.slot == 0:
		return InoRoot, 0, real, 0
	}
	return InoSnapshot, t.snap.Epoch, real, 0
}

// SnapshotIno returns the front-end number of inode ino of the snapshot
// frozen at epoch, as it shows under /.snapshots, without a lookup from
// /.snapshots: the snapshot gets a slot in this VFS on first use. It does
// not check that ino exists in the snapshot (the next read through the
// number does). A snapshot that no longer exists is ESTALE, and so is any
// snapshot in a VFS without /.snapshots (Options.Snapshot); an ino of 0
// or one that does not fit in a front-end number is EINVAL.
func (v *VFS) SnapshotIno(ctx context.Context, epoch uint64, ino base.Ino) (base.Ino, syscall.Errno) {
	if ino == 0 || ino > inoMask {
		return 0, syscall.EINVAL
	}
	if v.snapsDir == nil {
		return 0, syscall.ESTALE
	}
	v.slotMu.Lock()
	t := v.byEpoch[epoch]
	v.slotMu.Unlock()
	if t == nil {
		snaps, err := v.m.Snapshots(ctx)
		if err != nil {
			return 0, v.errno("snapshot by epoch", err)
		}
		i := slices.IndexFunc(snaps, func(s meta.Snapshot) bool { return s.Epoch == epoch })
		if i < 0 {
			return 0, syscall.ESTALE
		}
		if t, err = v.snapshotTree(snaps[i]); err != nil {
			return 0, v.errno("snapshot by epoch", err)
		}
	}
	if e := v.checkSnapshot(ctx, t, false); e != 0 {
		return 0, e
	}
	return t.outIno(ino), 0
}
