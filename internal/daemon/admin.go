package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/chunk"
	"github.com/cairnfs/cairn/internal/gc"
	"github.com/cairnfs/cairn/internal/meta"
	"github.com/cairnfs/cairn/internal/object"
)

// ErrProblems is returned by fsck when it found inconsistencies, so the
// command exits non-zero after printing them.
var ErrProblems = fmt.Errorf("the volume has problems (listed above)")

// RunAdmin runs one admin verb. It is used both in the process that opened
// the volume itself and, through the control socket, in a mount process.
func RunAdmin(ctx context.Context, v *Volume, req Request, w io.Writer) error {
	switch req.Verb {
	case "status":
		return Status(ctx, v, w)
	case "info":
		names := req.Flags["names"]
		inos := make([]base.Ino, 0, len(req.Args))
		for _, a := range req.Args {
			if strings.HasPrefix(a, "/") && req.Flags["paths"] == "true" {
				// A path in the volume.
				ino, _, err := v.Meta.ResolvePath(ctx, base.RootCaller, nil, a)
				if err != nil {
					return fmt.Errorf("info: %s: %w", a, err)
				}
				inos = append(inos, ino)
				names += fmt.Sprintf("\x00%d=%s", ino, a)
				continue
			}
			n, err := strconv.ParseUint(a, 10, 64)
			if err != nil || n == 0 {
				return fmt.Errorf("info: %q: want an inode number or, with the volume's URL, an absolute path in the volume", a)
			}
			inos = append(inos, base.Ino(n))
		}
		return Info(ctx, v, inos, names, w)
	case "stats":
		return json.NewEncoder(w).Encode(v.Stats())
	case "warmup":
		inos, err := parseInos(req.Args)
		if err != nil {
			return err
		}
		interval, err := time.ParseDuration(req.Flags["interval"])
		if err != nil || interval <= 0 {
			interval = 200 * time.Millisecond
		}
		return Warmup(ctx, v, inos, interval, w)
	case "fsck":
		return Fsck(ctx, v, w)
	case "gc":
		return GC(ctx, v, req.Flags["delete"] == "true", w)
	case "snapshot-create":
		if len(req.Args) != 1 {
			return fmt.Errorf("snapshot create: want one name")
		}
		return SnapshotCreate(ctx, v, req.Args[0], w)
	case "snapshot-list":
		return SnapshotList(ctx, v, req.Flags["json"] == "true", w)
	case "snapshot-delete":
		if len(req.Args) != 1 {
			return fmt.Errorf("snapshot delete: want one name")
		}
		return SnapshotDelete(ctx, v, req.Args[0], w)
	case "snapshot-restore":
		if len(req.Args) != 3 {
			return fmt.Errorf("snapshot restore: want a name, a path and a destination")
		}
		return SnapshotRestore(ctx, v, req.Args[0], req.Args[1], req.Args[2], w)
	case "snapshot-diff":
		if len(req.Args) != 2 {
			return fmt.Errorf("snapshot diff: want two names (the second empty for the live volume)")
		}
		return SnapshotDiff(ctx, v, req.Args[0], req.Args[1], req.Flags["json"] == "true", w)
	}
	return fmt.Errorf("unknown admin verb %q", req.Verb)
}

func parseInos(args []string) ([]base.Ino, error) {
	inos := make([]base.Ino, 0, len(args))
	for _, a := range args {
		n, err := strconv.ParseUint(a, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("bad inode number %q", a)
		}
		inos = append(inos, base.Ino(n))
	}
	return inos, nil
}

// DefaultSessionTimeout is the session timeout of mounts that do not set
// one.
const DefaultSessionTimeout = 60 * time.Second

