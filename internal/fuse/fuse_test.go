package fuse_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/fstest"
	"github.com/cairnfs/cairn/internal/fuse"
	"github.com/cairnfs/cairn/internal/vfs"
)

const nobody = 65534

// asNobody runs a shell command as uid and gid 65534 with no groups.
func asNobody(t *testing.T, script string) {
	t.Helper()
	c := exec.Command("sh", "-c", script)
	c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("as nobody: %s: %v\n%s", script, err, out)
	}
}

// openForNobody lets uid 65534 reach the mount: t.TempDir's parent is 0700.
func openForNobody(t *testing.T, mnt string) {
	t.Helper()
	if err := os.Chmod(filepath.Dir(mnt), 0o755); err != nil {
		t.Fatal(err)
	}
}

func inoOf(t *testing.T, p string) base.Ino {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return base.Ino(st.Ino)
}

// capV2 is a valid security.capability value (revision 2, CAP_NET_BIND_SERVICE
// permitted): the kernel checks the format on setxattr.
func capV2() []byte {
	b := make([]byte, 20)
	binary.LittleEndian.PutUint32(b[0:], 0x02000000)
	binary.LittleEndian.PutUint32(b[4:], 1<<10)
	return b
}

// TestFUSEKillPriv: with HANDLE_KILLPRIV_V2 negotiated the kernel leaves
// dropping setuid/setgid on a write or truncation by another user to
// Cairn, and no longer asks for security.capability before each write.
// Linux's own rules must still hold, with and without the writeback
// cache, also when the bits were set behind the kernel's back (another
// client), once its cached attributes have expired.
func TestFUSEKillPriv(t *testing.T) {
	bothWriteback(t, func(t *testing.T, m *fstest.Mount, wb bool) {
		openForNobody(t, m.Dir)
		ctx := context.Background()
		mode := func(p string) uint32 {
			t.Helper()
			a, e := m.VFS.GetAttr(ctx, inoOf(t, p))
			if e != 0 {
				t.Fatal(e)
			}
			return a.Mode & 0o7777
		}
		for _, c := range []struct {
			name       string
			mode, want uint32
			script     string // %s is the file
		}{
			{"write", 0o6777, 0o777, "echo hi >> %s"},
			{"write-sgid-no-group-exec", 0o2767, 0o2767, "echo hi >> %s"},
			{"truncate", 0o6777, 0o777, "truncate -s 100 %s"},
			{"direct-write", 0o6777, 0o777, "dd if=/dev/zero of=%s bs=4k count=1 oflag=direct conv=notrunc status=none"},
		} {
			p := filepath.Join(m.Dir, c.name)
			if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, os.FileMode(c.mode&0o777)|goMode(c.mode)); err != nil {
				t.Fatal(err)
			}
			asNobody(t, fmt.Sprintf(c.script, p))
			if got := mode(p); got != c.want {
				t.Errorf("%s: mode %o after, want %o", c.name, got, c.want)
			}
		}

		// set behind the kernel's back (as another client would)
		p := filepath.Join(m.Dir, "other-client")
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, 0o777); err != nil {
			t.Fatal(err)
		}
		asNobody(t, "echo hi >> "+p) // the kernel has seen a write without privileges to drop
		if _, e := m.VFS.SetAttr(ctx, base.RootCaller, inoOf(t, p), base.SetAttrRequest{Valid: base.SetMode, Mode: 0o4777}); e != 0 {
			t.Fatal(e)
		}
		time.Sleep(2 * mountAttrTTL)
		asNobody(t, "echo hi >> "+p)
		if got := mode(p); got != 0o777 {
			t.Errorf("setuid set by another client: mode %o after a write, want 777", got)
		}

		// security.capability goes at the first write, by anyone
		for i, viaVFS := range []bool{false, true} {
			p := filepath.Join(m.Dir, "cap"+strconv.Itoa(i))
			if err := os.WriteFile(p, []byte("x"), 0o755); err != nil {
				t.Fatal(err)
			}
			if viaVFS {
				if e := m.VFS.SetXattr(ctx, base.RootCaller, inoOf(t, p), "security.capability", capV2(), 0); e != 0 {
					t.Fatal(e)
				}
				time.Sleep(2 * mountAttrTTL)
			} else if err := syscall.Setxattr(p, "security.capability", capV2(), 0); err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteString("more"); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			if _, e := m.VFS.GetXattr(ctx, base.RootCaller, inoOf(t, p), "security.capability"); e != syscall.ENODATA {
				t.Errorf("capability set (through the kernel: %v) still there after a write: errno %v", !viaVFS, e)
			}
		}
	})
}

