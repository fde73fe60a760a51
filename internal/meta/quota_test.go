package meta

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/kv/memkv"
)

func setQuota(t testing.TB, m *Meta, dir base.Ino, bytes, inodes uint64) Quota {
	t.Helper()
	q, err := m.SetQuota(ctx, dir, QuotaLimits{Bytes: bytes, Inodes: inodes}, nil)
	if err != nil {
		t.Fatalf("set quota on %d: %v", dir, err)
	}
	return q
}

func quotaUsage(t testing.TB, m *Meta, dir base.Ino) (bytes, inodes uint64) {
	t.Helper()
	q, err := m.GetQuota(ctx, dir)
	if err != nil {
		t.Fatalf("get quota of %d: %v", dir, err)
	}
	return q.UsedBytes, q.UsedInodes
}

func truncate(m *Meta, ino base.Ino, n uint64) error {
	_, err := m.SetAttr(ctx, root, ino, SetAttrRequest{Valid: base.SetSize, Size: n})
	return err
}

func wantUsage(t testing.TB, m *Meta, dir base.Ino, bytes, inodes uint64) {
	t.Helper()
	if b, i := quotaUsage(t, m, dir); b != bytes || i != inodes {
		t.Fatalf("quota of %d counts %d bytes, %d inodes; want %d, %d", dir, b, i, bytes, inodes)
	}
}

// The limits are exact: the last inode and the last byte that fit are
// taken, the next ones are refused with ErrQuota, and freeing makes room.
func TestQuotaLimits(t *testing.T) {
	m := newTestMeta(t)
	d := mkdir(t, m, root, base.RootIno, "d")
	q := setQuota(t, m, d, 64<<10, 4)
	if q.UsedInodes != 1 || q.UsedBytes != 0 || q.State != "" {
		t.Fatalf("new quota %+v: want the directory itself counted, active", q)
	}
	f := create(t, m, root, d, "f")
	create(t, m, root, d, "g")
	sub := mkdir(t, m, root, d, "sub")
	_, _, err := m.Create(ctx, root, sub, "h", 0o644, 0)
	wantErr(t, err, base.ErrQuota)
	_, _, err = m.Mknod(ctx, root, d, "dir2", base.TypeDir, 0o755, 0, 0, "")
	wantErr(t, err, base.ErrQuota)
	// Outside the tree nothing is limited.
	create(t, m, root, base.RootIno, "free")

	ok(t, truncate(m, f, 64<<10))
	wantErr(t, truncate(m, f, 64<<10+1), base.ErrQuota)
	wantUsage(t, m, d, 64<<10, 4)
	ok(t, truncate(m, f, 60<<10))
	g := lookup(t, m, d, "g")
	ok(t, truncate(m, g, 4096))
	wantErr(t, truncate(m, g, 4097), base.ErrQuota)
	ok(t, m.Unlink(ctx, root, d, "f"))
	wantUsage(t, m, d, 4096, 3)
	create(t, m, root, sub, "h")
	wantUsage(t, m, d, 4096, 4)

	// Lifting the inode limit, lowering the byte one below the usage.
	setQuota(t, m, d, 1024, 0)
	create(t, m, root, d, "more")
	wantErr(t, truncate(m, g, 8192), base.ErrQuota)
	ok(t, truncate(m, g, 100)) // shrinking is always allowed
	wantUsage(t, m, d, 4096, 5)
}

