package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"

	"github.com/spf13/cobra"

	"github.com/cairnfs/cairn/internal/daemon"
	"github.com/cairnfs/cairn/internal/kv"
)

func newDumpCommand() *cobra.Command {
	var out, snapshot string
	var workers int
	var asJSON, snapshots bool
	cmd := &cobra.Command{
		Use:   "dump META-URL [-o FILE|-] [--snapshot NAME]",
		Short: "Write the volume's metadata, as of one instant, to a dump file",
		Long: `Write every file's metadata (names, attributes, xattrs, symlinks, hard links,
the lists of data blocks, and the small-file data kept in the metadata
engine) to one compressed, checksummed dump file, as the volume was at one
instant: a snapshot taken for the dump and deleted after it, or the snapshot
given with --snapshot; with --snapshots, the volume's snapshots come along
(they load as snapshots). The volume can stay mounted and written by any number
of clients meanwhile. The data store's objects are not copied: a dump is
loaded (cairn load) into a new metadata store that uses the same data
store, to move a volume to another metadata engine or to bring back its
metadata.

The dump goes to FILE (written as FILE.partial and renamed when complete)
or to standard output with -o -. A summary goes to standard output (to
standard error when the dump does), as JSON with --json. On a terminal,
standard error shows the progress. The format is in docs/dump-format.md.`,
		Example: `  cairn dump pebble:///var/lib/cairn/meta -o /backup/vol1.cdump
  cairn dump 'postgres://cairn@db1/vol1' --snapshot nightly -o - | ssh backup 'cat > vol1.cdump'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dest, summary, finish, err := dumpDestination(out, cmd.OutOrStdout())
			if err != nil {
				return err
			}
			err = runDump(cmd, args[0], daemon.DumpOptions{Snapshot: snapshot, Workers: workers, Snapshots: snapshots}, dest, summary, asJSON)
			return finish(err)
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "dump file, or - for standard output (required)")
	cmd.Flags().StringVar(&snapshot, "snapshot", "", "dump this snapshot (default: the volume now, through a snapshot taken for the dump)")
	cmd.Flags().BoolVar(&snapshots, "snapshots", false, "also dump the volume's snapshots (a load then has them too); not with --snapshot")
	cmd.Flags().IntVar(&workers, "workers", 0, "parallel readers (default: 4 per CPU, at least 8)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the summary as JSON")
	return cmd
}

// dumpDestination opens where a dump goes. finish ends it: on success
// the file is synced and renamed into place; on failure it is removed.
func dumpDestination(out string, stdout io.Writer) (dest io.Writer, summary io.Writer, finish func(error) error, err error) {
	switch out {
	case "":
		return nil, nil, nil, errors.New("dump: say where the dump goes: -o FILE, or -o - for standard output")
	case "-":
		if isTerminal(os.Stdout) {
			return nil, nil, nil, errors.New("dump: standard output is a terminal; write the dump to a file (-o FILE) or a pipe")
		}
		return os.Stdout, os.Stderr, func(err error) error { return err }, nil
	}
	partial := out + ".partial"
	f, err := os.OpenFile(partial, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("dump: %w", err)
	}
	finish = func(err error) error {
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(partial, out)
		}
		if err == nil {
			if d, derr := os.Open(filepath.Dir(out)); derr == nil {
				_ = d.Sync()
				d.Close()
			}
			return nil
		}
		_ = os.Remove(partial)
		return err
	}
	return f, stdout, finish, nil
}

// runDump dumps the volume directly, or through the control socket of
// the mount process holding its embedded engine.
func runDump(cmd *cobra.Command, metaURL string, o daemon.DumpOptions, dest, summary io.Writer, asJSON bool) error {
	ctx := cmd.Context()
	loc, err := daemon.ParseMetaURL(metaURL)
	if err != nil {
		return err
	}
	vol, err := daemon.OpenVolume(ctx, daemon.VolumeOptions{MetaURL: metaURL, Logger: stderrLogger(slog.LevelWarn)})
	if errors.Is(err, kv.ErrLocked) {
		req := daemon.Request{Verb: "dump", Flags: jsonFlag(asJSON)}
		req.Flags["snapshot"] = o.Snapshot
		req.Flags["workers"] = strconv.Itoa(o.Workers)
		req.Flags["snapshots"] = strconv.FormatBool(o.Snapshots)
		cw := &countingWriter{w: dest}
		stop := startProgress(os.Stderr, func() string {
			return "dump (through the mount process): " + fmtSize(cw.n.Load())
		})
		err := daemon.CallControl(loc, req, &daemon.SplitOutput{Data: cw, Text: summary})
		stop()
		return err
	}
	if err != nil {
		return err
	}
	defer vol.Close()
	total := uint64(0)
	if u, err := vol.Meta.Usage(ctx); err == nil {
		total = u.Inodes
	}
	o.Progress = new(daemon.DumpProgress)
	stop := startProgress(os.Stderr, rateLine("dump", o.Progress, total))
	err = daemon.Dump(ctx, vol, o, dest, summary, asJSON)
	stop()
	return err
}

func newLoadCommand() *cobra.Command {
	var dataURL string
	var force, asJSON bool
	var workers int
	cmd := &cobra.Command{
		Use:   "load FILE|- META-URL [--data URL] [--force]",
		Short: "Load a dump into an empty metadata store, of any engine",
		Long: `Load a dump written by cairn dump into the metadata store at META-URL, which
must be empty: an embedded engine's directory that does not exist yet or is
empty, or a PostgreSQL database without a Cairn volume. The engines need not
match: a dump of a Pebble volume loads into PostgreSQL and back. The loaded
volume uses the dumped volume's data store (its objects are not copied):
give --data when that store is now reached at another URL. It must hold the
marker of the same volume.

A load that stops half way (killed, a damaged dump) leaves a store that
refuses to mount and says why; running the same load again finishes it.
Until then nothing can mount a half-loaded volume. The old volume and the
loaded one must not both be used afterwards: they share their data store,
and each would delete objects the other still reads.`,
		Example: `  cairn load /backup/vol1.cdump pebble:///var/lib/cairn/meta
  cairn load vol1.cdump 'postgres://cairn@db1/vol1'`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, size, err := openDumpFile(args[0])
			if err != nil {
				return err
			}
			defer in.Close()
			cr := &countingReader{r: in}
			p := new(daemon.DumpProgress)
			stop := startProgress(os.Stderr, func() string {
				line := rateLine("load", p, 0)()
				if size > 0 {
					line += fmt.Sprintf(", %.0f%% of the file", 100*float64(cr.n.Load())/float64(size))
				}
				return line
			})
			r, err := daemon.Load(cmd.Context(), cr, daemon.LoadOptions{MetaURL: args[1], Logger: stderrLogger(slog.LevelWarn),
				LoadTuning: daemon.LoadTuning{DataURL: dataURL, Force: force, Workers: workers, Progress: p}})
			stop()
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(r)
			}
			n := uint64(0)
			for _, c := range r.Records {
				n += c
			}
			how := "loaded"
			if r.Resumed {
				how = "finished the interrupted load of"
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s %d inodes (%d records) of volume %q in %.1fs: %.0f inodes/s\n",
				how, r.Inodes, n, r.Volume, r.Seconds, r.InodesPerS)
			return err
		},
	}
	cmd.Flags().StringVar(&dataURL, "data", "", "the volume's data store URL, if it is reached at another URL now")
	cmd.Flags().BoolVar(&force, "force", false, "overwrite whatever the metadata store holds (and accept a data store of another volume)")
	cmd.Flags().IntVar(&workers, "workers", 0, "parallel writers (default: 2 per CPU, at least 4)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the summary as JSON")
	return cmd
}

// openDumpFile opens a dump file, or standard input for "-"; size is the
// file's size when known (0: a pipe).
func openDumpFile(name string) (io.ReadCloser, int64, error) {
	if name == "-" {
		return io.NopCloser(os.Stdin), 0, nil
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, 0, fmt.Errorf("load: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("load: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return f, 0, nil
	}
	return f, fi.Size(), nil
}

type countingWriter struct {
	w io.Writer
	n atomic.Int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// newGenDumpCommand writes synthetic dumps for the metadata benchmarks
// (bench/metadump.sh).
func newGenDumpCommand() *cobra.Command {
	var out string
	var files, perDir, size int
	cmd := &cobra.Command{
		Use:   "gen-dump META-URL --files N [--size BYTES] -o FILE",
		Short: "Write a synthetic dump of N files that loads as the volume formatted at META-URL",
		Long: `Write a dump of --files files (empty, or of --size bytes kept inline) in
directories of --per-dir, with the settings and data store of the volume
formatted at META-URL: cairn load makes a volume of millions of files of it
in seconds, for benchmarks (bench/metadump.sh).`,
		Example: "  cairn gen-dump pebble:///tmp/v/meta --files 1000000 -o /tmp/1m.cdump",
		Hidden:  true,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if files <= 0 {
				return errors.New("gen-dump: --files must be positive")
			}
			dest, _, finish, err := dumpDestination(out, cmd.OutOrStdout())
			if err != nil {
				return err
			}
			return finish(daemon.SyntheticDump(cmd.Context(), args[0], files, perDir, size, dest))
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "dump file")
	cmd.Flags().IntVar(&files, "files", 0, "regular files")
	cmd.Flags().IntVar(&perDir, "per-dir", 1000, "files per directory")
	cmd.Flags().IntVar(&size, "size", 0, "bytes per file, kept inline (at most the volume's inline limit)")
	return cmd
}
