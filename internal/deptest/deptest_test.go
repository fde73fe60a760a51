// Package deptest checks that Cairn's package dependencies point one way,
// as drawn in DESIGN.md: cmd → daemon → front ends → vfs → {meta, chunk};
// meta → kv; chunk → cache → object. It covers every package of the
// module, cmd included, and fails when go list cannot list them.
package deptest

import (
	"bytes"
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
	// The dump container knows nothing of what its records mean.
	"internal/dumpfile": {"internal/"},
	"internal/kv":       {"internal/meta", "internal/chunk", "internal/object", "internal/vfs", "internal/fuse", "internal/daemon", "internal/cache", "internal/gc"},
	"internal/object":   {"internal/base", "internal/kv", "internal/meta", "internal/chunk", "internal/vfs", "internal/fuse", "internal/daemon", "internal/cache", "internal/gc"},
	"internal/cache":    {"internal/kv", "internal/meta", "internal/chunk", "internal/vfs", "internal/fuse", "internal/daemon", "internal/gc"},
	"internal/meta":     {"internal/chunk", "internal/object", "internal/cache", "internal/vfs", "internal/fuse", "internal/daemon", "internal/kv/pebble", "internal/kv/memkv", "internal/gc"},
	"internal/chunk":    {"internal/meta", "internal/kv", "internal/vfs", "internal/fuse", "internal/daemon", "internal/object/", "internal/gc"},
	"internal/vfs":      {"internal/fuse", "internal/daemon", "internal/kv/", "internal/object/", "internal/gc"},
	"internal/fuse":     {"internal/daemon", "internal/kv/", "internal/object/", "internal/gc"},
	"internal/nfs":      {"internal/fuse", "internal/daemon", "internal/kv/", "internal/object/", "internal/gc"},
	// gc works on meta, chunk and object beside the front ends; only the
	// daemon runs it.
	"internal/gc": {"internal/vfs", "internal/fuse", "internal/nfs", "internal/daemon", "internal/kv/", "internal/object/", "internal/cache"},
	// The wire formats and the test client know nothing of Cairn.
	"internal/nfs/proto":     {"internal/base", "internal/meta", "internal/vfs", "internal/chunk", "internal/kv", "internal/object"},
	"internal/nfs/nfsclient": {"internal/base", "internal/meta", "internal/vfs", "internal/chunk", "internal/kv", "internal/object"},
	"internal/nfs/nfsfuse":   {"internal/base", "internal/meta", "internal/vfs", "internal/chunk", "internal/kv", "internal/object"},
	// The binary carries no test tooling.
	"cmd": {"internal/fstest", "internal/testenv", "internal/nfs/nfsfuse"},
	// The benchmark is a client: it sees servers from outside only.
	"internal/bench": {"internal/base", "internal/meta", "internal/vfs", "internal/chunk", "internal/kv", "internal/object", "internal/cache", "internal/fuse", "internal/daemon"},
}

// forbiddenImports lists, per package prefix, Cairn packages it must not
// import directly; it may still depend on them through the packages it
// imports. The same "x/" rule applies as in forbidden.
var forbiddenImports = map[string][]string{
	// cmd maps flags onto the daemon's options and prints what it returns:
	// it opens no store and runs no semantics of its own.
	"cmd": {"internal/meta", "internal/vfs", "internal/fuse", "internal/gc", "internal/cache", "internal/kv/",
		"internal/object/local", "internal/object/s3", "internal/object/mem", "internal/object/faulty", "internal/object/split"},
	// The front ends translate to vfs; the request vocabulary they share
	// with meta is in base.
	"internal/fuse": {"internal/meta"},
	"internal/nfs":  {"internal/meta"},
}

type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

// listPackages lists every package of the module, cmd included. It fails
// the test when go list cannot: a dependency test that cannot see the
// packages has checked nothing.
func listPackages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps=false", "-json", mod+"...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	seen := map[string]bool{}
	for _, p := range pkgs {
		seen[strings.TrimPrefix(p.ImportPath, mod)] = true
	}
	for _, want := range []string{"cmd/cairn", "internal/daemon", "internal/vfs", "internal/meta", "internal/chunk", "internal/base"} {
		if !seen[want] {
			t.Fatalf("go list did not list %s (%d packages listed)", want, len(pkgs))
		}
	}
	return pkgs
}

// under reports whether rel is prefix or a package below it.
func under(rel, prefix string) bool {
	return rel == prefix || strings.HasPrefix(rel, prefix+"/")
}

// banned reports whether the Cairn package drel is ruled out by b: b
// itself and its sub-packages, or, when b ends in "/", its sub-packages
// only.
func banned(drel, b string) bool {
	if drel == strings.TrimSuffix(b, "/") && strings.HasSuffix(b, "/") {
		return false // "x/" forbids sub-packages only
	}
	return under(drel, strings.TrimSuffix(b, "/"))
}

func TestDependencyDirections(t *testing.T) {
	for _, p := range listPackages(t) {
		rel := strings.TrimPrefix(p.ImportPath, mod)
		for prefix, bad := range forbidden {
			if !under(rel, prefix) {
				continue
			}
			// kv backends may import kv; object backends object.
			for _, d := range p.Deps {
				if !strings.HasPrefix(d, mod) {
					continue
				}
				drel := strings.TrimPrefix(d, mod)
				for _, b := range bad {
					if banned(drel, b) {
						t.Errorf("%s depends on %s (forbidden for %s)", rel, drel, prefix)
					}
				}
			}
		}
		for prefix, bad := range forbiddenImports {
			if !under(rel, prefix) {
				continue
			}
			for _, d := range p.Imports {
				if !strings.HasPrefix(d, mod) {
					continue
				}
				drel := strings.TrimPrefix(d, mod)
				for _, b := range bad {
					if banned(drel, b) {
						t.Errorf("%s imports %s (forbidden for %s)", rel, drel, prefix)
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
}
