package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/internal/meta"
	"github.com/cairnfs/cairn/internal/metrics"
	"github.com/cairnfs/cairn/internal/nfs"
	"github.com/cairnfs/cairn/internal/nfs/proto"
	"github.com/cairnfs/cairn/internal/vfs"
)

// GatewayOptions configures Gateway.
type GatewayOptions struct {
	Volume VolumeOptions
	// Listen is the TCP address NFSv3 and MOUNTv3 are served on.
	Listen string
	// NFS tunes the gateway; VolumeUUID and Logger are filled in, and
	// OnCall counts the calls in the volume's Stats (after calling the
	// given OnCall, if any).
	NFS nfs.Options
	// Version is recorded in the session.
	Version string
	// Ready is called with the address served once the gateway accepts
	// connections.
	Ready  func(addr string)
	Logger *slog.Logger
	// Heartbeat and SessionTimeout are as in MountOptions.
	Heartbeat      time.Duration
	SessionTimeout time.Duration
	// MetricsAddr is as in MountOptions: if set, the volume's counters
	// (the gateway's calls among them) are served on this TCP address.
	MetricsAddr string
	// Portmap, if set, is the address (HOST:111) where the gateway is
	// also the portmapper; else, with PortmapRegister, it registers with
	// the host's portmapper if one runs.
	Portmap         string
	PortmapRegister bool
	// Backup is as in MountOptions: the automatic metadata backups the
	// gateway takes (none when it is read-only).
	Backup BackupSchedule
}

// Validate checks the options that need no volume.
func (o *GatewayOptions) Validate() error {
	if o.Listen == "" {
		return errors.New("no address to listen on: give --listen HOST:PORT (e.g. 0.0.0.0:2049)")
	}
	if _, _, err := net.SplitHostPort(o.Listen); err != nil {
		return fmt.Errorf("--listen %q: want HOST:PORT: %w", o.Listen, err)
	}
	return checkSessionTimes(&o.Heartbeat, &o.SessionTimeout)
}

// nfsGateway is an NFS server over a vfs, listening.
type nfsGateway struct {
	srv  *nfs.Server
	addr string
	done chan error
	// unregister takes the gateway's programs back from the host's
	// portmapper (nil: not registered).
	unregister func()
}

// startNFS serves v over NFS on addr. With pmapAddr set it is also the
// portmapper there (TCP and UDP; port 111 is the one clients ask); else,
// with register, it registers with the host's portmapper on
// 127.0.0.1:111 if one runs.
func startNFS(v *vfs.VFS, vol *Volume, addr, pmapAddr string, register bool, o nfs.Options, log *slog.Logger) (*nfsGateway, error) {
	o.VolumeUUID = vol.Settings.UUID
	o.Logger = log
	vol.nfsStats.on.Store(true)
	given := o.OnCall
	o.OnCall = func(prog, proc uint32, d time.Duration) {
		if given != nil {
			given(prog, proc, d)
		}
		vol.nfsStats.observe(prog, proc, d)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("NFS gateway: %w", err)
	}
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	if pmapAddr != "" {
		o.PortmapPort = port
	}
	srv, err := nfs.New(v, o)
	if err != nil {
		l.Close()
		return nil, err
	}
	g := &nfsGateway{srv: srv, addr: l.Addr().String(), done: make(chan error, 1)}
	if pmapAddr != "" {
		pl, err := net.Listen("tcp", pmapAddr)
		if err == nil {
			var pc net.PacketConn
			if pc, err = net.ListenPacket("udp", pmapAddr); err == nil {
				go func() { _ = srv.Serve(pl) }()
				go func() { _ = srv.ServePortmapUDP(pc) }()
			} else {
				pl.Close()
			}
		}
		if err != nil {
			l.Close()
			_ = srv.Close(context.Background())
			return nil, fmt.Errorf("portmapper: %w", err)
		}
		log.Info("answering the portmapper's calls", "addr", pmapAddr)
	} else if !register {
	} else if unregister, skipped, err := nfs.RegisterPortmap("127.0.0.1:111", port); err != nil {
		log.Info("not registered with a portmapper: clients must be given the port", "err", err)
	} else {
		g.unregister = unregister
		log.Info("registered NFS and MOUNT with the portmapper on 127.0.0.1:111", "port", port)
		if len(skipped) > 0 {
			log.Warn("the host's own lock manager holds these programs at the portmapper: NFS clients' locks go there, not to Cairn; they must mount with nolock",
				"programs", strings.Join(skipped, ", "))
		}
	}
	go func() { g.done <- srv.Serve(l) }()
	log.Info("serving NFSv3", "addr", g.addr, "volume", vol.Settings.Name, "export", o.Export.String())
	return g, nil
}

