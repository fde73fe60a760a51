package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
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
		if req.Flags["json"] == "true" {
			return statusJSON(ctx, v, w)
		}
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
		if req.Flags["json"] == "true" {
			return infoJSON(ctx, v, inos, names, w)
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
		o := FsckOptions{Repair: req.Flags["repair"] == "true", Scrub: req.Flags["scrub"] == "true"}
		if rate := req.Flags["scrub-rate"]; rate != "" {
			n, err := strconv.ParseInt(rate, 10, 64)
			if err != nil || n < 0 {
				return fmt.Errorf("fsck: scrub rate %q: want bytes a second", rate)
			}
			o.ScrubRate = n
		}
		return fsck(ctx, v, o, req.Flags["json"] == "true", w)
	case "gc":
		if req.Flags["json"] == "true" {
			r, err := gc.Collect(ctx, v.Meta, v.Objects, v.Chunks, gc.Options{Delete: req.Flags["delete"] == "true", DataURL: v.Settings.DataURL})
			return writeJSON(w, gcReport{Report: r, Error: errString(err)}, err)
		}
		return GC(ctx, v, req.Flags["delete"] == "true", w)
	case "config":
		return Config(ctx, v, req.Flags, w)
	case "quota-set", "quota-get", "quota-list", "quota-delete", "quota-check":
		return quotaRequest(ctx, v, req, w)
	case "trash-list", "trash-restore", "trash-purge":
		return trashRequest(ctx, v, req, w)
	case "dump":
		return dumpRequest(ctx, v, req, w)
	case "backup-now":
		return backupNow(ctx, v, req, w)
	case "backup-list":
		return backupList(ctx, v, req, w)
	case "backup-delete":
		return backupDelete(ctx, v, req, w)
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
	case "find":
		return runFindRequest(ctx, v, req, w)
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
	r, err := statusReport(ctx, v)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "Volume\t%s\n", r.Volume)
	fmt.Fprintf(tw, "UUID\t%s\n", r.UUID)
	fmt.Fprintf(tw, "Format version\t%d\n", r.FormatVersion)
	fmt.Fprintf(tw, "Created\t%s\n", r.Created.Format(time.RFC3339))
	fmt.Fprintf(tw, "Metadata\t%s\n", r.Metadata)
	fmt.Fprintf(tw, "Engine\t%s\n", r.Engine)
	fmt.Fprintf(tw, "Accelerators\t%s (of the process that answered)\n", r.Accelerators)
	fmt.Fprintf(tw, "Data\t%s\n", r.Data)
	fmt.Fprintf(tw, "Block size\t%s\n", base.IBytes(uint64(r.BlockSize)))
	if r.InlineMax > 0 {
		fmt.Fprintf(tw, "Inline limit\t%s (smaller slices keep their data in the metadata engine)\n", base.IBytes(uint64(r.InlineMax)))
	} else {
		fmt.Fprintf(tw, "Inline limit\tnone\n")
	}
	fmt.Fprintf(tw, "Chunk size\t%s\n", base.IBytes(uint64(r.ChunkSize)))
	capStr := "unlimited"
	if r.Capacity > 0 {
		capStr = base.IBytes(r.Capacity)
	}
	fmt.Fprintf(tw, "Capacity\t%s\n", capStr)
	fmt.Fprintf(tw, "Used\t%s (%d bytes)\n", base.IBytes(r.UsedBytes), r.UsedBytes)
	fmt.Fprintf(tw, "Inodes\t%d\n", r.UsedInodes)
	fmt.Fprintf(tw, "Available\t%s, %d inodes\n", base.IBytes(r.AvailBytes), r.AvailInodes)
	if g := r.Granted; g.Holders > 0 {
		fmt.Fprintf(tw, "Granted\t%s, %d inodes to %d clients writing back (not available to others)\n", base.IBytes(g.Bytes), g.Inodes, g.Holders)
	}
	switch t := r.Trash; {
	case t.Days == 0 && t.Entries == 0:
		fmt.Fprintf(tw, "Trash\toff\n")
	case t.Days == 0:
		fmt.Fprintf(tw, "Trash\toff; holds %s in %d inodes (%d entries; cairn trash purge frees them)\n", base.IBytes(t.Bytes), t.Inodes, t.Entries)
	default:
		fmt.Fprintf(tw, "Trash\t%d days; holds %s in %d inodes (%d entries, %d hour buckets", t.Days, base.IBytes(t.Bytes), t.Inodes, t.Entries, t.Buckets)
		if t.Oldest != "" {
			fmt.Fprintf(tw, ", oldest %s", t.Oldest)
		}
		fmt.Fprintf(tw, ")\n")
	}
	switch {
	case r.BackupsError != "":
		fmt.Fprintf(tw, "Backups\tunknown: %s\n", r.BackupsError)
	case r.LatestBackup == nil:
		fmt.Fprintf(tw, "Backups\tnone (see cairn backup)\n")
	default:
		fmt.Fprintf(tw, "Backups\t%d, the latest %s (%s ago)\n", r.Backups, r.LatestBackup.Name,
			time.Since(r.LatestBackup.Time).Round(time.Second))
	}
	tw.Flush()
	live := 0
	for _, se := range r.Sessions {
		if se.Expired == nil {
			live++
		}
	}
	fmt.Fprintf(w, "\nSessions (%d):\n", live)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  ID\tSTATE\tHOST\tPID\tMOUNTPOINT\tSTARTED\tHEARTBEAT\tVERSION")
	for _, se := range r.Sessions {
		hb := time.Since(se.Heartbeat).Round(time.Second).String() + " ago"
		if se.Expired != nil {
			hb += fmt.Sprintf(" (expired %s ago by session %d)", time.Since(*se.Expired).Round(time.Second), se.ExpiredBy)
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", se.ID, se.State, se.Host, se.Pid, orDash(se.MountPoint),
			se.Started.Format(time.RFC3339), hb, se.Version)
	}
	return tw.Flush()
}

