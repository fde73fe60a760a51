package daemon

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/fuse"
	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/meta"
	"github.com/cairnfs/cairn/internal/nfs"
	"github.com/cairnfs/cairn/internal/vfs"
)

// MountOptions configures Mount.
type MountOptions struct {
	Volume     VolumeOptions
	MountPoint string
	Fuse       fuse.Options
	// Version is recorded in the session.
	Version string
	// Ready is called once the file system is mounted and serving, with
	// the volume's notices (Volume.Notices).
	Ready func(notices []string)
	// Stopping is called when the mount starts to shut down (a signal,
	// an unmount from outside, ctx's end), before the final flush.
	Stopping func()
	Logger   *slog.Logger
	// Heartbeat is how often the session proves it is alive and looks for
	// dead sessions of other clients (default 5 s).
	Heartbeat time.Duration
	// SessionTimeout is how long this session may miss heartbeats before
	// another client declares it dead and releases its locks and open
	// files (default 60 s). It is recorded in the session, so clients with
	// different settings judge each other correctly.
	SessionTimeout time.Duration
	// NFSListen, if set, also serves the mounted volume over NFSv3 on
	// this TCP address, through the same vfs (embedded mode).
	NFSListen string
	// NFSPortmapRegister registers that NFS service with the host's
	// portmapper (127.0.0.1:111) if one runs.
	NFSPortmapRegister bool
	// NFS tunes that gateway.
	NFS nfs.Options
	// MetricsAddr, if set, serves the volume's counters on this TCP
	// address: /metrics in the Prometheus text format, /stats as JSON.
	MetricsAddr string
	// Snapshot, if set, mounts that snapshot read-only at the mount point
	// instead of the live volume. An embedded volume cannot be opened by a
	// second process: while it is mounted, its snapshots are under
	// .snapshots of that mount.
	Snapshot string
	// Backup schedules the automatic metadata backups this mount takes
	// (none on a read-only or snapshot mount, which says so in a notice).
	Backup BackupSchedule
	// Replicate, if set, replicates the volume to Replicate.Dest from this
	// process (its Source is ignored): cairn mount --replicate-to.
	Replicate *ReplicateOptions
	// FixedTimeouts keeps Fuse.AttrTimeout and EntryTimeout for every
	// inode. Without it a mount of an embedded volume without NFSListen,
	// where every change goes through its kernel, lets the kernel keep
	// the live volume's attributes and entries for soleKernelTimeout.
	FixedTimeouts bool
}

// soleKernelTimeout is how long the kernel may keep attributes and
// entries where it sees every change (MountOptions.FixedTimeouts).
const soleKernelTimeout = time.Hour

// CheckMountPoint verifies that mp exists, is a directory and is not
// already a mount point.
func CheckMountPoint(mp string) (string, error) {
	abs, err := filepath.Abs(mp)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("mount point %s does not exist: create it with mkdir -p %s", abs, abs)
		}
		return "", fmt.Errorf("mount point %s: %w", abs, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("mount point %s is not a directory", abs)
	}
	if src, ok := MountedAt(abs); ok {
		return "", fmt.Errorf("mount point %s is busy: %s is already mounted there (cairn umount %s first)", abs, src, abs)
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return "", fmt.Errorf("no /dev/fuse on this machine (%v): load the fuse module (modprobe fuse) or give the container the device", err)
	}
	return abs, nil
}

// MountInfo is one line of /proc/self/mountinfo that matters to us.
type MountInfo struct {
	MountPoint string
	FsType     string
	Source     string
}

// Mounts lists the mounts of this mount namespace.
func Mounts() ([]MountInfo, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []MountInfo
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || len(fields) < sep+3 {
			continue
		}
		out = append(out, MountInfo{MountPoint: unescapeMount(fields[4]), FsType: fields[sep+1], Source: unescapeMount(fields[sep+2])})
	}
	return out, sc.Err()
}

func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// MountedAt reports what is mounted at path, if anything.
func MountedAt(path string) (string, bool) {
	ms, err := Mounts()
	if err != nil {
		return "", false
	}
	for _, m := range ms {
		if m.MountPoint == path {
			return m.Source, true
		}
	}
	return "", false
}

