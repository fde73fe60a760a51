package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/nfs/nfsclient"
	"github.com/cairnfs/cairn/internal/nfs/proto"
	"github.com/cairnfs/cairn/internal/testenv"
)

// needLibnfs returns the path of a libnfs-utils program, skipping the test
// without it (failing it when CAIRN_REQUIRE_SHARED=1).
func needLibnfs(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv(testenv.EnvRequire) == "1" {
			t.Fatalf("%s not found (and %s=1 requires it): apt-get install libnfs-utils", name, testenv.EnvRequire)
		}
		t.Skipf("%s not found: apt-get install libnfs-utils to run this test", name)
	}
	return p
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

// nfsURL is a libnfs URL of a file in the export "/" of a gateway.
func nfsURL(port, name string) string {
	return fmt.Sprintf("nfs://127.0.0.1//%s?version=3&nfsport=%s&mountport=%s", name, port, port)
}

func nfsCmd(t *testing.T, prog string, args ...string) string {
	t.Helper()
	out, err := exec.Command(prog, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(prog), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestE2ENFSBesideFUSE: cairn mount --nfs-listen serves the mounted
// embedded volume over NFS from the mount process. A file nfs-cp wrote
// reads back identical through the FUSE mount, and a file written on the
// mount reads back identical over NFS.
func TestE2ENFSBesideFUSE(t *testing.T) {
	cp := needLibnfs(t, "nfs-cp")
	ls := needLibnfs(t, "nfs-ls")
	v := newE2EVolume(t)
	port := freePort(t)
	cairn(t, "mount", "-d", "-o", "allow_other", "--log", v.dir+"/mount.log", "--nfs-listen", "127.0.0.1:"+port, v.meta, v.mnt)
	t.Cleanup(func() { v.unmount(t) })

	data := make([]byte, 5<<20+4321)
	rand.Read(data)
	src := filepath.Join(v.dir, "src.bin")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	nfsCmd(t, cp, src, nfsURL(port, "over-nfs.bin"))
	got, err := os.ReadFile(filepath.Join(v.mnt, "over-nfs.bin"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("written over NFS, read through FUSE: %d bytes, want %d (%v)", len(got), len(data), err)
	}

	other := make([]byte, 1<<20+17)
	rand.Read(other)
	if err := os.WriteFile(filepath.Join(v.mnt, "over-fuse.bin"), other, 0o644); err != nil {
		t.Fatal(err)
	}
	back := filepath.Join(v.dir, "back.bin")
	nfsCmd(t, cp, nfsURL(port, "over-fuse.bin"), back)
	if got, err := os.ReadFile(back); err != nil || !bytes.Equal(got, other) {
		t.Fatalf("written through FUSE, read over NFS: %d bytes, want %d (%v)", len(got), len(other), err)
	}
	listing := nfsCmd(t, ls, fmt.Sprintf("nfs://127.0.0.1/?version=3&nfsport=%s&mountport=%s", port, port))
	if !strings.Contains(listing, "over-nfs.bin") || !strings.Contains(listing, "over-fuse.bin") {
		t.Fatalf("nfs-ls:\n%s", listing)
	}
}

// TestE2EGatewayNFS runs cairn gateway nfs on an embedded volume, copies
// a file in and out, stops the gateway with SIGTERM and checks the volume.
func TestE2EGatewayNFS(t *testing.T) {
	cp := needLibnfs(t, "nfs-cp")
	bin := cairnBinary(t)
	v := newE2EVolume(t)
	port := freePort(t)
	start := func() *exec.Cmd { return startGateway(t, bin, v.meta, port, v.dir+"/gateway.log") }
	stop := func(c *exec.Cmd) { stopGateway(t, c) }
	data := make([]byte, 2<<20+99)
	rand.Read(data)
	src := filepath.Join(v.dir, "src.bin")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	g := start()
	nfsCmd(t, cp, src, nfsURL(port, "f.bin"))
	stop(g)
	// A new gateway process serves what the first one wrote.
	g = start()
	back := filepath.Join(v.dir, "back.bin")
	nfsCmd(t, cp, nfsURL(port, "f.bin"), back)
	if got, err := os.ReadFile(back); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("after a gateway restart: %d bytes, want %d (%v)", len(got), len(data), err)
	}
	stop(g)
	cairn(t, "fsck", v.meta) // fails the test on problems
}

// startGateway runs cairn gateway nfs on 127.0.0.1:port with extra flags
// and waits until it serves; it is killed at cleanup if still running.
func startGateway(t *testing.T, bin, meta, port, logPath string, extra ...string) *exec.Cmd {
	t.Helper()
	args := append([]string{"gateway", "nfs", "--listen", "127.0.0.1:" + port, "--log", logPath}, extra...)
	c := exec.Command(bin, append(args, meta)...)
	stdout, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if !strings.HasPrefix(line, "serving NFSv3 on 127.0.0.1:"+port) {
		log, _ := os.ReadFile(logPath)
		t.Fatalf("gateway did not start: %q\n%s", line, log)
	}
	return c
}

// stopGateway stops a gateway with SIGTERM and checks it exits cleanly.
func stopGateway(t *testing.T, c *exec.Cmd) {
	t.Helper()
	if err := c.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("gateway exit: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("gateway did not stop after SIGTERM")
	}
}

// TestE2EGatewayNFSExport runs cairn gateway nfs with the export flags:
// --nfs-export-ro (nfs-cp can read but not write), --nfs-allow of a
// network the test is not in (nfs-ls is refused; the Go client gets
// MNT3ERR_ACCES), and --nfs-squash all with an anonymous uid/gid (files
// created over NFS belong to it).
func TestE2EGatewayNFSExport(t *testing.T) {
	cp := needLibnfs(t, "nfs-cp")
	ls := needLibnfs(t, "nfs-ls")
	bin := cairnBinary(t)
	v := newE2EVolume(t)
	port := freePort(t)
	logPath := v.dir + "/gateway.log"
	src := filepath.Join(v.dir, "src")
	if err := os.WriteFile(src, []byte("exported\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	g := startGateway(t, bin, v.meta, port, logPath)
	nfsCmd(t, cp, src, nfsURL(port, "f"))
	c, err := nfsclient.Dial("127.0.0.1:" + port)
	if err != nil {
		t.Fatal(err)
	}
	root, err := c.Mount("/")
	if err == nil {
		err = c.SetAttr(root, proto.Sattr3{Mode: ptr(uint32(0o777))})
	}
	c.Close()
	if err != nil {
		t.Fatal(err)
	}
	stopGateway(t, g)

	g = startGateway(t, bin, v.meta, port, logPath, "--nfs-export-ro", "--nfs-allow", "127.0.0.0/8,::1")
	back := filepath.Join(v.dir, "back")
	nfsCmd(t, cp, nfsURL(port, "f"), back)
	if got, _ := os.ReadFile(back); string(got) != "exported\n" {
		t.Errorf("read from a read-only export: %q", got)
	}
	if out, err := exec.Command(cp, src, nfsURL(port, "g")).CombinedOutput(); err == nil {
		t.Errorf("nfs-cp wrote to a read-only export:\n%s", out)
	}
	stopGateway(t, g)

	g = startGateway(t, bin, v.meta, port, logPath, "--nfs-allow", "10.0.0.0/8")
	if out, err := exec.Command(ls, fmt.Sprintf("nfs://127.0.0.1/?version=3&nfsport=%s&mountport=%s", port, port)).CombinedOutput(); err == nil {
		t.Errorf("nfs-ls from outside --nfs-allow succeeds:\n%s", out)
	}
	c, err = nfsclient.Dial("127.0.0.1:" + port)
	if err != nil {
		t.Fatal(err)
	}
	var ms nfsclient.MountStatusError
	if _, err := c.Mount("/"); !errors.As(err, &ms) || ms != proto.MntErrAccess {
		t.Errorf("mount from outside --nfs-allow: %v, want MNT3ERR_ACCES", err)
	}
	c.Close()
	stopGateway(t, g)

	g = startGateway(t, bin, v.meta, port, logPath, "--nfs-squash", "all", "--nfs-anon-uid", "4242", "--nfs-anon-gid", "4343")
	nfsCmd(t, cp, src, nfsURL(port, "squashed"))
	c, err = nfsclient.Dial("127.0.0.1:" + port)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	root, err = c.Mount("/")
	if err != nil {
		t.Fatal(err)
	}
	if _, a, err := c.Lookup(root, "squashed"); err != nil || a.Uid != 4242 || a.Gid != 4343 {
		t.Errorf("a file created under --nfs-squash all: %d:%d %v, want 4242:4343", a.Uid, a.Gid, err)
	}
	stopGateway(t, g)
	cairn(t, "fsck", v.meta)
}

func ptr[T any](v T) *T { return &v }

// TestE2EGatewayPortmap: with --portmap 127.0.0.1:111 the gateway is the
// portmapper, and libnfs's clients find it with no port in their URL, as a
// Linux client's mount does.
func TestE2EGatewayPortmap(t *testing.T) {
	cp := needLibnfs(t, "nfs-cp")
	ls := needLibnfs(t, "nfs-ls")
	if l, err := net.Listen("tcp", "127.0.0.1:111"); err != nil {
		t.Skipf("port 111 is taken (a portmapper runs here?): %v", err)
	} else {
		l.Close()
	}
	v := newE2EVolume(t)
	port := freePort(t)
	g := startGateway(t, cairnBinary(t), v.meta, port, v.dir+"/gw.log", "--portmap", "127.0.0.1:111")
	src := filepath.Join(v.dir, "src")
	if err := os.WriteFile(src, []byte("found by the portmapper"), 0o644); err != nil {
		t.Fatal(err)
	}
	nfsCmd(t, cp, src, "nfs://127.0.0.1//found?version=3")
	if out := nfsCmd(t, ls, "nfs://127.0.0.1/?version=3"); !strings.Contains(out, "found") {
		t.Fatalf("nfs-ls through the portmapper:\n%s", out)
	}
	stopGateway(t, g)
	cairn(t, "fsck", v.meta)
}
