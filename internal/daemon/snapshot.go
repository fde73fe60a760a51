package daemon

// Snapshot admin verbs. Like the other verbs they run in the process that
// opened the volume, or in the mount process that holds an embedded
// store (through the control socket); the output is the same.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/meta"
)

// SnapshotCreate takes a snapshot of the volume called name. What was
// committed before it (closed or fsynced files) is in it; writes still
// buffered by open files are not.
func SnapshotCreate(ctx context.Context, v *Volume, name string, w io.Writer) error {
	s, err := v.Meta.CreateSnapshot(ctx, name)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "created snapshot %q (epoch %d) at %s; mounts show it at .snapshots/%s\n",
		s.Name, s.Epoch, s.Created.Format(time.RFC3339), s.Name)
	return err
}

// SnapshotInfo is one snapshot as listed by SnapshotList.
type SnapshotInfo struct {
	Name    string    `json:"name"`
	Epoch   uint64    `json:"epoch"`
	Created time.Time `json:"created"`
	// Bytes and Slices are held by this snapshot only: what deleting it
	// would free.
	Bytes  uint64 `json:"bytes"`
	Slices uint64 `json:"slices"`
}

// SnapshotList prints the snapshots, oldest first, with the space each
// one alone holds; asJSON prints a JSON array of SnapshotInfo instead.
func SnapshotList(ctx context.Context, v *Volume, asJSON bool, w io.Writer) error {
	snaps, err := v.Meta.Snapshots(ctx)
	if err != nil {
		return err
	}
	infos := make([]SnapshotInfo, 0, len(snaps))
	for _, s := range snaps {
		u, err := v.Meta.SnapshotUsage(ctx, s.Name)
		if err != nil {
			return fmt.Errorf("space of snapshot %q: %w", s.Name, err)
		}
		infos = append(infos, SnapshotInfo{Name: s.Name, Epoch: s.Epoch, Created: s.Created, Bytes: u.Bytes, Slices: u.Slices})
	}
	if asJSON {
		b, err := json.MarshalIndent(infos, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	if len(infos) == 0 {
		_, err := fmt.Fprintln(w, "no snapshots")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tCREATED\tEPOCH\tONLY IN SNAPSHOT")
	for _, s := range infos {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s (%d slices)\n", s.Name, s.Created.Local().Format(time.RFC3339), s.Epoch, base.IBytes(s.Bytes), s.Slices)
	}
	return tw.Flush()
}

// progressEvery is how often a long snapshot deletion reports progress.
const progressEvery = time.Second

// SnapshotDelete deletes the snapshot called name: it disappears from
// every mount at once, then the versions only it could see are pruned
// (progress is printed while that takes long). Its blocks are then freed
// by a mount's background deletes, or by gc.
func SnapshotDelete(ctx context.Context, v *Volume, name string, w io.Writer) error {
	start := time.Now()
	last := start
	records := 0
	err := v.Meta.DeleteSnapshot(ctx, name, func(done int) {
		records = done
		if now := time.Now(); now.Sub(last) >= progressEvery {
			last = now
			fmt.Fprintf(w, "pruning: %d changed records examined (%s)\n", done, now.Sub(start).Round(time.Second))
		}
	})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "deleted snapshot %q (%d changed records pruned in %s)\n", name, records, time.Since(start).Round(time.Millisecond))
	return err
}

// SnapshotRestore copies src (a path in snapshot name) to dst (a path
// in the live volume that must not exist yet) without copying data: the
// copies share the snapshot's blocks. Progress is printed while it takes
// long.
func SnapshotRestore(ctx context.Context, v *Volume, name, src, dst string, w io.Writer) error {
	start := time.Now()
	last := start
	st, err := v.Meta.Restore(ctx, base.RootCaller, name, src, dst, func(st meta.RestoreStats) {
		if now := time.Now(); now.Sub(last) >= progressEvery {
			last = now
			fmt.Fprintf(w, "restoring: %d files, %d directories (%s)\n", st.Files, st.Dirs, now.Sub(start).Round(time.Second))
		}
	})
	if v.kernelChanged != nil && !errors.Is(err, base.ErrExist) {
		// Whatever was restored, even in part, is new to the kernel of
		// this mount, which may keep the destination's parent's
		// attributes (and a lookup of dst made during the restore) for
		// long on an embedded volume.
		clean := path.Clean("/" + dst)
		if parent, _, perr := v.Meta.ResolvePath(ctx, base.RootCaller, nil, path.Dir(clean)); perr == nil {
			v.kernelChanged(parent, path.Base(clean))
		}
	}
	if err != nil {
		if errors.Is(err, base.ErrExist) {
			return fmt.Errorf("restore %s: %s already exists in the live volume: choose another destination or remove it first: %w", src, dst, err)
		}
		return fmt.Errorf("restore %s from snapshot %q: %w (what was restored before the error stays in place)", src, name, err)
	}
	_, err = fmt.Fprintf(w, "restored %s from snapshot %q to %s: %d files (%s), %d directories, %d symlinks, %d other, %d hard links, in %s; no data copied\n",
		src, name, dst, st.Files, base.IBytes(st.Bytes), st.Dirs, st.Symlinks, st.Others, st.Links, time.Since(start).Round(time.Millisecond))
	return err
}

// SnapshotChange is one line of SnapshotDiff's JSON output.
type SnapshotChange struct {
	Op      meta.ChangeOp `json:"op"`
	Path    string        `json:"path"`
	OldPath string        `json:"old_path,omitempty"`
	Ino     uint64        `json:"ino"`
	Type    string        `json:"type"`
}

// SnapshotDiff streams what changed from snapshot from to snapshot to
// ("" for the live volume), one line per path: "+ path" (created), "- path"
// (deleted), "M path" (modified), "R old -> new" (renamed). Paths that
// hold control characters, or could be misread, are quoted as Go strings.
// asJSON prints one SnapshotChange object per line instead.
func SnapshotDiff(ctx context.Context, v *Volume, from, to string, asJSON bool, w io.Writer) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	err := v.Meta.Diff(ctx, from, to, func(c meta.Change) error {
		if asJSON {
			return enc.Encode(SnapshotChange{Op: c.Op, Path: c.Path, OldPath: c.OldPath, Ino: uint64(c.Ino), Type: c.Type.String()})
		}
		var err error
		switch c.Op {
		case meta.Created:
			_, err = fmt.Fprintf(bw, "+ %s\n", diffPath(c.Path))
		case meta.Deleted:
			_, err = fmt.Fprintf(bw, "- %s\n", diffPath(c.Path))
		case meta.Modified:
			_, err = fmt.Fprintf(bw, "M %s\n", diffPath(c.Path))
		case meta.Renamed:
			_, err = fmt.Fprintf(bw, "R %s -> %s\n", diffPath(c.OldPath), diffPath(c.Path))
		default:
			_, err = fmt.Fprintf(bw, "? %s\n", diffPath(c.Path))
		}
		return err
	})
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	return err
}

// diffPath quotes a path that would make a diff line ambiguous.
func diffPath(p string) string {
	if strings.Contains(p, " -> ") || strings.HasPrefix(p, `"`) || strings.HasSuffix(p, " ") ||
		!utf8.ValidString(p) || strings.ContainsFunc(p, func(r rune) bool { return !strconv.IsPrint(r) }) {
		return strconv.Quote(p)
	}
	return p
}
