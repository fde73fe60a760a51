package chunk

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/object"
)

type inodeKey struct{}

// WithInode returns ctx marked as reading the content of inode ino, so
// that the Store's log lines about the bad blocks it meets name the file
// as well as the object.
func WithInode(ctx context.Context, ino base.Ino) context.Context {
	return context.WithValue(ctx, inodeKey{}, ino)
}

func inodeOf(ctx context.Context) (base.Ino, bool) {
	ino, ok := ctx.Value(inodeKey{}).(base.Ino)
	return ino, ok
}

type quietMissingKey struct{}

// QuietMissing returns ctx marked so that a read under it that finds a
// block object missing from the store returns the error (see Missing)
// without logging it as a bad block. For callers that check whether the
// slice list they read with is still the file's (a compaction replaces
// slices and deletes their objects a delay later) and read again: the
// block is reported only if a read under the current list misses it too.
// Background fetches (read-ahead, disk fills) are quiet as well: the read
// that needs the block reports it.
func QuietMissing(ctx context.Context) context.Context {
	return context.WithValue(ctx, quietMissingKey{}, true)
}

func quietMissing(ctx context.Context) bool {
	v, _ := ctx.Value(quietMissingKey{}).(bool)
	return v
}

// Missing reports whether err is, or wraps, the failure of a block read
// whose object is not in the store.
func Missing(err error) bool { return errors.Is(err, object.ErrNotFound) }

// loggedError is an error the Store has logged already.
type loggedError struct{ error }

func (e loggedError) Unwrap() error { return e.error }

// Logged reports whether err is, or wraps, an error of a block read that
// the Store has logged already (a bad block: see badBlocks): a caller
// that turns it into EIO need not log it again.
func Logged(err error) bool {
	var le loggedError
	return errors.As(err, &le)
}

// Limits of badBlocks.
const (
	badBlockInterval = time.Minute // at most one line per block per interval
	badBlockMax      = 1024        // blocks remembered
)

// badBlocks logs the reads of blocks that fail (a checksum mismatch, a
// missing object) at most once per block per badBlockInterval: the first
// failure at once, the later ones within the interval counted, and the
// first one after it logged with that count. A pass over a damaged file
// through the kernel (a read per 4 KiB) would otherwise log a line per
// read. A failure that names the file (WithInode) is logged too when no
// line about the block named one yet: read-ahead and background fills
// meet a bad block first, without knowing the file. At most badBlockMax
// blocks are remembered; past that the oldest counts are dropped (their
// next failure logs a line). It is safe for concurrent use.
type badBlocks struct {
	log *slog.Logger
	now func() time.Time // time.Now; tests move it

	mu   sync.Mutex
	seen map[string]*badBlock
}

type badBlock struct {
	last       time.Time // of its last line
	suppressed int       // failures since, not logged
	named      bool      // a line named the file
}

func newBadBlocks(log *slog.Logger) *badBlocks {
	return &badBlocks{log: log, now: time.Now, seen: make(map[string]*badBlock)}
}

// report logs (or counts) a failed read of the block under key, as an
// error line msg with err and attrs, and returns err marked as logged.
func (b *badBlocks) report(ctx context.Context, key, msg string, err error, attrs ...any) error {
	ino, named := inodeOf(ctx)
	now := b.now()
	b.mu.Lock()
	bb := b.seen[key]
	if bb == nil {
		b.makeRoom(now)
		bb = &badBlock{}
		b.seen[key] = bb
	} else if now.Sub(bb.last) < badBlockInterval && (bb.named || !named) {
		bb.suppressed++
		b.mu.Unlock()
		return loggedError{err}
	}
	suppressed := bb.suppressed
	bb.last, bb.suppressed, bb.named = now, 0, bb.named || named
	b.mu.Unlock()
	args := append([]any{"key", key}, attrs...)
	if named {
		args = append(args, "ino", uint64(ino))
	}
	args = append(args, "err", err)
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	b.log.Error(msg, args...)
	return loggedError{err}
}

// makeRoom drops the blocks whose last line is older than the interval
// when the table is full, and every block if that is not enough. Called
// with mu held.
func (b *badBlocks) makeRoom(now time.Time) {
	if len(b.seen) < badBlockMax {
		return
	}
	for k, bb := range b.seen {
		if now.Sub(bb.last) >= badBlockInterval {
			delete(b.seen, k)
		}
	}
	if len(b.seen) >= badBlockMax {
		clear(b.seen)
	}
}
