package meta

import (
	"errors"
	"testing"

	"github.com/cairnfs/cairn/internal/base"
)

// TestChangeSettings: the name and limits change in the record, this
// client applies them at once and another at its refreshSettings (as at
// its heartbeat); a lowered inode limit refuses creates; fixed settings do
// not change.
func TestChangeSettings(t *testing.T) {
	store := newStore(t, Settings{Name: "v"})
	a := must[*Meta](t)(Open(ctx, store, Options{}))
	b := must[*Meta](t)(Open(ctx, store, Options{LatestCacheEntries: -1}))
	create(t, a, root, base.RootIno, "one")
	s, err := a.ChangeSettings(ctx, func(s *Settings) error { s.Name, s.Inodes = "renamed", 2; return nil })
	if err != nil || s.Name != "renamed" || s.Inodes != 2 || a.Settings().Inodes != 2 {
		t.Fatalf("ChangeSettings: %+v, %v", s, err)
	}
	if b.Settings().Inodes != 0 {
		t.Fatalf("b saw the change before its refresh")
	}
	ok(t, b.refreshSettings(ctx))
	if b.Settings().Name != "renamed" || b.Settings().Inodes != 2 {
		t.Fatalf("b after its refresh: %+v", b.Settings())
	}
	// Root and one: the limit of 2 is reached.
	if _, _, err := b.Mknod(ctx, root, base.RootIno, "two", base.TypeFile, 0o644, 0, 0, ""); !errors.Is(err, base.ErrNoSpace) {
		t.Fatalf("create past the inode limit: %v", err)
	}
	if st, err := b.StatFS(ctx); err != nil || st.AvailFiles != 0 {
		t.Fatalf("statfs at the limit: %+v %v", st, err)
	}
	if _, err := a.ChangeSettings(ctx, func(s *Settings) error { s.BlockSize *= 2; return nil }); !errors.Is(err, base.ErrInvalid) {
		t.Fatalf("a change of the block size: %v", err)
	}
	if _, err := a.ChangeSettings(ctx, func(s *Settings) error { s.Name = ""; return nil }); !errors.Is(err, base.ErrInvalid) {
		t.Fatalf("an empty name: %v", err)
	}
	must[Settings](t)(a.ChangeSettings(ctx, func(s *Settings) error { s.Inodes = 0; return nil }))
	ok(t, b.refreshSettings(ctx))
	create(t, b, root, base.RootIno, "two")
}
