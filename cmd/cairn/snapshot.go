package main

import (
	"strconv"

	"github.com/spf13/cobra"

	"github.com/cairnfs/cairn/internal/daemon"
)

func newSnapshotCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Create, list, delete and compare snapshots of a volume",
		Long: `Snapshots are named, read-only, point-in-time views of a whole volume. Taking
one costs the same whatever the volume's size; afterwards, changed data is
kept for as long as a snapshot can see it.

Every mount of the volume shows its snapshots under the hidden directory
.snapshots in the mount's root (not listed by ls, but reachable by path):
MOUNTPOINT/.snapshots/NAME is the volume as it was when NAME was taken, and
nothing under it can be changed (EROFS). 'cairn mount --snapshot NAME'
mounts one snapshot on its own.

These verbs work whether or not the volume is mounted (an embedded volume
is asked through its mount process).`,
		Example: `  cairn snapshot create pebble:///var/lib/cairn/meta before-upgrade
  ls /mnt/cairn/.snapshots/before-upgrade
  cairn snapshot list pebble:///var/lib/cairn/meta
  cairn snapshot diff pebble:///var/lib/cairn/meta before-upgrade
  cairn snapshot restore pebble:///var/lib/cairn/meta before-upgrade /etc/app /etc/app.before
  cairn snapshot delete pebble:///var/lib/cairn/meta before-upgrade`,
	}
	cmd.AddCommand(
		newSnapshotCreateCommand(),
		newSnapshotListCommand(),
		newSnapshotDeleteCommand(),
		newSnapshotDiffCommand(),
		newSnapshotRestoreCommand(),
	)
	return cmd
}

func newSnapshotCreateCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "create META-URL NAME",
		Short: "Take a snapshot of the volume",
		Long: `Take a snapshot of the whole volume called NAME (the rules of a file name
apply: no '/', not '.' or '..'). It contains everything committed before it:
files closed or fsynced. Data an open file still buffers is not in it.`,
		Example: `  cairn snapshot create pebble:///var/lib/cairn/meta nightly-2024-05-01
  cairn snapshot create 'postgres://cairn@db1/vol1' before-migration`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := daemon.Request{Verb: "snapshot-create", Args: []string{args[1]}}
			return runAdmin(cmd.Context(), args[0], req, cmd.OutOrStdout())
		},
	}
}

func newSnapshotListCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list [--json] META-URL",
		Short: "List the snapshots with the space each one alone holds",
		Long: `List the volume's snapshots, oldest first: name, creation time, epoch, and the
space held only by that snapshot (what deleting it would free). With --json,
print a JSON array of {name, epoch, created, bytes, slices}.`,
		Example: `  cairn snapshot list pebble:///var/lib/cairn/meta
  cairn snapshot list --json pebble:///var/lib/cairn/meta | jq -r '.[].name'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := daemon.Request{Verb: "snapshot-list", Flags: map[string]string{"json": strconv.FormatBool(asJSON)}}
			return runAdmin(cmd.Context(), args[0], req, cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newSnapshotDeleteCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "delete META-URL NAME",
		Short: "Delete a snapshot",
		Long: `Delete the snapshot NAME. It disappears from every mount at once (files of it
still open fail with ESTALE); then the metadata versions only it could see
are pruned, with progress shown when that takes long. The data blocks only
it held are freed by the mounts' background deletes. An interrupted
deletion is finished by the next 'cairn gc' or deletion.`,
		Example: "  cairn snapshot delete pebble:///var/lib/cairn/meta nightly-2024-05-01",
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := daemon.Request{Verb: "snapshot-delete", Args: []string{args[1]}}
			return runAdmin(cmd.Context(), args[0], req, cmd.OutOrStdout())
		},
	}
}

func newSnapshotDiffCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "diff [--json] META-URL A [B]",
		Short: "Show what changed between two snapshots, or since a snapshot",
		Long: `Show the paths that differ between snapshot A and snapshot B (B omitted: the
live volume), one line each, as they are found:

  + PATH          created
  - PATH          deleted
  M PATH          modified (content, attributes or extended attributes;
                  a directory whose entries changed)
  R OLD -> NEW    renamed (and maybe modified)

Paths holding control characters or " -> " are quoted. With --json, print one
JSON object per line: {op, path, old_path, ino, type}.`,
		Example: `  cairn snapshot diff pebble:///var/lib/cairn/meta monday
  cairn snapshot diff pebble:///var/lib/cairn/meta monday tuesday
  cairn snapshot diff --json pebble:///var/lib/cairn/meta monday | jq -r 'select(.op=="deleted") | .path'`,
		Args: cobra.RangeArgs(2, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			to := ""
			if len(args) == 3 {
				to = args[2]
			}
			req := daemon.Request{Verb: "snapshot-diff", Args: []string{args[1], to},
				Flags: map[string]string{"json": strconv.FormatBool(asJSON)}}
			return runAdmin(cmd.Context(), args[0], req, cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per change")
	return cmd
}

func newSnapshotRestoreCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "restore META-URL NAME PATH [DEST]",
		Short: "Copy a file or tree from a snapshot back into the live volume",
		Long: `Copy PATH (a file, symlink or whole directory tree, as it is in snapshot NAME)
to DEST in the live volume (default: PATH itself). DEST must not exist; its
parent must. No data is copied: the copies share the snapshot's blocks, and
those blocks stay until neither the copies nor the snapshot use them.
Modes, owners, times, extended attributes and hard links inside the tree
are kept. Paths are from the root of the volume. A mount of an embedded
volume, which runs the restore, tells its kernel to drop what it cached of
DEST and its parent; other clients of a shared volume see DEST once their
kernels' cached failed lookup (--negative-timeout) and the parent's
attributes (--attr-timeout) expire.`,
		Example: `  cairn snapshot restore pebble:///var/lib/cairn/meta nightly /home/ann/report.odt /home/ann/report.old.odt
  cairn snapshot restore 'postgres://cairn@db1/vol1' before-migration /srv/db`,
		Args: cobra.RangeArgs(3, 4),
		RunE: func(cmd *cobra.Command, args []string) error {
			dst := args[2]
			if len(args) == 4 {
				dst = args[3]
			}
			req := daemon.Request{Verb: "snapshot-restore", Args: []string{args[1], args[2], dst}}
			return runAdmin(cmd.Context(), args[0], req, cmd.OutOrStdout())
		},
	}
}
