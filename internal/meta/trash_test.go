package meta

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv/memkv"
)

// newTrashMeta is newTestMeta with the trash on and a clock the test
// sets.
func newTrashMeta(t *testing.T, at time.Time) (*Meta, *time.Time) {
	t.Helper()
	m := newTestMeta(t)
	if _, err := m.ChangeSettings(ctx, func(s *Settings) error { s.TrashDays = 1; return nil }); err != nil {
		t.Fatal(err)
	}
	clock := at
	m.now = func() int64 { return clock.UnixNano() }
	return m, &clock
}

func trashPaths(t *testing.T, m *Meta) []string {
	t.Helper()
	var out []string
	for _, e := range must[[]TrashEntry](t)(m.ListTrash(ctx)) {
		out = append(out, e.Bucket+" "+e.Path)
	}
	return out
}

// restoreAll restores every entry of the trash, in the order of their
// original paths (directories before what they held).
func restoreAll(t *testing.T, m *Meta) {
	t.Helper()
	ents := must[[]TrashEntry](t)(m.ListTrash(ctx))
	slices.SortStableFunc(ents, func(a, b TrashEntry) int { return len(a.Path) - len(b.Path) })
	for _, e := range ents {
		if _, _, err := m.RestoreTrash(ctx, e.Bucket, e.Name); err != nil {
			t.Fatalf("restore %s/%s: %v", e.Bucket, e.Name, err)
		}
	}
}

func TestTrashRemovedTreeRestores(t *testing.T) {
	at := time.Date(2026, 12, 5, 9, 30, 0, 0, time.UTC)
	m, _ := newTrashMeta(t, at)
	d := mkdir(t, m, root, base.RootIno, "d")
	sub := mkdir(t, m, root, d, "sub")
	f := create(t, m, root, sub, "f")
	ok(t, writeChunk0(m, f, newSlice(t, m, 0, 100)))
	must[base.Attr](t)(m.Link(ctx, root, f, d, "hard"))
	sym, _ := must2(t)(m.Mknod(ctx, root, d, "ln", base.TypeSymlink, 0, 0, 0, "sub/f"))
	before := attr(t, m, f)

	// rm -rf d: children first.
	ok(t, m.Unlink(ctx, root, sub, "f"))
	ok(t, m.Rmdir(ctx, root, d, "sub"))
	ok(t, m.Unlink(ctx, root, d, "hard"))
	ok(t, m.Unlink(ctx, root, d, "ln"))
	ok(t, m.Rmdir(ctx, root, base.RootIno, "d"))
	if got := names(t, m, base.RootIno); len(got) != 0 {
		t.Fatalf("root lists %v; want nothing (the trash is hidden)", got)
	}
	want := []string{"2026-12-05-09 /d", "2026-12-05-09 /d/hard", "2026-12-05-09 /d/ln", "2026-12-05-09 /d/sub", "2026-12-05-09 /d/sub/f"}
	got := trashPaths(t, m)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("trash lists %q; want %q", got, want)
	}
	u := must[TrashUsage](t)(m.TrashUsage(ctx))
	if u.Entries != 5 || u.Inodes != 4 || u.Bytes != 100 || u.Buckets != 1 {
		t.Fatalf("trash usage %+v; want 5 entries, 4 inodes, 100 bytes, 1 bucket", u)
	}
	// Restoring a child before its directory is refused.
	for _, e := range must[[]TrashEntry](t)(m.ListTrash(ctx)) {
		if e.Path == "/d/sub/f" {
			_, _, err := m.RestoreTrash(ctx, e.Bucket, e.Name)
			wantErr(t, err, base.ErrNotFound)
		}
	}
	restoreAll(t, m)
	if got := trashPaths(t, m); len(got) != 0 {
		t.Fatalf("trash still holds %q", got)
	}
	if lookup(t, m, base.RootIno, "d") != d || lookup(t, m, d, "sub") != sub || lookup(t, m, sub, "f") != f ||
		lookup(t, m, d, "hard") != f || lookup(t, m, d, "ln") != sym {
		t.Fatal("restored tree has other inodes")
	}
	after := attr(t, m, f)
	if after.Nlink != 2 || after.Length != 100 || after.Mtime != before.Mtime || after.Mode != before.Mode {
		t.Fatalf("restored file %+v; was %+v", after, before)
	}
	if target := must[string](t)(m.Readlink(ctx, sym)); target != "sub/f" {
		t.Fatalf("symlink target %q", target)
	}
	if a := attr(t, m, d); a.Flags != 0 || a.Nlink != 3 || a.Parent != base.RootIno {
		t.Fatalf("restored directory %+v", a)
	}
}

