package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cairnfs/cairn/internal/daemon"
	"github.com/cairnfs/cairn/internal/object"
)

// backupMetadataOnly is what every restore must be told: a backup holds
// metadata only.
const backupMetadataOnly = `A backup holds the metadata only (names, attributes, the lists of data
blocks, and the small-file data kept in the metadata engine); the file
contents stay in the data store, where the restored volume finds them.
Files deleted or overwritten after the backup was taken had their data
objects freed since, unless a snapshot held them: after restoring an old
backup, those files read as missing data (EIO). cairn fsck META-URL names
them. Backups taken with --backup-hold (mount) or --hold (backup now)
keep a snapshot of the volume that holds their data until the backup is
deleted: restoring one of them loses nothing.`

func newBackupCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "backup",
		Short: "List, take, delete and restore the volume's metadata backups",
		Long: `A metadata backup is a dump of the volume's metadata (as cairn dump writes it)
kept in the volume's own data store, under cairn/backups/. Mounts take them
on a schedule: by default every hour on an embedded volume, keeping the
newest 24 (cairn mount --backup-interval, --backup-keep, --backup-hold); on
a shared volume only when --backup-interval is given, and then one mount
takes each interval's backup. gc never touches them.

An embedded volume's Pebble directory is otherwise the only copy of its
metadata: if that disk is lost, cairn backup list --data and cairn backup
restore bring the volume back from its data store alone.

` + backupMetadataOnly,
		Example: `  cairn backup list pebble:///var/lib/cairn/meta
  cairn backup list --data file:///var/lib/cairn/data
  cairn backup now pebble:///var/lib/cairn/meta
  cairn backup restore --data file:///var/lib/cairn/data latest pebble:///var/lib/cairn/meta-new`,
	}
	cmd.AddCommand(newBackupListCommand(), newBackupNowCommand(), newBackupDeleteCommand(), newBackupRestoreCommand())
	return cmd
}

// backupTarget is the volume (META-URL) or the data store (--data) a
// backup verb works on.
func backupTarget(args []string, dataURL string) (metaURL string, err error) {
	switch {
	case dataURL != "" && len(args) > 0:
		return "", errors.New("give META-URL or --data DATA-URL, not both")
	case dataURL == "" && len(args) == 0:
		return "", errors.New("give the volume's META-URL, or --data DATA-URL when its metadata is lost")
	case dataURL != "":
		return "", nil
	}
	return args[0], nil
}

// withDataStore runs fn on the data store at dataURL.
func withDataStore(ctx context.Context, dataURL string, fn func(objs object.Store) error) error {
	objs, err := daemon.OpenObjects(ctx, dataURL, false, daemon.StoreWait{}, stderrLogger(slog.LevelWarn))
	if err != nil {
		return err
	}
	defer daemon.CloseObjects(objs)
	return fn(objs)
}

