package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairnfs/cairn/internal/daemon"
	"github.com/cairnfs/cairn/internal/kv"
)

// findBadInput is cairn find's exit status for a wrong command line, a
// path or snapshot that does not exist; 1 is a failure to search.
const findBadInput = 2

func newFindCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "find META-URL [PATH...] [TEST...] [-print0|--json|-summary]",
		Short: "Search a volume's files by name, type, size, time, owner... over metadata alone",
		Long: `Search the volume's namespace as find(1) would, reading only the metadata
engine: no mount is needed, no file data is read, and it works while the
volume is mounted (an embedded volume is asked through its mount process).
Directories are searched in parallel, so the order of the output is not
find's: sort it if you need an order.

PATH is a path in the volume, from its root (default /; a relative path is
from the root too); paths are printed starting with PATH as given, as find
prints them. Symlinks are not followed.

Tests (every test given must hold: they are ANDed; -not or ! negates the
test that follows; there is no -o, parentheses or comma):
  -name PATTERN     the name matches a shell pattern (* ? [...], as find's,
                    so * matches a leading dot); -iname ignores case
  -path PATTERN     the whole printed path matches (* matches / too); -ipath
  -type T           f d l p s c b, or several: -type f,l
  -size [+-]N[U]    size in units U, rounded up as find does: c bytes, w 2
                    bytes, b 512 bytes (the default), k KiB, M MiB, G GiB;
                    +N more than N units, -N fewer (-size -1M: empty files)
  -mtime [+-]N      modified N days ago, counting whole days as find does
                    (+N: more than N whole days ago, -N: less than N days
                    ago); -ctime for the change time
  -newer FILE       modified after FILE (a path in the volume, or in the
                    snapshot searched) was
  -user NAME        owned by NAME (this host's user database; a number
                    is a uid); -group NAME; -uid [+-]N; -gid [+-]N
  -perm MODE        permission bits exactly MODE; -perm -MODE: all of them;
                    -perm /MODE: any of them (octal, or symbolic: u+w,g=r)
  -links [+-]N      N hard links; -inum [+-]N: inode number
  -inline           a file whose data is kept in the metadata engine (small
                    files on a volume with an inline limit)
  -changed-since S  changed since snapshot S: attributes, data, extended
                    attributes or symlink target differ, or the name is new
                    (created, renamed or linked since); a directory whose
                    entries changed has changed

Options:
  -snapshot S       search snapshot S as it was taken, not the live volume
  -maxdepth N       descend at most N levels below PATH (0: PATH alone)
  -mindepth N       test and print nothing above level N
  -print0           end each path with a NUL, not a newline (for xargs -0)
  --json            one JSON object per line: path, ino, type, size, mode
                    (permission bits), uid, gid, mtime, nlink; path_base64
                    too when the path is not UTF-8
  -summary          instead of paths, one line per directory searched,
                    children before parents, as du: the number of matching
                    entries below it, their bytes (apparent sizes; a file
                    with two names counts twice) and its path, tab-separated
                    (with --json: {path, entries, bytes})

Exit status: 0 the search ran (whether or not anything matched); 1 the
search failed (a store error); 2 a wrong command line, or a PATH, FILE or
snapshot that does not exist.`,
		Example: `  cairn find pebble:///var/lib/cairn/meta / -name '*.log' -size +100M
  cairn find pebble:///var/lib/cairn/meta /home -user ann -mtime -7 -print0 | xargs -0 ls -ld
  cairn find pebble:///var/lib/cairn/meta /srv -changed-since nightly -type f
  cairn find pebble:///var/lib/cairn/meta /etc -snapshot nightly -name passwd
  cairn find --json 'postgres://cairn@db1/vol1' /data -inline | jq -r .path
  cairn find pebble:///var/lib/cairn/meta /home -maxdepth 2 -summary`,
		// find's tests start with one dash and are not flags.
		DisableFlagParsing:    true,
		DisableFlagsInUseLine: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			// --json may come anywhere, before the META-URL too.
			var rest []string
			asJSON := false
			for _, a := range args {
				switch a {
				case "-h", "--help", "-help":
					return cmd.Help()
				case "--json":
					asJSON = true
					continue
				}
				rest = append(rest, a)
			}
			if len(rest) == 0 || strings.HasPrefix(rest[0], "-") {
				return &exitError{code: findBadInput, err: fmt.Errorf("find: want META-URL first (see cairn find --help)")}
			}
			metaURL, exprArgs := rest[0], rest[1:]
			if asJSON {
				exprArgs = append(exprArgs, "--json")
			}
			now := time.Now()
			spec, err := daemon.ParseFind(exprArgs, now)
			if err == nil {
				stop := func() {}
				if spec.Summary { // a terminal shows how far it got (its output waits for the end)
					p := new(daemon.FindProgress)
					spec.Progress = p
					start := time.Now()
					stop = startProgress(os.Stderr, func() string {
						n := p.Entries.Load()
						return fmt.Sprintf("find: %d entries in %d directories, %.0f entries/s", n, p.Dirs.Load(), float64(n)/time.Since(start).Seconds())
					})
				}
				err = daemon.FindLocal(cmd.Context(), metaURL, stderrLogger(slog.LevelWarn), spec, cmd.OutOrStdout())
				stop()
			}
			if errors.Is(err, kv.ErrLocked) {
				loc, lerr := daemon.ParseMetaURL(metaURL)
				if lerr != nil {
					return lerr
				}
				err = daemon.CallControl(loc, daemon.FindRequest(exprArgs, now), cmd.OutOrStdout())
			}
			if errors.Is(err, daemon.ErrBadInput) {
				return &exitError{code: findBadInput, err: err}
			}
			return err
		},
	}
	return cmd
}
