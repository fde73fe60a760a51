package nfs

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/nfs/nfsclient"
	"github.com/cairnfs/cairn/internal/nfs/proto"
)

func status(err error) uint32 {
	var se nfsclient.StatusError
	if errors.As(err, &se) {
		return uint32(se)
	}
	if err == nil {
		return proto.NFS3OK
	}
	return 1 << 31
}

func u32(v uint32) *uint32 { return &v }
func u64(v uint64) *uint64 { return &v }

func randBytes(n int, seed int64) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

// TestFileIO: CREATE, WRITE (all three stabilities), COMMIT, READ, GETATTR,
// SETATTR (truncate, chmod), and the same bytes through vfs.
func TestFileIO(t *testing.T) {
	e := newEnv(t)
	c, root := e.client(t)
	fh := createFile(t, c, root, "f", 0o640)
	data := randBytes(3<<20+123, 1)
	var verf [8]byte
	for off, i := 0, 0; off < len(data); i++ {
		n := min(1<<20, len(data)-off)
		stable := uint32(i % 3)
		res, err := c.Write(fh, uint64(off), data[off:off+n], stable)
		if err != nil {
			t.Fatalf("write at %d: %v", off, err)
		}
		if res.Count != uint32(n) {
			t.Fatalf("wrote %d of %d", res.Count, n)
		}
		if stable != proto.Unstable && res.Committed != proto.FileSync {
			t.Errorf("stable %d committed as %d", stable, res.Committed)
		}
		if i > 0 && res.Verf != verf {
			t.Errorf("write verifier changed within one gateway")
		}
		verf = res.Verf
		off += n
	}
	cv, err := c.Commit(fh)
	if err != nil || cv != verf {
		t.Fatalf("commit: %v, verifier %x vs %x", err, cv, verf)
	}
	a, err := c.GetAttr(fh)
	if err != nil || a.Size != uint64(len(data)) || a.Mode != 0o640 || a.Type != proto.NF3Reg {
		t.Fatalf("getattr: %+v %v", a, err)
	}
	var got []byte
	for {
		p, eof, err := c.Read(fh, uint64(len(got)), 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p...)
		if eof {
			break
		}
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes, differ from the %d written", len(got), len(data))
	}
	// The same bytes through vfs.
	ino, _, en := e.v.Lookup(ctx, base.RootCaller, base.RootIno, "f")
	if en != 0 {
		t.Fatal(en)
	}
	vfh, en := e.v.Open(ctx, base.RootCaller, ino, syscall.O_RDONLY)
	if en != 0 {
		t.Fatal(en)
	}
	buf := make([]byte, len(data)+10)
	n, en := e.v.Read(ctx, vfh, 0, buf)
	e.v.Release(ctx, vfh)
	if en != 0 || !bytes.Equal(buf[:n], data) {
		t.Fatalf("vfs read %d bytes (%v), want the %d written over NFS", n, en, len(data))
	}
	if err := c.SetAttr(fh, proto.Sattr3{Size: u64(1000), Mode: u32(0o600)}); err != nil {
		t.Fatal(err)
	}
	a, _ = c.GetAttr(fh)
	if a.Size != 1000 || a.Mode != 0o600 {
		t.Fatalf("after setattr: size %d mode %o", a.Size, a.Mode)
	}
	p, eof, err := c.Read(fh, 900, 500)
	if err != nil || !eof || !bytes.Equal(p, data[900:1000]) {
		t.Fatalf("read after truncate: %d bytes eof %v %v", len(p), eof, err)
	}
}

