package meta

// View: the read operations of Meta, as of a snapshot's epoch.

import (
	"context"
	"fmt"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// View reads the file system as a snapshot froze it. Every operation runs
// in one consistent view of the store and first checks that the snapshot
// still exists: once it is deleted its versions are pruned, so a read
// through a View of a deleted snapshot fails with base.ErrStale instead
// of returning what another snapshot saw. Safe for concurrent use. A View
// has no write operations: the snapshot is read-only.
type View struct {
	m    *Meta
	snap Snapshot
}

// View returns a View of snap (as returned by Snapshots or SnapshotByName).
func (m *Meta) View(snap Snapshot) *View { return &View{m: m, snap: snap} }

// Snapshot returns the snapshot the View reads.
func (v *View) Snapshot() Snapshot { return v.snap }

func (v *View) read(ctx context.Context, fn func(r kv.Reader, epoch uint64) error) error {
	return v.m.view(ctx, func(r kv.Reader) error {
		ok, err := frozenAt(r, v.snap.Epoch)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("snapshot %q was deleted: %w", v.snap.Name, base.ErrStale)
		}
		return fn(r, v.snap.Epoch)
	})
}

// Lookup is Meta.Lookup as of the snapshot.
func (v *View) Lookup(ctx context.Context, c *Caller, parent base.Ino, name string) (base.Ino, base.Attr, error) {
	var ino base.Ino
	var a base.Attr
	err := v.read(ctx, func(r kv.Reader, e uint64) (err error) {
		ino, a, err = lookupAt(r, c, parent, name, e)
		return err
	})
	if err != nil {
		return 0, base.Attr{}, err
	}
	return ino, a, nil
}

// Access is Meta.Access as of the snapshot; MayWrite is always refused
// with base.ErrReadOnly.
func (v *View) Access(ctx context.Context, c *Caller, ino base.Ino, mask uint32) error {
	return v.read(ctx, func(r kv.Reader, e uint64) error {
		a, err := getAttrAt(r, ino, e)
		if err != nil {
			return err
		}
		if mask&MayWrite != 0 {
			return fmt.Errorf("snapshot %q: %w", v.snap.Name, base.ErrReadOnly)
		}
		if !base.Permits(c, &a, mask) {
			return fmt.Errorf("access %o to inode %d: %w", mask, ino, base.ErrAccess)
		}
		return nil
	})
}

// GetAttr is Meta.GetAttr as of the snapshot.
func (v *View) GetAttr(ctx context.Context, ino base.Ino) (base.Attr, error) {
	var a base.Attr
	err := v.read(ctx, func(r kv.Reader, e uint64) (err error) {
		a, err = getAttrAt(r, ino, e)
		return err
	})
	return a, err
}

// Readdir is Meta.Readdir as of the snapshot.
func (v *View) Readdir(ctx context.Context, c *Caller, dir base.Ino, after string, limit int, plus bool) ([]base.Entry, error) {
	var out []base.Entry
	err := v.read(ctx, func(r kv.Reader, e uint64) (err error) {
		out, err = readdirAt(r, c, dir, after, limit, plus, e)
		return err
	})
	return out, err
}

// Readlink is Meta.Readlink as of the snapshot.
func (v *View) Readlink(ctx context.Context, ino base.Ino) (string, error) {
	var t string
	err := v.read(ctx, func(r kv.Reader, e uint64) (err error) {
		t, err = readlinkAt(r, ino, e)
		return err
	})
	return t, err
}

// GetXattr is Meta.GetXattr as of the snapshot.
func (v *View) GetXattr(ctx context.Context, c *Caller, ino base.Ino, name string) ([]byte, error) {
	if err := xattrName(name); err != nil {
		return nil, err
	}
	var out []byte
	err := v.read(ctx, func(r kv.Reader, e uint64) (err error) {
		out, err = getXattrAt(r, c, ino, name, e)
		return err
	})
	return out, err
}

// ListXattr is Meta.ListXattr as of the snapshot.
func (v *View) ListXattr(ctx context.Context, c *Caller, ino base.Ino) ([]string, error) {
	var out []string
	err := v.read(ctx, func(r kv.Reader, e uint64) (err error) {
		out, err = listXattrAt(r, c, ino, e)
		return err
	})
	return out, err
}

// ReadChunk is Meta.ReadChunk as of the snapshot.
func (v *View) ReadChunk(ctx context.Context, ino base.Ino, index uint32) ([]base.Slice, error) {
	var out []base.Slice
	err := v.read(ctx, func(r kv.Reader, e uint64) (err error) {
		out, err = readChunkAt(r, ino, index, e)
		return err
	})
	return out, err
}

// Chunks is Meta.Chunks as of the snapshot.
func (v *View) Chunks(ctx context.Context, ino base.Ino) ([]ChunkInfo, error) {
	var out []ChunkInfo
	err := v.read(ctx, func(r kv.Reader, e uint64) (err error) {
		out, err = chunksAt(r, ino, e)
		return err
	})
	return out, err
}
