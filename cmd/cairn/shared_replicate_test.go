package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/testenv/pgtest"
)

// TestSharedReplicate: a shared volume (PostgreSQL and S3) replicated to
// an embedded volume by a replicator process while a mount writes without
// pause, with a quota on the tree and the trash on. PostgreSQL stops for
// 3 s in the middle: the pair pauses and goes on by itself. After the
// writer stops, a cycle brings the destination to the source's tree
// exactly. Then the destination fails over, is written, and a reverse
// brings the shared volume to its state (the shared volume mounts
// read-only from then on). fsck is clean on both sides.
func TestSharedReplicate(t *testing.T) {
	if testing.Short() {
		t.Skip("stops the shared PostgreSQL server")
	}
	pg := pgtest.Shared(t)
	t.Cleanup(func() { _ = pg.Start() })
	v := newSharedVolume(t)
	if out, err := v.cairn(t, "config", "--trash-days", "1", v.meta); err != nil {
		t.Fatalf("config: %v\n%s", err, out)
	}
	dst := newE2EVolume(t)
	a := v.mount(t, "a")
	if err := os.Mkdir(a.path("q"), 0o777); err != nil {
		t.Fatal(err)
	}
	if out, err := v.cairn(t, "quota", "set", v.meta, "/q", "--bytes", "1G"); err != nil {
		t.Fatalf("quota set: %v\n%s", err, out)
	}
	rep := exec.Command(cairnBinary(t), "replicate", "start", "--max-out-of-sync", "2s", v.meta, dst.meta)
	rep.Env = v.env
	logf, err := os.Create(filepath.Join(v.dir, "replicate.log"))
	if err != nil {
		t.Fatal(err)
	}
	rep.Stdout, rep.Stderr = logf, logf
	if err := rep.Start(); err != nil {
		t.Fatal(err)
	}
	repDone := make(chan error, 1)
	go func() { repDone <- rep.Wait(); logf.Close() }()
	t.Cleanup(func() {
		_ = rep.Process.Signal(syscall.SIGTERM)
		<-repDone
	})
	repLog := func() string {
		b, _ := os.ReadFile(filepath.Join(v.dir, "replicate.log"))
		return lastLines(string(b), 30)
	}

	write := func(until time.Time, from int) int {
		i := from
		for ; time.Now().Before(until); i++ {
			name := fmt.Sprintf("q/f%04d", i)
			f, err := os.Create(a.path(name))
			if err == nil {
				_, err = f.Write(randomBytes(1 + i*4099%300000))
			}
			if err == nil && i%4 == 0 {
				err = f.Sync()
			}
			if f != nil {
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if i%5 == 4 {
				if err := os.Remove(a.path(fmt.Sprintf("q/f%04d", i-3))); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		return i
	}
	i := write(time.Now().Add(3*time.Second), 0)
	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	write(time.Now().Add(4*time.Second), i)
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
	if err := os.WriteFile(b.path("x"), nil, 0o644); !isErrno(err, syscall.EROFS) {
		t.Fatalf("write on the shared volume, now a destination: %v, want EROFS", err)
	}
	b.stop(t)
	for _, m := range []string{v.meta, dst.meta} {
		out, err := v.cairn(t, "fsck", m)
		if err != nil || !strings.Contains(out, " 0 metadata problems, 0 missing objects") {
			t.Fatalf("fsck %s: %v\n%s", m, err, out)
		}
	}
}
