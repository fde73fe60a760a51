package fstest

import (
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/posixtest"
)

// TestChecks runs Cairn's own checks on a real FUSE mount.
func TestChecks(t *testing.T) {
	m := MountVolume(t, NewVolume(t), MountOptions{AttrTimeout: time.Second, EntryTimeout: time.Second})
	Run(t, m.Dir)
}

// TestChecksNoWriteback runs the checks with every write sent to Cairn.
func TestChecksNoWriteback(t *testing.T) {
	m := MountVolume(t, NewVolume(t), MountOptions{AttrTimeout: time.Second, EntryTimeout: time.Second, NoWriteback: true})
	Run(t, m.Dir)
}

// TestPosix runs go-fuse's posixtest suite on a real FUSE mount.
func TestPosix(t *testing.T) {
	m := MountVolume(t, NewVolume(t), MountOptions{AttrTimeout: time.Second, EntryTimeout: time.Second})
	for name, fn := range posixtest.All {
		t.Run(name, func(t *testing.T) {
			if why, ok := posixSkips[name]; ok {
				t.Skip(why)
			}
			dir := m.Dir + "/" + name
			fn(t, mkdir(t, dir))
		})
	}
}

// posixSkips are posixtest cases whose expectation differs from Linux's own
// file systems; each is documented in docs/posix.md.
var posixSkips = map[string]string{
	"FcntlFlockLocksFile": "expects a second fcntl lock by the same process to conflict; POSIX (and ext4) let a process re-lock its own range",
}
