package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairnfs/cairn/internal/daemon"
	"github.com/cairnfs/cairn/internal/object"
)

// readyFDEnv names the environment variable that tells a daemonized mount
// process which file descriptor to report readiness on.
const readyFDEnv = "CAIRN_READY_FD"

// metaURLFDEnv names the environment variable that tells a daemonized
// mount process which file descriptor to read its metadata URL from, when
// the URL holds a password: its command line, which ps shows to every
// user, holds the URL redacted (object.RedactURL).
const metaURLFDEnv = "CAIRN_META_URL_FD"

func newMountCommand() *cobra.Command {
	var (
		background                             bool
		logs                                   logFlags
		opts                                   []string
		allowOther                             bool
		readOnly                               bool
		mem                                    memFlags
		storeTimeout                           storeTimeoutFlag
		attrTimeout, entryTimeout, negTimeout  time.Duration
		pprofAddr                              string
		writeback                              bool
		heartbeat, sessionTimeout              time.Duration
		snapshot                               string
		nfsListen                              string
		cacheDirs                              []string
		cacheSize                              string
		cacheFreeRatio                         float64
		cacheWrites, cacheOnStoreFS            bool
		cacheSmallWrites, dirLeases, writeBack bool
		metricsAddr                            string
		objectLatency                          time.Duration
		maxReadAhead                           string
		nfsExport                              nfsExportFlags
		backups                                backupFlags
		replicateTo, replicateBW               string
		replicateBound                         time.Duration
	)
	cmd := &cobra.Command{
		Use:   "mount [-d] [--log FILE] [options] META-URL MOUNTPOINT",
		Short: "Mount a volume with FUSE",
		Long: `Mount the volume at META-URL on MOUNTPOINT. Runs in the foreground until
unmounted or interrupted (SIGINT/SIGTERM flush buffered writes, then unmount).
With -d it starts in the background and returns once the mount is ready.

On an embedded volume (pebble://) admin commands (status, info, fsck, gc)
reach the volume through the mount process while it is mounted. A shared
volume (postgres://) can be mounted by many hosts at once; locks are
shared, and what one client closes another sees at its next open.

Every mount shows the volume's snapshots, read-only, under MOUNTPOINT/.snapshots
(hidden from listings). With --snapshot NAME, the snapshot itself is mounted,
read-only. An embedded volume is held by one process: while it is mounted,
use its .snapshots directory instead (or bind-mount a snapshot from there).

Metadata backups: every --backup-interval (default 1h on an embedded
volume, none on a shared one) the mount dumps the volume's metadata into
its data store under cairn/backups/, keeping the newest --backup-keep (24);
on a shared volume one mount takes each interval's. See cairn backup.

With --replicate-to DST-META-URL the mount also replicates the volume to that
destination, as cairn replicate start does (the only way for an embedded
volume, whose store the mount holds): every cycle snapshots what was
committed (closed or fsynced), within --replicate-max-out-of-sync.

With --nfs-listen ADDR the process also serves the volume over NFSv3, as
cairn gateway nfs does (see its help for the --nfs-* export options and
NFS clients' locks, which are the same locks this mount's processes take).

A --cache-dir on the file system of a file:// data store is not used (the
log says so): the cache would copy every block it fills to the device the
store reads from, and serve it no faster. --cache-on-store-fs keeps it.

--object-latency DURATION is for benchmarks and fault tests only: every
request to the data store waits that long first, so that a local directory
answers like a remote object store (bench/cache-study.sh uses it).

Memory: the block cache (--cache-mem) and the write buffer (--buffer-size)
bound what the mount keeps; Go's garbage collector runs when the heap has
doubled since the last collection, but not before it reaches 64 MiB (or
--cache-mem if smaller). GOGC set in the environment replaces that rule.`,
		Example: `  cairn mount -d pebble:///var/lib/cairn/meta /mnt/cairn
  cairn mount -o allow_other --cache-mem 1G pebble:///var/lib/cairn/meta /mnt/cairn
  AWS_ACCESS_KEY_ID=… AWS_SECRET_ACCESS_KEY=… cairn mount -d 'postgres://cairn@db1/vol1' /mnt/vol1
  cairn mount -d --snapshot nightly 'postgres://cairn@db1/vol1' /mnt/vol1-nightly
  cairn mount -d --nfs-listen 0.0.0.0:2049 --nfs-allow 10.0.0.0/8 --nfs-squash root pebble:///var/lib/cairn/meta /mnt/cairn`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			// A mount process started by -d tells its parent why it
			// stopped, whatever stopped it (nothing if not started so).
			ready := readyReporter()
			defer func() {
				if err != nil {
					ready(nil, err)
				}
			}()
			metaURL, err := parentMetaURL(args[0])
			if err != nil {
				return err
			}
			mp := args[1]
			loc, err := daemon.ParseMetaURL(metaURL)
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("writeback") && loc.Shared() {
				// With the writeback cache the kernel keeps its own file
				// sizes and ignores other clients' (see docs/design).
				writeback = false
			}
			abs, err := daemon.CheckMountPoint(mp)
			if err != nil {
				return err
			}
			ex, err := nfsExport.export()
			if err != nil {
				return err
			}
			if nfsListen == "" {
				for _, name := range nfsExportFlagNames {
					if cmd.Flags().Changed(name) {
						return fmt.Errorf("--%s applies to the NFS gateway: give --nfs-listen too", name)
					}
				}
			}
			if objectLatency < 0 {
				return fmt.Errorf("--object-latency %s: want zero or more", objectLatency)
			}
			var extra []string
			for _, o := range opts {
				for _, p := range strings.Split(o, ",") {
					switch p {
					case "":
					case "allow_other":
						allowOther = true
					case "ro":
						readOnly = true
					default:
						keep, err := mountOption(p)
						if err != nil {
							return err
						}
						if keep {
							extra = append(extra, p)
						}
					}
				}
			}
			vo := daemon.VolumeOptions{MetaURL: metaURL, ReadOnly: readOnly, ObjectLatency: objectLatency}
			if err := mem.apply(&vo); err != nil {
				return err
			}
			if err := storeTimeout.apply(&vo); err != nil {
				return err
			}
			ra, err := parseSize(maxReadAhead)
			if err != nil || ra < 4096 || ra > 1<<30 {
				return fmt.Errorf("--max-readahead %q: want a size from 4K to 1G", maxReadAhead)
			}
			cs, err := parseSize(cacheSize)
			if err != nil {
				return fmt.Errorf("--cache-size: %w", err)
			}
			if cacheFreeRatio >= 1 {
				return fmt.Errorf("--cache-free-ratio %g: want a fraction below 1 (0 disables the floor)", cacheFreeRatio)
			}
			if cacheFreeRatio <= 0 {
				cacheFreeRatio = -1 // no floor
			}
			for i, d := range cacheDirs {
				if cacheDirs[i], err = filepath.Abs(d); err != nil {
					return fmt.Errorf("--cache-dir: %w", err)
				}
			}
			if _, err := logs.check(); err != nil {
				return err
			}
			if err := backups.schedule(cmd.Flags(), loc.Shared(), readOnly || snapshot != "").Validate(); err != nil {
				return err
			}
			var replicate *daemon.ReplicateOptions
			if replicateTo != "" {
				if readOnly || snapshot != "" {
					return fmt.Errorf("--replicate-to: a read-only or snapshot mount cannot take the snapshots of a cycle")
				}
				var limit uint64
				if replicateBW != "" {
					if limit, err = parseSize(replicateBW); err != nil || limit == 0 {
						return fmt.Errorf("--replicate-bwlimit %q: want a positive size per second (e.g. 50M)", replicateBW)
					}
				}
				replicate = &daemon.ReplicateOptions{Dest: replicateTo, MaxOutOfSync: replicateBound, BWLimit: int64(limit)}
			}
			if background {
				// The options are valid (checked above): start the mount
				// process, which checks them again.
				return daemonize(cmd, loc, logs.file, abs)
			}
			// A mount process started by -d: the parent sent our stderr
			// to the log file as well.
			logs.stderrToo = os.Getenv(readyFDEnv) != ""
			log, closeLog, err := logs.open()
			if err != nil {
				return err
			}
			defer closeLog()
			servePprof(pprofAddr, log)
			mo := daemon.MountOptions{
				Volume:      vo,
				MetricsAddr: metricsAddr,
				MountPoint:  abs,
				Version:     version,
				Logger:      log,
				Ready: func(notices []string) {
					ready(notices, nil)
					// A service manager (systemd Type=notify) learns it
					// is up, and below that it is stopping.
					if err := daemon.SdNotify("READY=1\nSTATUS=mounted at " + abs); err != nil {
						log.Warn("telling the service manager the mount is ready", "err", err)
					}
				},
				Stopping:  func() { _ = daemon.SdNotify("STOPPING=1") },
				Snapshot:  snapshot,
				NFSListen: nfsListen,
				// The NFS service registers with the host's portmapper
				// if one runs.
				NFSPortmapRegister: true,
			}
			mo.Volume.CacheDirs, mo.Volume.CacheSize = cacheDirs, int64(cs)
			mo.Volume.CacheFreeRatio, mo.Volume.CacheWrites = cacheFreeRatio, cacheWrites
			mo.Volume.NoCacheSmallWrites = !cacheSmallWrites
			mo.Volume.NoDirLeases = !dirLeases
			// NFS clients take a reply to a CREATE or REMOVE as stable
			// (RFC 1813): a mount that also serves NFS commits each change.
			mo.Volume.WriteBack = writeBack && nfsListen == ""
			mo.Volume.CacheOnStoreFS = cacheOnStoreFS
			if !cmd.Flags().Changed("attr-timeout") {
				attrTimeout = time.Second
			}
			if !cmd.Flags().Changed("entry-timeout") {
				entryTimeout = time.Second
			}
			// Lookups answered from a directory listing are no older than
			// the kernel could have kept them itself.
			mo.Volume.ListingTTL = min(attrTimeout, entryTimeout)
			mo.NFS.Export = ex
			if loc.Shared() {
				// The gateway's READ and WRITE use a file's attributes as
				// long as the kernel does this mount's; its clients'
				// GETATTRs revalidate what it caches of a file.
				mo.NFS.AttrCache = attrTimeout
				mo.NFS.CloseToOpen = true
			}
			mo.Fuse.AllowOther = allowOther
			mo.Fuse.AttrTimeout = attrTimeout
			mo.Fuse.EntryTimeout = entryTimeout
			mo.Fuse.NegativeTimeout = negTimeout
			// Unless set, both are 1 s, and the daemon may lengthen them.
			mo.FixedTimeouts = cmd.Flags().Changed("attr-timeout") || cmd.Flags().Changed("entry-timeout")
			mo.Fuse.Debug = logs.debug
			mo.Fuse.WritebackCache = writeback
			mo.Fuse.MaxReadAhead = int(ra)
			mo.Heartbeat, mo.SessionTimeout = heartbeat, sessionTimeout
			mo.Backup = backups.schedule(cmd.Flags(), loc.Shared(), readOnly || snapshot != "")
			mo.Fuse.ExtraOptions = extra
			mo.Replicate = replicate
			err = daemon.Mount(cmd.Context(), mo)
			if err != nil {
				log.Error("mount", "err", err)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&background, "daemon", "d", false, "run in the background; return once mounted")
	logs.register(f, "stderr; with -d: cairn-mount.log in the metadata directory, or cairn-mount-MOUNTPOINT.log in the temporary directory", "log every FUSE request")
	f.StringSliceVarP(&opts, "options", "o", nil, "mount options, comma separated (allow_other, ro, ...)")
	f.BoolVar(&allowOther, "allow-other", false, "let other users access the mount (needed by multi-user tests)")
	f.BoolVar(&readOnly, "read-only", false, "mount read-only")
	mem.register(f)
	storeTimeout.register(f)
	f.StringSliceVar(&cacheDirs, "cache-dir", nil, "keep a disk cache of blocks in these directories (repeat or separate with commas); it survives restarts. Fill it with cairn warmup")
	f.StringVar(&cacheSize, "cache-size", "10G", "disk cache size bound (all --cache-dir together)")
	f.Float64Var(&cacheFreeRatio, "cache-free-ratio", 0.1, "stop caching and evict when a cache directory's file system has less than this fraction free (0: no floor)")
	f.BoolVar(&cacheWrites, "cache-writes", false, "also put the blocks this client writes into the disk cache")
	f.BoolVar(&cacheSmallWrites, "cache-small-writes", true, "put the blocks shorter than a full block that this client writes (small files, file ends) into the disk cache")
	f.BoolVar(&writeBack, "meta-write-back", true, "on shared volumes, let creates, unlinks, rmdirs and renames in a directory this client leases, links there of the files it made there, and their data commits, setattrs, opens and closes, return before their commit, and commit them in batches (up to 512 changes in one round trip, within about 50 ms); other clients' lookups there commit them first. A crash loses the changes not yet committed, as a local file system loses what was not fsynced; fsync and fsyncdir commit them. Needs --dir-leases; off with --nfs-listen (NFS clients take a reply as stable)")
	f.BoolVar(&dirLeases, "dir-leases", true, "on shared volumes, take the lease of a directory this client creates files in, so that a create and its lookup cost one round trip instead of two (another client's change there recalls the lease first)")
	f.BoolVar(&cacheOnStoreFS, "cache-on-store-fs", false, "use --cache-dir directories even on the file system of a file:// data store (by default skipped: there the cache only copies blocks)")
	f.DurationVar(&objectLatency, "object-latency", 0, "FOR BENCHMARKS AND FAULT TESTS: delay every data store request by this much (e.g. 10ms), so a local store answers like a remote one")
	metricsFlag(f, &metricsAddr)
	f.DurationVar(&attrTimeout, "attr-timeout", 0, "how long the kernel caches attributes, and on a shared volume how long the --nfs-listen gateway's READ and WRITE use a file's attributes read before (default: 1h on an embedded volume without --nfs-listen, where every change goes through this mount's kernel, for the live volume; 1s otherwise)")
	f.DurationVar(&entryTimeout, "entry-timeout", 0, "how long the kernel caches names (default: as --attr-timeout's)")
	f.BoolVar(&writeback, "writeback", true, "let the kernel buffer small writes and send them in large requests (FUSE writeback cache); --writeback=false sends every write(2) to Cairn. Default off on shared volumes, where the kernel would keep stale file sizes")
	f.StringVar(&maxReadAhead, "max-readahead", "1M", "the kernel's read-ahead window per file (FUSE starts at 128K; raised as root, see docs/fuse-tuning.md)")
	f.DurationVar(&heartbeat, "heartbeat", 5*time.Second, "how often the session reports it is alive and looks for dead sessions")
	f.DurationVar(&sessionTimeout, "session-timeout", 60*time.Second, "how long this client may miss heartbeats before other clients declare it dead and release its locks")
	pprofFlag(f, &pprofAddr)
	f.DurationVar(&negTimeout, "negative-timeout", 0, "how long the kernel caches failed lookups")
	f.StringVar(&snapshot, "snapshot", "", "mount this snapshot of the volume, read-only, instead of the live volume")
	f.StringVar(&nfsListen, "nfs-listen", "", "also serve the volume over NFSv3 (and MOUNTv3, NLMv4, NSMv1) on this TCP address, from this process (see cairn gateway nfs)")
	nfsExport.register(f)
	backups.register(f)
	f.StringVar(&replicateTo, "replicate-to", "", "also replicate the volume to this destination volume (META-URL), as cairn replicate start does")
	f.DurationVar(&replicateBound, "replicate-max-out-of-sync", 5*time.Minute, "with --replicate-to: keep the destination at most this much older")
	f.StringVar(&replicateBW, "replicate-bwlimit", "", "with --replicate-to: bytes per second of object copying (e.g. 50M)")
	return cmd
}

// Mount options (-o) besides allow_other and ro: those passed on to the
// kernel's FUSE mount, and those of mount(8) and fstab that concern
// whoever calls the mount, not the mount itself (accepted and ignored).
var (
	fuseMountOptions = []string{"rw", "allow_root", "default_permissions", "auto_unmount", "dev", "nodev",
		"suid", "nosuid", "exec", "noexec", "atime", "noatime", "relatime", "nodiratime", "sync", "async", "dirsync"}
	fuseMountValueOptions = []string{"fsname=", "subtype=", "max_read=", "blksize="}
	callerMountOptions    = []string{"defaults", "_netdev", "auto", "noauto", "nofail", "user", "users", "nouser", "owner", "group"}
)

// mountOption checks one -o option: keep reports whether it goes to the
// kernel; an unknown option is an error that names it.
func mountOption(o string) (keep bool, err error) {
	switch {
	case slices.Contains(fuseMountOptions, o):
		return true, nil
	case slices.ContainsFunc(fuseMountValueOptions, func(p string) bool { return strings.HasPrefix(o, p) && len(o) > len(p) }):
		return true, nil
	case slices.Contains(callerMountOptions, o), strings.HasPrefix(o, "x-"), strings.HasPrefix(o, "comment="):
		return false, nil
	}
	return false, fmt.Errorf("-o %s: unknown mount option (known: allow_other, ro, %s, %s; ignored: %s, x-*)", o,
		strings.Join(fuseMountOptions, ", "), strings.Join(fuseMountValueOptions, "…, ")+"…", strings.Join(callerMountOptions, ", "))
}

// readyReporter returns the function a daemonized child calls once, on
// the pipe to its parent: with err nil when mounted (after the notices the
// operator should see, one line each), else with the error that stopped
// it. Lines: "notice: TEXT", then "ok" or "error: TEXT" (newlines in TEXT
// become spaces).
func readyReporter() func(notices []string, err error) {
	fdStr := os.Getenv(readyFDEnv)
	if fdStr == "" {
		return func([]string, error) {}
	}
	os.Unsetenv(readyFDEnv)
	var fd int
	fmt.Sscanf(fdStr, "%d", &fd)
	f := os.NewFile(uintptr(fd), "ready")
	done := false
	oneLine := strings.NewReplacer("\n", " ", "\r", " ")
	return func(notices []string, err error) {
		if done || f == nil {
			return
		}
		done = true
		if err != nil {
			fmt.Fprintln(f, "error: "+oneLine.Replace(err.Error()))
		} else {
			for _, n := range notices {
				fmt.Fprintln(f, "notice: "+oneLine.Replace(n))
			}
			fmt.Fprintln(f, "ok")
		}
		f.Close()
	}
}

// parentMetaURL returns the metadata URL of this mount: arg, or, in a
// mount process started by daemonize with arg redacted, the URL its parent
// sent through the pipe named by metaURLFDEnv.
func parentMetaURL(arg string) (string, error) {
	fdStr := os.Getenv(metaURLFDEnv)
	if fdStr == "" {
		return arg, nil
	}
	os.Unsetenv(metaURLFDEnv)
	fd, err := strconv.Atoi(fdStr)
	if err != nil || fd < 3 {
		return "", fmt.Errorf("%s=%q: want a file descriptor above 2", metaURLFDEnv, fdStr)
	}
	f := os.NewFile(uintptr(fd), "meta-url")
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return "", fmt.Errorf("reading the metadata URL from the parent process: %w", err)
	}
	if u := string(b); object.RedactURL(u) == arg {
		return u, nil
	}
	return "", fmt.Errorf("the metadata URL sent by the parent process is not %s", arg)
}