// Nested quotas all apply, and each counts its whole tree.
func TestQuotaNested(t *testing.T) {
	m := newTestMeta(t)
	a := mkdir(t, m, root, base.RootIno, "a")
	b := mkdir(t, m, root, a, "b")
	setQuota(t, m, b, 0, 100)
	setQuota(t, m, a, 0, 5) // set over a tree that already has a quota
	if q := must[Quota](t)(m.GetQuota(ctx, b)); q.Up != a {
		t.Fatalf("inner quota enclosed by %d, want %d", q.Up, a)
	}
	wantUsage(t, m, a, 0, 2)
	wantUsage(t, m, b, 0, 1)
	for i := range 3 {
		create(t, m, root, b, fmt.Sprint("f", i))
	}
	wantUsage(t, m, a, 0, 5)
	wantUsage(t, m, b, 0, 4)
	_, _, err := m.Create(ctx, root, b, "x", 0o644, 0)
	wantErr(t, err, base.ErrQuota) // the outer limit
	setQuota(t, m, b, 0, 4)
	setQuota(t, m, a, 0, 0)
	_, _, err = m.Create(ctx, root, b, "x", 0o644, 0)
	wantErr(t, err, base.ErrQuota) // the inner limit

	// Deleting the inner quota hands its tree to the outer one.
	ok(t, m.DeleteQuota(ctx, b, nil))
	_, err = m.GetQuota(ctx, b)
	wantErr(t, err, base.ErrNotFound)
	if got := attr(t, m, lookup(t, m, b, "f0")).Quota; got != a {
		t.Fatalf("after the inner quota's deletion a file names quota %d, want %d", got, a)
	}
	create(t, m, root, b, "x")
	wantUsage(t, m, a, 0, 6)
	ok(t, m.DeleteQuota(ctx, a, nil))
	if got := attr(t, m, lookup(t, m, b, "x")).Quota; got != 0 {
		t.Fatalf("with no quota left a file names quota %d", got)
	}
	if qs := must[[]Quota](t)(m.Quotas(ctx)); len(qs) != 0 {
		t.Fatalf("quotas left: %+v", qs)
	}
}

// Renames between quota trees move the usage (files, trees, directories
// with their own quota) or are refused: past the target's limit with
// ErrQuota, a file linked from elsewhere with EXDEV.
func TestQuotaRename(t *testing.T) {
	m := newTestMeta(t)
	x := mkdir(t, m, root, base.RootIno, "x")
	y := mkdir(t, m, root, base.RootIno, "y")
	setQuota(t, m, x, 0, 0)
	setQuota(t, m, y, 1<<20, 10)
	f := create(t, m, root, x, "f")
	ok(t, truncate(m, f, 5000))
	ok(t, m.Rename(ctx, root, x, "f", y, "f", 0))
	wantUsage(t, m, x, 0, 1)
	wantUsage(t, m, y, 8192, 2)
	if a := attr(t, m, f); a.Quota != y {
		t.Fatalf("moved file names quota %d", a.Quota)
	}

	// A tree.
	t1 := mkdir(t, m, root, x, "tree")
	for i := range 3 {
		ino := create(t, m, root, t1, fmt.Sprint("f", i))
		ok(t, truncate(m, ino, 1))
	}
	inner := mkdir(t, m, root, t1, "inner")
	setQuota(t, m, inner, 0, 0)
	create(t, m, root, inner, "deep")
	wantUsage(t, m, x, 3*4096, 7)
	ok(t, m.Rename(ctx, root, x, "tree", y, "tree", 0))
	wantUsage(t, m, x, 0, 1)
	wantUsage(t, m, y, 8192+3*4096, 8)
	if q := must[Quota](t)(m.GetQuota(ctx, inner)); q.Up != y {
		t.Fatalf("inner quota enclosed by %d after the move, want %d", q.Up, y)
	}
	// A directory with a quota of its own, moved alone.
	ok(t, m.Rename(ctx, root, t1, "inner", x, "inner", 0))
	wantUsage(t, m, x, 0, 3)
	wantUsage(t, m, y, 8192+3*4096, 6)

	// Past the target's limit: nothing moves.
	big := create(t, m, root, x, "big")
	ok(t, truncate(m, big, 2<<20))
	wantErr(t, m.Rename(ctx, root, x, "big", y, "big", 0), base.ErrQuota)
	wantUsage(t, m, x, 2<<20, 4)
	// Hard links stay in one quota.
	_, err := m.Link(ctx, root, big, y, "link")
	wantErr(t, err, base.ErrCrossDevice)
	ok(t, truncate(m, big, 0))
	_, err = m.Link(ctx, root, big, x, "link")
	ok(t, err)
	wantErr(t, m.Rename(ctx, root, x, "link", y, "link", 0), base.ErrCrossDevice)
	// Exchange swaps what each side counts.
	g := create(t, m, root, y, "g")
	ok(t, truncate(m, g, 10000))
	e := mkdir(t, m, root, x, "e")
	ok(t, m.Rename(ctx, root, y, "g", x, "e", RenameExchange))
	wantUsage(t, m, x, 12288, 5)
	wantUsage(t, m, y, 8192+3*4096, 7)
	if attr(t, m, e).Quota != y || attr(t, m, g).Quota != x {
		t.Fatal("exchange left the quotas named wrong")
	}
	// Replacing a target frees what it counted.
	ok(t, m.Rename(ctx, root, y, "f", x, "e", 0))
	wantUsage(t, m, x, 8192, 5)
}