func TestTrashPurge(t *testing.T) {
	at := time.Date(2026, 12, 5, 9, 30, 0, 0, time.UTC)
	m, clock := newTrashMeta(t, at)
	d := mkdir(t, m, root, base.RootIno, "d")
	f := create(t, m, root, d, "f")
	s := newSlice(t, m, 0, 100)
	ok(t, writeChunk0(m, f, s))
	ok(t, m.Unlink(ctx, root, d, "f"))
	*clock = at.Add(2 * time.Hour)
	g := create(t, m, root, d, "g")
	ok(t, m.Unlink(ctx, root, d, "g"))
	if p := pendingIDs(t, m); len(p) != 0 {
		t.Fatalf("a file in the trash has its slices queued: %v", p)
	}
	// Purge what is older than 10:30: the 09 bucket only.
	st := must[PurgeStats](t)(m.PurgeTrash(ctx, at.Add(time.Hour)))
	if st.Entries != 1 || st.Buckets != 1 {
		t.Fatalf("purge %+v; want 1 entry, 1 bucket", st)
	}
	if _, err := m.GetAttr(ctx, f); !errorsIs(err, base.ErrNotFound) {
		t.Fatalf("purged file: %v", err)
	}
	if p := pendingIDs(t, m); !slices.Equal(p, []uint64{s.ID}) {
		t.Fatalf("pending deletes %v; want the purged file's slice %d", p, s.ID)
	}
	if got := trashPaths(t, m); !slices.Equal(got, []string{"2026-12-05-11 /d/g"}) {
		t.Fatalf("trash %q", got)
	}
	st = must[PurgeStats](t)(m.PurgeTrash(ctx, time.Time{}))
	if st.Entries != 1 || st.Buckets != 0 {
		t.Fatalf("purge all %+v; want 1 entry, the bucket of this hour kept", st)
	}
	if got := trashPaths(t, m); len(got) != 0 {
		t.Fatalf("trash after purging all: %q", got)
	}
	// Two hours on, the empty bucket goes too.
	*clock = at.Add(4 * time.Hour)
	if st := must[PurgeStats](t)(m.PurgeTrash(ctx, time.Time{})); st.Entries != 0 || st.Buckets != 1 {
		t.Fatalf("purge of an old empty bucket %+v", st)
	}
	if _, err := m.GetAttr(ctx, g); !errorsIs(err, base.ErrNotFound) {
		t.Fatalf("purged file: %v", err)
	}
	u := must[Usage](t)(m.Usage(ctx))
	if u.Bytes != 0 {
		t.Fatalf("usage after purge %+v", u)
	}
}

func TestTrashRenameOverwrite(t *testing.T) {
	m, _ := newTrashMeta(t, time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC))
	a := create(t, m, root, base.RootIno, "a")
	b := create(t, m, root, base.RootIno, "b")
	ok(t, m.Rename(ctx, root, base.RootIno, "a", base.RootIno, "b", 0))
	if lookup(t, m, base.RootIno, "b") != a {
		t.Fatal("rename")
	}
	ents := must[[]TrashEntry](t)(m.ListTrash(ctx))
	if len(ents) != 1 || ents[0].Ino != b || ents[0].Path != "/b" {
		t.Fatalf("trash %+v; want the replaced b", ents)
	}
	// Restoring over the new b is refused; after moving it away it works.
	_, _, err := m.RestoreTrash(ctx, ents[0].Bucket, ents[0].Name)
	wantErr(t, err, base.ErrExist)
	ok(t, m.Rename(ctx, root, base.RootIno, "b", base.RootIno, "c", 0))
	restored(t)(m.RestoreTrash(ctx, ents[0].Bucket, ents[0].Name))
	if lookup(t, m, base.RootIno, "b") != b {
		t.Fatal("restore")
	}
}

