package pebble

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/internal/base"
)

// The free-space guard (see the package doc, "A full disk"). Pebble treats
// a failed write of its WAL or MANIFEST as fatal, so the store keeps Pebble
// from ever meeting a full disk: it refuses transactions while the file
// system holding the store has less than a reserve free.

// DefaultFreeSpaceReserve is the free space the guard keeps by default
// (or 4 × MemTableSize, if more).
const DefaultFreeSpaceReserve = 64 << 20

// spaceCheckInterval is how old the free space the guard last measured may
// be: it measures again after this long, or sooner once the transactions
// admitted since have written an eighth of the margin it had.
const spaceCheckInterval = 100 * time.Millisecond

// freeSpace returns the bytes an unprivileged writer may still use on the
// file system holding path.
func freeSpace(path string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// spaceGuard decides whether a transaction may be committed. Its fields
// are guarded by the store's writer slot, except stale.
type spaceGuard struct {
	dir     string
	reserve uint64 // ordinary transactions need this much free
	floor   uint64 // kv.Freeing transactions need this much free
	log     *slog.Logger
	now     func() time.Time

	stale    atomic.Bool // measure again before the next commit
	measured time.Time   // when free was measured; zero: never
	free     uint64      // free bytes then
	spent    uint64      // bytes admitted since, counted twice (WAL and redo log)
	refusing bool        // the last check refused (for logging the change)
}

func newSpaceGuard(dir string, reserve int64, log *slog.Logger) *spaceGuard {
	return &spaceGuard{dir: dir, reserve: uint64(reserve), floor: uint64(reserve) / 2, log: log, now: time.Now}
}

// admit returns nil if a transaction whose batch is n bytes may be
// committed, or an error wrapping base.ErrNoSpace. freeing transactions
// (kv.Freeing) need only the floor. The caller holds the writer slot.
func (g *spaceGuard) admit(n int, freeing bool) error {
	need := g.reserve
	if freeing {
		need = g.floor
	}
	cost := 2 * uint64(n) // the WAL and the redo log each get a copy
	now := g.now()
	margin := g.free - min(g.free, g.reserve)
	if g.measured.IsZero() || g.stale.Load() || now.Sub(g.measured) >= spaceCheckInterval ||
		g.spent > margin/8 || g.free < g.spent+cost+need {
		// Measured again before refusing too: deletes and compactions
		// free space without the guard knowing.
		free, err := freeSpace(g.dir)
		if err != nil {
			// Not knowing is no reason to refuse a write; Pebble's own
			// errors will tell.
			g.log.Warn("free-space guard cannot measure the metadata disk", "err", err)
			return nil
		}
		g.stale.Store(false)
		g.measured, g.free, g.spent = now, free, 0
	}
	if g.free < g.spent+cost+need {
		if !g.refusing {
			g.refusing = true
			g.log.Error("metadata disk is nearly full: refusing writes (deletes are still allowed) until space is freed",
				"dir", g.dir, "free", base.IBytes(g.free), "reserve", base.IBytes(g.reserve), "floor", base.IBytes(g.floor))
		}
		return g.fullError(need)
	}
	if g.refusing && !freeing {
		g.refusing = false
		g.log.Info("metadata disk has room again: writes resume", "dir", g.dir, "free", base.IBytes(g.free))
	}
	g.spent += cost
	return nil
}

func (g *spaceGuard) fullError(need uint64) error {
	return fmt.Errorf("metadata disk %s is nearly full (%s free, writes need %s): free space and retry: %w",
		g.dir, base.IBytes(g.free), base.IBytes(need), base.ErrNoSpace)
}

// checkOpen fails if the file system holding dir has less than reserve
// free: Pebble's open writes (a WAL, a MANIFEST, a flush of what the last
// WAL held) and, on a full disk, either dies or retries a failed flush
// forever.
func checkOpen(dir string, reserve int64) error {
	free, err := freeSpace(dir)
	if err != nil {
		return nil // as in admit
	}
	if free < uint64(reserve) {
		return fmt.Errorf("metadata disk %s is full (%s free, need %s): free space and retry: %w",
			dir, base.IBytes(free), base.IBytes(uint64(reserve)), base.ErrNoSpace)
	}
	return nil
}

// backgroundErrors logs Pebble's background errors (a failed flush or
// compaction, which Pebble retries at once and forever) without letting a
// repeating one flood the log: the first of a run is logged, then at most
// one every backgroundErrorEvery with the count of those left out.
type backgroundErrors struct {
	log   *slog.Logger
	guard *spaceGuard // told to measure again; nil without a guard
	now   func() time.Time

	mu      sync.Mutex
	last    time.Time // when one was last logged
	skipped int       // errors not logged since
}

const backgroundErrorEvery = 10 * time.Second

func (b *backgroundErrors) report(err error) {
	if b.guard != nil {
		b.guard.stale.Store(true)
	}
	b.mu.Lock()
	now := b.now()
	if !b.last.IsZero() && now.Sub(b.last) < backgroundErrorEvery {
		b.skipped++
		b.mu.Unlock()
		return
	}
	skipped := b.skipped
	b.last, b.skipped = now, 0
	b.mu.Unlock()
	b.log.Error("pebble background error (retried by pebble)", "component", "pebble", "err", err,
		"similar_not_logged", skipped)
}
