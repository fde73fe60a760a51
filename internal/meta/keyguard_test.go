package meta

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// keyGuardAllowed lists the hand-made key sites that are allowed outside
// keys.go, as "file:function" (function "" for package level), each with
// the reason. Keep it empty if you can: add a typed helper to keys.go
// instead.
var keyGuardAllowed = map[string]string{}

// keyVarNames are the names that hold keys in this package.
var keyVarNames = map[string]bool{"k": true, "key": true, "logical": true, "prefix": true, "start": true, "end": true, "l": true}

// TestKeysOnlyInKeysGo fails if a non-test file of the package other than
// keys.go builds or parses key bytes by hand (keys.go: "no other file
// builds or parses keys by hand"): slicing a key, binary.BigEndian on a
// key, a []byte literal of a key prefix, or appending to a key returned by
// a *Key or *Prefix function. Key variables are recognized by name (see
// keyVarNames, and selectors ending in Key); reading the prefix byte
// (k[0]) for dispatch is allowed.
func TestKeysOnlyInKeysGo(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	prefixes := keyPrefixConsts(t)
	checked := 0
	for _, f := range files {
		if f == "keys.go" || strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range keyGuardScan(t, f, src, prefixes) {
			if _, ok := keyGuardAllowed[v.where]; !ok {
				t.Errorf("%s: %s: build or parse keys in keys.go (a typed helper), not by hand", v.pos, v.what)
			}
		}
		checked++
	}
	if checked < 10 {
		t.Fatalf("checked %d files; the scan found too few to mean anything", checked)
	}
}

// TestKeyGuardFlags checks that the scan catches each kind of hand-made
// key, so that TestKeysOnlyInKeysGo cannot pass by matching nothing.
func TestKeyGuardFlags(t *testing.T) {
	src := `package meta
func f(k, v []byte, w struct{ Key []byte }) {
	_ = binary.BigEndian.Uint64(k[1:])
	_ = binary.BigEndian.Uint32(k)
	_ = string(k[9 : len(k)-1])
	_ = w.Key[1:9]
	_ = []byte{pHold}
	_ = append(dentryPrefix(1), 'a')
	_ = chunkPrefix(1)[1:]
	_ = binary.BigEndian.Uint64(v) // a value: allowed
	_ = k[0]                       // the prefix byte: allowed
	for _, p := range []byte{pLock, pHold} { // a list of prefixes: allowed
		_ = p
	}
}`
	got := keyGuardScan(t, "x.go", []byte(src), map[string]bool{"pHold": true, "pLock": true})
	if len(got) != 7 {
		t.Errorf("flagged %d sites, want 7: %+v", len(got), got)
	}
}

type keyGuardHit struct{ pos, where, what string }

// keyPrefixConsts returns the names of the key prefix constants declared
// in keys.go.
func keyPrefixConsts(t *testing.T) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "keys.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			for _, n := range s.(*ast.ValueSpec).Names {
				if len(n.Name) > 1 && n.Name[0] == 'p' && n.Name[1] >= 'A' && n.Name[1] <= 'Z' {
					out[n.Name] = true
				}
			}
		}
	}
	if !out["pAttr"] || !out["pDentry"] {
		t.Fatalf("found no key prefixes in keys.go: %v", out)
	}
	return out
}

// isKeyExpr reports whether e denotes key bytes: a variable named like a
// key, a field ending in Key, or a call of a *Key or *Prefix function.
func isKeyExpr(e ast.Expr) bool {
	switch e := ast.Unparen(e).(type) {
	case *ast.Ident:
		return keyVarNames[e.Name]
	case *ast.SelectorExpr:
		return strings.HasSuffix(e.Sel.Name, "Key")
	case *ast.CallExpr:
		if id, ok := e.Fun.(*ast.Ident); ok {
			return strings.HasSuffix(id.Name, "Key") || strings.HasSuffix(id.Name, "Prefix")
		}
	case *ast.SliceExpr:
		return isKeyExpr(e.X)
	}
	return false
}

func keyGuardScan(t *testing.T, name string, src []byte, prefixes map[string]bool) []keyGuardHit {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var hits []keyGuardHit
	for _, d := range f.Decls {
		fn := ""
		if fd, ok := d.(*ast.FuncDecl); ok {
			fn = fd.Name.Name
		}
		prefixLists := map[ast.Expr]bool{}
		ast.Inspect(d, func(n ast.Node) bool {
			hit := func(what string) {
				hits = append(hits, keyGuardHit{fset.Position(n.Pos()).String(), name + ":" + fn, what})
			}
			switch n := n.(type) {
			case *ast.RangeStmt:
				prefixLists[n.X] = true
			case *ast.SliceExpr:
				if isKeyExpr(n.X) {
					hit("slices a key")
					return false
				}
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && len(n.Args) > 0 {
					if x, ok := sel.X.(*ast.SelectorExpr); ok && x.Sel.Name == "BigEndian" && isKeyExpr(n.Args[0]) {
						hit("binary.BigEndian on a key")
						return false
					}
				}
				if id, ok := n.Fun.(*ast.Ident); ok && id.Name == "append" && len(n.Args) > 1 {
					if c, ok := ast.Unparen(n.Args[0]).(*ast.CallExpr); ok && isKeyExpr(c) {
						hit("appends to a key")
					}
				}
			case *ast.CompositeLit:
				if prefixLists[n] {
					return true
				}
				if a, ok := n.Type.(*ast.ArrayType); ok && a.Len == nil {
					if el, ok := a.Elt.(*ast.Ident); ok && el.Name == "byte" {
						for _, e := range n.Elts {
							if id, ok := ast.Unparen(e).(*ast.Ident); ok && (prefixes[id.Name] || id.Name == "p" || id.Name == "prefix") {
								hit("a []byte literal of a key prefix")
								break
							}
						}
					}
				}
			}
			return true
		})
	}
	return hits
}