func TestTrashReadOnly(t *testing.T) {
	m, _ := newTrashMeta(t, time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC))
	d := mkdir(t, m, root, base.RootIno, "d")
	f := create(t, m, root, d, "f")
	create(t, m, root, d, "keep")
	ok(t, m.Unlink(ctx, root, d, "f"))
	tr := lookup(t, m, base.RootIno, TrashName)
	ents := must[[]TrashEntry](t)(m.ListTrash(ctx))
	bucket := lookup(t, m, tr, ents[0].Bucket)
	user := &Caller{Uid: 1000, Gid: 1000}
	if _, err := m.Readdir(ctx, user, tr, "", 0, false); !errorsIs(err, base.ErrAccess) {
		t.Fatalf("a user lists the trash: %v", err)
	}
	for _, tc := range []struct {
		what string
		err  error
	}{
		{"create in trash", func() error { _, _, err := m.Mknod(ctx, root, tr, "x", base.TypeFile, 0o644, 0, 0, ""); return err }()},
		{"create in bucket", func() error {
			_, _, err := m.Mknod(ctx, root, bucket, "x", base.TypeDir, 0o755, 0, 0, "")
			return err
		}()},
		{"mkdir .trash", func() error {
			_, _, err := m.Mknod(ctx, root, base.RootIno, TrashName, base.TypeDir, 0o755, 0, 0, "")
			return err
		}()},
		{"unlink entry", m.Unlink(ctx, root, bucket, ents[0].Name)},
		{"rmdir bucket", m.Rmdir(ctx, root, tr, ents[0].Bucket)},
		{"rmdir trash", m.Rmdir(ctx, root, base.RootIno, TrashName)},
		{"rename out", m.Rename(ctx, root, bucket, ents[0].Name, d, "back", 0)},
		{"rename in", m.Rename(ctx, root, d, "keep", bucket, "x", 0)},
		{"rename trash", m.Rename(ctx, root, base.RootIno, TrashName, base.RootIno, "t", 0)},
		{"rename over trash", m.Rename(ctx, root, base.RootIno, "d", base.RootIno, TrashName, 0)},
		{"link into trash", func() error { _, err := m.Link(ctx, root, f, tr, "x"); return err }()},
		{"chmod bucket", func() error {
			_, err := m.SetAttr(ctx, root, bucket, SetAttrRequest{Valid: SetMode, Mode: 0o777})
			return err
		}()},
		{"setxattr trash", m.SetXattr(ctx, root, tr, "user.x", []byte("v"), 0)},
	} {
		if !errorsIs(tc.err, base.ErrPermission) {
			t.Errorf("%s: %v; want EPERM", tc.what, tc.err)
		}
	}
	// Trash off: removals destroy, what is in the trash stays.
	if _, err := m.ChangeSettings(ctx, func(s *Settings) error { s.TrashDays = 0; return nil }); err != nil {
		t.Fatal(err)
	}
	ok(t, m.Unlink(ctx, root, d, "keep"))
	if n := len(must[[]TrashEntry](t)(m.ListTrash(ctx))); n != 1 {
		t.Fatalf("trash has %d entries; want 1", n)
	}
}

