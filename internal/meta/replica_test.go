package meta

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// namespaceAt returns every namespace record of m at epoch (latestEpoch:
// the live volume), logical key → payload.
func namespaceAt(t *testing.T, m *Meta, epoch uint64) map[string]string {
	t.Helper()
	out := map[string]string{}
	ok(t, m.view(ctx, func(r kv.Reader) error {
		for _, p := range versionedPrefixes {
			if err := vscan(r, prefixOnly(p), prefixOnly(p), epoch, func(logical, payload []byte) bool {
				out[string(logical)] = string(payload)
				return true
			}); err != nil {
				return err
			}
		}
		return nil
	}))
	return out
}

func sameNamespace(t *testing.T, what string, want, got map[string]string) {
	t.Helper()
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Fatalf("%s: record %x: destination has %x (present %v), want %x", what, k, g, ok, v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Fatalf("%s: record %x only on the destination", what, k)
		}
	}
}

// replicateOnce runs one cycle between two Metas as the daemon's
// replicator does (records only; these tests have no objects).
func replicateOnce(t *testing.T, src, dst *Meta, n int) Snapshot {
	t.Helper()
	snap := must[Snapshot](t)(src.CreateSnapshot(ctx, fmt.Sprintf("replica.test.%d", n)))
	st, had, err := dst.ReplicaState(ctx)
	ok(t, err)
	a := ReplicaApply{First: !had}
	if !had {
		st = ReplicaState{Pair: "test", SourceUUID: src.Settings().UUID}
		var next []byte
		for {
			recs, nx, err := src.ReplicaScan(ctx, snap, next, 7) // small batches: the resume key is used
			ok(t, err)
			a.Records = append(a.Records, recs...)
			if next = nx; next == nil {
				break
			}
		}
	} else {
		prev := must[Snapshot](t)(src.SnapshotByName(ctx, st.Snapshot))
		keys := must[[][]byte](t)(src.ReplicaChanged(ctx, prev, &snap))
		a.Records = must[[]ReplicaRecord](t)(src.ReplicaValues(ctx, snap, keys))
		a.ExpectSnapshot = prev.Name
	}
	a.Counters = must[ReplicaCounters](t)(src.ReplicaCountersNow(ctx))
	st.Snapshot, st.Epoch, st.Taken = snap.Name, snap.Epoch, snap.Created
	a.State = st
	ok(t, dst.ApplyReplica(ctx, a))
	return snap
}

// TestReplicaRecords: a destination holds the source's namespace records
// of the replicated snapshot exactly, through a first copy in batches and
// an incremental cycle of links, renames, xattrs, removals and an open
// unlinked file (left out); the usage counters follow; ApplyReplica
// refuses a cycle that does not start from the destination's state.
func TestReplicaRecords(t *testing.T) {
	src, dst := newTestMeta(t), newTestMeta(t)
	d := mkdir(t, src, root, base.RootIno, "d")
	var files []base.Ino
	for i := 0; i < 20; i++ {
		files = append(files, create(t, src, root, d, fmt.Sprintf("f%02d", i)))
	}
	_, err := src.WriteSlice(ctx, files[0], 0, base.Slice{ID: must[uint64](t)(src.NewSliceID(ctx)), Size: 100, Len: 100}, time.Now().UnixNano())
	ok(t, err)
	ok(t, src.SetXattr(ctx, root, files[1], "user.a", []byte("1"), 0))
	must[base.Attr](t)(src.Link(ctx, root, files[2], base.RootIno, "hard"))
	snap := replicateOnce(t, src, dst, 1)
	sameNamespace(t, "first copy", namespaceAt(t, src, snap.Epoch), namespaceAt(t, dst, latestEpoch))

	ok(t, src.Rename(ctx, root, d, "f03", base.RootIno, "moved", 0))
	ok(t, src.Unlink(ctx, root, d, "f04"))
	ok(t, src.Unlink(ctx, root, base.RootIno, "hard"))
	ok(t, src.RemoveXattr(ctx, root, files[1], "user.a"))
	ok(t, src.SetXattr(ctx, root, files[5], "user.b", []byte("2"), 0))
	_, err = src.WriteSlice(ctx, files[0], 0, base.Slice{ID: must[uint64](t)(src.NewSliceID(ctx)), Size: 50, Len: 50}, time.Now().UnixNano())
	ok(t, err)
	// Open and unlinked: its records exist at the snapshot, unlinked.
	must[base.Attr](t)(src.OpenFile(ctx, files[6]))
	ok(t, src.Unlink(ctx, root, d, "f06"))
	snap = replicateOnce(t, src, dst, 2)
	want := namespaceAt(t, src, snap.Epoch)
	delete(want, string(attrKey(files[6])))
	sameNamespace(t, "incremental", want, namespaceAt(t, dst, latestEpoch))
	ok(t, src.CloseFile(ctx, files[6])) // destroyed now: the counts agree
	su, du := must[Usage](t)(src.Usage(ctx)), must[Usage](t)(dst.Usage(ctx))
	if du != su {
		t.Fatalf("destination usage %+v, source %+v", du, su)
	}

	st, _, err := dst.ReplicaState(ctx)
	ok(t, err)
	err = dst.ApplyReplica(ctx, ReplicaApply{ExpectSnapshot: "replica.test.1", State: st})
	if !errors.Is(err, ErrReplicaMoved) {
		t.Fatalf("a cycle from an older state: %v, want ErrReplicaMoved", err)
	}
	must[ReplicaState](t)(dst.PromoteReplica(ctx, time.Now()))
	err = dst.ApplyReplica(ctx, ReplicaApply{ExpectSnapshot: st.Snapshot, State: st})
	if !errors.Is(err, ErrReplicaMoved) {
		t.Fatalf("a cycle onto a promoted destination: %v, want ErrReplicaMoved", err)
	}
	c := must[ReplicaCounters](t)(dst.ReplicaCountersNow(ctx))
	sc := must[ReplicaCounters](t)(src.ReplicaCountersNow(ctx))
	if c.NextInode < sc.NextInode+replicaInodeGap || c.NextSlice < sc.NextSlice+replicaSliceGap {
		t.Fatalf("counters after the failover %+v, source %+v: want them past the gap", c, sc)
	}
	if _, err := dst.PromoteReplica(ctx, time.Now()); !errors.Is(err, base.ErrExist) {
		t.Fatalf("a second failover: %v", err)
	}
}

// FuzzReplicaState: the state record decodes or fails with ErrIO, never
// panics.
func FuzzReplicaState(f *testing.F) {
	f.Add([]byte(`{"pair":"p","snapshot":"s","epoch":3}`))
	f.Add([]byte(`{`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		store := testStore(t)
		ok(t, store.Update(ctx, func(tx kv.Txn) error { tx.Set(replicaKey(), b); return nil }))
		_, found, err := LoadReplicaState(ctx, store)
		if err != nil && !errors.Is(err, base.ErrIO) {
			t.Fatalf("error %v does not wrap ErrIO", err)
		}
		if err == nil && !found {
			t.Fatal("a record present read as absent")
		}
	})
}