// stop closes the gateway, committing the writes of its cached files.
func (g *nfsGateway) stop(log *slog.Logger) {
	if g.unregister != nil {
		g.unregister()
	}
	if err := g.srv.Close(context.Background()); err != nil {
		log.Error("closing the NFS gateway", "err", err)
	}
	<-g.done
}

// Gateway opens the volume and serves it over NFSv3 until SIGINT/SIGTERM
// or ctx ends; then it commits buffered writes and closes everything.
func Gateway(ctx context.Context, o GatewayOptions) error {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := o.Validate(); err != nil {
		return err
	}
	if err := o.Backup.Validate(); err != nil {
		return err
	}
	o.Volume.Logger = log
	vol, err := OpenVolume(ctx, o.Volume)
	if err != nil {
		return err
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
	host, _ := os.Hostname()
	where := "nfs://" + o.Listen
	closeSession, err := openSession(ctx, vol.Meta, meta.SessionInfo{Host: host, MountPoint: where, Version: o.Version, Timeout: o.SessionTimeout}, log)
	if err != nil {
		return err
	}
	defer closeSession()
	v := vfs.New(vol.Meta, vol.Chunks, vfs.Options{Logger: log, ReadOnly: o.Volume.ReadOnly, AppendAtEOF: vol.Loc.Shared()})
	g, err := startNFS(v, vol, o.Listen, o.Portmap, o.PortmapRegister, o.NFS, log)
	if err != nil {
		_ = v.Close(context.Background())
		return err
	}
	if !vol.Loc.Shared() {
		ctl, err := ServeControl(vol, Holder{Pid: os.Getpid(), Host: host, MountPoint: where}, RunAdmin)
		if err != nil {
			g.stop(log)
			_ = v.Close(context.Background())
			return err
		}
		defer ctl.Close()
	}
	if o.Backup.Interval > 0 && !o.Volume.ReadOnly {
		defer vol.startBackups(o.Backup, log)()
	}
	if !o.Volume.ReadOnly {
		defer vol.startTrashPurge(log)()
	}
	if o.Ready != nil {
		o.Ready(g.addr)
	}
	stopHB := startHeartbeats(vol.Meta, o.Heartbeat, o.SessionTimeout, log)
	defer stopHB()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	select {
	case s := <-sigs:
		log.Info("signal: stopping the NFS gateway", "signal", s.String())
	case <-ctx.Done():
	case err := <-g.done:
		g.done <- err
		log.Error("NFS gateway stopped", "err", err)
	}
	g.stop(log)
	if err := v.Close(context.Background()); err != nil {
		return fmt.Errorf("final flush: %w", err)
	}
	log.Info("clean shutdown", "addr", g.addr)
	return nil
}

// NFS, MOUNT, NLM and NSM procedure names, by number, for counters (the
// numbers a program does not serve have none).
var (
	nfsProcNames = [...]string{
		proto.NFSProcNull: "null", proto.NFSProcGetAttr: "getattr", proto.NFSProcSetAttr: "setattr",
		proto.NFSProcLookup: "lookup", proto.NFSProcAccess: "access", proto.NFSProcReadlink: "readlink",
		proto.NFSProcRead: "read", proto.NFSProcWrite: "write", proto.NFSProcCreate: "create",
		proto.NFSProcMkdir: "mkdir", proto.NFSProcSymlink: "symlink", proto.NFSProcMknod: "mknod",
		proto.NFSProcRemove: "remove", proto.NFSProcRmdir: "rmdir", proto.NFSProcRename: "rename",
		proto.NFSProcLink: "link", proto.NFSProcReadDir: "readdir", proto.NFSProcReadDirPlus: "readdirplus",
		proto.NFSProcFSStat: "fsstat", proto.NFSProcFSInfo: "fsinfo", proto.NFSProcPathConf: "pathconf",
		proto.NFSProcCommit: "commit",
	}
	mountProcNames = [...]string{
		proto.MountProcNull: "null", proto.MountProcMnt: "mnt", proto.MountProcDump: "dump",
		proto.MountProcUmnt: "umnt", proto.MountProcUmntAll: "umntall", proto.MountProcExport: "export",
	}
	nlmProcNames = [...]string{
		proto.NLMProcNull: "null", proto.NLMProcTest: "test", proto.NLMProcLock: "lock",
		proto.NLMProcCancel: "cancel", proto.NLMProcUnlock: "unlock", proto.NLMProcShare: "share",
		proto.NLMProcUnshare: "unshare", proto.NLMProcNMLock: "nm_lock", proto.NLMProcFreeAll: "free_all",
	}
	nsmProcNames = [...]string{
		proto.NSMProcNull: "null", proto.NSMProcStat: "stat", proto.NSMProcMon: "mon",
		proto.NSMProcUnmon: "unmon", proto.NSMProcUnmonAll: "unmon_all", proto.NSMProcSimuCrash: "simu_crash",
		proto.NSMProcNotify: "notify",
	}
)

// nfsCounters count an NFS gateway's calls per procedure (nfs.Options
// OnCall). The zero value is ready; it is safe for concurrent use.
type nfsCounters struct {
	on    atomic.Bool // a gateway serves the volume
	nfs   [len(nfsProcNames)]metrics.Histogram
	mount [len(mountProcNames)]metrics.Histogram
	nlm   [len(nlmProcNames)]metrics.Histogram
	nsm   [len(nsmProcNames)]metrics.Histogram
}

func (c *nfsCounters) observe(prog, proc uint32, d time.Duration) {
	switch {
	case prog == proto.ProgNFS && proc < uint32(len(c.nfs)):
		c.nfs[proc].Observe(d)
	case prog == proto.ProgMount && proc < uint32(len(c.mount)):
		c.mount[proc].Observe(d)
	case prog == proto.ProgNLM && proc < uint32(len(c.nlm)):
		c.nlm[proc].Observe(d)
	case prog == proto.ProgNSM && proc < uint32(len(c.nsm)):
		c.nsm[proc].Observe(d)
	}
}

// NFSProcStats are the calls of one procedure: Prog is "nfs", "mount",
// "nlm" or "nsm",
// Proc the procedure's name ("write", "mnt"); Latency.Count is the number
// of calls.
type NFSProcStats struct {
	Prog    string                    `json:"prog"`
	Proc    string                    `json:"proc"`
	Latency metrics.HistogramSnapshot `json:"latency"`
}

// stats lists the procedures called at least once, NFS first, by number;
// nil if no gateway serves the volume.
func (c *nfsCounters) stats() []NFSProcStats {
	if !c.on.Load() {
		return nil
	}
	out := []NFSProcStats{}
	add := func(prog string, names []string, hs []metrics.Histogram) {
		eachObserved(names, hs, func(name string, h metrics.HistogramSnapshot) {
			out = append(out, NFSProcStats{Prog: prog, Proc: name, Latency: h})
		})
	}
	add("nfs", nfsProcNames[:], c.nfs[:])
	add("mount", mountProcNames[:], c.mount[:])
	add("nlm", nlmProcNames[:], c.nlm[:])
	add("nsm", nsmProcNames[:], c.nsm[:])
	return out
}

// eachObserved calls f, in order, with the name and a snapshot of each of
// hs (named by names) that has observed something.
func eachObserved(names []string, hs []metrics.Histogram, f func(name string, h metrics.HistogramSnapshot)) {
	for i := range hs {
		if h := hs[i].Snapshot(); h.Count > 0 {
			f(names[i], h)
		}
	}
}
