package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairnfs/cairn/internal/daemon"
	"github.com/cairnfs/cairn/internal/nfs"
)

func newGatewayCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "gateway",
		Short: "Serve a volume to machines without the Cairn client",
		Long: `Serve a volume to machines that have no Cairn client. One protocol for now:
NFSv3 (cairn gateway nfs). A mount can serve NFS itself with cairn mount --nfs-listen.`,
		Example: "  cairn gateway nfs --listen 0.0.0.0:2049 'postgres://cairn@db1/vol1'",
	}
	cmd.AddCommand(newGatewayNFSCommand())
	return cmd
}

func newGatewayNFSCommand() *cobra.Command {
	var (
		listen                    string
		logs                      logFlags
		readOnly                  bool
		mem                       memFlags
		storeTimeout              storeTimeoutFlag
		heartbeat, sessionTimeout time.Duration
		attrCache                 time.Duration
		export                    nfsExportFlags
		metricsAddr               string
		portmap                   string
		portmapRegister           bool
		backups                   backupFlags
		pprofAddr                 string
	)
	cmd := &cobra.Command{
		Use:   "nfs [options] META-URL",
		Short: "Serve a volume over NFSv3",
		Long: `Serve the volume at META-URL over NFSv3 (with MOUNTv3 on the same TCP port)
until interrupted (SIGINT/SIGTERM commit buffered writes, then stop).

The whole volume is exported as "/", with its snapshots read-only under
/.snapshots. By default the export is read-write, served to every client
that can reach the address, with the AUTH_SYS identities the clients send.
--nfs-export-ro makes it read-only, --nfs-allow limits it to client
networks (matched against the TCP source address), and --nfs-squash maps
root (root_squash) or everyone (all_squash) to --nfs-anon-uid and
--nfs-anon-gid (65534). AUTH_SYS trusts the client: these options guard
against mistakes and casual misuse, not against a hostile machine on an
allowed network.

File handles carry the inode number (and a snapshot's epoch) and the
volume's identity: they stay valid when the gateway restarts, and any
gateway of a shared volume accepts the handles of another, so clients can
fail over between gateways. An embedded volume (pebble://) is held by one
process: to serve it while it is mounted, use cairn mount --nfs-listen
instead.

With --metrics ADDR it serves the volume's counters as cairn mount --metrics
does, with the gateway's calls per NFS procedure among them
(cairn_nfs_calls_total, cairn_nfs_call_seconds).

It takes automatic metadata backups as cairn mount does (--backup-interval,
--backup-keep, --backup-hold; by default every hour on an embedded volume).

Memory is bounded as for cairn mount (--cache-mem, --buffer-size, and
garbage collection not before 64 MiB of heap unless GOGC is set).

Clients find MOUNT, NFS and the lock manager (NLM 4, NSM 1) through the
portmapper: the gateway registers with the host's (rpcbind on
127.0.0.1:111) if one runs, or, with --portmap HOST:111, answers its calls
itself (TCP and UDP). NFS clients' fcntl locks are then the volume's
locks, the ones FUSE clients take (the client runs rpc.statd, as for any
NFSv3 server):
  mount -t nfs -o vers=3 HOST:/ /mnt
Locks reach the gateway only through a portmapper that gives its port for
NLM: if the host's own lockd or rpc.statd holds NLM or NSM there (the log
says so), or without a portmapper, mount with nolock. Without a
portmapper, give the port for both programs:
  mount -t nfs -o vers=3,proto=tcp,port=PORT,mountport=PORT,nolock HOST:/ /mnt
Locks held over NFS do not survive a gateway restart (no grace period or
reclaim), and a blocked lock is granted when the client asks again (Linux
clients ask every 30 s; the gateway sends no GRANTED callback).`,
		Example: `  cairn gateway nfs --listen 0.0.0.0:2049 'postgres://cairn@db1/vol1'
  cairn gateway nfs --listen 0.0.0.0:2049 --nfs-allow 10.1.0.0/16,192.168.7.12 --nfs-squash root 'postgres://cairn@db1/vol1'
  cairn gateway nfs --listen 0.0.0.0:2049 --nfs-export-ro --nfs-squash all --nfs-anon-uid 1500 --nfs-anon-gid 1500 'postgres://cairn@db1/vol1'
  cairn gateway nfs --listen 127.0.0.1:20490 --metrics 127.0.0.1:9567 pebble:///var/lib/cairn/meta
  nfs-ls 'nfs://127.0.0.1/?version=3&nfsport=20490&mountport=20490'
  cairn gateway nfs --listen 0.0.0.0:2049 --portmap 0.0.0.0:111 'postgres://cairn@db1/vol1'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			vo := daemon.VolumeOptions{MetaURL: args[0], ReadOnly: readOnly}
			loc, err := daemon.ParseMetaURL(args[0])
			if err != nil {
				return err
			}
			if err := backups.schedule(cmd.Flags(), loc.Shared(), readOnly).Validate(); err != nil {
				return err
			}
			if err := mem.apply(&vo); err != nil {
				return err
			}
			if err := storeTimeout.apply(&vo); err != nil {
				return err
			}
			log, closeLog, err := logs.open()
			if err != nil {
				return err
			}
			defer closeLog()
			servePprof(pprofAddr, log)
			out := cmd.OutOrStdout()
			ex, err := export.export()
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("attr-timeout") && loc.Shared() {
				attrCache = time.Second
			}
			if attrCache < 0 {
				return fmt.Errorf("--attr-timeout %v: give 0 or more", attrCache)
			}
			return daemon.Gateway(cmd.Context(), daemon.GatewayOptions{
				NFS:             nfs.Options{Export: ex, AttrCache: attrCache, CloseToOpen: loc.Shared()},
				Volume:          vo,
				Listen:          listen,
				Version:         version,
				Logger:          log,
				Heartbeat:       heartbeat,
				SessionTimeout:  sessionTimeout,
				MetricsAddr:     metricsAddr,
				Portmap:         portmap,
				PortmapRegister: portmapRegister,
				Backup:          backups.schedule(cmd.Flags(), loc.Shared(), readOnly),
				Ready: func(addr string) {
					fmt.Fprintf(out, "serving NFSv3 on %s\n", addr)
					if err := daemon.SdNotify("READY=1\nSTATUS=serving NFSv3 on " + addr); err != nil {
						log.Warn("telling the service manager the gateway is ready", "err", err)
					}
				},
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "0.0.0.0:2049", "TCP address to serve NFSv3 and MOUNTv3 on")
	logs.register(f, "stderr", "log every RPC call")
	f.StringVar(&portmap, "portmap", "", "also be the portmapper on this address (HOST:111, TCP and UDP), so that clients find NFS and MOUNT without being given the port; without it, see --portmap-register")
	f.BoolVar(&portmapRegister, "portmap-register", true, "register NFS and MOUNT with the host's portmapper on 127.0.0.1:111 if one runs (and take them back at exit)")
	f.BoolVar(&readOnly, "read-only", false, "refuse every modification (NFS3ERR_ROFS)")
	f.DurationVar(&attrCache, "attr-timeout", 0, "how long READ and WRITE may use a file's attributes read before (by a GETATTR, READ or WRITE of this gateway) instead of reading them from the metadata engine, as a mount's kernel caches them; a change of attributes through this gateway ends it at once (default: 1s on a shared volume; 0, read every time, on an embedded one, where a read costs no round trip)")
	backups.register(f)
	mem.register(f)
	storeTimeout.register(f)
	f.DurationVar(&heartbeat, "heartbeat", 5*time.Second, "how often the session reports it is alive and looks for dead sessions")
	f.DurationVar(&sessionTimeout, "session-timeout", 60*time.Second, "how long this gateway may miss heartbeats before other clients declare it dead")
	metricsFlag(f, &metricsAddr)
	pprofFlag(f, &pprofAddr)
	export.register(f)
	return cmd
}
