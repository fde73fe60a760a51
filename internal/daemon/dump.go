package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/cairnfs/cairn/internal/chunk"
	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/kv/pebble"
	"github.com/cairnfs/cairn/internal/meta"
	"github.com/cairnfs/cairn/internal/object"
)

// The dump's and the load's options and progress, as package meta has
// them (the commands see meta only through the daemon).
type (
	DumpOptions  = meta.DumpOptions
	DumpProgress = meta.DumpProgress
	LoadTuning   = meta.LoadOptions
)

// DumpReport is what `cairn dump --json` prints.
type DumpReport struct {
	meta.DumpStats
	Seconds     float64 `json:"seconds"`
	InodesPerS  float64 `json:"inodes_per_second"`
	Destination string  `json:"destination,omitempty"`
}

// LoadReport is what `cairn load --json` prints.
type LoadReport struct {
	meta.LoadStats
	Seconds    float64 `json:"seconds"`
	InodesPerS float64 `json:"inodes_per_second"`
}

// Dump writes a dump of v to out and its summary (text, or JSON with
// asJSON) to summary.
func Dump(ctx context.Context, v *Volume, o meta.DumpOptions, out, summary io.Writer, asJSON bool) error {
	start := time.Now()
	st, err := v.Meta.Dump(ctx, out, o)
	if err != nil {
		return err
	}
	r := DumpReport{DumpStats: st, Seconds: time.Since(start).Seconds()}
	r.InodesPerS = float64(st.Inodes) / max(r.Seconds, 1e-9)
	if asJSON {
		return json.NewEncoder(summary).Encode(r)
	}
	what := "a snapshot taken for the dump"
	if st.Snapshot != "" {
		what = "snapshot " + strconv.Quote(st.Snapshot)
	}
	n := uint64(0)
	for _, c := range st.Records {
		n += c
	}
	_, err = fmt.Fprintf(summary, "dumped %d inodes (%d records, %s) of volume %q as of %s in %.1fs: %.0f inodes/s\n",
		st.Inodes, n, fmtBytes(st.Bytes), v.Settings.Name, what, r.Seconds, r.InodesPerS)
	return err
}

// dumpRequest runs the "dump" admin verb: the dump goes to w as bytes
// (reply.Data over a control socket), its summary as text.
func dumpRequest(ctx context.Context, v *Volume, req Request, w io.Writer) error {
	o := meta.DumpOptions{Snapshot: req.Flags["snapshot"], Snapshots: req.Flags["snapshots"] == "true"}
	if s := req.Flags["workers"]; s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return fmt.Errorf("dump: workers %q: want a number", s)
		}
		o.Workers = n
	}
	return Dump(ctx, v, o, binaryWriter(w), w, req.Flags["json"] == "true")
}

// LoadOptions are the options of Load.
type LoadOptions struct {
	MetaURL string
	LoadTuning
	Logger *slog.Logger
}

// Load loads a dump from in into the empty metadata store at o.MetaURL
// (created if it is an embedded one that does not exist), after checking
// that the volume's data store answers and belongs to the dumped volume.
func Load(ctx context.Context, in io.Reader, o LoadOptions) (LoadReport, error) {
	loc, err := ParseMetaURL(o.MetaURL)
	if err != nil {
		return LoadReport{}, err
	}
	start := time.Now()
	o.Check = func(s meta.Settings) error { return checkDataStore(ctx, s, o.Force, o.Logger) }
	store, err := openLoadStore(loc, o.Logger)
	if err != nil {
		return LoadReport{}, describeLocked(loc, err)
	}
	defer store.Close()
	st, err := meta.Load(ctx, store, in, o.LoadTuning)
	if err != nil {
		return LoadReport{}, err
	}
	r := LoadReport{LoadStats: st, Seconds: time.Since(start).Seconds()}
	r.InodesPerS = float64(st.Inodes) / max(r.Seconds, 1e-9)
	return r, nil
}

// loadMemTable is the memtable size of an embedded store being loaded:
// four times the default, so that the bulk of records is flushed in
// fewer, larger tables and compacted less (a million files of 1 KiB each:
// 101–117k → 164–178k files/s, bench/metadump.sh). The memtables are
// flushed when the load closes the store, so the first mount does not
// replay them; mounts open it with the default size.
const loadMemTable = 4 * pebble.DefaultMemTableSize

// openLoadStore opens (creating it if need be) the store a load fills.
func openLoadStore(loc MetaLocation, log *slog.Logger) (kv.Store, error) {
	if loc.Scheme == "pebble" {
		return pebble.Open(loc.Path, pebble.Options{Logger: log, MemTableSize: loadMemTable, FlushOnClose: true})
	}
	return openStore(loc, true, StoreWait{}, log)
}

// checkDataStore checks that the data store of s answers and holds the
// marker of the volume s describes (the same volume, moved): a load that
// points at another volume's objects would read and delete them.
func checkDataStore(ctx context.Context, s meta.Settings, force bool, log *slog.Logger) error {
	objs, err := OpenObjects(ctx, s.DataURL, false, StoreWait{}, log)
	if err != nil {
		return fmt.Errorf("the volume's data store %s: %w (give the URL it is reached at now with --data)", object.RedactURL(s.DataURL), err)
	}
	if c, ok := objs.(io.Closer); ok {
		defer c.Close()
	}
	data, err := object.ReadAll(ctx, objs, markerKey)
	switch {
	case errors.Is(err, object.ErrNotFound):
		return fmt.Errorf("data store %s has no volume marker: is it the volume's data store? (give the right one with --data)", object.RedactURL(s.DataURL))
	case err != nil:
		return fmt.Errorf("data store %s does not answer: %w", object.RedactURL(s.DataURL), err)
	}
	var m marker
	if err := json.Unmarshal(data, &m); err != nil || m.UUID != s.UUID {
		if force {
			return nil
		}
		return fmt.Errorf("data store %s belongs to volume %q (uuid %s), not to the dumped volume %q (uuid %s); use --force to load anyway",
			object.RedactURL(s.DataURL), m.Name, m.UUID, s.Name, s.UUID)
	}
	return nil
}

func fmtBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// SyntheticDump writes a synthetic dump (meta.WriteSyntheticDump) of
// files files of size bytes, perDir to a directory, that loads as the
// volume formatted at metaURL (its settings and data store): the
// benchmarks' way to a volume of millions of files.
func SyntheticDump(ctx context.Context, metaURL string, files, perDir, size int, w io.Writer) error {
	loc, err := ParseMetaURL(metaURL)
	if err != nil {
		return err
	}
	store, err := OpenStore(loc, nil)
	if err != nil {
		return describeLocked(loc, err)
	}
	s, err := meta.LoadSettings(ctx, store)
	store.Close()
	if err != nil {
		return err
	}
	format := blockFormat(s)
	block := func(id uint64, data []byte) (string, []byte) {
		bid := chunk.BlockID{Slice: id, Index: 0, Length: len(data)}
		return chunk.BlockKey(id, 0, len(data)), chunk.EncodeBlock(slices.Clone(data), bid, format)
	}
	return meta.WriteSyntheticDump(w, meta.SyntheticVolume{Settings: s, Files: files, PerDir: perDir, Size: size, Block: block})
}
