// Package daemon is Cairn's composition root: it turns URLs and options
// into concrete backends (kv engine, object store), opens the metadata and
// data layers, serves the front ends, and answers admin requests. Only
// cmd/cairn imports it; nothing here is imported by the layers below.
package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/cache"
	"github.com/cairnfs/cairn/internal/chunk"
	"github.com/cairnfs/cairn/internal/kv"
	kvcounted "github.com/cairnfs/cairn/internal/kv/counted"
	"github.com/cairnfs/cairn/internal/kv/pebble"
	"github.com/cairnfs/cairn/internal/kv/postgres"
	"github.com/cairnfs/cairn/internal/meta"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/object/counted"
	"github.com/cairnfs/cairn/internal/object/faulty"
	"github.com/cairnfs/cairn/internal/object/local"
	"github.com/cairnfs/cairn/internal/object/s3"
)

// markerKey is the object every data store of a Cairn volume holds: it
// names the volume, so a data store is never shared by two volumes by
// mistake and an unreachable store is found at mount time.
const markerKey = "cairn/volume.json"

type marker struct {
	Name string `json:"name"`
	UUID string `json:"uuid"`
}

// MetaLocation is a parsed metadata URL.
type MetaLocation struct {
	URL    string
	Scheme string
	Path   string // pebble: the directory
}

// ParseMetaURL checks a metadata URL. Supported: pebble:///absolute/path
// (embedded) and postgres://[user[:password]@][host][:port]/database[?…]
// (shared; also postgresql://, and host=/socket/dir for a unix socket).
func ParseMetaURL(s string) (MetaLocation, error) {
	u, err := url.Parse(s)
	if err != nil {
		if len(object.URLSecrets(s)) > 0 {
			// net/url's reason quotes a part of the URL, maybe of
			// its password.
			return MetaLocation{}, fmt.Errorf("metadata URL %q is malformed: in a password, write / ? # @ : %% as %%2F %%3F %%23 %%40 %%3A %%25", object.RedactURL(s))
		}
		return MetaLocation{}, fmt.Errorf("metadata URL %q: %w", object.RedactURL(s), object.URLParseReason(err))
	}
	switch u.Scheme {
	case "pebble":
		if u.Host != "" || !filepath.IsAbs(u.Path) {
			return MetaLocation{}, fmt.Errorf("metadata URL %q: want pebble:///absolute/path (three slashes)", object.RedactURL(s))
		}
		return MetaLocation{URL: s, Scheme: "pebble", Path: filepath.Clean(u.Path)}, nil
	case "postgres", "postgresql":
		if strings.Trim(u.Path, "/") == "" {
			return MetaLocation{}, fmt.Errorf("metadata URL %q names no database: want postgres://user@host/database", object.RedactURL(s))
		}
		return MetaLocation{URL: s, Scheme: "postgres"}, nil
	case "":
		return MetaLocation{}, fmt.Errorf("metadata URL %q has no scheme: want pebble:///absolute/path or postgres://user@host/database", object.RedactURL(s))
	default:
		return MetaLocation{}, fmt.Errorf("metadata URL %q: unknown scheme %q (supported: pebble, postgres)", object.RedactURL(s), u.Scheme)
	}
}

// Display is the URL with its secrets hidden (object.RedactURL: the
// password of user:password@ and of ?password=), for every message, log
// line, status and mount source that shows it.
func (l MetaLocation) Display() string { return object.RedactURL(l.URL) }

// Shared reports whether the engine serves many clients at once (shared
// mode) rather than being held by one process (embedded).
func (l MetaLocation) Shared() bool { return l.Scheme == "postgres" }

// DefaultDataURL is the data store used when format gets no --data: a
// directory named "data" beside the metadata directory. Shared volumes
// have none: their data must be reachable by every client.
func (l MetaLocation) DefaultDataURL() string {
	if l.Shared() {
		return ""
	}
	return "file://" + filepath.Join(filepath.Dir(l.Path), "data")
}

// SocketPath is where the process that holds an embedded store listens
// for admin requests.
func (l MetaLocation) SocketPath() string {
	return filepath.Join(l.Path, "cairn.sock")
}

