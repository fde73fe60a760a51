package daemon

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/meta"
)

// cairn find: the search runs where the metadata engine is open (this
// process, or the mount process holding an embedded volume), so its
// tests and output are here; the command line is parsed by ParseFind on
// both sides.

// FindRecord is one entry found, as --json prints it.
type FindRecord struct {
	Path string `json:"path"`
	// PathBase64 is the path's exact bytes, given only when they are not
	// valid UTF-8 (Path then has U+FFFD in place of the invalid ones).
	PathBase64 string    `json:"path_base64,omitempty"`
	Ino        base.Ino  `json:"ino"`
	Type       string    `json:"type"`
	Size       uint64    `json:"size"`
	Mode       uint32    `json:"mode"` // permission bits (07777), as cairn info --json
	Uid        uint32    `json:"uid"`
	Gid        uint32    `json:"gid"`
	Mtime      time.Time `json:"mtime"`
	Nlink      uint32    `json:"nlink"`
}

// FindSummary is one directory of -summary --json: what was found below
// it (the entries that match, not the directory itself).
type FindSummary struct {
	Path       string `json:"path"`
	PathBase64 string `json:"path_base64,omitempty"`
	Entries    int64  `json:"entries"`
	Bytes      int64  `json:"bytes"`
}

// findCall is the search of one start path.
type findCall struct {
	spec      *FindSpec
	start     string // the start path as given
	prefix    string // what relative paths of entries follow
	startBase string // the start's name, for -name
	newerThan int64  // -newer: the file's mtime
	entry     []findPred
	attr      []findPred
	out       *findOutput
}

// baseName is the name -name matches: for the start, the last component
// of its path as given (trailing slashes dropped; "/" stays "/").
func (c *findCall) baseName(d *meta.FindDir, e *meta.FindEntry) string {
	if d == nil && e.Depth == 0 {
		return c.startBase
	}
	return e.Name
}

// path is the entry's path as printed: the start as given, then the
// entry's path below it.
func (c *findCall) path(d *meta.FindDir, e *meta.FindEntry) string {
	return string(c.appendPath(nil, d, e))
}

func (c *findCall) appendPath(b []byte, d *meta.FindDir, e *meta.FindEntry) []byte {
	if d == nil {
		return append(b, c.start...)
	}
	b = append(b, c.prefix...)
	if d.Path != "" {
		b = append(append(b, d.Path...), '/')
	}
	return append(b, e.Name...)
}

func (c *findCall) dirPath(d *meta.FindDir) string {
	if d.Path == "" {
		return c.start
	}
	return c.prefix + d.Path
}

// keep runs the tests that need only the directory entry.
func (c *findCall) keep(d *meta.FindDir, e *meta.FindEntry) bool {
	if e.Depth < c.spec.MinDepth {
		return false
	}
	for i := range c.entry {
		if c.entry[i].entry(c, d, e) == c.entry[i].neg {
			return false
		}
	}
	return true
}

// match runs the tests that need the attribute.
func (c *findCall) match(d *meta.FindDir, e *meta.FindEntry) bool {
	for i := range c.attr {
		if c.attr[i].attr(c, d, e) == c.attr[i].neg {
			return false
		}
	}
	return true
}

// findOutput serializes what the workers print, a page at a time.
type findOutput struct {
	mu  sync.Mutex
	w   *bufio.Writer
	buf sync.Pool // *[]byte
}

func (o *findOutput) write(b []byte) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, err := o.w.Write(b)
	return err
}

// visit tests and prints one page of entries.
func (c *findCall) visit(d *meta.FindDir, ents []meta.FindEntry) error {
	bp, _ := c.out.buf.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	defer c.out.buf.Put(bp)
	b := (*bp)[:0]
	spec := c.spec
	if p := spec.Progress; p != nil {
		p.Entries.Add(int64(len(ents)))
	}
	var count, bytes int64
	for i := range ents {
		e := &ents[i]
		if !c.match(d, e) {
			continue
		}
		switch {
		case spec.Summary:
			count++
			bytes += int64(e.Attr.Length)
		case spec.JSON:
			b = appendFindRecord(b, c.findRecord(d, e))
		case spec.Print0:
			b = append(c.appendPath(b, d, e), 0)
		default:
			b = append(c.appendPath(b, d, e), '\n')
		}
	}
	if spec.Summary && d != nil {
		d.Count.Add(count)
		d.Bytes.Add(bytes)
	}
	*bp = b
	if len(b) == 0 {
		return nil
	}
	return c.out.write(b)
}