func TestTrashRefusesUsersDirectory(t *testing.T) {
	m := newTestMeta(t)
	// A .trash made before the name was reserved: renamed in place.
	old := mkdir(t, m, root, base.RootIno, "old")
	ok(t, m.mutate(ctx, func(o *op) error {
		if err := o.vdel(dentryKey(base.RootIno, "old")); err != nil {
			return err
		}
		return o.vset(dentryKey(base.RootIno, TrashName), encodeDentry(old, base.TypeDir))
	}))
	_, err := m.ChangeSettings(ctx, func(s *Settings) error { s.TrashDays = 3; return nil })
	wantErr(t, err, base.ErrExist)
	_, err = m.ChangeSettings(ctx, func(s *Settings) error { s.TrashDays = -1; return nil })
	wantErr(t, err, base.ErrInvalid)
}

func TestChangeInlineMax(t *testing.T) {
	m := newTestMeta(t)
	s := must[Settings](t)(m.ChangeSettings(ctx, func(s *Settings) error { s.InlineMax = 4096; return nil }))
	if s.InlineMax != 4096 || m.Settings().InlineMax != 4096 {
		t.Fatalf("inline limit %d", s.InlineMax)
	}
	for _, bad := range []int{-1, MaxInlineMax + 1} {
		_, err := m.ChangeSettings(ctx, func(s *Settings) error { s.InlineMax = bad; return nil })
		wantErr(t, err, base.ErrInvalid)
	}
	// A second client sees it after its refresh (the heartbeat's).
	m2 := must[*Meta](t)(Open(ctx, m.store, Options{}))
	_ = must[Settings](t)(m.ChangeSettings(ctx, func(s *Settings) error { s.InlineMax = 0; return nil }))
	if m2.Settings().InlineMax != 4096 {
		t.Fatal("m2 read the settings again by itself")
	}
	ok(t, m2.refreshSettings(ctx))
	if m2.Settings().InlineMax != 0 {
		t.Fatalf("m2 inline limit %d after refresh", m2.Settings().InlineMax)
	}
}

func TestChangeInlineMaxNeedsFormat2(t *testing.T) {
	store := newStore(t, Settings{Name: "v1", FormatVersion: 1})
	m := must[*Meta](t)(Open(ctx, store, Options{}))
	_, err := m.ChangeSettings(ctx, func(s *Settings) error { s.InlineMax = 4096; return nil })
	wantErr(t, err, base.ErrInvalid)
}

// writeChunk0 commits s at chunk 0 of ino.
func writeChunk0(m *Meta, ino base.Ino, s base.Slice) error {
	_, err := m.WriteSlice(ctx, ino, 0, s, 1)
	return err
}

func must2(t *testing.T) func(ino base.Ino, a base.Attr, err error) (base.Ino, base.Attr) {
	return func(ino base.Ino, a base.Attr, err error) (base.Ino, base.Attr) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return ino, a
	}
}

func restored(t *testing.T) func(ino base.Ino, name string, err error) {
	return func(_ base.Ino, _ string, err error) {
		t.Helper()
		ok(t, err)
	}
}

