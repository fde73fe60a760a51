package main

import (
	"context"
	"fmt"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cairnfs/cairn/internal/daemon"
)

func newReplicateCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "replicate",
		Short: "Asynchronous replication to a second volume: start, status, failover, reverse, stop, resume",
		Long: `A replication pair copies a source volume to a destination volume, cycle by
cycle. Each cycle takes a snapshot of the source, sends the metadata records
that changed since the last replicated snapshot and the block objects the
destination lacks, and applies the records on the destination in one
transaction: a client of the destination sees the previous replicated state
or the new one, never a mix. The destination holds exactly the source's
snapshot: the same inode numbers, hard links, holes, xattrs and times.

The destination must be a newly formatted, empty volume with its own data
store and the source's block size. While it is a destination, it mounts
read-only. 'failover' makes it writable at its last replicated snapshot;
'reverse' then replicates it back to the old source, sending only what
changed since their last common snapshot.`,
		Example: "  cairn replicate start pebble:///var/lib/cairn/meta pebble:///backup/cairn/meta --max-out-of-sync 5m\n  cairn replicate status pebble:///backup/cairn/meta",
	}
	cmd.AddCommand(newReplicateStartCommand(), newReplicateStatusCommand(), newReplicateFailoverCommand(),
		newReplicateReverseCommand(), newReplicateStopCommand(), newReplicateResumeCommand())
	return cmd
}

type replicateFlags struct {
	batch   int
	bound   time.Duration
	bwlimit string
	once    bool
	metrics string
	logs    logFlags
}

func (f *replicateFlags) register(fs *pflag.FlagSet) {
	fs.DurationVar(&f.bound, "max-out-of-sync", 5*time.Minute, "keep the destination at most this much older than the source")
	fs.StringVar(&f.bwlimit, "bwlimit", "", "bytes per second of object copying (e.g. 50M); default: no limit")
	fs.IntVar(&f.batch, "batch", 4096, "records per transaction of the first copy (it resumes after the last one committed)")
	fs.BoolVar(&f.once, "once", false, "run one cycle (the first copy, or the changes since the last one) and exit")
	metricsFlag(fs, &f.metrics)
	f.logs.register(fs, "stderr", "log every step of the cycles")
}

// run replicates src to dst until SIGINT/SIGTERM (or one cycle, with
// --once).
func (f *replicateFlags) run(cmd *cobra.Command, src, dst string) error {
	var limit uint64
	if f.bwlimit != "" {
		var err error
		if limit, err = parseSize(f.bwlimit); err != nil || limit == 0 {
			return fmt.Errorf("--bwlimit %q: want a positive size per second (e.g. 50M)", f.bwlimit)
		}
	}
	log, closeLog, err := f.logs.open()
	if err != nil {
		return err
	}
	defer closeLog()
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	r, err := daemon.OpenReplicator(ctx, daemon.ReplicateOptions{Source: src, Dest: dst, MaxOutOfSync: f.bound, BWLimit: int64(limit), Batch: f.batch, Logger: log}, nil)
	if err != nil {
		return err
	}
	defer r.Close()
	if f.metrics != "" {
		ms, err := r.ServeReplicaMetrics(f.metrics)
		if err != nil {
			return err
		}
		defer ms.Close()
	}
	fileCtx, stopFile := context.WithCancel(context.Background())
	fileDone := make(chan struct{})
	go func() { defer close(fileDone); r.WriteStatusFile(fileCtx) }()
	defer func() { stopFile(); <-fileDone }()
	out := cmd.OutOrStdout()
	if f.once {
		st, err := r.Cycle(ctx)
		if err != nil {
			return err
		}
		c := st.LastCycle
		_, err = fmt.Fprintf(out, "replicated snapshot %s of %q: %d records (%d inodes), %d objects, %d bytes, in %s (%d objects made by the stores: no bytes sent)\n",
			st.Snapshot, st.SourceName, c.Records, c.Files, c.Objects, c.Bytes, c.Duration.Round(time.Millisecond), c.Linked)
		return err
	}
	fmt.Fprintf(out, "replicating %s to %s, at most %s out of sync; status: cairn replicate status %s\n", r.Source().Loc.Display(), r.Dest().Loc.Display(), f.bound, r.Dest().Loc.Display())
	return r.Run(ctx)
}

