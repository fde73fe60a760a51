package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairnfs/cairn/internal/bench"
)

func newBenchCommand() *cobra.Command {
	var (
		path, nfsAddr, workloads, blockSizes, fileSize, nfsTransfer string
		appendRecord, sharedDir, seqFile                            string
		startAt                                                     float64
		nfsTimeout                                                  time.Duration
		nfsMountPort, nfsWindow, files, procs, pid                  int
		metricsURL                                                  string
		asJSON, dropCaches                                          bool
	)
	cmd := &cobra.Command{
		Use:   "bench (--path DIR | --nfs HOST:PORT[/EXPORT]) [options]",
		Short: "Run the benchmark workloads against a mount or an NFS server",
		Long: `Run sequential write and read (at each --bs, on one --size file), then
create, stat and unlink (--files files over --procs workers, each in a
directory of its own) against a target:

  --path DIR     any mounted file system (a Cairn FUSE mount, a local
                 directory...), through plain system calls;
  --nfs ADDR     an NFSv3 server, through Cairn's Go NFS client (no kernel
                 client): CREATE, LOOKUP (stat), REMOVE, UNSTABLE WRITEs
                 then COMMIT, READ. Like the Linux client, it gathers
                 sequential writes and reads into calls of the server's
                 preferred size (FSINFO, at most 1 MiB; --nfs-transfer),
                 --nfs-window of them in flight. MOUNT is asked on
                 --nfs-mount-port when the server serves it on another
                 port (Ganesha, knfsd).

The append workload (not run by default: --workloads append) extends a
file of --size with --append-record writes, the file opened for appending
(O_APPEND; over NFS, WRITEs from the file's end), and fsyncs it: the
extending writes of a cluster scaling study. For runs on several clients
at once (bench/cluster.sh), --start-at makes them begin together and
--shared-dir puts every client's create and stat in one directory.

Everything happens in a new directory under the target, removed at the end.
For every workload it prints the five figures of the classic NFSv3/v4 study:
client CPU µs per op (this process, getrusage), server CPU µs per op
(/proc/PID/stat of --server-pid; n/a without it), ops/s (and MB/s), mean and
p99 latency, and backend operations per op (metadata transactions and object
store requests), read from a Cairn server's --metrics endpoint
(--server-metrics; n/a without it, or for counters the server does not
export). A sequential op is one read or write call of --bs
bytes by the application (one RPC with --nfs-transfer call); the seq-write
time includes the final fsync or COMMIT.`,
		Example: `  cairn bench --path /mnt/cairn --server-pid $(pgrep -o -f 'cairn mount') --server-metrics http://127.0.0.1:9567/metrics
  cairn bench --nfs 127.0.0.1:20490 --server-pid 4242 --server-metrics http://127.0.0.1:9567/metrics --json
  cairn bench --nfs 127.0.0.1:20491/srv/export --nfs-mount-port 20492 --bs 128K --size 64M --files 500
  cairn bench --path /tmp/x --workloads create,stat,unlink --files 10000 --procs 8
  cairn bench --path /mnt/cairn --workloads append --size 64M --append-record 1M --start-at $(($(date +%s) + 5)) --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if (path == "") == (nfsAddr == "") {
				return errors.New("give one target: --path DIR or --nfs HOST:PORT[/EXPORT]")
			}
			o := bench.Options{Files: files, Procs: procs, ServerPID: pid, MetricsURL: metricsURL, SharedDir: sharedDir, SeqFile: seqFile}
			if startAt > 0 {
				o.StartAt = time.Unix(0, int64(startAt*1e9))
			}
			rn, err := parseSize(appendRecord)
			if err != nil {
				return fmt.Errorf("--append-record: %w", err)
			}
			o.AppendRecord = int(rn)
			if workloads != "" {
				o.Workloads = strings.Split(workloads, ",")
			}
			for _, s := range strings.Split(blockSizes, ",") {
				n, err := parseSize(s)
				if err != nil {
					return fmt.Errorf("--bs: %w", err)
				}
				o.BlockSizes = append(o.BlockSizes, int(n))
			}
			n, err := parseSize(fileSize)
			if err != nil {
				return fmt.Errorf("--size: %w", err)
			}
			o.FileSize = int64(n)
			if files <= 0 || procs <= 0 {
				return errors.New("--files and --procs must be at least 1")
			}
			if dropCaches {
				o.BeforeRead = bench.DropPageCache
			}
			if err := o.Validate(); err != nil {
				return err
			}
			var t bench.Target
			if path != "" {
				if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
					return fmt.Errorf("--path %s: not a directory", path)
				}
				t = bench.PathTarget{Dir: path}
			} else {
				addr, export := bench.ParseNFSAddr(nfsAddr)
				host, _, err := net.SplitHostPort(addr)
				if err != nil {
					return fmt.Errorf("--nfs %q: want HOST:PORT[/EXPORT]: %w", nfsAddr, err)
				}
				no := bench.NFSOptions{Addr: addr, Export: export, Window: nfsWindow, Timeout: nfsTimeout}
				if nfsTimeout == 0 {
					no.Timeout = -1 // no bound
				}
				switch nfsTransfer {
				case "server":
				case "call":
					no.Transfer = bench.PerCall
				default:
					n, err := parseSize(nfsTransfer)
					if err != nil || n < 512 {
						return fmt.Errorf("--nfs-transfer %q: want server, call, or a size of at least 512 bytes", nfsTransfer)
					}
					no.Transfer = int(n)
				}
				if nfsMountPort != 0 {
					no.MountAddr = net.JoinHostPort(host, strconv.Itoa(nfsMountPort))
				}
				nt, err := bench.DialNFS(no)
				if err != nil {
					return err
				}
				t = nt
			}
			defer t.Close()
			rep, err := bench.Run(cmd.Context(), t, o)
			if err != nil {
				return err
			}
			if asJSON {
				return bench.WriteJSON(cmd.OutOrStdout(), rep)
			}
			return bench.WriteTable(cmd.OutOrStdout(), rep)
		},
	}
	f := cmd.Flags()
	f.StringVar(&path, "path", "", "benchmark this directory (a mounted file system) through system calls")
	f.StringVar(&nfsAddr, "nfs", "", "benchmark this NFSv3 server, HOST:PORT[/EXPORT] (export default /)")
	f.IntVar(&nfsMountPort, "nfs-mount-port", 0, "port of the server's MOUNT program (default: the NFS port)")
	f.StringVar(&nfsTransfer, "nfs-transfer", "server", "size of sequential READs and WRITEs over NFS: server (its preferred size, at most 1 MiB, as the Linux client; reads and writes are gathered into calls of that size), call (one call per read or write, of the block size), or a size")
	f.DurationVar(&nfsTimeout, "nfs-timeout", 30*time.Second, "how long an NFS call may wait for its reply before the run fails (0: for ever, as a hard mount)")
	f.IntVar(&nfsWindow, "nfs-window", bench.DefaultNFSWindow, "READ/WRITE calls kept in flight by sequential workloads over NFS, pipelined on one connection (the default is a Linux client's read-ahead of 15 x rsize)")
	f.StringVar(&workloads, "workloads", "", "comma-separated subset of "+strings.Join(bench.AllWorkloads, ",")+" (default "+strings.Join(bench.DefaultWorkloads, ",")+")")
	f.StringVar(&appendRecord, "append-record", "1M", "record size of the append workload (extends a file of --size, opened O_APPEND, fsync at the end)")
	f.StringVar(&sharedDir, "shared-dir", "", "metadata workloads make their files in this directory below the target (made if missing, kept), not in directories of their own: several runs at once share it")
	f.StringVar(&seqFile, "seq-file", "", "the sequential workloads' file, below the target, kept at the end (a later --workloads seq-read reads it back alone)")
	f.Float64Var(&startAt, "start-at", 0, "wait until this Unix time (seconds) before the first workload: runs on several clients start together")
	f.StringVar(&blockSizes, "bs", "8K,32K,128K", "block sizes of the sequential workloads")
	f.StringVar(&fileSize, "size", "256M", "file size of the sequential workloads")
	f.IntVar(&files, "files", 2000, "files created, stat'ed and unlinked, in all")
	f.IntVar(&procs, "procs", 4, "parallel workers of the metadata workloads")
	f.IntVar(&pid, "server-pid", 0, "server process whose CPU time is measured (/proc/PID/stat)")
	f.StringVar(&metricsURL, "server-metrics", "", "Prometheus endpoint of a Cairn server (cairn mount or cairn gateway nfs --metrics ADDR: http://ADDR/metrics)")
	f.BoolVar(&asJSON, "json", false, "print JSON instead of a markdown table")
	f.BoolVar(&dropCaches, "drop-caches", false, "sync and drop the kernel page cache before each seq-read (root)")
	return cmd
}
