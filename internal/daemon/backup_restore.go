package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/meta"
	"github.com/cairnfs/cairn/internal/object"
)

// CloseObjects closes a data store OpenObjects opened.
func CloseObjects(objs object.Store) {
	if c, ok := objs.(io.Closer); ok {
		_ = c.Close()
	}
}

// RestoreOptions are the inputs of RestoreBackup.
type RestoreOptions struct {
	// MetaURL is the metadata store to restore into: empty (an embedded
	// one is created), or, with Force, one whose volume is replaced.
	MetaURL string
	// DataURL is the data store the backups are in, which the restored
	// volume uses; default: the data store of the volume at MetaURL.
	DataURL string
	// Name is the backup's name, or "latest".
	Name string
	// Force replaces the volume MetaURL holds; it must not be mounted.
	Force   bool
	Workers int
	// Progress, if set, is updated as the load goes; Total then gets the
	// backup's size in bytes once it is known.
	Progress *meta.DumpProgress
	Total    *int64
	Logger   *slog.Logger
}

// RestoreReport is what cairn backup restore prints.
type RestoreReport struct {
	LoadReport
	Backup  BackupInfo `json:"backup"`
	MetaURL string     `json:"meta_url"`
	DataURL string     `json:"data_url"`
}

// RestoreBackup loads a backup from its data store into the metadata
// store at o.MetaURL (meta.Load, reading the backup as a stream). The
// restored volume uses that data store, which must hold the marker of the
// backup's volume. Its slice counter is moved past the ids the lost
// volume may have used since the backup (restoreSkipSlices). A restore
// that stops half way leaves a store that refuses to mount; the same
// restore run again finishes it.
func RestoreBackup(ctx context.Context, o RestoreOptions) (RestoreReport, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	loc, err := ParseMetaURL(o.MetaURL)
	if err != nil {
		return RestoreReport{}, err
	}
	start := time.Now()
	// The target's volume, if any: where its data store is, and whether
	// it may be replaced. Nothing is created before the backup is found.
	var target *meta.Settings
	if exists, err := StoreExists(loc); err != nil {
		return RestoreReport{}, err
	} else if exists {
		if target, err = restoreTarget(ctx, loc, o.Force, o.Logger); err != nil {
			return RestoreReport{}, err
		}
	}
	dataURL := o.DataURL
	if dataURL == "" {
		if target == nil {
			return RestoreReport{}, badInput("restore: say which data store the backup is in with --data DATA-URL (%s holds no volume to take it from)", loc.Display())
		}
		dataURL = target.DataURL
	}
	objs, err := OpenObjects(ctx, dataURL, false, StoreWait{}, o.Logger)
	if err != nil {
		return RestoreReport{}, fmt.Errorf("restore: %w", err)
	}
	defer CloseObjects(objs)
	list, err := ListBackups(ctx, objs)
	if err != nil {
		return RestoreReport{}, fmt.Errorf("restore: %w", err)
	}
	uuid := ""
	if target != nil {
		uuid = target.UUID
	}
	b, err := findBackup(list, o.Name, uuid, object.RedactURL(dataURL))
	if err != nil {
		return RestoreReport{}, fmt.Errorf("restore: %w", err)
	}
	in, err := object.NewReader(ctx, objs, BackupPrefix+b.Name)
	if err != nil {
		return RestoreReport{}, fmt.Errorf("restore: reading backup %s: %w", b.Name, err)
	}
	if o.Total != nil {
		*o.Total = in.Size()
	}
	store, err := openStore(loc, true, StoreWait{}, o.Logger)
	if err != nil {
		return RestoreReport{}, describeLocked(loc, err)
	}
	defer store.Close()
	lo := meta.LoadOptions{DataURL: dataURL, Force: o.Force, Workers: o.Workers, Progress: o.Progress,
		SkipSlices: restoreSkipSlices,
		// The data store must be the backup's volume's: no --force
		// overrides that here (cairn load --force does).
		Check: func(s meta.Settings) error { return checkDataStore(ctx, s, false, o.Logger) }}
	st, err := meta.Load(ctx, store, in, lo)
	if err != nil {
		return RestoreReport{}, fmt.Errorf("restore of backup %s: %w", b.Name, err)
	}
	r := RestoreReport{LoadReport: LoadReport{LoadStats: st, Seconds: time.Since(start).Seconds()}, Backup: b,
		MetaURL: loc.Display(), DataURL: object.RedactURL(dataURL)}
	r.InodesPerS = float64(st.Inodes) / max(r.Seconds, 1e-9)
	return r, nil
}

// restoreTarget reads the volume the store at loc holds (nil if none)
// and refuses to restore over it unless force is set and it is not
// mounted: an embedded store is locked by its mount process; a shared
// one is mounted while a session of it is live.
func restoreTarget(ctx context.Context, loc MetaLocation, force bool, log *slog.Logger) (*meta.Settings, error) {
	store, err := OpenStore(loc, log)
	if errors.Is(err, kv.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		if errors.Is(err, kv.ErrLocked) {
			return nil, fmt.Errorf("restore: %w; unmount it first (a restore replaces its metadata)", describeLocked(loc, err))
		}
		return nil, err
	}
	defer store.Close()
	s, err := meta.LoadSettings(ctx, store)
	if errors.Is(err, base.ErrNotFound) {
		return nil, nil // empty, or an unfinished load: meta.Load decides
	}
	if err != nil {
		return nil, err
	}
	if !force {
		return nil, badInput("restore: %s already holds volume %q (uuid %s); restore into an empty metadata store, or give --force to replace it (it must not be mounted)",
			loc.Display(), s.Name, s.UUID)
	}
	if loc.Shared() {
		m, err := meta.Open(ctx, store, meta.Options{ReadOnly: true, Logger: log})
		if err != nil {
			return nil, err
		}
		sessions, err := m.ListSessions(ctx)
		m.Close()
		if err != nil {
			return nil, err
		}
		var live []string
		for _, se := range sessions {
			if sessionState(se) == "live" {
				live = append(live, fmt.Sprintf("%s pid %d at %s", se.Host, se.Pid, orDash(se.MountPoint)))
			}
		}
		if len(live) > 0 {
			return nil, fmt.Errorf("restore: volume %q at %s is mounted (%s); unmount it everywhere first (a restore replaces its metadata)",
				s.Name, loc.Display(), strings.Join(live, "; "))
		}
	}
	return &s, nil
}