// OpenStore opens the metadata engine of an existing volume. An embedded
// store held by another process fails with an error wrapping kv.ErrLocked;
// where there is none, OpenStore fails with an error wrapping
// kv.ErrNotExist and creates nothing (only Format creates one; a
// PostgreSQL database without the table counts as none).
func OpenStore(loc MetaLocation, log *slog.Logger) (kv.Store, error) {
	return openStore(loc, false, StoreWait{}, log)
}

// StoreWait is how long an operation waits for a metadata engine or data
// store on a server (PostgreSQL, S3) that cannot be reached, counted from
// the start of the outage: Timeout (0: DefaultStoreTimeout), after which
// it fails (EIO); or, with Forever, for as long as the outage lasts (as
// an NFS hard mount does), until the caller gives up (a signal). Embedded
// engines and local directories have no outages.
type StoreWait struct {
	Timeout time.Duration
	Forever bool
}

// DefaultStoreTimeout is StoreWait's default timeout.
const DefaultStoreTimeout = 30 * time.Second

func (w StoreWait) timeout() time.Duration {
	if w.Timeout <= 0 {
		return DefaultStoreTimeout
	}
	return w.Timeout
}

// openStore is OpenStore, which with create makes an embedded store where
// there is none.
func openStore(loc MetaLocation, create bool, w StoreWait, log *slog.Logger) (kv.Store, error) {
	switch loc.Scheme {
	case "pebble":
		return pebble.Open(loc.Path, pebble.Options{Logger: log, MustExist: !create})
	case "postgres":
		return postgres.Open(context.Background(), loc.URL,
			postgres.Options{Logger: log, OutageTimeout: w.timeout(), WaitForever: w.Forever, MustExist: !create})
	}
	return nil, fmt.Errorf("unknown metadata scheme %q", loc.Scheme)
}

// StoreExists reports whether the metadata store of loc exists. It
// creates nothing: an embedded store exists if its directory holds a
// database; a shared engine is a server, whose store is taken to exist.
func StoreExists(loc MetaLocation) (bool, error) {
	if loc.Scheme != "pebble" {
		return true, nil
	}
	return pebble.Exists(loc.Path)
}

// OpenObjects opens a data store by URL: file:///absolute/path, or
// s3://bucket[/prefix]?endpoint=… with credentials from the environment
// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY). Only format creates a
// missing store (create); opening a volume whose store is missing must fail
// rather than start an empty one.
func OpenObjects(ctx context.Context, s string, create bool, w StoreWait, log *slog.Logger) (object.Store, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("data URL %q: %w", s, err)
	}
	switch u.Scheme {
	case "s3":
		st, err := s3.Open(ctx, s, s3.Options{Create: create, Logger: log, OutageTimeout: w.timeout(), WaitForever: w.Forever})
		if err != nil {
			return nil, fmt.Errorf("data store: %w", err)
		}
		return st, nil
	case "file":
		if u.Host != "" || !filepath.IsAbs(u.Path) {
			return nil, fmt.Errorf("data URL %q: want file:///absolute/path (three slashes)", s)
		}
		dir := filepath.Clean(u.Path)
		if !create {
			fi, err := os.Stat(dir)
			if err != nil {
				return nil, fmt.Errorf("data store %s does not answer: %w", s, err)
			}
			if !fi.IsDir() {
				return nil, fmt.Errorf("data store %s: %s is not a directory", s, dir)
			}
		}
		st, err := local.Open(dir)
		if err != nil {
			return nil, fmt.Errorf("data store %s: %w", s, err)
		}
		return st, nil
	case "":
		return nil, fmt.Errorf("data URL %q has no scheme: want file:///absolute/path or s3://bucket?endpoint=…", s)
	default:
		return nil, fmt.Errorf("data URL %q: unknown scheme %q (supported: file, s3)", s, u.Scheme)
	}
}

