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
	kinds, err := watchedUpdate(ctx, s.Store, fn)
	if err == nil && kinds["pending"] && s.armed.CompareAndSwap(true, false) {
		return fmt.Errorf("commit sent, connection lost: %w", kv.ErrUnknownOutcome)
	}
	return err
}

// kindWatch is a transaction that notes the kinds (meta.KeyInfo.Kind) of
// the keys it sets.
type kindWatch struct {
	kv.Txn
	kinds map[string]bool
}

func (w *kindWatch) Set(key, value []byte) {
	if ki, err := meta.DecodeKey(key); err == nil {
		w.kinds[ki.Kind] = true
	}
	w.Txn.Set(key, value)
}

// watchedUpdate runs fn in an update of s and returns the kinds of the
// keys its committed attempt set.
func watchedUpdate(ctx context.Context, s kv.Store, fn func(kv.Txn) error) (map[string]bool, error) {
	var w *kindWatch
	err := s.Update(ctx, func(tx kv.Txn) error {
		w = &kindWatch{Txn: tx, kinds: map[string]bool{}}
		return fn(w)
	})
	if err != nil {
		return nil, err
	}
	return w.kinds, nil
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