// TestNamespace covers LOOKUP, MKDIR, SYMLINK, READLINK, LINK, RENAME,
// REMOVE, RMDIR, MKNOD, ACCESS and the create modes, as a table of steps.
func TestNamespace(t *testing.T) {
	e := newEnv(t)
	c, root := e.client(t)
	var dir, file []byte
	steps := []struct {
		name string
		do   func() error
		want uint32
	}{
		{"mkdir d", func() (err error) { dir, err = c.Mkdir(root, "d", 0o755); return }, proto.NFS3OK},
		{"mkdir d again", func() error { _, err := c.Mkdir(root, "d", 0o755); return err }, proto.NFS3ErrExist},
		{"create d/a", func() (err error) {
			file, err = c.Create(dir, "a", proto.CreateUnchecked, proto.Sattr3{Mode: u32(0o644)}, [8]byte{})
			return
		}, proto.NFS3OK},
		{"guarded create of an existing file", func() error {
			_, err := c.Create(dir, "a", proto.CreateGuarded, proto.Sattr3{}, [8]byte{})
			return err
		}, proto.NFS3ErrExist},
		{"unchecked create of an existing file truncates", func() error {
			if _, err := c.Write(file, 0, []byte("hello"), proto.FileSync); err != nil {
				return err
			}
			fh, err := c.Create(dir, "a", proto.CreateUnchecked, proto.Sattr3{Size: u64(0)}, [8]byte{})
			if err != nil {
				return err
			}
			a, err := c.GetAttr(fh)
			if err == nil && (a.Size != 0 || !bytes.Equal(fh, file)) {
				return fmt.Errorf("size %d, same handle %v", a.Size, bytes.Equal(fh, file))
			}
			return err
		}, proto.NFS3OK},
		{"exclusive create is idempotent with its verifier", func() error {
			v := [8]byte{1, 2, 3, 4, 5, 6, 7, 8}
			fh1, err := c.Create(dir, "x", proto.CreateExclusive, proto.Sattr3{}, v)
			if err != nil {
				return err
			}
			fh2, err := c.Create(dir, "x", proto.CreateExclusive, proto.Sattr3{}, v)
			if err != nil || !bytes.Equal(fh1, fh2) {
				return fmt.Errorf("retransmitted exclusive create: %v", err)
			}
			_, err = c.Create(dir, "x", proto.CreateExclusive, proto.Sattr3{}, [8]byte{9})
			return err
		}, proto.NFS3ErrExist},
		{"lookup d/a", func() error {
			fh, a, err := c.Lookup(dir, "a")
			if err == nil && (!bytes.Equal(fh, file) || a.Type != proto.NF3Reg) {
				return fmt.Errorf("lookup gave another file")
			}
			return err
		}, proto.NFS3OK},
		{"lookup ..", func() error {
			fh, _, err := c.Lookup(dir, "..")
			if err == nil && !bytes.Equal(fh, root) {
				return fmt.Errorf(".. is not the root")
			}
			return err
		}, proto.NFS3OK},
		{"lookup missing", func() error { _, _, err := c.Lookup(dir, "nope"); return err }, proto.NFS3ErrNoEnt},
		{"lookup in a file", func() error { _, _, err := c.Lookup(file, "x"); return err }, proto.NFS3ErrNotDir},
		{"lookup a name too long", func() error { _, _, err := c.Lookup(dir, string(bytes.Repeat([]byte("n"), 300))); return err }, proto.NFS3ErrNameTooLong},
		{"symlink and readlink", func() error {
			fh, err := c.Symlink(dir, "l", "../target")
			if err != nil {
				return err
			}
			got, err := c.Readlink(fh)
			if err == nil && got != "../target" {
				return fmt.Errorf("readlink %q", got)
			}
			return err
		}, proto.NFS3OK},
		{"readlink of a file", func() error { _, err := c.Readlink(file); return err }, proto.NFS3ErrInval},
		{"link", func() error {
			if err := c.Link(file, root, "hard"); err != nil {
				return err
			}
			a, err := c.GetAttr(file)
			if err == nil && a.Nlink != 2 {
				return fmt.Errorf("nlink %d", a.Nlink)
			}
			return err
		}, proto.NFS3OK},
		{"rename across directories", func() error {
			if err := c.Rename(root, "hard", dir, "moved"); err != nil {
				return err
			}
			fh, _, err := c.Lookup(dir, "moved")
			if err == nil && !bytes.Equal(fh, file) {
				return fmt.Errorf("renamed entry has another handle")
			}
			return err
		}, proto.NFS3OK},
		{"handle survives rename", func() error { _, err := c.GetAttr(file); return err }, proto.NFS3OK},
		{"mknod fifo", func() error { _, err := c.Mknod(dir, "fifo", proto.NF3FIFO, 0o600, 0, 0); return err }, proto.NFS3OK},
		{"mknod chr", func() error {
			fh, err := c.Mknod(dir, "chr", proto.NF3Chr, 0o600, 4, 300)
			if err != nil {
				return err
			}
			a, err := c.GetAttr(fh)
			if err == nil && (a.Type != proto.NF3Chr || a.Major != 4 || a.Minor != 300) {
				return fmt.Errorf("chr attrs %+v", a)
			}
			return err
		}, proto.NFS3OK},
		{"mknod of a directory type", func() error { _, err := c.Mknod(dir, "bad", proto.NF3Dir, 0, 0, 0); return err }, proto.NFS3ErrBadType},
		{"rmdir non-empty", func() error { return c.Rmdir(root, "d") }, proto.NFS3ErrNotEmpty},
		{"remove a directory", func() error { return c.Remove(root, "d") }, proto.NFS3ErrIsDir},
		{"access as root", func() error {
			got, err := c.Access(file, proto.AccessRead|proto.AccessModify|proto.AccessExecute)
			if err == nil && got&(proto.AccessRead|proto.AccessModify) != proto.AccessRead|proto.AccessModify {
				return fmt.Errorf("access %#x", got)
			}
			return err
		}, proto.NFS3OK},
		{"remove everything", func() error {
			for _, n := range []string{"a", "moved", "l", "x", "fifo", "chr"} {
				if err := c.Remove(dir, n); err != nil {
					return fmt.Errorf("%s: %w", n, err)
				}
			}
			return c.Rmdir(root, "d")
		}, proto.NFS3OK},
		{"stale handle of a removed file", func() error { _, err := c.GetAttr(file); return err }, proto.NFS3ErrStale},
		{"stale handle of a removed directory", func() error { _, _, err := c.Lookup(dir, "a"); return err }, proto.NFS3ErrStale},
	}
	for _, s := range steps {
		if got := status(s.do()); got != s.want {
			t.Fatalf("%s: status %d, want %d", s.name, got, s.want)
		}
	}
}

