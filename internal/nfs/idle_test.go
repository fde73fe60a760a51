package nfs

import (
	"testing"
	"time"
)

// A connection that keeps calling outlives the idle timeout many times
// over (the read deadline moves with its calls, if lazily); one that falls
// silent is closed after about the timeout.
func TestIdleTimeout(t *testing.T) {
	const idle = 300 * time.Millisecond
	e := newEnvWith(t, Options{IdleTimeout: idle})
	busy, root := e.client(t)
	quiet, qroot := e.client(t)
	for end := time.Now().Add(4 * idle); time.Now().Before(end); {
		if _, err := busy.GetAttr(root); err != nil {
			t.Fatalf("GETATTR on a busy connection: %v", err)
		}
		time.Sleep(idle / 5)
	}
	// quiet has been silent for 4 x idle since its MOUNT.
	if _, err := quiet.GetAttr(qroot); err == nil {
		t.Fatal("GETATTR succeeded on a connection idle for 4x the timeout")
	}
	if _, err := busy.GetAttr(root); err != nil {
		t.Fatalf("busy connection closed: %v", err)
	}
}
