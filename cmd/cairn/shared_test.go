package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/daemon"
	"github.com/cairnfs/cairn/internal/meta"
	"github.com/cairnfs/cairn/internal/testenv/pgtest"
	"github.com/cairnfs/cairn/internal/testenv/s3test"
	"github.com/jackc/pgx/v5"
)

// Shared mode end to end: one volume on a real PostgreSQL and a real S3
// server (versitygw), mounted by several cairn processes at once.

func TestMain(m *testing.M) {
	if cfg := os.Getenv(outageWorkerEnv); cfg != "" {
		os.Exit(outageWorker(cfg)) // the load of TestSharedOutages, in a process of its own
	}
	if cfg := os.Getenv(writerEnv); cfg != "" {
		os.Exit(testWriter(cfg)) // writer_test.go
	}
	pgtest.Wrap(func() { s3test.Main(m) })
	if binPath != "" {
		// The binary the end-to-end tests built (cairnBinary).
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
}

// Session timing of the test mounts: short, so expiry is quick to observe.
const (
	testHeartbeat      = 500 * time.Millisecond
	testSessionTimeout = 3 * time.Second
)

type sharedVolume struct {
	dir, meta string
	env       []string
}

func newSharedVolume(t *testing.T) *sharedVolume {
	t.Helper()
	bin := cairnBinary(t)
	db := pgtest.NewDatabase(t)
	b := s3test.NewBucket(t)
	v := &sharedVolume{dir: t.TempDir(), meta: db,
		env: append(os.Environ(), "AWS_ACCESS_KEY_ID="+b.AccessKey, "AWS_SECRET_ACCESS_KEY="+b.SecretKey)}
	c := exec.Command(bin, "format", "--data", b.URL, v.meta, "shared")
	c.Env = v.env
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("format: %v\n%s", err, out)
	}
	return v
}

func (v *sharedVolume) cairn(t *testing.T, args ...string) (string, error) {
	t.Helper()
	c := exec.Command(cairnBinary(t), args...)
	c.Env = v.env
	out, err := c.CombinedOutput()
	return string(out), err
}

// sharedMount is one cairn mount process of the volume, in the foreground
// so the test can kill it.
type sharedMount struct {
	mnt  string
	cmd  *exec.Cmd
	done chan struct{}
}