// Status prints settings, usage and sessions: live ones, ones that missed
// their heartbeats (dead?), and ones declared dead in the last day.
func Status(ctx context.Context, v *Volume, w io.Writer) error {
	s := v.Settings
	u, err := v.Meta.Usage(ctx)
	if err != nil {
		return err
	}
	sf, err := v.Meta.StatFS(ctx)
	if err != nil {
		return err
	}
	sessions, err := v.Meta.ListSessions(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "Volume\t%s\n", s.Name)
	fmt.Fprintf(tw, "UUID\t%s\n", s.UUID)
	fmt.Fprintf(tw, "Format version\t%d\n", s.FormatVersion)
	fmt.Fprintf(tw, "Created\t%s\n", s.Created.Format(time.RFC3339))
	fmt.Fprintf(tw, "Metadata\t%s\n", v.Loc.Display())
	fmt.Fprintf(tw, "Engine\t%s\n", v.Meta.Profile())
	fmt.Fprintf(tw, "Accelerators\t%s (of the process that answered)\n", v.Meta.Accelerators())
	fmt.Fprintf(tw, "Data\t%s\n", object.RedactURL(s.DataURL))
	fmt.Fprintf(tw, "Block size\t%s\n", base.IBytes(uint64(s.BlockSize)))
	if s.InlineMax > 0 {
		fmt.Fprintf(tw, "Inline limit\t%s (smaller slices keep their data in the metadata engine)\n", base.IBytes(uint64(s.InlineMax)))
	} else {
		fmt.Fprintf(tw, "Inline limit\tnone\n")
	}
	fmt.Fprintf(tw, "Chunk size\t%s\n", base.IBytes(uint64(s.ChunkSize)))
	capStr := "unlimited"
	if s.Capacity > 0 {
		capStr = base.IBytes(s.Capacity)
	}
	fmt.Fprintf(tw, "Capacity\t%s\n", capStr)
	fmt.Fprintf(tw, "Used\t%s (%d bytes)\n", base.IBytes(u.Bytes), u.Bytes)
	fmt.Fprintf(tw, "Inodes\t%d\n", u.Inodes)
	fmt.Fprintf(tw, "Available\t%s, %d inodes\n", base.IBytes(sf.AvailBytes), sf.AvailFiles)
	tw.Flush()
	expired, err := v.Meta.ListExpiredSessions(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\nSessions (%d):\n", len(sessions))
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  ID\tSTATE\tHOST\tPID\tMOUNTPOINT\tSTARTED\tHEARTBEAT\tVERSION")
	for _, se := range sessions {
		state := "live"
		limit := se.Timeout
		if limit <= 0 {
			limit = DefaultSessionTimeout
		}
		if time.Since(se.Heartbeat) > limit {
			state = "dead?" // missed heartbeats; a live client will expire it
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%d\t%s\t%s\t%s ago\t%s\n", se.ID, state, se.Host, se.Pid, orDash(se.MountPoint),
			se.Started.Format(time.RFC3339), time.Since(se.Heartbeat).Round(time.Second), se.Version)
	}
	for _, se := range expired {
		fmt.Fprintf(tw, "  %d\tdead\t%s\t%d\t%s\t%s\t%s ago (expired %s ago by session %d)\t%s\n", se.ID, se.Host, se.Pid,
			orDash(se.MountPoint), se.Started.Format(time.RFC3339), time.Since(se.Heartbeat).Round(time.Second),
			time.Since(se.Expired).Round(time.Second), se.ExpiredBy, se.Version)
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Info prints inode, chunks, slices and objects of each inode. names maps
// inodes to the paths the user gave, as "ino=path" joined by NUL.
func Info(ctx context.Context, v *Volume, inos []base.Ino, names string, w io.Writer) error {
	paths := map[string]string{}
	for _, kvp := range strings.Split(names, "\x00") {
		if k, p, ok := strings.Cut(kvp, "="); ok {
			paths[k] = p
		}
	}
	for _, ino := range inos {
		a, err := v.Meta.GetAttr(ctx, ino)
		if err != nil {
			return fmt.Errorf("inode %d: %w", ino, err)
		}
		if p := paths[strconv.FormatUint(uint64(ino), 10)]; p != "" {
			fmt.Fprintf(w, "%s:\n", p)
		}
		fmt.Fprintf(w, "  inode: %d\n  type: %s\n  mode: %04o\n  uid: %d\n  gid: %d\n  nlink: %d\n  length: %d (%s)\n",
			ino, a.Type, a.Mode, a.Uid, a.Gid, a.Nlink, a.Length, base.IBytes(a.Length))
		fmt.Fprintf(w, "  mtime: %s\n  ctime: %s\n", base.NsToTime(a.Mtime).Format(time.RFC3339Nano), base.NsToTime(a.Ctime).Format(time.RFC3339Nano))
		if a.Type != base.TypeFile {
			continue
		}
		chunks, err := v.Meta.Chunks(ctx, ino)
		if err != nil {
			return err
		}
		nslices, nobjs := 0, 0
		for _, c := range chunks {
			nslices += len(c.Slices)
		}
		fmt.Fprintf(w, "  chunks: %d\n  slices: %d\n", len(chunks), nslices)
		for _, c := range chunks {
			fmt.Fprintf(w, "  chunk %d (file offset %d):\n", c.Index, uint64(c.Index)*base.ChunkSize)
			for _, s := range c.Slices {
				if s.ID == 0 {
					fmt.Fprintf(w, "    zeros pos=%d len=%d\n", s.Pos, s.Len)
					continue
				}
				fmt.Fprintf(w, "    slice %d pos=%d off=%d len=%d size=%d\n", s.ID, s.Pos, s.Off, s.Len, s.Size)
				for i, n := range chunk.BlockLens(s.Size, v.Settings.BlockSize) {
					fmt.Fprintf(w, "      %s\n", chunk.BlockKey(s.ID, i, n))
					nobjs++
				}
			}
		}
		fmt.Fprintf(w, "  objects: %d\n", nobjs)
	}
	return nil
}

// Fsck checks the metadata invariants and that every block object that
// metadata references exists with the right size.
func Fsck(ctx context.Context, v *Volume, w io.Writer) error {
	start := time.Now()
	problems, err := v.Meta.Check(ctx, false)
	if err != nil {
		return fmt.Errorf("metadata check: %w", err)
	}
	for _, p := range problems {
		fmt.Fprintf(w, "metadata: %s ino=%d%s: %s\n", p.Kind, p.Ino, pathNote(p.Path), p.Detail)
	}
	type blk struct {
		key  string
		size int
		use  meta.SliceUse
	}
	work := make(chan blk, 256)
	var missing, checked atomic.Int64
	var mu sync.Mutex
	// The data problems, printed with path names at the end: what comes
	// before the name of the inode and what comes after.
	type badBlock struct {
		ino           base.Ino
		before, after string
	}
	var bad []badBlock
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range work {
				info, err := v.Objects.Head(ctx, b.key)
				checked.Add(1)
				if err == nil && info.Size >= int64(b.size) {
					continue
				}
				missing.Add(1)
				mu.Lock()
				x := badBlock{ino: b.use.Ino, before: fmt.Sprintf("object %s of inode %d", b.key, b.use.Ino)}
				if err != nil {
					x.after = fmt.Sprintf(" chunk %d: %v", b.use.Chunk, err)
				} else {
					x.after = fmt.Sprintf(" chunk %d is %d bytes, want at least %d", b.use.Chunk, info.Size, b.size)
				}
				bad = append(bad, x)
				mu.Unlock()
			}
		}()
	}
	seen := map[uint64]bool{}
	nslices := 0
	err = v.Meta.ForEachSlice(ctx, func(u meta.SliceUse) error {
		if u.ID == 0 || seen[u.ID] {
			return nil
		}
		seen[u.ID] = true
		nslices++
		for i, n := range chunk.BlockLens(u.Size, v.Settings.BlockSize) {
			select {
			case work <- blk{key: chunk.BlockKey(u.ID, i, n), size: n, use: u}:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	close(work)
	wg.Wait()
	if err != nil {
		return err
	}
	if len(bad) > 0 {
		inos := make([]base.Ino, len(bad))
		for i, b := range bad {
			inos[i] = b.ino
		}
		paths, perr := v.Meta.Paths(ctx, inos)
		if perr != nil {
			paths = nil // the inode numbers will do
		}
		for _, b := range bad {
			fmt.Fprintf(w, "data: %s%s%s\n", b.before, pathNote(paths[b.ino]), b.after)
		}
	}
	fmt.Fprintf(w, "checked %d slices, %d objects in %s: %d metadata problems, %d missing objects\n",
		nslices, checked.Load(), time.Since(start).Round(time.Millisecond), len(problems), missing.Load())
	if len(problems) > 0 || missing.Load() > 0 {
		return ErrProblems
	}
	return nil
}

// pathNote is " (PATH)" for a problem's inode that has a path, else "".
func pathNote(p string) string {
	if p == "" {
		return ""
	}
	return " (" + p + ")"
}

// GC runs a collection (gc.Collect) and prints its report: the orphans,
// then a summary, then what it deleted. del deletes the orphans and, when
// no client is mounted, the slices queued for deletion.
func GC(ctx context.Context, v *Volume, del bool, w io.Writer) error {
	r, err := gc.Collect(ctx, v.Meta, v.Objects, v.Chunks, gc.Options{Delete: del, DataURL: v.Settings.DataURL})
	printGC(w, r, del)
	return err
}

// printGC prints what a collection found and did, as far as it got.
func printGC(w io.Writer, r gc.Report, del bool) {
	if r.Resumed > 0 {
		fmt.Fprintf(w, "finished interrupted snapshot deletions: %d changed records pruned\n", r.Resumed)
	}
	for _, k := range r.Foreign {
		fmt.Fprintf(w, "not a block object, left alone: %s\n", k)
	}
	if !r.Listed {
		return
	}
	for _, o := range r.Orphans {
		fmt.Fprintf(w, "orphan %s (%d bytes)\n", o.Key, o.Size)
	}
	fmt.Fprintf(w, "%d objects (%s): %d referenced slices, %d orphans (%s), %d pending or in flight\n",
		r.Objects, base.IBytes(uint64(r.Bytes)), r.Referenced, len(r.Orphans), base.IBytes(uint64(r.OrphanBytes)), r.Pending)
	if !del {
		if len(r.Orphans) > 0 {
			fmt.Fprintln(w, "run again with --delete to remove the orphans")
		}
		return
	}
	if r.Deleted < len(r.Orphans) {
		return
	}
	fmt.Fprintf(w, "deleted %d orphan objects (%s)\n", r.Deleted, base.IBytes(uint64(r.OrphanBytes)))
	switch {
	case r.QueuedLeft:
		fmt.Fprintf(w, "%d slices queued for deletion are left to the delete loop of the mounted clients\n", r.QueuedSlices)
	case len(r.Queued.Finished) > 0 && len(r.Queued.Failed) == 0:
		fmt.Fprintf(w, "deleted %d slices queued for deletion (%s)\n", len(r.Queued.Finished), base.IBytes(r.Queued.Bytes))
	}
}
