package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/nfs/nfsclient"
	"github.com/cairnfs/cairn/internal/nfs/proto"
)

// TestE2ENLMBesideFUSE: cairn mount --nfs-listen serves one embedded
// volume through a FUSE mount and over NFS from one process, and a lock
// is one lock whichever way it was taken. A lock taken over NLM makes this
// process's fcntl(F_SETLK) on the FUSE mount fail with EAGAIN (and
// F_GETLK report it), a blocked F_SETLKW gets the lock when NLM unlocks;
// a lock taken through FUSE makes NLM TEST report its holder and a
// non-blocking NLM LOCK DENIED, and a blocking NLM LOCK is GRANTED when
// the FUSE lock goes. The test process is one POSIX lock owner on the
// mount, and the NLM client another (its owner is the NFS client's). The
// NLM calls are counted in the process's metrics.
func TestE2ENLMBesideFUSE(t *testing.T) {
	v := newE2EVolume(t)
	port := freePort(t)
	metrics := "127.0.0.1:" + freePort(t)
	cairn(t, "mount", "-d", "-o", "allow_other", "--log", v.dir+"/mount.log", "--metrics", metrics, "--nfs-listen", "127.0.0.1:"+port, v.meta, v.mnt)
	t.Cleanup(func() { v.unmount(t) })

	path := filepath.Join(v.mnt, "locked")
	if err := os.WriteFile(path, []byte("0123456789abcdef"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close() // before the unmount (cleanup)
	fuseLock := func(cmd int, typ int16, start, length int64) error {
		return syscall.FcntlFlock(f.Fd(), cmd, &syscall.Flock_t{Type: typ, Whence: 0, Start: start, Len: length})
	}

	c, err := nfsclient.Dial("127.0.0.1:" + port)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	root, err := c.Mount("/")
	if err != nil {
		t.Fatal(err)
	}
	fh, _, err := c.Lookup(root, "locked")
	if err != nil {
		t.Fatal(err)
	}
	nl := func(off, length uint64) proto.NLM4Lock {
		return proto.NLM4Lock{CallerName: "e2e-client", FH: fh, OH: []byte("77@e2e-client"), Svid: 77, Offset: off, Len: length}
	}
	lock := func(exclusive, block bool, off, length uint64) uint32 {
		t.Helper()
		st, err := c.NLMLock(proto.NLMProcLock, proto.NLM4LockArgs{Cookie: []byte("k"), Block: block, Exclusive: exclusive, Lock: nl(off, length), State: 1})
		if err != nil {
			t.Fatalf("NLM LOCK: %v", err)
		}
		return st
	}
	unlock := func() {
		t.Helper()
		if st, err := c.NLMUnlock([]byte("u"), nl(0, 0)); err != nil || st != proto.NLM4Granted {
			t.Fatalf("NLM UNLOCK: %d %v", st, err)
		}
	}

	// NLM holds [0,8): FUSE cannot lock over it, can beside it.
	if st := lock(true, false, 0, 8); st != proto.NLM4Granted {
		t.Fatalf("NLM LOCK on a free file: %d", st)
	}
	if err := fuseLock(syscall.F_SETLK, syscall.F_WRLCK, 4, 1); err != syscall.EAGAIN {
		t.Fatalf("FUSE F_SETLK over the NLM lock: %v, want EAGAIN", err)
	}
	if err := fuseLock(syscall.F_SETLK, syscall.F_RDLCK, 0, 0); err != syscall.EAGAIN {
		t.Fatalf("FUSE F_SETLK read lock of the whole file over the NLM lock: %v, want EAGAIN", err)
	}
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Start: 0, Len: 1}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_GETLK, &lk); err != nil || lk.Type != syscall.F_WRLCK || lk.Start != 0 || lk.Len != 8 {
		t.Fatalf("FUSE F_GETLK: %+v %v, want the NLM write lock of [0,8)", lk, err)
	}
	if err := fuseLock(syscall.F_SETLK, syscall.F_WRLCK, 8, 4); err != nil {
		t.Fatalf("FUSE F_SETLK beside the NLM lock: %v", err)
	}
	if err := fuseLock(syscall.F_SETLK, syscall.F_UNLCK, 8, 4); err != nil {
		t.Fatal(err)
	}
	// A FUSE F_SETLKW waits for the NLM lock and gets it at NLM UNLOCK.
	got := make(chan error, 1)
	go func() { got <- fuseLock(syscall.F_SETLKW, syscall.F_WRLCK, 0, 4) }()
	select {
	case err := <-got:
		t.Fatalf("FUSE F_SETLKW returned while NLM holds the lock: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	unlock()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("FUSE F_SETLKW after NLM UNLOCK: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("FUSE F_SETLKW still blocked 20 s after NLM UNLOCK")
	}

	// FUSE holds [0,4): NLM TEST reports it, LOCK is DENIED over it and
	// granted beside it.
	st, h, err := c.NLMTest([]byte("t"), true, nl(2, 1))
	if err != nil || st != proto.NLM4Denied || !h.Exclusive || h.Offset != 0 || h.Len != 4 || h.Svid != int32(os.Getpid()) {
		t.Fatalf("NLM TEST over the FUSE lock: %d %+v %v, want DENIED by pid %d's write lock of [0,4)", st, h, err, os.Getpid())
	}
	if st := lock(false, false, 0, 1); st != proto.NLM4Denied {
		t.Fatalf("NLM LOCK over the FUSE lock: %d, want DENIED", st)
	}
	if st := lock(true, false, 4, 4); st != proto.NLM4Granted {
		t.Fatalf("NLM LOCK beside the FUSE lock: %d", st)
	}
	unlock()
	// A blocking NLM LOCK is granted when the FUSE lock goes.
	nlmGot := make(chan uint32, 1)
	go func() {
		st, err := c.NLMLock(proto.NLMProcLock, proto.NLM4LockArgs{Cookie: []byte("b"), Block: true, Exclusive: true, Lock: nl(0, 0), State: 1})
		if err != nil {
			st = 1000
		}
		nlmGot <- st
	}()
	time.Sleep(300 * time.Millisecond)
	if err := fuseLock(syscall.F_SETLK, syscall.F_UNLCK, 0, 0); err != nil {
		t.Fatal(err)
	}
	select {
	case st := <-nlmGot:
		if st != proto.NLM4Granted {
			t.Fatalf("blocking NLM LOCK after the FUSE unlock: %d, want GRANTED", st)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("blocking NLM LOCK not answered 20 s after the FUSE unlock")
	}
	if err := fuseLock(syscall.F_SETLK, syscall.F_RDLCK, 10, 1); err != syscall.EAGAIN {
		t.Fatalf("FUSE F_SETLK under the whole-file NLM lock: %v, want EAGAIN", err)
	}
	unlock()
	if err := fuseLock(syscall.F_SETLK, syscall.F_WRLCK, 0, 0); err != nil {
		t.Fatalf("FUSE F_SETLK after everything was unlocked: %v", err)
	}
	if err := f.Close(); err != nil { // releases this process's locks
		t.Fatal(err)
	}
	if st := lock(true, false, 0, 0); st != proto.NLM4Granted {
		t.Fatalf("NLM LOCK after the FUSE file was closed: %d", st)
	}
	unlock()
	_, text := scrape(t, metrics)
	for _, want := range []string{
		`cairn_nfs_calls_total{proc="test",prog="nlm"} 1`,
		`cairn_nfs_calls_total{proc="lock",prog="nlm"}`,
		`cairn_nfs_calls_total{proc="unlock",prog="nlm"}`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	c.Close()
	v.unmount(t)
	cairn(t, "fsck", v.meta)
}
