package daemon

// Metadata backups (docs/design/0006-metadata-backup.md): dumps of the
// volume's metadata (meta.Dump) kept as objects of its own data store,
// under BackupPrefix, where gc never looks (it lists chunk.KeyPrefix
// only). A mount takes them on a schedule (BackupSchedule, backupLoop);
// cairn backup now takes one at once; cairn backup restore loads one
// (meta.Load) into an empty metadata store. A backup object is an
// ordinary dump file: cairn load reads a copy of it too.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/meta"
	"github.com/cairnfs/cairn/internal/object"
)

// BackupPrefix is where a volume's metadata backups are kept in its data
// store: one object per backup, named by backupName.
const BackupPrefix = "cairn/backups/"

// Backup kinds, the last part of a backup's name.
const (
	// BackupAuto: taken by a mount on its schedule, and deleted by the
	// schedule when more than its --backup-keep are kept.
	BackupAuto = "auto"
	// BackupManual: taken by cairn backup now; kept until deleted with
	// cairn backup delete.
	BackupManual = "manual"
)

const (
	backupSuffix = ".cdump"
	// backupTimeLayout: UTC to the millisecond, so that names sort in
	// time order.
	backupTimeLayout = "20060102T150405.000Z"
	// backupSnapshotPrefix starts the name of the snapshot that holds a
	// backup's data (--backup-hold): backupSnapshotPrefix + the backup's
	// name without backupSuffix.
	backupSnapshotPrefix = "backup-"
	// scheduledBackupWorkers read a scheduled backup's dump: a background
	// job should take longer rather than take the CPUs the mount's
	// clients use. cairn backup now uses the dump's default.
	scheduledBackupWorkers = 2
	// restoreSkipSlices moves a restored volume's slice counter past the
	// ids the lost volume may have handed out after its backup
	// (meta.LoadOptions.SkipSlices): 2^40, more than three years of
	// 10,000 new slices a second.
	restoreSkipSlices = 1 << 40
)

// BackupInfo describes one backup object.
type BackupInfo struct {
	Name string    `json:"name"` // the object's name below BackupPrefix
	Time time.Time `json:"time"` // when it was taken (to the millisecond)
	Size int64     `json:"size"` // bytes
	Kind string    `json:"kind"` // BackupAuto or BackupManual
	// Volume is the start of the UUID of the volume it is a backup of
	// (its first 8 hex digits).
	Volume string `json:"volume"`
	// Held says a snapshot of the volume (backupSnapshotName) keeps the
	// data the backup references; nil where the metadata was not read
	// (cairn backup list --data).
	Held *bool `json:"held,omitempty"`
}

// backupName is the name of a backup of volume uuid taken at at.
func backupName(at time.Time, uuid, kind string) string {
	return at.UTC().Format(backupTimeLayout) + "-" + uuidPrefix(uuid) + "-" + kind + backupSuffix
}

// uuidPrefix is the first part of a volume's UUID (8 hex digits).
func uuidPrefix(uuid string) string {
	p, _, _ := strings.Cut(uuid, "-")
	return p
}

// parseBackupName is backupName's inverse; ok is false for names it does
// not make.
func parseBackupName(name string) (b BackupInfo, ok bool) {
	rest, ok := strings.CutSuffix(name, backupSuffix)
	parts := strings.Split(rest, "-")
	if !ok || len(parts) != 3 || len(parts[1]) != 8 || strings.Trim(parts[1], "0123456789abcdef") != "" ||
		(parts[2] != BackupAuto && parts[2] != BackupManual) {
		return BackupInfo{}, false
	}
	at, err := time.Parse(backupTimeLayout, parts[0])
	if err != nil || at.Format(backupTimeLayout) != parts[0] {
		return BackupInfo{}, false
	}
	return BackupInfo{Name: name, Time: at, Volume: parts[1], Kind: parts[2]}, true
}

// backupSnapshotName is the name of the snapshot that holds the data of
// backup name (--backup-hold).
func backupSnapshotName(name string) string {
	return backupSnapshotPrefix + strings.TrimSuffix(name, backupSuffix)
}

