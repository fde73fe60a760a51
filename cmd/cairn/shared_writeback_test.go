package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/internal/daemon"
	"github.com/cairnfs/cairn/internal/meta"
	"github.com/cairnfs/cairn/internal/testenv/pgtest"
)

// TestSharedWriteBackMounts: three mounts of one volume, all writing
// back, take turns creating, writing, renaming (in a directory and
// across two) and removing files, and making directories; after every
// change another mount, chosen at random, must see exactly what the model
// says: each directory's names, and each file's content (close-to-open).
// Its reads recall the lease of the writer, which commits its log first.
func TestSharedWriteBackMounts(t *testing.T) {
	v := newSharedVolume(t)
	ms := []*sharedMount{v.mount(t, "a", "--meta-write-back"), v.mount(t, "b", "--meta-write-back"), v.mount(t, "c", "--meta-write-back")}
	dirs := []string{"d1", "d2"}
	for _, d := range dirs {
		if err := os.Mkdir(ms[0].path(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	model := map[string][]byte{} // path under the mount -> content; nil: a directory
	for _, d := range dirs {
		model[d] = nil
	}
	rng := rand.New(rand.NewPCG(36, 1))
	files := func() []string {
		var out []string
		for p, c := range model {
			if c != nil {
				out = append(out, p)
			}
		}
		slices.Sort(out)
		return out
	}
	const steps = 300
	writer := 0
	lastDir := map[int]string{}
	for step := range steps {
		// One mount keeps writing for a while (its leases and log are
		// used), then another takes over (recalls).
		if rng.IntN(8) == 0 {
			writer = rng.IntN(len(ms))
		}
		w := ms[writer]
		// Mostly in a directory the writer made (leased in its create),
		// else in any.
		d := dirs[rng.IntN(len(dirs))]
		if last := lastDir[writer]; last != "" && rng.IntN(3) != 0 {
			d = last
		}
		fs := files()
		var what string
		switch k := rng.IntN(10); {
		case k < 5 || len(fs) == 0: // create and write
			p := filepath.Join(d, fmt.Sprintf("f%d", step))
			data := randomBytes(rng.IntN(20 << 10))
			writeFile(t, w.path(p), data)
			model[p] = data
			what = "create " + p
		case k < 6: // rewrite
			p := fs[rng.IntN(len(fs))]
			data := randomBytes(rng.IntN(20 << 10))
			writeFile(t, w.path(p), data)
			model[p] = data
			what = "rewrite " + p
		case k < 7: // rename, in its directory or to another
			p := fs[rng.IntN(len(fs))]
			q := filepath.Join(filepath.Dir(p), fmt.Sprintf("r%d", step))
			if rng.IntN(2) == 0 {
				q = filepath.Join(dirs[rng.IntN(len(dirs))], fmt.Sprintf("r%d", step))
			}
			if err := os.Rename(w.path(p), w.path(q)); err != nil {
				t.Fatalf("step %d: rename %s %s: %v", step, p, q, err)
			}
			model[q] = model[p]
			delete(model, p)
			what = "rename " + p + " " + q
		case k < 8: // unlink
			p := fs[rng.IntN(len(fs))]
			if err := os.Remove(w.path(p)); err != nil {
				t.Fatalf("step %d: unlink %s: %v", step, p, err)
			}
			delete(model, p)
			what = "unlink " + p
		default: // a directory with a file in it
			sub := filepath.Join(d, fmt.Sprintf("s%d", step))
			if err := os.Mkdir(w.path(sub), 0o755); err != nil {
				t.Fatalf("step %d: mkdir %s: %v", step, sub, err)
			}
			p := filepath.Join(sub, "x")
			data := randomBytes(100)
			writeFile(t, w.path(p), data)
			model[sub], model[p] = nil, data
			dirs = append(dirs, sub)
			lastDir[writer] = sub
			what = "mkdir " + sub
		}
		// Now and then another mount checks one directory and one file
		// (not after every change: the writer would never keep a lease).
		if rng.IntN(3) != 0 {
			continue
		}
		r := ms[(writer+1+rng.IntN(len(ms)-1))%len(ms)]
		checkDir(t, r, d, model, step, what)
		if fs := files(); len(fs) > 0 {
			p := fs[rng.IntN(len(fs))]
			if got, err := os.ReadFile(r.path(p)); err != nil || !bytes.Equal(got, model[p]) {
				t.Fatalf("step %d (%s): %s read from another mount: %d bytes, %v; want %d bytes", step, what, p, len(got), err, len(model[p]))
			}
		}
	}
	// Every mount sees the whole tree.
	for _, m := range ms {
		for _, d := range dirs {
			checkDir(t, m, d, model, steps, "end")
		}
		for _, p := range files() {
			if got := readFile(t, m.path(p)); !bytes.Equal(got, model[p]) {
				t.Fatalf("end: %s differs on %s", p, m.mnt)
			}
		}
	}
	var written int64
	for _, m := range ms {
		changes, lost := writeBackTotals(t, v, m)
		if lost != 0 {
			t.Errorf("%s lost %d written-back changes", m.mnt, lost)
		}
		written += changes
	}
	t.Logf("%d changes written back", written)
	if written < steps/4 {
		t.Errorf("only %d changes written back in %d steps: the test did not exercise write-back", written, steps)
	}
	for _, m := range ms {
		m.stop(t)
	}
	if out, err := v.cairn(t, "fsck", v.meta); err != nil {
		t.Fatalf("fsck: %v\n%s", err, out)
	}
}

// writeBackTotals returns the changes mount m wrote back since it
// started, and how many of them were lost (`cairn stats`).
func writeBackTotals(t *testing.T, v *sharedVolume, m *sharedMount) (changes, lost int64) {
	t.Helper()
	st := writeBackStats(t, v, m)
	return st.Changes, st.Lost
}

// writeBackStats is the write-back log's totals of mount m (cairn stats).
func writeBackStats(t *testing.T, v *sharedVolume, m *sharedMount) meta.WriteBackStats {
	t.Helper()
	out, err := v.cairn(t, "stats", "--json", "--count", "1", "--interval", "1ms", m.mnt)
	if err != nil {
		t.Fatalf("stats: %v\n%s", err, out)
	}
	var st struct {
		Totals struct {
			WB *meta.WriteBackStats `json:"meta_write_back"`
		} `json:"totals"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Totals.WB == nil {
		t.Fatalf("stats of %s: %v\n%s", m.mnt, err, out)
	}
	return *st.Totals.WB
}

// TestSharedWriteBackRemoveUnderWorkingDir: a process on mount b works in
// directories d/e1 and d/e2 (their descriptors open, as a working
// directory is: the kernel names them by number, with no lookup in d).
// Mount a, writing back in d, removes e1 and renames a directory over e2.
// b's creates in them must then fail (ENOENT), as on one host; before
// the fix they succeeded, a's removals were lost on their replay (EIO at
// the next sync) and the directories stayed.
func TestSharedWriteBackRemoveUnderWorkingDir(t *testing.T) {
	v := newSharedVolume(t)
	a, b := v.mount(t, "a", "--meta-write-back"), v.mount(t, "b", "--meta-write-back")
	// A mount taking no leases makes the directories: no lease of e1 or
	// e2 is held when a removes them (a directory made in a leased one is
	// leased in its create, and a removal meeting another's lease would
	// run at once anyway).
	c := v.mount(t, "c", "--dir-leases=false")
	for _, d := range []string{"d", "d/e1", "d/e2"} {
		if err := os.Mkdir(c.path(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	c.stop(t)
	var fds []int
	closeFds := func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
		fds = nil
	}
	defer closeFds()
	for _, d := range []string{"d/e1", "d/e2"} {
		fd, err := unix.Open(b.path(d), unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		fds = append(fds, fd)
	}
	// a works in d: its lookups there take d's lease, its creates are
	// written back. Then its log is left to commit (a batch commits 50 ms
	// after its first change), so that each removal below starts a batch
	// and b's create comes well inside it.
	changes0, _ := writeBackTotals(t, v, a)
	for i := range 20 {
		writeFile(t, a.path(fmt.Sprintf("d/f%d", i)), []byte("x"))
	}
	time.Sleep(300 * time.Millisecond)
	createIn := func(i int) {
		t.Helper()
		fd, err := unix.Openat(fds[i], "x", unix.O_CREAT|unix.O_WRONLY, 0o644)
		if err == nil {
			unix.Close(fd)
		}
		if !errors.Is(err, unix.ENOENT) {
			t.Errorf("create in d/e%d, removed by the other mount before: %v, want ENOENT", i+1, err)
		}
	}
	if err := os.Remove(a.path("d/e1")); err != nil {
		t.Fatal(err)
	}
	createIn(0)
	if err := os.Mkdir(a.path("d/u"), 0o755); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	// rename(2) itself: os.Rename refuses to replace a directory.
	if err := unix.Rename(a.path("d/u"), a.path("d/e2")); err != nil {
		t.Fatalf("rename d/u over d/e2: %v", err)
	}
	createIn(1)
	if changes, _ := writeBackTotals(t, v, a); changes == changes0 {
		t.Fatal("nothing written back: the test does not exercise write-back")
	}
	if _, lost := writeBackTotals(t, v, a); lost != 0 {
		t.Errorf("mount a lost %d written-back changes", lost)
	}
	ents, err := os.ReadDir(b.path("d"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if e.Name() == "e1" || e.Name() == "e2" {
			names = append(names, e.Name())
		}
	}
	if !slices.Equal(names, []string{"e2"}) {
		t.Errorf("d holds %v of e1 and e2, want [e2] (a's renamed directory)", names)
	}
	if sub, err := os.ReadDir(b.path("d/e2")); err != nil || len(sub) != 0 {
		t.Errorf("d/e2 on b: %d entries, %v; want the empty directory a renamed there", len(sub), err)
	}
	closeFds()
	a.stop(t)
	b.stop(t)
	if out, err := v.cairn(t, "fsck", v.meta); err != nil {
		t.Fatalf("fsck: %v\n%s", err, out)
	}
}

// checkDir fails unless mount m lists directory d as the model has it.
func checkDir(t *testing.T, m *sharedMount, d string, model map[string][]byte, step int, what string) {
	t.Helper()
	ents, err := os.ReadDir(m.path(d))
	if err != nil {
		t.Fatalf("step %d (%s): readdir %s: %v", step, what, d, err)
	}
	var got, want []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	for p := range model {
		if filepath.Dir(p) == d {
			want = append(want, filepath.Base(p))
		}
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("step %d (%s): %s lists %v on %s, want %v", step, what, d, got, m.mnt, want)
	}
}

// TestSharedWriteBackKill9: a mount writing back is killed with SIGKILL
// at a random point while tar unpacks a tree into it. What was fsynced
// before (files, and the directory entries fsyncdir covered) is intact;
// what tar wrote after is there whole or not at all (each change commits
// whole), and fsck is clean. Three rounds, each killed at another point.
func TestSharedWriteBackKill9(t *testing.T) {
	if _, err := exec.LookPath("tar"); err != nil {
		t.Skip("no tar")
	}
	v := newSharedVolume(t)
	src, err := filepath.Abs("../../internal")
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(t.TempDir(), "tree.tar")
	if out, err := exec.Command("tar", "-C", filepath.Dir(src), "-cf", archive, filepath.Base(src)).CombinedOutput(); err != nil {
		t.Fatalf("tar -c: %v\n%s", err, out)
	}
	rng := rand.New(rand.NewPCG(36, 9))
	synced := map[string][]byte{}
	for round := range 3 {
		a := v.mount(t, fmt.Sprintf("a%d", round), "--meta-write-back")
		dir := fmt.Sprintf("round%d", round)
		if err := os.Mkdir(a.path(dir), 0o755); err != nil {
			t.Fatal(err)
		}
		// Files made and fsynced (file and directory) before the kill.
		for i := range 20 {
			p := filepath.Join(dir, fmt.Sprintf("kept%d", i))
			data := randomBytes(rng.IntN(64 << 10))
			if err := fuseWriteFsync(&tally{}, a.path(p), data); err != nil {
				t.Fatal(err)
			}
			synced[p] = data
		}
		fsyncDir(t, a.path(dir))
		// tar, killed under it.
		untar := exec.Command("tar", "-C", a.path(dir), "-xf", archive)
		if err := untar.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(200+rng.IntN(1500)) * time.Millisecond)
		a.kill(t)
		_ = untar.Wait() // fails: the mount went away
	}
	// A new mount, once the killed sessions expired, reads every fsynced
	// byte; the volume checks clean.
	time.Sleep(testSessionTimeout + 2*time.Second)
	b := v.mount(t, "b", "--meta-write-back")
	for p, want := range synced {
		if got, err := os.ReadFile(b.path(p)); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("fsynced %s after kill -9: %d bytes, %v; want %d bytes", p, len(got), err, len(want))
		}
	}
	// What tar left is whole: every file there reads without error.
	n := 0
	for round := range 3 {
		err := filepath.Walk(b.path(fmt.Sprintf("round%d/internal", round)), func(p string, info os.FileInfo, err error) error {
			if err != nil {
				if os.IsNotExist(err) {
					return nil
				}
				return err
			}
			if info.Mode().IsRegular() {
				if _, err := os.ReadFile(p); err != nil {
					return err
				}
				n++
			}
			return nil
		})
		if err != nil {
			t.Fatalf("reading what tar left: %v", err)
		}
	}
	t.Logf("%d files of the killed unpacking read back", n)
	b.stop(t)
	out, err := v.cairn(t, "fsck", v.meta)
	if err != nil || !strings.Contains(out, "checked") {
		t.Fatalf("fsck after kill -9: %v\n%s", err, out)
	}
	t.Logf("fsck: %s", lastLines(out, 1))
}

// TestSharedWriteBackUnderLimits: two mounts writing back fill a volume
// with an inode limit, by turns, each in its own directory. Each writes
// back what its grant of the limit covers (before grants, of each file
// only its close was written back: 1.0 change per file, now 2.7);
// cairn status shows the grants and does not count them available;
// neither passes the limit; with PostgreSQL stopped, a's creates go on
// (written back, no read of the store); every file a create succeeded for
// is there with its bytes on a third mount; with both
// unmounted (their grants given back) the volume is exactly full; fsck is
// clean.
func TestSharedWriteBackUnderLimits(t *testing.T) {
	v := newSharedVolume(t)
	const limit = 800
	if out, err := v.cairn(t, "config", "--inodes", fmt.Sprint(limit), "--capacity", "1G", v.meta); err != nil {
		t.Fatalf("config: %v\n%s", err, out)
	}
	ms := []*sharedMount{v.mount(t, "a", "--meta-write-back"), v.mount(t, "b", "--meta-write-back")}
	dirs := []string{"da", "db"}
	made := map[string][]byte{}
	full := make([]bool, len(ms))
	for i, m := range ms {
		if err := os.Mkdir(m.path(dirs[i]), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	changes0 := make([]int64, len(ms))
	for i, m := range ms {
		changes0[i], _ = writeBackTotals(t, v, m)
	}
	pg := pgtest.Shared(t)
	t.Cleanup(func() { _ = pg.Start() }) // whatever happened, for the other tests
	for round := 0; !full[0] || !full[1]; round++ {
		if round > limit {
			t.Fatal("no ENOSPC after as many rounds as the limit")
		}
		if round == 3 {
			// cairn status shows what a's and b's grants hold, and does
			// not count it available.
			st := volumeStatus(t, v)
			if g := st.Granted; g.Holders == 0 || g.Inodes == 0 || st.AvailInodes+st.UsedInodes+g.Inodes > limit {
				t.Errorf("status: %d inodes used, %d available, %d granted to %d clients; want grants, not counted available (limit %d)",
					st.UsedInodes, st.AvailInodes, g.Inodes, g.Holders, limit)
			}
		}
		if round == 5 {
			// PostgreSQL stops: a's creates are written back against its
			// grant and its leases, which it trusts for a while after its
			// last heartbeat, with no read of the store; the server comes
			// back only after them. Before wbFirstShard the first of them
			// read a usage shard the log did not know (the batch in
			// flight held the one it knew), waited for the server and
			// failed with EIO at the 30 s store timeout.
			if err := pg.Stop(); err != nil {
				t.Fatal(err)
			}
			for j := range 10 {
				p := filepath.Join(dirs[0], fmt.Sprintf("outage%d", j))
				if err := os.WriteFile(ms[0].path(p), []byte(p), 0o644); err != nil {
					t.Errorf("%s, with PostgreSQL stopped: %v", p, err)
					break
				}
				made[p] = []byte(p)
			}
			if err := pg.Start(); err != nil {
				t.Fatal(err)
			}
		}
		for i, m := range ms {
			for j := 0; j < 7 && !full[i]; j++ {
				p := filepath.Join(dirs[i], fmt.Sprintf("f%d.%d", round, j))
				data := []byte(p)
				err := os.WriteFile(m.path(p), data, 0o644)
				switch {
				case errors.Is(err, unix.ENOSPC):
					full[i] = true
				case err != nil:
					t.Fatalf("%s: %v", p, err)
				default:
					made[p] = data
				}
			}
		}
	}
	for i, m := range ms {
		changes, lost := writeBackTotals(t, v, m)
		if lost != 0 {
			t.Errorf("mount %d lost %d written-back changes", i, lost)
		}
		n := 0
		for p := range made {
			if strings.HasPrefix(p, dirs[i]+"/") {
				n++
			}
		}
		// Each file is a create, a write and a close; before grants only
		// the close was written back (one change per file).
		t.Logf("mount %d: %d files, %d changes written back", i, n, changes-changes0[i])
		if changes-changes0[i] < int64(2*n) {
			t.Errorf("mount %d: %d changes written back for %d files, want their creates and writes too", i, changes-changes0[i], n)
		}
	}
	for _, m := range ms {
		m.stop(t)
	}
	c := v.mount(t, "c")
	for p, data := range made {
		if got, err := os.ReadFile(c.path(p)); err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s on a third mount: %q, %v; want %q", p, got, err, data)
		}
	}
	var st unix.Statfs_t
	if err := unix.Statfs(c.mnt, &st); err != nil {
		t.Fatal(err)
	}
	if st.Files != limit || st.Ffree != 0 {
		t.Errorf("statfs: %d inodes, %d free; want %d, 0 (%d files made)", st.Files, st.Ffree, limit, len(made))
	}
	c.stop(t)
	if out, err := v.cairn(t, "fsck", v.meta); err != nil {
		t.Fatalf("fsck: %v\n%s", err, out)
	}
}

// fsyncDir fsyncs directory dir: the entries made in it are durable.
func fsyncDir(t *testing.T, dir string) {
	t.Helper()
	df, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer df.Close()
	if err := df.Sync(); err != nil {
		t.Fatalf("fsyncdir %s: %v", dir, err)
	}
}

// volumeStatus is cairn status --json of v.
func volumeStatus(t *testing.T, v *sharedVolume) daemon.StatusReport {
	t.Helper()
	out, err := v.cairn(t, "status", "--json", v.meta)
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	var st daemon.StatusReport
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	return st
}

// TestSharedWriteBackGrantHolderKilled: a mount writing back under an
// inode limit is killed with SIGKILL while it creates files, holding a
// grant of the limit. Until its session expires the grant stays counted
// against the limit (status shows it, and does not count it available);
// a live client expiring the session gives the grant back with it, and
// then fills the volume to exactly its limit. Every file fsynced before
// the kill reads back, a walk finds exactly the limit's inodes, and fsck
// is clean: the used-inodes counter agrees with the inodes (nothing the
// killed mount lost was counted), and no dead session's record is left.
func TestSharedWriteBackGrantHolderKilled(t *testing.T) {
	v := newSharedVolume(t)
	const limit = 300
	if out, err := v.cairn(t, "config", "--inodes", fmt.Sprint(limit), "--capacity", "1G", v.meta); err != nil {
		t.Fatalf("config: %v\n%s", err, out)
	}
	a := v.mount(t, "a", "--meta-write-back")
	if err := os.Mkdir(a.path("da"), 0o755); err != nil {
		t.Fatal(err)
	}
	synced := map[string][]byte{}
	for i := range 40 {
		p := fmt.Sprintf("da/kept%d", i)
		data := bytes.Repeat([]byte(p), 1+i*50)
		if err := fuseWriteFsync(&tally{}, a.path(p), data); err != nil {
			t.Fatal(err)
		}
		synced[p] = data
	}
	fsyncDir(t, a.path("da"))
	// a goes on creating (unsynced) files, and is killed under them: its
	// grant is in use, so not given back at a heartbeat.
	stop, done := make(chan struct{}), make(chan int)
	go func() {
		n := 0
		defer func() { done <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if os.WriteFile(a.path(fmt.Sprintf("da/u%d", n)), []byte("unsynced"), 0o644) != nil {
				return
			}
			n++
			time.Sleep(20 * time.Millisecond)
		}
	}()
	time.Sleep(time.Second)
	a.kill(t)
	close(stop)
	t.Logf("a made %d unsynced files before the kill", <-done)
	// The dead session's grant is still counted: nobody judged it yet.
	st := volumeStatus(t, v)
	if g := st.Granted; g.Holders != 1 || g.Inodes == 0 || st.AvailInodes+st.UsedInodes+g.Inodes > limit {
		t.Fatalf("status after the kill: %d inodes used, %d available, %d granted to %d clients; want a's grant, not counted available (limit %d)",
			st.UsedInodes, st.AvailInodes, g.Inodes, g.Holders, limit)
	}
	deadGrant := st.Granted.Inodes
	// b expires a's session (after reaching the store for one and a half
	// session timeouts) and its grant with it; b has made nothing, so
	// holds no grant of its own.
	b := v.mount(t, "b", "--meta-write-back")
	deadline := time.Now().Add(10*testSessionTimeout + 10*time.Second)
	for st.Granted.Holders != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the killed mount's grant of %d inodes is still held %v after its kill", deadGrant, 10*testSessionTimeout+10*time.Second)
		}
		time.Sleep(testHeartbeat)
		st = volumeStatus(t, v)
	}
	t.Logf("a's grant of %d inodes went with its session", deadGrant)
	if err := os.Mkdir(b.path("db"), 0o755); err != nil {
		t.Fatal(err)
	}
	made := map[string][]byte{}
	for i := 0; ; i++ {
		if i > limit {
			t.Fatal("no ENOSPC after as many files as the limit")
		}
		p := fmt.Sprintf("db/f%d", i)
		err := os.WriteFile(b.path(p), []byte(p), 0o644)
		if errors.Is(err, unix.ENOSPC) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		made[p] = []byte(p)
	}
	t.Logf("b made %d files before ENOSPC", len(made))
	b.stop(t)
	c := v.mount(t, "c")
	for p, want := range synced {
		if got, err := os.ReadFile(c.path(p)); err != nil || !bytes.Equal(got, want) {
			t.Errorf("fsynced %s after kill -9: %d bytes, %v; want %d bytes", p, len(got), err, len(want))
		}
	}
	for p, want := range made {
		if got, err := os.ReadFile(c.path(p)); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %q, %v; want %q", p, got, err, want)
		}
	}
	inodes := 0
	if err := filepath.WalkDir(c.mnt, func(_ string, _ os.DirEntry, err error) error {
		inodes++
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var sf unix.Statfs_t
	if err := unix.Statfs(c.mnt, &sf); err != nil {
		t.Fatal(err)
	}
	if inodes != limit || sf.Files != limit || sf.Ffree != 0 {
		t.Errorf("%d inodes walked; statfs %d inodes, %d free; want the limit %d, none free", inodes, sf.Files, sf.Ffree, limit)
	}
	c.stop(t)
	out, err := v.cairn(t, "fsck", v.meta)
	if err != nil {
		t.Fatalf("fsck: %v\n%s", err, out)
	}
	t.Logf("fsck: %s", lastLines(out, 1))
}
