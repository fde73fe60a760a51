package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/meta"
	"github.com/cairnfs/cairn/internal/vfs"
)

// TestFsckScrubAndRepair: fsck finds a flipped byte in a block object only
// when it scrubs, a truncated one by the listing alone, names the file,
// and --repair fixes a metadata problem it can (holds of a session whose
// record is gone) and reports it.
func TestFsckScrubAndRepair(t *testing.T) {
	ctx := context.Background()
	vol, dir := newVolume(t, "fsck")
	v := vfs.New(vol.Meta, vol.Chunks, vfs.Options{})
	write := func(name string, data []byte) {
		t.Helper()
		_, _, fh, errno := v.Create(ctx, &base.Caller{}, base.RootIno, name, 0o644, 0, syscall.O_RDWR)
		if errno != 0 {
			t.Fatal(errno)
		}
		if _, errno := v.Write(ctx, fh, 0, data); errno != 0 {
			t.Fatal(errno)
		}
		if errno := v.Release(ctx, fh); errno != 0 {
			t.Fatal(errno)
		}
	}
	write("flipped", bytes.Repeat([]byte("a block whose byte flips "), 20000))
	write("cut", bytes.Repeat([]byte("a block cut short "), 20000))
	if err := v.Close(ctx); err != nil {
		t.Fatal(err)
	}
	run := func(o FsckOptions) (FsckReport, error) {
		t.Helper()
		var out bytes.Buffer
		err := fsck(ctx, vol, o, true, &out)
		var r FsckReport
		if jerr := json.Unmarshal(out.Bytes(), &r); jerr != nil {
			t.Fatalf("fsck --json: %v\n%s", jerr, out.String())
		}
		return r, err
	}
	if r, err := run(FsckOptions{Scrub: true}); err != nil || len(r.Data) != 0 || r.Scrubbed == 0 {
		t.Fatalf("scrub of a healthy volume: %v %+v", err, r)
	}
	// The progress a terminal shows: the last phase, every block of it.
	var p FsckProgress
	if err := fsck(WithFsckProgress(ctx, &p), vol, FsckOptions{Scrub: true}, true, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if ph := p.Phase.Load(); ph == nil || *ph != "scrubbing" || p.Total.Load() < 2 || p.Done.Load() != p.Total.Load() || p.Bytes.Load() == 0 {
		t.Fatalf("fsck progress: phase %v, %d of %d, %d bytes", ph, p.Done.Load(), p.Total.Load(), p.Bytes.Load())
	}
	// Damage the first block of each file.
	objs := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.Contains(p, "/chunks/") && strings.Contains(filepath.Base(p), "_0_") {
			objs[p] = p
		}
		return err
	})
	if err != nil || len(objs) != 2 {
		t.Fatalf("block objects: %v %v", objs, err)
	}
	i := 0
	for p := range objs {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			b[1000] ^= 1
		} else {
			b = b[:len(b)-100]
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		i++
	}
	r, err := run(FsckOptions{})
	if !errors.Is(err, ErrProblems) || len(r.Data) != 1 || !strings.Contains(r.Data[0].Detail, "bytes, want") {
		t.Fatalf("fsck without scrub: %v %+v", err, r)
	}
	r, err = run(FsckOptions{Scrub: true})
	if !errors.Is(err, ErrProblems) || len(r.Data) != 2 {
		t.Fatalf("fsck --scrub: %v %+v", err, r)
	}
	paths := map[string]bool{}
	for _, d := range r.Data {
		paths[d.Path] = true
	}
	if !paths["/flipped"] || !paths["/cut"] {
		t.Errorf("fsck --scrub named %v, want /flipped and /cut", paths)
	}

	// A metadata problem that can be repaired: the holds of a session
	// whose record is gone.
	sid, err := vol.Meta.NewSession(ctx, meta.SessionInfo{Host: "gone"})
	if err != nil {
		t.Fatal(err)
	}
	ino, _, err := vol.Meta.Create(ctx, &base.Caller{}, base.RootIno, "held", 0o644, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := vol.Store.Update(ctx, func(tx kv.Txn) error {
		return tx.Scan(nil, nil, false, func(k, _ []byte) bool {
			if ki, err := meta.DecodeKey(k); err == nil && ki.Kind == "session" && ki.ID == sid {
				tx.Delete(append([]byte(nil), k...))
			}
			return true
		})
	}); err != nil {
		t.Fatal(err)
	}
	r, err = run(FsckOptions{Repair: true})
	if len(r.Repaired) == 0 || len(r.Problems) != 0 || len(r.Data) != 1 || !errors.Is(err, ErrProblems) {
		t.Fatalf("fsck --repair: %v %+v", err, r)
	}
	for _, p := range r.Repaired {
		if p.Ino == ino && p.Path != "/held" {
			t.Errorf("repaired problem of inode %d named %q, want /held", ino, p.Path)
		}
	}
	if left, err := vol.Meta.Check(ctx, false); err != nil || len(left) != 0 {
		t.Fatalf("after --repair: %v %+v", err, left)
	}
}