// A rename carrying more than maxQuotaMove inodes between quotas is
// refused with EXDEV (mv copies instead); within one quota it is free.
func TestQuotaRenameLargeTree(t *testing.T) {
	m := newTestMeta(t)
	x := mkdir(t, m, root, base.RootIno, "x")
	setQuota(t, m, x, 0, 0)
	tree := mkdir(t, m, root, base.RootIno, "tree")
	for i := range maxQuotaMove {
		create(t, m, root, tree, fmt.Sprint("f", i))
	}
	wantErr(t, m.Rename(ctx, root, base.RootIno, "tree", x, "tree", 0), base.ErrCrossDevice)
	ok(t, m.Unlink(ctx, root, tree, "f0"))
	ok(t, m.Rename(ctx, root, base.RootIno, "tree", x, "tree", 0))
	wantUsage(t, m, x, 0, 1+maxQuotaMove)
}

// Setting a quota on a populated tree counts it; removing a quota'd
// directory takes its quota with it.
func TestQuotaSetOnTree(t *testing.T) {
	m := newTestMeta(t)
	d := mkdir(t, m, root, base.RootIno, "d")
	sub := mkdir(t, m, root, d, "sub")
	var want uint64
	for i := range 1200 { // more than one page of entries
		ino := create(t, m, root, sub, fmt.Sprint("f", i))
		if i%100 == 0 {
			ok(t, truncate(m, ino, uint64(i)))
			want += uint64(usageBytes(&base.Attr{Type: base.TypeFile, Length: uint64(i)}))
		}
	}
	var progress atomic.Uint64
	q, err := m.SetQuota(ctx, d, QuotaLimits{Inodes: 2000}, func(n uint64) { progress.Store(n) })
	ok(t, err)
	if q.UsedInodes != 1202 || q.UsedBytes != want {
		t.Fatalf("counted %d inodes, %d bytes; want 1202, %d", q.UsedInodes, q.UsedBytes, want)
	}
	if progress.Load() != 1201 {
		t.Fatalf("progress ended at %d, want 1201", progress.Load())
	}
	e := mkdir(t, m, root, d, "e")
	setQuota(t, m, e, 0, 3)
	ok(t, m.Rmdir(ctx, root, d, "e"))
	if qs := must[[]Quota](t)(m.Quotas(ctx)); len(qs) != 1 || qs[0].Dir != d {
		t.Fatalf("quotas after rmdir: %+v", qs)
	}
	wantUsage(t, m, d, want, 1202)
}