// TestTrashSnapshotsDumpLoad: with a trash present, a snapshot hides it
// from the root's listing and reaches it by name; a copy restored out of
// the snapshot's trash is an ordinary directory; a dump and load keeps
// the trash (its entries restore after the load) and Check is clean on
// both volumes.
func TestTrashSnapshotsDumpLoad(t *testing.T) {
	m, _ := newTrashMeta(t, time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC))
	d := mkdir(t, m, root, base.RootIno, "d")
	f := create(t, m, root, d, "f")
	ok(t, writeChunk0(m, f, newSlice(t, m, 0, 10)))
	ok(t, m.Unlink(ctx, root, d, "f"))
	ok(t, m.Rmdir(ctx, root, base.RootIno, "d"))
	s := must[Snapshot](t)(m.CreateSnapshot(ctx, "s"))
	v := m.View(s)
	if es := must[[]base.Entry](t)(v.Readdir(ctx, root, base.RootIno, "", 0, false)); len(es) != 0 {
		t.Fatalf("the snapshot's root lists %+v", es)
	}
	tr, _, err := v.Lookup(ctx, root, base.RootIno, TrashName)
	ok(t, err)
	ents := must[[]TrashEntry](t)(m.ListTrash(ctx))
	if len(ents) != 2 {
		t.Fatalf("trash %+v", ents)
	}
	var dirEntry TrashEntry
	for _, e := range ents {
		if e.Type == base.TypeDir {
			dirEntry = e
		}
	}
	src := "/" + TrashName + "/" + dirEntry.Bucket + "/" + dirEntry.Name
	must[RestoreStats](t)(m.Restore(ctx, root, "s", src, "/dcopy", nil))
	dc := lookup(t, m, base.RootIno, "dcopy")
	if a := attr(t, m, dc); a.Flags != 0 {
		t.Fatalf("copy out of the snapshot's trash has flags %#x", a.Flags)
	}
	create(t, m, root, dc, "new") // an ordinary directory
	if _, err := v.Readdir(ctx, root, tr, "", 0, false); err != nil {
		t.Fatalf("the snapshot's trash: %v", err)
	}

	m2 := loadInto(t, memkv.New(), dumpOf(t, m, DumpOptions{}))
	got := must[[]TrashEntry](t)(m2.ListTrash(ctx))
	if len(got) != 2 || got[0].Path != ents[0].Path || got[1].Path != ents[1].Path {
		t.Fatalf("loaded trash %+v; dumped %+v", got, ents)
	}
	restoreAll(t, m2)
	if lookup(t, m2, lookup(t, m2, base.RootIno, "d"), "f") != f {
		t.Fatal("restore after load")
	}
	// The loaded trash is still read-only.
	tr2 := lookup(t, m2, base.RootIno, TrashName)
	_, _, err = m2.Mknod(ctx, root, tr2, "x", base.TypeFile, 0o644, 0, 0, "")
	wantErr(t, err, base.ErrPermission)
}

// TestTrashHiddenFromFind: find from the root leaves the trash out, as a
// listing of the root does; from the trash it walks it.
func TestTrashHiddenFromFind(t *testing.T) {
	m, _ := newTrashMeta(t, time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC))
	create(t, m, root, base.RootIno, "a")
	create(t, m, root, base.RootIno, "z")
	ok(t, m.Unlink(ctx, root, base.RootIno, "z"))
	seen, _ := findAll(t, m, FindOptions{MaxDepth: -1})
	inTrash, _ := findAll(t, m, FindOptions{Path: "/" + TrashName, MaxDepth: -1})
	if len(inTrash) != 3 { // the start, the bucket, the entry
		t.Fatalf("find from the trash: %q", inTrash)
	}
	slices.Sort(seen)
	if !slices.Equal(seen, []string{"", "a"}) {
		t.Fatalf("find from the root: %q", seen)
	}
}

// TestTrashConcurrentRemovals: removals from many goroutines at once (in
// group commits where the profile has them, optimistic transactions on
// Pebble) all reach the trash, the first of them making the trash and the
// bucket, and Check is clean.
func TestTrashConcurrentRemovals(t *testing.T) {
	for _, o := range []Options{{}, {LatestCacheEntries: -1}} {
		m, _ := newTestMetaStore(t, o)
		if _, err := m.ChangeSettings(ctx, func(s *Settings) error { s.TrashDays = 1; return nil }); err != nil {
			t.Fatal(err)
		}
		const n = 64
		dirs := []base.Ino{mkdir(t, m, root, base.RootIno, "a"), mkdir(t, m, root, base.RootIno, "b")}
		for i := range n {
			create(t, m, root, dirs[i%2], fmt.Sprint(i))
		}
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- m.Unlink(ctx, root, dirs[i%2], fmt.Sprint(i))
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			ok(t, err)
		}
		if got := len(must[[]TrashEntry](t)(m.ListTrash(ctx))); got != n {
			t.Fatalf("options %+v: %d entries in the trash, want %d", o, got, n)
		}
	}
}