func (c *findCall) findRecord(d *meta.FindDir, e *meta.FindEntry) FindRecord {
	p := c.path(d, e)
	r := FindRecord{Path: p, Ino: e.Ino, Type: e.Type.String(), Size: e.Attr.Length, Mode: e.Attr.Mode,
		Uid: e.Attr.Uid, Gid: e.Attr.Gid, Mtime: base.NsToTime(e.Attr.Mtime).UTC(), Nlink: e.Attr.Nlink}
	if !utf8.ValidString(p) {
		r.PathBase64 = base64.StdEncoding.EncodeToString([]byte(p))
	}
	return r
}

// appendFindRecord appends r as JSON, as json.Marshal would, and a
// newline; without reflection, which took most of a --json search's time.
func appendFindRecord(b []byte, r FindRecord) []byte {
	b = appendJSONString(append(b, `{"path":`...), r.Path)
	if r.PathBase64 != "" {
		b = appendJSONString(append(b, `,"path_base64":`...), r.PathBase64)
	}
	b = strconv.AppendUint(append(b, `,"ino":`...), uint64(r.Ino), 10)
	b = appendJSONString(append(b, `,"type":`...), r.Type)
	b = strconv.AppendUint(append(b, `,"size":`...), r.Size, 10)
	b = strconv.AppendUint(append(b, `,"mode":`...), uint64(r.Mode), 10)
	b = strconv.AppendUint(append(b, `,"uid":`...), uint64(r.Uid), 10)
	b = strconv.AppendUint(append(b, `,"gid":`...), uint64(r.Gid), 10)
	b = r.Mtime.AppendFormat(append(b, `,"mtime":"`...), time.RFC3339Nano)
	b = strconv.AppendUint(append(b, `","nlink":`...), uint64(r.Nlink), 10)
	return append(b, "}\n"...)
}

// appendJSONString appends s as a JSON string; bytes that are not UTF-8
// become U+FFFD, as encoding/json makes them.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c == '\b':
				b = append(b, '\\', 'b')
			case c == '\f':
				b = append(b, '\\', 'f')
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return append(b, '"')
}

func appendJSON(b []byte, v any) ([]byte, error) {
	j, err := json.Marshal(v)
	if err != nil {
		return b, err
	}
	return append(append(b, j...), '\n'), nil
}

// dirDone prints a directory's -summary line and adds its tally to its
// parent's.
func (c *findCall) dirDone(d *meta.FindDir) error {
	if p := c.spec.Progress; p != nil {
		p.Dirs.Add(1)
	}
	n, bytes := d.Count.Load(), d.Bytes.Load()
	if d.Parent != nil {
		d.Parent.Count.Add(n)
		d.Parent.Bytes.Add(bytes)
	}
	p := c.dirPath(d)
	var b []byte
	if c.spec.JSON {
		s := FindSummary{Path: p, Entries: n, Bytes: bytes}
		if !utf8.ValidString(p) {
			s.PathBase64 = base64.StdEncoding.EncodeToString([]byte(p))
		}
		var err error
		if b, err = appendJSON(nil, s); err != nil {
			return err
		}
	} else {
		b = fmt.Appendf(nil, "%d\t%d\t%s\n", n, bytes, p)
	}
	return c.out.write(b)
}