// daemonize starts this command again in the background without -d and
// waits until it reports that the mount is ready (or why it failed). The
// metadata URL's password is not in the new process's command line: that
// holds the URL redacted, and the URL itself goes through a pipe.
func daemonize(cmd *cobra.Command, loc daemon.MetaLocation, logFile, mountpoint string) (err error) {
	ownLog := false // the default log, made by this call: removed if the mount fails
	if logFile == "" {
		// Beside an embedded store if there is one (mounting creates
		// none), else in the temporary directory.
		logFile = filepath.Join(os.TempDir(), "cairn-mount-"+strings.ReplaceAll(strings.Trim(mountpoint, "/"), "/", "_")+".log")
		if ok, _ := daemon.StoreExists(loc); ok && !loc.Shared() {
			logFile = loc.Path + "/cairn-mount.log"
		}
	}
	if !cmd.Flags().Changed("log") {
		_, serr := os.Stat(logFile)
		ownLog = errors.Is(serr, fs.ErrNotExist)
	}
	lf, err := openLogFile(logFile)
	if err != nil {
		return fmt.Errorf("--log: %w", err)
	}
	defer lf.Close()
	defer func() {
		if err != nil && ownLog {
			// The error is on stderr; the default log made for this
			// mount has nothing the operator needs.
			_ = os.Remove(logFile)
		}
	}()
	metaURL := cmd.Flags().Arg(0)
	redacted := object.RedactURL(metaURL)
	var args []string
	for _, a := range os.Args[1:] {
		if a == "-d" || a == "--daemon" || a == "--daemon=true" {
			continue
		}
		if a == metaURL {
			a = redacted
		}
		args = append(args, a)
	}
	if !cmd.Flags().Changed("log") {
		// The mount process opens it too, to reopen it on SIGHUP.
		args = append(args, "--log", logFile)
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	defer pr.Close()
	c := exec.Command(exe, args...)
	// The mount process runs in the foreground, even if -d came from the
	// environment.
	c.Env = append(slices.DeleteFunc(os.Environ(), func(e string) bool {
		return strings.HasPrefix(e, flagEnv("daemon")+"=")
	}), readyFDEnv+"=3")
	c.Stdin = nil
	c.Stdout = lf
	c.Stderr = lf
	c.ExtraFiles = []*os.File{pw}
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	var urlR, urlW *os.File
	if redacted != metaURL {
		if urlR, urlW, err = os.Pipe(); err != nil {
			pw.Close()
			return err
		}
		c.ExtraFiles = append(c.ExtraFiles, urlR) // fd 4
		c.Env = append(c.Env, metaURLFDEnv+"=4")
	}
	err = c.Start()
	pw.Close()
	if urlR != nil {
		urlR.Close() // the child has its own
		if err == nil {
			if _, werr := io.WriteString(urlW, metaURL); werr != nil {
				_ = c.Process.Kill()
				err = fmt.Errorf("sending the metadata URL: %w", werr)
			}
		}
		urlW.Close()
	}
	if err != nil {
		return fmt.Errorf("starting the mount process: %w", err)
	}
	pid := c.Process.Pid
	rd := bufio.NewReader(pr)
	for {
		line, rerr := rd.ReadString('\n')
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "notice: "):
			fmt.Fprintln(cmd.ErrOrStderr(), "cairn: "+strings.TrimPrefix(line, "notice: "))
			continue
		case line == "ok":
			_ = c.Process.Release()
			// Started by a service manager with -d: the mount process
			// is the service's main process now.
			if err := daemon.SdNotify(fmt.Sprintf("MAINPID=%d\nREADY=1", pid)); err != nil {
				fmt.Fprintln(cmd.ErrOrStderr(), "cairn: "+err.Error())
			}
			fmt.Fprintf(cmd.OutOrStdout(), "mounted %s at %s (pid %d, log %s)\n", loc.Display(), mountpoint, pid, logFile)
			return nil
		case strings.HasPrefix(line, "error: "):
			_ = c.Wait()
			return errors.New(strings.TrimPrefix(line, "error: "))
		case rerr == nil:
			continue // not a line of ours
		}
		// The process ended without a word: killed, or it crashed.
		werr := c.Wait()
		ownLog = false // the log is all there is to go on
		return fmt.Errorf("the mount process (pid %d) exited before the mount was ready (%v); see %s", pid, werr, logFile)
	}
}