// FormatOptions are the inputs of Format.
type FormatOptions struct {
	MetaURL   string
	DataURL   string // default: MetaLocation.DefaultDataURL
	Name      string
	BlockSize int // default 4 MiB
	// InlineMax: slices of at most this many bytes keep their block in
	// the metadata engine, not the data store (meta.Settings.InlineMax).
	// 0: DefaultInlineMax; negative: none.
	InlineMax int
	Capacity  uint64
	Inodes    uint64
	// TrashDays: removed files wait this many days in /.trash
	// (meta.Settings.TrashDays); 0: no trash.
	TrashDays int
	Force     bool
	Logger    *slog.Logger
}

// Format creates a volume. It checks everything before writing anything:
// the metadata URL, the data store (reachable, writable, not another
// volume's), and whether a volume exists already. When it fails, it
// removes the directories and files it created for an embedded store and a
// local data store (formatUndo), and only those.
func Format(ctx context.Context, o FormatOptions) (meta.Settings, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	loc, err := ParseMetaURL(o.MetaURL)
	if err != nil {
		return meta.Settings{}, err
	}
	if o.DataURL == "" {
		o.DataURL = loc.DefaultDataURL()
	}
	if o.DataURL == "" {
		return meta.Settings{}, fmt.Errorf("a shared volume needs a data store every client can reach: give --data s3://bucket?endpoint=…")
	}
	if loc.Shared() && strings.HasPrefix(o.DataURL, "file:") {
		o.Logger.Warn("a shared volume with a file:// data store works only if every client mounts that directory at the same path", "data", o.DataURL)
	}
	if o.BlockSize == 0 {
		o.BlockSize = 4 << 20
	}
	switch {
	case o.InlineMax == 0:
		o.InlineMax = DefaultInlineMax
	case o.InlineMax < 0:
		o.InlineMax = 0
	}
	if err := validateFormat(o); err != nil {
		return meta.Settings{}, err
	}
	var undo formatUndo
	if err := undo.noteData(o.DataURL); err != nil {
		return meta.Settings{}, err
	}
	if err := undo.noteMeta(loc); err != nil {
		return meta.Settings{}, err
	}
	s, err := format(ctx, loc, o)
	if err != nil {
		if uerr := undo.run(); uerr != nil {
			return meta.Settings{}, fmt.Errorf("%w (removing what the format created: %v)", err, uerr)
		}
		return meta.Settings{}, err
	}
	return s, nil
}

// format is Format once its options are checked.
func format(ctx context.Context, loc MetaLocation, o FormatOptions) (meta.Settings, error) {
	objs, err := OpenObjects(ctx, o.DataURL, true, StoreWait{}, o.Logger)
	if err != nil {
		return meta.Settings{}, err
	}
	if c, ok := objs.(io.Closer); ok {
		defer c.Close()
	}
	store, err := openStore(loc, true, StoreWait{}, o.Logger)
	if err != nil {
		return meta.Settings{}, describeLocked(loc, err)
	}
	defer store.Close()
	s := meta.Settings{
		Name:          o.Name,
		UUID:          newUUID(),
		FormatVersion: meta.CurrentFormatVersion,
		BlockSize:     o.BlockSize,
		ChunkSize:     base.ChunkSize,
		DataURL:       o.DataURL,
		Capacity:      o.Capacity,
		Inodes:        o.Inodes,
		InlineMax:     o.InlineMax,
		TrashDays:     o.TrashDays,
	}
	if old, err := meta.LoadSettings(ctx, store); err == nil && !o.Force {
		return meta.Settings{}, fmt.Errorf("%s already holds volume %q (uuid %s); nothing was changed. Use --force to format over it (its files become unreachable)", object.RedactURL(o.MetaURL), old.Name, old.UUID)
	}
	if data, err := object.ReadAll(ctx, objs, markerKey); err == nil {
		var m marker
		_ = json.Unmarshal(data, &m)
		if !o.Force {
			return meta.Settings{}, fmt.Errorf("data store %s already belongs to volume %q (uuid %s); nothing was changed. Use another --data or --force", o.DataURL, m.Name, m.UUID)
		}
	} else if !errors.Is(err, object.ErrNotFound) {
		return meta.Settings{}, fmt.Errorf("data store %s does not answer: %w", o.DataURL, err)
	}
	if err := meta.Format(ctx, store, s, o.Force); err != nil {
		return meta.Settings{}, err
	}
	s, err = meta.LoadSettings(ctx, store)
	if err != nil {
		return s, err
	}
	mk, _ := json.Marshal(marker{Name: s.Name, UUID: s.UUID})
	if err := objs.Put(ctx, markerKey, mk); err != nil {
		return s, fmt.Errorf("writing volume marker to %s: %w", o.DataURL, err)
	}
	if sy, ok := objs.(object.Syncer); ok {
		if err := sy.Sync(ctx); err != nil {
			return s, err
		}
	}
	return s, store.Sync(ctx)
}

