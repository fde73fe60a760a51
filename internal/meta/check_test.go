package meta

import (
	"testing"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// d is the inode of /d, where TestCheckFindsAndRepairs makes its file.
func d(m *Meta) base.Ino {
	ino, _, err := m.Lookup(ctx, root, base.RootIno, "d")
	if err != nil {
		panic(err)
	}
	return ino
}

// TestCheckFindsAndRepairs breaks one invariant at a time and wants Check
// to find it (named by path where the inode has one) and, where it can,
// repair it.
func TestCheckFindsAndRepairs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		break_ func(t *testing.T, m *Meta, f base.Ino)
		kind   string
		repair bool
		path   string // the problem's path name, "" for none
	}{
		{"dangling dentry", func(t *testing.T, m *Meta, f base.Ino) {
			ok(t, m.mutate(ctx, func(o *op) error {
				return o.vset(dentryKey(base.RootIno, "ghost"), encodeDentry(12345, base.TypeFile))
			}))
		}, "dangling-dentry", true, ""},
		{"bad nlink", func(t *testing.T, m *Meta, f base.Ino) {
			ok(t, m.mutate(ctx, func(o *op) error { a, _ := o.attr(f); a.Nlink = 5; o.put(f, a); return nil }))
		}, "bad-nlink", true, "/d/f"},
		{"bad dir nlink", func(t *testing.T, m *Meta, f base.Ino) {
			ok(t, m.mutate(ctx, func(o *op) error { a, _ := o.attr(1); a.Nlink = 9; o.put(1, a); return nil }))
		}, "bad-nlink", true, "/"},
		{"counter", func(t *testing.T, m *Meta, f base.Ino) {
			ok(t, m.mutate(ctx, func(o *op) error { return o.addUsage(counterUsedInodes, 3) }))
		}, "bad-counter", true, ""},
		{"orphan chunk", func(t *testing.T, m *Meta, f base.Ino) {
			ok(t, m.mutate(ctx, func(o *op) error {
				return o.vset(chunkKey(777, 0), encodeSlices([]base.Slice{{Len: 1}}))
			}))
		}, "orphan-record", true, ""},
		{"pending referenced", func(t *testing.T, m *Meta, f base.Ino) {
			s := newSlice(t, m, 0, 1)
			_, err := m.WriteSlice(ctx, f, 0, s, 1)
			ok(t, err)
			ok(t, m.mutate(ctx, func(o *op) error { o.Set(pendingKey(s.ID), u32(nil, 1)); return nil }))
		}, "pending-referenced", true, ""},
		{"bad attr", func(t *testing.T, m *Meta, f base.Ino) {
			ok(t, m.store.Update(ctx, func(tx kv.Txn) error {
				tx.Set(versionKey(attrKey(f), 1), []byte{tagLive, 9})
				return nil
			}))
		}, "bad-record", false, ""},
		{"type mismatch", func(t *testing.T, m *Meta, f base.Ino) {
			ok(t, m.mutate(ctx, func(o *op) error {
				return o.vset(dentryKey(d(m), "f"), encodeDentry(f, base.TypeFIFO))
			}))
		}, "type-mismatch", false, "/d/f"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := newStore(t, Settings{Name: "v"})
			m := must[*Meta](t)(Open(ctx, store, Options{}))
			dir := mkdir(t, m, root, base.RootIno, "d")
			f := create(t, m, root, dir, "f")
			tc.break_(t, m, f)
			probs := must[[]Problem](t)(m.Check(ctx, tc.repair))
			found := false
			for _, p := range probs {
				found = found || p.Kind == tc.kind && p.Path == tc.path
			}
			if !found {
				t.Fatalf("problems %+v, want %s at %q", probs, tc.kind, tc.path)
			}
			if tc.repair {
				if probs := must[[]Problem](t)(m.Check(ctx, false)); len(probs) != 0 {
					t.Fatalf("after repair: %+v", probs)
				}
			}
		})
	}
}
