// Package deptest checks that Cairn's package dependencies point one way,
// as drawn in DESIGN.md: cmd → daemon → front ends → vfs → {meta, chunk};
// meta → kv; chunk → cache → object.
package deptest

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

const mod = "github.com/cairnfs/cairn/"

// forbidden lists, per package prefix, Cairn packages it must not depend
// on (directly or indirectly).
var forbidden = map[string][]string{
	"internal/base":    {"internal/"},
	"internal/metrics": {"internal/"},
	"internal/kv":      {"internal/meta", "internal/chunk", "internal/object", "internal/vfs", "internal/fuse", "internal/daemon", "internal/cache", "internal/gc"},
	"internal/object":  {"internal/base", "internal/kv", "internal/meta", "internal/chunk", "internal/vfs", "internal/fuse", "internal/daemon", "internal/cache", "internal/gc"},
	"internal/cache":   {"internal/kv", "internal/meta", "internal/chunk", "internal/vfs", "internal/fuse", "internal/daemon", "internal/gc"},
	"internal/meta":    {"internal/chunk", "internal/object", "internal/cache", "internal/vfs", "internal/fuse", "internal/daemon", "internal/kv/pebble", "internal/kv/memkv", "internal/gc"},
	"internal/chunk":   {"internal/meta", "internal/kv", "internal/vfs", "internal/fuse", "internal/daemon", "internal/object/", "internal/gc"},
	"internal/vfs":     {"internal/fuse", "internal/daemon", "internal/kv/", "internal/object/", "internal/gc"},
	"internal/fuse":    {"internal/daemon", "internal/kv/", "internal/object/", "internal/gc"},
	"internal/nfs":     {"internal/fuse", "internal/daemon", "internal/kv/", "internal/object/", "internal/gc"},
	// gc works on meta, chunk and object beside the front ends; only the
	// daemon runs it.
	"internal/gc": {"internal/vfs", "internal/fuse", "internal/nfs", "internal/daemon", "internal/kv/", "internal/object/", "internal/cache"},
	// The wire formats and the test client know nothing of Cairn.
	"internal/nfs/proto":     {"internal/base", "internal/meta", "internal/vfs", "internal/chunk", "internal/kv", "internal/object"},
	"internal/nfs/nfsclient": {"internal/base", "internal/meta", "internal/vfs", "internal/chunk", "internal/kv", "internal/object"},
	// The benchmark is a client: it sees servers from outside only.
	"internal/bench": {"internal/base", "internal/meta", "internal/vfs", "internal/chunk", "internal/kv", "internal/object", "internal/cache", "internal/fuse", "internal/daemon"},
}

type pkg struct {
	ImportPath string
	Deps       []string
}

func TestDependencyDirections(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps=false", "-json", "github.com/cairnfs/cairn/...").Output()
	if err != nil {
		t.Skipf("go list unavailable: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	n := 0
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		n++
		rel := strings.TrimPrefix(p.ImportPath, mod)
		for prefix, bad := range forbidden {
			if rel != prefix && !strings.HasPrefix(rel, prefix+"/") {
				continue
			}
			// kv backends may import kv; object backends object.
			for _, d := range p.Deps {
				if !strings.HasPrefix(d, mod) {
					continue
				}
				drel := strings.TrimPrefix(d, mod)
				for _, b := range bad {
					if drel == strings.TrimSuffix(b, "/") && strings.HasSuffix(b, "/") {
						continue // "x/" forbids sub-packages only
					}
					if drel == b || strings.HasPrefix(drel, strings.TrimSuffix(b, "/")+"/") {
						t.Errorf("%s depends on %s (forbidden for %s)", rel, drel, prefix)
					}
				}
			}
		}
		if strings.HasPrefix(rel, "internal/") && !strings.HasPrefix(rel, "internal/daemon") && !strings.HasPrefix(rel, "internal/fstest") {
			for _, d := range p.Deps {
				if d == mod+"internal/daemon" {
					t.Errorf("%s imports the composition root internal/daemon", rel)
				}
			}
		}
	}
	if n < 5 {
		t.Fatalf("only %d packages listed", n)
	}
}