// RemoteReadAhead is the default read-ahead, in blocks, on a data store
// reached over the network (or slowed by ObjectLatency): a GET of a whole
// block takes tens of milliseconds there, and 8 blocks in flight kept a
// sequential reader waiting for them (docs/design/0005-caches.md,
// "Read-ahead across chunks, and its depth").
const RemoteReadAhead = 16

// VolumeOptions configures OpenVolume.
type VolumeOptions struct {
	MetaURL  string
	ReadOnly bool
	Logger   *slog.Logger
	// CacheMem bounds the memory block cache (bytes; default 256 MiB).
	CacheMem int64
	// BufferLimit bounds buffered writes (bytes; default 256 MiB).
	BufferLimit int64
	// CacheDirs, if any, enable the disk cache tier in these directories.
	CacheDirs []string
	// CacheSize bounds the disk cache (bytes; default
	// cache.DefaultDiskSize).
	CacheSize int64
	// CacheFreeRatio is the free-space floor of the disk cache's file
	// systems (default cache.DefaultFreeRatio; negative: no floor).
	CacheFreeRatio float64
	// CacheWrites also puts uploaded blocks into the disk cache.
	CacheWrites bool
	// NoCacheSmallWrites keeps the blocks shorter than a full block that
	// this client writes out of the disk cache (by default they go in:
	// chunk.Options.CacheSmallWrites).
	NoCacheSmallWrites bool
	// ReadAhead is the number of blocks fetched ahead of a sequential
	// reader: 0 for the data store's default (RemoteReadAhead, or
	// chunk.DefaultReadAhead on a local directory), negative for none.
	ReadAhead int
	// CacheOnStoreFS keeps the cache directories that are on the file
	// system of a local (file://) data store. By default they are not
	// used: such a cache holds a second copy of blocks on the same device
	// and serves them no faster than the store itself (see
	// docs/design/0005-caches.md, "A disk cache beside a local store").
	CacheOnStoreFS bool
	// ListingTTL turns on meta's listing cache on shared volumes: lookups
	// walking a directory are answered from a listing at most this old.
	// Mount sets it to the shorter of the kernel's attribute and entry
	// timeouts. 0: off.
	ListingTTL time.Duration
	// NoDirLeases: this client takes no directory leases on shared
	// volumes (meta.Options.NoLeases); it still respects other clients'.
	NoDirLeases bool
	// WriteBack: creates and unlinks in directories this client leases
	// are acknowledged before they commit and committed in batches
	// (meta.Options.WriteBack).
	WriteBack bool
	// ObjectLatency, when positive, delays every request to the data
	// store (get, range get, put, head, delete, list; not sync) by this
	// much before it is sent, so that a local store answers like a remote
	// one. For benchmarks and fault tests only (cairn mount
	// --object-latency); the delay is counted in the object request
	// latency of Stats. Default 0: none.
	ObjectLatency time.Duration
	// StoreWait bounds the wait for a shared volume's PostgreSQL and S3
	// endpoint when they cannot be reached (default: 30 s, then EIO).
	StoreWait StoreWait
	// Replicator opens a replication destination for writing (its
	// clients get it read-only) and before its first copy is finished.
	Replicator bool
}