// backupOfSnapshot is backupSnapshotName's inverse.
func backupOfSnapshot(snap string) (BackupInfo, bool) {
	rest, ok := strings.CutPrefix(snap, backupSnapshotPrefix)
	if !ok {
		return BackupInfo{}, false
	}
	return parseBackupName(rest + backupSuffix)
}

// ListBackups lists the backups in objs, newest first. Objects under
// BackupPrefix that are not named as backups are left out.
func ListBackups(ctx context.Context, objs object.Store) ([]BackupInfo, error) {
	var out []BackupInfo
	err := objs.List(ctx, BackupPrefix, func(info object.Info) bool {
		if b, ok := parseBackupName(strings.TrimPrefix(info.Key, BackupPrefix)); ok {
			b.Size = info.Size
			out = append(out, b)
		}
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("listing the backups in %s: %w", object.RedactURL(objs.String()), err)
	}
	slices.SortFunc(out, func(a, b BackupInfo) int {
		if c := b.Time.Compare(a.Time); c != 0 {
			return c
		}
		return strings.Compare(b.Name, a.Name)
	})
	return out, nil
}

// BackupOptions say how TakeBackup takes a backup.
type BackupOptions struct {
	Kind string // BackupAuto or BackupManual (default)
	// Hold keeps the snapshot the backup is dumped from until the backup
	// is deleted, so that the data it references stays in the data store.
	Hold bool
	// Workers read the dump in parallel (0: the dump's default).
	Workers int
	// At names the backup (default: now); a scheduled backup is named
	// after the time of its claim, so names show one per interval.
	At time.Time
}

// BackupReport is what TakeBackup took.
type BackupReport struct {
	BackupInfo
	Inodes  uint64  `json:"inodes"`
	Seconds float64 `json:"seconds"`
	// Snapshot holds the backup's data (BackupOptions.Hold).
	Snapshot string `json:"snapshot,omitempty"`
	// Store is the data store the backup is in.
	Store string `json:"store"`
}

// data is the volume's data store itself (counted), not joined with the
// metadata engine's blobs: backups are objects of their own.
func (v *Volume) data() object.Store { return v.objStats }

// errDumpStopped ends the stream of a backup whose dump failed: never
// io.EOF or io.ErrUnexpectedEOF, which a store could take for the end.
type errDumpStopped struct{ err error }

func (e *errDumpStopped) Error() string { return "the dump failed: " + e.err.Error() }
func (e *errDumpStopped) Unwrap() error { return e.err }

// TakeBackup dumps the volume's metadata, as of one instant (a snapshot
// taken for the backup), into a new backup object, streamed
// (object.PutStream): no more than a part of it is in memory, and the
// object appears whole or not at all. With Hold the snapshot stays, and
// keeps the data the backup references, until the backup is deleted;
// otherwise it is deleted after the dump.
func TakeBackup(ctx context.Context, v *Volume, o BackupOptions) (BackupReport, error) {
	if o.Kind == "" {
		o.Kind = BackupManual
	}
	start := time.Now()
	if o.At.IsZero() {
		o.At = start
	}
	name := backupName(o.At, v.Settings.UUID, o.Kind)
	key := BackupPrefix + name
	r := BackupReport{BackupInfo: BackupInfo{Name: name, Time: o.At.UTC().Truncate(time.Millisecond), Kind: o.Kind,
		Volume: uuidPrefix(v.Settings.UUID)}, Store: object.RedactURL(v.Settings.DataURL)}
	// The dump reads a snapshot named after the backup (deleted after it
	// unless Hold), so that one a crash leaves behind is known as the
	// backup's and a later rotation deletes it (PruneBackups).
	do := meta.DumpOptions{Workers: o.Workers, Snapshot: backupSnapshotName(name)}
	if _, err := v.Meta.CreateSnapshot(ctx, do.Snapshot); err != nil {
		return BackupReport{}, fmt.Errorf("backup: taking the snapshot it is dumped from: %w", err)
	}
	ok := false
	defer func() {
		if ok && o.Hold {
			return
		}
		if err := v.Meta.DeleteSnapshot(context.WithoutCancel(ctx), do.Snapshot, nil); err != nil {
			v.Log.Warn("backup: deleting the snapshot it was dumped from failed; a later rotation or cairn snapshot delete does it", "snapshot", do.Snapshot, "err", err)
		}
	}()
	pr, pw := io.Pipe()
	type dumped struct {
		st  meta.DumpStats
		err error
	}
	done := make(chan dumped, 1)
	go func() {
		st, err := v.Meta.Dump(ctx, pw, do)
		if err != nil {
			pw.CloseWithError(&errDumpStopped{err})
		} else {
			pw.Close()
		}
		done <- dumped{st, err}
	}()
	perr := object.PutStream(ctx, v.data(), key, pr)
	// A store that stopped reading stops the dump's writes.
	pr.CloseWithError(errors.New("the data store stopped reading the backup"))
	d := <-done
	switch {
	case d.err != nil:
		if perr == nil { // no store completes a failed stream; should one
			_ = v.data().Delete(context.WithoutCancel(ctx), key)
		}
		return BackupReport{}, fmt.Errorf("backup: %w", d.err)
	case perr != nil:
		return BackupReport{}, fmt.Errorf("backup: writing %s to the data store %s: %w", key, r.Store, perr)
	}
	err := syncObjects(ctx, v.data())
	if err == nil {
		var info object.Info
		if info, err = v.data().Head(ctx, key); err == nil && info.Size != d.st.Bytes {
			err = fmt.Errorf("the data store holds %d bytes of it, the dump wrote %d", info.Size, d.st.Bytes)
		}
	}
	if err != nil {
		_ = v.data().Delete(context.WithoutCancel(ctx), key)
		return BackupReport{}, fmt.Errorf("backup: %s in the data store %s: %w", key, r.Store, err)
	}
	ok = true
	r.Size, r.Inodes = d.st.Bytes, d.st.Inodes
	r.Seconds = time.Since(start).Seconds()
	held := o.Hold
	r.Held = &held
	if o.Hold {
		r.Snapshot = do.Snapshot
	}
	return r, nil
}

// syncObjects makes what was put in s durable, if s needs a Sync for it.
func syncObjects(ctx context.Context, s object.Store) error {
	if sy, ok := s.(object.Syncer); ok {
		return sy.Sync(ctx)
	}
	return nil
}

// deleteBackup deletes backup name from objs and, when m is not nil, the
// snapshot that holds its data, if any.
func deleteBackup(ctx context.Context, objs object.Store, m *meta.Meta, name string) error {
	if err := objs.Delete(ctx, BackupPrefix+name); err != nil {
		return fmt.Errorf("deleting backup %s: %w", name, err)
	}
	if m == nil {
		return nil
	}
	err := m.DeleteSnapshot(ctx, backupSnapshotName(name), nil)
	if err != nil && !errors.Is(err, base.ErrNotFound) {
		return fmt.Errorf("deleted backup %s, but not its snapshot %s: %w", name, backupSnapshotName(name), err)
	}
	return nil
}

// PruneBackups deletes the oldest automatic backups of the volume beyond
// the keep newest, with their snapshots (--backup-hold). It also deletes
// the snapshots of automatic backups whose object is gone (a deletion
// that stopped between the two, a mount that died while taking one) once
// they are older than the oldest backup kept and than staleBackupAge(every):
// a younger one may be a backup in progress in another mount, and the
// dump of a snapshot deleted under it would miss what the deletion pruned.
// Manual backups and other volumes' backups are left alone. It returns
// the names of the backups it deleted.
func PruneBackups(ctx context.Context, v *Volume, keep int, every time.Duration) ([]string, error) {
	list, err := ListBackups(ctx, v.data())
	if err != nil {
		return nil, err
	}
	mine := uuidPrefix(v.Settings.UUID)
	var deleted []string
	var errs []error
	n := 0
	var oldestKept time.Time
	have := map[string]bool{}
	for _, b := range list {
		if b.Kind != BackupAuto || b.Volume != mine {
			continue
		}
		if n++; n <= keep {
			oldestKept = b.Time
			have[b.Name] = true
			continue
		}
		if err := deleteBackup(ctx, v.data(), v.Meta, b.Name); err != nil {
			errs = append(errs, err)
			continue
		}
		deleted = append(deleted, b.Name)
	}
	if n > 0 {
		snaps, err := v.Meta.Snapshots(ctx)
		if err != nil {
			return deleted, errors.Join(append(errs, err)...)
		}
		for _, s := range snaps {
			b, ok := backupOfSnapshot(s.Name)
			if !ok || b.Kind != BackupAuto || b.Volume != mine || have[b.Name] || !b.Time.Before(oldestKept) ||
				time.Since(b.Time) < staleBackupAge(every) {
				continue
			}
			if err := v.Meta.DeleteSnapshot(ctx, s.Name, nil); err != nil && !errors.Is(err, base.ErrNotFound) {
				errs = append(errs, fmt.Errorf("deleting snapshot %s of a deleted backup: %w", s.Name, err))
			}
		}
	}
	return deleted, errors.Join(errs...)
}

// staleBackupAge is how old the snapshot of an automatic backup without
// an object must be before PruneBackups deletes it: a day, and ten
// intervals, far longer than any dump takes.
func staleBackupAge(every time.Duration) time.Duration {
	return max(24*time.Hour, 10*every)
}

// BackupSchedule is a mount's automatic backup.
type BackupSchedule struct {
	// Interval between backups; 0: none. The first is taken one interval
	// after the mount.
	Interval time.Duration
	// Keep is how many automatic backups of the volume are kept (at
	// least 1).
	Keep int
	// Hold keeps each backup's snapshot until the backup is deleted.
	Hold bool
}

// Validate checks the schedule.
func (s BackupSchedule) Validate() error {
	switch {
	case s.Interval < 0:
		return fmt.Errorf("--backup-interval %s: want a positive duration, or 0 for no backups", s.Interval)
	case s.Interval > 0 && s.Interval < time.Second:
		return fmt.Errorf("--backup-interval %s: want at least 1s", s.Interval)
	case s.Interval > 0 && s.Keep < 1:
		return fmt.Errorf("--backup-keep %d: want at least 1", s.Keep)
	}
	return nil
}

// BackupAttempt is the last scheduled backup a mount tried.
type BackupAttempt struct {
	Time    time.Time `json:"time"`
	Name    string    `json:"name,omitempty"`
	OK      bool      `json:"ok"`
	Error   string    `json:"error,omitempty"`
	Seconds float64   `json:"seconds"`
	Bytes   int64     `json:"bytes,omitempty"`
	Inodes  uint64    `json:"inodes,omitempty"`
}

// BackupStats are a mount's scheduled backups (Stats.Backup).
type BackupStats struct {
	IntervalSeconds float64 `json:"interval_seconds"`
	Keep            int     `json:"keep"`
	Hold            bool    `json:"hold,omitempty"`
	Taken           int64   `json:"taken"`
	Failed          int64   `json:"failed"`
	// Skipped counts the intervals whose backup another mount of the
	// volume claimed first.
	Skipped     int64          `json:"skipped"`
	LastSuccess *time.Time     `json:"last_success,omitempty"`
	Last        *BackupAttempt `json:"last,omitempty"`
}

// backupLoop runs a mount's scheduled backups.
type backupLoop struct {
	v                      *Volume
	s                      BackupSchedule
	log                    *slog.Logger
	taken, failed, skipped atomic.Int64
	mu                     sync.Mutex
	last                   *BackupAttempt
	lastOK                 time.Time
}

// startBackups takes v's backups on schedule s in the background until
// stop is called, which cancels a backup in progress (its object is then
// not written) and waits for the loop to end.
func (v *Volume) startBackups(s BackupSchedule, log *slog.Logger) (stop func()) {
	l := &backupLoop{v: v, s: s, log: log}
	v.backups.Store(l)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(s.Interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				l.run(ctx)
			}
		}
	}()
	log.Info("metadata backups scheduled", "every", s.Interval, "keep", s.Keep, "hold", s.Hold, "store", object.RedactURL(v.Settings.DataURL)+"/"+BackupPrefix)
	return func() {
		cancel()
		<-done
	}
}

