package meta

import (
	"go/ast"
	"go/parser"
	"go/token"
	"sort"
	"testing"
)

// The layers of meta (docs/architecture.md): the versioned store (layer 2)
// knows nothing of the accelerators (layer 3) but the hooks it calls.
var (
	storeFiles = []string{"versioned.go", "prefetch.go"}
	accelFiles = []string{"accel.go", "latestcache.go", "listingcache.go", "lease.go", "groupcommit.go", "startahead.go", "speculative.go", "writeback.go", "writeback_txn.go"}
	// storeHooks are the accelerator functions and types the store may
	// name: the state it holds for them (txnAccel), the write hooks and
	// the read hooks of the latest-version cache.
	storeHooks = map[string]bool{
		"txnAccel": true, "writing": true, "keyWritten": true, "prefetchPlains": true, "entryLease": true, "entryLeaseRead": true,
		"cachedGet": true, "cachedLogicals": true, "cachedPlains": true, "prefetchUnlinkCached": true, "singleVersions": true,
	}
)

// TestStoreKnowsNoAccelerator fails if a file of the versioned store names
// a function, type, variable or constant declared in an accelerator's
// file, a method such a file declares on the store's transaction (wtx, op),
// or a field of txnAccel, other than storeHooks.
func TestStoreKnowsNoAccelerator(t *testing.T) {
	fset := token.NewFileSet()
	accel := map[string]string{} // name -> file that declares it
	for _, f := range accelFiles {
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil || storeType(d.Recv) {
					accel[d.Name.Name] = f
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						accel[s.Name.Name] = f
						if st, ok := s.Type.(*ast.StructType); ok && s.Name.Name == "txnAccel" {
							for _, fl := range st.Fields.List {
								for _, n := range fl.Names {
									accel[n.Name] = f
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							accel[n.Name] = f
						}
					}
				}
			}
		}
	}
	if len(accel) < 30 {
		t.Fatalf("found only %d declarations in the accelerators' files: is the list stale?", len(accel))
	}
	for _, f := range storeFiles {
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		ast.Inspect(file, func(n ast.Node) bool {
			id, ok := n.(*ast.Ident)
			if ok && accel[id.Name] != "" && !storeHooks[id.Name] {
				seen[id.Name] = true
			}
			return true
		})
		var names []string
		for n := range seen {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			t.Errorf("%s (the versioned store) names %s, declared by %s (an accelerator): go through a hook (txnAccel)", f, n, accel[n])
		}
	}
}

// storeType reports whether a method's receiver is the store's transaction.
func storeType(recv *ast.FieldList) bool {
	t := recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	id, ok := t.(*ast.Ident)
	return ok && (id.Name == "wtx" || id.Name == "op")
}