func newUmountCommand() *cobra.Command {
	var lazy bool
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "umount MOUNTPOINT",
		Short: "Unmount a Cairn volume and wait for its mount process to finish",
		Long: `Unmount a Cairn volume. Fails while files are in use unless --lazy is given.
Waits until the mount process has flushed everything and exited, so the
volume can be used by another command right after.`,
		Example: "  cairn umount /mnt/cairn",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			abs, err := absPath(args[0])
			if err != nil {
				return err
			}
			src, ok := daemon.MountedAt(abs)
			if !ok {
				return fmt.Errorf("%s is not a mount point", abs)
			}
			// The process to wait for: asked through the mount's own
			// socket (every mount has one), else the volume's (an
			// embedded volume mounted by another user).
			pid := 0
			if h, err := daemon.QueryMountHolder(abs); err == nil && h.MountPoint == abs {
				pid = h.Pid
			} else if loc, err := daemon.ParseMetaURL(src); err == nil {
				if h, err := daemon.QueryHolder(loc); err == nil && h.MountPoint == abs {
					pid = h.Pid
				}
			}
			flags := 0
			if lazy {
				flags = syscall.MNT_DETACH
			}
			if err := syscall.Unmount(abs, flags); err != nil {
				if errors.Is(err, syscall.EBUSY) {
					return fmt.Errorf("%s is busy: files or directories inside it are in use (close them, or use --lazy)", abs)
				}
				return fmt.Errorf("unmount %s: %w", abs, err)
			}
			if pid == 0 {
				return nil
			}
			deadline := time.Now().Add(wait)
			for time.Now().Before(deadline) {
				if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
					return nil
				}
				time.Sleep(50 * time.Millisecond)
			}
			return fmt.Errorf("unmounted %s, but its mount process (pid %d) is still running after %s", abs, pid, wait)
		},
	}
	cmd.Flags().BoolVar(&lazy, "lazy", false, "detach now even if busy; finish when no longer in use")
	cmd.Flags().DurationVar(&wait, "wait", time.Minute, "how long to wait for the mount process to exit")
	return cmd
}
