// Command cairn formats, mounts and administers Cairn volumes.
//
// Every verb that works on a volume takes the volume's metadata URL first:
// cairn VERB META-URL ...
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// exitError carries a specific exit code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "cairn",
		Short: "Cairn: a shared POSIX file system for clusters",
		Long: `Cairn keeps metadata in its own engine and file content in an object store.

Quick start (embedded: one host, no other service):
  cairn format pebble:///var/lib/cairn/meta myvol
  cairn mount -d pebble:///var/lib/cairn/meta /mnt/cairn`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
	}
	root.SetVersionTemplate("cairn {{.Version}}\n")
	root.AddCommand(
		newFormatCommand(),
		newMountCommand(),
		newUmountCommand(),
		newStatusCommand(),
		newInfoCommand(),
		newFsckCommand(),
		newGCCommand(),
		newStatsCommand(),
		newBenchCommand(),
		newWarmupCommand(),
		newSnapshotCommand(),
		newGatewayCommand(),
		newVersionCommand(),
	)
	return root
}

func main() {
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintf(os.Stderr, "cairn: %v\n", err)
		var ee *exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		os.Exit(1)
	}
}