// Volume is an open volume: metadata client, data store and chunk layer.
type Volume struct {
	Loc   MetaLocation
	Store kv.Store // counted: transactions by kind, see Stats
	Meta  *meta.Meta
	// Objects is the data store, counted (requests by kind, see Stats),
	// joined with the metadata engine's blobs on a volume with an inline
	// limit (withInlineBlocks).
	Objects  object.Store
	Chunks   *chunk.Store
	Settings meta.Settings
	Log      *slog.Logger
	// ReadOnly: opened read-only, as asked or because the volume is a
	// replication destination.
	ReadOnly bool

	kvStats  *kvcounted.Store
	occ      occStatter // nil unless the engine runs optimistic transactions
	objStats *counted.Store
	// inlineStats counts the requests for blocks kept in the metadata
	// engine; nil without an inline limit.
	inlineStats *counted.Store
	nfsStats    nfsCounters  // the NFS gateway's calls, if it serves one
	fuseStats   fuseCounters // the FUSE requests served, if mounted
	memCache    *cache.Memory
	disk        *cache.Disk // nil without CacheDirs
	// diskSkipped says why the disk cache of CacheDirs is not used, or "".
	diskSkipped string
	// Notices are what the operator should hear at mount time, not only
	// in the log: options that were given but are not applied, and why.
	Notices []string
	started time.Time
	// backups runs a mount's scheduled metadata backups (nil: none).
	backups atomic.Pointer[backupLoop]
	// kernelChanged, set by a FUSE mount of the live volume before admin
	// commands can arrive, tells its kernel that an admin command changed
	// entry name of directory parent behind its back (fuse.Server.Changed).
	kernelChanged func(parent base.Ino, name string)
}

