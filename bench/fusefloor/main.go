// Command fusefloor mounts a file system that keeps everything in memory
// and does nothing else, with the FUSE settings of an embedded Cairn mount
// (default_permissions, the writeback cache, HANDLE_KILLPRIV_V2, one-hour
// entry and attribute timeouts, no negative caching, 1 MiB writes, locks
// sent to the daemon, no splice): the floor a FUSE file system reaches on
// this machine, next to which bench/floor.py sets Cairn's metadata rows
// (docs/performance.md, "The FUSE floor"). A benchmark tool, not part of
// Cairn; it serves until unmounted or interrupted.
//
//	fusefloor MOUNTPOINT
package main

import (
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"sort"
	"sync"
	"syscall"
	"time"

	gofuse "github.com/hanwen/go-fuse/v2/fuse"
)

const timeout = time.Hour

type node struct {
	attr     gofuse.Attr
	children map[string]uint64 // directories
	data     []byte            // regular files
	target   []byte            // symlinks
}

type memFS struct {
	gofuse.RawFileSystem
	mu    sync.Mutex
	nodes map[uint64]*node
	next  uint64
}

func now() (uint64, uint32) {
	t := time.Now()
	return uint64(t.Unix()), uint32(t.Nanosecond())
}

func (fs *memFS) newNode(mode uint32, h *gofuse.InHeader) (uint64, *node) {
	fs.next++
	n := &node{}
	n.attr.Ino = fs.next
	n.attr.Mode = mode
	n.attr.Nlink = 1
	n.attr.Owner = gofuse.Owner{Uid: h.Uid, Gid: h.Gid}
	n.attr.Blksize = 1 << 16
	s, ns := now()
	n.attr.Atime, n.attr.Mtime, n.attr.Ctime = s, s, s
	n.attr.Atimensec, n.attr.Mtimensec, n.attr.Ctimensec = ns, ns, ns
	if mode&syscall.S_IFMT == syscall.S_IFDIR {
		n.children = map[string]uint64{}
		n.attr.Nlink = 2
	}
	fs.nodes[fs.next] = n
	return fs.next, n
}

func fill(ino uint64, n *node, out *gofuse.EntryOut) {
	out.NodeId = ino
	out.Generation = 1
	out.EntryValid, out.AttrValid = uint64(timeout/time.Second), uint64(timeout/time.Second)
	out.Attr = n.attr
}

func (fs *memFS) touch(n *node) {
	s, ns := now()
	n.attr.Mtime, n.attr.Ctime, n.attr.Mtimensec, n.attr.Ctimensec = s, s, ns, ns
}

// child returns directory dir and the inode its entry name names
// (fs.mu held).
func (fs *memFS) child(dir uint64, name string) (*node, uint64, gofuse.Status) {
	d := fs.nodes[dir]
	if d == nil || d.children == nil {
		return nil, 0, gofuse.ENOTDIR
	}
	ino, ok := d.children[name]
	if !ok {
		return d, 0, gofuse.ENOENT
	}
	return d, ino, gofuse.OK
}

func (fs *memFS) Lookup(cancel <-chan struct{}, h *gofuse.InHeader, name string, out *gofuse.EntryOut) gofuse.Status {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	_, ino, s := fs.child(h.NodeId, name)
	if s != gofuse.OK {
		return s
	}
	fill(ino, fs.nodes[ino], out)
	return gofuse.OK
}

func (fs *memFS) Forget(nodeid, nlookup uint64) {}

func (fs *memFS) GetAttr(cancel <-chan struct{}, in *gofuse.GetAttrIn, out *gofuse.AttrOut) gofuse.Status {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n := fs.nodes[in.NodeId]
	if n == nil {
		return gofuse.ENOENT
	}
	out.AttrValid = uint64(timeout / time.Second)
	out.Attr = n.attr
	return gofuse.OK
}

