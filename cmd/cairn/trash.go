package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairnfs/cairn/internal/daemon"
)

func newTrashCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "trash",
		Short: "List, restore and purge removed files kept in the trash",
		Long: `With the trash on (cairn format --trash-days N, cairn config --trash-days N),
a removed file, a removed directory (so every file and directory of an
rm -rf'd tree) and a file replaced by a rename are kept for N days in the
hidden directory /.trash of the volume, in one bucket per hour of removal
(/.trash/2026-12-05-09/PARENT-INODE-NAME: the entry names the directory it
was removed from). The trash is read-only: removing, renaming or creating
anything in it fails with EPERM ("operation not permitted"); only these
verbs change it. A client of the volume purges what is older than N days
once an hour.

These verbs work whether or not the volume is mounted (an embedded volume
is asked through its mount process).`,
		Example: `  cairn trash list pebble:///var/lib/cairn/meta
  cairn trash restore pebble:///var/lib/cairn/meta /projects/report
  cairn trash purge --older-than 48h pebble:///var/lib/cairn/meta`,
	}
	cmd.AddCommand(newTrashListCommand(), newTrashRestoreCommand(), newTrashPurgeCommand())
	return cmd
}

func newTrashListCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list [--json] META-URL",
		Short: "List the trash with the original paths of its entries",
		Long: `List what the trash holds, oldest first: when it was removed, its type and
size, the path it was removed from, and its entry (BUCKET/NAME). With --json,
print a JSON array of {bucket, name, ino, parent, orig_name, type, length,
nlink, path, removed}.`,
		Example: `  cairn trash list pebble:///var/lib/cairn/meta
  cairn trash list --json 'postgres://cairn@db1/vol1' | jq -r '.[].path'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := daemon.Request{Verb: "trash-list", Flags: map[string]string{"json": strconv.FormatBool(asJSON)}}
			return runAdmin(cmd.Context(), args[0], req, cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newTrashRestoreCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "restore META-URL PATH|ENTRY...",
		Short: "Put removed files and trees back where they were",
		Long: `Put entries of the trash back at their original paths, with their inodes,
contents, attributes, symlinks and hard links. PATH (absolute, in the volume)
restores everything removed at that path or below it: a whole removed tree
comes back with one command. ENTRY (BUCKET/NAME as trash list shows it, or
/.trash/BUCKET/NAME) restores that entry and what was removed below it.
Directories come back before their contents; of several removals of one
path, the latest is restored. An entry whose name was taken again or whose
directory is gone is reported and left in the trash.`,
		Example: `  cairn trash restore pebble:///var/lib/cairn/meta /projects/report
  cairn trash restore pebble:///var/lib/cairn/meta 2026-12-05-09/1-4711-notes.txt`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := daemon.Request{Verb: "trash-restore", Args: args[1:]}
			return runAdmin(cmd.Context(), args[0], req, cmd.OutOrStdout())
		},
	}
}

func newTrashPurgeCommand() *cobra.Command {
	var olderThan, before string
	var all bool
	cmd := &cobra.Command{
		Use:   "purge META-URL (--all | --older-than DURATION | --before TIME)",
		Short: "Destroy what the trash holds, now",
		Long: `Destroy the entries of the trash removed before a time, whole hour buckets at
a time: --older-than DURATION (e.g. 36h) before now, --before TIME (RFC 3339,
e.g. 2026-12-05T09:00:00Z), or --all. Their data is deleted in the background
as after any removal. Without a flag, nothing is purged.`,
		Example: `  cairn trash purge --all pebble:///var/lib/cairn/meta
  cairn trash purge --older-than 72h 'postgres://cairn@db1/vol1'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n := 0
			for _, set := range []bool{all, olderThan != "", before != ""} {
				if set {
					n++
				}
			}
			if n != 1 {
				return fmt.Errorf("trash purge: give one of --all, --older-than DURATION or --before TIME")
			}
			req := daemon.Request{Verb: "trash-purge", Flags: map[string]string{}}
			switch {
			case olderThan != "":
				d, err := time.ParseDuration(olderThan)
				if err != nil || d < 0 {
					return fmt.Errorf("--older-than %q: want a duration such as 36h", olderThan)
				}
				req.Flags["before"] = time.Now().Add(-d).UTC().Format(time.RFC3339Nano)
			case before != "":
				t, err := time.Parse(time.RFC3339, before)
				if err != nil {
					return fmt.Errorf("--before %q: want a time such as 2026-12-05T09:00:00Z", before)
				}
				req.Flags["before"] = t.UTC().Format(time.RFC3339Nano)
			}
			return runAdmin(cmd.Context(), args[0], req, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.BoolVar(&all, "all", false, "purge everything")
	f.StringVar(&olderThan, "older-than", "", "purge what was removed longer ago than this (e.g. 36h)")
	f.StringVar(&before, "before", "", "purge what was removed before this time (RFC 3339)")
	return cmd
}