// OpenVolume opens a formatted volume and checks that its data store
// answers and belongs to it.
func OpenVolume(ctx context.Context, o VolumeOptions) (*Volume, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.ObjectLatency < 0 {
		return nil, fmt.Errorf("object latency %s: want zero or more", o.ObjectLatency)
	}
	loc, err := ParseMetaURL(o.MetaURL)
	if err != nil {
		return nil, err
	}
	store, err := openStore(loc, false, o.StoreWait, o.Logger)
	if errors.Is(err, kv.ErrNotExist) {
		where := loc.Path + " holds no metadata database"
		if loc.Shared() {
			where = "the database has no Cairn table"
		}
		return nil, fmt.Errorf("no Cairn volume at %s (%s; nothing was created): run 'cairn format %s NAME' first", loc.Display(), where, loc.Display())
	}
	if err != nil {
		return nil, describeLocked(loc, err)
	}
	occ, _ := store.(occStatter)
	kvStats := kvcounted.New(store)
	store = kvStats // every transaction of this process is counted
	v := &Volume{Loc: loc, Store: store, Log: o.Logger, kvStats: kvStats, occ: occ}
	ok := false
	defer func() {
		if !ok {
			v.Close()
		}
	}()
	v.Settings, err = meta.LoadSettings(ctx, store)
	if errors.Is(err, base.ErrNotFound) {
		return nil, fmt.Errorf("no Cairn volume at %s: run 'cairn format %s NAME' first", loc.Display(), loc.Display())
	}
	if err != nil {
		return nil, err
	}
	objs, err := OpenObjects(ctx, v.Settings.DataURL, false, o.StoreWait, o.Logger)
	if err != nil {
		return nil, err
	}
	cacheDirs := o.CacheDirs
	ls, isLocal := objs.(*local.Store)
	isLocal = isLocal && o.ObjectLatency == 0
	if !isLocal && o.ReadAhead == 0 {
		o.ReadAhead = RemoteReadAhead
	}
	if isLocal && !o.CacheOnStoreFS && len(cacheDirs) > 0 {
		cacheDirs = v.dropStoreFSDirs(cacheDirs, ls.Dir())
	}
	if o.ObjectLatency > 0 {
		f := faulty.New(objs, 1)
		f.Inject(faulty.Rule{Ops: faulty.OpAll &^ faulty.OpSync, Latency: o.ObjectLatency})
		objs = f
		o.Logger.Warn("every data store request is delayed (--object-latency: benchmarks and fault tests only)", "latency", o.ObjectLatency)
	}
	v.objStats = counted.New(objs)
	v.Objects = v.objStats
	v.started = time.Now()
	data, err := object.ReadAll(ctx, v.Objects, markerKey)
	switch {
	case errors.Is(err, object.ErrNotFound):
		return nil, fmt.Errorf("data store %s has no marker of volume %q: is it the right store (was it moved or wiped)?", v.Settings.DataURL, v.Settings.Name)
	case err != nil:
		return nil, fmt.Errorf("data store %s of volume %q does not answer: %w", v.Settings.DataURL, v.Settings.Name, err)
	}
	var mk marker
	if err := json.Unmarshal(data, &mk); err != nil || mk.UUID != v.Settings.UUID {
		return nil, fmt.Errorf("data store %s belongs to volume %q (uuid %s), not to %q (uuid %s)", v.Settings.DataURL, mk.Name, mk.UUID, v.Settings.Name, v.Settings.UUID)
	}
	// On a shared volume the last close of a file drops its hold (and
	// destroys it if it was unlinked meanwhile) in a transaction of its
	// own; delayed by 20 ms, the closes of that moment share one, and a
	// file opened again within it keeps its hold without writing it
	// again (a PostgreSQL commit costs a WAL flush). An unlinked file
	// that was open is destroyed up to 20 ms after its last close.
	// An embedded volume has no other client to keep a hold from: its
	// holds stay in memory (meta.Options.MemoryHolds), and opens and
	// closes write nothing; creating files through FUSE took two updates
	// per file before, one of them the release.
	rs, isReplica, err := meta.LoadReplicaState(ctx, store)
	if err != nil {
		return nil, err
	}
	if isReplica && !rs.Promoted && !o.Replicator {
		if rs.Snapshot == "" {
			return nil, fmt.Errorf("volume %q is the destination of replication pair %s and still receives its first copy: it can be mounted once that finishes (cairn replicate status)", v.Settings.Name, rs.Pair)
		}
		if !o.ReadOnly {
			o.ReadOnly = true
			v.Notices = append(v.Notices, fmt.Sprintf("read-only: the destination of replication pair %s, at source snapshot %s (cairn replicate failover makes it writable)", rs.Pair, rs.Snapshot))
		}
	}
	v.ReadOnly = o.ReadOnly
	mo := meta.Options{Logger: o.Logger, ReadOnly: o.ReadOnly, HoldReleaseDelay: 20 * time.Millisecond, ListingTTL: o.ListingTTL,
		NoLeases: o.NoDirLeases, WriteBack: o.WriteBack, MemoryHolds: !loc.Shared()}
	v.Meta, err = meta.Open(ctx, store, mo)
	if err != nil {
		return nil, err
	}
	v.Objects, v.inlineStats = withInlineBlocks(v.Objects, v.Meta, v.Settings)
	if !loc.Shared() && !o.ReadOnly {
		// This process holds the embedded store alone: every session
		// recorded in it belongs to a client that died without closing it.
		if _, err := v.Meta.ExpireAllSessions(ctx); err != nil {
			return nil, err
		}
	}
	if o.CacheMem == 0 {
		o.CacheMem = 256 << 20
	}
	v.memCache = cache.NewMemory(o.CacheMem)
	co := chunk.Options{
		BlockSize:        v.Settings.BlockSize,
		BufferLimit:      o.BufferLimit,
		Logger:           o.Logger,
		CacheWrites:      o.CacheWrites,
		CacheSmallWrites: !o.NoCacheSmallWrites,
		InlineMax:        v.Settings.InlineMax,
		// The limit as this client last read it (at each heartbeat):
		// config may change it on a live volume.
		InlineLimit: func() int { return v.Meta.Settings().InlineMax },
		ReadAhead:   o.ReadAhead,
		// On a local store the disk tier only copies blocks (and is
		// dropped when it shares the store's file system).
		CacheRandomWrites: !isLocal,
		LocalStore:        isLocal,
	}
	co.BlockFormat = blockFormat(v.Settings)
	if len(cacheDirs) > 0 {
		v.disk, err = cache.OpenDisk(cache.DiskOptions{
			Dirs:      cacheDirs,
			MaxBytes:  o.CacheSize,
			FreeRatio: o.CacheFreeRatio,
			Logger:    o.Logger,
		})
		if err != nil {
			return nil, err
		}
		co.DiskCache = v.disk
	}
	v.Chunks, err = chunk.New(v.Objects, v.memCache, co)
	if err != nil {
		return nil, err
	}
	ok = true
	return v, nil
}

