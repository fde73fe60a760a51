package daemon

// The trash's admin verbs (cairn trash list|restore|purge) and the
// background purge one client of a volume runs (meta/trash.go,
// docs/design/0007-trash.md).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/meta"
)

// Bounds of the settings config and format take, for the command line.
const (
	MaxTrashDays = meta.MaxTrashDays
	MaxInlineMax = meta.MaxInlineMax
)

// TrashPurgeInterval is how often a mount or gateway tries to claim the
// purge of the trash (one client of the volume gets each interval).
const TrashPurgeInterval = time.Hour

// TrashList prints the trash's entries, oldest first, with their original
// paths; asJSON prints a JSON array of meta.TrashEntry instead.
func TrashList(ctx context.Context, v *Volume, asJSON bool, w io.Writer) error {
	ents, err := v.Meta.ListTrash(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		if ents == nil {
			ents = []meta.TrashEntry{}
		}
		return writeJSON(w, ents, nil)
	}
	if len(ents) == 0 {
		days := v.Meta.Settings().TrashDays
		if days == 0 {
			_, err := fmt.Fprintln(w, "the trash is empty (and off: cairn config --trash-days N turns it on)")
			return err
		}
		_, err := fmt.Fprintf(w, "the trash is empty (removed files are kept %d days)\n", days)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "REMOVED\tTYPE\tSIZE\tORIGINAL PATH\tENTRY")
	for _, e := range ents {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s/%s\n", e.Removed.Local().Format(time.RFC3339), e.TypeName,
			base.IBytes(e.Length), e.Path, e.Bucket, e.Name)
	}
	return tw.Flush()
}

// TrashRestore puts entries of the trash back where they were removed
// from. Each target is an original path (every entry at that path or
// under it: a removed tree), or an entry as trash list shows it
// (BUCKET/NAME, or /.trash/BUCKET/NAME: that entry and what was under
// it). Directories are restored before what they held; of several
// entries with one original path, the most recently removed is restored.
// Entries that cannot be restored (the name is taken, the directory is
// gone) are reported and the others restored; the error then says how
// many failed.
func TrashRestore(ctx context.Context, v *Volume, targets []string, w io.Writer) error {
	if len(targets) == 0 {
		return fmt.Errorf("trash restore: name a path or an entry: %w", ErrBadInput)
	}
	ents, err := v.Meta.ListTrash(ctx)
	if err != nil {
		return err
	}
	byEntry := map[string]*meta.TrashEntry{}
	for i := range ents {
		byEntry[ents[i].Bucket+"/"+ents[i].Name] = &ents[i]
	}
	var prefixes []string
	for _, t := range targets {
		entry := strings.TrimPrefix(t, "/"+meta.TrashName+"/")
		if e, ok := byEntry[entry]; ok {
			prefixes = append(prefixes, e.Path)
			continue
		}
		if !strings.HasPrefix(t, "/") {
			return fmt.Errorf("trash restore: %q: no such entry (cairn trash list shows them), and not an absolute path: %w", t, ErrBadInput)
		}
		prefixes = append(prefixes, path.Clean(t))
	}
	chosen := map[string]*meta.TrashEntry{} // original path → newest entry
	for i := range ents {
		e := &ents[i]
		for _, p := range prefixes {
			if e.Path == p || p == "/" || strings.HasPrefix(e.Path, p+"/") {
				if old := chosen[e.Path]; old == nil || newer(e, old) {
					chosen[e.Path] = e
				}
				break
			}
		}
	}
	if len(chosen) == 0 {
		return fmt.Errorf("trash restore: nothing in the trash at %s: %w", strings.Join(targets, ", "), base.ErrNotFound)
	}
	order := make([]*meta.TrashEntry, 0, len(chosen))
	for _, e := range chosen {
		order = append(order, e)
	}
	sort.Slice(order, func(i, j int) bool {
		di, dj := strings.Count(order[i].Path, "/"), strings.Count(order[j].Path, "/")
		if di != dj {
			return di < dj
		}
		return order[i].Path < order[j].Path
	})
	restored, failed := 0, 0
	for _, e := range order {
		parent, name, err := v.Meta.RestoreTrash(ctx, e.Bucket, e.Name)
		if err != nil {
			failed++
			fmt.Fprintf(w, "not restored: %s (%s/%s): %v\n", e.Path, e.Bucket, e.Name, err)
			continue
		}
		restored++
		if v.kernelChanged != nil {
			// New to the kernel of this mount, which may keep the
			// directory's attributes and a negative lookup of the name.
			v.kernelChanged(parent, name)
		}
	}
	fmt.Fprintf(w, "restored %d of %d entries\n", restored, len(order))
	if failed > 0 {
		return fmt.Errorf("trash restore: %d entries not restored (listed above)", failed)
	}
	return nil
}

