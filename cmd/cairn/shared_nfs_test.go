package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/cairnfs/cairn/internal/nfs/nfsclient"
	"github.com/cairnfs/cairn/internal/nfs/proto"
)

// sharedGateway is one cairn gateway nfs process of a shared volume.
type sharedGateway struct {
	addr string
	cmd  *exec.Cmd
	done chan struct{}
}

func (v *sharedVolume) gateway(t *testing.T, name string) *sharedGateway {
	t.Helper()
	port := freePort(t)
	logPath := filepath.Join(v.dir, name+".log")
	c := exec.Command(cairnBinary(t), "gateway", "nfs", "--listen", "127.0.0.1:"+port, "--log", logPath,
		"--heartbeat", testHeartbeat.String(), "--session-timeout", testSessionTimeout.String(), v.meta)
	c.Env = v.env
	stdout, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	g := &sharedGateway{addr: "127.0.0.1:" + port, cmd: c, done: make(chan struct{})}
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	go func() { _ = c.Wait(); close(g.done) }()
	t.Cleanup(func() {
		select {
		case <-g.done:
		default:
			_ = c.Process.Signal(syscall.SIGTERM)
			<-g.done
		}
	})
	if !strings.HasPrefix(line, "serving NFSv3 on "+g.addr) {
		log, _ := os.ReadFile(logPath)
		t.Fatalf("gateway %s did not start: %q\n%s", name, line, log)
	}
	return g
}