// blockFormat is the format of a volume's blocks: bound to their identity
// (chunk.BlockFormat2) from format version 3, checksummed alone before.
func blockFormat(s meta.Settings) chunk.BlockFormat {
	if s.BoundBlocks() {
		return chunk.BlockFormat2
	}
	return chunk.BlockFormat1
}

// dropStoreFSDirs returns the cache directories that are not on the file
// system of the local data store in storeDir, and logs the others: a disk
// cache there would write a second copy of every block it fills to the
// device the store reads from, and read it back no faster. It notes in
// v.diskSkipped why no disk cache is left, if none is.
func (v *Volume) dropStoreFSDirs(dirs []string, storeDir string) []string {
	var kept, dropped []string
	for _, d := range dirs {
		if sameFS(d, storeDir) {
			dropped = append(dropped, d)
		} else {
			kept = append(kept, d)
		}
	}
	if len(dropped) == 0 {
		return dirs
	}
	v.Log.Warn("disk cache directories on the data store's file system are not used: they would copy blocks to the device they are read from (--cache-on-store-fs keeps them)",
		"dirs", strings.Join(dropped, ","), "store", storeDir)
	v.Notices = append(v.Notices, fmt.Sprintf("--cache-dir %s not used: it is on the file system of the data store %s, where a disk cache only copies blocks (--cache-on-store-fs keeps it)",
		strings.Join(dropped, ","), storeDir))
	if len(kept) == 0 {
		v.diskSkipped = fmt.Sprintf("its --cache-dir %s is on the file system of its data store %s, where a disk cache only copies blocks (mount with --cache-on-store-fs to keep it)",
			strings.Join(dropped, ","), storeDir)
	}
	return kept
}

// Close releases the volume's backends.
func (v *Volume) Close() error {
	var first error
	if v.Meta != nil {
		if err := v.Meta.Close(); err != nil {
			first = err
		}
	}
	if v.disk != nil {
		_ = v.disk.Close()
	}
	if c, ok := v.Objects.(io.Closer); ok && v.Objects != nil {
		if err := c.Close(); err != nil && first == nil {
			first = err
		}
	}
	if v.Store != nil {
		if err := v.Store.Sync(context.Background()); err != nil && first == nil && !errors.Is(err, kv.ErrClosed) {
			first = err
		}
		if err := v.Store.Close(); err != nil && first == nil && !errors.Is(err, kv.ErrClosed) {
			first = err
		}
	}
	return first
}

// describeLocked turns a locked embedded store into a message that says
// who holds it.
func describeLocked(loc MetaLocation, err error) error {
	if !errors.Is(err, kv.ErrLocked) {
		return err
	}
	if h, herr := QueryHolder(loc); herr == nil {
		return fmt.Errorf("%s is in use by cairn pid %d on %s (mounted at %s): %w", loc.Display(), h.Pid, h.Host, h.MountPoint, err)
	}
	return fmt.Errorf("%s is in use by another process: %w", loc.Display(), err)
}

func validateFormat(o FormatOptions) error {
	if strings.TrimSpace(o.Name) == "" || len(o.Name) > 255 || strings.ContainsAny(o.Name, "/\x00") {
		return fmt.Errorf("volume name %q: want 1-255 characters without '/'", o.Name)
	}
	bs := o.BlockSize
	if bs < 64<<10 || bs > 16<<20 || bs&(bs-1) != 0 {
		return fmt.Errorf("block size %d: want a power of two from 64K to 16M", bs)
	}
	if o.InlineMax > meta.MaxInlineMax || o.InlineMax >= bs {
		return fmt.Errorf("inline limit %d: want at most %d bytes (64K), and less than the block size", o.InlineMax, meta.MaxInlineMax)
	}
	return nil
}
