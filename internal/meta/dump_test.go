package meta

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/dumpfile"
	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/kv/memkv"
	"github.com/cairnfs/cairn/internal/kv/pebble"
	"github.com/cairnfs/cairn/internal/kv/postgres"
	"github.com/cairnfs/cairn/internal/testenv/pgtest"
)

// richTree fills m with every kind of record a dump carries: directories,
// files with data in the object store and inline, hard links, symlinks,
// a FIFO and a device, xattrs, a slice shared by two files (restored from
// a snapshot), a file open but unlinked, and a snapshot.
func richTree(t *testing.T, m *Meta) {
	c := base.RootCaller
	root := base.RootIno
	slice := func(ino base.Ino, index uint32, size uint32, inline bool) {
		id := must[uint64](t)(m.NewSliceID(ctx))
		w := SliceWrite{Index: index, Slice: base.Slice{ID: id, Size: size, Len: size}}
		if inline {
			w.Slice.ID |= base.InlineBit
			w.BlobKey = fmt.Sprintf("chunks/0/0/%d_0_%d", w.Slice.ID, size)
			w.Blob = bytes.Repeat([]byte{byte(ino)}, int(size))
		}
		if _, err := m.WriteSlices(ctx, ino, []SliceWrite{w}, 123456789); err != nil {
			t.Fatal(err)
		}
	}
	docs := mkdir(t, m, c, root, "docs")
	sub := mkdir(t, m, c, docs, "sub dir")
	for i := range 40 {
		dir := docs
		if i%3 == 0 {
			dir = sub
		}
		ino := create(t, m, c, dir, fmt.Sprintf("f%02d \x01odd", i))
		switch i % 4 {
		case 0:
			slice(ino, 0, 1000+uint32(i), true)
		case 1:
			slice(ino, 0, 100000, false)
			slice(ino, 2, 5000, false)
		case 2:
			ok(t, m.SetXattr(ctx, c, ino, "user.tag", []byte(fmt.Sprint("v", i)), 0))
			ok(t, m.SetXattr(ctx, c, ino, "user.empty", nil, 0))
		}
	}
	f1 := lookup(t, m, docs, "f01 \x01odd")
	must[base.Attr](t)(m.Link(ctx, c, f1, sub, "hard link"))
	must[base.Ino](t)(mkIno(m.Mknod(ctx, c, docs, "link", base.TypeSymlink, 0, 0, 0, "../docs/f01 \x01odd")))
	must[base.Ino](t)(mkIno(m.Mknod(ctx, c, docs, "fifo", base.TypeFIFO, 0o640, 0, 0, "")))
	must[base.Ino](t)(mkIno(m.Mknod(ctx, c, docs, "dev", base.TypeChar, 0o600, 0, 0x0103, "")))
	ok(t, m.SetXattr(ctx, c, docs, "user.dir", []byte("on a directory"), 0))
	must[Snapshot](t)(m.CreateSnapshot(ctx, "before"))
	must[RestoreStats](t)(m.Restore(ctx, c, "before", "/docs/f01 \x01odd", "/restored", nil))
	// Changed after the snapshot: the dump must see the new state.
	ok(t, m.Unlink(ctx, c, docs, "f05 \x01odd"))
	ok(t, m.SetXattr(ctx, c, docs, "user.dir", []byte("changed"), 0))
	// Open and unlinked: not in the namespace, not in a dump.
	gone, _, err := m.Create(ctx, c, root, "open-unlinked", 0o644, 0)
	ok(t, err)
	slice(gone, 0, 4096, false)
	ok(t, m.Unlink(ctx, c, root, "open-unlinked"))
	t.Cleanup(func() { _ = m.CloseFile(ctx, gone) })
}

func mkIno(ino base.Ino, _ base.Attr, err error) (base.Ino, error) { return ino, err }

// fingerprint lists everything a reader of m can see, one line per fact,
// sorted: paths with attributes, symlink targets, xattrs, chunks and the
// inline blocks' bytes.
func fingerprint(t *testing.T, m *Meta) []string { return fingerprintOf(t, m, m) }

