package main

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"
)

// The binary run as mount.cairn (a link to it in /sbin, /sbin/fs.d or
// /sbin/fs) is the helper mount(8) calls for file systems of type cairn,
// so that /etc/fstab lines like
//
//	pebble:///var/lib/cairn/meta /mnt/cairn cairn _netdev,allow_other,cache-dir=/x 0 0
//
// work with mount -a. mount(8) runs it as
//
//	mount.cairn SPEC DIR [-sfnv] [-N NS] [-o OPTIONS] [-t TYPE]
//
// and it mounts in the background, as cairn mount -d does, returning once
// the volume is mounted. In OPTIONS, an option named like a flag of cairn
// mount sets that flag (cache-dir=/x is --cache-dir /x; a boolean flag
// alone, like writeback, sets it true); the others go to -o, which checks
// them (mountOption). With -s (sloppy) unknown options are dropped rather
// than refused; -f (fake) checks the options and does nothing; -n, -v and
// -N are accepted (no mtab; verbose is the default; the caller has entered
// the namespace). It prints nothing but errors, unless -v.

// mountHelperNames are the names under which the binary is mount(8)'s
// helper.
var mountHelperNames = []string{"mount.cairn", "mount.fuse.cairn"}

// isMountHelper reports whether argv0 names the mount helper.
func isMountHelper(argv0 string) bool {
	base := filepath.Base(argv0)
	for _, n := range mountHelperNames {
		if base == n {
			return true
		}
	}
	return false
}

// mountHelperArgs turns the arguments mount(8) gives its helper into
// those of cairn mount -d. fake, verbose: mount(8) asked for -f, -v.
func mountHelperArgs(args []string, mountFlags *pflag.FlagSet) (out []string, fake, verbose bool, err error) {
	var pos, opts []string
	sloppy := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-o" || a == "-t" || a == "-N":
			if i+1 >= len(args) {
				return nil, false, false, fmt.Errorf("mount.cairn: %s needs a value", a)
			}
			if a == "-o" {
				opts = append(opts, strings.Split(args[i+1], ",")...)
			}
			i++
		case strings.HasPrefix(a, "-o") && len(a) > 2:
			opts = append(opts, strings.Split(a[2:], ",")...)
		case strings.HasPrefix(a, "-") && len(a) > 1:
			for _, c := range a[1:] {
				switch c {
				case 's':
					sloppy = true
				case 'f':
					fake = true
				case 'v':
					verbose = true
				case 'n':
				default:
					return nil, false, false, fmt.Errorf("mount.cairn: unknown option -%c (mount(8) passes -s, -f, -n, -v, -N, -o, -t)", c)
				}
			}
		default:
			pos = append(pos, a)
		}
	}
	if len(pos) != 2 {
		return nil, false, false, fmt.Errorf("mount.cairn: want SPEC DIR (the volume's metadata URL and the mount point), got %q", pos)
	}
	out = []string{"mount", "-d"}
	var fuseOpts []string
	for _, o := range opts {
		if o == "" {
			continue
		}
		name, value, hasValue := strings.Cut(o, "=")
		if f := mountFlags.Lookup(name); f != nil && name != "options" && name != "daemon" {
			switch {
			case hasValue:
				out = append(out, "--"+name+"="+value)
			case f.Value.Type() == "bool":
				out = append(out, "--"+name)
			default:
				return nil, false, false, fmt.Errorf("mount.cairn: option %s needs a value (%s=…)", name, name)
			}
			continue
		}
		keep, err := mountOption(o)
		switch {
		case o == "allow_other" || o == "ro":
			keep = true
		case err != nil && sloppy:
			continue
		case err != nil:
			return nil, false, false, fmt.Errorf("mount.cairn: %w", err)
		}
		if keep {
			fuseOpts = append(fuseOpts, o)
		}
	}
	if len(fuseOpts) > 0 {
		out = append(out, "-o", strings.Join(fuseOpts, ","))
	}
	return append(out, pos...), fake, verbose, nil
}
