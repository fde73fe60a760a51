package nfs

import (
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/nfs/proto"
)

// Squash says which callers an export maps to the anonymous identity.
type Squash uint8

const (
	// SquashNone keeps every AUTH_SYS identity as sent.
	SquashNone Squash = iota
	// SquashRoot maps uid 0 to AnonUid and gid 0 (primary or
	// supplementary) to AnonGid, as knfsd's root_squash.
	SquashRoot
	// SquashAll maps every caller to AnonUid/AnonGid with no
	// supplementary groups, as knfsd's all_squash.
	SquashAll
)

// ParseSquash parses "none", "root" or "all".
func ParseSquash(s string) (Squash, error) {
	switch s {
	case "none":
		return SquashNone, nil
	case "root":
		return SquashRoot, nil
	case "all":
		return SquashAll, nil
	}
	return 0, fmt.Errorf("squash %q: want none, root or all", s)
}

func (q Squash) String() string {
	switch q {
	case SquashNone:
		return "none"
	case SquashRoot:
		return "root"
	case SquashAll:
		return "all"
	}
	return fmt.Sprintf("Squash(%d)", uint8(q))
}

// DefaultAnonID is the anonymous uid and gid unless an Export sets
// others (nobody/nogroup on Debian).
const DefaultAnonID = 65534

// Export says what the gateway serves and to whom. The gateway has one
// export, "/" (the whole volume; MNT of a directory below it is allowed,
// as knfsd allows it for subdirectories). The zero Export serves every
// client read-write with the identities they send.
type Export struct {
	// ReadOnly refuses every modifying procedure (SETATTR, WRITE, CREATE,
	// MKDIR, SYMLINK, MKNOD, REMOVE, RMDIR, RENAME, LINK) with
	// NFS3ERR_ROFS, and ACCESS grants no modification. The volume itself
	// stays writable for other front ends of the process (a FUSE mount
	// with --nfs-listen).
	ReadOnly bool
	// Allow lists the client networks served, matched against the source
	// address of the TCP connection (IPv4-mapped IPv6 addresses as IPv4).
	// Empty: every client. A client outside gets MNT3ERR_ACCES for MNT
	// and NFS3ERR_ACCES for every NFS procedure but NULL; the other MOUNT
	// procedures (EXPORT, DUMP, UMNT) answer as usual.
	Allow []netip.Prefix
	// Squash maps callers to the anonymous identity; AUTH_NONE callers
	// always are. Default SquashNone.
	Squash Squash
	// AnonUid and AnonGid are the anonymous identity (0: DefaultAnonID;
	// squashing to root is not offered).
	AnonUid, AnonGid uint32
}

func (x *Export) setDefaults() {
	if x.AnonUid == 0 {
		x.AnonUid = DefaultAnonID
	}
	if x.AnonGid == 0 {
		x.AnonGid = DefaultAnonID
	}
}

// Validate reports the first invalid field.
func (x Export) Validate() error {
	if x.Squash > SquashAll {
		return fmt.Errorf("nfs: export squash %d: want SquashNone, SquashRoot or SquashAll", x.Squash)
	}
	for _, p := range x.Allow {
		if !p.IsValid() {
			return fmt.Errorf("nfs: export allows an invalid network %v", p)
		}
	}
	return nil
}