// The check finds damaged quota usage and stamps, and repairs them.
func TestQuotaCheckRepair(t *testing.T) {
	m, store := newTestMetaStore(t, Options{})
	d := mkdir(t, m, root, base.RootIno, "d")
	setQuota(t, m, d, 0, 10)
	f := create(t, m, root, d, "f")
	ok(t, truncate(m, f, 1000))
	// Damage: the usage and one inode's stamp.
	ok(t, store.Update(ctx, func(tx kv.Txn) error {
		tx.Set(quotaShardKey(d, 77), encodeQuotaShard(&quotaShard{used: [2]int64{5, 5}}))
		return nil
	}))
	ok(t, m.mutate(ctx, func(o *op) error {
		a, err := o.attr(f)
		if err != nil {
			return err
		}
		a.Quota = 0
		o.put(f, a)
		return nil
	}))
	probs := must[[]Problem](t)(m.CheckQuotas(ctx, true))
	kinds := map[string]int{}
	for _, p := range probs {
		kinds[p.Kind]++
	}
	if kinds["quota-stamp"] != 1 || kinds["quota-usage"] != 1 || len(probs) != 2 {
		t.Fatalf("problems %+v", probs)
	}
	if probs := must[[]Problem](t)(m.CheckQuotas(ctx, false)); len(probs) != 0 {
		t.Fatalf("after repair: %+v", probs)
	}
	wantUsage(t, m, d, 4096, 2)
}

// StatFSDir shows the nearest quota's limits in its tree.
func TestQuotaStatFS(t *testing.T) {
	m := newTestMeta(t)
	d := mkdir(t, m, root, base.RootIno, "d")
	e := mkdir(t, m, root, d, "e")
	setQuota(t, m, d, 1<<20, 0)
	setQuota(t, m, e, 0, 10)
	f := create(t, m, root, e, "f")
	ok(t, truncate(m, f, 8192))
	st := must[StatFS](t)(m.StatFSDir(ctx, e))
	if st.TotalBytes != 1<<20 || st.UsedBytes != 8192 || st.AvailBytes != 1<<20-8192 || st.Files != 2 || st.AvailFiles != 8 {
		t.Fatalf("statfs in the inner tree: %+v", st)
	}
	st = must[StatFS](t)(m.StatFSDir(ctx, base.RootIno))
	if st.TotalBytes != VirtualCapacity {
		t.Fatalf("statfs at the root: %+v", st)
	}
}