func (fs *memFS) SetAttr(cancel <-chan struct{}, in *gofuse.SetAttrIn, out *gofuse.AttrOut) gofuse.Status {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n := fs.nodes[in.NodeId]
	if n == nil {
		return gofuse.ENOENT
	}
	if in.Valid&gofuse.FATTR_MODE != 0 {
		n.attr.Mode = n.attr.Mode&syscall.S_IFMT | in.Mode&0o7777
	}
	if in.Valid&gofuse.FATTR_UID != 0 {
		n.attr.Uid = in.Uid
	}
	if in.Valid&gofuse.FATTR_GID != 0 {
		n.attr.Gid = in.Gid
	}
	if in.Valid&gofuse.FATTR_SIZE != 0 {
		if int(in.Size) <= len(n.data) {
			n.data = n.data[:in.Size]
		} else {
			n.data = append(n.data, make([]byte, int(in.Size)-len(n.data))...)
		}
		n.attr.Size = in.Size
	}
	if in.Valid&gofuse.FATTR_ATIME != 0 {
		n.attr.Atime, n.attr.Atimensec = in.Atime, in.Atimensec
	}
	if in.Valid&gofuse.FATTR_MTIME != 0 {
		n.attr.Mtime, n.attr.Mtimensec = in.Mtime, in.Mtimensec
	}
	s, ns := now()
	n.attr.Ctime, n.attr.Ctimensec = s, ns
	out.AttrValid = uint64(timeout / time.Second)
	out.Attr = n.attr
	return gofuse.OK
}

// add makes a node named name in directory h.NodeId.
func (fs *memFS) add(h *gofuse.InHeader, name string, mode uint32, out *gofuse.EntryOut) (*node, gofuse.Status) {
	d := fs.nodes[h.NodeId]
	if d == nil || d.children == nil {
		return nil, gofuse.ENOTDIR
	}
	if _, ok := d.children[name]; ok {
		return nil, gofuse.Status(syscall.EEXIST)
	}
	ino, n := fs.newNode(mode, h)
	d.children[name] = ino
	if n.children != nil {
		d.attr.Nlink++
	}
	fs.touch(d)
	fill(ino, n, out)
	return n, gofuse.OK
}

func (fs *memFS) Mknod(cancel <-chan struct{}, in *gofuse.MknodIn, name string, out *gofuse.EntryOut) gofuse.Status {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	_, s := fs.add(&in.InHeader, name, in.Mode&^in.Umask, out)
	return s
}

func (fs *memFS) Mkdir(cancel <-chan struct{}, in *gofuse.MkdirIn, name string, out *gofuse.EntryOut) gofuse.Status {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	_, s := fs.add(&in.InHeader, name, syscall.S_IFDIR|in.Mode&^in.Umask&0o7777, out)
	return s
}

func (fs *memFS) Symlink(cancel <-chan struct{}, h *gofuse.InHeader, target, name string, out *gofuse.EntryOut) gofuse.Status {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n, s := fs.add(h, name, syscall.S_IFLNK|0o777, out)
	if s == gofuse.OK {
		n.target = []byte(target)
		n.attr.Size = uint64(len(target))
		out.Attr.Size = n.attr.Size
	}
	return s
}

func (fs *memFS) Readlink(cancel <-chan struct{}, h *gofuse.InHeader) ([]byte, gofuse.Status) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n := fs.nodes[h.NodeId]
	if n == nil {
		return nil, gofuse.ENOENT
	}
	return n.target, gofuse.OK
}

// remove takes name out of directory h.NodeId.
func (fs *memFS) remove(h *gofuse.InHeader, name string, dir bool) gofuse.Status {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	d, ino, s := fs.child(h.NodeId, name)
	if s != gofuse.OK {
		return s
	}
	n := fs.nodes[ino]
	if dir {
		if n.children == nil {
			return gofuse.ENOTDIR
		}
		if len(n.children) > 0 {
			return gofuse.Status(syscall.ENOTEMPTY)
		}
		d.attr.Nlink--
	} else if n.children != nil {
		return gofuse.Status(syscall.EISDIR)
	}
	delete(d.children, name)
	fs.touch(d)
	if n.attr.Nlink--; n.attr.Nlink == 0 || dir {
		delete(fs.nodes, ino) // the kernel's forgets are not tracked
	}
	return gofuse.OK
}

func (fs *memFS) Unlink(cancel <-chan struct{}, h *gofuse.InHeader, name string) gofuse.Status {
	return fs.remove(h, name, false)
}

