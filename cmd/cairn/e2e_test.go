package main

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// These tests drive the real binary: format, mount -d (a real FUSE mount),
// real programs on the mount, admin verbs while mounted, kill -9.

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

func cairnBinary(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("end-to-end mounts need root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "cairn-bin")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "cairn")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// cairn runs the binary and fails the test on error.
func cairn(t *testing.T, args ...string) string {
	t.Helper()
	out, err := cairnErr(t, args...)
	if err != nil {
		t.Fatalf("cairn %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func cairnErr(t *testing.T, args ...string) (string, error) {
	t.Helper()
	c := exec.Command(cairnBinary(t), args...)
	out, err := c.CombinedOutput()
	return string(out), err
}

func sh(t *testing.T, dir, script string) string {
	t.Helper()
	c := exec.Command("bash", "-euo", "pipefail", "-c", script)
	c.Dir = dir
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
	return string(out)
}

type e2eVolume struct {
	dir, meta, mnt string
}

func newE2EVolume(t *testing.T) *e2eVolume {
	t.Helper()
	dir := t.TempDir()
	v := &e2eVolume{dir: dir, meta: "pebble://" + dir + "/meta", mnt: filepath.Join(dir, "mnt")}
	if err := os.Mkdir(v.mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	cairn(t, "format", v.meta, "e2e")
	return v
}

// mount mounts in the background and registers an unmount at cleanup.
func (v *e2eVolume) mount(t *testing.T) {
	t.Helper()
	cairn(t, "mount", "-d", "-o", "allow_other", "--log", v.dir+"/mount.log", v.meta, v.mnt)
	t.Cleanup(func() { v.unmount(t) })
}

func (v *e2eVolume) unmount(t *testing.T) {
	if _, ok := mountedAt(v.mnt); !ok {
		return
	}
	var out string
	var err error
	for i := 0; i < 50; i++ {
		if out, err = cairnErr(t, "umount", v.mnt); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("umount: %v\n%s", err, out)
	_ = syscall.Unmount(v.mnt, syscall.MNT_DETACH)
}

func mountedAt(p string) (string, bool) {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 4 && f[4] == p {
			return l, true
		}
	}
	return "", false
}

func treeSums(t *testing.T, root string) map[string]string {
	t.Helper()
	sums := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.Type().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sums[rel] = fmt.Sprintf("%x", sha256.Sum256(b))
		} else if d.Type()&fs.ModeSymlink != 0 {
			l, _ := os.Readlink(p)
			sums[rel] = "link:" + l
		} else if d.IsDir() {
			sums[rel] = "dir"
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sums
}

func sameTrees(t *testing.T, a, b map[string]string) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("trees differ in size: %d vs %d entries", len(a), len(b))
	}
	for k, v := range a {
		if b[k] != v {
			t.Fatalf("%s differs: %s vs %s", k, v, b[k])
		}
	}
}

func TestE2EWorkloads(t *testing.T) {
	v := newE2EVolume(t)
	v.mount(t)
	src, _ := filepath.Abs("../..")
	srcTree := filepath.Join(src, "internal")
	want := treeSums(t, srcTree)

	// Copy a source tree in; identical bytes.
	sh(t, v.mnt, "cp -a "+srcTree+" tree")
	sameTrees(t, want, treeSums(t, filepath.Join(v.mnt, "tree")))

	// git init && commit on the mount.
	if _, err := exec.LookPath("git"); err == nil {
		out := sh(t, filepath.Join(v.mnt, "tree"), `git init -q . && git -c user.email=t@e -c user.name=t add -A && git -c user.email=t@e -c user.name=t commit -qm init && git fsck --strict 2>&1 && git status --porcelain | wc -l`)
		if !strings.HasSuffix(strings.TrimSpace(out), "0") {
			t.Fatalf("git status not clean after commit:\n%s", out)
		}
	}

	// SQLite database with transactions and an integrity check.
	if _, err := exec.LookPath("sqlite3"); err == nil {
		out := sh(t, v.mnt, `sqlite3 db.sqlite "create table t(a integer primary key, b text); with recursive c(x) as (select 1 union all select x+1 from c where x<20000) insert into t select x, hex(randomblob(40)) from c; update t set b = 'x' where a % 7 = 0; delete from t where a % 11 = 0; pragma integrity_check; select count(*) from t;"`)
		if !strings.Contains(out, "ok") || !strings.Contains(out, "18182") {
			t.Fatalf("sqlite3: %s", out)
		}
	}

	// tar out and back.
	local := t.TempDir()
	sh(t, v.mnt, "tar cf "+local+"/out.tar tree && mkdir -p "+local+"/x && tar xf "+local+"/out.tar -C "+local+"/x")
	sameTrees(t, treeSums(t, filepath.Join(v.mnt, "tree")), treeSums(t, filepath.Join(local, "x", "tree")))
	sh(t, v.mnt, "mkdir back && tar xf "+local+"/out.tar -C back")
	sameTrees(t, treeSums(t, filepath.Join(local, "x", "tree")), treeSums(t, filepath.Join(v.mnt, "back", "tree")))

	// Admin verbs while mounted reach the mount process.
	st := cairn(t, "status", v.meta)
	if !strings.Contains(st, v.mnt) {
		t.Fatalf("status does not list the mount's session:\n%s", st)
	}
	info := cairn(t, "info", filepath.Join(v.mnt, "db.sqlite"))
	if !strings.Contains(info, "slice ") || !strings.Contains(info, "chunks/") {
		t.Fatalf("info shows no slices/objects:\n%s", info)
	}
	cairn(t, "fsck", v.meta)
	gc := cairn(t, "gc", v.meta)
	if !strings.Contains(gc, " 0 orphans") {
		t.Fatalf("gc found orphans on a healthy mounted volume:\n%s", gc)
	}

	// A second mount of the embedded volume is refused, naming the holder.
	other := filepath.Join(v.dir, "mnt2")
	os.Mkdir(other, 0o755)
	out, err := cairnErr(t, "mount", "-d", v.meta, other)
	if err == nil || !strings.Contains(out, "in use by cairn pid") || !strings.Contains(out, v.mnt) {
		t.Fatalf("second mount: err=%v\n%s", err, out)
	}
	// The busy mountpoint is refused too.
	out, err = cairnErr(t, "mount", "-d", v.meta, v.mnt)
	if err == nil || !strings.Contains(out, "busy") {
		t.Fatalf("mount on a busy mountpoint: err=%v\n%s", err, out)
	}

	v.unmount(t)
	// After unmount the admin verbs open the volume directly.
	cairn(t, "fsck", v.meta)
}

// mountForeground runs a mount in the foreground, as a child process the
// test may kill, and returns once the mount is there.
func (v *e2eVolume) mountForeground(t *testing.T, opts ...string) *exec.Cmd {
	t.Helper()
	args := append(append([]string{"mount"}, opts...), v.meta, v.mnt)
	c := exec.Command(cairnBinary(t), args...)
	logf, _ := os.OpenFile(v.dir+"/fg.log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	c.Stdout, c.Stderr = logf, logf
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		if _, ok := mountedAt(v.mnt); ok {
			return c
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = c.Process.Kill()
	_ = c.Wait()
	t.Fatal("mount did not appear")
	return nil
}

// stopForeground ends a mountForeground process with SIGTERM, which
// must unmount and exit cleanly.
func (v *e2eVolume) stopForeground(t *testing.T, c *exec.Cmd) {
	t.Helper()
	c.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("clean shutdown on SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		c.Process.Kill()
		t.Fatal("mount process did not exit on SIGTERM")
	}
	if _, ok := mountedAt(v.mnt); ok {
		t.Fatal("SIGTERM left the mount in place")
	}
}

// An embedded mount keeps its open-file holds in memory: a file unlinked
// while open when the mount is killed has no record to keep it, and the
// next process to open the volume destroys it.
func TestE2EKill9OpenUnlinked(t *testing.T) {
	v := newE2EVolume(t)
	c := v.mountForeground(t)
	t.Cleanup(func() { _ = syscall.Unmount(v.mnt, syscall.MNT_DETACH) })
	data := make([]byte, 3<<20)
	rand.Read(data)
	path := filepath.Join(v.mnt, "gone")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("reading the open unlinked file: %v", err)
	}
	d, _ := os.Open(v.mnt)
	d.Sync() // the unlink reaches the disk before the kill
	d.Close()
	if err := c.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	c.Wait()
	if err := syscall.Unmount(v.mnt, syscall.MNT_DETACH); err != nil {
		t.Fatalf("detaching the dead mount: %v", err)
	}
	// Opening the volume (here for status) destroys it: only the root
	// is left, and nothing is used.
	out := cairn(t, "status", v.meta)
	if !regexp.MustCompile(`(?m)^Inodes\s+1$`).MatchString(out) || !regexp.MustCompile(`(?m)^Used\s+0 B `).MatchString(out) {
		t.Fatalf("status after kill -9 with an open unlinked file: want 1 inode and 0 B used:\n%s", out)
	}
	cairn(t, "fsck", v.meta)
	c = v.mountForeground(t)
	v.stopForeground(t, c)
	cairn(t, "fsck", v.meta)
}

func TestE2EKill9(t *testing.T) {
	// With the writeback cache (the default) an unflushed write may still be
	// in the kernel's page cache when the mount dies; without it, it has
	// reached Cairn's buffers and uploaded blocks become gc's orphans.
	for _, wb := range []bool{true, false} {
		t.Run(fmt.Sprintf("writeback=%v", wb), func(t *testing.T) { testKill9(t, wb) })
	}
}

func testKill9(t *testing.T, writeback bool) {
	v := newE2EVolume(t)
	start := func() *exec.Cmd { return v.mountForeground(t, fmt.Sprintf("--writeback=%v", writeback)) }
	c := start()
	t.Cleanup(func() {
		_ = syscall.Unmount(v.mnt, syscall.MNT_DETACH)
	})

	// Fsynced data must survive.
	synced := make([]byte, 9<<20)
	rand.Read(synced)
	f, err := os.Create(filepath.Join(v.mnt, "synced"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(synced); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	d, _ := os.Open(v.mnt)
	d.Sync()
	d.Close()
	// An unfinished write: large, never flushed, open at the kill.
	g, err := os.Create(filepath.Join(v.mnt, "unfinished"))
	if err != nil {
		t.Fatal(err)
	}
	junk := make([]byte, 1<<20)
	for i := 0; i < 24; i++ {
		if _, err := g.Write(junk); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(500 * time.Millisecond) // let full blocks upload
	if err := c.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	c.Wait()
	g.Close()
	f.Close()
	if err := syscall.Unmount(v.mnt, syscall.MNT_DETACH); err != nil {
		t.Fatalf("detaching the dead mount: %v", err)
	}

	// Admin verbs work on the volume of the dead process.
	fsck := cairn(t, "fsck", v.meta)
	t.Logf("fsck after kill -9:\n%s", fsck)
	gc := cairn(t, "gc", v.meta)
	t.Logf("gc after kill -9:\n%s", gc)
	if !writeback && !strings.Contains(gc, "orphan chunks/") {
		t.Errorf("gc found no orphans of the unfinished write:\n%s", gc)
	}
	cairn(t, "gc", "--delete", v.meta)
	cairn(t, "fsck", v.meta)

	c = start()
	got, err := os.ReadFile(filepath.Join(v.mnt, "synced"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, synced) {
		t.Fatal("fsynced data did not survive kill -9")
	}
	v.stopForeground(t, c)
	cairn(t, "fsck", v.meta)
}

// With the writeback cache the kernel reads the pages a write only partly
// covers through the file's handle, even one opened write-only.
func TestE2EWriteOnlyPartialPage(t *testing.T) {
	v := newE2EVolume(t)
	v.mount(t)
	p := filepath.Join(v.mnt, "f")
	want := make([]byte, 100000)
	rand.Read(want)
	if err := os.WriteFile(p, want, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	patch := bytes.Repeat([]byte("o"), 11000)
	if _, err := f.WriteAt(patch, 45000); err != nil {
		t.Fatalf("unaligned write through a write-only descriptor: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	copy(want[45000:], patch)
	got, err := os.ReadFile(p)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("content after the write: %v (equal: %v)", err, bytes.Equal(got, want))
	}
}

// TestE2EFsckExitCodes: fsck's exit status, through the mount's control
// socket and directly: 0 clean, 1 problems found (a block object removed
// from the data store), 2 when it cannot run or on bad usage.
func TestE2EFsckExitCodes(t *testing.T) {
	v := newE2EVolume(t)
	v.mount(t)
	sh(t, v.mnt, "head -c 3000000 /dev/urandom > f && sync")
	code := func(args ...string) (int, string) {
		t.Helper()
		out, err := cairnErr(t, args...)
		var ee *exec.ExitError
		switch {
		case err == nil:
			return 0, out
		case errors.As(err, &ee):
			return ee.ExitCode(), out
		}
		t.Fatalf("cairn %v: %v", args, err)
		return -1, out
	}
	if c, out := code("fsck", v.meta); c != 0 {
		t.Fatalf("fsck of a clean mounted volume: exit %d\n%s", c, out)
	}
	if c, out := code("fsck", "--scrub", "--scrub-rate", "100M", v.meta); c != 0 || !strings.Contains(out, "read and verified") {
		t.Fatalf("fsck --scrub of a clean mounted volume: exit %d\n%s", c, out)
	}
	// info by the volume's URL, by path in the volume and by inode number.
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(v.mnt, "f"), &st); err != nil {
		t.Fatal(err)
	}
	for _, arg := range []string{"/f", fmt.Sprint(st.Ino)} {
		out := cairn(t, "info", v.meta, arg)
		if !strings.Contains(out, fmt.Sprintf("inode: %d\n", st.Ino)) || !strings.Contains(out, "slice ") {
			t.Errorf("cairn info META %s:\n%s", arg, out)
		}
	}
	if out, err := cairnErr(t, "info", v.meta, "/nothing"); err == nil || !strings.Contains(out, "/nothing") {
		t.Errorf("info of a path the volume lacks: %v\n%s", err, out)
	}
	var objects []string
	if err := filepath.WalkDir(v.dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.Contains(p, "/chunks/") {
			objects = append(objects, p)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(objects) == 0 {
		t.Fatal("no block object found in the data store")
	}
	if err := os.Remove(objects[0]); err != nil {
		t.Fatal(err)
	}
	for _, when := range []string{"mounted", "unmounted"} {
		if when == "unmounted" {
			v.unmount(t)
		}
		if c, out := code("fsck", v.meta); c != 1 || !strings.Contains(out, "1 missing objects") || !strings.Contains(out, "(/f) chunk 0") {
			t.Errorf("fsck of a %s volume with an object gone: exit %d, want 1\n%s", when, c, out)
		}
	}
	// --json: the same findings, the same exit status.
	c, out := code("fsck", "--json", v.meta)
	var fr struct {
		Problems []any
		Data     []struct{ Object, Path string }
		Slices   int
	}
	// (stderr, after the JSON, says the volume has problems)
	if err := json.NewDecoder(strings.NewReader(out)).Decode(&fr); err != nil || c != 1 || len(fr.Data) != 1 || fr.Data[0].Path != "/f" || fr.Slices == 0 {
		t.Errorf("fsck --json: exit %d, %v, %+v\n%s", c, err, fr, out)
	}
	var sr struct {
		Volume    string
		UsedBytes uint64 `json:"used_bytes"`
		Sessions  []struct{ State string }
	}
	if err := json.Unmarshal([]byte(cairn(t, "status", "--json", v.meta)), &sr); err != nil || sr.Volume != "e2e" || sr.UsedBytes < 3000000 {
		t.Errorf("status --json: %v %+v", err, sr)
	}
	var ir []struct {
		Ino    uint64
		Path   string
		Chunks []struct{ Slices []struct{ Objects []string } }
	}
	if err := json.Unmarshal([]byte(cairn(t, "info", "--json", v.meta, "/f")), &ir); err != nil || len(ir) != 1 || ir[0].Ino != st.Ino ||
		ir[0].Path != "/f" || len(ir[0].Chunks) != 1 || len(ir[0].Chunks[0].Slices[0].Objects) == 0 {
		t.Errorf("info --json: %v %+v", err, ir)
	}
	var gr struct {
		Listed     bool
		Referenced int
	}
	if err := json.Unmarshal([]byte(cairn(t, "gc", "--json", v.meta)), &gr); err != nil || !gr.Listed || gr.Referenced == 0 {
		t.Errorf("gc --json: %v %+v", err, gr)
	}
	if c, out := code("fsck", "pebble://"+v.dir+"/nothing-here"); c != 2 {
		t.Errorf("fsck of no volume: exit %d, want 2\n%s", c, out)
	}
	if c, out := code("fsck"); c != 2 {
		t.Errorf("fsck without its argument: exit %d, want 2\n%s", c, out)
	}
	if out := cairn(t, "--version"); !strings.HasPrefix(out, "cairn ") {
		t.Errorf("cairn --version: %q", out)
	}
}

// TestE2EMountDaemonErrors: mount -d says on stderr what went wrong and
// exits non-zero, whether the options are refused before the mount
// process starts (--cache-mem) or by it (-o bogus, a volume that does not
// exist), leaves no log of its own behind when it fails, and prints the
// notice of a --cache-dir it does not use.
func TestE2EMountDaemonErrors(t *testing.T) {
	v := newE2EVolume(t)
	logs := func() []string {
		m, _ := filepath.Glob(filepath.Join(os.TempDir(), "cairn-mount-*"+filepath.Base(v.dir)+"*.log"))
		l, _ := filepath.Glob(v.dir + "/meta/cairn-mount.log")
		return append(m, l...)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--cache-mem", "lots"}, "--cache-mem"},
		{[]string{"-o", "bogus"}, "-o bogus: unknown mount option"},
		{[]string{"-o", "_netdev,nofail,fsname="}, "-o fsname=: unknown mount option"},
	} {
		args := append(append([]string{"mount", "-d"}, c.args...), v.meta, v.mnt)
		out, err := cairnErr(t, args...)
		if err == nil {
			v.unmount(t)
			t.Fatalf("cairn %v succeeded", args)
		}
		if !strings.Contains(out, c.want) || strings.Contains(out, "exited before the mount was ready") {
			t.Errorf("cairn %v: %q, want the reason (%q)", args, out, c.want)
		}
		if l := logs(); len(l) > 0 {
			t.Errorf("cairn %v left its log behind: %v", args, l)
		}
	}
	out, err := cairnErr(t, "mount", "-d", "pebble://"+v.dir+"/no-volume", v.mnt)
	if err == nil || !strings.Contains(out, "no-volume") {
		t.Errorf("mount -d of no volume: %v, %q", err, out)
	}
	if _, err := os.Stat(v.dir + "/no-volume"); err == nil {
		t.Error("mount -d of no volume created its directory")
	}
	if l := logs(); len(l) > 0 {
		t.Errorf("mount -d of no volume left its log behind: %v", l)
	}
	// The data store of an embedded volume is beside its metadata: a
	// --cache-dir there is not used, and the operator hears it.
	cache := filepath.Join(v.dir, "cache")
	out = cairn(t, "mount", "-d", "--log", v.dir+"/mount.log", "--cache-dir", cache, v.meta, v.mnt)
	t.Cleanup(func() { v.unmount(t) })
	if !strings.Contains(out, "--cache-dir "+cache+" not used") {
		t.Errorf("mount -d with a --cache-dir on the store's file system: %q, want a notice", out)
	}
}

// TestE2EServiceManager: a mount run by a service manager (systemd
// Type=notify) says READY=1 once mounted and STOPPING=1 when it stops,
// and with -d names its mount process as the main one (MAINPID); its log
// is JSON with --log-format json and is reopened on SIGHUP, after a
// rotation renamed it.
func TestE2EServiceManager(t *testing.T) {
	v := newE2EVolume(t)
	sock := filepath.Join(v.dir, "notify.sock")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	next := func(want string) string {
		t.Helper()
		buf := make([]byte, 4096)
		for {
			_ = ln.SetReadDeadline(time.Now().Add(20 * time.Second))
			n, err := ln.Read(buf)
			if err != nil {
				t.Fatalf("waiting for %q on NOTIFY_SOCKET: %v", want, err)
			}
			if msg := string(buf[:n]); strings.Contains(msg, want) {
				return msg
			}
		}
	}
	logf := filepath.Join(v.dir, "mount.log")
	c := v.mountForeground(t, "--log", logf, "--log-format", "json")
	next("READY=1")
	if err := os.Rename(logf, logf+".1"); err != nil {
		t.Fatal(err)
	}
	if err := c.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// The reopen is asynchronous: wait for the new file.
	for i := 0; i < 100; i++ {
		if _, err := os.Stat(logf); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	v.stopForeground(t, c)
	next("STOPPING=1")
	for file, want := range map[string]string{logf + ".1": `"msg":"mounted"`, logf: `"msg":"clean shutdown"`} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), want) {
			t.Errorf("%s has no %s:\n%s", file, want, b)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Errorf("%s: a line that is not JSON: %q", file, l)
			}
		}
	}

	out := cairn(t, "mount", "-d", "--log", logf, v.meta, v.mnt)
	t.Cleanup(func() { v.unmount(t) })
	msg := next("MAINPID=")
	if !strings.Contains(msg, "READY=1") || !strings.Contains(out, "(pid "+strings.TrimPrefix(strings.SplitN(msg, "\n", 2)[0], "MAINPID=")+",") {
		t.Errorf("mount -d: %q on NOTIFY_SOCKET; it printed %q", msg, out)
	}
	v.unmount(t)
	next("STOPPING=1")
}

// TestE2EFstab: an /etc/fstab line of type cairn mounts with mount -a and
// goes with umount, through the binary linked as mount.cairn, in a private
// mount namespace whose /etc/fstab and /sbin are the test's.
func TestE2EFstab(t *testing.T) {
	v := newE2EVolume(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("no unshare")
	}
	fstab := filepath.Join(v.dir, "fstab")
	line := fmt.Sprintf("%s %s cairn _netdev,allow_other,nofail,cache-mem=64M,log=%s/fstab.log 0 0\n", v.meta, v.mnt, v.dir)
	if err := os.WriteFile(fstab, []byte("# test\n"+line), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `set -eu
mount -t tmpfs tmpfs /usr/sbin
ln -s "$BIN" /usr/sbin/mount.cairn
mount --bind "$FSTAB" /etc/fstab
trap 'umount "$MNT" 2>/dev/null || true' EXIT
mount -a -t cairn
grep -q " $MNT " /proc/self/mountinfo
echo kept > "$MNT/f"
cat "$MNT/f"
umount "$MNT"
grep -q " $MNT " /proc/self/mountinfo && exit 3 || true
`
	c := exec.Command("unshare", "--mount", "--propagation", "private", "bash", "-c", script)
	c.Env = append(os.Environ(), "BIN="+cairnBinary(t), "FSTAB="+fstab, "MNT="+v.mnt)
	out, err := c.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "kept" {
		log, _ := os.ReadFile(v.dir + "/fstab.log")
		t.Fatalf("mount -a, write, umount in a namespace: %v\n%s\nlog:\n%s", err, out, log)
	}
	// The mount process flushed and let the volume go.
	for i := 0; ; i++ {
		out, err := cairnErr(t, "fsck", v.meta)
		if err == nil && strings.Contains(out, "0 metadata problems") {
			break
		}
		if i == 100 {
			t.Fatalf("fsck after the fstab mount: %v\n%s", err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The file is there for the next mount.
	v.mount(t)
	if b, err := os.ReadFile(filepath.Join(v.mnt, "f")); err != nil || string(b) != "kept\n" {
		t.Fatalf("f after the fstab mount: %q %v", b, err)
	}
}
