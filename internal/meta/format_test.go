package meta

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/kv/memkv"
)

func TestFormat(t *testing.T) {
	store := memkv.New()
	_, err := LoadSettings(ctx, store)
	wantErr(t, err, base.ErrNotFound)
	_, err = Open(ctx, store, Options{})
	wantErr(t, err, base.ErrNotFound)

	ok(t, Format(ctx, store, Settings{Name: "vol"}, false))
	s := must[Settings](t)(LoadSettings(ctx, store))
	if s.Name != "vol" || s.UUID == "" || s.BlockSize != DefaultBlockSize || s.ChunkSize != base.ChunkSize ||
		s.FormatVersion != CurrentFormatVersion || s.Created.IsZero() {
		t.Fatalf("settings %+v", s)
	}
	err = Format(ctx, store, Settings{Name: "other"}, false)
	wantErr(t, err, base.ErrExist)
	if !strings.Contains(err.Error(), "volume vol already formatted here; use --force") {
		t.Errorf("message %q", err)
	}

	m := must[*Meta](t)(Open(ctx, store, Options{}))
	create(t, m, root, base.RootIno, "f")
	ok(t, Format(ctx, store, Settings{Name: "other"}, true))
	m = must[*Meta](t)(Open(ctx, store, Options{}))
	checkOnCleanup(t, m)
	if m.Settings().Name != "other" || len(names(t, m, base.RootIno)) != 0 {
		t.Fatal("force did not wipe")
	}
	a := attr(t, m, base.RootIno)
	if a.Type != base.TypeDir || a.Mode != 0o755 || a.Nlink != 2 || a.Parent != base.RootIno || a.Uid != 0 {
		t.Fatalf("root %+v", a)
	}
	u := must[Usage](t)(m.Usage(ctx))
	if u.Inodes != 1 || u.Bytes != 0 {
		t.Fatalf("usage %+v", u)
	}
}

func TestSettingsValidate(t *testing.T) {
	good := Settings{Name: "v", BlockSize: 4 << 20, ChunkSize: base.ChunkSize, FormatVersion: 1}
	for _, tc := range []struct {
		name string
		mod  func(*Settings)
		ok   bool
	}{
		{"good", func(*Settings) {}, true},
		{"min block", func(s *Settings) { s.BlockSize = 64 << 10 }, true},
		{"max block", func(s *Settings) { s.BlockSize = 16 << 20 }, true},
		{"no name", func(s *Settings) { s.Name = "" }, false},
		{"small block", func(s *Settings) { s.BlockSize = 32 << 10 }, false},
		{"big block", func(s *Settings) { s.BlockSize = 32 << 20 }, false},
		{"odd block", func(s *Settings) { s.BlockSize = 3 << 20 }, false},
		{"chunk", func(s *Settings) { s.ChunkSize = 1 << 20 }, false},
		{"inline", func(s *Settings) { s.FormatVersion, s.InlineMax = 2, 16<<10 }, true},
		{"inline max", func(s *Settings) { s.FormatVersion, s.InlineMax = 2, MaxInlineMax }, true},
		{"inline on version 1", func(s *Settings) { s.InlineMax = 16 << 10 }, false},
		{"inline too big", func(s *Settings) { s.FormatVersion, s.InlineMax = 2, MaxInlineMax+1 }, false},
		{"inline negative", func(s *Settings) { s.FormatVersion, s.InlineMax = 2, -1 }, false},
		{"inline not below block", func(s *Settings) { s.FormatVersion, s.InlineMax, s.BlockSize = 2, 64<<10, 64<<10 }, false},
	} {
		s := good
		tc.mod(&s)
		err := s.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v", tc.name, err)
		}
		if err != nil && !errors.Is(err, base.ErrInvalid) {
			t.Errorf("%s: %v not ErrInvalid", tc.name, err)
		}
	}
	wantErr(t, Format(ctx, memkv.New(), Settings{}, false), base.ErrInvalid)
}

func TestOpenRefusesNewerFormat(t *testing.T) {
	store := memkv.New()
	ok(t, Format(ctx, store, Settings{Name: "v"}, false))
	ok(t, store.Update(ctx, func(tx kv.Txn) error {
		s := Settings{Name: "v", FormatVersion: CurrentFormatVersion + 1, BlockSize: DefaultBlockSize, ChunkSize: base.ChunkSize}
		js, _ := json.Marshal(s)
		tx.Set(settingsKey(), js)
		return nil
	}))
	_, err := Open(ctx, store, Options{})
	wantErr(t, err, base.ErrNotSupported)
}

func TestReadOnly(t *testing.T) {
	m, store := newTestMetaStore(t, Options{})
	f := create(t, m, root, base.RootIno, "f")
	ro := must[*Meta](t)(Open(ctx, store, Options{ReadOnly: true}))
	_, _, err := ro.Mknod(ctx, root, base.RootIno, "g", base.TypeFile, 0o644, 0, 0, "")
	wantErr(t, err, base.ErrReadOnly)
	wantErr(t, ro.Unlink(ctx, root, base.RootIno, "f"), base.ErrReadOnly)
	wantErr(t, ro.Rename(ctx, root, base.RootIno, "f", base.RootIno, "g", 0), base.ErrReadOnly)
	_, err = ro.SetAttr(ctx, root, f, SetAttrRequest{Valid: SetMode, Mode: 0o600})
	wantErr(t, err, base.ErrReadOnly)
	wantErr(t, ro.SetXattr(ctx, root, f, "user.a", nil, 0), base.ErrReadOnly)
	_, err = ro.WriteSlice(ctx, f, 0, base.Slice{ID: 1, Size: 1, Len: 1}, 1)
	wantErr(t, err, base.ErrReadOnly)
	_, err = ro.NewSliceID(ctx)
	wantErr(t, err, base.ErrReadOnly)
	_, err = ro.Link(ctx, root, f, base.RootIno, "h")
	wantErr(t, err, base.ErrReadOnly)
	// reads work
	if lookup(t, ro, base.RootIno, "f") != f {
		t.Fatal("lookup")
	}
	must[base.Attr](t)(ro.OpenFile(ctx, f))
	ok(t, ro.CloseFile(ctx, f))
}

func TestIDAllocation(t *testing.T) {
	m, store := newTestMetaStore(t, Options{InodeBatch: 3, SliceBatch: 2})
	m2 := must[*Meta](t)(Open(ctx, store, Options{InodeBatch: 3, SliceBatch: 2}))
	seen := map[uint64]bool{}
	for i := 0; i < 10; i++ {
		for _, mm := range []*Meta{m, m2} {
			id := must[uint64](t)(mm.NewSliceID(ctx))
			if seen[id] || id == 0 {
				t.Fatalf("slice id %d reused", id)
			}
			seen[id] = true
		}
	}
}

// TestBoundBlocks: volumes of format version 3 on bind their blocks to
// their identity; older ones keep the blocks they have.
func TestBoundBlocks(t *testing.T) {
	for v, want := range map[int]bool{1: false, 2: false, 3: true} {
		if got := (Settings{FormatVersion: v}).BoundBlocks(); got != want {
			t.Errorf("format version %d: BoundBlocks %v, want %v", v, got, want)
		}
	}
}
