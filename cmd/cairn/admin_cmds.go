package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/cairnfs/cairn/internal/daemon"
)

func newStatusCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status META-URL",
		Short: "Show a volume's settings, usage and sessions",
		Long: `Show a volume's settings, usage and client sessions. Works whether or not the
volume is mounted (an embedded volume is asked through its mount process).`,
		Example: "  cairn status pebble:///var/lib/cairn/meta",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runAdmin(cmd.Context(), args[0], daemon.Request{Verb: "status", Flags: jsonFlag(asJSON)}, cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}

// jsonFlag is the flags of an admin request that asks for JSON or not.
func jsonFlag(asJSON bool) map[string]string {
	return map[string]string{"json": strconv.FormatBool(asJSON)}
}

// fsck's exit codes: a script tells "the volume has problems" from "the
// check did not run" (issue 38's choice; fsck(8)'s 4 and 8 would do as
// well, but no tool calls cairn fsck through fsck(8)).
const (
	fsckProblems = 1 // problems found, listed, left as they are
	fsckFailed   = 2 // the check could not run, or bad usage
)

func newFsckCommand() *cobra.Command {
	var asJSON, repair, scrub bool
	var scrubRate string
	cmd := &cobra.Command{
		Use:   "fsck META-URL",
		Short: "Check metadata invariants and that referenced objects exist",
		Long: `Check the volume's metadata invariants (dentries, link counts, parents, chunk
maps, counters) and that every block object the metadata references exists
with its size (one listing of the data store). Problems are named by inode
and path.

--scrub also reads every block object and verifies its checksums (8 reads at
a time, at most --scrub-rate bytes a second), which finds a flipped byte.
--repair fixes the metadata problems that can be fixed safely (orphans,
counters, dangling entries, stale holds and records), then checks again and
lists what it repaired and what is left; missing or damaged block objects are
never "repaired" (that would drop data): they are listed.

Exit status: 0 no problems found; 1 problems found (listed), left as they
are; 2 the check could not run (the volume could not be opened, a store did
not answer, bad usage).`,
		Example: "  cairn fsck pebble:///var/lib/cairn/meta",
		Args: func(cmd *cobra.Command, args []string) error {
			if err := cobra.ExactArgs(1)(cmd, args); err != nil {
				return &exitError{code: fsckFailed, err: err}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			req := daemon.Request{Verb: "fsck", Flags: jsonFlag(asJSON)}
			req.Flags["repair"] = strconv.FormatBool(repair)
			req.Flags["scrub"] = strconv.FormatBool(scrub)
			if scrubRate != "" {
				n, err := parseSize(scrubRate)
				if err != nil {
					return &exitError{code: fsckFailed, err: fmt.Errorf("--scrub-rate: %w", err)}
				}
				req.Flags["scrub-rate"] = strconv.FormatUint(n, 10)
			}
			p := new(daemon.FsckProgress)
			stop := startProgress(os.Stderr, fsckLine(p))
			err := runAdmin(daemon.WithFsckProgress(cmd.Context(), p), args[0], req, cmd.OutOrStdout())
			stop()
			switch {
			case err == nil:
				return nil
			case errors.Is(err, daemon.ErrProblems):
				return &exitError{code: fsckProblems, err: err}
			default:
				return &exitError{code: fsckFailed, err: err}
			}
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object (problems, data, counts); the exit status is the same")
	cmd.Flags().BoolVar(&repair, "repair", false, "fix the metadata problems that can be fixed safely, then check again")
	cmd.Flags().BoolVar(&scrub, "scrub", false, "also read every block object and verify its checksums")
	cmd.Flags().StringVar(&scrubRate, "scrub-rate", "", "with --scrub, read at most this many bytes a second (e.g. 100M; default: no limit)")
	return cmd
}

func newGCCommand() *cobra.Command {
	var del, asJSON bool
	cmd := &cobra.Command{
		Use:   "gc [--delete] META-URL",
		Short: "Find (and delete) objects that no metadata references",
		Long: `List block objects in the data store that no metadata references: leftovers of
writes that never committed (a client killed mid-write) or of interrupted
deletes. With --delete, remove them. Slices being written by the live mount
are never touched.`,
		Example: "  cairn gc pebble:///var/lib/cairn/meta\n  cairn gc --delete pebble:///var/lib/cairn/meta",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := daemon.Request{Verb: "gc", Flags: jsonFlag(asJSON)}
			req.Flags["delete"] = strconv.FormatBool(del)
			return runAdmin(cmd.Context(), args[0], req, cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&del, "delete", false, "delete the orphan objects")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as one JSON object")
	return cmd
}

func newInfoCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "info PATH... | info META-URL INODE|/PATH-IN-VOLUME...",
		Short: "Show inode, chunks, slices and objects of files",
		Long: `Show, for files, the inode, attributes, chunks, slices and the block objects
that hold their content: files inside a mounted Cairn volume by their paths,
or, given the volume's metadata URL first, files of that volume (mounted or
not) by inode number or by absolute path inside the volume. fsck names the
inodes it finds problems with.`,
		Example: "  cairn info /mnt/cairn/data.db\n  cairn info pebble:///var/lib/cairn/meta 1234 /data.db",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if strings.Contains(args[0], "://") {
				if len(args) < 2 {
					return fmt.Errorf("info %s: name inode numbers or paths in the volume after it", args[0])
				}
				req := daemon.Request{Verb: "info", Args: args[1:], Flags: jsonFlag(asJSON)}
				req.Flags["paths"] = "true"
				return runAdmin(cmd.Context(), args[0], req, cmd.OutOrStdout())
			}
			mounts, err := daemon.Mounts()
			if err != nil {
				return err
			}
			type group struct {
				inos  []string
				names []string
			}
			groups := map[string]*group{}
			var order []string
			for _, p := range args {
				abs, err := filepath.Abs(p)
				if err != nil {
					return err
				}
				var st syscall.Stat_t
				if err := syscall.Lstat(abs, &st); err != nil {
					return fmt.Errorf("%s: %w", p, err)
				}
				_, src := innermostMount(mounts, abs)
				if src == "" {
					return fmt.Errorf("%s is not inside a mounted Cairn volume", p)
				}
				g := groups[src]
				if g == nil {
					g = &group{}
					groups[src] = g
					order = append(order, src)
				}
				ino := strconv.FormatUint(st.Ino, 10)
				g.inos = append(g.inos, ino)
				g.names = append(g.names, ino+"="+p)
			}
			sort.Strings(order)
			var errs []error
			for _, src := range order {
				g := groups[src]
				req := daemon.Request{Verb: "info", Args: g.inos, Flags: jsonFlag(asJSON)}
				req.Flags["names"] = strings.Join(g.names, "\x00")
				if err := runAdmin(cmd.Context(), src, req, cmd.OutOrStdout()); err != nil {
					errs = append(errs, err)
				}
			}
			return errors.Join(errs...)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array, one object per file (per volume, with files of several)")
	return cmd
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the version",
		Example: "  cairn version",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			fmt.Fprintf(cmd.OutOrStdout(), "cairn %s\n", version)
			return nil
		},
	}
}

func newConfigCommand() *cobra.Command {
	var name, capacity, inodes, inlineMax string
	var trashDays int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "config META-URL [--name NAME] [--capacity SIZE] [--inodes N] [--trash-days N] [--inline-max SIZE]",
		Short: "Show or change the settings that can change after format",
		Long: `Show the volume's settings, or change those that can change on a live volume:
its name, its capacity (--capacity SIZE, or unlimited), its inode limit
(--inodes N, or unlimited), how many days removed files wait in /.trash
(--trash-days N, 0 for no trash; see cairn trash) and the inline limit of new
files (--inline-max SIZE, at most 64K and below the block size, 0 for none;
volumes of format version 2 and later: files written before keep their
blocks where they are). Block size and data store are fixed at format.
Mounted clients use the new settings within a heartbeat (5 s by default);
the process that made the change (or that holds an embedded volume and was
asked through its control socket) at once. Writes and creates past a
lowered limit fail with ENOSPC; what is stored already stays. On a shared
volume a client that writes back (--meta-write-back) takes a grant of each
limit, an eighth of what is free and at most 64 MiB or 1,024 inodes, and
writes back the writes and creates it covers; every other client counts a
grant as used, so ENOSPC may come while grants of other clients are unused.
A client gives its grants back after a heartbeat without using them, and
when it unmounts. Near a limit (less than 8 MiB or 128 inodes free) no
grant is taken: each write and create waits for its transaction.`,
		Example: "  cairn config pebble:///var/lib/cairn/meta\n  cairn config --capacity 2T --inodes 50000000 'postgres://cairn@db1/vol1'\n  cairn config --capacity unlimited pebble:///var/lib/cairn/meta\n  cairn config --trash-days 7 --inline-max 32K pebble:///var/lib/cairn/meta",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := daemon.Request{Verb: "config", Flags: jsonFlag(asJSON)}
			if cmd.Flags().Changed("name") {
				req.Flags["name"] = name
			}
			for flag, val := range map[string]string{"capacity": capacity, "inodes": inodes} {
				if !cmd.Flags().Changed(flag) {
					continue
				}
				n := uint64(0)
				if val != "unlimited" {
					var err error
					if flag == "capacity" {
						n, err = parseSize(val)
					} else {
						n, err = strconv.ParseUint(val, 10, 64)
					}
					if err != nil || n == 0 {
						return fmt.Errorf("--%s %q: want a positive %s, or unlimited", flag, val, map[string]string{"capacity": "size", "inodes": "count"}[flag])
					}
				}
				req.Flags[flag] = strconv.FormatUint(n, 10)
			}
			if cmd.Flags().Changed("trash-days") {
				if trashDays < 0 || trashDays > daemon.MaxTrashDays {
					return fmt.Errorf("--trash-days %d: want 0 (no trash) to %d", trashDays, daemon.MaxTrashDays)
				}
				req.Flags["trash-days"] = strconv.Itoa(trashDays)
			}
			if cmd.Flags().Changed("inline-max") {
				n, err := parseSize(inlineMax)
				if err != nil || n > daemon.MaxInlineMax {
					return fmt.Errorf("--inline-max %q: want a size of at most 64K (0 for none)", inlineMax)
				}
				req.Flags["inline-max"] = strconv.FormatUint(n, 10)
			}
			return runAdmin(cmd.Context(), args[0], req, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.IntVar(&trashDays, "trash-days", 0, "days removed files wait in /.trash before they are destroyed; 0 = no trash")
	f.StringVar(&inlineMax, "inline-max", "", "inline limit of new files (e.g. 16K; 0 = none, at most 64K)")
	f.StringVar(&name, "name", "", "rename the volume")
	f.StringVar(&capacity, "capacity", "", "the volume's capacity (e.g. 500G), or unlimited")
	f.StringVar(&inodes, "inodes", "", "the volume's inode limit, or unlimited")
	f.BoolVar(&asJSON, "json", false, "print the settings as one JSON object")
	return cmd
}
