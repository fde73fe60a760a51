package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/meta"
	"github.com/cairnfs/cairn/internal/object"
)

// DestroyPlan is what a destroy would remove, for the operator to confirm.
type DestroyPlan struct {
	Volume  string     `json:"volume"`
	UUID    string     `json:"uuid"`
	Meta    string     `json:"meta"`
	DataURL string     `json:"data_url,omitempty"` // "": the data store is left alone (an unfinished load's)
	Usage   meta.Usage `json:"usage"`
	Resumed bool       `json:"resumed"`
}

// DestroyReport is what a destroy removed.
type DestroyReport struct {
	DestroyPlan
	Objects int64 `json:"objects_deleted"`
}

// Destroy removes the volume at metaURL: its data store's objects and its
// metadata. confirm sees the plan first and stops the destroy by
// returning an error. It refuses while any client is mounted; one that
// stops half way is finished by running it again.
func Destroy(ctx context.Context, metaURL string, confirm func(DestroyPlan) error, log *slog.Logger) (DestroyReport, error) {
	loc, err := ParseMetaURL(metaURL)
	if err != nil {
		return DestroyReport{}, err
	}
	store, err := OpenStore(loc, log)
	if err != nil {
		return DestroyReport{}, describeLocked(loc, err)
	}
	defer store.Close()
	plan := DestroyPlan{Meta: loc.Display()}
	s, err := meta.LoadSettings(ctx, store)
	switch {
	case err == nil:
		// Checked before anyone is asked: a mounted volume is refused
		// at once. BeginDestroy checks again, in its transaction.
		if _, err := meta.CheckNoClients(ctx, store, DefaultSessionTimeout); err != nil {
			return DestroyReport{}, fmt.Errorf("destroy: %w", err)
		}
		plan.Volume, plan.UUID, plan.DataURL = s.Name, s.UUID, s.DataURL
		if m, err := meta.Open(ctx, store, meta.Options{ReadOnly: true}); err == nil {
			plan.Usage, _ = m.Usage(ctx)
			_ = m.Close()
		}
		if err := confirm(plan); err != nil {
			return DestroyReport{}, err
		}
	case errors.Is(err, base.ErrNotFound):
		return DestroyReport{}, fmt.Errorf("destroy: %w", err)
	}
	// Else a destroy or a load did not finish: BeginDestroy says which.
	tgt, err := meta.BeginDestroy(ctx, store, DefaultSessionTimeout)
	if err != nil {
		return DestroyReport{}, fmt.Errorf("destroy: %w", err)
	}
	plan.Volume, plan.UUID, plan.Resumed = tgt.Settings.Name, tgt.Settings.UUID, tgt.Resumed
	plan.DataURL = ""
	if tgt.Data {
		plan.DataURL = tgt.Settings.DataURL
	}
	if tgt.Resumed || !tgt.Data {
		// Nothing was asked yet: the volume is half gone already.
		if err := confirm(plan); err != nil {
			return DestroyReport{}, err
		}
	}
	for _, s := range tgt.Stale {
		log.Warn("destroy: a client stopped without unmounting", "host", s.Host, "pid", s.Pid, "mount_point", s.MountPoint)
	}
	r := DestroyReport{DestroyPlan: plan}
	if plan.DataURL != "" {
		if r.Objects, err = emptyDataStore(ctx, plan.DataURL, log); err != nil {
			return r, fmt.Errorf("destroy: emptying the data store %s (run cairn destroy again to finish): %w", object.RedactURL(plan.DataURL), err)
		}
	}
	if err := meta.FinishDestroy(ctx, store); err != nil {
		return r, fmt.Errorf("destroy: removing the metadata (run cairn destroy again to finish): %w", err)
	}
	if loc.Scheme == "pebble" {
		_ = store.Close()
		if err := os.RemoveAll(loc.Path); err != nil {
			return r, fmt.Errorf("destroy: the metadata is gone but its directory stays: %w", err)
		}
	}
	return r, nil
}

// emptyDataStore deletes every object of the data store at url, the
// volume marker last (a destroy that stops half way finds the store still
// marked as the volume's), and for a file:// store its directory once no
// file is left in it.
func emptyDataStore(ctx context.Context, url string, log *slog.Logger) (int64, error) {
	objs, err := OpenObjects(ctx, url, false, StoreWait{}, log)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if c, ok := objs.(io.Closer); ok {
		defer c.Close()
	}
	var n atomic.Int64
	for {
		var keys []string
		err := objs.List(ctx, "", func(i object.Info) bool {
			if i.Key != markerKey {
				keys = append(keys, i.Key)
			}
			return len(keys) < 10000
		})
		if err != nil {
			return n.Load(), err
		}
		if len(keys) == 0 {
			break
		}
		if err := deleteObjects(ctx, objs, keys, &n); err != nil {
			return n.Load(), err
		}
	}
	if err := objs.Delete(ctx, markerKey); err != nil {
		return n.Load(), err
	}
	if dir, ok := strings.CutPrefix(url, "file://"); ok && onlyDirs(dir) {
		_ = os.RemoveAll(dir)
	}
	return n.Load(), nil
}

// deleteObjects deletes keys with 16 requests in flight.
func deleteObjects(ctx context.Context, objs object.Store, keys []string, n *atomic.Int64) error {
	ch := make(chan string)
	var wg sync.WaitGroup
	var first error
	var mu sync.Mutex
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range ch {
				if err := objs.Delete(ctx, k); err != nil {
					mu.Lock()
					first = cmpOr(first, err)
					mu.Unlock()
					continue
				}
				n.Add(1)
			}
		}()
	}
	for _, k := range keys {
		ch <- k
	}
	close(ch)
	wg.Wait()
	return first
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// onlyDirs reports whether dir holds directories only (what a local data
// store leaves once its objects are deleted).
func onlyDirs(dir string) bool {
	only := true
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			only = false
			return filepath.SkipAll
		}
		return nil
	})
	return only
}