// StatusReport is status's --json output.
type StatusReport struct {
	Volume        string    `json:"volume"`
	UUID          string    `json:"uuid"`
	FormatVersion int       `json:"format_version"`
	Created       time.Time `json:"created"`
	Metadata      string    `json:"metadata"`
	Engine        string    `json:"engine"`
	Accelerators  string    `json:"accelerators"` // of the process that answered
	Data          string    `json:"data"`
	BlockSize     int       `json:"block_size"`
	InlineMax     int       `json:"inline_max"`
	ChunkSize     int       `json:"chunk_size"`
	Capacity      uint64    `json:"capacity"` // bytes; 0: unlimited
	InodeLimit    uint64    `json:"inode_limit"`
	UsedBytes     uint64    `json:"used_bytes"`
	UsedInodes    uint64    `json:"used_inodes"`
	AvailBytes    uint64    `json:"avail_bytes"`
	AvailInodes   uint64    `json:"avail_inodes"`
	// Granted is what clients that write back hold of the limits
	// (counted as used by every other client's check).
	Granted meta.Granted `json:"granted"`
	// Backups counts the metadata backups in the data store;
	// LatestBackup is the newest (cairn backup list shows them all).
	// BackupsError says why they could not be listed.
	// Trash is what the trash holds (counted in UsedBytes and
	// UsedInodes), and its retention.
	Trash        TrashReport     `json:"trash"`
	Backups      int             `json:"backups"`
	LatestBackup *BackupInfo     `json:"latest_backup,omitempty"`
	BackupsError string          `json:"backups_error,omitempty"`
	Sessions     []SessionReport `json:"sessions"`
}

// TrashReport is the trash in a StatusReport.
type TrashReport struct {
	Days int `json:"days"` // retention; 0: off
	meta.TrashUsage
}

// SessionReport is one session in a StatusReport.
type SessionReport struct {
	meta.SessionInfo
	State     string     `json:"state"` // live, dead? (missed heartbeats), dead (expired)
	Expired   *time.Time `json:"expired,omitempty"`
	ExpiredBy uint64     `json:"expired_by,omitempty"`
}

