package fuse

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// interruptGrace is how long an operation goes on after the kernel
// interrupted it (FUSE_INTERRUPT: a signal reached the calling process)
// before its context ends. The kernel interrupts for every signal, also
// the ones a program handles and goes on after (the Go runtime's
// preemption signals among them); an operation that finishes within the
// grace never sees the interrupt, so a signal does not turn a write that
// would have succeeded into EINTR. One that waits for a store that does
// not answer (an outage) ends with EINTR, and a process killed while it
// waits exits then, not when the store's timeout runs out: the kernel
// keeps a process whose request the daemon has read until it is
// answered, even after SIGKILL.
const interruptGrace = time.Second

// interruptCtx is the context of one operation the kernel may interrupt:
// it ends interruptGrace after the request's cancel channel closes, with
// context.Canceled (vfs: EINTR). A watcher goroutine starts only when
// something waits on Done; finish stops it.
type interruptCtx struct {
	cancel <-chan struct{}

	once        sync.Once
	done        chan struct{}
	end         chan struct{}
	interrupted atomic.Bool
}

// interruptible returns the context of an operation with request cancel
// channel cancel and the function that ends it (call when the operation
// returns).
func (fs *rawFS) interruptible(cancel <-chan struct{}) (context.Context, func()) {
	if cancel == nil {
		return context.Background(), func() {}
	}
	c := &interruptCtx{cancel: cancel, end: make(chan struct{})}
	return c, func() { close(c.end) }
}

func (c *interruptCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *interruptCtx) Value(any) any               { return nil }

func (c *interruptCtx) Done() <-chan struct{} {
	c.once.Do(func() {
		c.done = make(chan struct{})
		go c.watch()
	})
	return c.done
}

func (c *interruptCtx) Err() error {
	if c.interrupted.Load() {
		return context.Canceled
	}
	return nil
}

func (c *interruptCtx) watch() {
	select {
	case <-c.cancel:
	case <-c.end:
		return
	}
	t := time.NewTimer(interruptGrace)
	defer t.Stop()
	select {
	case <-t.C:
		c.interrupted.Store(true)
		close(c.done)
	case <-c.end:
	}
}

func (c *interruptCtx) String() string { return "fuse.interruptible" }