func newReplicateStartCommand() *cobra.Command {
	var f replicateFlags
	cmd := &cobra.Command{
		Use:   "start SRC-META-URL DST-META-URL [--max-out-of-sync 5m] [--bwlimit 50M] [--once]",
		Short: "Replicate a volume to a destination volume, cycle after cycle",
		Long: `Run the pair's cycles in this process until it is stopped (SIGTERM, or
'cairn replicate stop'), or one cycle with --once. The first cycle copies
everything (in batches; it resumes where it stopped); each later one only what
changed. A cycle starts early enough that the destination stays within
--max-out-of-sync of the source; a cycle that ends past it is logged and
counted (cairn_replica_bound_missed_total). When the source or the
destination cannot be reached, the pair pauses and goes on by itself.
An embedded source must not be mounted meanwhile (its store is locked):
replicate a mounted embedded volume with 'cairn mount --replicate-to'.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error { return f.run(cmd, args[0], args[1]) },
	}
	f.register(cmd.Flags())
	return cmd
}

func newReplicateResumeCommand() *cobra.Command {
	var f replicateFlags
	cmd := &cobra.Command{
		Use:   "resume DST-META-URL [SRC-META-URL]",
		Short: "Start the replicator of a pair again, from its destination",
		Long: `Start the pair's replicator again after 'cairn replicate stop' (or a crash),
like 'start': the source is the one the destination records, unless given
(give it when its URL holds a password, which the record leaves out).`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			src := ""
			if len(args) == 2 {
				src = args[1]
			} else {
				s, err := daemon.ReplicaStatusOf(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				src = s.State.Source
			}
			return f.run(cmd, src, args[0])
		},
	}
	f.register(cmd.Flags())
	return cmd
}

func newReplicateStatusCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status DST-META-URL [--json]",
		Short: "Show a pair's state: last replicated snapshot, lag, last cycle, the cycle in progress",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := daemon.ReplicaStatusOf(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return daemon.PrintReplicaStatus(cmd.OutOrStdout(), s, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the status as JSON")
	return cmd
}

func newReplicateFailoverCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "failover DST-META-URL",
		Short: "Make a destination writable, at its last replicated snapshot",
		Long: `Make the destination a writable volume at its last replicated snapshot (a
cycle applies whole, so that is the state it holds). The replicator must be
stopped. The old source keeps its own state; 'cairn replicate reverse'
later replicates the promoted volume back to it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return daemon.ReplicaFailover(cmd.Context(), args[0], cmd.OutOrStdout())
		},
	}
}

func newReplicateReverseCommand() *cobra.Command {
	var f replicateFlags
	cmd := &cobra.Command{
		Use:   "reverse NEW-SRC-META-URL OLD-SRC-META-URL [--once]",
		Short: "Replicate a failed-over destination back to its old source",
		Long: `Turn a failed-over pair around: the promoted destination becomes the source,
and the old source its destination (read-only from now on; unmount it
first). The first cycle sends what changed on the new source since their
last common snapshot and puts back what changed on the old source after it
(writes that never replicated are undone). Then it runs as 'start' does.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := daemon.ReplicaReverse(cmd.Context(), args[0], args[1], cmd.OutOrStdout()); err != nil {
				return err
			}
			return f.run(cmd, args[0], args[1])
		},
	}
	f.register(cmd.Flags())
	return cmd
}

func newReplicateStopCommand() *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "stop DST-META-URL",
		Short: "Stop the replicator of a pair running on this host",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return daemon.ReplicaStop(args[0], timeout, cmd.OutOrStdout())
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for it to exit")
	return cmd
}
