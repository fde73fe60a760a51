package nfs

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/nfs/nfsclient"
)

// TestReadDirPlusLargeDirectory lists a directory of 20,000 entries with
// READDIRPLUS at the 32 KiB a Linux client asks for: every entry once, in
// order, each call continuing the parked vfs listing (no restart: the
// calls are about entries/entries-per-call), and the gateway's heap
// stays flat: it holds one batch of entries (vfs reads 512 at a time) and
// one reply, never the directory. With 100,000 entries the same bound
// holds (run with CAIRN_BIGDIR=100000); 20,000 keeps the test fast.
func TestReadDirPlusLargeDirectory(t *testing.T) {
	n := 20000
	if s := os.Getenv("CAIRN_BIGDIR"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			t.Fatalf("CAIRN_BIGDIR=%q: %v", s, err)
		}
	}
	e := newEnv(t)
	dir, _, en := e.v.Mknod(ctx, base.RootCaller, base.RootIno, "big", base.TypeDir, 0o755, 0, 0, "")
	if en != 0 {
		t.Fatal(en)
	}
	start := time.Now()
	for i := range n {
		if _, _, en := e.v.Mknod(ctx, base.RootCaller, dir, fmt.Sprintf("entry-%06d", i), base.TypeFile, 0o644, 0, 0, ""); en != 0 {
			t.Fatal(en)
		}
	}
	t.Logf("created %d entries in %v", n, time.Since(start))
	c, root := e.client(t)
	dh, _, err := c.Lookup(root, "big")
	if err != nil {
		t.Fatal(err)
	}

	var ms runtime.MemStats
	heap := func() uint64 {
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	base0 := heap()
	var peak uint64
	next, seen := 0, 0
	start = time.Now()
	calls, err := c.ReadDirPlusEach(dh, 32<<10, func(en nfsclient.Entry) {
		seen++
		if en.Name == "." || en.Name == ".." {
			return
		}
		if want := fmt.Sprintf("entry-%06d", next); en.Name != want || en.Handle == nil || en.Attr == nil {
			t.Fatalf("entry %d: %q (handle %v, attr %v), want %q", next, en.Name, en.Handle != nil, en.Attr != nil, want)
		}
		next++
		if next%2000 == 0 {
			peak = max(peak, heap())
		}
	})
	elapsed := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if next != n {
		t.Fatalf("listed %d entries, want %d", next, n)
	}
	perCall := float64(seen) / float64(calls)
	growth := int64(peak) - int64(base0)
	t.Logf("%d entries in %d calls (%.0f per call) in %v; heap %d KiB at start, growth %d KiB at most",
		n, calls, perCall, elapsed, base0>>10, growth>>10)
	// A whole directory in memory would be n × (entry + attributes),
	// about 200 bytes each: 4 MB here. One batch is 512 entries.
	if limit := int64(n) * 200 / 2; growth > limit {
		t.Errorf("heap grew by %d KiB while listing, more than half the directory's size (%d KiB)", growth>>10, limit>>10)
	}
	if e.srv.dirs.parked() > 1 {
		t.Errorf("%d listings parked after one listing", e.srv.dirs.parked())
	}
}
