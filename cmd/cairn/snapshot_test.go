package main

import (
	"bufio"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/daemon"
	"github.com/cairnfs/cairn/internal/meta"
)

// mkdirOffline makes a directory in the root of an unmounted volume.
func mkdirOffline(t *testing.T, metaURL, name string) {
	t.Helper()
	ctx := context.Background()
	vol, err := daemon.OpenVolume(ctx, daemon.VolumeOptions{MetaURL: metaURL})
	if err != nil {
		t.Fatal(err)
	}
	defer vol.Close()
	if _, _, err := vol.Meta.Mknod(ctx, meta.RootCaller, base.RootIno, name, base.TypeDir, 0o755, 0, 0, ""); err != nil {
		t.Fatal(err)
	}
}

func TestSnapshotVerbs(t *testing.T) {
	dir := t.TempDir()
	url := "pebble://" + dir + "/meta"
	if out, err := run(t, "format", url, "v"); err != nil {
		t.Fatalf("format: %v\n%s", err, out)
	}
	out, err := run(t, "snapshot", "list", url)
	if err != nil || !strings.Contains(out, "no snapshots") {
		t.Fatalf("list of a fresh volume: %v\n%s", err, out)
	}
	out, err = run(t, "snapshot", "create", url, "s1")
	if err != nil || !strings.Contains(out, `created snapshot "s1"`) {
		t.Fatalf("create: %v\n%s", err, out)
	}
	_, err = run(t, "snapshot", "create", url, "s1")
	wantErr(t, err, "exists")
	_, err = run(t, "snapshot", "create", url, "a/b")
	wantErr(t, err, "invalid")

	mkdirOffline(t, url, "newdir")
	out, err = run(t, "snapshot", "diff", url, "s1")
	if err != nil || !strings.Contains(out, "+ /newdir\n") {
		t.Fatalf("diff s1 live: %v\n%s", err, out)
	}
	out, err = run(t, "snapshot", "diff", "--json", url, "s1")
	if err != nil {
		t.Fatalf("diff --json: %v\n%s", err, out)
	}
	var created bool
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var c daemon.SnapshotChange
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("diff --json line %q: %v", sc.Text(), err)
		}
		if c.Op == meta.Created && c.Path == "/newdir" && c.Type == "dir" && c.Ino != 0 {
			created = true
		}
	}
	if !created {
		t.Fatalf("diff --json does not report /newdir:\n%s", out)
	}

	if out, err := run(t, "snapshot", "create", url, "s2"); err != nil {
		t.Fatalf("create s2: %v\n%s", err, out)
	}
	out, err = run(t, "snapshot", "diff", url, "s1", "s2")
	if err != nil || !strings.Contains(out, "+ /newdir") {
		t.Fatalf("diff s1 s2: %v\n%s", err, out)
	}
	_, err = run(t, "snapshot", "diff", url, "nope")
	wantErr(t, err, "nope")

	out, err = run(t, "snapshot", "list", url)
	if err != nil || !strings.Contains(out, "ONLY IN SNAPSHOT") || !strings.Contains(out, "s1 ") || !strings.Contains(out, "s2 ") {
		t.Fatalf("list: %v\n%s", err, out)
	}
	if strings.Index(out, "s1 ") > strings.Index(out, "s2 ") {
		t.Fatalf("list is not oldest first:\n%s", out)
	}
	out, err = run(t, "snapshot", "list", "--json", url)
	if err != nil {
		t.Fatal(err)
	}
	var infos []daemon.SnapshotInfo
	if err := json.Unmarshal([]byte(out), &infos); err != nil || len(infos) != 2 || infos[0].Name != "s1" || infos[1].Epoch <= infos[0].Epoch {
		t.Fatalf("list --json: %v\n%s", err, out)
	}

	out, err = run(t, "snapshot", "delete", url, "s1")
	if err != nil || !strings.Contains(out, `deleted snapshot "s1"`) {
		t.Fatalf("delete: %v\n%s", err, out)
	}
	_, err = run(t, "snapshot", "delete", url, "s1")
	wantErr(t, err, "s1")
	out, err = run(t, "snapshot", "list", url)
	if err != nil || strings.Contains(out, "s1 ") || !strings.Contains(out, "s2 ") {
		t.Fatalf("list after delete: %v\n%s", err, out)
	}
	if out, err := run(t, "gc", url); err != nil || !strings.Contains(out, "0 orphans") {
		t.Fatalf("gc: %v\n%s", err, out)
	}
	if out, err := run(t, "fsck", url); err != nil {
		t.Fatalf("fsck: %v\n%s", err, out)
	}
}

// While a process holds an embedded volume, the snapshot verbs reach it
// through its control socket.
func TestSnapshotVerbsThroughControlSocket(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	url := "pebble://" + dir + "/meta"
	if out, err := run(t, "format", url, "v"); err != nil {
		t.Fatalf("format: %v\n%s", err, out)
	}
	vol, err := daemon.OpenVolume(ctx, daemon.VolumeOptions{MetaURL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer vol.Close()
	srv, err := daemon.ServeControl(vol, daemon.Holder{Pid: 1, Host: "h", MountPoint: "/mnt/x"}, daemon.RunAdmin)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	if out, err := run(t, "snapshot", "create", url, "held"); err != nil {
		t.Fatalf("create through the socket: %v\n%s", err, out)
	}
	if _, err := vol.Meta.SnapshotByName(ctx, "held"); err != nil {
		t.Fatalf("the holder does not see the snapshot: %v", err)
	}
	out, err := run(t, "snapshot", "list", url)
	if err != nil || !strings.Contains(out, "held") {
		t.Fatalf("list through the socket: %v\n%s", err, out)
	}
	if _, _, err := vol.Meta.Mknod(ctx, meta.RootCaller, base.RootIno, "d", base.TypeDir, 0o755, 0, 0, ""); err != nil {
		t.Fatal(err)
	}
	out, err = run(t, "snapshot", "diff", url, "held")
	if err != nil || !strings.Contains(out, "+ /d") {
		t.Fatalf("diff through the socket: %v\n%s", err, out)
	}
	_, err = run(t, "snapshot", "create", url, "held")
	wantErr(t, err, "exists")
	if out, err := run(t, "snapshot", "delete", url, "held"); err != nil {
		t.Fatalf("delete through the socket: %v\n%s", err, out)
	}
	if snaps, err := vol.Meta.Snapshots(ctx); err != nil || len(snaps) != 0 {
		t.Fatalf("snapshots after delete: %v %v", snaps, err)
	}
}