func (fs *memFS) Rmdir(cancel <-chan struct{}, h *gofuse.InHeader, name string) gofuse.Status {
	return fs.remove(h, name, true)
}

func (fs *memFS) Rename(cancel <-chan struct{}, in *gofuse.RenameIn, oldName, newName string) gofuse.Status {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	sd, ino, s := fs.child(in.NodeId, oldName)
	if s != gofuse.OK {
		return s
	}
	dd := fs.nodes[in.Newdir]
	if dd == nil || dd.children == nil {
		return gofuse.ENOTDIR
	}
	if old, ok := dd.children[newName]; ok && old != ino {
		if o := fs.nodes[old]; o.children != nil && len(o.children) > 0 {
			return gofuse.Status(syscall.ENOTEMPTY)
		}
		o := fs.nodes[old]
		if o.attr.Nlink--; o.attr.Nlink == 0 || o.children != nil {
			delete(fs.nodes, old)
		}
	}
	delete(sd.children, oldName)
	dd.children[newName] = ino
	fs.touch(sd)
	fs.touch(dd)
	return gofuse.OK
}

func (fs *memFS) Link(cancel <-chan struct{}, in *gofuse.LinkIn, name string, out *gofuse.EntryOut) gofuse.Status {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	d, n := fs.nodes[in.NodeId], fs.nodes[in.Oldnodeid]
	if d == nil || n == nil || d.children == nil {
		return gofuse.ENOENT
	}
	if _, ok := d.children[name]; ok {
		return gofuse.Status(syscall.EEXIST)
	}
	d.children[name] = in.Oldnodeid
	n.attr.Nlink++
	fs.touch(d)
	fill(in.Oldnodeid, n, out)
	return gofuse.OK
}

func (fs *memFS) Access(cancel <-chan struct{}, in *gofuse.AccessIn) gofuse.Status { return gofuse.OK }

func (fs *memFS) GetXAttr(cancel <-chan struct{}, h *gofuse.InHeader, name string, dest []byte) (uint32, gofuse.Status) {
	return 0, gofuse.ENOATTR
}

func (fs *memFS) ListXAttr(cancel <-chan struct{}, h *gofuse.InHeader, dest []byte) (uint32, gofuse.Status) {
	return 0, gofuse.OK
}

func (fs *memFS) Create(cancel <-chan struct{}, in *gofuse.CreateIn, name string, out *gofuse.CreateOut) gofuse.Status {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	_, s := fs.add(&in.InHeader, name, syscall.S_IFREG|in.Mode&^in.Umask&0o7777, &out.EntryOut)
	return s
}

func (fs *memFS) Open(cancel <-chan struct{}, in *gofuse.OpenIn, out *gofuse.OpenOut) gofuse.Status {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.nodes[in.NodeId] == nil {
		return gofuse.ENOENT
	}
	if in.Flags&syscall.O_TRUNC != 0 {
		n := fs.nodes[in.NodeId]
		n.data, n.attr.Size = nil, 0
	}
	return gofuse.OK
}

func (fs *memFS) Read(cancel <-chan struct{}, in *gofuse.ReadIn, buf []byte) (gofuse.ReadResult, gofuse.Status) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n := fs.nodes[in.NodeId]
	if n == nil {
		return nil, gofuse.ENOENT
	}
	if in.Offset >= uint64(len(n.data)) {
		return gofuse.ReadResultData(nil), gofuse.OK
	}
	return gofuse.ReadResultData(append([]byte(nil), n.data[in.Offset:min(uint64(len(n.data)), in.Offset+uint64(in.Size))]...)), gofuse.OK
}

func (fs *memFS) Write(cancel <-chan struct{}, in *gofuse.WriteIn, data []byte) (uint32, gofuse.Status) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n := fs.nodes[in.NodeId]
	if n == nil {
		return 0, gofuse.ENOENT
	}
	end := int(in.Offset) + len(data)
	if end > len(n.data) {
		n.data = append(n.data, make([]byte, end-len(n.data))...)
	}
	copy(n.data[in.Offset:], data)
	n.attr.Size = uint64(len(n.data))
	n.attr.Blocks = (n.attr.Size + 511) / 512
	fs.touch(n)
	return uint32(len(data)), gofuse.OK
}

