package main

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/cairnfs/cairn/internal/daemon"
)

func newQuotaCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "quota",
		Short: "Directory quotas: set, get, list, delete, check",
		Long: `A directory quota limits the bytes (file lengths rounded up to 4 KiB) and the
inodes of a directory's tree, the directory included. Writes and creates past
a limit fail with EDQUOT on every client of the volume (NFS3ERR_DQUOT through
the NFS gateway), at the exact limit. Nested quotas all apply. A rename into
another quota's tree moves the usage (EDQUOT if it does not fit there); a
tree of more than 10,000 inodes, or a file with hard links, is refused with
EXDEV instead, which mv answers by copying. A hard link into another quota's
tree is refused with EXDEV. df on a directory in a quota's tree shows that
quota. Paths are absolute paths inside the volume.`,
		Example: "  cairn quota set pebble:///var/lib/cairn/meta /projects/a --bytes 100G --inodes 1000000\n  cairn quota list pebble:///var/lib/cairn/meta",
	}
	cmd.AddCommand(newQuotaSetCommand(), newQuotaGetCommand(), newQuotaListCommand(), newQuotaDeleteCommand(), newQuotaCheckCommand())
	return cmd
}

func newQuotaSetCommand() *cobra.Command {
	var bytes, inodes string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "set META-URL PATH [--bytes SIZE] [--inodes N]",
		Short: "Set or change the quota of a directory",
		Long: `Set the quota of a directory, or change its limits (a limit not given stays as
it is; "unlimited" removes it). A new quota counts the directory's tree first
(beside any client's writes; the limits apply once the count is done); an
interrupted count resumes when the command runs again. A limit below the
current usage is allowed: then only shrinking and deleting succeed.`,
		Example: "  cairn quota set pebble:///var/lib/cairn/meta /projects/a --bytes 100G --inodes 1000000\n  cairn quota set 'postgres://cairn@db1/vol1' /home/ann --inodes unlimited",
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := daemon.Request{Verb: "quota-set", Args: args[1:], Flags: jsonFlag(asJSON)}
			for flag, val := range map[string]string{"bytes": bytes, "inodes": inodes} {
				if !cmd.Flags().Changed(flag) {
					continue
				}
				n := uint64(0)
				if val != "unlimited" {
					var err error
					if flag == "bytes" {
						n, err = parseSize(val)
					} else {
						n, err = strconv.ParseUint(val, 10, 64)
					}
					if err != nil || n == 0 {
						return fmt.Errorf("--%s %q: want a positive %s, or unlimited", flag, val, map[string]string{"bytes": "size (e.g. 100G)", "inodes": "count"}[flag])
					}
				}
				req.Flags[flag] = strconv.FormatUint(n, 10)
				if val == "unlimited" {
					req.Flags[flag] = "unlimited"
				}
			}
			if len(req.Flags) == 1 {
				return errors.New("quota set: give --bytes, --inodes or both")
			}
			return runAdmin(cmd.Context(), args[0], req, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&bytes, "bytes", "", "byte limit (e.g. 100G), or unlimited")
	f.StringVar(&inodes, "inodes", "", "inode limit, or unlimited")
	f.BoolVar(&asJSON, "json", false, "print the quota as JSON")
	return cmd
}

func newQuotaGetCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "get META-URL PATH",
		Short:   "Show the quota of a directory: limits and usage",
		Example: "  cairn quota get pebble:///var/lib/cairn/meta /projects/a",
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runAdmin(cmd.Context(), args[0], daemon.Request{Verb: "quota-get", Args: args[1:], Flags: jsonFlag(asJSON)}, cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the quota as JSON")
	return cmd
}

func newQuotaListCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "list META-URL",
		Short:   "List every directory quota with its usage",
		Example: "  cairn quota list pebble:///var/lib/cairn/meta",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runAdmin(cmd.Context(), args[0], daemon.Request{Verb: "quota-list", Flags: jsonFlag(asJSON)}, cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the quotas as a JSON array")
	return cmd
}

func newQuotaDeleteCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "delete META-URL PATH",
		Short:   "Remove the quota of a directory (its tree joins the enclosing quota, if any)",
		Example: "  cairn quota delete pebble:///var/lib/cairn/meta /projects/a",
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runAdmin(cmd.Context(), args[0], daemon.Request{Verb: "quota-delete", Args: args[1:], Flags: jsonFlag(asJSON)}, cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

func newQuotaCheckCommand() *cobra.Command {
	var asJSON, repair bool
	cmd := &cobra.Command{
		Use:   "check META-URL [--repair]",
		Short: "Count every quota's usage again from the tree and compare",
		Long: `Count every directory quota's usage (and the quota each inode names) again
from the tree, in one consistent view, and compare with what the quotas hold.
--repair fixes what differs; run it when no client is writing in the quota
trees, or a change between the count and the fix is not seen. Exit status 1
when problems were found and not repaired.`,
		Example: "  cairn quota check pebble:///var/lib/cairn/meta\n  cairn quota check --repair pebble:///var/lib/cairn/meta",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := daemon.Request{Verb: "quota-check", Flags: jsonFlag(asJSON)}
			req.Flags["repair"] = strconv.FormatBool(repair)
			return runAdmin(cmd.Context(), args[0], req, cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&repair, "repair", false, "fix what differs")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the problems as JSON")
	return cmd
}
