// This file is in package nfs_test: fstest imports daemon, which imports
// nfs, so a test of package nfs cannot import fstest. Its volume and
// gateway come from newEnv through StartTestGateway (export_test.go).
package nfs_test

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/fstest"
	"github.com/cairnfs/cairn/internal/nfs"
	"github.com/cairnfs/cairn/internal/nfs/nfsfuse"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// gatewaySkips are Cairn's checks that cannot pass through NFSv3.
var gatewaySkips = map[string]string{
	"ExchangeAndNoReplace": "renameat2 flags (RENAME_NOREPLACE, RENAME_EXCHANGE) have no NFSv3 form",
}

// gatewayPosixSkips are posixtest cases that cannot pass through NFSv3,
// or whose result would say nothing of the gateway.
var gatewayPosixSkips = map[string]string{
	"Fallocate":         "NFSv3 has no ALLOCATE (NFSv4.2 has): a Linux NFSv3 client answers EOPNOTSUPP",
	"FallocateKeepSize": "NFSv3 has no ALLOCATE (NFSv4.2 has): a Linux NFSv3 client answers EOPNOTSUPP",
	"FcntlFlockSetLk":   "the bridge keeps locks in its own kernel (as with -o nolock), so the case would test that kernel, not the gateway's NLM (nlm_test.go and TestE2ENLMBesideFUSE test that)",
	"OpenSymlinkRace":   "a file renamed over between the kernel's lookup and its open is gone at the server (NFSv3 keeps no open state; FUSE hides from the bridge the dentry the opener holds, by which a Linux client would hide the file instead), so open sometimes fails ESTALE after the kernel's one retry",
}

// TestFstestThroughGateway runs Cairn's POSIX checks and go-fuse's
// posixtest suite through the gateway: on a FUSE mount that forwards
// every operation over NFSv3 (nfsfuse, standing in for the kernel NFS
// client this machine lacks), of a volume in memory whose consistency
// check must pass at the end.
func TestFstestThroughGateway(t *testing.T) {
	dir := mountGateway(t)
	t.Run("checks", func(t *testing.T) { fstest.Run(t, dir, gatewaySkips) })
	t.Run("posixtest", func(t *testing.T) { fstest.RunPosix(t, dir, gatewayPosixSkips) })
}

// TestBridgeHidesOpenFiles: a file unlinked, or renamed over, while open
// on the bridge stays usable through its descriptor under a hidden name
// (nlink 0 to fstat), which goes at its last close.
func TestBridgeHidesOpenFiles(t *testing.T) {
	dir := mountGateway(t)
	j := func(name string) string { return filepath.Join(dir, name) }
	for _, name := range []string{"a", "b", "c"} {
		if err := os.WriteFile(j(name), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var open []*os.File
	for _, name := range []string{"a", "b"} {
		f, err := os.Open(j(name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		open = append(open, f)
	}
	if err := os.Remove(j("a")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(j("c"), j("b")); err != nil {
		t.Fatal(err)
	}
	if got := names(t, dir); len(got) != 3 || !strings.HasPrefix(got[0], ".nfs") || !strings.HasPrefix(got[1], ".nfs") || got[2] != "b" {
		t.Fatalf("names while open: %q, want b and two hidden ones", got)
	}
	for i, want := range []string{"a", "b"} {
		got := make([]byte, 1)
		if _, err := open[i].ReadAt(got, 0); err != nil || string(got) != want {
			t.Fatalf("read of the hidden %s: %q %v", want, got, err)
		}
		if st, err := open[i].Stat(); err != nil || st.Sys().(*syscall.Stat_t).Nlink != 0 {
			t.Fatalf("fstat of the hidden %s: %v (nlink want 0)", want, err)
		}
		open[i].Close()
	}
	// The kernel sends the releases after close returns.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		got := names(t, dir)
		if len(got) == 1 && got[0] == "b" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("names after the last close: %q, want b alone", got)
		}
	}
	if b, err := os.ReadFile(j("b")); err != nil || string(b) != "c" {
		t.Fatalf("b after the rename: %q %v", b, err)
	}
}

// names lists dir, sorted.
func names(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

// mountGateway mounts, with nfsfuse, the root of a gateway serving a
// volume in memory (StartTestGateway) and returns the mount point; cleanup
// unmounts it.
func mountGateway(t *testing.T) string {
	t.Helper()
	if ok, why := fstest.CanMount(); !ok {
		t.Skip(why)
	}
	c, root := nfs.StartTestGateway(t)
	dir := t.TempDir()
	srv, err := nfsfuse.Mount(dir, c, root, nfsfuse.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unmount(t, srv, dir) })
	return dir
}

// unmount unmounts dir, retrying while the kernel still holds files of
// it (releases of closed files arrive after close returns).
func unmount(t *testing.T, srv *fuse.Server, dir string) {
	var err error
	for i := 0; i < 50; i++ {
		if err = srv.Unmount(); err == nil {
			srv.Wait()
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("unmount %s: %v", dir, err)
}
