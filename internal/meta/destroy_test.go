package meta

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/kv/memkv"
)

// TestDestroy: a live client stops a destroy; a stale session does not;
// once begun, the store opens as no volume, saying a destroy runs, and a
// second BeginDestroy resumes it; FinishDestroy leaves no key.
func TestDestroy(t *testing.T) {
	store := newStore(t, Settings{Name: "doomed"})
	m, err := Open(ctx, store, Options{})
	if err != nil {
		t.Fatal(err)
	}
	sid := must[uint64](t)(m.NewSession(ctx, SessionInfo{Host: "h1", Pid: 7, MountPoint: "/mnt/a", Timeout: 300 * time.Millisecond}))
	if _, err := BeginDestroy(ctx, store, time.Minute); !errors.Is(err, base.ErrBusy) || !strings.Contains(err.Error(), "h1 pid 7 at /mnt/a") {
		t.Fatalf("destroy while mounted: %v", err)
	}
	// The client dies without closing its session: past its timeout it is
	// stale and no longer stops the destroy.
	time.Sleep(400 * time.Millisecond)
	tgt, err := BeginDestroy(ctx, store, time.Minute)
	if err != nil || len(tgt.Stale) != 1 || tgt.Stale[0].ID != sid || !tgt.Data || tgt.Settings.Name != "doomed" || tgt.Resumed {
		t.Fatalf("destroy past a stale session: %+v, %v", tgt, err)
	}
	_ = m.Close()
	if _, err := Open(ctx, store, Options{}); err == nil || !strings.Contains(err.Error(), "being destroyed") {
		t.Fatalf("open during a destroy: %v", err)
	}
	if _, err := Load(ctx, store, bytes.NewReader(nil), LoadOptions{}); err == nil {
		t.Fatal("load into a store being destroyed succeeded")
	}
	again, err := BeginDestroy(ctx, store, time.Minute)
	if err != nil || !again.Resumed || again.Settings.UUID != tgt.Settings.UUID {
		t.Fatalf("second BeginDestroy: %+v, %v", again, err)
	}
	ok(t, FinishDestroy(ctx, store))
	n := 0
	ok(t, store.View(ctx, func(r kv.Reader) error {
		return r.Scan(nil, nil, false, func(_, _ []byte) bool { n++; return true })
	}))
	if n != 0 {
		t.Fatalf("%d keys left", n)
	}
	if _, err := BeginDestroy(ctx, store, time.Minute); !errors.Is(err, base.ErrNotFound) {
		t.Fatalf("destroy of an empty store: %v", err)
	}
	wantErr(t, FinishDestroy(ctx, newStore(t, Settings{Name: "alive"})), base.ErrInvalid)
}

// TestDestroyUnfinishedLoad: a store holding an unfinished load is
// destroyed without its data store, which is the dumped volume's.
func TestDestroyUnfinishedLoad(t *testing.T) {
	src := newTestMeta(t)
	richTree(t, src)
	dump := dumpOf(t, src, DumpOptions{})
	store := memkv.New()
	if _, err := Load(ctx, store, bytes.NewReader(dump[:len(dump)/2]), LoadOptions{}); err == nil {
		t.Fatal("a cut load succeeded")
	}
	tgt, err := BeginDestroy(ctx, store, time.Minute)
	if err != nil || tgt.Data || tgt.Settings.Name != "test" {
		t.Fatalf("destroy of an unfinished load: %+v, %v", tgt, err)
	}
}