// newer reports whether trash entry a was removed after b.
func newer(a, b *meta.TrashEntry) bool {
	if a.Bucket != b.Bucket {
		return a.Bucket > b.Bucket
	}
	return a.Removed.After(b.Removed)
}

// TrashPurge destroys the trash's entries removed before before (the
// zero time: all of them) and prints what it did.
func TrashPurge(ctx context.Context, v *Volume, before time.Time, w io.Writer) error {
	st, err := v.Meta.PurgeTrash(ctx, before)
	if err != nil {
		return fmt.Errorf("trash purge: %w (what was purged before the error stays purged)", err)
	}
	what := "everything"
	if !before.IsZero() {
		what = "what was removed before " + before.Local().Format(time.RFC3339)
	}
	_, err = fmt.Fprintf(w, "purged %s: %d entries, %d hour buckets; their data is deleted in the background\n", what, st.Entries, st.Buckets)
	return err
}

// trashRequest runs the trash-* admin verbs.
func trashRequest(ctx context.Context, v *Volume, req Request, w io.Writer) error {
	switch req.Verb {
	case "trash-list":
		return TrashList(ctx, v, req.Flags["json"] == "true", w)
	case "trash-restore":
		return TrashRestore(ctx, v, req.Args, w)
	case "trash-purge":
		var before time.Time
		if b := req.Flags["before"]; b != "" {
			var err error
			if before, err = time.Parse(time.RFC3339Nano, b); err != nil {
				return fmt.Errorf("trash purge: before %q: %w", b, ErrBadInput)
			}
		}
		return TrashPurge(ctx, v, before, w)
	}
	return fmt.Errorf("unknown admin verb %q", req.Verb)
}

// purgeTrashDue purges, if this client claims the interval now falls in,
// what the volume's retention lets go: entries removed more than
// Settings.TrashDays before now. claimed is false when the trash is off
// or another client took the interval.
func (v *Volume) purgeTrashDue(ctx context.Context, now time.Time, interval time.Duration) (st meta.PurgeStats, claimed bool, err error) {
	days := v.Meta.Settings().TrashDays
	if days <= 0 {
		return st, false, nil
	}
	ok, err := v.Meta.ClaimTrashPurge(ctx, now, interval)
	if err != nil || !ok {
		return st, false, err
	}
	st, err = v.Meta.PurgeTrash(ctx, now.Add(-time.Duration(days)*24*time.Hour))
	return st, true, err
}

// startTrashPurge runs purgeTrashDue every TrashPurgeInterval (and once a
// minute after the start) until stop is called.
func (v *Volume) startTrashPurge(log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		wait := time.Minute
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			wait = TrashPurgeInterval
			st, claimed, err := v.purgeTrashDue(ctx, time.Now(), TrashPurgeInterval)
			switch {
			case err != nil && ctx.Err() == nil && !errors.Is(err, base.ErrReadOnly):
				log.Error("trash purge failed; the next try is in an interval", "err", err, "every", TrashPurgeInterval)
			case claimed && st.Entries+st.Buckets > 0:
				log.Info("trash purged", "entries", st.Entries, "buckets", st.Buckets, "days", v.Meta.Settings().TrashDays)
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
