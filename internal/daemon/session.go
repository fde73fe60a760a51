package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/cairnfs/cairn/internal/meta"
)

// The session of a process that serves a volume (a mount, an NFS
// gateway): registered when it starts, kept alive by heartbeats, closed
// when it stops.

// checkSessionTimes fills in the default heartbeat interval (5 s) and
// session timeout, and checks that the timeout spans two heartbeats.
func checkSessionTimes(heartbeat, timeout *time.Duration) error {
	if *heartbeat <= 0 {
		*heartbeat = 5 * time.Second
	}
	if *timeout <= 0 {
		*timeout = DefaultSessionTimeout
	}
	if *timeout < 2**heartbeat {
		return fmt.Errorf("session timeout %v must be at least twice the heartbeat interval %v", *timeout, *heartbeat)
	}
	return nil
}

// openSession registers this process's session; info.Pid and
// info.Started are filled in. closeSession ends it (a failure is logged).
func openSession(ctx context.Context, m *meta.Meta, info meta.SessionInfo, log *slog.Logger) (closeSession func(), err error) {
	info.Pid, info.Started = os.Getpid(), time.Now()
	if _, err := m.NewSession(ctx, info); err != nil {
		return nil, fmt.Errorf("registering session: %w", err)
	}
	return func() {
		if err := m.CloseSession(context.Background()); err != nil {
			log.Warn("closing session", "err", err)
		}
	}, nil
}

// startHeartbeats runs keepSessionAlive in the background until stop is
// called; stop waits for it to return.
func startHeartbeats(m *meta.Meta, every, timeout time.Duration, log *slog.Logger) (stop func()) {
	stopHB := make(chan struct{})
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		keepSessionAlive(m, every, timeout, log, stopHB)
	}()
	return func() { close(stopHB); <-hbDone }
}

// keepSessionAlive sends the session's heartbeats and, after each, declares
// dead the sessions of other clients that missed theirs for longer than
// timeout, until stop is closed.
func keepSessionAlive(m *meta.Meta, every, timeout time.Duration, log *slog.Logger, stop <-chan struct{}) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout/2)
		if err := m.Heartbeat(ctx); err != nil {
			log.Error("heartbeat", "err", err)
		}
		if _, err := m.ExpireSessions(ctx, timeout); err != nil {
			log.Warn("looking for dead sessions", "err", err)
		}
		cancel()
	}
}
