package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/nfs/nfsclient"
	"github.com/cairnfs/cairn/internal/nfs/proto"
)

// writeAll writes data to a new file and closes it; the first error of
// the write or the close (where a buffered write's EDQUOT shows).
func writeAll(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	cerr := f.Close()
	if werr != nil {
		return werr
	}
	return cerr
}

func statfsBytes(t *testing.T, path string) (total, avail uint64) {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * uint64(st.Bsize), st.Bavail * uint64(st.Bsize)
}

// TestSharedQuota: a directory quota on a shared volume (PostgreSQL and
// S3) holds at its exact limits against two FUSE clients racing, through
// the NFS gateway (NFS3ERR_DQUOT), across a rename, and after a client is
// killed in the middle of writes; df on the tree shows the quota on every
// client; quota check and fsck are clean at the end.
func TestSharedQuota(t *testing.T) {
	v := newSharedVolume(t)
	a := v.mount(t, "a")
	b := v.mount(t, "b")
	if err := os.Mkdir(a.path("q"), 0o777); err != nil {
		t.Fatal(err)
	}
	const limitBytes, limitInodes = 1 << 20, 21
	if out, err := v.cairn(t, "quota", "set", v.meta, "/q", "--bytes", "1M", "--inodes", fmt.Sprint(limitInodes)); err != nil || !strings.Contains(out, "/q") {
		t.Fatalf("quota set: %v\n%s", err, out)
	}

	// Inodes: 40 creates from two clients for 20 free inodes.
	var mu sync.Mutex
	made, refused := 0, 0
	var wg sync.WaitGroup
	for _, m := range []*sharedMount{a, b} {
		for w := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 10 {
					err := writeAll(filepath.Join(m.mnt, "q", fmt.Sprintf("%s-%d-%d", filepath.Base(m.mnt), w, i)), nil)
					mu.Lock()
					switch {
					case err == nil:
						made++
					case errors.Is(err, syscall.EDQUOT):
						refused++
					default:
						t.Errorf("create: %v", err)
					}
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	if made != limitInodes-1 || refused != 40-(limitInodes-1) {
		t.Fatalf("%d creates succeeded and %d got EDQUOT; want exactly %d and %d", made, refused, limitInodes-1, 40-(limitInodes-1))
	}
	ents, err := os.ReadDir(b.path("q"))
	if err != nil || len(ents) != limitInodes-1 {
		t.Fatalf("the tree holds %d entries (%v), want %d", len(ents), err, limitInodes-1)
	}
	for _, e := range ents {
		if err := os.Remove(b.path("q/" + e.Name())); err != nil {
			t.Fatal(err)
		}
	}

	// Bytes: the exact limit fits, one byte more does not, from either client.
	if err := writeAll(a.path("q/full"), randomBytes(limitBytes)); err != nil {
		t.Fatalf("writing exactly the byte limit: %v", err)
	}
	for _, m := range []*sharedMount{a, b} {
		if err := writeAll(m.path("q/one-more"), []byte("x")); !errors.Is(err, syscall.EDQUOT) {
			t.Fatalf("%s: one byte past the limit: %v, want EDQUOT", m.mnt, err)
		}
		// df on the tree shows the quota, full.
		if total, avail := statfsBytes(t, m.path("q")); total != limitBytes || avail != 0 {
			t.Fatalf("%s: df in the quota's tree: %d bytes, %d free; want %d, 0", m.mnt, total, avail, limitBytes)
		}
		if total, _ := statfsBytes(t, m.mnt); total == limitBytes {
			t.Fatalf("%s: df at the root shows the quota", m.mnt)
		}
	}
	// Racing writers of 256 KiB files: the usage never passes the limit.
	if err := os.Truncate(a.path("q/full"), 0); err != nil {
		t.Fatal(err)
	}
	wrote := 0
	for _, m := range []*sharedMount{a, b} {
		for w := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 3 {
					err := writeAll(filepath.Join(m.mnt, "q", fmt.Sprintf("w%s-%d-%d", filepath.Base(m.mnt), w, i)), randomBytes(256<<10))
					mu.Lock()
					if err == nil {
						wrote++
					} else if !errors.Is(err, syscall.EDQUOT) {
						t.Errorf("write: %v", err)
					}
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	used := quotaUsedBytes(t, v)
	if used > limitBytes || uint64(wrote)*256<<10 > used || wrote == 0 {
		t.Fatalf("after racing writers: %d files of 256 KiB written whole, the quota counts %d bytes of %d", wrote, used, limitBytes)
	}
	// Fill what is left (a commit that failed may have left part of a file).
	if used < limitBytes {
		if err := writeAll(a.path("q/filler"), randomBytes(int(limitBytes-used))); err != nil {
			t.Fatalf("filling the quota: %v", err)
		}
	}
	if used := quotaUsedBytes(t, v); used != limitBytes {
		t.Fatalf("the quota counts %d bytes once filled, want %d", used, limitBytes)
	}

	// A rename into the full tree is refused; one out of it frees room.
	if err := os.Mkdir(a.path("other"), 0o777); err != nil {
		t.Fatal(err)
	}
	writeFile(t, a.path("other/f"), randomBytes(4096))
	if err := os.Rename(a.path("other/f"), a.path("q/f")); !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("rename into a full quota: %v, want EDQUOT", err)
	}
	var victim string
	ents, _ = os.ReadDir(a.path("q"))
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.Size() == 256<<10 {
			victim = e.Name()
			break
		}
	}
	if err := os.Rename(a.path("q/"+victim), a.path("other/"+victim)); err != nil {
		t.Fatalf("rename out of the quota: %v", err)
	}
	if err := os.Rename(a.path("other/f"), a.path("q/f")); err != nil {
		t.Fatalf("rename into the quota once there is room: %v", err)
	}

	// Through the NFS gateway: NFS3ERR_DQUOT past the limit, FSSTAT shows it.
	g := v.gateway(t, "gw")
	c := dialNFS(t, g.addr)
	root, err := c.Mount("/")
	if err != nil {
		t.Fatal(err)
	}
	qfh, _, err := c.Lookup(root, "q")
	if err != nil {
		t.Fatal(err)
	}
	if total, _, err := c.FSStat(qfh); err != nil || total != limitBytes {
		t.Fatalf("FSSTAT in the quota's tree: %d %v, want %d", total, err, limitBytes)
	}
	fh, err := c.Create(qfh, "nfs", proto.CreateGuarded, proto.Sattr3{}, [8]byte{})
	if err != nil {
		t.Fatal(err)
	}
	free := 256<<10 - 4096
	if _, err := c.Write(fh, 0, randomBytes(free), proto.FileSync); err != nil {
		t.Fatalf("NFS write within the quota: %v", err)
	}
	var st nfsclient.StatusError
	if _, err := c.Write(fh, uint64(free), []byte("x"), proto.FileSync); !errors.As(err, &st) || st != proto.NFS3ErrDQuot {
		t.Fatalf("NFS write past the quota: %v, want NFS3ERR_DQUOT", err)
	}

	// A client killed in the middle of writes: the usage stays exact.
	if err := os.Remove(a.path("q/nfs")); err != nil {
		t.Fatal(err)
	}
	k := v.mount(t, "k")
	stop := make(chan struct{})
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			f, err := os.OpenFile(k.path(fmt.Sprintf("q/k%d", i%3)), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
			if err != nil {
				return
			}
			for j := 0; j < 4; j++ {
				if _, err := f.Write(randomBytes(32 << 10)); err != nil {
					break
				}
				_ = f.Sync()
			}
			f.Close()
		}
	}()
	time.Sleep(1500 * time.Millisecond)
	k.kill(t)
	close(stop)
	time.Sleep(2 * testSessionTimeout) // the dead session's open files are released
	if out, err := v.cairn(t, "quota", "check", v.meta); err != nil || !strings.Contains(out, "no problems") {
		t.Fatalf("quota check after kill -9: %v\n%s", err, out)
	}
	a.stop(t)
	b.stop(t)
	if out, err := v.cairn(t, "fsck", v.meta); err != nil {
		t.Fatalf("fsck: %v\n%s", err, out)
	}
}

func quotaUsedBytes(t *testing.T, v *sharedVolume) uint64 {
	t.Helper()
	out, err := v.cairn(t, "quota", "get", "--json", v.meta, "/q")
	if err != nil {
		t.Fatalf("quota get: %v\n%s", err, out)
	}
	var qs []struct {
		UsedBytes uint64 `json:"used_bytes"`
	}
	if err := json.Unmarshal([]byte(out), &qs); err != nil || len(qs) != 1 {
		t.Fatalf("quota get --json: %v\n%s", err, out)
	}
	return qs[0].UsedBytes
}

// TestE2EQuota: the quota commands on a mounted embedded volume go
// through the mount's control socket; list names paths; delete lifts the
// limits.
func TestE2EQuota(t *testing.T) {
	v := newE2EVolume(t)
	v.mount(t)
	sh(t, v.mnt, "mkdir -p p/sub && echo hello > p/sub/f && mkdir free")
	out := cairn(t, "quota", "set", v.meta, "/p", "--inodes", "4")
	if !strings.Contains(out, "3 of 4") {
		t.Fatalf("quota set on a populated tree:\n%s", out)
	}
	if err := writeAll(filepath.Join(v.mnt, "p/sub/g"), nil); err != nil {
		t.Fatal(err)
	}
	if err := writeAll(filepath.Join(v.mnt, "p/h"), nil); !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("create past the inode limit: %v", err)
	}
	if err := os.Link(filepath.Join(v.mnt, "p/sub/f"), filepath.Join(v.mnt, "free/f")); !errors.Is(err, syscall.EXDEV) {
		t.Fatalf("hard link out of a quota's tree: %v, want EXDEV", err)
	}
	// mv falls back to a copy on EXDEV; a plain rename moves the usage.
	sh(t, v.mnt, "mv p/sub/g free/g")
	out = cairn(t, "quota", "list", v.meta)
	if !strings.Contains(out, "/p") || !strings.Contains(out, "3 of 4") {
		t.Fatalf("quota list:\n%s", out)
	}
	if out, err := cairnErr(t, "quota", "set", v.meta, "/p/sub/f", "--inodes", "1"); err == nil || !strings.Contains(out, "directories") {
		t.Fatalf("quota on a file: %v\n%s", err, out)
	}
	if out, err := cairnErr(t, "quota", "set", v.meta, "/missing", "--inodes", "1"); err == nil || !strings.Contains(out, "no such file") {
		t.Fatalf("quota on a missing path: %v\n%s", err, out)
	}
	cairn(t, "quota", "delete", v.meta, "/p")
	if err := writeAll(filepath.Join(v.mnt, "p/h"), nil); err != nil {
		t.Fatalf("create once the quota is deleted: %v", err)
	}
	if out := cairn(t, "quota", "list", v.meta); !strings.Contains(out, "no quotas") {
		t.Fatalf("quota list after delete:\n%s", out)
	}
	cairn(t, "quota", "check", v.meta)
	v.unmount(t)
	cairn(t, "fsck", v.meta)
}