// fingerprintOf is fingerprint of what tr reads (blobs read through m).
func fingerprintOf(t *testing.T, m *Meta, tr treeReader) []string {
	var out []string
	var walk func(dir base.Ino, path string)
	walk = func(dir base.Ino, path string) {
		ents, err := tr.Readdir(ctx, base.RootCaller, dir, "", 1<<20, true)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			p := path + "/" + e.Name
			a := must[base.Attr](t)(tr.GetAttr(ctx, e.Ino))
			out = append(out, fmt.Sprintf("%q ino=%d %+v", p, e.Ino, a))
			if a.Type == base.TypeSymlink {
				out = append(out, fmt.Sprintf("%q -> %q", p, must[string](t)(tr.Readlink(ctx, e.Ino))))
			}
			for _, x := range must[[]string](t)(tr.ListXattr(ctx, base.RootCaller, e.Ino)) {
				out = append(out, fmt.Sprintf("%q xattr %s=%q", p, x, must[[]byte](t)(tr.GetXattr(ctx, base.RootCaller, e.Ino, x))))
			}
			for _, ci := range must[[]ChunkInfo](t)(tr.Chunks(ctx, e.Ino)) {
				out = append(out, fmt.Sprintf("%q chunk %d %+v", p, ci.Index, ci.Slices))
				for _, s := range ci.Slices {
					if s.ID&base.InlineBit != 0 {
						blob := must[[]byte](t)(m.GetBlob(ctx, fmt.Sprintf("chunks/0/0/%d_0_%d", s.ID, s.Size)))
						out = append(out, fmt.Sprintf("%q blob %d %x", p, s.ID, blob[:min(len(blob), 8)]))
					}
				}
			}
			if a.Type == base.TypeDir {
				walk(e.Ino, p)
			}
		}
	}
	out = append(out, fmt.Sprintf("root %+v", must[base.Attr](t)(tr.GetAttr(ctx, base.RootIno))))
	walk(base.RootIno, "")
	slices.Sort(out)
	return out
}