// TestReadDir lists a directory of 1,000 entries in many small READDIR
// and READDIRPLUS replies; every entry comes once, with handles.
func TestReadDir(t *testing.T) {
	e := newEnv(t)
	c, root := e.client(t)
	dir, err := c.Mkdir(root, "big", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{".", ".."}
	for i := 0; i < 1000; i++ {
		name := fmt.Sprintf("file-%04d", i)
		want = append(want, name)
		_, _, vfh, en := e.v.Create(ctx, base.RootCaller, mustLookup(t, e, "big"), name, 0o644, 0, syscall.O_RDWR)
		if en != 0 {
			t.Fatal(en)
		}
		e.v.Release(ctx, vfh)
	}
	entries, calls, err := c.ReadDirPlus(dir, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if calls < 10 {
		t.Errorf("1000 entries in %d calls of 4 KiB", calls)
	}
	var got []string
	for _, en := range entries {
		got = append(got, en.Name)
		if en.Name[0] != '.' && (en.Attr == nil || en.Handle == nil || en.Attr.Type != proto.NF3Reg) {
			t.Fatalf("entry %s without attributes or handle", en.Name)
		}
	}
	sort.Strings(got)
	sort.Strings(want)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("readdirplus listed %d entries, want %d", len(got), len(want))
	}
	names, err := c.ReadDir(dir, 1024)
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	if fmt.Sprint(names) != fmt.Sprint(want) {
		t.Fatalf("readdir listed %d entries, want %d", len(names), len(want))
	}
	if _, _, err := c.ReadDirPlus(dir, 100); status(err) != proto.NFS3ErrTooSmall {
		t.Fatalf("readdirplus with a tiny count: %v", err)
	}
}

func mustLookup(t *testing.T, e *env, name string) base.Ino {
	t.Helper()
	ino, _, en := e.v.Lookup(ctx, base.RootCaller, base.RootIno, name)
	if en != 0 {
		t.Fatal(en)
	}
	return ino
}

// TestPermissions: AUTH_SYS identities reach meta's permission checks.
func TestPermissions(t *testing.T) {
	e := newEnv(t)
	c, root := e.client(t)
	fh := createFile(t, c, root, "secret", 0o600)
	if _, err := c.Write(fh, 0, []byte("x"), proto.FileSync); err != nil {
		t.Fatal(err)
	}
	c.SetUser(1000, 1000)
	cases := []struct {
		name string
		do   func() error
		want uint32
	}{
		{"read another user's 0600 file", func() error { _, _, err := c.Read(fh, 0, 10); return err }, proto.NFS3ErrAccess},
		{"write it", func() error { _, err := c.Write(fh, 0, []byte("y"), proto.Unstable); return err }, proto.NFS3ErrAccess},
		{"create in root's 0755 directory", func() error {
			_, err := c.Create(root, "mine", proto.CreateGuarded, proto.Sattr3{}, [8]byte{})
			return err
		}, proto.NFS3ErrAccess},
		{"chmod another user's file", func() error { return c.SetAttr(fh, proto.Sattr3{Mode: u32(0o666)}) }, proto.NFS3ErrPerm},
		{"access grants nothing", func() error {
			got, err := c.Access(fh, proto.AccessRead|proto.AccessModify)
			if err == nil && got != 0 {
				return fmt.Errorf("granted %#x", got)
			}
			return err
		}, proto.NFS3OK},
	}
	for _, tc := range cases {
		if got := status(tc.do()); got != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestRestart: handles stay valid across a gateway restart and between
// two gateways of the volume; the write verifier changes.
func TestRestart(t *testing.T) {
	e := newEnv(t)
	c, root := e.client(t)
	fh, err := c.Create(root, "f", proto.CreateGuarded, proto.Sattr3{}, [8]byte{})
	if err != nil {
		t.Fatal(err)
	}
	w1, err := c.Write(fh, 0, []byte("before"), proto.Unstable)
	if err != nil {
		t.Fatal(err)
	}
	second := &env{v: e.v, m: e.m}
	second.start(t, Options{})
	c2, err := nfsclient.Dial(second.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	w2, err := c2.Write(fh, 6, []byte(" after"), proto.FileSync)
	if err != nil {
		t.Fatalf("the first gateway's handle on the second: %v", err)
	}
	if w1.Verf == w2.Verf {
		t.Errorf("two gateway instances share the write verifier %x", w1.Verf)
	}
	if err := e.srv.Close(ctx); err != nil {
		t.Fatal(err)
	}
	p, _, err := c2.Read(fh, 0, 100)
	if err != nil || string(p) != "before after" {
		t.Fatalf("read %q, %v", p, err)
	}
}

// TestBadHandles: forged, damaged and foreign handles never reach vfs.
func TestBadHandles(t *testing.T) {
	e := newEnv(t)
	c, root := e.client(t)
	other := newHandles("another volume").encode(kindLive, 0, base.RootIno)
	flipped := append([]byte(nil), root...)
	flipped[15] ^= 1 // another inode, but the check no longer matches
	cases := []struct {
		name string
		fh   []byte
		want uint32
	}{
		{"empty", nil, proto.NFS3ErrBadHandle},
		{"short", root[:10], proto.NFS3ErrBadHandle},
		{"long", append(append([]byte(nil), root...), 0), proto.NFS3ErrBadHandle},
		{"forged inode", flipped, proto.NFS3ErrBadHandle},
		{"version 9", append([]byte{9}, root[1:]...), proto.NFS3ErrBadHandle},
		{"another volume", other, proto.NFS3ErrStale},
		{"never allocated inode", e.srv.fh.encode(kindLive, 0, 1<<40), proto.NFS3ErrStale},
		{"kind 3", e.srv.fh.encode(3, 0, base.RootIno), proto.NFS3ErrBadHandle},
		{"live with an epoch", e.srv.fh.encode(kindLive, 5, base.RootIno), proto.NFS3ErrBadHandle},
		{"/.snapshots with an inode", e.srv.fh.encode(kindSnapshots, 0, base.RootIno), proto.NFS3ErrBadHandle},
		{"snapshot inode 0", e.srv.fh.encode(kindSnapshot, 1, 0), proto.NFS3ErrBadHandle},
		{"snapshot inode past 2^48", e.srv.fh.encode(kindSnapshot, 1, 1<<48), proto.NFS3ErrBadHandle},
		{"snapshot that never existed", e.srv.fh.encode(kindSnapshot, 1<<40, base.RootIno), proto.NFS3ErrStale},
	}
	for _, tc := range cases {
		if _, err := c.GetAttr(tc.fh); status(err) != tc.want {
			t.Errorf("getattr of a %s handle: %v, want status %d", tc.name, err, tc.want)
		}
		if _, _, err := c.Read(tc.fh, 0, 1); status(err) != tc.want {
			t.Errorf("read of a %s handle: %v, want status %d", tc.name, err, tc.want)
		}
		if _, err := c.Write(tc.fh, 0, []byte("x"), 0); status(err) != tc.want {
			t.Errorf("write of a %s handle: %v, want status %d", tc.name, err, tc.want)
		}
	}
}

// dirWithFile serves a new volume and makes d/f in it; it returns a
// client and the handles of the root, d and f.
func dirWithFile(t *testing.T) (c *nfsclient.Client, root, dir, file []byte) {
	t.Helper()
	e := newEnv(t)
	c, root = e.client(t)
	dir, err := c.Mkdir(root, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if file, err = c.Create(dir, "f", proto.CreateGuarded, proto.Sattr3{}, [8]byte{}); err != nil {
		t.Fatal(err)
	}
	return c, root, dir, file
}

// removeWcc sends REMOVE and decodes its status and wcc_data.
func removeWcc(t *testing.T, c *nfsclient.Client, dir []byte, name string) (st uint32, preOK bool, preSize uint64, preMtime proto.Time, post proto.Fattr3, postOK bool) {
	t.Helper()
	var w proto.Writer
	w.Opaque(dir)
	w.String(name)
	res, err := c.Call(proto.ProgNFS, proto.NFSVersion, proto.NFSProcRemove, w.B)
	if err != nil {
		t.Fatal(err)
	}
	r := proto.NewReader(res)
	st = r.Uint32()
	if preOK = r.Bool(); preOK {
		preSize = r.Uint64()
		preMtime = proto.Time{Sec: r.Uint32(), Nsec: r.Uint32()}
		r.Uint64() // ctime
	}
	post, postOK = proto.DecodePostOpAttr(r)
	if r.Err() != nil {
		t.Fatal(r.Err())
	}
	return
}

// TestRemoveWcc checks REMOVE's weak cache consistency data (the
// directory before and after, from the transaction that removed the
// entry) and its errors.
func TestRemoveWcc(t *testing.T) {
	c, root, dir, file := dirWithFile(t)
	before, err := c.GetAttr(dir)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond) // the removal's mtime differs
	st, preOK, preSize, preMtime, post, postOK := removeWcc(t, c, dir, "f")
	if st != proto.NFS3OK || !preOK || !postOK {
		t.Fatalf("remove: status %d, pre %v, post %v", st, preOK, postOK)
	}
	if preSize != before.Size || preMtime != before.Mtime {
		t.Errorf("pre-op size %d mtime %v, want %d %v", preSize, preMtime, before.Size, before.Mtime)
	}
	after, err := c.GetAttr(dir)
	if err != nil {
		t.Fatal(err)
	}
	if post != after {
		t.Errorf("post-op attributes %+v, GETATTR after %+v", post, after)
	}
	if after.Mtime == before.Mtime {
		t.Errorf("directory mtime unchanged by the removal")
	}
	if _, err := c.GetAttr(file); status(err) != proto.NFS3ErrStale {
		t.Errorf("removed file: %v, want stale", err)
	}

	g, err := c.Create(dir, "g", proto.CreateGuarded, proto.Sattr3{}, [8]byte{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		dir      []byte
		entry    string
		want     uint32
		wantPost bool
	}{
		{"missing name", dir, "f", proto.NFS3ErrNoEnt, true},
		{"a file as the directory", g, "x", proto.NFS3ErrNotDir, true},
		{"a directory", root, "d", proto.NFS3ErrIsDir, true},
		{"a bad name", dir, "a/b", proto.NFS3ErrInval, true},
	} {
		st, _, _, _, _, postOK := removeWcc(t, c, tc.dir, tc.entry)
		if st != tc.want || postOK != tc.wantPost {
			t.Errorf("%s: status %d post %v, want %d %v", tc.name, st, postOK, tc.want, tc.wantPost)
		}
	}
	if err := c.Remove(dir, "g"); err != nil {
		t.Fatal(err)
	}
	if err := c.Rmdir(root, "d"); err != nil {
		t.Fatal(err)
	}
	if st, _, _, _, _, _ := removeWcc(t, c, dir, "g"); st != proto.NFS3ErrStale {
		t.Errorf("remove in a removed directory: status %d, want stale", st)
	}
}

// TestLookupDirAttr checks that LOOKUP answers the directory's attributes
// (read with the entry) as GETATTR does, found or not.
func TestLookupDirAttr(t *testing.T) {
	c, _, dir, file := dirWithFile(t)
	wantDir, err := c.GetAttr(dir)
	if err != nil {
		t.Fatal(err)
	}
	wantFile, err := c.GetAttr(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		want uint32
	}{{"f", proto.NFS3OK}, {"missing", proto.NFS3ErrNoEnt}} {
		var w proto.Writer
		w.Opaque(dir)
		w.String(tc.name)
		res, err := c.Call(proto.ProgNFS, proto.NFSVersion, proto.NFSProcLookup, w.B)
		if err != nil {
			t.Fatal(err)
		}
		r := proto.NewReader(res)
		if st := r.Uint32(); st != tc.want {
			t.Fatalf("lookup %s: status %d, want %d", tc.name, st, tc.want)
		}
		if tc.want == proto.NFS3OK {
			if fh := r.Opaque(proto.MaxFHSize); !bytes.Equal(fh, file) {
				t.Errorf("lookup %s: another handle", tc.name)
			}
			if a, ok := proto.DecodePostOpAttr(r); !ok || a != wantFile {
				t.Errorf("lookup %s: object attributes %+v, GETATTR %+v", tc.name, a, wantFile)
			}
		}
		if a, ok := proto.DecodePostOpAttr(r); !ok || a != wantDir {
			t.Errorf("lookup %s: directory attributes %v %+v, GETATTR %+v", tc.name, ok, a, wantDir)
		}
		if r.Err() != nil {
			t.Fatal(r.Err())
		}
	}
}

// TestReadHoleAfterData reads a file with a hole after reading another
// file's data: READ fills recycled reply buffers in place, and the hole
// must still read as zeros, never as the other file's bytes.
func TestReadHoleAfterData(t *testing.T) {
	e := newEnv(t)
	c, root := e.client(t)
	full, err := c.Create(root, "full", proto.CreateGuarded, proto.Sattr3{}, [8]byte{})
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte{0xab}, 256<<10)
	if _, err := c.Write(full, 0, data, proto.FileSync); err != nil {
		t.Fatal(err)
	}
	sparse, err := c.Create(root, "sparse", proto.CreateGuarded, proto.Sattr3{}, [8]byte{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(sparse, 200<<10, []byte{1}, proto.FileSync); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 8; i++ {
		got, _, err := c.Read(full, 0, 256<<10)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read full: %d bytes, %v", len(got), err)
		}
		got, eof, err := c.Read(sparse, 0, 256<<10)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]byte, 200<<10+1)
		want[200<<10] = 1
		if !eof || !bytes.Equal(got, want) {
			t.Fatalf("read sparse: %d bytes, eof %v, equal %v", len(got), eof, bytes.Equal(got, want))
		}
	}
}

// TestWriteAttrs: the attributes a WRITE answers with (post-op, built from
// the ones read before the write with the write applied) are the file's:
// its new size, and the times a GETATTR then reports, for unstable and
// stable writes, extending the file and not.
func TestWriteAttrs(t *testing.T) {
	e := newEnv(t)
	c, root := e.client(t)
	fh := createFile(t, c, root, "f", 0o640)
	size := uint64(0)
	for i, w := range []struct {
		off    uint64
		n      int
		stable uint32
	}{{0, 5000, proto.Unstable}, {5000, 70000, proto.Unstable}, {100, 10, proto.Unstable}, {75000, 3, proto.FileSync}, {1 << 20, 1, proto.Unstable}} {
		time.Sleep(2 * time.Millisecond) // distinct modification times
		res, err := c.Write(fh, w.off, randBytes(w.n, int64(i)), w.stable)
		if err != nil {
			t.Fatal(err)
		}
		size = max(size, w.off+uint64(w.n))
		if !res.AfterOK || res.After.Size != size {
			t.Fatalf("write %d: post-op attributes %v, size %d; want size %d", i, res.AfterOK, res.After.Size, size)
		}
		a, err := c.GetAttr(fh)
		if err != nil {
			t.Fatal(err)
		}
		if a.Size != res.After.Size || a.Mtime != res.After.Mtime || a.Ctime != res.After.Ctime || a.Mode != res.After.Mode {
			t.Fatalf("write %d: answered size %d mtime %v ctime %v mode %o, GETATTR then %d %v %v %o",
				i, res.After.Size, res.After.Mtime, res.After.Ctime, res.After.Mode, a.Size, a.Mtime, a.Ctime, a.Mode)
		}
	}
}