// mountAttrTTL is the attribute and entry timeout of bothWriteback's
// mounts: short, so tests can wait for the kernel to fetch again.
const mountAttrTTL = 200 * time.Millisecond

// bothWriteback runs fn on a fresh volume mounted with and without the
// writeback cache, as subtests.
func bothWriteback(t *testing.T, fn func(t *testing.T, m *fstest.Mount, wb bool)) {
	for _, wb := range []bool{true, false} {
		t.Run(fmt.Sprintf("writeback=%v", wb), func(t *testing.T) {
			fn(t, fstest.MountVolume(t, fstest.NewVolume(t), fstest.MountOptions{
				AttrTimeout: mountAttrTTL, EntryTimeout: mountAttrTTL, NoWriteback: !wb}), wb)
		})
	}
}

// goMode converts setuid/setgid bits for os.Chmod.
func goMode(m uint32) os.FileMode {
	var fm os.FileMode
	if m&0o4000 != 0 {
		fm |= os.ModeSetuid
	}
	if m&0o2000 != 0 {
		fm |= os.ModeSetgid
	}
	return fm
}

// TestFUSEReadAhead: the mount's read-ahead window is raised to the
// default 1 MiB (the kernel starts FUSE mounts at 128 KiB).
func TestFUSEReadAhead(t *testing.T) {
	m := fstest.MountVolume(t, fstest.NewVolume(t), fstest.MountOptions{AttrTimeout: time.Second, EntryTimeout: time.Second})
	var st syscall.Stat_t
	if err := syscall.Stat(m.Dir, &st); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev)))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(b)); got != "1024" {
		t.Fatalf("read_ahead_kb %s, want 1024", got)
	}
}

