package fstest

import (
	"testing"
	"time"
)

// TestChecks runs Cairn's own checks on a real FUSE mount.
func TestChecks(t *testing.T) {
	m := MountVolume(t, NewVolume(t), MountOptions{AttrTimeout: time.Second, EntryTimeout: time.Second})
	Run(t, m.Dir, nil)
}

// TestChecksNoWriteback runs the checks with every write sent to Cairn.
func TestChecksNoWriteback(t *testing.T) {
	m := MountVolume(t, NewVolume(t), MountOptions{AttrTimeout: time.Second, EntryTimeout: time.Second, NoWriteback: true})
	Run(t, m.Dir, nil)
}

// TestPosix runs go-fuse's posixtest suite on a real FUSE mount.
func TestPosix(t *testing.T) {
	m := MountVolume(t, NewVolume(t), MountOptions{AttrTimeout: time.Second, EntryTimeout: time.Second})
	RunPosix(t, m.Dir, nil)
}