// Two clients racing creates and writes into one quota on a real
// PostgreSQL (snapshot isolation) take exactly the limit, not one more.
func TestSharedQuotaRace(t *testing.T) {
	ms := pgClients(t, 2)
	d := mkdir(t, ms[0], root, base.RootIno, "d")
	const inodes, bytes = 41, 30 * 4096
	setQuota(t, ms[1], d, bytes, inodes)
	var made, grown, refused atomic.Int64
	var wg sync.WaitGroup
	for i, m := range ms {
		for j := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := range 30 {
					ino, _, err := m.Create(ctx, root, d, fmt.Sprintf("c%d-%d-%d", i, j, k), 0o644, 0)
					if errorsIs(err, base.ErrQuota) {
						refused.Add(1)
						continue
					}
					if err != nil {
						t.Error(err)
						return
					}
					made.Add(1)
					switch err := truncate(m, ino, 4096); {
					case err == nil:
						grown.Add(1)
					case !errorsIs(err, base.ErrQuota):
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	if made.Load() != inodes-1 || refused.Load() != 120-(inodes-1) || grown.Load() != 30 {
		t.Fatalf("made %d, grown %d, refused %d: want exactly %d, 30, %d", made.Load(), grown.Load(), refused.Load(), inodes-1, 120-(inodes-1))
	}
	wantUsage(t, ms[0], d, bytes, inodes)
	for _, m := range ms {
		ok(t, m.CloseSession(ctx))
	}
}

// A dump carries the quotas; the load counts their usage again from the
// tree, with and without the snapshots.
func TestQuotaDumpLoad(t *testing.T) {
	src := newTestMeta(t)
	richTree(t, src)
	a := mkdir(t, src, root, base.RootIno, "qa")
	b := mkdir(t, src, root, a, "qb")
	setQuota(t, src, a, 1<<30, 100)
	setQuota(t, src, b, 0, 50)
	for i := range 5 {
		ok(t, truncate(src, create(t, src, root, b, fmt.Sprint("f", i)), uint64(i)*3000))
	}
	want := fingerprint(t, src)
	wantQ := must[[]Quota](t)(src.Quotas(ctx))
	for _, snaps := range []bool{false, true} {
		m := loadInto(t, memkv.New(), dumpOf(t, src, DumpOptions{Snapshots: snaps}))
		sameLines(t, fmt.Sprintf("tree after load (snapshots %v)", snaps), fingerprint(t, m), want)
		got := must[[]Quota](t)(m.Quotas(ctx))
		if fmt.Sprint(got) != fmt.Sprint(wantQ) {
			t.Fatalf("quotas after load (snapshots %v):\n got %+v\nwant %+v", snaps, got, wantQ)
		}
		_, _, err := m.Create(ctx, root, b, "more", 0o644, 0)
		ok(t, err)
		wantUsage(t, m, b, wantQ[1].UsedBytes, wantQ[1].UsedInodes+1)
	}
}

// With the trash on, what is removed from a quota's tree leaves its quota
// (the trash holds it), a restore takes it back within the limits, a file
// with another link stays counted where it is, a trashed quota directory
// keeps its quota, and a purge frees what the trash held. The check stays
// clean all along (newTestMeta's cleanup), also with a quota on the root.
func TestQuotaTrash(t *testing.T) {
	for _, rootQuota := range []bool{false, true} {
		t.Run(fmt.Sprint("root-quota-", rootQuota), func(t *testing.T) {
			m, _ := newTrashMeta(t, time.Date(2026, 12, 5, 9, 30, 0, 0, time.UTC))
			if rootQuota {
				setQuota(t, m, base.RootIno, 0, 0)
			}
			d := mkdir(t, m, root, base.RootIno, "d")
			setQuota(t, m, d, 3*4096, 10)
			f := create(t, m, root, d, "f")
			ok(t, truncate(m, f, 3*4096))
			g := create(t, m, root, d, "g")
			_, err := m.Link(ctx, root, g, d, "g2")
			ok(t, err)
			wantUsage(t, m, d, 3*4096, 3)
			ok(t, m.Unlink(ctx, root, d, "f"))
			wantUsage(t, m, d, 0, 2) // f went to the trash
			ok(t, m.Unlink(ctx, root, d, "g2"))
			wantUsage(t, m, d, 0, 2) // g has another link: still counted here
			if probs := must[[]Problem](t)(m.CheckQuotas(ctx, false)); len(probs) > 0 {
				t.Fatalf("check with files in the trash: %+v", probs)
			}
			// Restoring f into a full quota fails and leaves it there.
			h := create(t, m, root, d, "h")
			ok(t, truncate(m, h, 4096))
			ents := must[[]TrashEntry](t)(m.ListTrash(ctx))
			var fe TrashEntry
			for _, e := range ents {
				if e.Ino == f {
					fe = e
				}
			}
			_, _, err = m.RestoreTrash(ctx, fe.Bucket, fe.Name)
			wantErr(t, err, base.ErrQuota)
			ok(t, m.Unlink(ctx, root, d, "h"))
			_, _, err = m.RestoreTrash(ctx, fe.Bucket, fe.Name)
			ok(t, err)
			wantUsage(t, m, d, 3*4096, 3)
			// A directory with its own quota, removed and purged.
			e := mkdir(t, m, root, d, "e")
			setQuota(t, m, e, 0, 5)
			ok(t, m.Rmdir(ctx, root, d, "e"))
			wantUsage(t, m, d, 3*4096, 3)
			if _, err := m.GetQuota(ctx, e); err != nil {
				t.Fatalf("a trashed directory's quota: %v", err)
			}
			must[PurgeStats](t)(m.PurgeTrash(ctx, time.Time{}))
			if _, err := m.GetQuota(ctx, e); !errorsIs(err, base.ErrNotFound) {
				t.Fatalf("a purged directory's quota: %v", err)
			}
			if rootQuota {
				u := must[Usage](t)(m.Usage(ctx))
				if b, i := quotaUsage(t, m, base.RootIno); b != u.Bytes || i != u.Inodes {
					t.Fatalf("the root's quota counts %d bytes, %d inodes; the volume %d, %d", b, i, u.Bytes, u.Inodes)
				}
			}
		})
	}
}