// RunFind runs a parsed cairn find over m, writing what it finds to w.
// Errors that come from the request itself (no such path or snapshot)
// wrap ErrBadInput.
func RunFind(ctx context.Context, m *meta.Meta, spec *FindSpec, w io.Writer) error {
	var snap *meta.Snapshot
	if spec.Snapshot != "" {
		s, err := m.SnapshotByName(ctx, spec.Snapshot)
		if err != nil {
			return findInputError(err, "-snapshot "+spec.Snapshot)
		}
		snap = &s
	}
	if spec.ChangedSince != "" {
		s, err := m.SnapshotByName(ctx, spec.ChangedSince)
		if err != nil {
			return findInputError(err, "-changed-since "+spec.ChangedSince)
		}
		if snap != nil && s.Epoch >= snap.Epoch {
			return badInput("find: -changed-since %q is not older than -snapshot %q", spec.ChangedSince, spec.Snapshot)
		}
	}
	var newerThan int64
	if spec.newer != "" {
		_, a, err := m.ResolvePath(ctx, base.RootCaller, snap, spec.newer)
		if err != nil {
			return findInputError(err, "-newer "+spec.newer)
		}
		newerThan = a.Mtime
	}
	for _, p := range spec.Paths {
		if _, _, err := m.ResolvePath(ctx, base.RootCaller, snap, p); err != nil {
			return findInputError(err, p)
		}
	}
	out := &findOutput{w: bufio.NewWriterSize(w, 64<<10)}
	var entry, attr []findPred
	needInline := false
	for _, p := range spec.preds {
		if p.entry != nil {
			entry = append(entry, p)
		} else {
			attr = append(attr, p)
			needInline = needInline || p.inline
		}
	}
	for _, p := range spec.Paths {
		c := &findCall{spec: spec, start: p, prefix: p, newerThan: newerThan, entry: entry, attr: attr, out: out}
		if !strings.HasSuffix(p, "/") {
			c.prefix += "/"
		}
		c.startBase = "/"
		if t := strings.TrimRight(p, "/"); t != "" {
			c.startBase = t[strings.LastIndexByte(t, '/')+1:]
		}
		o := meta.FindOptions{Path: p, Snapshot: snap, MaxDepth: spec.MaxDepth, ChangedSince: spec.ChangedSince,
			Attrs: spec.JSON || spec.Summary || len(attr) > 0, Inline: needInline,
			Filter: c.keep, Visit: c.visit}
		if spec.Summary {
			o.DirDone = c.dirDone
		}
		if err := m.Find(ctx, o); err != nil {
			if ferr := out.w.Flush(); ferr != nil {
				return ferr
			}
			return findInputError(err, p)
		}
	}
	return out.w.Flush()
}

// findInputError turns the errors that say that something the user
// named does not exist into bad input, naming what.
func findInputError(err error, what string) error {
	switch {
	case errors.Is(err, base.ErrNotFound) && (strings.HasPrefix(what, "-snapshot ") || strings.HasPrefix(what, "-changed-since ")):
		return badInput("find: %s: no such snapshot (cairn snapshot list shows them)", what)
	case errors.Is(err, base.ErrNotFound):
		return badInput("find: %s: no such file or directory in the volume", what)
	case errors.Is(err, base.ErrNotDir):
		return badInput("find: %s: not a directory (%v)", what, err)
	}
	return fmt.Errorf("find: %s: %w", what, err)
}

// FindRequest makes the control-socket request of a cairn find command
// line (the arguments after the META-URL).
func FindRequest(args []string, now time.Time) Request {
	return Request{Verb: "find", Args: args, Flags: map[string]string{"now": strconv.FormatInt(now.UnixNano(), 10)}}
}

// runFindRequest is the "find" admin verb.
func runFindRequest(ctx context.Context, v *Volume, req Request, w io.Writer) error {
	now := time.Now()
	if s := req.Flags["now"]; s != "" {
		ns, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return badInput("find: bad time %q in the request", s)
		}
		now = time.Unix(0, ns)
	}
	spec, err := ParseFind(req.Args, now)
	if err != nil {
		return err
	}
	return RunFind(ctx, v.Meta, spec, w)
}

// FindLocal runs a parsed cairn find on the volume at metaURL from this
// process, opening its metadata engine alone (the data store is not
// needed) and writing nothing to it. An embedded volume that a mount
// process holds fails with an error wrapping kv.ErrLocked: ask that
// process (FindRequest, CallControl).
func FindLocal(ctx context.Context, metaURL string, log *slog.Logger, spec *FindSpec, w io.Writer) error {
	loc, err := ParseMetaURL(metaURL)
	if err != nil {
		return badInput("%v", err)
	}
	store, err := OpenStore(loc, log)
	if errors.Is(err, kv.ErrNotExist) {
		return badInput("no Cairn volume at %s (nothing was created): run 'cairn format %s NAME' first", loc.Display(), loc.Display())
	}
	if err != nil {
		return err
	}
	defer store.Close()
	m, err := meta.Open(ctx, store, meta.Options{Logger: log, ReadOnly: true, LatestCacheEntries: -1, NoGroupCommit: true})
	if errors.Is(err, base.ErrNotFound) {
		return badInput("no Cairn volume at %s: run 'cairn format %s NAME' first", loc.Display(), loc.Display())
	}
	if err != nil {
		return err
	}
	defer m.Close()
	return RunFind(ctx, m, spec, w)
}
