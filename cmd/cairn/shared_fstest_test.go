package main

import (
	"testing"

	"github.com/cairnfs/cairn/internal/fstest"
)

// TestSharedFstest runs Cairn's POSIX checks and go-fuse's posixtest suite
// on a mount of a shared volume (PostgreSQL and S3), made by the binary as
// a user would, with another mount of the same volume open: the shared
// engine's accelerators (group commit, leases, started-ahead creates,
// listing cache) under the same checks as the embedded volume's.
func TestSharedFstest(t *testing.T) {
	v := newSharedVolume(t)
	m := v.mount(t, "a")
	v.mount(t, "b") // a second client: leases are taken and recalled
	t.Run("checks", func(t *testing.T) { fstest.Run(t, m.mnt, nil) })
	t.Run("posixtest", func(t *testing.T) { fstest.RunPosix(t, m.mnt, nil) })
	if out, err := v.cairn(t, "fsck", v.meta); err != nil {
		t.Fatalf("fsck: %v\n%s", err, out)
	}
}