func (fs *memFS) Flush(cancel <-chan struct{}, in *gofuse.FlushIn) gofuse.Status { return gofuse.OK }
func (fs *memFS) Fsync(cancel <-chan struct{}, in *gofuse.FsyncIn) gofuse.Status { return gofuse.OK }
func (fs *memFS) Release(cancel <-chan struct{}, in *gofuse.ReleaseIn)           {}

func (fs *memFS) OpenDir(cancel <-chan struct{}, in *gofuse.OpenIn, out *gofuse.OpenOut) gofuse.Status {
	return gofuse.OK
}

// entries lists directory ino from offset off: name order, offsets 1, 2, ...
func (fs *memFS) entries(ino, off uint64, add func(gofuse.DirEntry, uint64) bool) gofuse.Status {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	d := fs.nodes[ino]
	if d == nil || d.children == nil {
		return gofuse.ENOTDIR
	}
	names := make([]string, 0, len(d.children))
	for n := range d.children {
		names = append(names, n)
	}
	sort.Strings(names)
	for i := int(off); i < len(names); i++ {
		c := d.children[names[i]]
		if !add(gofuse.DirEntry{Name: names[i], Ino: c, Mode: fs.nodes[c].attr.Mode, Off: uint64(i + 1)}, c) {
			break
		}
	}
	return gofuse.OK
}

func (fs *memFS) ReadDir(cancel <-chan struct{}, in *gofuse.ReadIn, out *gofuse.DirEntryList) gofuse.Status {
	return fs.entries(in.NodeId, in.Offset, func(e gofuse.DirEntry, _ uint64) bool { return out.AddDirEntry(e) })
}

func (fs *memFS) ReadDirPlus(cancel <-chan struct{}, in *gofuse.ReadIn, out *gofuse.DirEntryList) gofuse.Status {
	return fs.entries(in.NodeId, in.Offset, func(e gofuse.DirEntry, c uint64) bool {
		eo := out.AddDirLookupEntry(e)
		if eo == nil {
			return false
		}
		fill(c, fs.nodes[c], eo)
		return true
	})
}

func (fs *memFS) ReleaseDir(in *gofuse.ReleaseIn) {}
func (fs *memFS) FsyncDir(cancel <-chan struct{}, in *gofuse.FsyncIn) gofuse.Status {
	return gofuse.OK
}

func (fs *memFS) StatFs(cancel <-chan struct{}, h *gofuse.InHeader, out *gofuse.StatfsOut) gofuse.Status {
	out.Bsize, out.Frsize, out.NameLen = 4096, 4096, 255
	out.Blocks, out.Bfree, out.Bavail = 1<<30, 1<<30, 1<<30
	out.Files, out.Ffree = 1<<30, 1<<30
	return gofuse.OK
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: fusefloor MOUNTPOINT")
		os.Exit(2)
	}
	// The root is the first node: FUSE_ROOT_ID.
	fs := &memFS{RawFileSystem: gofuse.NewDefaultRawFileSystem(), nodes: map[uint64]*node{}, next: gofuse.FUSE_ROOT_ID - 1}
	fs.newNode(syscall.S_IFDIR|0o755, &gofuse.InHeader{})
	mo := &gofuse.MountOptions{
		AllowOther:        true,
		FsName:            "fusefloor",
		Name:              "fusefloor",
		MaxWrite:          1 << 20,
		MaxBackground:     64,
		Options:           []string{"default_permissions"},
		DirectMount:       true,
		EnableLocks:       true,
		DisableSplice:     true,
		ExtraCapabilities: gofuse.CAP_WRITEBACK_CACHE | gofuse.CAP_HANDLE_KILLPRIV_V2,
	}
	srv, err := gofuse.NewServer(fs, os.Args[1], mo)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if os.Getenv("GOMAXPROCS") == "" {
		// As cairn mount: two more Ps once go-fuse sized its readers
		// (fuse.Options.ExtraProcs, docs/fuse-tuning.md).
		runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + 2)
	}
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sig
		_ = srv.Unmount()
	}()
	srv.Wait()
}
