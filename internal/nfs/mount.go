package nfs

import (
	"context"
	"strings"
	"sync"
	"syscall"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/nfs/proto"
)

// mountProcs are the MOUNTv3 procedures. One export exists: "/", the
// whole volume, as Options.Export says; MNT of a path below it returns
// that directory's handle (as Linux servers allow for subdirectories).
var mountProcs = []procedure{
	proto.MountProcNull:    mountNull,
	proto.MountProcMnt:     mountMnt,
	proto.MountProcDump:    mountDump,
	proto.MountProcUmnt:    mountUmnt,
	proto.MountProcUmntAll: mountUmntAll,
	proto.MountProcExport:  mountExport,
}

// mountTable remembers MNTs for DUMP; it is advisory (RFC 1813 says so
// too) and forgotten at restart.
type mountTable struct {
	mu sync.Mutex
	m  map[mountEntry]bool
}

type mountEntry struct{ host, dir string }

// maxMountEntries bounds the table: clients that never UMNT cannot
// grow it without limit.
const maxMountEntries = 4096

func newMountTable() *mountTable { return &mountTable{m: map[mountEntry]bool{}} }

// host is the client address without its port.
func host(remote string) string {
	if i := strings.LastIndexByte(remote, ':'); i > 0 {
		return strings.Trim(remote[:i], "[]")
	}
	return remote
}

func mountNull(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	return true
}

func mountMnt(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	path := args.String(proto.MaxMountPath)
	if args.Err() != nil {
		return false
	}
	ino, e := s.resolvePath(ctx, req, path)
	var fh []byte
	if e == 0 {
		if fh = s.handle(ino); fh == nil {
			e = syscall.EIO
		}
	}
	w.Uint32(mountStatus(e))
	if e != 0 {
		return true
	}
	w.Opaque(fh)
	w.Uint32(2)
	w.Uint32(proto.AuthSys)
	w.Uint32(proto.AuthNone)
	s.mnt.mu.Lock()
	if len(s.mnt.m) < maxMountEntries {
		s.mnt.m[mountEntry{host(req.remote), path}] = true
	}
	s.mnt.mu.Unlock()
	return true
}

// resolvePath walks an export path from the volume's root.
func (s *Server) resolvePath(ctx context.Context, req *request, path string) (base.Ino, syscall.Errno) {
	ino := base.RootIno
	for _, name := range strings.Split(path, "/") {
		if name == "" || name == "." {
			continue
		}
		if len(name) > proto.MaxName {
			return 0, syscall.ENAMETOOLONG
		}
		next, _, e := s.v.Lookup(ctx, req.caller, ino, name)
		if e != 0 {
			return 0, e
		}
		ino = next
	}
	a, e := s.v.GetAttr(ctx, ino)
	if e == 0 && a.Type != base.TypeDir {
		e = syscall.ENOTDIR
	}
	return ino, e
}

func mountDump(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	s.mnt.mu.Lock()
	defer s.mnt.mu.Unlock()
	for e := range s.mnt.m {
		w.Bool(true)
		w.String(e.host)
		w.String(e.dir)
	}
	w.Bool(false)
	return true
}

func mountUmnt(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	path := args.String(proto.MaxMountPath)
	if args.Err() != nil {
		return false
	}
	s.mnt.mu.Lock()
	delete(s.mnt.m, mountEntry{host(req.remote), path})
	s.mnt.mu.Unlock()
	return true
}

func mountUmntAll(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	h := host(req.remote)
	s.mnt.mu.Lock()
	for e := range s.mnt.m {
		if e.host == h {
			delete(s.mnt.m, e)
		}
	}
	s.mnt.mu.Unlock()
	return true
}

func mountExport(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool {
	w.Bool(true)
	w.String("/")
	for _, p := range s.opts.Export.Allow { // none: every client
		w.Bool(true)
		w.String(p.String())
	}
	w.Bool(false)
	w.Bool(false)
	return true
}
