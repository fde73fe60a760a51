package meta

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/kv/pebble"
)

// findBenchEntries is the size of the volume BenchmarkFind walks;
// CAIRN_BENCH_FIND_ENTRIES changes it (a multiple of 1,000).
func findBenchEntries(b *testing.B) int {
	n := 1_000_000
	if s := os.Getenv("CAIRN_BENCH_FIND_ENTRIES"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1000 {
			b.Fatalf("CAIRN_BENCH_FIND_ENTRIES=%q: want a number of entries, at least 1000", s)
		}
		n = v
	}
	return n / 1000 * 1000
}

// fillFindVolume writes dirs directories of perDir empty files each under
// the root of a formatted volume, straight as records in big
// transactions (a create through Mknod costs a transaction each). The
// volume is what creates would make, except the usage counters.
func fillFindVolume(b *testing.B, store kv.Store, dirs, perDir int) {
	b.Helper()
	now := time.Now().UnixNano()
	next := uint64(base.RootIno) + 1
	const batch = 20_000 // records per transaction
	type rec struct{ k, v []byte }
	var recs []rec
	flush := func() {
		if err := store.Update(ctx, func(tx kv.Txn) error {
			for _, r := range recs {
				tx.Set(r.k, r.v)
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		recs = recs[:0]
	}
	put := func(logical, payload []byte) {
		recs = append(recs, rec{versionKey(logical, 1), append([]byte{tagLive}, payload...)})
		if len(recs) >= batch {
			flush()
		}
	}
	for d := range dirs {
		dir := base.Ino(next)
		next++
		put(dentryKey(base.RootIno, fmt.Sprintf("d%04d", d)), encodeDentry(dir, base.TypeDir))
		put(attrKey(dir), encodeAttr(&base.Attr{Type: base.TypeDir, Mode: 0o755, Nlink: 2, Mtime: now, Ctime: now, Parent: base.RootIno}))
		for f := range perDir {
			ino := base.Ino(next)
			next++
			put(dentryKey(dir, fmt.Sprintf("file-%06d", f)), encodeDentry(ino, base.TypeFile))
			put(attrKey(ino), encodeAttr(&base.Attr{Type: base.TypeFile, Mode: 0o644, Nlink: 1, Mtime: now, Ctime: now}))
		}
	}
	rootAttr := encodeAttr(&base.Attr{Type: base.TypeDir, Mode: 0o755, Nlink: uint32(2 + dirs), Mtime: now, Ctime: now, Parent: base.RootIno})
	put(attrKey(base.RootIno), rootAttr)
	recs = append(recs, rec{counterKey(counterNextInode), u64(nil, next)})
	flush()
}

// BenchmarkFind walks a Pebble volume of directories of 1,000 empty files
// (1,000,000 entries unless CAIRN_BENCH_FIND_ENTRIES says otherwise) and
// reports entries visited a second: names only (the type is in the
// directory entry), with every attribute read (-size, -mtime, --json),
// and with a name filter that keeps one entry in 1,000. With
// CAIRN_BENCH_FIND_DIR=DIR (which must not exist) the volume is made
// there and kept, for timing cairn find pebble://DIR.
//
//	go test -run XXX -bench BenchmarkFind -benchtime 3x ./internal/meta
func BenchmarkFind(b *testing.B) {
	n := findBenchEntries(b)
	dir := b.TempDir()
	if d := os.Getenv("CAIRN_BENCH_FIND_DIR"); d != "" {
		dir = d // kept, to time cairn find pebble://DIR on it
	}
	store, err := pebble.Open(dir, pebble.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = store.Close() })
	if err := Format(ctx, store, Settings{Name: "bench"}, false); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	fillFindVolume(b, store, n/1000, 1000)
	b.Logf("made %d entries in %v", n, time.Since(start).Round(time.Millisecond))
	m, err := Open(ctx, store, Options{LatestCacheEntries: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = m.Close() })
	want := int64(n + n/1000 + 1) // files, directories, the root
	for _, c := range []struct {
		name   string
		attrs  bool
		filter func(_ *FindDir, e *FindEntry) bool
		kept   int64
	}{
		{"names", false, nil, want},
		{"attrs", true, nil, want},
		{"filter", false, func(_ *FindDir, e *FindEntry) bool { return strings.HasSuffix(e.Name, "-000999") }, int64(n / 1000)},
	} {
		b.Run(c.name, func(b *testing.B) {
			var seen atomic.Int64
			var elapsed time.Duration
			for b.Loop() {
				seen.Store(0)
				t0 := time.Now()
				err := m.Find(ctx, FindOptions{MaxDepth: -1, Attrs: c.attrs, Filter: c.filter,
					Visit: func(_ *FindDir, ents []FindEntry) error {
						seen.Add(int64(len(ents)))
						return nil
					}})
				elapsed += time.Since(t0)
				if err != nil {
					b.Fatal(err)
				}
				if seen.Load() != c.kept {
					b.Fatalf("visited %d entries, want %d", seen.Load(), c.kept)
				}
			}
			b.ReportMetric(float64(want)*float64(b.N)/elapsed.Seconds(), "entries/s")
		})
	}
}