func dumpOf(t *testing.T, m *Meta, o DumpOptions) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := m.Dump(ctx, &buf, o); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func loadInto(t *testing.T, store kv.Store, dump []byte) *Meta {
	t.Helper()
	if _, err := Load(ctx, store, bytes.NewReader(dump), LoadOptions{}); err != nil {
		t.Fatal(err)
	}
	m, err := Open(ctx, store, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	checkOnCleanup(t, m)
	return m
}

func pebbleStore(t *testing.T) kv.Store {
	s, err := pebble.Open(t.TempDir(), pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func sameLines(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		for i := 0; i < max(len(got), len(want)); i++ {
			g, w := "", ""
			if i < len(got) {
				g = got[i]
			}
			if i < len(want) {
				w = want[i]
			}
			if g != w {
				t.Fatalf("%s differs at line %d of %d/%d:\n got %s\nwant %s", what, i, len(got), len(want), g, w)
			}
		}
	}
}

// TestDumpLoadRoundTrip: a volume dumped, loaded into Pebble, dumped
// again and loaded into PostgreSQL (and memkv) reads the same everywhere,
// is clean for Check (usage counters, slice owners), and takes writes.
func TestDumpLoadRoundTrip(t *testing.T) {
	src := newTestMeta(t)
	richTree(t, src)
	want := fingerprint(t, src)
	d1 := dumpOf(t, src, DumpOptions{Workers: 3})
	if snaps := must[[]Snapshot](t)(src.Snapshots(ctx)); len(snaps) != 1 || snaps[0].Name != "before" {
		t.Fatalf("the dump's own snapshot was left: %+v", snaps)
	}
	func() { // pages and frames of a few records: every bound crossed
		p, pb, f := dumpPage, dumpPageBytes, dumpFrame
		dumpPage, dumpPageBytes, dumpFrame = 3, 2000, 3000
		defer func() { dumpPage, dumpPageBytes, dumpFrame = p, pb, f }()
		small := loadInto(t, memkv.New(), dumpOf(t, src, DumpOptions{Workers: 5}))
		sameLines(t, "dump in small pages", fingerprint(t, small), want)
	}()
	onPebble := loadInto(t, pebbleStore(t), d1)
	sameLines(t, "pebble after load", fingerprint(t, onPebble), want)
	if s := onPebble.Settings(); s.UUID != src.Settings().UUID || s.Name != "test" {
		t.Fatalf("settings after load: %+v", s)
	}
	d2 := dumpOf(t, onPebble, DumpOptions{})
	second := func(t *testing.T, name string, store kv.Store) {
		m := loadInto(t, store, d2)
		sameLines(t, name+" after a second load", fingerprint(t, m), want)
		// The loaded volume works: new inodes and slices do not collide.
		ino := create(t, m, base.RootCaller, base.RootIno, "new")
		id := must[uint64](t)(m.NewSliceID(ctx))
		if ino <= lookup(t, m, base.RootIno, "restored") || id == 0 {
			t.Fatalf("%s: new inode %d, slice %d", name, ino, id)
		}
		// Removing a file that shares its slice keeps the other's data.
		ok(t, m.Unlink(ctx, base.RootCaller, base.RootIno, "restored"))
	}
	second(t, "memkv", memkv.New())
	t.Run("postgres", func(t *testing.T) {
		s, err := postgres.Open(ctx, pgtest.NewDatabase(t), postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		second(t, "postgres", s)
	})
}

// TestDumpSnapshot: --snapshot dumps what the snapshot froze, not what
// changed after it.
func TestDumpSnapshot(t *testing.T) {
	src := newTestMeta(t)
	c := base.RootCaller
	create(t, src, c, base.RootIno, "kept")
	must[Snapshot](t)(src.CreateSnapshot(ctx, "s1"))
	want := fingerprint(t, src)
	create(t, src, c, base.RootIno, "later")
	ok(t, src.Unlink(ctx, c, base.RootIno, "kept"))
	m := loadInto(t, memkv.New(), dumpOf(t, src, DumpOptions{Snapshot: "s1"}))
	sameLines(t, "snapshot dump", fingerprint(t, m), want)
	var buf bytes.Buffer
	if _, err := src.Dump(ctx, &buf, DumpOptions{Snapshot: "nope"}); !errors.Is(err, base.ErrNotFound) {
		t.Fatalf("dump of a missing snapshot: %v", err)
	}
}

// TestDumpWhileWriting: a dump taken while writers create files one after
// another and move one file back and forth holds the state of one
// instant: a gapless prefix of each writer's files, and the moving file in
// exactly one place.
func TestDumpWhileWriting(t *testing.T) {
	t.Run("pebble", func(t *testing.T) { testDumpWhileWriting(t, pebbleStore(t)) })
	t.Run("postgres", func(t *testing.T) {
		s, err := postgres.Open(ctx, pgtest.NewDatabase(t), postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		testDumpWhileWriting(t, s)
	})
}

func testDumpWhileWriting(t *testing.T, store kv.Store) {
	if err := Format(ctx, store, Settings{Name: "w"}, false); err != nil {
		t.Fatal(err)
	}
	src, err := Open(ctx, store, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	c := base.RootCaller
	a := mkdir(t, src, c, base.RootIno, "a")
	b := mkdir(t, src, c, base.RootIno, "b")
	create(t, src, c, a, "mover")
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range 3 {
		dir := mkdir(t, src, c, base.RootIno, fmt.Sprint("w", w))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				ino, _, err := src.Create(ctx, c, dir, fmt.Sprintf("%06d", i), 0o644, 0)
				if err != nil {
					t.Error(err)
					return
				}
				_ = src.CloseFile(ctx, ino)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			from, to := a, b
			if i%2 == 1 {
				from, to = b, a
			}
			if err := src.Rename(ctx, c, from, "mover", to, "mover", 0); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var dumps [][]byte
	for range 3 {
		dumps = append(dumps, dumpOf(t, src, DumpOptions{Workers: 4}))
	}
	stop.Store(true)
	wg.Wait()
	for i, d := range dumps {
		m := loadInto(t, memkv.New(), d)
		movers := len(names(t, m, lookup(t, m, base.RootIno, "a"))) + len(names(t, m, lookup(t, m, base.RootIno, "b")))
		if movers != 1 {
			t.Fatalf("dump %d: the moving file is in %d places", i, movers)
		}
		for w := range 3 {
			got := names(t, m, lookup(t, m, base.RootIno, fmt.Sprint("w", w)))
			for j, n := range got {
				if n != fmt.Sprintf("%06d", j) {
					t.Fatalf("dump %d: writer %d's files have a gap: %d files, the %dth is %s", i, w, len(got), j, n)
				}
			}
			t.Logf("dump %d: writer %d had %d files", i, w, len(got))
		}
	}
}

// TestLoadRefuses: a load goes only into an empty store; a damaged or cut
// dump leaves a store that Open refuses, saying why, and that a rerun
// with the whole dump finishes; another dump is refused there unless
// forced.
func TestLoadRefuses(t *testing.T) {
	src := newTestMeta(t)
	richTree(t, src)
	dump := dumpOf(t, src, DumpOptions{})
	other := dumpOf(t, src, DumpOptions{}) // another dump id

	formatted := newStore(t, Settings{Name: "busy"})
	if _, err := Load(ctx, formatted, bytes.NewReader(dump), LoadOptions{}); !errors.Is(err, base.ErrExist) || !strings.Contains(err.Error(), `volume "busy"`) {
		t.Fatalf("load over a volume: %v", err)
	}
	if _, err := Load(ctx, memkv.New(), strings.NewReader("hello"), LoadOptions{}); !errors.Is(err, dumpfile.ErrFormat) {
		t.Fatalf("load of a foreign file: %v", err)
	}

	store := pebbleStore(t)
	for _, cut := range []int{len(dump) / 3, len(dump) - 30, len(dump) - 1} {
		_, err := Load(ctx, store, bytes.NewReader(dump[:cut]), LoadOptions{})
		if !errors.Is(err, dumpfile.ErrFormat) || !strings.Contains(err.Error(), "offset") {
			t.Fatalf("load of a dump cut at %d: %v", cut, err)
		}
		_, err = Open(ctx, store, Options{})
		if err == nil || !strings.Contains(err.Error(), "unfinished load") {
			t.Fatalf("open after a cut load: %v", err)
		}
	}
	bad := bytes.Clone(dump)
	bad[len(bad)/2] ^= 1
	if _, err := Load(ctx, store, bytes.NewReader(bad), LoadOptions{}); !errors.Is(err, dumpfile.ErrFormat) {
		t.Fatalf("load of a damaged dump: %v", err)
	}
	if _, err := Load(ctx, store, bytes.NewReader(other), LoadOptions{}); !errors.Is(err, base.ErrExist) || !strings.Contains(err.Error(), "unfinished load of another dump") {
		t.Fatalf("another dump over an unfinished load: %v", err)
	}
	if err := Format(ctx, store, Settings{Name: "x"}, false); err == nil {
		t.Fatal("format without --force over an unfinished load succeeded")
	}
	st, err := Load(ctx, store, bytes.NewReader(dump), LoadOptions{})
	if err != nil || !st.Resumed {
		t.Fatalf("rerun of the load: %+v, %v", st, err)
	}
	m := loadInto(t, memkv.New(), dump)
	sameLines(t, "after a resumed load", fingerprint(t, must[*Meta](t)(Open(ctx, store, Options{}))), fingerprint(t, m))

	// --force over a volume.
	if _, err := Load(ctx, formatted, bytes.NewReader(other), LoadOptions{Force: true, DataURL: "file:///elsewhere"}); err != nil {
		t.Fatal(err)
	}
	if s := must[Settings](t)(LoadSettings(ctx, formatted)); s.DataURL != "file:///elsewhere" || s.Name != "test" {
		t.Fatalf("settings after a forced load with a data URL: %+v", s)
	}
}

// TestDumpProgress: the counters a progress bar reads add up.
func TestDumpProgress(t *testing.T) {
	src := newTestMeta(t)
	richTree(t, src)
	var p DumpProgress
	var buf bytes.Buffer
	st, err := src.Dump(ctx, &buf, DumpOptions{Progress: &p})
	if err != nil {
		t.Fatal(err)
	}
	if p.Inodes.Load() != int64(st.Inodes) || p.Bytes.Load() != int64(buf.Len()) || st.Bytes != int64(buf.Len()) {
		t.Fatalf("progress %d inodes %d bytes, stats %+v, %d bytes written", p.Inodes.Load(), p.Bytes.Load(), st, buf.Len())
	}
	var lp DumpProgress
	ls, err := Load(ctx, memkv.New(), io.MultiReader(&buf), LoadOptions{Progress: &lp})
	if err != nil {
		t.Fatal(err)
	}
	if ls.Inodes != st.Inodes || lp.Inodes.Load() != int64(st.Inodes) {
		t.Fatalf("load: %+v, progress %d; dump %+v", ls, lp.Inodes.Load(), st)
	}
	for k, n := range st.Records {
		if ls.Records[k] != n {
			t.Fatalf("kind %s: dumped %d, loaded %d", k, n, ls.Records[k])
		}
	}
}

// TestSyntheticDump: a synthetic dump loads as a clean volume with the
// files it describes, and dumps again to the same records.
func TestSyntheticDump(t *testing.T) {
	s := Settings{Name: "syn", UUID: "u", FormatVersion: CurrentFormatVersion, BlockSize: DefaultBlockSize,
		ChunkSize: base.ChunkSize, DataURL: "file:///nowhere", InlineMax: 4096}
	for i, size := range []int{0, 700, 700} {
		if i == 2 {
			// Pages and frames of a few records: every bound crossed.
			p, pb, f := dumpPage, dumpPageBytes, dumpFrame
			dumpPage, dumpPageBytes, dumpFrame = 7, 3000, 5000
			defer func() { dumpPage, dumpPageBytes, dumpFrame = p, pb, f }()
		}
		var buf bytes.Buffer
		err := WriteSyntheticDump(&buf, SyntheticVolume{Settings: s, Files: 2345, PerDir: 1000, Size: size,
			Block: func(id uint64, data []byte) (string, []byte) {
				return fmt.Sprintf("chunks/x/%d_0_%d", id, len(data)), append([]byte("obj:"), data...)
			}})
		if err != nil {
			t.Fatal(err)
		}
		m := loadInto(t, memkv.New(), buf.Bytes())
		if got := names(t, m, base.RootIno); len(got) != 3 || got[2] != "d0000002" {
			t.Fatalf("root holds %v", got)
		}
		d2 := lookup(t, m, base.RootIno, "d0000002")
		if got := names(t, m, d2); len(got) != 345 {
			t.Fatalf("the last directory holds %d files", len(got))
		}
		f := lookup(t, m, d2, "f0000344")
		if a := attr(t, m, f); a.Length != uint64(size) || a.Parent != d2 {
			t.Fatalf("file attributes %+v", a)
		}
		u := must[Usage](t)(m.Usage(ctx))
		if u.Inodes != 1+3+2345 {
			t.Fatalf("usage %+v", u)
		}
		st := must[DumpStats](t)(m.Dump(ctx, io.Discard, DumpOptions{}))
		if st.Inodes != 1+3+2345 || size > 0 && (st.Records["B"] != 2345 || st.Records["K"] != 2345) {
			t.Fatalf("dump of the loaded volume: %+v", st)
		}
	}
}

// FuzzLoadRecord: the check Load makes of each record refuses what the
// store could not read, and never panics.
func FuzzLoadRecord(f *testing.F) {
	f.Add([]byte{pAttr, 0, 0, 0, 0, 0, 0, 0, 1}, encodeAttr(&base.Attr{Type: base.TypeDir, Nlink: 2}))
	f.Add(dentryKey(1, "x"), encodeDentry(2, base.TypeFile))
	f.Add(chunkKey(2, 0), encodeSlices([]base.Slice{{ID: 5, Size: 10, Len: 10}}))
	f.Add(xattrKey(2, "user.a"), []byte("v"))
	f.Add(symlinkKey(3), []byte("/t"))
	f.Add(blobKey("chunks/0/0/9_0_1"), []byte("b"))
	f.Add(sharedKey(5), u32(nil, 1))
	f.Fuzz(func(t *testing.T, k, v []byte) {
		if len(k) == 0 {
			return
		}
		l := &loader{}
		var inodes, bytes uint64
		if err := l.check(k, v, &inodes, &bytes); err != nil {
			return
		}
		switch k[0] {
		case pAttr:
			if _, err := decodeAttr(v); err != nil || inodes != 1 {
				t.Fatalf("attribute record %x=%x passed: %v", k, v, err)
			}
		case pChunk:
			if _, err := decodeSlices(v); err != nil {
				t.Fatalf("chunk record %x=%x passed: %v", k, v, err)
			}
		}
	})
}

// TestDumpDropsStaleSnapshots: the snapshot of a dump that was killed (it
// could not delete it) is deleted by the next dump once it is a day old;
// younger ones, and snapshots of other names, stay.
func TestDumpDropsStaleSnapshots(t *testing.T) {
	m := newTestMeta(t)
	start := time.Now()
	m.now = func() int64 { return start.Add(-25 * time.Hour).UnixNano() }
	must[Snapshot](t)(m.CreateSnapshot(ctx, dumpSnapshotPrefix+"killed"))
	must[Snapshot](t)(m.CreateSnapshot(ctx, "dump-of-mine"))
	m.now = func() int64 { return start.Add(-time.Hour).UnixNano() }
	must[Snapshot](t)(m.CreateSnapshot(ctx, dumpSnapshotPrefix+"running"))
	m.now = func() int64 { return start.UnixNano() }
	dumpOf(t, m, DumpOptions{})
	var got []string
	for _, s := range must[[]Snapshot](t)(m.Snapshots(ctx)) {
		got = append(got, s.Name)
	}
	if !slices.Equal(got, []string{"dump-of-mine", dumpSnapshotPrefix + "running"}) {
		t.Fatalf("snapshots after the dump: %v", got)
	}
}

// everything lists what every snapshot of m and its live state show, and
// the diffs between consecutive snapshots.
func everything(t *testing.T, m *Meta) map[string][]string {
	out := map[string][]string{"live": fingerprint(t, m)}
	prev := ""
	for _, s := range must[[]Snapshot](t)(m.Snapshots(ctx)) {
		out["snapshot "+s.Name] = fingerprintOf(t, m, m.View(s))
		if prev != "" {
			var d []string
			ok(t, m.Diff(ctx, prev, s.Name, func(c Change) error { d = append(d, fmt.Sprintf("%+v", c)); return nil }))
			slices.Sort(d)
			out["diff "+prev+" "+s.Name] = d
		}
		prev = s.Name
	}
	return out
}

func sameEverything(t *testing.T, what string, got, want map[string][]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d views, want %d", what, len(got), len(want))
	}
	for k := range want {
		sameLines(t, what+": "+k, got[k], want[k])
	}
}

// TestDumpSnapshots: a dump with --snapshots loads as a volume whose live
// state, every snapshot and the diffs between them read as the source's,
// twice over (dumped again from the loaded volume), and whose snapshots
// can be deleted and restored from after the load.
func TestDumpSnapshots(t *testing.T) {
	src := newTestMeta(t)
	richTree(t, src)
	c := base.RootCaller
	docs := lookup(t, src, base.RootIno, "docs")
	held, _, err := src.Create(ctx, c, base.RootIno, "held open", 0o644, 0)
	ok(t, err)
	must[Snapshot](t)(src.CreateSnapshot(ctx, "s2"))
	// After s2: a file unlinked while open (s2 sees it), a tree moved, an
	// xattr removed, a file grown.
	ok(t, src.Unlink(ctx, c, base.RootIno, "held open"))
	ok(t, src.Rename(ctx, c, docs, "sub dir", base.RootIno, "moved", 0))
	ok(t, src.RemoveXattr(ctx, c, docs, "user.dir"))
	f := lookup(t, src, docs, "f07 \x01odd")
	id := must[uint64](t)(src.NewSliceID(ctx))
	must[bool](t)(src.WriteSlice(ctx, f, 1, base.Slice{ID: id, Size: 777, Len: 777}, 42))
	want := everything(t, src)

	d := dumpOf(t, src, DumpOptions{Snapshots: true, Workers: 3})
	if _, err := src.Dump(ctx, io.Discard, DumpOptions{Snapshots: true, Snapshot: "s2"}); !errors.Is(err, base.ErrInvalid) {
		t.Fatalf("--snapshots with --snapshot: %v", err)
	}
	ok(t, src.CloseFile(ctx, held))
	m1 := loadInto(t, pebbleStore(t), d)
	sameEverything(t, "after a load", everything(t, m1), want)
	func() { // again, in pages and frames of a few records
		p, pb, fr := dumpPage, dumpPageBytes, dumpFrame
		dumpPage, dumpPageBytes, dumpFrame = 2, 1500, 2500
		defer func() { dumpPage, dumpPageBytes, dumpFrame = p, pb, fr }()
		m2 := loadInto(t, memkv.New(), dumpOf(t, m1, DumpOptions{Snapshots: true, Workers: 4}))
		sameEverything(t, "after a second load", everything(t, m2), want)
	}()
	// The loaded snapshots work as snapshots: deleting one prunes (Check
	// at cleanup), restoring from another copies.
	ok(t, m1.DeleteSnapshot(ctx, "before", nil))
	must[RestoreStats](t)(m1.Restore(ctx, c, "s2", "/held open", "/held again", nil))
	ok(t, m1.DeleteSnapshot(ctx, "s2", nil))
	if got := fingerprint(t, m1); len(got) != len(want["live"])+1 {
		t.Fatalf("live view after deleting the snapshots: %d lines, want %d", len(got), len(want["live"])+1)
	}
}

// TestDumpSnapshotsNone: --snapshots of a volume without snapshots (and
// with a file open but unlinked) loads as the same clean volume.
func TestDumpSnapshotsNone(t *testing.T) {
	src := newTestMeta(t)
	c := base.RootCaller
	create(t, src, c, base.RootIno, "kept")
	gone, _, err := src.Create(ctx, c, base.RootIno, "gone", 0o644, 0)
	ok(t, err)
	id := must[uint64](t)(src.NewSliceID(ctx))
	must[bool](t)(src.WriteSlice(ctx, gone, 0, base.Slice{ID: id, Size: 100, Len: 100}, 1))
	ok(t, src.Unlink(ctx, c, base.RootIno, "gone"))
	d := dumpOf(t, src, DumpOptions{Snapshots: true})
	ok(t, src.CloseFile(ctx, gone))
	m := loadInto(t, memkv.New(), d)
	sameEverything(t, "loaded", everything(t, m), everything(t, src))
	must[Snapshot](t)(m.CreateSnapshot(ctx, "after"))
	ok(t, m.Unlink(ctx, c, base.RootIno, "kept"))
}

// TestDumpSnapshotsRefuses: a dump with the snapshots does not start while
// a snapshot deletion prunes, and fails if a snapshot it holds is deleted
// before it ends.
func TestDumpSnapshotsRefuses(t *testing.T) {
	m, store := newTestMetaStore(t, Options{})
	s1 := must[Snapshot](t)(m.CreateSnapshot(ctx, "s1"))
	sd, err := m.beginSnapDump(ctx, s1.Epoch+1)
	ok(t, err)
	if len(sd.snaps) != 1 || !slices.Equal(sd.frozen, []uint64{s1.Epoch, s1.Epoch + 1}) {
		t.Fatalf("snapshots of the dump: %+v", sd)
	}
	ok(t, m.DeleteSnapshot(ctx, "s1", nil))
	if err := m.endSnapDump(ctx, sd); !errors.Is(err, base.ErrStale) || !strings.Contains(err.Error(), `"s1" was deleted`) {
		t.Fatalf("end of a dump whose snapshot was deleted: %v", err)
	}
	ok(t, store.Update(ctx, func(tx kv.Txn) error { tx.Set(snapJobKey(7), []byte("{}")); return nil }))
	if _, err := m.Dump(ctx, io.Discard, DumpOptions{Snapshots: true}); !errors.Is(err, base.ErrBusy) {
		t.Fatalf("dump while a deletion prunes: %v", err)
	}
	ok(t, store.Update(ctx, func(tx kv.Txn) error { tx.Delete(snapJobKey(7)); return nil }))
}

// TestDumpSnapshotsOpenUnlinkedLater: a file open and unlinked, whose
// versions the dump's instant sees above the oldest snapshot (here after
// an earlier dump's snapshot came and went), is loaded as a tombstone
// over only what the snapshots see: no version is left that nothing sees
// (Check found such "leaked versions" before).
func TestDumpSnapshotsOpenUnlinkedLater(t *testing.T) {
	src := newTestMeta(t)
	richTree(t, src)
	dumpOf(t, src, DumpOptions{})
	m := loadInto(t, memkv.New(), dumpOf(t, src, DumpOptions{Snapshots: true}))
	if probs := must[[]Problem](t)(m.Check(ctx, false)); len(probs) > 0 {
		t.Fatalf("loaded volume: %+v", probs)
	}
}
