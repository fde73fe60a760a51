package meta

import (
	"context"
	"sort"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// readAllQuotas reads every quota record and shard, by directory.
func readAllQuotas(r kv.Reader) (map[base.Ino]*quotaState, []base.Ino, error) {
	states := map[base.Ino]*quotaState{}
	var order []base.Ino
	var derr error
	err := r.Scan(prefixOnly(pQuota), kv.PrefixEnd(prefixOnly(pQuota)), false, func(k, v []byte) bool {
		dir, shard, err := decodeQuotaKey(k)
		if err != nil {
			derr = err
			return false
		}
		st := states[dir]
		if st == nil {
			st = &quotaState{shards: map[byte]quotaShard{}}
			states[dir] = st
			order = append(order, dir)
		}
		if shard < 0 {
			st.rec, derr = decodeQuotaRecord(dir, v)
			st.found = derr == nil
		} else {
			var s quotaShard
			s, derr = decodeQuotaShard(v)
			st.shards[byte(shard)] = s
		}
		return derr == nil
	})
	if err == nil {
		err = derr
	}
	return states, order, err
}

// checkQuotas verifies the directory quotas against the tree: every inode
// names the quota the tree puts it in (Attr.Quota), every quota record
// names the quota enclosing it, and every quota's usage is what its tree
// holds (orphans included: they count until destroyed). Kinds:
// quota-stamp, quota-up, quota-usage, orphan-quota, quota-unfinished.
func (ck *checker) checkQuotas(r kv.Reader, attrs map[base.Ino]base.Attr, dentries []checkDentry) error {
	states, order, err := readAllQuotas(r)
	if err != nil {
		return err
	}
	setStamp := func(ino, q base.Ino) func(o *op) error {
		return fixAttr(ino, func(a *base.Attr) { a.Quota = q })
	}
	if len(states) == 0 {
		for ino, a := range attrs {
			if a.Quota != 0 {
				ck.report("quota-stamp", ino, setStamp(ino, 0), "inode names the quota of directory %d; the volume has no quota", a.Quota)
			}
		}
		return nil
	}
	for _, dir := range order {
		st := states[dir]
		if !st.found {
			ck.report("orphan-quota", dir, func(o *op) error { return o.dropQuota(dir) }, "quota usage without a quota record")
			delete(states, dir)
			continue
		}
		if a, ok := attrs[dir]; !ok || a.Type != base.TypeDir {
			ck.report("orphan-quota", dir, func(o *op) error { return o.dropQuota(dir) }, "quota on a missing or non-directory inode")
			delete(states, dir)
			continue
		}
		if st.rec.State != quotaActive {
			ck.report("quota-unfinished", dir, nil, "quota is %s: run cairn quota %s on it again to finish", st.rec.State,
				map[string]string{quotaCounting: "set", quotaDeleting: "delete"}[st.rec.State])
		}
	}
	for _, st := range states {
		if st.rec.State != quotaActive {
			return nil // the tree is half stamped: nothing more to check
		}
	}

	// domain: the quota that the tree gives a directory.
	domain := map[base.Ino]base.Ino{}
	var domainOf func(dir base.Ino, depth int) base.Ino
	domainOf = func(dir base.Ino, depth int) base.Ino {
		if q, ok := domain[dir]; ok {
			return q
		}
		var q base.Ino
		switch a, ok := attrs[dir]; {
		case states[dir] != nil:
			q = dir
		case !ok || dir == base.RootIno || depth > 1<<16:
			q = 0
		default:
			q = domainOf(a.Parent, depth+1)
		}
		domain[dir] = q
		return q
	}
	// A file's links in the trash do not say where it counts: one with
	// other links stays counted by its quota there (trashQuota).
	linkParents := map[base.Ino][]base.Ino{}
	trashLinks := map[base.Ino]bool{}
	for _, d := range dentries {
		if d.typ == base.TypeDir {
			continue
		}
		if attrs[d.parent].Flags&base.AttrFlagTrash != 0 {
			trashLinks[d.ino] = true
			continue
		}
		linkParents[d.ino] = append(linkParents[d.ino], d.parent)
	}
	up := map[base.Ino]base.Ino{}
	for dir := range states {
		if dir != base.RootIno {
			up[dir] = domainOf(attrs[dir].Parent, 0)
		}
	}
	counted := map[base.Ino]*[2]int64{}
	for dir := range states {
		counted[dir] = new([2]int64)
	}
	inos := make([]base.Ino, 0, len(attrs))
	for ino := range attrs {
		inos = append(inos, ino)
	}
	sort.Slice(inos, func(i, j int) bool { return inos[i] < inos[j] })
	for _, ino := range inos {
		a := attrs[ino]
		want := a.Quota
		if a.Type == base.TypeDir {
			want = domainOf(ino, 0)
		} else if ps := linkParents[ino]; len(ps) > 0 {
			want = domainOf(ps[0], 0)
			for _, p := range ps {
				if domainOf(p, 0) == a.Quota {
					want = a.Quota // a file linked from two quotas' trees counts in one
				}
			}
		} else if states[want] == nil || (trashLinks[ino] && a.Nlink <= 1) {
			// An orphan counts where it was; a file whose only link is
			// in the trash, where the trash is.
			if trashLinks[ino] && a.Nlink <= 1 {
				want = domainOf(attrs[ino].Parent, 0)
			} else {
				want = 0
			}
		}
		if a.Quota != want {
			ck.report("quota-stamp", ino, setStamp(ino, want), "inode names the quota of directory %d; its tree's is %d", a.Quota, want)
		}
		u := inodeUsage(&a)
		for q, depth := want, 0; q != 0 && depth < maxQuotaDepth; q, depth = up[q], depth+1 {
			c := counted[q]
			c[0] += u[0]
			c[1] += u[1]
		}
	}
	for _, dir := range order {
		st := states[dir]
		if st == nil {
			continue
		}
		if st.rec.Up != up[dir] {
			ck.report("quota-up", dir, fixQuotaUp(dir, up[dir]), "quota enclosed by the quota of directory %d; its tree's is %d", st.rec.Up, up[dir])
		} else {
			for _, sh := range st.shards {
				if sh.up != st.rec.Up {
					ck.report("quota-up", dir, fixQuotaUp(dir, up[dir]), "a usage shard names enclosing quota %d, the record %d", sh.up, st.rec.Up)
					break
				}
			}
		}
		c := *counted[dir]
		if got := [2]int64{st.used(dimBytes), st.used(dimInodes)}; got != c {
			ck.report("quota-usage", dir, setQuotaUsage(dir, c), "quota counts %d bytes and %d inodes; its tree holds %d and %d",
				got[0], got[1], c[0], c[1])
		}
	}
	return nil
}

func fixQuotaUp(dir, up base.Ino) func(o *op) error {
	return func(o *op) error {
		st, ok, err := readQuota(o, dir)
		if err != nil || !ok {
			return err
		}
		st.rec.Up = up
		o.resetGrants(dir, &st)
		return o.putQuotaRecord(dir, &st.rec)
	}
}

// setQuotaUsage makes the usage of the quota on dir u: one shard holds it.
func setQuotaUsage(dir base.Ino, u [2]int64) func(o *op) error {
	return func(o *op) error {
		st, ok, err := readQuota(o, dir)
		if err != nil || !ok {
			return err
		}
		for sh := range st.shards {
			o.Delete(quotaShardKey(dir, sh))
		}
		st.shards = map[byte]quotaShard{o.shard: {used: u}}
		o.resetGrants(dir, &st)
		return nil
	}
}

// CheckQuotas checks the directory quotas alone (cairn quota check): the
// quota each inode names and each quota's usage, counted again from the
// tree in one view. With repair, what is wrong is fixed in one
// transaction (run it on a quiet tree: a change between the count and the
// fix is not seen).
func (m *Meta) CheckQuotas(ctx context.Context, repair bool) ([]Problem, error) {
	return m.check(ctx, repair, func(ck *checker, r kv.Reader) error {
		attrs, dentries, _, err := ck.scanTree(r)
		if err != nil {
			return err
		}
		return ck.checkQuotas(r, attrs, dentries)
	})
}