// Mount opens the volume, mounts it and serves until SIGINT/SIGTERM or an
// external unmount; then it flushes, unmounts and closes everything.
func Mount(ctx context.Context, o MountOptions) error {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := checkSessionTimes(&o.Heartbeat, &o.SessionTimeout); err != nil {
		return err
	}
	if err := o.Backup.Validate(); err != nil {
		return err
	}
	mp, err := CheckMountPoint(o.MountPoint)
	if err != nil {
		return err
	}
	o.Volume.Logger = log
	vol, err := OpenVolume(ctx, o.Volume)
	if err != nil {
		return snapshotMountHint(o, err)
	}
	defer vol.Close()
	o.Volume.ReadOnly = vol.ReadOnly // also for a replication destination
	// Garbage may use what the block cache may hold but does not (gctune.go).
	defer holdHeapFloor(min(heapFloor, vol.memCache.Max()))()
	stopMetrics, err := serveMetrics(o.MetricsAddr, vol, o.Version, log)
	if err != nil {
		return err
	}
	defer stopMetrics()
	vo := vfs.Options{Logger: log, ReadOnly: o.Volume.ReadOnly, AppendAtEOF: vol.Loc.Shared()}
	fo := o.Fuse
	if o.Snapshot != "" {
		snap, err := vol.Meta.SnapshotByName(ctx, o.Snapshot)
		if errors.Is(err, base.ErrNotFound) {
			return fmt.Errorf("volume %q has no snapshot %q (see cairn snapshot list %s)", vol.Settings.Name, o.Snapshot, vol.Loc.Display())
		}
		if err != nil {
			return err
		}
		vo.Snapshot = &snap
		fo.ReadOnly, fo.WritebackCache = true, false
	}
	host, _ := os.Hostname()
	closeSession, err := openSession(ctx, vol.Meta, meta.SessionInfo{Host: host, MountPoint: mp, Version: o.Version, Timeout: o.SessionTimeout}, log)
	if err != nil {
		return err
	}
	defer closeSession()
	v := vfs.New(vol.Meta, vol.Chunks, vo)
	if !o.Volume.ReadOnly && o.Snapshot == "" {
		// Finish snapshot deletions a crash interrupted, in the
		// background: the versions only they saw still hold blocks.
		go func() {
			if err := vol.Meta.ResumeSnapshotJobs(context.Background(), nil); err != nil {
				log.Warn("finishing interrupted snapshot deletions", "err", err)
			}
		}()
	}
	fo.FsName = vol.Loc.Display()
	fo.Logger = log
	fo.ReadOnly = fo.ReadOnly || o.Volume.ReadOnly
	fo.CloseToOpen = vol.Loc.Shared()
	// The kernel may keep file pages across opens while every change to
	// the files goes through it: not with other clients, nor with NFS
	// clients writing through the gateway of this process.
	fo.KeepCache = !vol.Loc.Shared() && o.NFSListen == ""
	if fo.KeepCache && o.Snapshot == "" && !o.FixedTimeouts {
		// And attributes and entries for long: what changes behind the
		// kernel's back (a restore from a snapshot, setuid dropped by a
		// write) is reported to it (docs/fuse-tuning.md).
		fo.LiveTimeout = soleKernelTimeout
	}
	if o.NFSListen != "" && o.Snapshot != "" {
		_ = v.Close(context.Background())
		return errors.New("--nfs-listen serves the live volume: it cannot be combined with --snapshot")
	}
	vol.fuseStats.on.Store(true)
	fo.OnRequest = vol.fuseStats.observe
	if os.Getenv("GOMAXPROCS") == "" {
		// Two more Ps than cores for the requests go-fuse's blocked
		// readers would keep waiting (fuse.Options.ExtraProcs); a
		// GOMAXPROCS the user set is left alone.
		fo.ExtraProcs = 2
	}
	srv, err := fuse.Mount(v, mp, fo)
	if err != nil {
		_ = v.Close(context.Background())
		return err
	}
	if o.Snapshot == "" {
		vol.kernelChanged = srv.Changed
	}
	// stopNFS stops the NFS gateway (if any) before vfs closes.
	stopNFS := func() {}
	if o.NFSListen != "" {
		g, err := startNFS(v, vol, o.NFSListen, "", o.NFSPortmapRegister, o.NFS, log)
		if err != nil {
			_ = srv.Unmount()
			_ = v.Close(context.Background())
			return err
		}
		stopNFS = func() { g.stop(log); stopNFS = func() {} }
	}
	if !vol.Loc.Shared() {
		// An embedded store is held by this process: admin commands reach
		// it through a socket. Shared engines serve any number of clients.
		ctl, err := ServeControl(vol, Holder{Pid: os.Getpid(), Host: host, MountPoint: mp}, RunAdmin)
		if err != nil {
			stopNFS()
			_ = srv.Unmount()
			_ = v.Close(context.Background())
			return err
		}
		defer ctl.Close()
	}
	// Every mount answers stats and warmup on a socket named after its
	// mount point (cairn stats MOUNTPOINT finds it without the META-URL).
	if mctl, err := ServeControlAt(MountSocketPath(mp), vol, Holder{Pid: os.Getpid(), Host: host, MountPoint: mp}, RunAdmin); err != nil {
		log.Warn("mount socket: cairn stats and warmup cannot reach this mount", "err", err)
	} else {
		defer mctl.Close()
	}
	stopBackups := func() {}
	if o.Backup.Interval > 0 {
		if o.Snapshot != "" || o.Volume.ReadOnly {
			n := "no metadata backups: a read-only or snapshot mount cannot take the snapshot a backup is dumped from (--backup-interval ignored)"
			vol.Notices = append(vol.Notices, n)
			log.Warn(n)
		} else {
			stopBackups = sync.OnceFunc(vol.startBackups(o.Backup, log))
			defer stopBackups()
		}
	}
	if o.Snapshot == "" && !o.Volume.ReadOnly {
		defer vol.startTrashPurge(log)()
	}
	stopReplica := func() {}
	if o.Replicate != nil {
		if o.Snapshot != "" || o.Volume.ReadOnly {
			return fmt.Errorf("--replicate-to: a read-only or snapshot mount cannot take the snapshots of a cycle")
		}
		ro := *o.Replicate
		ro.Source, ro.Logger = o.Volume.MetaURL, log
		stopReplica = sync.OnceFunc(startReplication(ro, vol, log))
		defer stopReplica()
	}
	log.Info("mounted", "volume", vol.Settings.Name, "meta", vol.Loc.Display(), "mountpoint", mp, "snapshot", o.Snapshot)
	if o.Ready != nil {
		o.Ready(vol.Notices)
	}

	stopHB := startHeartbeats(vol.Meta, o.Heartbeat, o.SessionTimeout, log)
	defer stopHB()

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	served := make(chan struct{})
	go func() {
		srv.Wait()
		close(served)
	}()
	stopping := func() {
		// A backup in progress is abandoned (nothing of it is kept):
		// the unmount does not wait for it. So is a replication cycle
		// (applied whole or not at all).
		stopBackups()
		stopReplica()
		if o.Stopping != nil {
			o.Stopping()
		}
	}
	select {
	case <-served:
		stopping()
		log.Info("unmounted externally", "mountpoint", mp)
	case s := <-sigs:
		stopping()
		log.Info("signal: flushing and unmounting", "signal", s.String())
		if err := v.FlushAll(context.Background()); err != nil {
			log.Error("flush before unmount", "err", err)
		}
		if err := srv.Unmount(); err != nil {
			log.Warn("unmount busy; detaching lazily", "err", err)
			_ = syscall.Unmount(mp, syscall.MNT_DETACH)
		}
		<-served
	case <-ctx.Done():
		stopping()
		_ = srv.Unmount()
		<-served
	}
	stopNFS()
	if err := v.Close(context.Background()); err != nil {
		log.Error("final flush", "err", err)
		return fmt.Errorf("final flush: %w", err)
	}
	log.Info("clean shutdown", "mountpoint", mp)
	return nil
}

// snapshotMountHint adds to the refusal of a snapshot mount of an
// embedded volume held by a mount where that snapshot already is.
func snapshotMountHint(o MountOptions, err error) error {
	if o.Snapshot == "" || !errors.Is(err, kv.ErrLocked) {
		return err
	}
	loc, lerr := ParseMetaURL(o.Volume.MetaURL)
	if lerr != nil {
		return err
	}
	where := "MOUNTPOINT"
	if h, herr := QueryHolder(loc); herr == nil && h.MountPoint != "" {
		where = h.MountPoint
	}
	return fmt.Errorf("%w; an embedded volume has one process at a time: while it is mounted, snapshot %q is at %s (bind-mount that directory to see it elsewhere)",
		err, o.Snapshot, filepath.Join(where, vfs.SnapshotsDir, o.Snapshot))
}