// TestTrashLongName: a name near the limit makes a longer trash entry,
// which lists, restores, and passes Check.
func TestTrashLongName(t *testing.T) {
	m, _ := newTrashMeta(t, time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC))
	name := strings.Repeat("n", MaxNameLen)
	f := create(t, m, root, base.RootIno, name)
	ok(t, m.Unlink(ctx, root, base.RootIno, name))
	ents := must[[]TrashEntry](t)(m.ListTrash(ctx))
	if len(ents) != 1 || ents[0].Path != "/"+name || len(ents[0].Name) <= MaxNameLen {
		t.Fatalf("trash %+v", ents)
	}
	if probs := must[[]Problem](t)(m.Check(ctx, false)); len(probs) != 0 {
		t.Fatalf("check: %+v", probs)
	}
	restoreAll(t, m)
	if lookup(t, m, base.RootIno, name) != f {
		t.Fatal("restore")
	}
}

// TestTrashSameLinkRemovedTwice: a link removed into the trash, made again
// (from another link of the file) and removed again within the hour finds
// its entry there: the inode keeps one entry, and its link count stays
// right (the cleanup's Check).
func TestTrashSameLinkRemovedTwice(t *testing.T) {
	m, _ := newTrashMeta(t, time.Date(2026, 12, 5, 9, 30, 0, 0, time.UTC))
	d := mkdir(t, m, root, base.RootIno, "d")
	f := create(t, m, root, d, "a")
	must[base.Attr](t)(m.Link(ctx, root, f, d, "b"))
	ok(t, m.Unlink(ctx, root, d, "a"))
	must[base.Attr](t)(m.Link(ctx, root, f, d, "a"))
	ok(t, m.Unlink(ctx, root, d, "a"))
	if a := attr(t, m, f); a.Nlink != 2 {
		t.Fatalf("nlink %d: want 2 (b, and one entry in the trash)", a.Nlink)
	}
	if got := trashPaths(t, m); len(got) != 1 {
		t.Fatalf("trash %q: want one entry", got)
	}
}

// TestSetAttrKernelTimesFlush: the kernel's flush of the times it keeps,
// when they add nothing (same mtime, its own stamp of a recorded change),
// is answered without a transaction; any other change goes through.
func TestSetAttrKernelTimesFlush(t *testing.T) {
	m := newTestMeta(t)
	ino := create(t, m, root, base.RootIno, "f")
	a := attr(t, m, ino)
	kernel := &Caller{KernelChecked: true}
	for _, skew := range []int64{20e6, -5e6} { // later; earlier (the kernel's coarse clock)
		got := must[base.Attr](t)(m.SetAttr(ctx, kernel, ino, SetAttrRequest{Valid: SetMtime | SetCtime, Mtime: a.Mtime, Ctime: a.Ctime + skew}))
		if got.Ctime != a.Ctime || attr(t, m, ino).Ctime != a.Ctime {
			t.Fatalf("a flush that adds nothing (ctime %+d ns) changed ctime: %d, want %d", skew, got.Ctime, a.Ctime)
		}
	}
	got := must[base.Attr](t)(m.SetAttr(ctx, kernel, ino, SetAttrRequest{Valid: SetMtime | SetCtime, Mtime: a.Mtime, Ctime: a.Ctime + 2e9}))
	if got.Ctime != a.Ctime+2e9 {
		t.Fatalf("a ctime two seconds on was not stored: %d", got.Ctime)
	}
	a = attr(t, m, ino)
	got = must[base.Attr](t)(m.SetAttr(ctx, kernel, ino, SetAttrRequest{Valid: SetMtime | SetCtime, Mtime: a.Mtime + 1, Ctime: a.Ctime + 500e6}))
	if got.Mtime != a.Mtime+1 || attr(t, m, ino).Mtime != a.Mtime+1 {
		t.Fatalf("a new mtime was not stored: %+v", got)
	}
	// Not the kernel: the full setattr (an owner check, here root's).
	got = must[base.Attr](t)(m.SetAttr(ctx, root, ino, SetAttrRequest{Valid: SetMtime, Mtime: a.Mtime + 1}))
	if got.Ctime == a.Ctime {
		t.Fatal("a caller's setattr of the same mtime left ctime as it was")
	}
}
