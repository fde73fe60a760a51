package local

import (
	"container/list"
	"os"
	"sync"
)

// openFiles keeps the objects read last open, so that a read of a few KiB
// costs one pread(2), not an open, an fstat, the pread and a close: a
// random reader that misses the block cache makes two such reads per block
// (the segments and their checksums).
//
// A cached file stays valid while nothing replaces or removes the object:
// only this Store writes below its directory, and its Put and Delete drop
// the key (forget) before they return. A Get that opened the object while
// a Put or Delete of its key ran may have opened either version; it uses
// the file once and does not keep it.
type openFiles struct {
	mu      sync.Mutex
	max     int
	files   map[string]*openFile
	lru     list.List        // of *openFile, most recently used first
	opening map[string]*bool // keys being opened; true: forgotten meanwhile
	closed  bool
}

type openFile struct {
	key  string
	f    *os.File
	size int64
	refs int // readers using f, and the cache while it holds it
	elem *list.Element
}

// maxOpenFiles bounds the files openFiles keeps open.
const maxOpenFiles = 256

func newOpenFiles(max int) *openFiles {
	return &openFiles{max: max, files: make(map[string]*openFile), opening: make(map[string]*bool)}
}

// get returns the open file of key, opening it with open if it is not
// cached. Each successful get must be followed by one put.
func (c *openFiles) get(key string, open func() (*os.File, int64, error)) (*openFile, error) {
	c.mu.Lock()
	if o := c.files[key]; o != nil {
		o.refs++
		c.lru.MoveToFront(o.elem)
		c.mu.Unlock()
		return o, nil
	}
	forgotten, mine := c.opening[key], false
	if forgotten == nil {
		forgotten, mine = new(bool), true
		c.opening[key] = forgotten
	}
	c.mu.Unlock()
	f, size, err := open()
	c.mu.Lock()
	defer c.mu.Unlock()
	if mine {
		delete(c.opening, key)
	}
	if err != nil {
		return nil, err
	}
	o := &openFile{key: key, f: f, size: size, refs: 1}
	if !mine || *forgotten || c.closed || c.files[key] != nil {
		return o, nil // used once, closed by put
	}
	o.refs++
	o.elem = c.lru.PushFront(o)
	c.files[key] = o
	for c.lru.Len() > c.max {
		c.drop(c.lru.Back().Value.(*openFile))
	}
	return o, nil
}

// put ends a reader's use of o.
func (c *openFiles) put(o *openFile) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.release(o)
}

// forget drops key: the object is about to be replaced or removed, or
// was. Called before and after the change, no open file of the old object
// is kept.
func (c *openFiles) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.opening[key]; p != nil {
		*p = true
	}
	if o := c.files[key]; o != nil {
		c.drop(o)
	}
}

// close drops every file; those in use close when their reader is done.
func (c *openFiles) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for c.lru.Len() > 0 {
		c.drop(c.lru.Back().Value.(*openFile))
	}
}

// drop takes o out of the cache. c.mu is held.
func (c *openFiles) drop(o *openFile) {
	c.lru.Remove(o.elem)
	delete(c.files, o.key)
	c.release(o)
}

// release ends one use of o. c.mu is held.
func (c *openFiles) release(o *openFile) {
	if o.refs--; o.refs == 0 {
		o.f.Close()
	}
}
