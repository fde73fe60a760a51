package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// backupEntry is one element of cairn backup list --json.
type backupEntry struct {
	Name string    `json:"name"`
	Time time.Time `json:"time"`
	Size int64     `json:"size"`
	Kind string    `json:"kind"`
	Held *bool     `json:"held"`
}

func parseBackupList(t *testing.T, out string) []backupEntry {
	t.Helper()
	var list []backupEntry
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("backup list --json: %v\n%s", err, out)
	}
	return list
}

func countKind(list []backupEntry, kind string) int {
	n := 0
	for _, b := range list {
		if b.Kind == kind {
			n++
		}
	}
	return n
}

// backupNow takes a manual backup (cairn backup now --json) and returns
// its name.
func backupNow(t *testing.T, run func(args ...string) string, args ...string) string {
	t.Helper()
	var r struct {
		Name   string `json:"name"`
		Inodes uint64 `json:"inodes"`
	}
	out := run(append([]string{"backup", "now", "--json"}, args...)...)
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.Name == "" || r.Inodes == 0 {
		t.Fatalf("backup now --json: %v\n%s", err, out)
	}
	return r.Name
}

// TestE2EBackups: an embedded volume's mount takes a backup every
// interval (the first one interval after mounting) and keeps the newest
// --backup-keep; gc leaves them alone; with the metadata directory gone,
// backup list --data lists them and backup restore brings the volume back
// into a new Pebble store that mounts with the same tree and a clean
// fsck. A file deleted after an old backup reads as missing after a
// restore of it, and fsck names it, unless the backup held its data.
// Bad input gets clear errors.
func TestE2EBackups(t *testing.T) {
	v := newE2EVolume(t)
	data := "file://" + v.dir + "/data"
	mountLog := v.dir + "/mount.log"
	cairn(t, "mount", "-d", "-o", "allow_other", "--log", mountLog, "--backup-interval", "1s", "--backup-keep", "2", v.meta, v.mnt)
	t.Cleanup(func() { v.unmount(t) })
	mounted := time.Now()
	sh(t, v.mnt, `mkdir -p a/b c && for i in $(seq 1 50); do echo $i > a/f$i; done
head -c 3000000 /dev/urandom > c/big && ln -s ../c/big a/b/link && sync`)
	list := func(args ...string) []backupEntry {
		t.Helper()
		return parseBackupList(t, cairn(t, append([]string{"backup", "list", "--json"}, args...)...))
	}
	// At least three scheduled backups, two of them kept.
	deadline := time.Now().Add(15 * time.Second)
	for {
		b, _ := os.ReadFile(mountLog)
		if strings.Contains(string(b), "more than --backup-keep") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no backup deleted after 15s; mount log:\n%s", b)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := countKind(list(v.meta), "auto"); got != 2 {
		t.Fatalf("%d automatic backups kept, want 2 (--backup-keep 2)", got)
	}
	logText, _ := os.ReadFile(mountLog)
	first := regexp.MustCompile(`time=(\S+) level=INFO msg="metadata backup" name=`).FindSubmatch(logText)
	if first == nil {
		t.Fatalf("no backup logged:\n%s", logText)
	}
	if at, err := time.Parse(time.RFC3339Nano, string(first[1])); err != nil || at.Sub(mounted) < 900*time.Millisecond {
		t.Fatalf("the first backup at %s, %s after the mount (want one interval): %v", first[1], at.Sub(mounted), err)
	}
	if !regexp.MustCompile(`msg="metadata backup" name=\S+-auto\.cdump inodes=\d+ bytes=\d+ seconds=`).Match(logText) {
		t.Fatalf("the backup log line lacks name, inodes, bytes or seconds:\n%s", logText)
	}
	var st struct {
		Totals struct {
			Backup struct {
				Taken int `json:"taken"`
				Last  struct {
					OK bool `json:"ok"`
				} `json:"last"`
			} `json:"backup"`
		} `json:"totals"`
	}
	if err := json.Unmarshal([]byte(cairn(t, "stats", "--count", "1", "--interval", "100ms", "--json", v.mnt)), &st); err != nil ||
		st.Totals.Backup.Taken < 3 || !st.Totals.Backup.Last.OK {
		t.Fatalf("stats: %+v, %v", st, err)
	}
	if out := cairn(t, "status", v.meta); !regexp.MustCompile(`Backups\s+\d+, the latest \S+-auto\.cdump`).MatchString(out) {
		t.Fatalf("status:\n%s", out)
	}

	// gc, told to delete, leaves the backups alone.
	sh(t, v.mnt, `rm -f a/f1 && sync`)
	before := len(list(v.meta))
	if out := cairn(t, "gc", "--delete", v.meta); strings.Contains(out, "cairn/backups") {
		t.Fatalf("gc reported the backups:\n%s", out)
	}
	if after := len(list(v.meta)); after < before {
		t.Fatalf("gc --delete: %d backups, %d before", after, before)
	}

	// gone1 is deleted after backup b1; gone2 after b2, which holds its
	// data.
	run := func(args ...string) string { t.Helper(); return cairn(t, args...) }
	sh(t, v.mnt, `head -c 2000000 /dev/urandom > gone1 && sync`)
	b1 := backupNow(t, run, v.meta)
	sh(t, v.mnt, `rm gone1 && head -c 2000000 /dev/urandom > gone2 && sync`)
	gone2 := treeSums(t, v.mnt)["gone2"]
	b2 := backupNow(t, run, "--hold", v.meta)
	sh(t, v.mnt, `rm gone2 && sync`)
	want := treeSums(t, v.mnt)
	backupNow(t, run, v.meta)
	v.unmount(t)
	// With no mount, gc frees the deleted files' objects (gone2's stay:
	// b2's snapshot holds them).
	cairn(t, "gc", "--delete", v.meta)

	// The metadata is lost.
	if err := os.RemoveAll(v.dir + "/meta"); err != nil {
		t.Fatal(err)
	}
	if out, err := cairnErr(t, "backup", "list", v.meta); err == nil {
		t.Fatalf("backup list of the lost volume: %s", out)
	}
	all := list("--data", data)
	if countKind(all, "manual") != 3 || countKind(all, "auto") < 2 {
		t.Fatalf("backup list --data: %+v", all)
	}
	if out := cairn(t, "backup", "list", "--data", data); !strings.Contains(out, b1) || !strings.Contains(out, "NAME") {
		t.Fatalf("backup list --data (text):\n%s", out)
	}

	// Bad input.
	target := "pebble://" + v.dir + "/meta-new"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"backup", "restore", "--data", data, "nope", target}, `no backup "nope"`},
		{[]string{"backup", "restore", "latest", target}, "--data DATA-URL"},
		{[]string{"backup", "restore", "--data", "file://" + v.dir + "/nowhere", "latest", target}, "does not answer"},
		{[]string{"backup", "list"}, "META-URL, or --data"},
	} {
		if out, err := cairnErr(t, c.args...); err == nil || !strings.Contains(out, c.want) {
			t.Fatalf("cairn %s: %v\n%s\nwant %q", strings.Join(c.args, " "), err, out, c.want)
		}
	}
	if _, err := os.Stat(v.dir + "/meta-new"); !os.IsNotExist(err) {
		t.Fatalf("a failed restore created the target: %v", err)
	}

	// The latest backup: the same tree, fsck clean.
	out := cairn(t, "backup", "restore", "--data", data, "latest", target)
	if !strings.Contains(out, "restored backup") || !strings.Contains(out, "cairn fsck") {
		t.Fatalf("restore:\n%s", out)
	}
	if out := cairn(t, "fsck", target); !strings.Contains(out, " 0 metadata problems, 0 missing objects") {
		t.Fatalf("fsck of the restored volume:\n%s", out)
	}
	rv := &e2eVolume{dir: v.dir, meta: target, mnt: v.mnt}
	rv.mount(t)
	sameTrees(t, treeSums(t, rv.mnt), want)
	if out, err := cairnErr(t, "backup", "restore", "--data", data, "--force", b1, target); err == nil || !strings.Contains(out, "unmount it first") {
		t.Fatalf("restore over a mounted volume: %v\n%s", err, out)
	}
	rv.unmount(t)
	if out, err := cairnErr(t, "backup", "restore", "--data", data, b1, target); err == nil || !strings.Contains(out, "already holds volume") {
		t.Fatalf("restore over a volume without --force: %v\n%s", err, out)
	}

	// b1, restored over it: gone1's data was freed after b1; fsck names it.
	cairn(t, "backup", "restore", "--data", data, "--force", b1, target)
	out, err := cairnErr(t, "fsck", target)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != fsckProblems || !strings.Contains(out, "/gone1") || !strings.Contains(out, "missing") {
		t.Fatalf("fsck after restoring a backup older than a delete: %v\n%s", err, out)
	}
	rv.mount(t)
	if _, err := os.ReadFile(filepath.Join(rv.mnt, "gone1")); !errors.Is(err, syscall.EIO) {
		t.Fatalf("reading a file whose data was freed after the backup: %v, want EIO", err)
	}
	rv.unmount(t)
	// b2 held gone2's data: it reads whole.
	cairn(t, "backup", "restore", "--data", data, "--force", b2, target)
	if out := cairn(t, "fsck", target); !strings.Contains(out, " 0 missing objects") {
		t.Fatalf("fsck after restoring a held backup:\n%s", out)
	}
	rv.mount(t)
	if got := treeSums(t, rv.mnt)["gone2"]; got != gone2 {
		t.Fatalf("gone2 restored from the held backup: %s, want %s", got, gone2)
	}
	rv.unmount(t)
	if _, err := os.Stat(filepath.Join(v.dir, "data", "cairn", "backups")); err != nil {
		t.Fatal(err)
	}
}

