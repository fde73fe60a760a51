package daemon

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/meta"
	"github.com/cairnfs/cairn/internal/vfs"
)

// TestBlockFormatOfVolume: a new volume writes blocks bound to their
// identity (trailer format 2); a volume formatted before format version
// 3 keeps writing and reading blocks of format 1, inline ones too, so
// that its files written before and after the upgrade read back.
func TestBlockFormatOfVolume(t *testing.T) {
	ctx := context.Background()
	for _, version := range []int{2, meta.CurrentFormatVersion} {
		dir := t.TempDir()
		url := "pebble://" + dir + "/meta"
		s, err := Format(ctx, FormatOptions{MetaURL: url, Name: "v", BlockSize: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		if version != s.FormatVersion {
			// An older volume: the same settings at an older version.
			loc, err := ParseMetaURL(url)
			if err != nil {
				t.Fatal(err)
			}
			store, err := OpenStore(loc, nil)
			if err != nil {
				t.Fatal(err)
			}
			s.FormatVersion = version
			if err := meta.Format(ctx, store, s, true); err != nil {
				t.Fatal(err)
			}
			store.Close()
		}
		files := map[string][]byte{
			"small": []byte("inline, in the metadata engine"),
			"large": bytes.Repeat([]byte("in the data store "), 100000),
		}
		inos := map[string]base.Ino{}
		vol, err := OpenVolume(ctx, VolumeOptions{MetaURL: url})
		if err != nil {
			t.Fatal(err)
		}
		v := vfs.New(vol.Meta, vol.Chunks, vfs.Options{})
		for name, data := range files {
			ino, _, fh, errno := v.Create(ctx, &base.Caller{}, base.RootIno, name, 0o644, 0, syscall.O_RDWR)
			if errno != 0 {
				t.Fatal(errno)
			}
			inos[name] = ino
			if _, errno := v.Write(ctx, fh, 0, data); errno != 0 {
				t.Fatal(errno)
			}
			if errno := v.Release(ctx, fh); errno != 0 {
				t.Fatal(errno)
			}
		}
		_ = v.Close(ctx)
		vol.Close()

		want := byte(2)
		if version < 3 {
			want = 1
		}
		objects := 0
		err = filepath.WalkDir(strings.TrimPrefix(s.DataURL, "file://"), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.Contains(p, "/chunks/") {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			objects++
			if got := b[len(b)-4:]; string(got[:3]) != "CRN" || got[3] != want {
				t.Errorf("version %d volume: block %s ends %q, want block format %d", version, p, got, want)
			}
			return nil
		})
		if err != nil || objects == 0 {
			t.Fatalf("version %d volume: %d block objects (%v)", version, objects, err)
		}

		vol, err = OpenVolume(ctx, VolumeOptions{MetaURL: url})
		if err != nil {
			t.Fatal(err)
		}
		v = vfs.New(vol.Meta, vol.Chunks, vfs.Options{})
		for name, data := range files {
			fh, errno := v.Open(ctx, &base.Caller{}, inos[name], syscall.O_RDONLY)
			if errno != 0 {
				t.Fatal(errno)
			}
			buf := make([]byte, len(data)+10)
			n, errno := v.Read(ctx, fh, 0, buf)
			if errno != 0 || !bytes.Equal(buf[:n], data) {
				t.Errorf("version %d volume: %s read back %d bytes (%v), want %d", version, name, n, errno, len(data))
			}
			_ = v.Release(ctx, fh)
		}
		_ = v.Close(ctx)
		vol.Close()
	}
}
