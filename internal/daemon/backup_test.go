package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/chunk"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/object/counted"
	"github.com/cairnfs/cairn/internal/object/faulty"
	"github.com/cairnfs/cairn/internal/vfs"
)

func TestBackupNames(t *testing.T) {
	at := time.Date(2031, 2, 3, 4, 5, 6, 789e6, time.FixedZone("x", 3600))
	name := backupName(at, "1a2b3c4d-0000-4000-8000-000000000000", BackupAuto)
	if name != "20310203T030506.789Z-1a2b3c4d-auto.cdump" {
		t.Fatalf("backupName = %s", name)
	}
	b, ok := parseBackupName(name)
	if !ok || !b.Time.Equal(at) || b.Volume != "1a2b3c4d" || b.Kind != BackupAuto {
		t.Fatalf("parseBackupName(%s) = %+v, %v", name, b, ok)
	}
	snap := backupSnapshotName(name)
	if snap != "backup-20310203T030506.789Z-1a2b3c4d-auto" {
		t.Fatalf("backupSnapshotName = %s", snap)
	}
	if b2, ok := backupOfSnapshot(snap); !ok || b2.Name != name {
		t.Fatalf("backupOfSnapshot(%s) = %+v, %v", snap, b2, ok)
	}
	for _, bad := range []string{"", "x.cdump", "20310203T030506.789Z-1a2b3c4d-auto", "20310203T030506.789Z-1a2b3c4d-other.cdump",
		"20310203T030506.789Z-1A2B3C4D-auto.cdump", "20310203T030506Z-1a2b3c4d-auto.cdump", "20311303T030506.789Z-1a2b3c4d-auto.cdump",
		"20310203T030506.789Z-1a2b3c4-manual.cdump", "20310203T030506.789Z-1a2b3c4d-auto.cdump/x"} {
		if b, ok := parseBackupName(bad); ok {
			t.Errorf("parseBackupName(%q) = %+v, want no backup", bad, b)
		}
	}
	if strings.HasPrefix(BackupPrefix, chunk.KeyPrefix) || strings.HasPrefix(chunk.KeyPrefix, BackupPrefix) {
		t.Fatalf("the backups' prefix %q and the blocks' %q overlap: gc would see backups", BackupPrefix, chunk.KeyPrefix)
	}
}

// writeFiles writes files through vfs: small ones (inline) and one of
// several blocks (in the data store).
func writeFiles(t *testing.T, vol *Volume, names ...string) map[string][]byte {
	t.Helper()
	ctx := context.Background()
	v := vfs.New(vol.Meta, vol.Chunks, vfs.Options{})
	defer v.Close(ctx)
	want := map[string][]byte{}
	for i, name := range names {
		data := bytes.Repeat([]byte(fmt.Sprintf("%s %d ", name, i)), 10+i*300000)
		_, _, fh, errno := v.Create(ctx, &base.Caller{}, base.RootIno, name, 0o644, 0, syscall.O_RDWR)
		if errno != 0 {
			t.Fatal(errno)
		}
		if _, errno := v.Write(ctx, fh, 0, data); errno != 0 {
			t.Fatal(errno)
		}
		if errno := v.Release(ctx, fh); errno != 0 {
			t.Fatal(errno)
		}
		want[name] = data
	}
	return want
}

// readFiles reads the named files of the root directory through vfs.
func readFiles(t *testing.T, vol *Volume, names []string) map[string][]byte {
	t.Helper()
	ctx := context.Background()
	v := vfs.New(vol.Meta, vol.Chunks, vfs.Options{})
	defer v.Close(ctx)
	got := map[string][]byte{}
	for _, name := range names {
		ino, attr, errno := v.Lookup(ctx, &base.Caller{}, base.RootIno, name)
		if errno != 0 {
			t.Fatalf("lookup %s: %v", name, errno)
		}
		fh, errno := v.Open(ctx, &base.Caller{}, ino, syscall.O_RDONLY)
		if errno != 0 {
			t.Fatalf("open %s: %v", name, errno)
		}
		buf := make([]byte, attr.Length+1)
		n, errno := v.Read(ctx, fh, 0, buf)
		if errno != 0 {
			t.Fatalf("read %s: %v", name, errno)
		}
		got[name] = buf[:n]
		v.Release(ctx, fh)
	}
	return got
}