func (v *sharedVolume) mount(t *testing.T, name string, extra ...string) *sharedMount {
	t.Helper()
	mnt := filepath.Join(v.dir, name)
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"mount", "-o", "allow_other",
		"--heartbeat", testHeartbeat.String(), "--session-timeout", testSessionTimeout.String()}, extra...)
	c := exec.Command(cairnBinary(t), append(args, v.meta, mnt)...)
	c.Env = v.env
	logf, err := os.Create(filepath.Join(v.dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	c.Stdout, c.Stderr = logf, logf
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	m := &sharedMount{mnt: mnt, cmd: c, done: make(chan struct{})}
	go func() { _ = c.Wait(); logf.Close(); close(m.done) }()
	t.Cleanup(func() { m.stop(t) })
	for i := 0; i < 200; i++ {
		if _, ok := mountedAt(mnt); ok {
			return m
		}
		select {
		case <-m.done:
			log, _ := os.ReadFile(filepath.Join(v.dir, name+".log"))
			t.Fatalf("mount %s exited:\n%s", name, log)
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("mount %s did not appear", name)
	return nil
}

// stop unmounts with SIGTERM (flush, unmount); a dead process's mount is
// detached.
func (m *sharedMount) stop(t *testing.T) {
	select {
	case <-m.done:
	default:
		_ = m.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-m.done:
		case <-time.After(30 * time.Second):
			t.Errorf("mount %s did not stop on SIGTERM", m.mnt)
			_ = m.cmd.Process.Kill()
			<-m.done
		}
	}
	if _, ok := mountedAt(m.mnt); ok {
		_ = syscall.Unmount(m.mnt, syscall.MNT_DETACH)
	}
}

func (m *sharedMount) kill(t *testing.T) {
	t.Helper()
	if err := m.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-m.done
	if err := syscall.Unmount(m.mnt, syscall.MNT_DETACH); err != nil {
		t.Fatalf("detaching the dead mount: %v", err)
	}
	// A killed process leaves its control socket; the test's mount point
	// is never mounted again, so nothing would replace it.
	if err := os.Remove(daemon.MountSocketPath(m.mnt)); err != nil && !os.IsNotExist(err) {
		t.Errorf("removing the dead mount's control socket: %v", err)
	}
}

func (m *sharedMount) path(name string) string { return filepath.Join(m.mnt, name) }

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// TestSharedUmountWaits: cairn umount of a shared volume's mount finds the
// mount process through the mount's own socket and returns only once that
// process has exited (flushed and closed its session), as it does for
// embedded volumes.
func TestSharedUmountWaits(t *testing.T) {
	v := newSharedVolume(t)
	a := v.mount(t, "a")
	writeFile(t, a.path("f"), randomBytes(3<<20))
	h, err := daemon.QueryMountHolder(a.mnt)
	if err != nil || h.Pid != a.cmd.Process.Pid || h.MountPoint != a.mnt {
		t.Fatalf("holder of %s: %+v, %v; want pid %d", a.mnt, h, err, a.cmd.Process.Pid)
	}
	if out, err := v.cairn(t, "umount", a.mnt); err != nil {
		t.Fatalf("umount: %v\n%s", err, out)
	}
	select {
	case <-a.done:
	case <-time.After(2 * time.Second):
		t.Fatal("cairn umount returned while the mount process was still running")
	}
}

func TestSharedCloseToOpen(t *testing.T) {
	v := newSharedVolume(t)
	a := v.mount(t, "a")
	b := v.mount(t, "b")

	// Written and closed in a, seen whole at the next open in b; then the
	// other way round, overwriting part of it.
	data := randomBytes(9<<20 + 123)
	writeFile(t, a.path("f"), data)
	if got := readFile(t, b.path("f")); !bytes.Equal(got, data) {
		t.Fatalf("b read %d bytes, want the %d a wrote", len(got), len(data))
	}
	patch := randomBytes(5000)
	f, err := os.OpenFile(b.path("f"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(patch, 4<<20-100); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	copy(data[4<<20-100:], patch)
	if got := readFile(t, a.path("f")); !bytes.Equal(got, data) {
		t.Fatal("a does not see b's overwrite after b closed")
	}

	// O_APPEND from both clients, one after the other: every record lands
	// after the previous one.
	var want bytes.Buffer
	for i := 0; i < 20; i++ {
		m := a
		if i%2 == 1 {
			m = b
		}
		rec := fmt.Sprintf("record %02d from %s\n", i, filepath.Base(m.mnt))
		want.WriteString(rec)
		f, err := os.OpenFile(m.path("log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(rec); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range []*sharedMount{a, b} {
		if got := readFile(t, m.path("log")); string(got) != want.String() {
			t.Fatalf("%s: appended log is\n%s\nwant\n%s", m.mnt, got, want.String())
		}
	}

	// Truncation in one client is seen by the other's next open.
	if err := os.Truncate(a.path("f"), 1000); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, b.path("f")); !bytes.Equal(got, data[:1000]) {
		t.Fatalf("after truncate in a, b reads %d bytes", len(got))
	}
}

func TestSharedNamespace(t *testing.T) {
	v := newSharedVolume(t)
	// Names are cached by the kernel for --entry-timeout: 0 here so the
	// test sees the other client's renames at once.
	a := v.mount(t, "a", "--entry-timeout", "0", "--attr-timeout", "0")
	b := v.mount(t, "b", "--entry-timeout", "0", "--attr-timeout", "0")

	writeFile(t, a.path("old"), []byte("x"))
	if err := os.Rename(a.path("old"), a.path("new")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(b.path("old")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("b still sees the old name: %v", err)
	}
	if got := readFile(t, b.path("new")); string(got) != "x" {
		t.Fatalf("b reads %q under the new name", got)
	}

	// Rename races: both clients rename the same file at once; exactly one
	// wins, and the file exists under exactly one name.
	for i := 0; i < 20; i++ {
		src := fmt.Sprintf("race%d", i)
		writeFile(t, a.path(src), []byte(src))
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for j, m := range []*sharedMount{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[j] = os.Rename(m.path(src), m.path(fmt.Sprintf("%s-by-%d", src, j)))
			}()
		}
		wg.Wait()
		won := 0
		for j := range errs {
			if errs[j] == nil {
				won++
			} else if !errors.Is(errs[j], os.ErrNotExist) {
				t.Fatalf("rename race %d: %v", i, errs[j])
			}
		}
		names := 0
		for j := range 2 {
			if _, err := os.Stat(a.path(fmt.Sprintf("%s-by-%d", src, j))); err == nil {
				names++
			}
		}
		if won != 1 || names != 1 {
			t.Fatalf("rename race %d: %d renames succeeded, file under %d names (%v)", i, won, names, errs)
		}
	}

	// Unlink in one client while the other has the file open: the open
	// handle keeps reading; the name is gone for both.
	data := randomBytes(1 << 20)
	writeFile(t, a.path("open"), data)
	f, err := os.Open(b.path("open"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(a.path("open")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(b.path("open")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("b still sees the unlinked name: %v", err)
	}
	got := make([]byte, len(data))
	if _, err := f.ReadAt(got, 0); err != nil {
		t.Fatalf("reading an unlinked file open in the other client: %v", err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("unlinked-but-open file reads wrong data")
	}
	f.Close()

	// Concurrent creates of one name: exactly one O_EXCL create wins.
	var wg sync.WaitGroup
	wins := make([]bool, 2)
	for j, m := range []*sharedMount{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 30; i++ {
				f, err := os.OpenFile(m.path(fmt.Sprintf("excl%d", i)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
				if err == nil {
					wins[j] = true
					f.Close()
				}
			}
		}()
	}
	wg.Wait()
	entries, err := os.ReadDir(b.mnt)
	if err != nil {
		t.Fatal(err)
	}
	excl := 0
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "excl") {
			excl++
		}
	}
	if excl != 30 {
		t.Fatalf("%d excl files, want 30", excl)
	}
	a.stop(t)
	b.stop(t)
	if out, err := v.cairn(t, "fsck", v.meta); err != nil {
		t.Fatalf("fsck: %v\n%s", err, out)
	}
}

// lockFile opens path and takes a lock: flock (whole file) or a POSIX
// write lock on [0, 100).
func lockFile(path string, posix, wait bool) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if posix {
		cmd := syscall.F_SETLK
		if wait {
			cmd = syscall.F_SETLKW
		}
		lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0, Start: 0, Len: 100}
		err = syscall.FcntlFlock(f.Fd(), cmd, &lk)
	} else {
		how := syscall.LOCK_EX
		if !wait {
			how |= syscall.LOCK_NB
		}
		err = syscall.Flock(int(f.Fd()), how)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func TestSharedLocks(t *testing.T) {
	v := newSharedVolume(t)
	a := v.mount(t, "a")
	b := v.mount(t, "b")
	for _, posix := range []bool{false, true} {
		t.Run(map[bool]string{false: "flock", true: "posix"}[posix], func(t *testing.T) {
			name := fmt.Sprintf("lock-%v", posix)
			held, err := lockFile(a.path(name), posix, false)
			if err != nil {
				t.Fatal(err)
			}
			if f, err := lockFile(b.path(name), posix, false); err == nil || !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.EACCES) {
				f.Close()
				t.Fatalf("conflicting non-blocking lock from the other mount: %v, want EAGAIN", err)
			}
			got := make(chan error, 1)
			var waiter *os.File
			go func() {
				var err error
				waiter, err = lockFile(b.path(name), posix, true)
				got <- err
			}()
			select {
			case err := <-got:
				t.Fatalf("blocking lock returned (%v) while the other mount holds it", err)
			case <-time.After(500 * time.Millisecond):
			}
			released := time.Now()
			held.Close() // releases flock and POSIX locks
			select {
			case err := <-got:
				if err != nil {
					t.Fatal(err)
				}
				// The release wakes the waiter through the database, not
				// a re-check timer (5 s).
				if d := time.Since(released); d > 3*time.Second {
					t.Errorf("waiter granted %v after the release", d)
				}
				waiter.Close()
			case <-time.After(20 * time.Second):
				t.Fatal("blocked lock not granted after the holder released it")
			}
		})
	}
}

func TestSharedKilledLockHolder(t *testing.T) {
	v := newSharedVolume(t)
	a := v.mount(t, "a")
	b := v.mount(t, "b")

	// b's client holds a lock and an unlinked file open when it dies.
	held, err := lockFile(b.path("lk"), false, false)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	writeFile(t, b.path("ghost"), randomBytes(1<<20))
	ghost, err := os.Open(b.path("ghost"))
	if err != nil {
		t.Fatal(err)
	}
	defer ghost.Close()
	if err := os.Remove(b.path("ghost")); err != nil {
		t.Fatal(err)
	}
	if _, err := lockFile(a.path("lk"), false, false); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("lock held by b: a got %v, want EAGAIN", err)
	}
	killed := time.Now()
	b.kill(t)

	f, err := lockFile(a.path("lk"), false, true)
	if err != nil {
		t.Fatal(err)
	}
	waited := time.Since(killed)
	f.Close()
	if waited < testSessionTimeout-testHeartbeat || waited > testSessionTimeout+10*time.Second {
		t.Errorf("lock of the killed client granted after %v; session timeout is %v", waited, testSessionTimeout)
	}
	t.Logf("lock of the killed client granted after %v (session timeout %v)", waited, testSessionTimeout)

	status, err := v.cairn(t, "status", v.meta)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(status, "dead") || !strings.Contains(status, "expired") {
		t.Errorf("status does not list the dead session:\n%s", status)
	}
	// The unlinked file the dead client held went with its session: fsck
	// would report an unlinked inode no live session holds.
	a.stop(t)
	out, err := v.cairn(t, "fsck", v.meta)
	if err != nil {
		t.Fatalf("fsck: %v\n%s", err, out)
	}
}

func TestSharedCrashDuringWrites(t *testing.T) {
	v := newSharedVolume(t)
	a := v.mount(t, "a")
	b := v.mount(t, "b")

	keep := randomBytes(6 << 20)
	f, err := os.Create(b.path("kept"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(keep); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()

	// a writes big files, never closing the last one; b keeps working.
	stopB := make(chan struct{})
	bErr := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stopB:
				bErr <- nil
				return
			default:
			}
			p := b.path(fmt.Sprintf("b%d", i%5))
			d := randomBytes(256 << 10)
			if err := os.WriteFile(p, d, 0o644); err != nil {
				bErr <- err
				return
			}
			if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, d) {
				bErr <- fmt.Errorf("b read back %s: %v", p, err)
				return
			}
		}
	}()
	g, err := os.Create(a.path("unfinished"))
	if err != nil {
		t.Fatal(err)
	}
	junk := randomBytes(1 << 20)
	for i := 0; i < 40; i++ {
		if _, err := g.Write(junk); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(500 * time.Millisecond) // let full blocks upload
	a.kill(t)
	g.Close()
	time.Sleep(testSessionTimeout + 2*time.Second) // b expires a's session
	close(stopB)
	if err := <-bErr; err != nil {
		t.Fatalf("the surviving client failed: %v", err)
	}
	if got := readFile(t, b.path("kept")); !bytes.Equal(got, keep) {
		t.Fatal("fsynced file changed")
	}

	out, err := v.cairn(t, "fsck", v.meta)
	if err != nil {
		t.Fatalf("fsck after kill -9: %v\n%s", err, out)
	}
	gc, err := v.cairn(t, "gc", v.meta)
	if err != nil {
		t.Fatalf("gc: %v\n%s", err, gc)
	}
	if !strings.Contains(gc, "orphan chunks/") {
		t.Errorf("gc found no orphans of the killed client's unfinished write:\n%s", gc)
	}
	t.Logf("gc while b is mounted:\n%s", lastLines(gc, 2))
	if out, err := v.cairn(t, "gc", "--delete", v.meta); err != nil {
		t.Fatalf("gc --delete: %v\n%s", err, out)
	}
	// Only orphans went: every file b reads is intact, fsck is clean.
	if got := readFile(t, b.path("kept")); !bytes.Equal(got, keep) {
		t.Fatal("gc --delete took data of a live file")
	}
	for i := 0; i < 5; i++ {
		if _, err := os.ReadFile(b.path(fmt.Sprintf("b%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	b.stop(t)
	if out, err := v.cairn(t, "fsck", v.meta); err != nil {
		t.Fatalf("fsck after gc: %v\n%s", err, out)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestSharedDirLeases: a mount creating files in a directory takes its
// lease and answers the lookups of new names itself; the other mount sees
// every file, and its own create there recalls the lease first, so the
// first mount sees that file at once.
func TestSharedDirLeases(t *testing.T) {
	v := newSharedVolume(t)
	a := v.mount(t, "a", "--entry-timeout", "0", "--attr-timeout", "0")
	b := v.mount(t, "b", "--entry-timeout", "0", "--attr-timeout", "0")
	if err := os.Mkdir(a.path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	const files = 200
	for i := range files {
		f, err := os.OpenFile(a.path(fmt.Sprintf("d/f%d", i)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	leases := func(m *sharedMount) meta.LeaseStats {
		t.Helper()
		out := cairn(t, "stats", "--count", "1", "--interval", "1ms", "--json", m.mnt)
		var is IntervalStats
		if err := json.Unmarshal([]byte(out), &is); err != nil || is.Totals.Leases == nil {
			t.Fatalf("stats --json: %v\n%s", err, out)
		}
		return *is.Totals.Leases
	}
	if l := leases(a); l.Held != 1 || l.Answered < files/2 {
		t.Fatalf("after %d creates in one directory, a's leases: %v", files, l)
	}
	ents, err := os.ReadDir(b.path("d"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != files {
		t.Fatalf("b lists %d files, want %d", len(ents), files)
	}
	if got := readFile(t, b.path("d/f7")); len(got) != 1 || got[0] != 7 {
		t.Fatalf("b reads %v from f7", got)
	}
	writeFile(t, b.path("d/from-b"), []byte("b"))
	if got := readFile(t, a.path("d/from-b")); string(got) != "b" {
		t.Fatalf("a reads %q from b's new file", got)
	}
	if l := leases(a); l.Held != 0 {
		t.Fatalf("b's create did not recall a's lease: %v", l)
	}
	if l := leases(b); l.Recalls < 1 {
		t.Fatalf("b created in a leased directory without a recall: %v", l)
	}
}

// TestSharedCredentialsFile: a shared volume whose S3 key pair is only in a
// shared credentials file, chosen by --s3-credentials-file and
// --s3-profile, or by CAIRN_S3_CREDENTIALS_FILE and AWS_PROFILE, mounts
// and keeps a file; without the file, the mount says it has no
// credentials and what it tried.
func TestSharedCredentialsFile(t *testing.T) {
	v := newSharedVolume(t)
	var access, secret string
	var env []string
	for _, e := range v.env {
		switch {
		case strings.HasPrefix(e, "AWS_ACCESS_KEY_ID="):
			access = strings.TrimPrefix(e, "AWS_ACCESS_KEY_ID=")
		case strings.HasPrefix(e, "AWS_SECRET_ACCESS_KEY="):
			secret = strings.TrimPrefix(e, "AWS_SECRET_ACCESS_KEY=")
		case strings.HasPrefix(e, "AWS_"), strings.HasPrefix(e, "MINIO_"), strings.HasPrefix(e, "HOME="):
		default:
			env = append(env, e)
		}
	}
	file := filepath.Join(v.dir, "s3-credentials")
	body := "[default]\naws_access_key_id = wrong\naws_secret_access_key = wrong\n\n[cairn]\naws_access_key_id = " + access + "\naws_secret_access_key = " + secret + "\n"
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	v.env = append(env, "HOME="+t.TempDir())
	out, err := v.cairn(t, "fsck", v.meta)
	if err == nil || !strings.Contains(out, "no S3 credentials") || !strings.Contains(out, "tried") {
		t.Fatalf("fsck without credentials: %v\n%s", err, out)
	}
	m := v.mount(t, "a", "--s3-credentials-file", file, "--s3-profile", "cairn")
	if err := os.WriteFile(filepath.Join(m.mnt, "f"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	m.stop(t)
	v.env = append(v.env, "CAIRN_S3_CREDENTIALS_FILE="+file, "AWS_PROFILE=cairn")
	m = v.mount(t, "b")
	if b, err := os.ReadFile(filepath.Join(m.mnt, "f")); err != nil || string(b) != "kept" {
		t.Fatalf("read back through a mount with credentials from CAIRN_S3_CREDENTIALS_FILE: %q, %v", b, err)
	}
	m.stop(t)
	if out, err := v.cairn(t, "fsck", v.meta); err != nil {
		t.Fatalf("fsck: %v\n%s", err, out)
	}
}

// TestPostgresPasswordSources: a role that must give a password (the
// test's server trusts its other roles) reaches its volume with the
// password from PGPASSWORD or from the password file PGPASSFILE names, as
// libpq's rules say, and without one is refused with the server's reason.
func TestPostgresPasswordSources(t *testing.T) {
	bin := cairnBinary(t)
	db := pgtest.NewDatabase(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	role := fmt.Sprintf("cairnpw%d", os.Getpid())
	name := conn.Config().Database
	var hba string
	for _, q := range []string{
		"CREATE ROLE " + role + " LOGIN PASSWORD 'the-secret'",
		"ALTER DATABASE " + name + " OWNER TO " + role,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := conn.QueryRow(ctx, "SHOW hba_file").Scan(&hba); err != nil {
		t.Fatal(err)
	}
	old, err := os.ReadFile(hba)
	if err != nil {
		t.Fatal(err)
	}
	// This role alone must give a password.
	if err := os.WriteFile(hba, append([]byte("local all "+role+" scram-sha-256\n"), old...), 0o600); err != nil {
		t.Fatal(err)
	}
	reload := func() {
		if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond) // the postmaster rereads it on its signal
	}
	reload()
	t.Cleanup(func() {
		_ = os.WriteFile(hba, old, 0o600)
		_, _ = conn.Exec(context.Background(), "SELECT pg_reload_conf()")
	})
	u := strings.Replace(db, "postgres://postgres@", "postgres://"+role+"@", 1)
	dir := t.TempDir()
	cairnEnv := func(env ...string) (string, error) {
		c := exec.Command(bin, "format", "--data", "file://"+dir+"/data", u, "pw")
		var base []string
		for _, e := range os.Environ() {
			if !strings.HasPrefix(e, "PGPASS") && !strings.HasPrefix(e, "HOME=") {
				base = append(base, e)
			}
		}
		c.Env = append(append(base, "HOME="+dir), env...)
		out, err := c.CombinedOutput()
		return string(out), err
	}
	out, err := cairnEnv()
	if err == nil || !strings.Contains(out, "password") {
		t.Fatalf("format with no password: %v\n%s", err, out)
	}
	passfile := filepath.Join(dir, "pgpass")
	if err := os.WriteFile(passfile, []byte("*:*:*:"+role+":the-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := cairnEnv("PGPASSFILE=" + passfile); err != nil || !strings.Contains(out, "pw") {
		t.Fatalf("format with PGPASSFILE: %v\n%s", err, out)
	}
	c := exec.Command(bin, "status", u)
	c.Env = append(os.Environ(), "PGPASSWORD=the-secret")
	if out, err := c.CombinedOutput(); err != nil || !strings.Contains(string(out), "Volume") {
		t.Fatalf("status with PGPASSWORD: %v\n%s", err, out)
	}
	if strings.Contains(out, "the-secret") {
		t.Errorf("format printed the password:\n%s", out)
	}
}

// TestSharedConfigLive: a capacity set by cairn config, from a process of
// its own, reaches the mounted clients within their heartbeats: df shows
// it, and a write past it fails with ENOSPC; lifted, writes go on.
func TestSharedConfigLive(t *testing.T) {
	v := newSharedVolume(t)
	a := v.mount(t, "a")
	b := v.mount(t, "b")
	if out, err := v.cairn(t, "config", "--capacity", "1M", "--name", "small", v.meta); err != nil || !strings.Contains(out, "1.0 MiB") {
		t.Fatalf("config: %v\n%s", err, out)
	}
	for _, m := range []*sharedMount{a, b} {
		deadline := time.Now().Add(10 * testHeartbeat)
		for {
			var st syscall.Statfs_t
			if err := syscall.Statfs(m.mnt, &st); err != nil {
				t.Fatal(err)
			}
			if uint64(st.Blocks)*uint64(st.Bsize) == 1<<20 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: df shows %d bytes, want the new capacity", m.mnt, uint64(st.Blocks)*uint64(st.Bsize))
			}
			time.Sleep(testHeartbeat / 4)
		}
	}
	big := bytes.Repeat([]byte("x"), 2<<20)
	err := os.WriteFile(filepath.Join(b.mnt, "big"), big, 0o644)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("writing 2 MiB past a 1 MiB capacity: %v", err)
	}
	os.Remove(filepath.Join(b.mnt, "big"))
	if out, err := v.cairn(t, "config", "--capacity", "unlimited", v.meta); err != nil || !strings.Contains(out, "unlimited") {
		t.Fatalf("config unlimited: %v\n%s", err, out)
	}
	time.Sleep(3 * testHeartbeat)
	if err := os.WriteFile(filepath.Join(b.mnt, "big"), big, 0o644); err != nil {
		t.Fatalf("writing 2 MiB once the capacity is lifted: %v", err)
	}
	if out, err := v.cairn(t, "status", v.meta); err != nil || !strings.Contains(out, "small") {
		t.Fatalf("status after the rename: %v\n%s", err, out)
	}
}