// pruneTimeout bounds a scheduled rotation of backups, which a mount
// that is ending waits for.
const pruneTimeout = time.Minute

// run takes this interval's backup, unless another mount claimed it.
func (l *backupLoop) run(ctx context.Context) {
	claim, ok, err := l.v.Meta.ClaimBackup(ctx, time.Now(), l.s.Interval)
	if err != nil {
		if ctx.Err() == nil {
			l.record(BackupAttempt{Time: time.Now(), Error: "claiming the interval's backup: " + err.Error()})
			l.log.Error("metadata backup: claiming this interval's backup failed", "err", err)
		}
		return
	}
	if !ok {
		l.skipped.Add(1)
		l.log.Debug("metadata backup: another mount took this interval's")
		return
	}
	r, err := TakeBackup(ctx, l.v, BackupOptions{Kind: BackupAuto, Hold: l.s.Hold, Workers: scheduledBackupWorkers, At: claim.At})
	if err != nil {
		if ctx.Err() != nil {
			l.log.Info("metadata backup stopped: the mount is ending")
			return
		}
		l.record(BackupAttempt{Time: time.Now(), Error: err.Error()})
		l.log.Error("metadata backup failed; the next is due in one interval", "err", err, "every", l.s.Interval)
		if rerr := l.v.Meta.ReleaseBackupClaim(context.WithoutCancel(ctx), claim); rerr != nil {
			l.log.Warn("metadata backup: giving back the interval's claim", "err", rerr)
		}
		return
	}
	l.record(BackupAttempt{Time: r.Time, Name: r.Name, OK: true, Seconds: r.Seconds, Bytes: r.Size, Inodes: r.Inodes})
	attrs := []any{"name", r.Name, "inodes", r.Inodes, "bytes", r.Size, "seconds", fmt.Sprintf("%.3f", r.Seconds)}
	if r.Snapshot != "" {
		attrs = append(attrs, "snapshot", r.Snapshot)
	}
	l.log.Info("metadata backup", attrs...)
	// The rotation runs to its end even when the mount is ending: stopped
	// between a backup's object and its snapshot, it would leave the
	// snapshot holding data for a day (staleBackupAge). It is a listing
	// and a few deletions, bounded by pruneTimeout.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pruneTimeout)
	defer cancel()
	deleted, err := PruneBackups(pctx, l.v, l.s.Keep, l.s.Interval)
	for _, name := range deleted {
		l.log.Info("metadata backup deleted (more than --backup-keep)", "name", name, "keep", l.s.Keep)
	}
	if err != nil {
		l.log.Warn("metadata backup: deleting the oldest backups", "err", err)
	}
}