func dialNFS(t *testing.T, addr string) *nfsclient.Client {
	t.Helper()
	c, err := nfsclient.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func readAllNFS(t *testing.T, c *nfsclient.Client, fh []byte) []byte {
	t.Helper()
	var got []byte
	for {
		p, eof, err := c.Read(fh, uint64(len(got)), 1<<20)
		if err != nil {
			t.Fatalf("read at %d: %v", len(got), err)
		}
		got = append(got, p...)
		if eof {
			return got
		}
	}
}

// TestSharedNFSFailover: two cairn gateway nfs processes of one shared
// volume (PostgreSQL and S3). Handles that gateway A gave out work on B
// without a MNT or a LOOKUP there (GETATTR, READ, WRITE, READDIR), and
// keep working on B once A is killed; what was written over NFS reads
// back identical through a FUSE mount of the volume.
func TestSharedNFSFailover(t *testing.T) {
	v := newSharedVolume(t)
	ga := v.gateway(t, "gateway-a")
	gb := v.gateway(t, "gateway-b")
	ca := dialNFS(t, ga.addr)
	root, err := ca.Mount("/")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := ca.Mkdir(root, "dir", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	fh, err := ca.Create(dir, "f", proto.CreateGuarded, proto.Sattr3{}, [8]byte{})
	if err != nil {
		t.Fatal(err)
	}
	data := randomBytes(3<<20 + 1234)
	for off := 0; off < len(data); off += 1 << 20 {
		if _, err := ca.Write(fh, uint64(off), data[off:min(off+1<<20, len(data))], proto.Unstable); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ca.Commit(fh); err != nil { // close-to-open: B sees it at its open
		t.Fatal(err)
	}

	cb := dialNFS(t, gb.addr)
	if a, err := cb.GetAttr(fh); err != nil || a.Size != uint64(len(data)) {
		t.Fatalf("A's handle on B: getattr %+v %v", a, err)
	}
	if got := readAllNFS(t, cb, fh); !bytes.Equal(got, data) {
		t.Fatalf("A's handle on B: read %d bytes, differ from the %d written on A", len(got), len(data))
	}
	more := randomBytes(100<<10 + 7)
	if _, err := cb.Write(fh, uint64(len(data)), more, proto.FileSync); err != nil {
		t.Fatalf("A's handle on B: write: %v", err)
	}
	if _, err := cb.Commit(fh); err != nil {
		t.Fatal(err)
	}
	if names, err := cb.ReadDir(dir, 4096); err != nil || !slices.Contains(names, "f") {
		t.Fatalf("A's directory handle on B: readdir %v %v", names, err)
	}
	data = append(data, more...)

	// Gateway A dies; the client carries on with B and the same handles.
	if err := ga.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-ga.done
	if a, err := cb.GetAttr(root); err != nil || a.Type != proto.NF3Dir {
		t.Fatalf("root handle on B after A died: %+v %v", a, err)
	}
	if got := readAllNFS(t, cb, fh); !bytes.Equal(got, data) {
		t.Fatalf("after A died: read %d bytes, want %d", len(got), len(data))
	}
	g, err := cb.Create(dir, "g", proto.CreateGuarded, proto.Sattr3{}, [8]byte{})
	if err != nil {
		t.Fatal(err)
	}
	gdata := randomBytes(1<<20 - 3) // one WRITE (at most 1 MiB)
	if _, err := cb.Write(g, 0, gdata, proto.Unstable); err != nil {
		t.Fatal(err)
	}
	if _, err := cb.Commit(g); err != nil {
		t.Fatal(err)
	}
	ents, _, err := cb.ReadDirPlus(dir, 4096)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name)
		if e.Name == "f" && !bytes.Equal(e.Handle, fh) {
			t.Errorf("B lists f with handle %x, A gave %x", e.Handle, fh)
		}
	}
	if !slices.Contains(names, "f") || !slices.Contains(names, "g") {
		t.Fatalf("readdirplus on B: %v", names)
	}

	// The same bytes through a FUSE mount of the volume.
	m := v.mount(t, "fuse")
	if got := readFile(t, m.path("dir/f")); !bytes.Equal(got, data) {
		t.Fatalf("written over NFS (A then B), read through FUSE: %d bytes, want %d", len(got), len(data))
	}
	if got := readFile(t, m.path("dir/g")); !bytes.Equal(got, gdata) {
		t.Fatalf("written over NFS on B, read through FUSE: %d bytes, want %d", len(got), len(gdata))
	}
}

// TestSharedNFSCloseToOpen: gateway B keeps a file open for its READs
// (NFS has no open or close) and its attributes for a second; a client
// of B that revalidates the file with a GETATTR, as NFS clients do at
// open, then reads what was written through gateway A, or through a FUSE
// mount, since B last read it: a change of the same length included.
func TestSharedNFSCloseToOpen(t *testing.T) {
	v := newSharedVolume(t)
	ga := v.gateway(t, "gateway-a")
	gb := v.gateway(t, "gateway-b")
	ca, cb := dialNFS(t, ga.addr), dialNFS(t, gb.addr)
	root, err := ca.Mount("/")
	if err != nil {
		t.Fatal(err)
	}
	fh, err := ca.Create(root, "f", proto.CreateGuarded, proto.Sattr3{Mode: ptr(uint32(0o644))}, [8]byte{})
	if err != nil {
		t.Fatal(err)
	}
	write := func(c *nfsclient.Client, data []byte) {
		t.Helper()
		if _, err := c.Write(fh, 0, data, proto.Unstable); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Commit(fh); err != nil {
			t.Fatal(err)
		}
	}
	readOnB := func(want []byte, what string) {
		t.Helper()
		if a, err := cb.GetAttr(fh); err != nil || a.Size != uint64(len(want)) {
			t.Fatalf("%s: GETATTR on B: size %d, %v; want %d", what, a.Size, err, len(want))
		}
		if got := readAllNFS(t, cb, fh); !bytes.Equal(got, want) {
			t.Fatalf("%s: B read %d bytes that differ from the %d written", what, len(got), len(want))
		}
	}
	first := randomBytes(200 << 10)
	write(ca, first)
	readOnB(first, "written on A")

	same := randomBytes(200 << 10) // the same length: only the times tell
	write(ca, same)
	readOnB(same, "rewritten on A, same length")

	longer := randomBytes(300<<10 + 5)
	write(ca, longer)
	readOnB(longer, "extended on A")

	m := v.mount(t, "fuse")
	viaFUSE := randomBytes(300<<10 + 5)
	if err := os.WriteFile(m.path("f"), viaFUSE, 0o644); err != nil {
		t.Fatal(err)
	}
	readOnB(viaFUSE, "rewritten through a FUSE mount")
}
