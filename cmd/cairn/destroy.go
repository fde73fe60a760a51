package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cairnfs/cairn/internal/daemon"
)

func newDestroyCommand() *cobra.Command {
	var yes, asJSON bool
	cmd := &cobra.Command{
		Use:   "destroy META-URL [--yes]",
		Short: "Remove a volume for good: every object of its data store and its metadata",
		Long: `Delete every object of the volume's data store, then its metadata (an
embedded volume's metadata directory is removed). Refused while any client
has the volume mounted (a client that died without unmounting does not
count once its session timed out). It asks to type the volume's name on a
terminal; elsewhere it needs --yes.

A destroy that stops half way (killed, a store that stops answering) leaves
a volume that no client can mount any more and that cairn destroy finishes
when run again. A volume loaded from another's dump shares that volume's
data store: destroying one deletes the other's data too.`,
		Example: `  cairn destroy pebble:///var/lib/cairn/meta
  cairn destroy --yes 'postgres://cairn@db1/scratch'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			confirm := func(p daemon.DestroyPlan) error {
				what := fmt.Sprintf("volume %q (uuid %s, %d inodes, %s) in %s", p.Volume, p.UUID, p.Usage.Inodes, fmtSize(int64(p.Usage.Bytes)), p.Meta)
				if p.DataURL != "" {
					what += " and every object of its data store " + p.DataURL
				} else {
					what += " (an unfinished load: its data store is left alone)"
				}
				if p.Resumed {
					what = "the rest of " + what
				}
				if yes {
					return nil
				}
				if !isTerminal(os.Stdin) || !isTerminal(os.Stderr) {
					return errors.New("destroy: would remove " + what + "; give --yes to do it without a terminal")
				}
				fmt.Fprintf(os.Stderr, "This removes %s.\nType the volume's name to confirm: ", what)
				line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
				if strings.TrimSpace(line) != p.Volume {
					return errors.New("destroy: not confirmed; nothing was removed")
				}
				return nil
			}
			r, err := daemon.Destroy(cmd.Context(), args[0], confirm, stderrLogger(slog.LevelWarn))
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(r)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "destroyed volume %q: %d objects deleted, metadata removed\n", r.Volume, r.Objects)
			return err
		},
	}
	cmd.Flags().BoolVar(&yes, "yes", false, "do not ask for confirmation")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print what was removed as JSON")
	return cmd
}
