package kv_test

import (
	"testing"

	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/kv/counted"
	"github.com/cairnfs/cairn/internal/kv/memkv"
)

// TestProfileOf: a store's declared profile, forwarded by counted; a
// wrapper that declares nothing shows only its own abilities.
func TestProfileOf(t *testing.T) {
	m := memkv.New()
	want := m.Profile()
	if got := kv.ProfileOf(m); got != want {
		t.Errorf("memkv: %+v, want %+v", got, want)
	}
	if got := kv.ProfileOf(counted.New(m)); got != want {
		t.Errorf("counted memkv: %+v, want the wrapped store's %+v", got, want)
	}
	if got := kv.ProfileOf(struct{ kv.Store }{m}); got != (kv.Profile{}) {
		t.Errorf("a wrapper with no abilities: %+v, want none", got)
	}
	if s := want.String(); s != "memkv: single writer; observed commits, touch, notifications" {
		t.Errorf("String() = %q", s)
	}
	if s := (kv.Profile{Engine: "x"}).String(); s != "x: shared" {
		t.Errorf("String() of a bare profile = %q", s)
	}
}