// resident reports how many of the file's pages are in the page cache.
func resident(t *testing.T, p string) int {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	b, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(b)
	vec := make([]byte, (len(b)+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatal(e)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// TestFUSEKeepCache: a file's pages survive a close and the next open
// (FOPEN_KEEP_CACHE). Without the writeback cache, a change made behind
// the kernel's back is seen once the kernel's attributes of the file
// expire and are fetched again (AUTO_INVAL_DATA: the mtime changed). With
// the writeback cache the kernel trusts its own size and mtime and would
// not notice: the daemon keeps pages only where nothing writes behind the
// kernel (an embedded volume without the NFS gateway).
func TestFUSEKeepCache(t *testing.T) {
	bothWriteback(t, func(t *testing.T, m *fstest.Mount, wb bool) {
		p := filepath.Join(m.Dir, "f")
		old := strings.Repeat("a", 1<<20)
		if err := os.WriteFile(p, []byte(old), 0o644); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(p); err != nil || string(b) != old {
			t.Fatalf("read back: %v", err)
		}
		if n := resident(t, p); n != 256 {
			t.Fatalf("%d of 256 pages cached after a read and a new open", n)
		}
		if wb {
			return
		}
		ctx := context.Background()
		fh, e := m.VFS.Open(ctx, base.RootCaller, inoOf(t, p), os.O_WRONLY)
		if e != 0 {
			t.Fatal(e)
		}
		newData := strings.Repeat("b", 1<<20)
		if _, e := m.VFS.Write(ctx, fh, 0, []byte(newData)); e != 0 {
			t.Fatal(e)
		}
		if e := m.VFS.Flush(ctx, fh); e != 0 {
			t.Fatal(e)
		}
		if e := m.VFS.Release(ctx, fh); e != 0 {
			t.Fatal(e)
		}
		time.Sleep(2 * mountAttrTTL)
		if _, err := os.Stat(p); err != nil { // fetches the attributes: new mtime
			t.Fatal(err)
		}
		if b, err := os.ReadFile(p); err != nil || string(b) != newData {
			t.Fatalf("stale data after the attributes expired (err %v)", err)
		}
	})
}

// alignedBuf returns n bytes aligned for O_DIRECT.
func alignedBuf(t *testing.T, n int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(b) })
	return b
}

// TestFUSEParallelDirectWrites: O_DIRECT opens get PARALLEL_DIRECT_WRITES,
// so the kernel no longer serialises direct writes to one file. Several
// descriptors write interleaved 4 KiB blocks of one file at once, inside
// the file and past its end (where the kernel still serialises), and a
// cached open afterwards reads every block as written.
func TestFUSEParallelDirectWrites(t *testing.T) {
	m := fstest.MountVolume(t, fstest.NewVolume(t), fstest.MountOptions{AttrTimeout: time.Second, EntryTimeout: time.Second})
	p := filepath.Join(m.Dir, "db")
	const bs, writers, rounds = 4096, 4, 64
	const inside = writers * rounds // blocks inside the file at the start
	if err := os.WriteFile(p, make([]byte, inside*bs), 0o644); err != nil {
		t.Fatal(err)
	}
	pattern := func(blk, gen int) byte { return byte(blk*7 + gen*31 + 1) }
	errs := make(chan error, writers)
	for w := range writers {
		go func() {
			errs <- func() error {
				fd, err := unix.Open(p, unix.O_RDWR|unix.O_DIRECT, 0)
				if err != nil {
					return err
				}
				defer unix.Close(fd)
				buf := alignedBuf(t, bs)
				// Each block twice (the second write wins), then one
				// block past the end of the file.
				for gen := range 2 {
					for r := range rounds {
						blk := r*writers + w
						for i := range buf {
							buf[i] = pattern(blk, gen)
						}
						if n, err := unix.Pwrite(fd, buf, int64(blk*bs)); err != nil || n != bs {
							return fmt.Errorf("pwrite block %d: %d, %v", blk, n, err)
						}
					}
				}
				blk := inside + w
				for i := range buf {
					buf[i] = pattern(blk, 1)
				}
				if n, err := unix.Pwrite(fd, buf, int64(blk*bs)); err != nil || n != bs {
					return fmt.Errorf("pwrite past the end, block %d: %d, %v", blk, n, err)
				}
				return nil
			}()
		}()
	}
	for range writers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != (inside+writers)*bs {
		t.Fatalf("file is %d bytes, want %d", len(got), (inside+writers)*bs)
	}
	for blk := range inside + writers {
		want := pattern(blk, 1)
		for i, b := range got[blk*bs : (blk+1)*bs] {
			if b != want {
				t.Fatalf("block %d byte %d: %#x, want %#x", blk, i, b, want)
			}
		}
	}
}

// TestFUSELiveTimeout: with LiveTimeout the kernel keeps the live tree's
// attributes past AttrTimeout (a change behind its back stays unseen),
// yet what Cairn itself changes behind it is reported: setuid dropped by
// a write of another user, and entries an admin command made
// (Server.Changed). /.snapshots keeps the short timeout.
func TestFUSELiveTimeout(t *testing.T) {
	m := fstest.MountVolume(t, fstest.NewVolume(t), fstest.MountOptions{
		AttrTimeout: mountAttrTTL, EntryTimeout: mountAttrTTL, LiveTimeout: time.Hour})
	openForNobody(t, m.Dir)
	ctx := context.Background()
	kernelMode := func(p string) uint32 {
		t.Helper()
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		return st.Mode & 0o7777
	}

	// kept past AttrTimeout
	p := filepath.Join(m.Dir, "kept")
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	kernelMode(p)
	if _, e := m.VFS.SetAttr(ctx, base.RootCaller, inoOf(t, p), base.SetAttrRequest{Valid: base.SetMode, Mode: 0o600}); e != 0 {
		t.Fatal(e)
	}
	time.Sleep(2 * mountAttrTTL)
	if got := kernelMode(p); got != 0o644 {
		t.Errorf("mode changed behind the kernel: it shows %o, want the kept 644 (LiveTimeout not applied)", got)
	}

	// setuid dropped by Cairn at a write: the kernel shows it at once
	// (this kernel drops its cached mode after such a write itself;
	// Cairn tells it too, as nothing documents that)
	p = filepath.Join(m.Dir, "suid")
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o777|os.ModeSetuid|os.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	asNobody(t, "echo hi >> "+p)
	if got := kernelMode(p); got != 0o777 {
		t.Errorf("after a write by another user the kernel shows mode %o, want 777", got)
	}

	// entries made behind the kernel, then reported
	dir := filepath.Join(m.Dir, "d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var before syscall.Stat_t
	if err := syscall.Stat(dir, &before); err != nil {
		t.Fatal(err)
	}
	if _, _, e := m.VFS.Mknod(ctx, base.RootCaller, base.Ino(before.Ino), "sub", base.TypeDir, 0o755, 0, 0, ""); e != 0 {
		t.Fatal(e)
	}
	m.Changed(base.Ino(before.Ino), "sub")
	var after syscall.Stat_t
	if err := syscall.Stat(dir, &after); err != nil {
		t.Fatal(err)
	}
	if after.Nlink != before.Nlink+1 {
		t.Errorf("after Changed the kernel shows nlink %d, want %d", after.Nlink, before.Nlink+1)
	}

	// /.snapshots: a snapshot taken after a look is seen within AttrTimeout
	snaps := filepath.Join(m.Dir, vfs.SnapshotsDir)
	if _, err := os.ReadDir(snaps); err != nil {
		t.Fatal(err)
	}
	var s0 syscall.Stat_t
	if err := syscall.Stat(snaps, &s0); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Vol.Meta.CreateSnapshot(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * mountAttrTTL)
	var s1 syscall.Stat_t
	if err := syscall.Stat(snaps, &s1); err != nil {
		t.Fatal(err)
	}
	if s1.Nlink != s0.Nlink+1 {
		t.Errorf("/.snapshots after a new snapshot: nlink %d, want %d", s1.Nlink, s0.Nlink+1)
	}
}

// ExtraProcs raises GOMAXPROCS once per process, by its value, and the
// mount serves requests with it.
func TestFUSEExtraProcs(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	fuse.ResetProcsOnce()
	t.Cleanup(func() {
		runtime.GOMAXPROCS(before)
		fuse.ResetProcsOnce()
	})
	m := fstest.MountVolume(t, fstest.NewVolume(t), fstest.MountOptions{ExtraProcs: 2})
	if got := runtime.GOMAXPROCS(0); got != before+2 {
		t.Fatalf("GOMAXPROCS %d after a mount with ExtraProcs 2, want %d", got, before+2)
	}
	m2 := fstest.MountVolume(t, fstest.NewVolume(t), fstest.MountOptions{ExtraProcs: 2})
	if got := runtime.GOMAXPROCS(0); got != before+2 {
		t.Fatalf("GOMAXPROCS %d after a second mount, want %d (raised once)", got, before+2)
	}
	for i, dir := range []string{m.Dir, m2.Dir} {
		p := filepath.Join(dir, "f")
		want := strings.Repeat(fmt.Sprint(i), 100000)
		if err := os.WriteFile(p, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(p); err != nil || string(b) != want {
			t.Fatalf("read back from mount %d: %d bytes, %v", i, len(b), err)
		}
	}
}
