package main

import (
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSharedReplicate: a shared volume (PostgreSQL and S3) replicated to
// an embedded volume by a replicator process while a mount writes without
// pause, with a quota on the tree and the trash on. The replicator is
// killed twice at random points and restarted; PostgreSQL stops for 3 s:
// the pair pauses and goes on by itself. After the writer stops, a cycle
// brings the destination to the source's tree exactly. Then the destination fails over, is written, and a reverse
// brings the shared volume to its state (the shared volume mounts
// read-only from then on). fsck is clean on both sides.
func TestSharedReplicate(t *testing.T) {
	pg, v, a := outageQuotaVolume(t, "--bytes", "1G")
	dst := newE2EVolume(t)
	logf, err := os.OpenFile(filepath.Join(v.dir, "replicate.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	var rep *exec.Cmd
	var repDone chan error
	startRep := func() {
		c := exec.Command(cairnBinary(t), "replicate", "start", "--max-out-of-sync", "2s", v.meta, dst.meta)
		c.Env = v.env
		c.Stdout, c.Stderr = logf, logf
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- c.Wait() }()
		rep, repDone = c, done
	}
	startRep()
	t.Cleanup(func() {
		_ = rep.Process.Signal(syscall.SIGTERM)
		<-repDone
	})
	repLog := func() string {
		b, _ := os.ReadFile(filepath.Join(v.dir, "replicate.log"))
		return lastLines(string(b), 30)
	}

	// The writer runs in a process of its own (writer_test.go says why):
	// files of 1 KB to about 100 KB, every fourth fsynced, every fifth
	// writing removes the file three before it.
	wr := startWriter(t, writerConfig{Dir: a.path("q"), Size: 1000, Step: 97, SyncEvery: 4, RemoveEvery: 5, RemoveBack: 3, Pause: 10 * time.Millisecond})
	// The replicator is killed (SIGKILL) twice at random points and
	// started again.
	for k := 0; k < 2; k++ {
		time.Sleep(time.Duration(500+mrand.IntN(2000)) * time.Millisecond)
		_ = rep.Process.Kill()
		<-repDone
		startRep()
	}
	time.Sleep(2 * time.Second)
	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * time.Second)
	wr.Stop()
	if wr.Err != "" || wr.Files < 50 {
		t.Fatalf("the writer: %d files, error %q", wr.Files, wr.Err)
	}
	last := time.Now()
	deadline := last.Add(60 * time.Second)
	for {
		s := replicaStatus(t, dst.meta)
		if s.State.Taken.After(last) {
			t.Logf("%d cycles; last: %+v", s.State.Cycles, s.State.LastCycle)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no cycle after the writer stopped within 60 s (status %+v):\n%s", s, repLog())
		}
		time.Sleep(200 * time.Millisecond)
	}
	want := statTree(t, a.mnt)
	if out := cairn(t, "replicate", "stop", dst.meta); !strings.Contains(out, "stopped") {
		t.Fatalf("replicate stop: %s", out)
	}
	if err := <-repDone; err != nil {
		t.Fatalf("replicator exit after stop: %v\n%s", err, repLog())
	}
	repDone <- nil // for the cleanup
	dst.mount(t)
	sameStatTrees(t, "the destination", want, statTree(t, dst.mnt))
	dst.unmount(t)
	a.stop(t)

	if out := cairn(t, "replicate", "failover", dst.meta); !strings.Contains(out, "is writable") {
		t.Fatalf("failover: %s", out)
	}
	dst.mount(t)
	if err := os.WriteFile(filepath.Join(dst.mnt, "q", "after"), randomBytes(200000), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dst.mnt, "q", "f0001")); err != nil {
		t.Fatal(err)
	}
	want = statTree(t, dst.mnt)
	dst.unmount(t)
	if out, err := v.cairn(t, "replicate", "reverse", "--once", dst.meta, v.meta); err != nil || !strings.Contains(out, "replicated snapshot") {
		t.Fatalf("reverse: %v\n%s", err, out)
	}
	b := v.mount(t, "b")
	sameStatTrees(t, "the shared volume after the reverse", want, statTree(t, b.mnt))
	if err := os.WriteFile(b.path("x"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write on the shared volume, now a destination: %v, want EROFS", err)
	}
	b.stop(t)
	fsckClean(t, v.env, v.meta, dst.meta)
}

// TestSharedReplicateEverySnapshot: cycles run one after another while a
// mount of the shared source writes; after each, the destination (an
// embedded volume, mounted between cycles) equals the source's snapshot
// of that cycle, seen under the writer's .snapshots, byte for byte and by
// metadata (inode numbers, links, modes, owners, sizes, mtimes, xattrs).
func TestSharedReplicateEverySnapshot(t *testing.T) {
	v := newSharedVolume(t)
	dst := newE2EVolume(t)
	a := v.mount(t, "a")
	stop := make(chan struct{})
	wrote := make(chan error, 1)
	go func() {
		defer close(wrote)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			p := a.path(fmt.Sprintf("f%04d", i%50))
			if err := os.WriteFile(p, randomBytes(1+i*7919%200000), 0o644); err != nil {
				wrote <- err
				return
			}
			if i%7 == 0 {
				if err := os.Rename(p, a.path(fmt.Sprintf("r%04d", i))); err != nil {
					wrote <- err
					return
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
	}()
	for n := 1; n <= 3; n++ {
		time.Sleep(700 * time.Millisecond)
		if out, err := v.cairn(t, "replicate", "start", "--once", v.meta, dst.meta); err != nil {
			t.Fatalf("cycle %d: %v\n%s", n, err, out)
		}
		name := replicaStatus(t, dst.meta).State.Snapshot
		want := statTree(t, filepath.Join(a.mnt, ".snapshots", name))
		dst.mount(t)
		got := statTree(t, dst.mnt)
		dst.unmount(t)
		sameStatTrees(t, fmt.Sprintf("cycle %d (%s)", n, name), maskInodes(want), maskInodes(got))
		if len(want) < 10 {
			t.Fatalf("cycle %d: only %d entries", n, len(want))
		}
	}
	close(stop)
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	a.stop(t)
	fsckClean(t, v.env, v.meta, dst.meta)
}

// maskInodes keeps the low 48 bits of the inode numbers in statTree's
// descriptions: a snapshot's files show under .snapshots with its slot
// in the high bits.
func maskInodes(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		var ino uint64
		if _, err := fmt.Sscanf(v, "ino=%d ", &ino); err == nil {
			v = fmt.Sprintf("ino=%d", ino&(1<<48-1)) + v[strings.Index(v, " "):]
		}
		out[k] = v
	}
	return out
}
