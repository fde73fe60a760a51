package main

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/spf13/pflag"

	"github.com/cairnfs/cairn/internal/nfs"
)

func TestNFSExportFlags(t *testing.T) {
	p := netip.MustParsePrefix
	tests := []struct {
		name string
		args []string
		want nfs.Export
		err  string
	}{
		{"defaults", nil, nfs.Export{AnonUid: 65534, AnonGid: 65534}, ""},
		{"read-only", []string{"--nfs-export-ro"}, nfs.Export{ReadOnly: true, AnonUid: 65534, AnonGid: 65534}, ""},
		{"networks and addresses", []string{"--nfs-allow", "10.1.2.3/16, 192.168.7.12", "--nfs-allow", "fd00::/8,::ffff:1.2.3.4"},
			nfs.Export{Allow: []netip.Prefix{p("10.1.0.0/16"), p("192.168.7.12/32"), p("fd00::/8"), p("1.2.3.4/32")}, AnonUid: 65534, AnonGid: 65534}, ""},
		{"root squash", []string{"--nfs-squash", "root", "--nfs-anon-uid", "99", "--nfs-anon-gid", "98"}, nfs.Export{Squash: nfs.SquashRoot, AnonUid: 99, AnonGid: 98}, ""},
		{"all squash", []string{"--nfs-squash=all"}, nfs.Export{Squash: nfs.SquashAll, AnonUid: 65534, AnonGid: 65534}, ""},
		{"bad squash", []string{"--nfs-squash", "everyone"}, nfs.Export{}, "--nfs-squash"},
		{"bad network", []string{"--nfs-allow", "10.0.0.0/33"}, nfs.Export{}, "--nfs-allow"},
		{"host name", []string{"--nfs-allow", "client.example"}, nfs.Export{}, "--nfs-allow"},
		{"anon root", []string{"--nfs-anon-uid", "0"}, nfs.Export{}, "squashing to root"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var f nfsExportFlags
			fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
			f.register(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			got, err := f.export()
			if tc.err != "" {
				wantErr(t, err, tc.err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.ReadOnly != tc.want.ReadOnly || got.Squash != tc.want.Squash || got.AnonUid != tc.want.AnonUid ||
				got.AnonGid != tc.want.AnonGid || !slices.Equal(got.Allow, tc.want.Allow) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestNFSExportFlagsRefused: the commands refuse bad export flags before
// opening anything, and cairn mount refuses them without --nfs-listen.
func TestNFSExportFlagsRefused(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"gateway", "nfs", "--nfs-squash", "some", "pebble://" + dir + "/m"}, "--nfs-squash"},
		{[]string{"gateway", "nfs", "--nfs-allow", "nowhere", "pebble://" + dir + "/m"}, "--nfs-allow"},
		{[]string{"mount", "--nfs-allow", "10.0.0.0/8", "pebble://" + dir + "/m", dir}, "give --nfs-listen too"},
		{[]string{"mount", "--nfs-export-ro", "pebble://" + dir + "/m", dir}, "give --nfs-listen too"},
	}
	for _, c := range cases {
		_, err := run(t, c.args...)
		wantErr(t, err, c.want)
	}
}
