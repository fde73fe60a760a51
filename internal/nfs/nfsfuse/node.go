package nfsfuse

import (
	"context"
	"fmt"
	"math"
	"syscall"

	"github.com/cairnfs/cairn/internal/nfs/nfsclient"
	"github.com/cairnfs/cairn/internal/nfs/proto"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// node is a file of the server, named by its handle. Nodes hold no
// state of their own: what an open file needs is in mount.open.
type node struct {
	fs.Inode
	m   *mount
	fh  []byte
	ino uint64 // the fileid
}

var (
	_ fs.NodeLookuper      = (*node)(nil)
	_ fs.NodeGetattrer     = (*node)(nil)
	_ fs.NodeSetattrer     = (*node)(nil)
	_ fs.NodeOpener        = (*node)(nil)
	_ fs.NodeCreater       = (*node)(nil)
	_ fs.NodeMkdirer       = (*node)(nil)
	_ fs.NodeMknoder       = (*node)(nil)
	_ fs.NodeSymlinker     = (*node)(nil)
	_ fs.NodeReadlinker    = (*node)(nil)
	_ fs.NodeLinker        = (*node)(nil)
	_ fs.NodeUnlinker      = (*node)(nil)
	_ fs.NodeRmdirer       = (*node)(nil)
	_ fs.NodeRenamer       = (*node)(nil)
	_ fs.NodeReaddirer     = (*node)(nil)
	_ fs.NodeStatfser      = (*node)(nil)
	_ fs.NodeGetxattrer    = (*node)(nil)
	_ fs.NodeSetxattrer    = (*node)(nil)
	_ fs.NodeListxattrer   = (*node)(nil)
	_ fs.NodeRemovexattrer = (*node)(nil)
)

// child returns the node of a file of this directory with handle fh and
// fills out with its attributes (a; read now if nil).
func (n *node) child(ctx context.Context, fh []byte, a *proto.Fattr3, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if a == nil {
		ga, err := n.m.c.GetAttr(fh)
		if err != nil {
			return nil, errno(err)
		}
		a = &ga
	}
	fuseAttr(a, &out.Attr)
	c := &node{m: n.m, fh: fh, ino: a.Fileid}
	return n.NewInode(ctx, c, fs.StableAttr{Mode: typeMode(a.Type), Ino: a.Fileid}), 0
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	fh, a, err := n.m.c.Lookup(n.fh, name)
	if err != nil {
		return nil, errno(err)
	}
	if a.Type == 0 { // the server sent no attributes
		return n.child(ctx, fh, nil, out)
	}
	return n.child(ctx, fh, &a, out)
}

func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	a, err := n.m.c.GetAttr(n.fh)
	if err != nil {
		return errno(err)
	}
	n.m.mu.Lock()
	if of := n.m.open[n.ino]; of != nil && of.hiddenIn != nil && a.Nlink > 0 {
		a.Nlink-- // the hidden name is not one the file's users know
	}
	n.m.mu.Unlock()
	fuseAttr(&a, &out.Attr)
	return 0
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	var sa proto.Sattr3
	if v, ok := in.GetMode(); ok {
		v &= 0o7777
		sa.Mode = &v
	}
	if v, ok := in.GetUID(); ok {
		sa.Uid = &v
	}
	if v, ok := in.GetGID(); ok {
		sa.Gid = &v
	}
	if v, ok := in.GetSize(); ok {
		sa.Size = &v
	}
	var e syscall.Errno
	sa.AtimeHow, sa.Atime, e = timeHow(in.Valid, fuse.FATTR_ATIME, fuse.FATTR_ATIME_NOW, in.Atime, in.Atimensec)
	if e != 0 {
		return e
	}
	sa.MtimeHow, sa.Mtime, e = timeHow(in.Valid, fuse.FATTR_MTIME, fuse.FATTR_MTIME_NOW, in.Mtime, in.Mtimensec)
	if e != 0 {
		return e
	}
	if sa != (proto.Sattr3{}) {
		if err := n.m.c.SetAttr(n.fh, sa); err != nil {
			return errno(err)
		}
	}
	return n.Getattr(ctx, f, out)
}

