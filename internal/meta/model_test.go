package meta

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/cairnfs/cairn/internal/base"
)

// model is the simplest possible namespace: directories map names to
// inodes; the Meta under test must agree with it after every operation.
type model struct {
	dirs   map[base.Ino]map[string]base.Ino
	parent map[base.Ino]base.Ino // directories only
	links  map[base.Ino]int      // non-directories
}

func (md *model) isDir(ino base.Ino) bool { _, ok := md.dirs[ino]; return ok }

func (md *model) ancestorOrSelf(a, b base.Ino) bool { // a is b or an ancestor of b
	for cur := b; ; cur = md.parent[cur] {
		if cur == a {
			return true
		}
		if cur == base.RootIno {
			return false
		}
	}
}

// predict returns the error the model expects for op (nil for success) and
// applies it on success.
func (md *model) rename(sp base.Ino, sn string, dp base.Ino, dn string, flags uint32) error {
	s, ok := md.dirs[sp][sn]
	if !ok {
		return base.ErrNotFound
	}
	d, dexists := md.dirs[dp][dn]
	if flags&RenameExchange != 0 && !dexists {
		return base.ErrNotFound
	}
	if flags&RenameNoReplace != 0 && dexists {
		return base.ErrExist
	}
	if dexists && d == s {
		return nil
	}
	if md.isDir(s) && sp != dp && md.ancestorOrSelf(s, dp) {
		return base.ErrInvalid
	}
	if flags&RenameExchange != 0 {
		if md.isDir(d) && sp != dp && md.ancestorOrSelf(d, sp) {
			return base.ErrInvalid
		}
		md.dirs[sp][sn], md.dirs[dp][dn] = d, s
		if md.isDir(s) {
			md.parent[s] = dp
		}
		if md.isDir(d) {
			md.parent[d] = sp
		}
		return nil
	}
	if dexists {
		switch {
		case md.isDir(s) && !md.isDir(d):
			return base.ErrNotDir
		case !md.isDir(s) && md.isDir(d):
			return base.ErrIsDir
		case md.isDir(d) && len(md.dirs[d]) > 0:
			return base.ErrNotEmpty
		}
		md.drop(d)
	}
	delete(md.dirs[sp], sn)
	md.dirs[dp][dn] = s
	if md.isDir(s) {
		md.parent[s] = dp
	}
	return nil
}

func (md *model) drop(ino base.Ino) {
	if md.isDir(ino) {
		delete(md.dirs, ino)
		delete(md.parent, ino)
		return
	}
	if md.links[ino]--; md.links[ino] == 0 {
		delete(md.links, ino)
	}
}

func (md *model) allDirs() []base.Ino {
	var out []base.Ino
	for d := range md.dirs {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func TestModelRandom(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runModel(t, seed, 400) })
	}
}

func runModel(t *testing.T, seed uint64, steps int) {
	m := newTestMeta(t)
	rng := rand.New(rand.NewPCG(seed, seed))
	md := &model{dirs: map[base.Ino]map[string]base.Ino{base.RootIno: {}},
		parent: map[base.Ino]base.Ino{base.RootIno: base.RootIno}, links: map[base.Ino]int{}}
	names := []string{"a", "b", "c", "d"}
	pickDir := func() base.Ino { ds := md.allDirs(); return ds[rng.IntN(len(ds))] }
	pickName := func() string { return names[rng.IntN(len(names))] }
	check := func(step int, what string, got, want error) {
		t.Helper()
		if (got == nil) != (want == nil) || (want != nil && !errors.Is(got, want)) {
			t.Fatalf("step %d %s: got %v, want %v", step, what, got, want)
		}
	}
	for step := 0; step < steps; step++ {
		p, n := pickDir(), pickName()
		existing, exists := md.dirs[p][n]
		switch op := rng.IntN(6); op {
		case 0, 1: // create file or dir
			typ := base.TypeFile
			if op == 1 {
				typ = base.TypeDir
			}
			ino, _, err := m.Mknod(ctx, root, p, n, typ, 0o755, 0, 0, "")
			var want error
			if exists {
				want = base.ErrExist
			}
			check(step, "mknod "+n, err, want)
			if err == nil {
				md.dirs[p][n] = ino
				if typ == base.TypeDir {
					md.dirs[ino], md.parent[ino] = map[string]base.Ino{}, p
				} else {
					md.links[ino] = 1
				}
			}
		case 2: // unlink or rmdir
			var want error
			if !exists {
				want = base.ErrNotFound
			}
			if exists && md.isDir(existing) {
				if len(md.dirs[existing]) > 0 {
					want = base.ErrNotEmpty
				}
				check(step, "rmdir "+n, m.Rmdir(ctx, root, p, n), want)
			} else {
				check(step, "unlink "+n, m.Unlink(ctx, root, p, n), want)
			}
			if want == nil {
				delete(md.dirs[p], n)
				md.drop(existing)
			}
		case 3: // link
			var src base.Ino
			for ino := range md.links {
				if src == 0 || ino < src {
					src = ino
				}
			}
			if src == 0 {
				continue
			}
			_, err := m.Link(ctx, root, src, p, n)
			var want error
			if exists {
				want = base.ErrExist
			}
			check(step, "link "+n, err, want)
			if err == nil {
				md.dirs[p][n] = src
				md.links[src]++
			}
		default: // rename
			dp, dn := pickDir(), pickName()
			flags := []uint32{0, 0, RenameNoReplace, RenameExchange}[rng.IntN(4)]
			want := md.rename(p, n, dp, dn, flags)
			check(step, fmt.Sprintf("rename %d/%s %d/%s %d", p, n, dp, dn, flags),
				m.Rename(ctx, root, p, n, dp, dn, flags), want)
		}
		if step%50 == 49 {
			compareModel(t, m, md)
		}
	}
	compareModel(t, m, md)
}

func compareModel(t *testing.T, m *Meta, md *model) {
	t.Helper()
	for _, d := range md.allDirs() {
		es, err := m.Readdir(ctx, root, d, "", 0, true)
		ok(t, err)
		if len(es) != len(md.dirs[d]) {
			t.Fatalf("dir %d: %d entries, model %d", d, len(es), len(md.dirs[d]))
		}
		for _, e := range es {
			if md.dirs[d][e.Name] != e.Ino {
				t.Fatalf("dir %d entry %q: ino %d, model %d", d, e.Name, e.Ino, md.dirs[d][e.Name])
			}
			if md.isDir(e.Ino) && e.Attr.Parent != d {
				t.Fatalf("dir %d parent %d, model %d", e.Ino, e.Attr.Parent, d)
			}
			if !md.isDir(e.Ino) && int(e.Attr.Nlink) != md.links[e.Ino] {
				t.Fatalf("inode %d nlink %d, model %d", e.Ino, e.Attr.Nlink, md.links[e.Ino])
			}
		}
	}
	probs, err := m.Check(ctx, false)
	ok(t, err)
	if len(probs) > 0 {
		t.Fatalf("check: %+v", probs)
	}
}