// statusReport reads what status shows: the sessions live first, then
// those expired in the last day.
func statusReport(ctx context.Context, v *Volume) (StatusReport, error) {
	s := v.Meta.Settings() // as last read: a change by config shows
	u, err := v.Meta.Usage(ctx)
	if err != nil {
		return StatusReport{}, err
	}
	sf, err := v.Meta.StatFS(ctx)
	if err != nil {
		return StatusReport{}, err
	}
	sessions, err := v.Meta.ListSessions(ctx)
	if err != nil {
		return StatusReport{}, err
	}
	expired, err := v.Meta.ListExpiredSessions(ctx)
	if err != nil {
		return StatusReport{}, err
	}
	r := StatusReport{Volume: s.Name, UUID: s.UUID, FormatVersion: s.FormatVersion, Created: s.Created,
		Metadata: v.Loc.Display(), Engine: v.Meta.Profile().String(), Accelerators: v.Meta.Accelerators().String(),
		Data: object.RedactURL(s.DataURL), BlockSize: s.BlockSize, InlineMax: s.InlineMax, ChunkSize: s.ChunkSize,
		Capacity: s.Capacity, InodeLimit: s.Inodes, UsedBytes: u.Bytes, UsedInodes: u.Inodes,
		AvailBytes: sf.AvailBytes, AvailInodes: sf.AvailFiles, Sessions: []SessionReport{}}
	tu, err := v.Meta.TrashUsage(ctx)
	if err != nil {
		return StatusReport{}, fmt.Errorf("the trash: %w", err)
	}
	r.Trash = TrashReport{Days: s.TrashDays, TrashUsage: tu}
	if r.Granted, err = v.Meta.Grants(ctx); err != nil {
		return StatusReport{}, fmt.Errorf("the grants of the volume's limits: %w", err)
	}
	if list, err := ListBackups(ctx, v.data()); err != nil {
		r.BackupsError = err.Error()
	} else if r.Backups = len(list); len(list) > 0 {
		r.LatestBackup = &list[0]
	}
	for _, se := range sessions {
		r.Sessions = append(r.Sessions, SessionReport{SessionInfo: se, State: sessionState(se)})
	}
	for _, se := range expired {
		at := se.Expired
		r.Sessions = append(r.Sessions, SessionReport{SessionInfo: se.SessionInfo, State: "dead", Expired: &at, ExpiredBy: se.ExpiredBy})
	}
	return r, nil
}

// statusJSON is Status as one StatusReport.
func statusJSON(ctx context.Context, v *Volume, w io.Writer) error {
	r, err := statusReport(ctx, v)
	if err != nil {
		return err
	}
	return writeJSON(w, r, nil)
}

// sessionState is "live", or "dead?" for a session that missed its
// heartbeats (a live client will expire it).
func sessionState(se meta.SessionInfo) string {
	limit := se.Timeout
	if limit <= 0 {
		limit = DefaultSessionTimeout
	}
	if time.Since(se.Heartbeat) > limit {
		return "dead?"
	}
	return "live"
}

// InfoReport is info's --json output for one inode.
type InfoReport struct {
	Path   string        `json:"path,omitempty"`
	Ino    base.Ino      `json:"ino"`
	Type   string        `json:"type"`
	Mode   uint32        `json:"mode"`
	Uid    uint32        `json:"uid"`
	Gid    uint32        `json:"gid"`
	Nlink  uint32        `json:"nlink"`
	Length uint64        `json:"length"`
	Mtime  time.Time     `json:"mtime"`
	Ctime  time.Time     `json:"ctime"`
	Chunks []ChunkReport `json:"chunks,omitempty"`
}

// ChunkReport is one chunk of an InfoReport.
type ChunkReport struct {
	Index  uint32        `json:"index"`
	Slices []SliceReport `json:"slices"`
}

// SliceReport is one slice of a ChunkReport; ID 0 is a run of zeros.
type SliceReport struct {
	ID      uint64   `json:"id"`
	Pos     uint32   `json:"pos"`  // in the chunk
	Off     uint32   `json:"off"`  // of the referenced range in the slice
	Len     uint32   `json:"len"`  // of the referenced range
	Size    uint32   `json:"size"` // of the stored slice
	Objects []string `json:"objects,omitempty"`
}

