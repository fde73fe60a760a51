package main

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// newGenManCommand writes the manual pages of every command
// (scripts/gen-man.sh keeps docs/man up to date with it).
func newGenManCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "gen-man DIR",
		Short:   "Write the manual pages of every command into DIR",
		Example: "  cairn gen-man /usr/local/share/man/man1",
		Hidden:  true,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return err
			}
			root := cmd.Root()
			root.DisableAutoGenTag = true
			h := &doc.GenManHeader{Title: "CAIRN", Section: "1", Source: "Cairn " + version, Manual: "Cairn manual"}
			// SOURCE_DATE_EPOCH, as reproducible builds set it, dates the
			// pages; else today.
			if e := os.Getenv("SOURCE_DATE_EPOCH"); e != "" {
				sec, err := strconv.ParseInt(e, 10, 64)
				if err != nil {
					return fmt.Errorf("SOURCE_DATE_EPOCH=%q: %w", e, err)
				}
				d := time.Unix(sec, 0).UTC()
				h.Date = &d
			}
			if err := doc.GenManTree(root, h, args[0]); err != nil {
				return fmt.Errorf("gen-man: %w", err)
			}
			return nil
		},
	}
}