// timeHow converts one time of a FUSE SETATTR into a sattr3's: nfstime3
// has unsigned 32-bit seconds, so times before 1970 or after 2106 are
// EINVAL.
func timeHow(valid, set, now uint32, sec uint64, nsec uint32) (uint32, proto.Time, syscall.Errno) {
	switch {
	case valid&now != 0:
		return proto.SetToServerTime, proto.Time{}, 0
	case valid&set == 0:
		return proto.DontChange, proto.Time{}, 0
	case sec > math.MaxUint32:
		return 0, proto.Time{}, syscall.EINVAL
	}
	return proto.SetToClientTime, proto.Time{Sec: uint32(sec), Nsec: nsec}, 0
}

// Open counts the open, then checks the file is still there (as a Linux
// client revalidates at open): a file removed since the kernel looked
// it up is ESTALE, after which the kernel looks the name up again.
func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	f := n.m.opened(n.fh, n.ino)
	if _, err := n.m.c.GetAttr(n.fh); err != nil {
		n.m.closed(f.of)
		return nil, 0, errno(err)
	}
	return f, 0, 0
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	how := uint32(proto.CreateUnchecked)
	if flags&syscall.O_EXCL != 0 {
		how = proto.CreateGuarded
	}
	perm := mode & 0o7777
	sa := proto.Sattr3{Mode: &perm}
	if flags&syscall.O_TRUNC != 0 && how == proto.CreateUnchecked {
		// The name may exist after all (created by another client since
		// the kernel looked): UNCHECKED then opens that file.
		var zero uint64
		sa.Size = &zero
	}
	fh, err := n.m.c.Create(n.fh, name, how, sa, [8]byte{})
	if err != nil {
		return nil, nil, 0, errno(err)
	}
	c, e := n.child(ctx, fh, nil, out)
	if e != 0 {
		return nil, nil, 0, e
	}
	return c, n.m.opened(fh, out.Attr.Ino), 0, 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	fh, err := n.m.c.Mkdir(n.fh, name, mode&0o7777)
	if err != nil {
		return nil, errno(err)
	}
	return n.child(ctx, fh, nil, out)
}

func (n *node) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	perm := mode & 0o7777
	var typ uint32
	switch mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		fh, err := n.m.c.Create(n.fh, name, proto.CreateGuarded, proto.Sattr3{Mode: &perm}, [8]byte{})
		if err != nil {
			return nil, errno(err)
		}
		return n.child(ctx, fh, nil, out)
	case syscall.S_IFCHR:
		typ = proto.NF3Chr
	case syscall.S_IFBLK:
		typ = proto.NF3Blk
	case syscall.S_IFIFO:
		typ = proto.NF3FIFO
	case syscall.S_IFSOCK:
		typ = proto.NF3Sock
	default:
		return nil, syscall.EINVAL
	}
	fh, err := n.m.c.Mknod(n.fh, name, typ, perm, unix.Major(uint64(dev)), unix.Minor(uint64(dev)))
	if err != nil {
		return nil, errno(err)
	}
	return n.child(ctx, fh, nil, out)
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	fh, err := n.m.c.Symlink(n.fh, name, target)
	if err != nil {
		return nil, errno(err)
	}
	return n.child(ctx, fh, nil, out)
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	s, err := n.m.c.Readlink(n.fh)
	if err != nil {
		return nil, errno(err)
	}
	return []byte(s), 0
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	t, ok := target.(*node)
	if !ok {
		return nil, syscall.EXDEV
	}
	if err := n.m.c.Link(t.fh, n.fh, name); err != nil {
		return nil, errno(err)
	}
	a, err := n.m.c.GetAttr(t.fh)
	if err != nil {
		return nil, errno(err)
	}
	fuseAttr(&a, &out.Attr)
	return t.EmbeddedInode(), 0
}

