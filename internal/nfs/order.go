package nfs

// Write ordering. A client streaming a file keeps several WRITEs in
// flight (on one connection or several); served by concurrent goroutines
// they reach vfs in any order, and every write that does not continue
// the previous one ends the slice being filled (chunk.Writer keeps one
// contiguous slice per chunk). Measured with 4 WRITEs in flight: about 2
// object requests per 128 KiB write, instead of one per 4 MiB block.
//
// So a WRITE is registered with its offset as soon as its record is read
// (before its handler starts), and its handler waits while a registered,
// unserved WRITE of the same file has a smaller offset. A stream arrives
// in order and is served in order; random writes wait only for writes
// already being served. Other calls never wait.

import (
	"sync"
	"time"

	"github.com/cairnfs/cairn/internal/nfs/proto"
)

// orderTimeout bounds how long a WRITE waits for smaller ones: a safety
// net (those are being served), not a tuning knob.
const orderTimeout = 10 * time.Second

// writeOrder tracks the WRITEs in flight per file handle. Safe for
// concurrent use.
type writeOrder struct {
	mu    sync.Mutex
	files map[string]*inflightWrites
}

type inflightWrites struct {
	offs map[*turn]uint64
	ch   chan struct{} // closed and replaced when a write is served
}

// turn is one registered WRITE.
type turn struct {
	o   *writeOrder
	key string
	off uint64
}

// writeArgs returns the file handle and offset of call if it is an NFSv3
// WRITE.
func writeArgs(call proto.Call) (string, uint64, bool) {
	if !call.Valid || call.Prog != proto.ProgNFS || call.Vers != proto.NFSVersion || call.Proc != proto.NFSProcWrite {
		return "", 0, false
	}
	r := proto.NewReader(call.Args)
	fh := r.Opaque(proto.MaxFHSize)
	off := r.Uint64()
	if r.Err() != nil {
		return "", 0, false
	}
	return string(fh), off, true
}

// register records call if it is a WRITE and returns its turn (nil
// otherwise). Called by a connection's reader, before the handler starts.
func (o *writeOrder) register(call proto.Call) *turn {
	key, off, ok := writeArgs(call)
	if !ok {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.files == nil {
		o.files = make(map[string]*inflightWrites)
	}
	f := o.files[key]
	if f == nil {
		f = &inflightWrites{offs: make(map[*turn]uint64), ch: make(chan struct{})}
		o.files[key] = f
	}
	t := &turn{o: o, key: key, off: off}
	f.offs[t] = off
	return t
}

// wait blocks while a registered WRITE of the same file with a smaller
// offset is not served (or until orderTimeout).
func (t *turn) wait() {
	var deadline <-chan time.Time
	for {
		t.o.mu.Lock()
		f := t.o.files[t.key]
		first := true
		for u, off := range f.offs {
			if u != t && off < t.off {
				first = false
				break
			}
		}
		ch := f.ch
		t.o.mu.Unlock()
		if first {
			return
		}
		if deadline == nil {
			tm := time.NewTimer(orderTimeout)
			defer tm.Stop()
			deadline = tm.C
		}
		select {
		case <-ch:
		case <-deadline:
			return
		}
	}
}

// done unregisters the WRITE and wakes the ones waiting for it.
func (t *turn) done() {
	t.o.mu.Lock()
	defer t.o.mu.Unlock()
	f := t.o.files[t.key]
	delete(f.offs, t)
	close(f.ch)
	f.ch = make(chan struct{})
	if len(f.offs) == 0 {
		delete(t.o.files, t.key)
	}
}