func backupNames(t *testing.T, objs object.Store) []string {
	t.Helper()
	list, err := ListBackups(context.Background(), objs)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, b := range list {
		out = append(out, b.Name)
	}
	return out
}

// TestBackupTakePruneRestore: backups go to the data store under their
// prefix, newest listed first; gc leaves them alone; pruning deletes the
// oldest automatic ones (and the snapshots holding them) and keeps manual
// ones; the latest restores into a new store with the same files and a
// slice counter moved past the old one.
func TestBackupTakePruneRestore(t *testing.T) {
	ctx := context.Background()
	vol, dir := newVolume(t, "bk")
	want := writeFiles(t, vol, "a", "b", "c")
	take := func(kind string, hold bool) BackupReport {
		t.Helper()
		time.Sleep(2 * time.Millisecond) // names are to the millisecond
		r, err := TakeBackup(ctx, vol, BackupOptions{Kind: kind, Hold: hold})
		if err != nil {
			t.Fatal(err)
		}
		if r.Inodes != 4 || r.Size <= 0 {
			t.Fatalf("backup report %+v", r)
		}
		return r
	}
	manual := take(BackupManual, false)
	held := take(BackupAuto, true)
	mid := take(BackupAuto, false)
	last := take(BackupAuto, true)
	if got, want := backupNames(t, vol.data()), []string{last.Name, mid.Name, held.Name, manual.Name}; !slices.Equal(got, want) {
		t.Fatalf("listed %v, want %v", got, want)
	}
	if _, err := vol.Meta.SnapshotByName(ctx, held.Snapshot); err != nil {
		t.Fatalf("the held backup's snapshot: %v", err)
	}
	if snaps, err := vol.Meta.Snapshots(ctx); err != nil || len(snaps) != 2 {
		t.Fatalf("snapshots after 2 held and 2 unheld backups: %v, %v", snaps, err)
	}
	// gc, told to delete, neither lists nor deletes the backups.
	var out bytes.Buffer
	if err := RunAdmin(ctx, vol, Request{Verb: "gc", Flags: map[string]string{"delete": "true", "json": "true"}}, &out); err != nil {
		t.Fatalf("gc: %v\n%s", err, out.String())
	}
	if strings.Contains(out.String(), BackupPrefix) {
		t.Fatalf("gc reported the backups:\n%s", out.String())
	}
	if got := backupNames(t, vol.data()); len(got) != 4 {
		t.Fatalf("after gc --delete: %v", got)
	}
	// Snapshots of automatic backups that have no object: one two days
	// old (left by a mount that died), one a minute old (maybe a backup
	// in progress in another mount).
	stale := backupSnapshotName(backupName(time.Now().Add(-48*time.Hour), vol.Settings.UUID, BackupAuto))
	young := backupSnapshotName(backupName(time.Now().Add(-time.Minute), vol.Settings.UUID, BackupAuto))
	for _, name := range []string{stale, young} {
		if _, err := vol.Meta.CreateSnapshot(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	deleted, err := PruneBackups(ctx, vol, 1, time.Hour)
	if err != nil || !slices.Equal(deleted, []string{mid.Name, held.Name}) {
		t.Fatalf("PruneBackups(1) = %v, %v", deleted, err)
	}
	if _, err := vol.Meta.SnapshotByName(ctx, stale); !errors.Is(err, base.ErrNotFound) {
		t.Fatalf("a stale backup snapshot was kept: %v", err)
	}
	if _, err := vol.Meta.SnapshotByName(ctx, young); err != nil {
		t.Fatalf("a young backup snapshot was deleted: %v", err)
	}
	if err := vol.Meta.DeleteSnapshot(ctx, young, nil); err != nil {
		t.Fatal(err)
	}
	if got, want := backupNames(t, vol.data()), []string{last.Name, manual.Name}; !slices.Equal(got, want) {
		t.Fatalf("after pruning: %v, want %v", got, want)
	}
	if _, err := vol.Meta.SnapshotByName(ctx, held.Snapshot); !errors.Is(err, base.ErrNotFound) {
		t.Fatalf("the pruned backup's snapshot: %v", err)
	}
	out.Reset()
	if err := RunAdmin(ctx, vol, Request{Verb: "backup-list"}, &out); err != nil ||
		!strings.Contains(out.String(), last.Name) || !strings.Contains(out.String(), "yes") {
		t.Fatalf("backup-list: %v\n%s", err, out.String())
	}
	g0, err := vol.Meta.SliceGuard(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// Restore the latest into a new store.
	target := "pebble://" + dir + "/restored"
	_, err = RestoreBackup(ctx, RestoreOptions{MetaURL: target, Name: "latest"})
	if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "--data") {
		t.Fatalf("restore without --data into an empty store: %v", err)
	}
	_, err = RestoreBackup(ctx, RestoreOptions{MetaURL: target, DataURL: vol.Settings.DataURL, Name: "nope"})
	if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), `no backup "nope"`) {
		t.Fatalf("restore of a missing backup: %v", err)
	}
	if ok, _ := StoreExists(MetaLocation{Scheme: "pebble", Path: dir + "/restored"}); ok {
		t.Fatal("a failed restore created the target store")
	}
	r, err := RestoreBackup(ctx, RestoreOptions{MetaURL: target, DataURL: vol.Settings.DataURL, Name: "latest"})
	if err != nil || r.Backup.Name != last.Name || r.Inodes != 4 {
		t.Fatalf("restore: %+v, %v", r, err)
	}
	_, err = RestoreBackup(ctx, RestoreOptions{MetaURL: target, DataURL: vol.Settings.DataURL, Name: manual.Name})
	if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "already holds volume") {
		t.Fatalf("restore over a volume without --force: %v", err)
	}
	rv, err := OpenVolume(ctx, VolumeOptions{MetaURL: target})
	if err != nil {
		t.Fatal(err)
	}
	got := readFiles(t, rv, slices.Sorted(maps.Keys(want)))
	for name, data := range want {
		if !bytes.Equal(got[name], data) {
			t.Fatalf("restored %s: %d bytes, want %d", name, len(got[name]), len(data))
		}
	}
	if u, err := rv.Meta.Usage(ctx); err != nil || u.Inodes != 4 {
		t.Fatalf("restored volume's usage: %+v, %v", u, err)
	}
	g, err := rv.Meta.SliceGuard(ctx)
	if err != nil || g.Next < g0.Next+restoreSkipSlices {
		t.Fatalf("restored slice counter %d, want at least %d + 2^40 (%v)", g.Next, g0.Next, err)
	}
	// Restoring over an open (embedded: locked) volume is refused, even
	// with --force.
	_, err = RestoreBackup(ctx, RestoreOptions{MetaURL: target, DataURL: vol.Settings.DataURL, Name: manual.Name, Force: true})
	if err == nil || !strings.Contains(err.Error(), "unmount it first") {
		t.Fatalf("restore over an open volume: %v", err)
	}
	rv.Close()
	r, err = RestoreBackup(ctx, RestoreOptions{MetaURL: target, Name: manual.Name, Force: true})
	if err != nil || r.Backup.Name != manual.Name {
		t.Fatalf("restore --force (data store from the target's volume): %+v, %v", r, err)
	}
}