// known returns the node the kernel knows under name in n, if any.
func (n *node) known(name string) *node {
	c := n.GetChild(name)
	if c == nil {
		return nil
	}
	cn, _ := c.Operations().(*node)
	return cn
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	m := n.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if of := m.openKnownLocked(n, name); of != nil {
		_, err := m.hideLocked(of, n.fh, name)
		return errno(err)
	}
	return errno(m.c.Remove(n.fh, name))
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	return errno(n.m.c.Rmdir(n.fh, name))
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if flags != 0 {
		// RENAME_NOREPLACE and RENAME_EXCHANGE have no NFSv3 form, and
		// emulating them would not be atomic.
		return syscall.EINVAL
	}
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	m := n.m
	m.mu.Lock()
	defer m.mu.Unlock()
	of := m.openKnownLocked(np, newName)
	if of == nil || of.ino == knownIno(n, name) {
		// Nothing open is replaced (or the file renamed is the target
		// itself, which the rename leaves as it is).
		return errno(m.c.Rename(n.fh, name, np.fh, newName))
	}
	// The file open here that the rename replaces is hidden first, as an
	// unlink would hide it; if the rename then fails, it comes back.
	hid, err := m.hideLocked(of, np.fh, newName)
	if err != nil {
		return errno(err)
	}
	if err := m.c.Rename(n.fh, name, np.fh, newName); err != nil {
		if m.c.Rename(np.fh, hid, np.fh, newName) == nil {
			of.hiddenIn, of.hiddenAs = nil, ""
		}
		return errno(err)
	}
	return 0
}

// knownIno is the fileid of the node the kernel knows under name in dir
// (0: none).
func knownIno(dir *node, name string) uint64 {
	if c := dir.known(name); c != nil {
		return c.ino
	}
	return 0
}

// openKnownLocked returns the open file the kernel knows under name in
// dir, unless it is hidden already (another of its names is going).
func (m *mount) openKnownLocked(dir *node, name string) *openFile {
	c := dir.known(name)
	if c == nil {
		return nil
	}
	if of := m.open[c.ino]; of != nil && of.hiddenIn == nil {
		return of
	}
	return nil
}

// hideLocked renames the open file of, named name in dir, to a name of
// its own, as an unlink of it; it is removed at the last release.
func (m *mount) hideLocked(of *openFile, dir []byte, name string) (string, error) {
	m.hidden++
	hid := fmt.Sprintf(".nfs%016x.%04x", of.ino, m.hidden)
	if err := m.c.Rename(dir, name, dir, hid); err != nil {
		return "", err
	}
	of.hiddenIn, of.hiddenAs = dir, hid
	return hid, nil
}

func (n *node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	var list []fuse.DirEntry
	_, err := n.m.c.ReadDirPlusEach(n.fh, 64<<10, func(e nfsclient.Entry) {
		d := fuse.DirEntry{Name: e.Name, Ino: e.Fileid}
		if e.Attr != nil {
			d.Mode = typeMode(e.Attr.Type)
		}
		list = append(list, d)
	})
	if err != nil {
		return nil, errno(err)
	}
	return fs.NewListDirStream(list), 0
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	total, avail, err := n.m.c.FSStat(n.fh)
	if err != nil {
		return errno(err)
	}
	const bs = 4096
	out.Bsize, out.Frsize = bs, bs
	out.Blocks = total / bs
	out.Bfree = avail / bs
	out.Bavail = avail / bs
	out.NameLen = proto.MaxName
	return 0
}

// NFSv3 has no extended attributes. ENOSYS tells the kernel so once for
// the mount: it answers EOPNOTSUPP itself from then on.

func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	return 0, syscall.ENOSYS
}

func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	return syscall.ENOSYS
}

func (n *node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	return 0, syscall.ENOSYS
}

func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	return syscall.ENOSYS
}
