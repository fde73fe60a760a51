package meta

import (
	"fmt"
	"testing"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// freeze simulates taking a snapshot: the live epoch becomes frozen and
// the next one opens.
func freeze(t *testing.T, store kv.Store) uint64 {
	t.Helper()
	var e uint64
	ok(t, store.Update(ctx, func(tx kv.Txn) error {
		w := &wtx{Txn: tx}
		if err := w.loadEpochs(); err != nil {
			return err
		}
		e = w.epoch
		tx.Set(frozenKey(), encodeU64s(append(w.frozen, e)))
		tx.Set(snapshotKey(fmt.Sprint("e", e)), []byte(fmt.Sprintf(`{"name":"e%d","epoch":%d}`, e, e)))
		tx.Set(epochKey(), u64(nil, e+1))
		return nil
	}))
	return e
}

func countVersions(t *testing.T, store kv.Store, logical []byte) int {
	t.Helper()
	n := 0
	ok(t, store.View(ctx, func(r kv.Reader) error {
		vs, err := versions(r, logical)
		n = len(vs)
		return err
	}))
	return n
}

func readAt(t *testing.T, store kv.Store, logical []byte, epoch uint64) (string, bool) {
	t.Helper()
	var v []byte
	var found bool
	ok(t, store.View(ctx, func(r kv.Reader) (err error) {
		v, found, err = vget(r, logical, epoch)
		return err
	}))
	return string(v), found
}

func TestVersions(t *testing.T) {
	store := newStore(t, Settings{Name: "v"})
	key := []byte("~test")
	set := func(v string) {
		ok(t, store.Update(ctx, func(tx kv.Txn) error { return (&wtx{Txn: tx}).vset(key, []byte(v)) }))
	}
	del := func() {
		ok(t, store.Update(ctx, func(tx kv.Txn) error { return (&wtx{Txn: tx}).vdel(key) }))
	}
	set("a")
	set("b") // same epoch: overwritten in place
	if n := countVersions(t, store, key); n != 1 {
		t.Fatalf("%d versions", n)
	}
	del() // nothing retained: key removed, no tombstone
	if n := countVersions(t, store, key); n != 0 {
		t.Fatalf("%d versions after delete", n)
	}
	set("c")
	s1 := freeze(t, store) // snapshot at epoch 1, live 2
	set("d")
	if n := countVersions(t, store, key); n != 2 {
		t.Fatalf("%d versions", n)
	}
	if v, _ := readAt(t, store, key, s1); v != "c" {
		t.Fatalf("snapshot reads %q", v)
	}
	if v, _ := readAt(t, store, key, latestEpoch); v != "d" {
		t.Fatalf("live reads %q", v)
	}
	s2 := freeze(t, store) // snapshot at 2, live 3
	del()                  // tombstone at 3 hides d from live
	if _, found := readAt(t, store, key, latestEpoch); found {
		t.Fatal("deleted record visible")
	}
	if v, _ := readAt(t, store, key, s2); v != "d" {
		t.Fatalf("snapshot 2 reads %q", v)
	}
	if n := countVersions(t, store, key); n != 3 {
		t.Fatalf("%d versions", n)
	}
	set("e") // replaces the tombstone of epoch 3
	if n := countVersions(t, store, key); n != 3 {
		t.Fatalf("%d versions", n)
	}
	// vscan collapses versions
	var seen []string
	ok(t, store.View(ctx, func(r kv.Reader) error {
		return vscan(r, []byte("~"), nil, s1, func(_, v []byte) bool { seen = append(seen, string(v)); return true })
	}))
	if len(seen) != 1 || seen[0] != "c" {
		t.Fatalf("scan at snapshot %v", seen)
	}
	ok(t, store.Update(ctx, func(tx kv.Txn) error {
		for _, e := range []uint64{1, 2, 3} {
			tx.Delete(versionKey(key, e))
		}
		return nil
	}))
}

func TestCopyOnWriteChunkUnderSnapshot(t *testing.T) {
	store := newStore(t, Settings{Name: "v"})
	m := must[*Meta](t)(Open(ctx, store, Options{}))
	checkOnCleanup(t, m)
	f := create(t, m, root, base.RootIno, "f")
	s1 := newSlice(t, m, 0, 10)
	_, err := m.WriteSlice(ctx, f, 0, s1, 1)
	ok(t, err)
	snap := freeze(t, store)
	s2 := newSlice(t, m, 10, 10)
	_, err = m.WriteSlice(ctx, f, 0, s2, 2)
	ok(t, err)
	if n := countVersions(t, store, chunkKey(f, 0)); n != 2 {
		t.Fatalf("%d chunk versions", n)
	}
	merged := newSlice(t, m, 0, 20)
	ok(t, m.CompactChunk(ctx, f, 0, []base.Slice{s1, s2}, nil, merged))
	// s1 is still referenced by the snapshot's version; s2 only lived in
	// the live epoch's version, now replaced
	if got := pendingIDs(t, m); len(got) != 1 || got[0] != s2.ID {
		t.Fatalf("pending %v", got)
	}
	v, _ := readAt(t, store, chunkKey(f, 0), snap)
	if ss, err := decodeSlices([]byte(v)); err != nil || len(ss) != 1 || ss[0] != s1 {
		t.Fatalf("snapshot chunk %v %v", ss, err)
	}
	var uses int
	ok(t, m.ForEachSlice(ctx, func(SliceUse) error { uses++; return nil }))
	if uses != 2 { // s1 (snapshot) and merged (live)
		t.Fatalf("%d uses", uses)
	}
}
