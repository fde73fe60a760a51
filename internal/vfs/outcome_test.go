package vfs

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/meta"
)

// lostCommit is a store whose first committed transaction that queues a
// slice for deletion (a compaction's) reports kv.ErrUnknownOutcome, as a
// server store does when the connection drops after the commit was sent.
type lostCommit struct {
	kv.Store
	armed atomic.Bool
}

func (s *lostCommit) Update(ctx context.Context, fn func(kv.Txn) error) error {
	var frees bool
	err := s.Store.Update(ctx, func(tx kv.Txn) error {
		w := &freeWatch{Txn: tx}
		err := fn(w)
		frees = w.frees
		return err
	})
	if err == nil && frees && s.armed.CompareAndSwap(true, false) {
		return fmt.Errorf("commit sent, connection lost: %w", kv.ErrUnknownOutcome)
	}
	return err
}

type freeWatch struct {
	kv.Txn
	frees bool
}

func (w *freeWatch) Set(key, value []byte) {
	if ki, err := meta.DecodeKey(key); err == nil && ki.Kind == "pending" {
		w.frees = true
	}
	w.Txn.Set(key, value)
}

// A compaction whose commit has an unknown outcome (it did commit) keeps
// the merged slice's object: the chunk points to it.
func TestCompactionUnknownOutcomeKeepsObject(t *testing.T) {
	store := &lostCommit{}
	store.armed.Store(true)
	e := newEnvOver(t, Options{}, func(s kv.Store) kv.Store { store.Store = s; return store })
	v := e.v
	ino, fh := e.create(t, "f")
	model := make([]byte, 256<<10)
	end := 0
	for i := range 40 {
		off := (i * 7919) % (len(model) - 1000)
		p := bytes.Repeat([]byte{byte(i + 1)}, 1000)
		e.write(t, fh, int64(off), p)
		copy(model[off:], p)
		end = max(end, off+len(p))
		if en := v.Flush(ctx, fh); en != 0 { // one slice per write
			t.Fatal(en)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); store.armed.Load(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no compaction committed")
		}
	}
	time.Sleep(100 * time.Millisecond) // the deleter's turn, after DeleteDelay
	e.release(t, fh)
	if got := e.readAll(t, ino); !bytes.Equal(got, model[:end]) {
		t.Fatal("content lost after a compaction of unknown outcome")
	}
}