func newBackupListCommand() *cobra.Command {
	var dataURL string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list (META-URL | --data DATA-URL) [--json]",
		Short: "List the metadata backups, newest first",
		Long: `List the metadata backups in the volume's data store, newest first: name, when
it was taken (UTC), size, kind (auto: taken by a mount's schedule and
deleted by it beyond --backup-keep; manual: taken by cairn backup now and
kept until deleted), the volume it is of (the start of its UUID), and
whether a snapshot holds the data it references (--backup-hold).

With --data DATA-URL the data store is read directly, without the
metadata: that works when the metadata is lost (HELD is then unknown).
With --json, print a JSON array of {name, time, size, kind, volume, held}.`,
		Example: `  cairn backup list pebble:///var/lib/cairn/meta
  cairn backup list --data file:///var/lib/cairn/data
  AWS_ACCESS_KEY_ID=… AWS_SECRET_ACCESS_KEY=… cairn backup list --json --data 's3://vol1?endpoint=https://s3.example.com'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			metaURL, err := backupTarget(args, dataURL)
			if err != nil {
				return err
			}
			if metaURL != "" {
				return runAdmin(cmd.Context(), metaURL, daemon.Request{Verb: "backup-list", Flags: jsonFlag(asJSON)}, cmd.OutOrStdout())
			}
			return withDataStore(cmd.Context(), dataURL, func(objs object.Store) error {
				list, err := daemon.ListBackups(cmd.Context(), objs)
				if err != nil {
					return err
				}
				return daemon.WriteBackupList(cmd.OutOrStdout(), list, asJSON)
			})
		},
	}
	cmd.Flags().StringVar(&dataURL, "data", "", "read the backups from this data store, without the volume's metadata")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newBackupNowCommand() *cobra.Command {
	var hold, asJSON bool
	cmd := &cobra.Command{
		Use:   "now META-URL [--hold] [--json]",
		Short: "Take a metadata backup now",
		Long: `Take a metadata backup of the volume now, into its data store, whether or not
it is mounted (an embedded volume's is taken by its mount process). It is a
manual backup: no schedule deletes it; cairn backup delete does. With
--hold, a snapshot of the volume (backup-NAME, shown under .snapshots like
any other) keeps the data the backup references until the backup is
deleted.`,
		Example: `  cairn backup now pebble:///var/lib/cairn/meta
  cairn backup now --hold 'postgres://cairn@db1/vol1'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := daemon.Request{Verb: "backup-now", Flags: jsonFlag(asJSON)}
			req.Flags["hold"] = strconv.FormatBool(hold)
			return runAdmin(cmd.Context(), args[0], req, cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&hold, "hold", false, "keep a snapshot that holds the backup's data until the backup is deleted")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

func newBackupDeleteCommand() *cobra.Command {
	var dataURL string
	cmd := &cobra.Command{
		Use:   "delete (META-URL | --data DATA-URL) NAME...",
		Short: "Delete metadata backups",
		Long: `Delete the named backups from the volume's data store, and the snapshots that
hold their data (--hold, --backup-hold). With --data DATA-URL, without the
metadata, only the backup objects are deleted: a snapshot holding one's data
stays until it is deleted with cairn snapshot delete.`,
		Example: `  cairn backup delete pebble:///var/lib/cairn/meta 20240501T020000.000Z-1a2b3c4d-manual.cdump`,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dataURL != "" {
				return withDataStore(cmd.Context(), dataURL, func(objs object.Store) error {
					return daemon.DeleteBackups(cmd.Context(), objs, nil, args, cmd.OutOrStdout())
				})
			}
			if len(args) < 2 {
				return errors.New("give the volume's META-URL (or --data DATA-URL) and the names of the backups to delete")
			}
			return runAdmin(cmd.Context(), args[0], daemon.Request{Verb: "backup-delete", Args: args[1:]}, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&dataURL, "data", "", "delete from this data store, without the volume's metadata")
	return cmd
}

func newBackupRestoreCommand() *cobra.Command {
	var dataURL string
	var force, asJSON bool
	var workers int
	cmd := &cobra.Command{
		Use:   "restore [--data DATA-URL] NAME|latest NEW-META-URL [--force]",
		Short: "Load a metadata backup into an empty metadata store",
		Long: `Load the backup NAME (or the newest one, latest) into the metadata store at
NEW-META-URL, which must be empty (an embedded directory that does not exist
or is empty, a PostgreSQL database without a Cairn volume), of either
engine. The restored volume uses the data store the backup was read from:
--data DATA-URL, or the data store of the volume NEW-META-URL holds when
--force replaces it. That volume must not be mounted anywhere.

` + backupMetadataOnly + `

Procedure when the metadata is lost: cairn backup list --data DATA-URL,
then cairn backup restore --data DATA-URL latest NEW-META-URL, cairn fsck
NEW-META-URL, and mount NEW-META-URL. The restored volume hands out slice
ids far past the backup's, so the objects the lost volume wrote after the
backup become orphans that cairn gc --delete frees.

Never use the restored volume and the volume the backup was taken from side
by side read-write: they share their data store, and each would free
objects the other reads. To take a file out of an old backup while the
volume lives, restore it into a new store and mount that with --read-only
(or, better, use a snapshot: each held backup is one, under .snapshots).

A restore that stops half way leaves a store that refuses to mount; the
same command run again finishes it.`,
		Example: `  cairn backup restore --data file:///var/lib/cairn/data latest pebble:///var/lib/cairn/meta-new
  cairn backup restore --data 's3://vol1?endpoint=https://s3.example.com' 20240501T020000.000Z-1a2b3c4d-auto.cdump 'postgres://cairn@db2/vol1'
  cairn backup restore --force latest pebble:///var/lib/cairn/meta`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := new(daemon.DumpProgress)
			var total atomic.Int64
			var size int64
			stop := startProgress(os.Stderr, func() string {
				line := rateLine("restore", p, 0)()
				if n := total.Load(); n > 0 {
					line += fmt.Sprintf(", %.0f%% of the backup", 100*float64(p.Bytes.Load())/float64(n))
				}
				return line
			})
			r, err := daemon.RestoreBackup(cmd.Context(), daemon.RestoreOptions{MetaURL: args[1], DataURL: dataURL, Name: args[0],
				Force: force, Workers: workers, Progress: p, Total: &size, Logger: stderrLogger(slog.LevelWarn)})
			total.Store(size)
			stop()
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(r)
			}
			return printRestore(cmd.OutOrStdout(), r)
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataURL, "data", "", "the data store the backup is in, which the restored volume uses (default: the data store of the volume at NEW-META-URL)")
	f.BoolVar(&force, "force", false, "replace the volume NEW-META-URL holds (it must not be mounted)")
	f.IntVar(&workers, "workers", 0, "parallel writers (default: 2 per CPU, at least 4)")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

func printRestore(w io.Writer, r daemon.RestoreReport) error {
	how := "restored"
	if r.Resumed {
		how = "finished the interrupted restore of"
	}
	_, err := fmt.Fprintf(w, `%s backup %s (volume %q, taken %s, %d inodes) into %s in %.1fs; data store %s.
A backup holds metadata only: files deleted after %s may have lost their data.
Run 'cairn fsck %s' before mounting: it names them.
`, how, r.Backup.Name, r.Volume, r.Backup.Time.Format(time.RFC3339), r.Inodes, r.MetaURL, r.Seconds, r.DataURL,
		r.Backup.Time.Format(time.RFC3339), r.MetaURL)
	return err
}

// backupFlags are cairn mount's automatic backup flags.
type backupFlags struct {
	interval time.Duration
	keep     int
	hold     bool
}

// defaultBackupInterval and defaultBackupKeep: the schedule of an
// embedded volume's mount that sets none.
const (
	defaultBackupInterval = time.Hour
	defaultBackupKeep     = 24
)

func (b *backupFlags) register(f *pflag.FlagSet) {
	f.DurationVar(&b.interval, "backup-interval", 0, "take a metadata backup into the data store this often, the first one interval after mounting (default: 1h on an embedded volume, none on a shared one; 0: none); see cairn backup")
	f.IntVar(&b.keep, "backup-keep", defaultBackupKeep, "automatic metadata backups kept; older ones are deleted")
	f.BoolVar(&b.hold, "backup-hold", false, "keep a snapshot for each automatic backup until the backup is deleted, so that the data it references stays in the data store (costs the space of what changes meanwhile)")
}

// schedule returns the mount's backup schedule: the flags, or the
// default for the volume's kind when --backup-interval was not given (none
// on read-only and snapshot mounts, which cannot take backups).
func (b *backupFlags) schedule(f *pflag.FlagSet, shared, readOnly bool) daemon.BackupSchedule {
	s := daemon.BackupSchedule{Interval: b.interval, Keep: b.keep, Hold: b.hold}
	if !f.Changed("backup-interval") {
		s.Interval = 0
		if !shared && !readOnly {
			s.Interval = defaultBackupInterval
		}
	}
	return s
}
