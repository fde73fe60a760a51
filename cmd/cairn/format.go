package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cairnfs/cairn/internal/daemon"
	"github.com/cairnfs/cairn/internal/object"
)

func newFormatCommand() *cobra.Command {
	var o daemon.FormatOptions
	var blockSize string
	var capacity string
	var inlineMax string
	cmd := &cobra.Command{
		Use:   "format [flags] META-URL NAME",
		Short: "Create a new volume",
		Long: `Create a new volume: its settings and root directory in the metadata engine
at META-URL, and a marker in its data store. Refuses to overwrite an existing
volume unless --force is given.

META-URL: pebble:///absolute/path (embedded metadata, put it on your fastest
device), or postgres://user[:password]@host[:port]/database (shared: many
hosts mount the volume; the database must exist, Cairn creates its table).
--data: file:///absolute/path (default for pebble: a "data" directory beside
the metadata), or s3://bucket[/prefix]?endpoint=http://host:port (created if
missing; credentials as for every command, see cairn --help).
--inline-max: a file written in one piece of at most this size (a slice)
keeps its data in the metadata engine: it costs a metadata transaction
instead of an object PUT. cairn config --inline-max changes it for new files.
--trash-days N: removed files, removed trees and files replaced by a rename
wait N days in the hidden, read-only /.trash before they are destroyed;
cairn trash lists, restores and purges them (cairn config --trash-days
changes it).`,
		Example: `  cairn format pebble:///var/lib/cairn/meta myvol
  cairn format --data file:///srv/cairn-data --block-size 1M pebble:///nvme/cairn/meta myvol
  AWS_ACCESS_KEY_ID=… AWS_SECRET_ACCESS_KEY=… cairn format \
      --data 's3://vol1?endpoint=http://s3.lan:7070' 'postgres://cairn@db1/vol1' vol1`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.MetaURL, o.Name = args[0], args[1]
			bs, err := parseSize(blockSize)
			if err != nil {
				return fmt.Errorf("--block-size: %w", err)
			}
			o.BlockSize = int(bs)
			im, err := parseSize(inlineMax)
			if err != nil {
				return fmt.Errorf("--inline-max: %w", err)
			}
			o.InlineMax = int(min(im, 1<<30))
			if im == 0 {
				o.InlineMax = -1 // none
			}
			if capacity != "" {
				if o.Capacity, err = parseSize(capacity); err != nil {
					return fmt.Errorf("--capacity: %w", err)
				}
			}
			s, err := daemon.Format(cmd.Context(), o)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "formatted volume %q (uuid %s)\n  metadata: %s\n  data:     %s\n  block size: %d bytes\n  inline limit: %d bytes\n",
				s.Name, s.UUID, object.RedactURL(o.MetaURL), object.RedactURL(s.DataURL), s.BlockSize, s.InlineMax)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.DataURL, "data", "", "data store URL (file:///path); default: a data directory beside the metadata")
	f.StringVar(&blockSize, "block-size", "4M", "largest object size (64K..16M, power of two)")
	f.StringVar(&inlineMax, "inline-max", "16K", "slices (small files) of at most this size keep their data in the metadata engine, not the data store (0 = none, at most 64K)")
	f.StringVar(&capacity, "capacity", "", "volume capacity reported by statfs and enforced (e.g. 10T); default unlimited")
	f.Uint64Var(&o.Inodes, "inodes", 0, "maximum number of inodes; 0 = unlimited")
	f.IntVar(&o.TrashDays, "trash-days", 0, "keep removed files this many days in /.trash, for cairn trash restore; 0 = no trash")
	f.BoolVar(&o.Force, "force", false, "format over an existing volume (its files become unreachable)")
	return cmd
}