// infoReports reads what info shows of each of inos; names maps them to
// the paths the user gave, as "ino=path" joined by NUL.
func infoReports(ctx context.Context, v *Volume, inos []base.Ino, names string) ([]InfoReport, error) {
	paths := infoNames(names)
	out := []InfoReport{}
	for _, ino := range inos {
		a, err := v.Meta.GetAttr(ctx, ino)
		if err != nil {
			return nil, fmt.Errorf("inode %d: %w", ino, err)
		}
		r := InfoReport{Path: paths[strconv.FormatUint(uint64(ino), 10)], Ino: ino, Type: a.Type.String(), Mode: a.Mode,
			Uid: a.Uid, Gid: a.Gid, Nlink: a.Nlink, Length: a.Length, Mtime: base.NsToTime(a.Mtime), Ctime: base.NsToTime(a.Ctime)}
		if a.Type == base.TypeFile {
			chunks, err := v.Meta.Chunks(ctx, ino)
			if err != nil {
				return nil, err
			}
			for _, c := range chunks {
				cr := ChunkReport{Index: c.Index}
				for _, s := range c.Slices {
					sr := SliceReport{ID: s.ID, Pos: s.Pos, Off: s.Off, Len: s.Len, Size: s.Size}
					if s.ID != 0 {
						for i, n := range chunk.BlockLens(s.Size, v.Settings.BlockSize) {
							sr.Objects = append(sr.Objects, chunk.BlockKey(s.ID, i, n))
						}
					}
					cr.Slices = append(cr.Slices, sr)
				}
				r.Chunks = append(r.Chunks, cr)
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// infoJSON is Info as a JSON array of InfoReport.
func infoJSON(ctx context.Context, v *Volume, inos []base.Ino, names string, w io.Writer) error {
	reports, err := infoReports(ctx, v, inos, names)
	if err != nil {
		return err
	}
	return writeJSON(w, reports, nil)
}

// infoNames parses the names flag of info: "ino=path" joined by NUL.
func infoNames(names string) map[string]string {
	paths := map[string]string{}
	for _, kvp := range strings.Split(names, "\x00") {
		if k, p, ok := strings.Cut(kvp, "="); ok {
			paths[k] = p
		}
	}
	return paths
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Config changes the settings that may change after format (flags
// "name", "capacity", "inodes", "trash-days", "inline-max"; capacity and
// inodes in bytes and inodes, 0 for no limit; trash days 0 for no trash;
// the inline limit in bytes, 0 for none), then prints the settings; with
// no flag it only prints them. Clients of the volume pick a change up at
// their next heartbeat.
func Config(ctx context.Context, v *Volume, flags map[string]string, w io.Writer) error {
	s := v.Meta.Settings()
	changes := map[string]string{}
	for _, k := range []string{"name", "capacity", "inodes", "trash-days", "inline-max"} {
		if val, ok := flags[k]; ok {
			changes[k] = val
		}
	}
	if len(changes) > 0 {
		var err error
		s, err = v.Meta.ChangeSettings(ctx, func(s *meta.Settings) error {
			for k, val := range changes {
				switch k {
				case "name":
					s.Name = val
				case "capacity", "inodes":
					n, err := strconv.ParseUint(val, 10, 64)
					if err != nil {
						return fmt.Errorf("config: %s %q: %w", k, val, base.ErrInvalid)
					}
					if k == "capacity" {
						s.Capacity = n
					} else {
						s.Inodes = n
					}
				case "trash-days", "inline-max":
					n, err := strconv.Atoi(val)
					if err != nil || n < 0 {
						return fmt.Errorf("config: %s %q: want a number, 0 or more: %w", k, val, base.ErrInvalid)
					}
					if k == "trash-days" {
						s.TrashDays = n
					} else {
						s.InlineMax = n
					}
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if flags["json"] == "true" {
		return writeJSON(w, s, nil)
	}
	limit := func(n uint64, f func(uint64) string) string {
		if n == 0 {
			return "unlimited"
		}
		return f(n)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "name\t%s\n", s.Name)
	fmt.Fprintf(tw, "capacity\t%s\n", limit(s.Capacity, base.IBytes))
	fmt.Fprintf(tw, "inodes\t%s\n", limit(s.Inodes, func(n uint64) string { return strconv.FormatUint(n, 10) }))
	fmt.Fprintf(tw, "block-size\t%s (fixed at format)\n", base.IBytes(uint64(s.BlockSize)))
	if s.TrashDays > 0 {
		fmt.Fprintf(tw, "trash-days\t%d (removed files wait in /%s)\n", s.TrashDays, meta.TrashName)
	} else {
		fmt.Fprintf(tw, "trash-days\t0 (no trash)\n")
	}
	if s.FormatVersion >= 2 {
		fmt.Fprintf(tw, "inline-max\t%s (for new files)\n", base.IBytes(uint64(s.InlineMax)))
	} else {
		fmt.Fprintf(tw, "inline-max\t%s (format version %d keeps no data in the metadata engine)\n", base.IBytes(uint64(s.InlineMax)), s.FormatVersion)
	}
	fmt.Fprintf(tw, "data\t%s (fixed at format)\n", object.RedactURL(s.DataURL))
	return tw.Flush()
}

// Info prints inode, chunks, slices and objects of each inode. names maps
// inodes to the paths the user gave, as "ino=path" joined by NUL.
func Info(ctx context.Context, v *Volume, inos []base.Ino, names string, w io.Writer) error {
	reports, err := infoReports(ctx, v, inos, names)
	if err != nil {
		return err
	}
	for _, r := range reports {
		if r.Path != "" {
			fmt.Fprintf(w, "%s:\n", r.Path)
		}
		fmt.Fprintf(w, "  inode: %d\n  type: %s\n  mode: %04o\n  uid: %d\n  gid: %d\n  nlink: %d\n  length: %d (%s)\n",
			r.Ino, r.Type, r.Mode, r.Uid, r.Gid, r.Nlink, r.Length, base.IBytes(r.Length))
		fmt.Fprintf(w, "  mtime: %s\n  ctime: %s\n", r.Mtime.Format(time.RFC3339Nano), r.Ctime.Format(time.RFC3339Nano))
		if r.Type != base.TypeFile.String() {
			continue
		}
		nslices, nobjs := 0, 0
		for _, c := range r.Chunks {
			nslices += len(c.Slices)
		}
		fmt.Fprintf(w, "  chunks: %d\n  slices: %d\n", len(r.Chunks), nslices)
		for _, c := range r.Chunks {
			fmt.Fprintf(w, "  chunk %d (file offset %d):\n", c.Index, uint64(c.Index)*base.ChunkSize)
			for _, s := range c.Slices {
				if s.ID == 0 {
					fmt.Fprintf(w, "    zeros pos=%d len=%d\n", s.Pos, s.Len)
					continue
				}
				fmt.Fprintf(w, "    slice %d pos=%d off=%d len=%d size=%d\n", s.ID, s.Pos, s.Off, s.Len, s.Size)
				for _, o := range s.Objects {
					fmt.Fprintf(w, "      %s\n", o)
					nobjs++
				}
			}
		}
		fmt.Fprintf(w, "  objects: %d\n", nobjs)
	}
	return nil
}

// Fsck checks the metadata invariants and that every block object that
// metadata references exists with the right size, and prints what it
// found; ErrProblems if it found any.
func Fsck(ctx context.Context, v *Volume, w io.Writer) error {
	return fsck(ctx, v, FsckOptions{}, false, w)
}

// FsckReport is what fsck found (its --json output).
type FsckReport struct {
	Problems []meta.Problem `json:"problems"`           // of the metadata (with --repair: those left)
	Repaired []meta.Problem `json:"repaired,omitempty"` // of the metadata, fixed by --repair
	Data     []DataProblem  `json:"data"`               // missing, short or (--scrub) corrupt block objects
	Slices   int            `json:"slices"`             // slices checked
	Objects  int64          `json:"objects"`            // block objects found
	Scrubbed int64          `json:"scrubbed,omitempty"` // bytes read and verified by --scrub
	Millis   int64          `json:"ms"`                 // how long it took
	Error    string         `json:"error,omitempty"`
}

// DataProblem is a block object that is missing or shorter than its
// slice needs.
type DataProblem struct {
	Object string   `json:"object"`
	Ino    base.Ino `json:"ino"`
	Path   string   `json:"path,omitempty"`
	Chunk  uint32   `json:"chunk"`
	Detail string   `json:"detail"`
}

// fsck is Fsck with options o, printing text or (asJSON) one FsckReport.
func fsck(ctx context.Context, v *Volume, o FsckOptions, asJSON bool, w io.Writer) error {
	r, err := checkVolume(ctx, v, o)
	if asJSON {
		r.Error = errString(err)
		if err == nil && (len(r.Problems) > 0 || len(r.Data) > 0) {
			err = ErrProblems
		}
		return writeJSON(w, r, err)
	}
	if err != nil {
		return err
	}
	for _, p := range r.Repaired {
		fmt.Fprintf(w, "repaired: %s ino=%d%s: %s\n", p.Kind, p.Ino, pathNote(p.Path), p.Detail)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "metadata: %s ino=%d%s: %s\n", p.Kind, p.Ino, pathNote(p.Path), p.Detail)
	}
	for _, d := range r.Data {
		fmt.Fprintf(w, "data: object %s of inode %d%s chunk %d%s\n", d.Object, d.Ino, pathNote(d.Path), d.Chunk, d.Detail)
	}
	scrubbed := ""
	if o.Scrub {
		scrubbed = fmt.Sprintf(", %s read and verified", base.IBytes(uint64(r.Scrubbed)))
	}
	repaired := ""
	if o.Repair {
		repaired = fmt.Sprintf(", %d repaired", len(r.Repaired))
	}
	fmt.Fprintf(w, "checked %d slices, %d objects%s in %s: %d metadata problems%s, %d missing objects\n",
		r.Slices, r.Objects, scrubbed, (time.Duration(r.Millis) * time.Millisecond).String(), len(r.Problems), repaired, len(r.Data))
	if len(r.Problems) > 0 || len(r.Data) > 0 {
		return ErrProblems
	}
	return nil
}

// FsckOptions choose what fsck does beyond its checks.
type FsckOptions struct {
	// Repair fixes the metadata problems that can be fixed safely
	// (meta.Check's repairs: orphans, counters, dangling entries, stale
	// records), then checks again; what remains is reported.
	Repair bool
	// Scrub reads every block object and verifies its checksums, at
	// most ScrubRate bytes a second (0: as fast as it goes).
	Scrub     bool
	ScrubRate int64
}

// checkVolume runs the checks of fsck: the metadata invariants, then the
// block objects the metadata references, found by one listing of the data
// store (not a request per object) and, with o.Scrub, read and verified.
// FsckProgress is what a running fsck has done: its phase, the items of
// the phase done (objects listed, blocks scrubbed) of Total when known,
// and the bytes scrubbed. Safe to read while it runs.
type FsckProgress struct {
	Phase              atomic.Pointer[string]
	Done, Total, Bytes atomic.Int64
}

func (p *FsckProgress) enter(phase string, total int64) {
	p.Phase.Store(&phase)
	p.Done.Store(0)
	p.Total.Store(total)
}

type fsckProgressKey struct{}

// WithFsckProgress returns a context under which fsck reports to p (a
// command that runs it in this process shows it; through a control
// socket it is not seen).
func WithFsckProgress(ctx context.Context, p *FsckProgress) context.Context {
	return context.WithValue(ctx, fsckProgressKey{}, p)
}

func checkVolume(ctx context.Context, v *Volume, o FsckOptions) (FsckReport, error) {
	start := time.Now()
	var r FsckReport
	prog, _ := ctx.Value(fsckProgressKey{}).(*FsckProgress)
	if prog == nil {
		prog = new(FsckProgress)
	}
	prog.enter("checking the metadata", 0)
	problems, err := v.Meta.Check(ctx, o.Repair)
	if err != nil {
		return r, fmt.Errorf("metadata check: %w", err)
	}
	r.Problems = append([]meta.Problem{}, problems...)
	if o.Repair && len(problems) > 0 {
		left, err := v.Meta.Check(ctx, false)
		if err != nil {
			return r, fmt.Errorf("metadata check after repairing: %w", err)
		}
		still := map[string]bool{}
		for _, p := range left {
			still[p.Kind+"\x00"+p.Detail] = true
		}
		for _, p := range problems {
			if !still[p.Kind+"\x00"+p.Detail] {
				r.Repaired = append(r.Repaired, p)
			}
		}
		r.Problems = append([]meta.Problem{}, left...)
	}
	r.Data = []DataProblem{}

	// The slices the metadata references, with the blocks of each the
	// listing found.
	type ref struct {
		ino   base.Ino
		chunk uint32
		size  uint32
		found []uint64 // bit i: block i listed, of the right size
	}
	refs := map[uint64]*ref{}
	bs := v.Settings.BlockSize
	prog.enter("reading the slices", 0)
	err = v.Meta.ForEachSlice(ctx, func(u meta.SliceUse) error {
		if u.ID != 0 && refs[u.ID] == nil {
			n := len(chunk.BlockLens(u.Size, bs))
			refs[u.ID] = &ref{ino: u.Ino, chunk: u.Chunk, size: u.Size, found: make([]uint64, (n+63)/64)}
		}
		return nil
	})
	if err != nil {
		return r, err
	}
	r.Slices = len(refs)
	wrongSize := map[string]bool{} // reported already: not scrubbed
	bad := func(id uint64, rf *ref, index, length int, detail string) {
		r.Data = append(r.Data, DataProblem{Object: chunk.BlockKey(id, index, length), Ino: rf.ino, Chunk: rf.chunk, Detail: detail})
	}
	prog.enter("listing the data store", 0)
	err = v.Objects.List(ctx, chunk.KeyPrefix, func(info object.Info) bool {
		prog.Done.Add(1)
		id, index, length, err := chunk.ParseBlockKey(info.Key)
		if err != nil {
			return true // not a block: gc's business
		}
		rf := refs[id]
		if rf == nil {
			return true // an orphan: gc's business
		}
		lens := chunk.BlockLens(rf.size, bs)
		if index < 0 || index >= len(lens) || lens[index] != length {
			return true // not a block of this slice: gc's business
		}
		r.Objects++
		rf.found[index/64] |= 1 << (index % 64)
		if want := int64(chunk.EncodedLen(length)); info.Size != want {
			bad(id, rf, index, length, fmt.Sprintf(" is %d bytes, want %d", info.Size, want))
			wrongSize[info.Key] = true
		}
		return true
	})
	if err != nil {
		return r, fmt.Errorf("listing the data store: %w", err)
	}
	type block struct {
		id            uint64
		index, length int
	}
	var present []block
	for id, rf := range refs {
		for i, n := range chunk.BlockLens(rf.size, bs) {
			if rf.found[i/64]&(1<<(i%64)) == 0 {
				bad(id, rf, i, n, ": missing from the data store")
			} else if o.Scrub && !wrongSize[chunk.BlockKey(id, i, n)] {
				present = append(present, block{id, i, n})
			}
		}
	}
	if o.Scrub {
		sort.Slice(present, func(i, j int) bool {
			return present[i].id < present[j].id || present[i].id == present[j].id && present[i].index < present[j].index
		})
		format := blockFormat(v.Settings)
		prog.enter("scrubbing", int64(len(present)))
		work := make(chan block)
		var mu sync.Mutex
		var wg sync.WaitGroup
		var read atomic.Int64
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for b := range work {
					obj, err := v.Objects.Get(ctx, chunk.BlockKey(b.id, b.index, b.length), 0, -1)
					prog.Done.Add(1)
					if err == nil {
						read.Add(int64(len(obj)))
						prog.Bytes.Add(int64(len(obj)))
						_, err = chunk.DecodeBlock(obj, chunk.BlockID{Slice: b.id, Index: b.index, Length: b.length}, format)
					}
					if err != nil && ctx.Err() == nil {
						mu.Lock()
						bad(b.id, refs[b.id], b.index, b.length, ": "+err.Error())
						mu.Unlock()
					}
				}
			}()
		}
		for _, b := range present {
			if o.ScrubRate > 0 {
				// Hold the reads to the rate: wait until the bytes read
				// so far are due.
				if due := start.Add(time.Duration(float64(read.Load()) / float64(o.ScrubRate) * float64(time.Second))); time.Now().Before(due) {
					time.Sleep(time.Until(due))
				}
			}
			select {
			case work <- b:
			case <-ctx.Done():
			}
			if ctx.Err() != nil {
				break
			}
		}
		close(work)
		wg.Wait()
		if err := ctx.Err(); err != nil {
			return r, err
		}
		r.Scrubbed = read.Load()
	}
	if len(r.Data) > 0 {
		sort.Slice(r.Data, func(i, j int) bool { return r.Data[i].Object < r.Data[j].Object })
		inos := make([]base.Ino, len(r.Data))
		for i, d := range r.Data {
			inos[i] = d.Ino
		}
		if paths, err := v.Meta.Paths(ctx, inos); err == nil { // else the inode numbers will do
			for i := range r.Data {
				r.Data[i].Path = paths[r.Data[i].Ino]
			}
		}
	}
	r.Millis = time.Since(start).Milliseconds()
	return r, nil
}

// writeJSON writes x as one JSON document and returns err, the outcome
// of the command x reports on.
func writeJSON(w io.Writer, x any, err error) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if jerr := enc.Encode(x); jerr != nil {
		return jerr
	}
	return err
}

// errString is err's message, "" for nil.
func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// gcReport is gc's --json output: its report, as far as it got, and the
// error that stopped it.
type gcReport struct {
	gc.Report
	Error string `json:"error,omitempty"`
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
	if del && v.ReadOnly {
		// On a replication destination, objects a running cycle has
		// copied are not referenced until it commits.
		return fmt.Errorf("gc --delete on a volume open read-only (a replication destination, or --read-only) is refused: on a destination run it after a failover")
	}
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