// TestBackupFailures: a backup whose object cannot be written leaves no
// object and no snapshot, and the error says where it failed.
func TestBackupFailures(t *testing.T) {
	ctx := context.Background()
	vol, f := faultyVolume(t, "bkfail")
	f.Inject(faulty.Rule{Ops: faulty.OpPut, Prefix: BackupPrefix, Err: errors.New("disk on fire")})
	_, err := TakeBackup(ctx, vol, BackupOptions{Hold: true})
	if err == nil || !strings.Contains(err.Error(), "disk on fire") || !strings.Contains(err.Error(), "data store") {
		t.Fatalf("backup into a failing store: %v", err)
	}
	if got := backupNames(t, vol.data()); len(got) != 0 {
		t.Fatalf("a failed backup left %v", got)
	}
	if snaps, err := vol.Meta.Snapshots(ctx); err != nil || len(snaps) != 0 {
		t.Fatalf("a failed backup left snapshots %v (%v)", snaps, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := TakeBackup(cctx, vol, BackupOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("backup with a cancelled context: %v", err)
	}
}

// TestBackupLoop: a schedule takes a backup every interval (the first one
// interval after it starts), keeps the newest Keep, and reports them in
// the volume's stats and metrics.
func TestBackupLoop(t *testing.T) {
	vol, _ := newVolume(t, "bkloop")
	writeFiles(t, vol, "a")
	stop := vol.startBackups(BackupSchedule{Interval: 150 * time.Millisecond, Keep: 2, Hold: true}, vol.Log)
	time.Sleep(100 * time.Millisecond)
	if got := backupNames(t, vol.data()); len(got) != 0 {
		t.Fatalf("a backup before the first interval: %v", got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for vol.Stats().Backup.Taken < 4 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	st := vol.Stats().Backup
	if st.Taken < 4 || st.Failed != 0 || st.Last == nil || !st.Last.OK || st.LastSuccess == nil {
		t.Fatalf("backup stats %+v", st)
	}
	got := backupNames(t, vol.data())
	if len(got) != 2 || got[0] != st.Last.Name {
		t.Fatalf("kept %v, want the 2 newest (the last %s)", got, st.Last.Name)
	}
	snaps, err := vol.Meta.Snapshots(context.Background())
	if err != nil || len(snaps) != 2 {
		t.Fatalf("snapshots holding backups: %v (%v), want 2", snaps, err)
	}
	var prom bytes.Buffer
	if err := WritePrometheus(&prom, vol.Stats()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`cairn_backups_total{result="taken"}`, "cairn_backup_last_success_timestamp_seconds", "cairn_backup_last_ok 1"} {
		if !strings.Contains(prom.String(), want) {
			t.Errorf("metrics lack %s:\n%s", want, prom.String())
		}
	}
}

// TestBackupLoopStopFinishesRotation: a mount that ends while a scheduled
// rotation deletes an old backup waits for the rotation, so no snapshot
// is left holding a backup whose object is gone (a CI failure: the stop
// fell between the object's deletion and its snapshot's).
func TestBackupLoopStopFinishesRotation(t *testing.T) {
	ctx := context.Background()
	vol, f := faultyVolume(t, "bkstop")
	f.Inject(faulty.Rule{Ops: faulty.OpDelete, Prefix: BackupPrefix, Latency: 300 * time.Millisecond})
	stop := vol.startBackups(BackupSchedule{Interval: 100 * time.Millisecond, Keep: 1, Hold: true}, vol.Log)
	deadline := time.Now().Add(10 * time.Second)
	for vol.Stats().Backup.Taken < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	stop() // the second backup's rotation is deleting the first
	got := backupNames(t, vol.data())
	snaps, err := vol.Meta.Snapshots(ctx)
	if err != nil || len(got) != 1 || len(snaps) != 1 || snaps[0].Name != backupSnapshotName(got[0]) {
		t.Fatalf("after the stop: backups %v, snapshots %v (%v); want one of each, matching", got, snaps, err)
	}
}

// faultyVolume is a volume holding a file, whose data store takes
// injected faults.
func faultyVolume(t *testing.T, name string) (*Volume, *faulty.Store) {
	t.Helper()
	vol, _ := newVolume(t, name)
	writeFiles(t, vol, "a")
	f := faulty.New(vol.objStats.Unwrap(), 1)
	vol.objStats = counted.New(f)
	return vol, f
}
