package meta

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/kv/memkv"
	"github.com/cairnfs/cairn/internal/kv/pebble"
)

var ctx = context.Background()

// newTestMeta formats a fresh in-memory volume and opens a client on it.
// Cleanup runs Check and fails the test on any problem.
func newTestMeta(t testing.TB) *Meta {
	t.Helper()
	m, _ := newTestMetaStore(t, Options{})
	return m
}

func newTestMetaStore(t testing.TB, opts Options) (*Meta, kv.Store) {
	t.Helper()
	store := testStore(t)
	if err := Format(ctx, store, Settings{Name: "test"}, false); err != nil {
		t.Fatalf("format: %v", err)
	}
	m, err := Open(ctx, store, opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	checkOnCleanup(t, m)
	return m, store
}

func checkOnCleanup(t testing.TB, m *Meta) {
	t.Cleanup(func() {
		probs, err := m.Check(ctx, false)
		if err != nil {
			t.Errorf("check: %v", err)
		}
		for _, p := range probs {
			t.Errorf("check problem: %s ino=%d: %s", p.Kind, p.Ino, p.Detail)
		}
	})
}

func must[T any](t testing.TB) func(v T, err error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func ok(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantErr(t testing.TB, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("got error %v, want %v", err, want)
	}
}

var root = RootCaller

func mkdir(t testing.TB, m *Meta, c *Caller, parent base.Ino, name string) base.Ino {
	t.Helper()
	ino, _, err := m.Mknod(ctx, c, parent, name, base.TypeDir, 0o755, 0, 0, "")
	if err != nil {
		t.Fatalf("mkdir %q: %v", name, err)
	}
	return ino
}

func create(t testing.TB, m *Meta, c *Caller, parent base.Ino, name string) base.Ino {
	t.Helper()
	ino, _, err := m.Mknod(ctx, c, parent, name, base.TypeFile, 0o644, 0, 0, "")
	if err != nil {
		t.Fatalf("create %q: %v", name, err)
	}
	return ino
}

func attr(t testing.TB, m *Meta, ino base.Ino) base.Attr {
	t.Helper()
	a, err := m.GetAttr(ctx, ino)
	if err != nil {
		t.Fatalf("getattr %d: %v", ino, err)
	}
	return a
}

func lookup(t testing.TB, m *Meta, parent base.Ino, name string) base.Ino {
	t.Helper()
	ino, _, err := m.Lookup(ctx, root, parent, name)
	if err != nil {
		t.Fatalf("lookup %q: %v", name, err)
	}
	return ino
}

func names(t testing.TB, m *Meta, dir base.Ino) []string {
	t.Helper()
	es, err := m.Readdir(ctx, root, dir, "", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name)
	}
	return out
}

// testStore is the engine meta's tests run on: memkv (one transaction at
// a time), or with CAIRN_META_TEST_STORE=pebble the embedded engine, whose
// transactions run side by side (optimistic) as in a mount.
func testStore(t testing.TB) kv.Store {
	t.Helper()
	switch e := os.Getenv("CAIRN_META_TEST_STORE"); e {
	case "", "memkv":
		return memkv.New()
	case "pebble":
		s, err := pebble.Open(t.TempDir(), pebble.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	default:
		t.Fatalf("CAIRN_META_TEST_STORE=%s: want memkv or pebble", e)
		return nil
	}
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }

func newStore(t testing.TB, s Settings) kv.Store {
	t.Helper()
	store := testStore(t)
	if err := Format(ctx, store, s, false); err != nil {
		t.Fatal(err)
	}
	return store
}

// holdCount returns how many open-file holds ino has in m's store.
func holdCount(t testing.TB, m *Meta, ino base.Ino) int {
	t.Helper()
	n := 0
	ok(t, m.store.View(ctx, func(r kv.Reader) error {
		return r.Scan(holdPrefix(ino), kv.PrefixEnd(holdPrefix(ino)), false, func(_, _ []byte) bool { n++; return true })
	}))
	return n
}
