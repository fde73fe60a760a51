package main

import (
	"testing"

	"github.com/cairnfs/cairn/internal/fstest"
)

// sharedPosixSkips are posixtest cases that fail on a shared mount, each
// a known bug documented in docs/posix.md.
var sharedPosixSkips = map[string]string{
	"OpenSymlinkRace": "known bug on shared volumes (docs/posix.md): an open racing an unlink or rename-over of the same file can succeed while the unlink destroys the inode (likely: the open's blind hold write and the unlink's read of the holds do not conflict under snapshot isolation); the opener's fstat then gets ENOENT. Seen once in four CI runs under load",
}

// TestSharedFstest runs Cairn's POSIX checks and go-fuse's posixtest suite
// on a mount of a shared volume (PostgreSQL and S3), made by the binary as
// a user would, with another mount of the same volume open: the shared
// engine's accelerators (group commit, leases, started-ahead creates,
// listing cache) under the same checks as the embedded volume's.
func TestSharedFstest(t *testing.T) {
	v := newSharedVolume(t)
	m := v.mount(t, "a")
	v.mount(t, "b") // a second client: leases are taken and recalled
	t.Run("checks", func(t *testing.T) { fstest.Run(t, m.mnt) })
	t.Run("posixtest", func(t *testing.T) { fstest.RunPosix(t, m.mnt, sharedPosixSkips) })
	if out, err := v.cairn(t, "fsck", v.meta); err != nil {
		t.Fatalf("fsck: %v\n%s", err, out)
	}
}
