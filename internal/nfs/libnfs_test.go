package nfs

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/testenv"
)

// libnfsTool finds a libnfs-utils program (Debian package libnfs-utils):
// missing, it skips the test, or fails it when CAIRN_REQUIRE_SHARED=1.
func libnfsTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv(testenv.EnvRequire) == "1" {
			t.Fatalf("%s not found (and %s=1 requires it): apt-get install libnfs-utils", name, testenv.EnvRequire)
		}
		t.Skipf("%s not found: apt-get install libnfs-utils (or scripts/install-test-deps.sh) to run this test", name)
	}
	return p
}

// url is a libnfs URL of path in the gateway's export "/". libnfs takes
// what precedes a file URL's last slash as the export, hence "//".
func (e *env) url(path string) string {
	_, port, _ := strings.Cut(e.addr, ":")
	return fmt.Sprintf("nfs://127.0.0.1//%s?version=3&nfsport=%s&mountport=%s", strings.TrimPrefix(path, "/"), port, port)
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestLibnfs copies files in and out with nfs-cp, lists with nfs-ls and
// reads with nfs-cat: real NFSv3 clients no one here wrote. What nfs-cp
// wrote reads back identical through vfs.
func TestLibnfs(t *testing.T) {
	cp := libnfsTool(t, "nfs-cp")
	ls := libnfsTool(t, "nfs-ls")
	cat := libnfsTool(t, "nfs-cat")
	e := newEnv(t)
	dir := t.TempDir()
	files := map[string][]byte{
		"empty":   nil,
		"small":   []byte("hello over NFS\n"),
		"odd.bin": randBytes(3<<20+777, 7),
	}
	for name, data := range files {
		src := filepath.Join(dir, name)
		if err := os.WriteFile(src, data, 0o644); err != nil {
			t.Fatal(err)
		}
		run(t, cp, src, e.url(name))
		back := filepath.Join(dir, name+".back")
		run(t, cp, e.url(name), back)
		got, err := os.ReadFile(back)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s: %d bytes back, want %d (%v)", name, len(got), len(data), err)
		}
		// Through vfs.
		ino, a, en := e.v.Lookup(ctx, base.RootCaller, base.RootIno, name)
		if en != 0 || a.Length != uint64(len(data)) {
			t.Fatalf("%s through vfs: %v, %d bytes", name, en, a.Length)
		}
		fh, en := e.v.Open(ctx, base.RootCaller, ino, syscall.O_RDONLY)
		if en != 0 {
			t.Fatal(en)
		}
		buf := make([]byte, len(data)+1)
		n, en := e.v.Read(ctx, fh, 0, buf)
		e.v.Release(ctx, fh)
		if en != 0 || !bytes.Equal(buf[:n], data) {
			t.Fatalf("%s through vfs: %d bytes differ (%v)", name, n, en)
		}
	}
	if got := run(t, cat, e.url("small")); got != string(files["small"]) {
		t.Fatalf("nfs-cat: %q", got)
	}
	// A file written through vfs, listed and read over NFS.
	ino, _, vfh, en := e.v.Create(ctx, base.RootCaller, base.RootIno, "from-vfs", 0o600, 0, syscall.O_RDWR)
	if en != 0 {
		t.Fatal(en)
	}
	_ = ino
	data := randBytes(200<<10, 9)
	if _, en := e.v.Write(ctx, vfh, 0, data); en != 0 {
		t.Fatal(en)
	}
	e.v.Release(ctx, vfh)
	run(t, cp, e.url("from-vfs"), filepath.Join(dir, "from-vfs"))
	if got, _ := os.ReadFile(filepath.Join(dir, "from-vfs")); !bytes.Equal(got, data) {
		t.Fatalf("a vfs file over nfs-cp: %d bytes differ", len(got))
	}
	listing := run(t, ls, e.url("/"))
	for _, name := range []string{"empty", "small", "odd.bin", "from-vfs"} {
		if !strings.Contains(listing, name) {
			t.Errorf("nfs-ls does not list %s:\n%s", name, listing)
		}
	}
	if strings.Contains(listing, ".snapshots") {
		t.Errorf("nfs-ls lists .snapshots:\n%s", listing)
	}
}
