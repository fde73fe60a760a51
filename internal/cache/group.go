package cache

import (
	"fmt"
	"sync"
)

// Group runs one function call per key at a time: callers of Do with a key
// whose call is in flight wait for it and share its result. The zero Group
// is ready to use; it is safe for concurrent use.
type Group struct {
	mu    sync.Mutex
	calls map[string]*call
}

type call struct {
	done chan struct{}
	data []byte
	err  error
}

// Do calls fn and returns its result, unless a call for key is already in
// flight: then it waits for that call and returns its result. All callers
// share the returned slice, which nobody may modify. Results are not kept:
// once the call returns, the next Do calls fn again.
//
// Waiting cannot be cancelled, so fn should bound its own time (for example
// with a context deadline). If fn panics, the panic propagates in the caller
// that ran fn and the waiters get an error.
func (g *Group) Do(key string, fn func() ([]byte, error)) ([]byte, error) {
	g.mu.Lock()
	if g.calls == nil {
		g.calls = make(map[string]*call)
	}
	if c, ok := g.calls[key]; ok {
		g.mu.Unlock()
		<-c.done
		return c.data, c.err
	}
	c := &call{done: make(chan struct{}), err: fmt.Errorf("cache: load of %q panicked", key)}
	g.calls[key] = c
	g.mu.Unlock()

	defer func() {
		g.mu.Lock()
		delete(g.calls, key)
		g.mu.Unlock()
		close(c.done)
	}()
	c.data, c.err = fn()
	return c.data, c.err
}
