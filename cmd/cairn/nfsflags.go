package main

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/spf13/pflag"

	"github.com/cairnfs/cairn/internal/nfs"
)

// nfsExportFlags are the export options of cairn gateway nfs and of
// cairn mount --nfs-listen; they map onto nfs.Export.
type nfsExportFlags struct {
	readOnly         bool
	allow            []string
	squash           string
	anonUid, anonGid uint32
}

// nfsExportFlagNames lists the flags, for commands that accept them only
// with another flag.
var nfsExportFlagNames = []string{"nfs-export-ro", "nfs-allow", "nfs-squash", "nfs-anon-uid", "nfs-anon-gid"}

func (x *nfsExportFlags) register(f *pflag.FlagSet) {
	f.BoolVar(&x.readOnly, "nfs-export-ro", false, "export read-only: NFS clients get NFS3ERR_ROFS for every change (other front ends of the process still write)")
	f.StringSliceVar(&x.allow, "nfs-allow", nil, "serve NFS only to clients in these networks, by the TCP source address: CIDR or address, comma separated or repeated (default: every client); others get MNT3ERR_ACCES/NFS3ERR_ACCES")
	f.StringVar(&x.squash, "nfs-squash", "none", "map NFS callers to the anonymous uid/gid: none, root (uid 0 and gid 0, as root_squash) or all (as all_squash)")
	f.Uint32Var(&x.anonUid, "nfs-anon-uid", nfs.DefaultAnonID, "anonymous uid for squashed and AUTH_NONE NFS callers")
	f.Uint32Var(&x.anonGid, "nfs-anon-gid", nfs.DefaultAnonID, "anonymous gid for squashed and AUTH_NONE NFS callers")
}

// export returns the nfs.Export the flags describe.
func (x *nfsExportFlags) export() (nfs.Export, error) {
	q, err := nfs.ParseSquash(x.squash)
	if err != nil {
		return nfs.Export{}, fmt.Errorf("--nfs-squash: %w", err)
	}
	if x.anonUid == 0 || x.anonGid == 0 {
		return nfs.Export{}, fmt.Errorf("--nfs-anon-uid/--nfs-anon-gid 0: squashing to root is not offered (use --nfs-squash none)")
	}
	ex := nfs.Export{ReadOnly: x.readOnly, Squash: q, AnonUid: x.anonUid, AnonGid: x.anonGid}
	for _, s := range x.allow {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nfs.Export{}, fmt.Errorf("--nfs-allow %q: want a network (10.0.0.0/8, fd00::/8) or an address", s)
			}
			p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		ex.Allow = append(ex.Allow, p.Masked())
	}
	return ex, ex.Validate()
}