func (l *backupLoop) record(a BackupAttempt) {
	if a.OK {
		l.taken.Add(1)
	} else {
		l.failed.Add(1)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.last = &a
	if a.OK {
		l.lastOK = a.Time
	}
}

func (l *backupLoop) stats() *BackupStats {
	s := &BackupStats{IntervalSeconds: l.s.Interval.Seconds(), Keep: l.s.Keep, Hold: l.s.Hold,
		Taken: l.taken.Load(), Failed: l.failed.Load(), Skipped: l.skipped.Load()}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last != nil {
		a := *l.last
		s.Last = &a
	}
	if !l.lastOK.IsZero() {
		t := l.lastOK
		s.LastSuccess = &t
	}
	return s
}

// emitBackupStats sends the samples of a mount's scheduled backups.
func emitBackupStats(p metricSink, b *BackupStats) {
	if b == nil {
		return
	}
	const help = "Scheduled metadata backups of this mount, by result (skipped: another mount of the volume took the interval's)."
	p.Counter("cairn_backups_total", help, float64(b.Taken), "result", "taken")
	p.Counter("cairn_backups_total", "", float64(b.Failed), "result", "failed")
	p.Counter("cairn_backups_total", "", float64(b.Skipped), "result", "skipped")
	if b.LastSuccess != nil {
		p.Gauge("cairn_backup_last_success_timestamp_seconds", "When this mount's last metadata backup that succeeded was taken (Unix time).", float64(b.LastSuccess.UnixNano())/1e9)
	}
	if b.Last != nil {
		ok := 0.0
		if b.Last.OK {
			ok = 1
		}
		p.Gauge("cairn_backup_last_ok", "Whether this mount's last metadata backup succeeded (1) or failed (0).", ok)
		p.Gauge("cairn_backup_last_seconds", "How long this mount's last metadata backup took.", b.Last.Seconds)
		p.Gauge("cairn_backup_last_bytes", "The size of this mount's last metadata backup.", float64(b.Last.Bytes))
	}
}

// backupNow runs the "backup-now" admin verb.
func backupNow(ctx context.Context, v *Volume, req Request, w io.Writer) error {
	r, err := TakeBackup(ctx, v, BackupOptions{Kind: BackupManual, Hold: req.Flags["hold"] == "true"})
	if err != nil {
		return err
	}
	if req.Flags["json"] == "true" {
		return json.NewEncoder(w).Encode(r)
	}
	held := ""
	if r.Snapshot != "" {
		held = fmt.Sprintf("; snapshot %q holds its data until the backup is deleted", r.Snapshot)
	}
	_, err = fmt.Fprintf(w, "backup %s: %d inodes, %s, in %.2fs, in %s under %s%s\n",
		r.Name, r.Inodes, fmtBytes(r.Size), r.Seconds, r.Store, BackupPrefix, held)
	return err
}

// backupList runs the "backup-list" admin verb: the volume's data store's
// backups, with whether a snapshot holds each one's data.
func backupList(ctx context.Context, v *Volume, req Request, w io.Writer) error {
	list, err := ListBackups(ctx, v.data())
	if err != nil {
		return err
	}
	snaps, err := v.Meta.Snapshots(ctx)
	if err != nil {
		return err
	}
	held := map[string]bool{}
	for _, s := range snaps {
		held[s.Name] = true
	}
	for i := range list {
		h := held[backupSnapshotName(list[i].Name)]
		list[i].Held = &h
	}
	return WriteBackupList(w, list, req.Flags["json"] == "true")
}

// WriteBackupList prints backups as cairn backup list does: a table, or
// a JSON array.
func WriteBackupList(w io.Writer, list []BackupInfo, asJSON bool) error {
	if asJSON {
		if list == nil {
			list = []BackupInfo{}
		}
		return json.NewEncoder(w).Encode(list)
	}
	if len(list) == 0 {
		_, err := fmt.Fprintln(w, "no backups")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tTAKEN\tSIZE\tKIND\tVOLUME\tHELD")
	for _, b := range list {
		held := "-"
		if b.Held != nil {
			held = map[bool]string{true: "yes", false: "no"}[*b.Held]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", b.Name, b.Time.Format("2006-01-02 15:04:05Z"), fmtBytes(b.Size), b.Kind, b.Volume, held)
	}
	return tw.Flush()
}

// backupDelete runs the "backup-delete" admin verb.
func backupDelete(ctx context.Context, v *Volume, req Request, w io.Writer) error {
	return DeleteBackups(ctx, v.data(), v.Meta, req.Args, w)
}

// DeleteBackups deletes the named backups from objs and, when m is not
// nil, the snapshots that hold their data.
func DeleteBackups(ctx context.Context, objs object.Store, m *meta.Meta, names []string, w io.Writer) error {
	list, err := ListBackups(ctx, objs)
	if err != nil {
		return err
	}
	for _, name := range names {
		b, err := findBackup(list, name, "", object.RedactURL(objs.String()))
		if err != nil {
			return err
		}
		if err := deleteBackup(ctx, objs, m, b.Name); err != nil {
			return err
		}
		fmt.Fprintf(w, "deleted backup %s\n", b.Name)
	}
	return nil
}

// findBackup returns the backup name names in list (newest first), the
// backups of data store where: "latest" is the newest one, of the volume
// whose UUID starts with uuid when uuid is set; a name may leave out its
// ".cdump".
func findBackup(list []BackupInfo, name, uuid, where string) (BackupInfo, error) {
	if name == "latest" {
		vols := map[string]bool{}
		for _, b := range list {
			if uuid == "" || b.Volume == uuidPrefix(uuid) {
				vols[b.Volume] = true
			}
		}
		if len(vols) > 1 {
			return BackupInfo{}, badInput("%s holds backups of %d volumes (%s): name the backup to use (cairn backup list --data %s shows them)",
				where, len(vols), strings.Join(slices.Sorted(maps.Keys(vols)), ", "), where)
		}
		for _, b := range list {
			if vols[b.Volume] {
				return b, nil
			}
		}
		return BackupInfo{}, badInput("%s holds no backups", where)
	}
	for _, b := range list {
		if b.Name == name || b.Name == name+backupSuffix {
			return b, nil
		}
	}
	return BackupInfo{}, badInput("no backup %q in %s (cairn backup list --data %s shows the backups there)", name, where, where)
}