// allows reports whether a client at the connection's remote address
// may use the export.
func (x *Export) allows(remote net.Addr) bool {
	if len(x.Allow) == 0 {
		return true
	}
	if remote == nil {
		return false
	}
	ap, err := netip.ParseAddrPort(remote.String())
	if err != nil {
		return false
	}
	a := ap.Addr().Unmap()
	for _, p := range x.Allow {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// caller maps an AUTH_SYS identity (nil: AUTH_NONE) to the caller the
// gateway passes to vfs.
func (x *Export) caller(a *proto.AuthSysParams) *base.Caller {
	anon := &base.Caller{Uid: x.AnonUid, Gid: x.AnonGid}
	if a == nil || x.Squash == SquashAll {
		return anon
	}
	c := &base.Caller{Uid: a.Uid, Gid: a.Gid, Gids: a.Gids}
	if x.Squash == SquashRoot {
		if c.Uid == 0 {
			c.Uid = x.AnonUid
		}
		if c.Gid == 0 {
			c.Gid = x.AnonGid
		}
		if len(c.Gids) > 0 {
			gids := make([]uint32, len(c.Gids))
			for i, g := range c.Gids {
				if g == 0 {
					g = x.AnonGid
				}
				gids[i] = g
			}
			c.Gids = gids
		}
	}
	return c
}

// String describes the export for logs: "rw, all clients, squash none".
func (x Export) String() string {
	x.setDefaults()
	mode := "rw"
	if x.ReadOnly {
		mode = "ro"
	}
	who := "all clients"
	if len(x.Allow) > 0 {
		var s []string
		for _, p := range x.Allow {
			s = append(s, p.String())
		}
		who = strings.Join(s, ",")
	}
	return fmt.Sprintf("%s, %s, squash %s (anon %d:%d)", mode, who, x.Squash, x.AnonUid, x.AnonGid)
}

// failBody is how many absent optional attributes (post_op_attr, and
// the two halves of wcc_data) follow the status in each NFSv3
// procedure's failure result (RFC 1813), for refusals written before a
// procedure runs.
var failBody = [...]int{
	proto.NFSProcGetAttr:     0,
	proto.NFSProcSetAttr:     2,
	proto.NFSProcLookup:      1,
	proto.NFSProcAccess:      1,
	proto.NFSProcReadlink:    1,
	proto.NFSProcRead:        1,
	proto.NFSProcWrite:       2,
	proto.NFSProcCreate:      2,
	proto.NFSProcMkdir:       2,
	proto.NFSProcSymlink:     2,
	proto.NFSProcMknod:       2,
	proto.NFSProcRemove:      2,
	proto.NFSProcRmdir:       2,
	proto.NFSProcRename:      4,
	proto.NFSProcLink:        3,
	proto.NFSProcReadDir:     1,
	proto.NFSProcReadDirPlus: 1,
	proto.NFSProcFSStat:      1,
	proto.NFSProcFSInfo:      1,
	proto.NFSProcPathConf:    1,
	proto.NFSProcCommit:      2,
}

// modifies lists the NFSv3 procedures a read-only export refuses.
var modifies = [...]bool{
	proto.NFSProcSetAttr: true,
	proto.NFSProcWrite:   true,
	proto.NFSProcCreate:  true,
	proto.NFSProcMkdir:   true,
	proto.NFSProcSymlink: true,
	proto.NFSProcMknod:   true,
	proto.NFSProcRemove:  true,
	proto.NFSProcRmdir:   true,
	proto.NFSProcRename:  true,
	proto.NFSProcLink:    true,
	proto.NFSProcCommit:  false,
}

// refusal returns the status the export answers a call with before the
// procedure runs, or NFS3OK to run it. Refused calls are not decoded.
func (x *Export) refusal(allowed bool, prog, proc uint32) uint32 {
	switch {
	case proc == 0:
		return proto.NFS3OK // NULL: a ping
	case prog == proto.ProgNLM || prog == proto.ProgNSM:
		return proto.NFS3OK // they answer in their own terms (nlm.go, nsm.go)
	case prog == proto.ProgMount:
		if !allowed && proc == proto.MountProcMnt {
			return proto.MntErrAccess
		}
	case !allowed:
		return proto.NFS3ErrAccess
	case x.ReadOnly && int(proc) < len(modifies) && modifies[proc]:
		return proto.NFS3ErrROFS
	}
	return proto.NFS3OK
}

// refuse appends a procedure's failure result with status st.
func refuse(w *proto.Writer, prog, proc, st uint32) {
	w.Uint32(st)
	if prog == proto.ProgNFS && int(proc) < len(failBody) {
		for range failBody[proc] {
			w.Bool(false)
		}
	}
}
