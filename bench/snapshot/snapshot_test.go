// Package snapshot benchmarks snapshot metadata operations on the
// embedded engine (Pebble) at volume sizes of 1,000 to 1,000,000 files:
// creation time (issue 5's target: under 10 ms median at every size),
// diff of 1% changed files, and deletion after those changes.
//
//	go test -run - -bench . -benchtime 20x ./bench/snapshot
//	CAIRN_SNAP_SIZES=1000,100000,1000000 CAIRN_SNAP_DIR=/var/tmp/snapbench go test -run - -bench . -benchtime 20x -timeout 2h ./bench/snapshot
//
// Volumes are built once per size under CAIRN_SNAP_DIR (default: a
// directory under the system temp dir) and reused by later runs.
package snapshot

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv/pebble"
	"github.com/cairnfs/cairn/internal/meta"
)

var ctx = context.Background()

const filesPerDir = 1000

func sizes(b *testing.B) []int {
	s := os.Getenv("CAIRN_SNAP_SIZES")
	if s == "" {
		s = "1000,100000"
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < filesPerDir {
			b.Fatalf("CAIRN_SNAP_SIZES: bad size %q (at least %d)", f, filesPerDir)
		}
		out = append(out, n)
	}
	return out
}

type volume struct {
	store *pebble.Store
	m     *meta.Meta
	files []base.Ino
}

var (
	volMu sync.Mutex
	vols  = map[int]*volume{}
)

// openVolume opens (building it on first use) a volume of n empty files
// in directories of 1,000.
func openVolume(b *testing.B, n int) *volume {
	volMu.Lock()
	defer volMu.Unlock()
	if v, ok := vols[n]; ok {
		return v
	}
	dir := os.Getenv("CAIRN_SNAP_DIR")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "cairn-snapbench")
	}
	path := filepath.Join(dir, fmt.Sprint(n))
	fresh := false
	if _, err := os.Stat(filepath.Join(path, "complete")); err != nil {
		_ = os.RemoveAll(path)
		fresh = true
	}
	store, err := pebble.Open(filepath.Join(path, "meta"), pebble.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if fresh {
		if err := meta.Format(ctx, store, meta.Settings{Name: "bench", DataURL: "mem://"}, false); err != nil {
			b.Fatal(err)
		}
	}
	m, err := meta.Open(ctx, store, meta.Options{})
	if err != nil {
		b.Fatal(err)
	}
	v := &volume{store: store, m: m}
	if fresh {
		start := time.Now()
		if err := v.populate(n); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(path, "complete"), nil, 0o644); err != nil {
			b.Fatal(err)
		}
		b.Logf("built a volume of %d files in %v", n, time.Since(start).Round(time.Second))
	}
	if err := v.load(); err != nil {
		b.Fatal(err)
	}
	vols[n] = v
	return v
}

func (v *volume) populate(n int) error {
	dirs := n / filesPerDir
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := w; d < dirs; d += 4 {
				dino, _, err := v.m.Mknod(ctx, meta.RootCaller, base.RootIno, fmt.Sprintf("d%05d", d), base.TypeDir, 0o755, 0, 0, "")
				if err != nil {
					errs <- err
					return
				}
				for f := 0; f < filesPerDir; f++ {
					if _, _, err := v.m.Create(ctx, meta.RootCaller, dino, fmt.Sprintf("f%04d", f), 0o644, 0); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// load lists the files of the volume (for picking the ones to change).
func (v *volume) load() error {
	ds, err := v.m.Readdir(ctx, meta.RootCaller, base.RootIno, "", 0, false)
	if err != nil {
		return err
	}
	for _, d := range ds {
		if d.Type != base.TypeDir {
			continue
		}
		fs, err := v.m.Readdir(ctx, meta.RootCaller, d.Ino, "", 0, false)
		if err != nil {
			return err
		}
		for _, f := range fs {
			v.files = append(v.files, f.Ino)
		}
	}
	return nil
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkSnapshotCreate times snapshot creation; between two creations
// one file changes, so every snapshot has an epoch of its own to freeze.
func BenchmarkSnapshotCreate(b *testing.B) {
	for _, n := range sizes(b) {
		b.Run(fmt.Sprintf("files=%d", n), func(b *testing.B) {
			v := openVolume(b, n)
			var times []time.Duration
			var names []string
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				name := fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i)
				if _, err := v.m.SetAttr(ctx, meta.RootCaller, v.files[i%len(v.files)], meta.SetAttrRequest{Valid: meta.SetMtimeNow}); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				t0 := time.Now()
				if _, err := v.m.CreateSnapshot(ctx, name); err != nil {
					b.Fatal(err)
				}
				times = append(times, time.Since(t0))
				names = append(names, name)
			}
			b.StopTimer()
			b.ReportMetric(ms(median(times)), "median-ms")
			b.ReportMetric(ms(slices.Max(times)), "max-ms")
			for _, name := range names {
				if err := v.m.DeleteSnapshot(ctx, name, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSnapshotDiff changes 1% of the files (a new mtime, and a slice
// for every tenth of them) after a snapshot, then times the diff between
// the snapshot and the live volume, and the deletion of the snapshot.
func BenchmarkSnapshotDiff(b *testing.B) {
	for _, n := range sizes(b) {
		b.Run(fmt.Sprintf("files=%d", n), func(b *testing.B) {
			v := openVolume(b, n)
			var diffs, dels []time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				name := fmt.Sprintf("diff-%d-%d", time.Now().UnixNano(), i)
				if _, err := v.m.CreateSnapshot(ctx, name); err != nil {
					b.Fatal(err)
				}
				changed := n / 100
				for k := 0; k < changed; k++ {
					ino := v.files[(k*100+i)%len(v.files)]
					if k%10 == 0 {
						id, err := v.m.NewSliceID(ctx)
						if err != nil {
							b.Fatal(err)
						}
						if _, err := v.m.WriteSlice(ctx, ino, 0, base.Slice{ID: id, Size: 4096, Len: 4096}, time.Now().UnixNano()); err != nil {
							b.Fatal(err)
						}
					} else if _, err := v.m.SetAttr(ctx, meta.RootCaller, ino, meta.SetAttrRequest{Valid: meta.SetMtimeNow}); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				t0 := time.Now()
				got := 0
				err := v.m.Diff(ctx, name, "", func(c meta.Change) error {
					if c.Type == base.TypeFile {
						got++
					}
					return nil
				})
				diffs = append(diffs, time.Since(t0))
				b.StopTimer()
				if err != nil {
					b.Fatal(err)
				}
				if got != changed {
					b.Fatalf("diff reported %d files, %d changed", got, changed)
				}
				t0 = time.Now()
				if err := v.m.DeleteSnapshot(ctx, name, nil); err != nil {
					b.Fatal(err)
				}
				dels = append(dels, time.Since(t0))
			}
			b.ReportMetric(ms(median(diffs)), "diff-median-ms")
			b.ReportMetric(ms(median(dels)), "delete-median-ms")
		})
	}
}
