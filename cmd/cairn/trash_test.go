package main

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/nfs/nfsclient"
	"github.com/cairnfs/cairn/internal/nfs/proto"
)

// describeTree records what a restore must bring back of the tree at
// root: per path its type, mode, size, content digest, mtime (not of
// directories: removing their entries changed it), symlink target, inode
// number and link count, so that hard links show as one inode under two
// names.
func describeTree(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		line := fmt.Sprintf("%s mode=%o ino=%d nlink=%d", rel, st.Mode, st.Ino, st.Nlink)
		switch {
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			line += fmt.Sprintf(" size=%d sha=%x mtime=%d", len(b), sha256.Sum256(b), st.Mtim.Nano())
		case d.Type()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			line += fmt.Sprintf(" -> %s mtime=%d", l, st.Mtim.Nano())
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// TestE2ETrashRestoreTree: on an embedded volume with the trash on, rm
// -rf of a tree (files small and large, modes, old mtimes, a symlink, hard
// links, an empty directory) leaves nothing visible, the trash is hidden
// and read-only, and cairn trash restore (through the mount's control
// socket) brings the tree back as it was, read by a fresh mount. A file
// replaced by a rename goes to the trash too; purge empties it and fsck
// is clean after.
func TestE2ETrashRestoreTree(t *testing.T) {
	dir := t.TempDir()
	v := &e2eVolume{dir: dir, meta: "pebble://" + dir + "/meta", mnt: filepath.Join(dir, "mnt")}
	if err := os.Mkdir(v.mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	cairn(t, "format", "--trash-days", "1", v.meta, "trash")
	v.mount(t)
	sh(t, v.mnt, `
mkdir -p proj/src/deep proj/empty
head -c 3000000 /dev/urandom > proj/src/big.bin
echo small > proj/src/small.txt
printf '#!/bin/sh\necho hi\n' > proj/run.sh; chmod 0750 proj/run.sh
chmod 0600 proj/src/small.txt
echo deep > proj/src/deep/d.txt
ln -s src/small.txt proj/link
ln proj/src/big.bin proj/hard.bin
chmod 2775 proj/src
touch -h -d '2020-01-02 03:04:05.123456789' proj/src/small.txt proj/link proj/src/big.bin proj/run.sh proj/src/deep/d.txt
`)
	v.unmount(t)
	v.mount(t)
	want := describeTree(t, filepath.Join(v.mnt, "proj"))
	sh(t, v.mnt, `rm -rf proj`)

	if out := sh(t, v.mnt, `ls -a`); strings.Contains(out, ".trash") {
		t.Fatalf("the root lists the trash:\n%s", out)
	}
	if out := sh(t, v.mnt, `ls .trash/*/`); !strings.Contains(out, "-proj") {
		t.Fatalf("the trash's bucket lists:\n%s", out)
	}
	for _, script := range []string{`touch .trash/x`, `rm -rf .trash/*/*`, `mkdir .trash/$(ls .trash)/x`, `mv .trash/*/*-proj back`} {
		out, err := shErr(v.mnt, script)
		if err == nil || !strings.Contains(out, "Operation not permitted") {
			t.Fatalf("%s in the trash: %v\n%s", script, err, out)
		}
	}
	list := cairn(t, "trash", "list", v.meta)
	for _, p := range []string{"/proj/src/deep/d.txt", "/proj/hard.bin", "/proj/src/big.bin", "/proj/empty", "/proj"} {
		if !strings.Contains(list, p+" ") {
			t.Fatalf("trash list lacks %s:\n%s", p, list)
		}
	}
	if out := cairn(t, "status", v.meta); !strings.Contains(out, "Trash") || !strings.Contains(out, "1 days; holds 2.9 MiB in 9 inodes (10 entries") {
		t.Fatalf("status:\n%s", out)
	}
	out := cairn(t, "trash", "restore", v.meta, "/proj")
	if !strings.Contains(out, "restored 10 of 10 entries") {
		t.Fatalf("restore:\n%s", out)
	}
	v.unmount(t)
	v.mount(t)
	got := describeTree(t, filepath.Join(v.mnt, "proj"))
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("restored tree:\n%s\nwas:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if list := cairn(t, "trash", "list", v.meta); !strings.Contains(list, "the trash is empty") {
		t.Fatalf("trash after the restore:\n%s", list)
	}

	// A file replaced by a rename is kept; restoring it over the name
	// taken again is refused with a message, into a free name it works.
	sh(t, v.mnt, `echo old > y; echo new > x; mv x y`)
	list = cairn(t, "trash", "list", v.meta)
	if !strings.Contains(list, "/y ") {
		t.Fatalf("trash list after mv x y:\n%s", list)
	}
	out, err := cairnErr(t, "trash", "restore", v.meta, "/y")
	if err == nil || !strings.Contains(out, "exists") {
		t.Fatalf("restore over a taken name: %v\n%s", err, out)
	}
	sh(t, v.mnt, `mv y y.new`)
	cairn(t, "trash", "restore", v.meta, "/y")
	if b, err := os.ReadFile(filepath.Join(v.mnt, "y")); err != nil || string(b) != "old\n" {
		t.Fatalf("restored y: %q, %v", b, err)
	}

	sh(t, v.mnt, `rm -rf proj y`)
	if out := cairn(t, "trash", "purge", "--all", v.meta); !strings.Contains(out, "purged everything: 11 entries") {
		t.Fatalf("purge:\n%s", out)
	}
	if list := cairn(t, "trash", "list", v.meta); !strings.Contains(list, "the trash is empty") {
		t.Fatalf("trash after the purge:\n%s", list)
	}
	v.unmount(t)
	cairn(t, "fsck", v.meta) // fails the test on problems
	if out := cairn(t, "status", v.meta); !strings.Contains(out, "Trash") || !strings.Contains(out, "holds 0 B in 0 inodes") {
		t.Fatalf("status after the purge:\n%s", out)
	}
}

// shErr is sh that returns the error.
func shErr(dir, script string) (string, error) {
	var out bytes.Buffer
	c := exec.Command("bash", "-euo", "pipefail", "-c", script)
	c.Dir = dir
	c.Stdout, c.Stderr = &out, &out
	err := c.Run()
	return out.String(), err
}

// TestSharedTrashAndInlineConfig: cairn config changes the trash and the
// inline limit of a live shared volume; the second mount removes into the
// trash and writes small files into the metadata engine after its next
// heartbeats, and the files written before keep their blocks.
func TestSharedTrashAndInlineConfig(t *testing.T) {
	v := newSharedVolume(t)
	a := v.mount(t, "a")
	b := v.mount(t, "b")
	if out, err := v.cairn(t, "config", "--inline-max", "0", v.meta); err != nil || !strings.Contains(out, "inline-max  0 B") {
		t.Fatalf("config: %v\n%s", err, out)
	}
	time.Sleep(3 * testHeartbeat)
	writeFile(t, b.path("before"), []byte("small, in the object store"))
	if out, err := v.cairn(t, "config", "--trash-days", "2", "--inline-max", "8K", v.meta); err != nil ||
		!strings.Contains(out, "trash-days  2") || !strings.Contains(out, "inline-max  8.0 KiB") {
		t.Fatalf("config: %v\n%s", err, out)
	}
	// b removes a file until its removals go to the trash.
	deadline := time.Now().Add(10 * testHeartbeat)
	for i := 0; ; i++ {
		name := fmt.Sprintf("gone%d", i)
		writeFile(t, b.path(name), []byte("x"))
		if err := os.Remove(b.path(name)); err != nil {
			t.Fatal(err)
		}
		list, err := v.cairn(t, "trash", "list", v.meta)
		if err != nil {
			t.Fatalf("trash list: %v\n%s", err, list)
		}
		if strings.Contains(list, "/"+name+" ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b's removals do not reach the trash after the config change:\n%s", list)
		}
		time.Sleep(testHeartbeat / 2)
	}
	writeFile(t, b.path("after"), []byte("small, in the metadata engine"))
	out, err := v.cairn(t, "find", v.meta, "/", "-inline")
	if err != nil || !strings.Contains(out, "/after") || strings.Contains(out, "/before") {
		t.Fatalf("find -inline: %v\n%s", err, out)
	}
	// a reads both, and a rename on a over a file sends it to the trash.
	if string(readFile(t, a.path("before"))) != "small, in the object store" || string(readFile(t, a.path("after"))) != "small, in the metadata engine" {
		t.Fatal("a reads other contents")
	}
	if err := os.Rename(a.path("after"), a.path("before")); err != nil {
		t.Fatal(err)
	}
	list, err := v.cairn(t, "trash", "list", v.meta)
	if err != nil || !strings.Contains(list, "/before ") {
		t.Fatalf("trash list after a's rename over before: %v\n%s", err, list)
	}
	if out, err := v.cairn(t, "trash", "purge", "--all", v.meta); err != nil {
		t.Fatalf("purge: %v\n%s", err, out)
	}
	a.stop(t)
	b.stop(t)
	if out, err := v.cairn(t, "fsck", v.meta); err != nil {
		t.Fatalf("fsck: %v\n%s", err, out)
	}
}

// TestE2ETrashOverNFS: through the NFS gateway, a removal goes to the
// trash, the root's listing leaves it out, a lookup reaches it, a write
// into it is NFS3ERR_PERM, and a restore brings the file back.
func TestE2ETrashOverNFS(t *testing.T) {
	bin := cairnBinary(t)
	dir := t.TempDir()
	meta := "pebble://" + dir + "/meta"
	cairn(t, "format", "--trash-days", "1", meta, "nfs-trash")
	port := freePort(t)
	g := startGateway(t, bin, meta, port, dir+"/gateway.log")
	c, err := nfsclient.Dial("127.0.0.1:" + port)
	if err != nil {
		t.Fatal(err)
	}
	root, err := c.Mount("/")
	if err != nil {
		t.Fatal(err)
	}
	fh, err := c.Create(root, "f", 0, proto.Sattr3{Mode: ptr(uint32(0o644))}, [8]byte{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(fh, 0, []byte("over nfs\n"), 2); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove(root, "f"); err != nil {
		t.Fatal(err)
	}
	names, err := c.ReadDir(root, 4096)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if n == ".trash" || n == "f" {
			t.Fatalf("the root lists %q: %q", n, names)
		}
	}
	trash, _, err := c.Lookup(root, ".trash")
	if err != nil {
		t.Fatalf("lookup .trash: %v", err)
	}
	buckets, err := c.ReadDir(trash, 4096)
	if err != nil || len(buckets) == 0 {
		t.Fatalf("the trash lists %q, %v", buckets, err)
	}
	var bucket string
	for _, b := range buckets {
		if b != "." && b != ".." {
			bucket = b
		}
	}
	bfh, _, err := c.Lookup(trash, bucket)
	if err != nil {
		t.Fatal(err)
	}
	var se nfsclient.StatusError
	if _, err := c.Create(bfh, "x", 0, proto.Sattr3{Mode: ptr(uint32(0o644))}, [8]byte{}); !errors.As(err, &se) || se != proto.NFS3ErrPerm {
		t.Fatalf("create in the trash: %v, want NFS3ERR_PERM", err)
	}
	c.Close()
	// The gateway holds the embedded store: the verbs go through its
	// control socket.
	if out := cairn(t, "trash", "restore", meta, "/f"); !strings.Contains(out, "restored 1 of 1") {
		t.Fatalf("restore:\n%s", out)
	}
	c, err = nfsclient.Dial("127.0.0.1:" + port)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if root, err = c.Mount("/"); err != nil {
		t.Fatal(err)
	}
	fh, _, err = c.Lookup(root, "f")
	if err != nil {
		t.Fatal(err)
	}
	if data, _, err := c.Read(fh, 0, 100); err != nil || string(data) != "over nfs\n" {
		t.Fatalf("restored f over NFS: %q, %v", data, err)
	}
	stopGateway(t, g)
	cairn(t, "fsck", meta)
}