// TestSharedBackupOnePerInterval: two mounts of a shared volume, both
// with a 1s backup interval, take one backup per interval between them,
// not two; the latest restores into a new Pebble store (PostgreSQL to
// Pebble, the objects staying in S3) that mounts with the same tree.
func TestSharedBackupOnePerInterval(t *testing.T) {
	v := newSharedVolume(t)
	run := func(args ...string) string {
		t.Helper()
		out, err := v.cairn(t, args...)
		if err != nil {
			t.Fatalf("cairn %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	var status struct {
		Data string `json:"data"`
	}
	if err := json.Unmarshal([]byte(run("status", "--json", v.meta)), &status); err != nil {
		t.Fatal(err)
	}
	// The status shows the URL redacted; the bucket's has no secrets.
	data := status.Data
	m1 := v.mount(t, "m1", "--backup-interval", "1s", "--backup-keep", "100")
	m2 := v.mount(t, "m2", "--backup-interval", "1s", "--backup-keep", "100")
	start := time.Now()
	sh(t, m1.mnt, `mkdir d && for i in $(seq 1 20); do echo $i > d/f$i; done; head -c 1000000 /dev/urandom > big`)
	time.Sleep(5500 * time.Millisecond)
	want := treeSums(t, m1.mnt)
	// A restore over the volume while it is mounted is refused.
	if out, err := v.cairn(t, "backup", "restore", "--data", data, "--force", "latest", v.meta); err == nil || !strings.Contains(out, "is mounted") {
		t.Fatalf("restore --force over a mounted shared volume: %v\n%s", err, out)
	}
	m1.stop(t)
	m2.stop(t)
	elapsed := time.Since(start)
	list := parseBackupList(t, run("backup", "list", "--json", v.meta))
	n := countKind(list, "auto")
	if n < 3 || float64(n) > elapsed.Seconds()+1 {
		t.Fatalf("%d backups in %s by two mounts with a 1s interval, want one per interval\n%+v", n, elapsed, list)
	}
	seen := map[int64]string{}
	for _, b := range list {
		if other, ok := seen[b.Time.Unix()]; ok {
			t.Fatalf("two backups in one interval: %s and %s", other, b.Name)
		}
		seen[b.Time.Unix()] = b.Name
	}
	for _, name := range []string{"m1", "m2"} {
		b, _ := os.ReadFile(filepath.Join(v.dir, name+".log"))
		if !strings.Contains(string(b), "metadata backups scheduled") {
			t.Fatalf("mount %s did not schedule backups:\n%s", name, b)
		}
	}
	// The shared volume's backups, restored into Pebble.
	target := "pebble://" + v.dir + "/restored"
	run("backup", "restore", "--data", data, "latest", target)
	if out := run("fsck", target); !strings.Contains(out, " 0 metadata problems, 0 missing objects") {
		t.Fatalf("fsck of the restored volume:\n%s", out)
	}
	mnt := filepath.Join(v.dir, "restored-mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	run("mount", "-d", "--log", v.dir+"/restored.log", target, mnt)
	rv := &e2eVolume{dir: v.dir, meta: target, mnt: mnt}
	t.Cleanup(func() { rv.unmount(t) })
	sameTrees(t, treeSums(t, mnt), want)
	rv.unmount(t)
}
