package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/daemon"
	"github.com/cairnfs/cairn/internal/meta"
	"github.com/cairnfs/cairn/internal/object"
)

// TestE2EDestroy: destroy is refused while mounted and without a
// confirmation; then it removes the metadata directory and the data; a
// destroy that stopped half way blocks mounts and is finished by a rerun.
func TestE2EDestroy(t *testing.T) {
	v := newE2EVolume(t)
	v.mount(t)
	sh(t, v.mnt, `for i in $(seq 1 50); do echo $i > f$i; done; head -c 5000000 /dev/urandom > big; sync`)
	if out, err := cairnErr(t, "destroy", "--yes", v.meta); err == nil || !strings.Contains(out, "in use by") {
		t.Fatalf("destroy while mounted: %v\n%s", err, out)
	}
	v.unmount(t)
	if out, err := cairnErr(t, "destroy", v.meta); err == nil || !strings.Contains(out, "give --yes") || !strings.Contains(out, `volume "e2e"`) {
		t.Fatalf("destroy without --yes: %v\n%s", err, out)
	}
	cairn(t, "status", v.meta) // still there
	out := cairn(t, "destroy", "--yes", v.meta)
	if !strings.Contains(out, `destroyed volume "e2e"`) {
		t.Fatalf("destroy: %s", out)
	}
	for _, d := range []string{"meta", "data"} {
		if _, err := os.Stat(filepath.Join(v.dir, d)); !os.IsNotExist(err) {
			t.Fatalf("%s left after destroy: %v", d, err)
		}
	}
	if out, err := cairnErr(t, "status", v.meta); err == nil || !strings.Contains(out, "no Cairn volume") {
		t.Fatalf("status after destroy: %v\n%s", err, out)
	}

	// Stopped half way: the metadata says "being destroyed", the data is
	// still there.
	w := newE2EVolume(t)
	w.mount(t)
	sh(t, w.mnt, `head -c 3000000 /dev/urandom > big; sync`)
	w.unmount(t)
	loc, err := daemon.ParseMetaURL(w.meta)
	if err != nil {
		t.Fatal(err)
	}
	store, err := daemon.OpenStore(loc, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := meta.BeginDestroy(context.Background(), store, time.Minute); err != nil {
		t.Fatal(err)
	}
	store.Close()
	if out, err := cairnErr(t, "mount", "-d", w.meta, w.mnt); err == nil || !strings.Contains(out, "being destroyed") {
		t.Fatalf("mount of a half-destroyed volume: %v\n%s", err, out)
	}
	out = cairn(t, "destroy", "--json", "--yes", w.meta)
	if !strings.Contains(out, `"resumed":true`) || strings.Contains(out, `"objects_deleted":0`) {
		t.Fatalf("finishing the destroy: %s", out)
	}
	if _, err := os.Stat(filepath.Join(w.dir, "data")); !os.IsNotExist(err) {
		t.Fatalf("data left after the finished destroy: %v", err)
	}
}

// TestSharedDestroy: on a shared volume a mounted client stops a destroy;
// once it is gone, the bucket is emptied and the database holds no volume
// (format succeeds again on both without --force).
func TestSharedDestroy(t *testing.T) {
	v := newSharedVolume(t)
	m := v.mount(t, "a")
	writeFile(t, m.path("f"), randomBytes(9<<20))
	if out, err := v.cairn(t, "destroy", "--yes", v.meta); err == nil || !strings.Contains(out, "is mounted") || !strings.Contains(out, m.mnt) {
		t.Fatalf("destroy while mounted: %v\n%s", err, out)
	}
	m.stop(t)
	st, _ := v.cairn(t, "status", "--json", v.meta)
	out, err := v.cairn(t, "destroy", "--yes", v.meta)
	if err != nil || !strings.Contains(out, "destroyed") {
		t.Fatalf("destroy: %v\n%s", err, out)
	}
	var dataURL string
	for _, f := range strings.Split(st, `"`) {
		if strings.HasPrefix(f, "s3://") {
			dataURL = f
		}
	}
	for _, e := range v.env {
		if k, val, ok := strings.Cut(e, "="); ok && strings.HasPrefix(k, "AWS_") {
			t.Setenv(k, val)
		}
	}
	objs, err := daemon.OpenObjects(context.Background(), dataURL, false, daemon.StoreWait{}, nil)
	if err != nil {
		t.Fatalf("data store %q: %v", dataURL, err)
	}
	n := 0
	if err := objs.List(context.Background(), "", func(object.Info) bool { n++; return true }); err != nil || n != 0 {
		t.Fatalf("%d objects left in the bucket (%v)", n, err)
	}
	if out, err := v.cairn(t, "format", "--data", dataURL, v.meta, "again"); err != nil {
		t.Fatalf("format after destroy: %v\n%s", err, out)
	}
}
