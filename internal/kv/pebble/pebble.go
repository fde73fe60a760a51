package pebble

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// Defaults for Options fields left zero.
const (
	DefaultCacheSize = 64 << 20
	// DefaultMemTableSize is 16 MiB: every read seeks the memtable's skip
	// list, and a smaller one stays in the CPU's caches. Over NFS (40,000
	// files, 4 workers), 16 MiB against 64 MiB cut the gateway's CPU per
	// unlink from 165 to 115 µs (unlink 5,750-6,350 -> 7,700 ops/s) and
	// raised creates by about 10%; 4 and 8 MiB measured the same as 16
	// within the noise, with more flushes.
	DefaultMemTableSize = 16 << 20
)

// Options configures Open. The zero value is valid and means the defaults.
type Options struct {
	// CacheSize is the size in bytes of the block cache. Zero means
	// DefaultCacheSize.
	CacheSize int64
	// MemTableSize is the size in bytes of each memtable; a bigger one
	// absorbs more metadata churn before a flush. Zero means
	// DefaultMemTableSize. Pebble keeps up to two, plus one being flushed.
	MemTableSize uint64
	// Logger receives Pebble's messages: informational ones at debug
	// level, errors at error level. Nil discards them.
	Logger *slog.Logger
	// ReadOnly opens the store without writing to it; Update then fails.
	ReadOnly bool
	// MustExist opens only a database that exists: when path holds none
	// (or does not exist), Open fails with an error wrapping ErrNotExist
	// and leaves path as it found it, creating no directory and no file.
	// Off by default: Open creates the database. Only what creates a
	// volume (cairn format) leaves it off.
	MustExist bool
	// SyncCommits makes Update return only after its transaction is fsynced
	// (see the package doc). Off by default; call Sync instead.
	SyncCommits bool
	// FlushOnClose makes Close write the memtables out to tables first,
	// so that the next Open has no log to replay: for a process that
	// fills a store in bulk (cairn load) and ends.
	FlushOnClose bool
	// FreeSpaceReserve is the free space, in bytes, kept on the file
	// system holding the store for Pebble's own writes (see the package
	// doc, "A full disk"). While less is free, Update refuses transactions
	// with an error wrapping base.ErrNoSpace, except those whose context
	// is marked kv.Freeing, refused only below half the reserve; and Open
	// refuses to open the store read-write. Zero means
	// DefaultFreeSpaceReserve or 4 × MemTableSize, whichever is more; a
	// positive value must be at least 4 × MemTableSize; negative turns the
	// guard off.
	FreeSpaceReserve int64

	// pessimistic runs every Update under the writer slot, as before
	// optimistic transactions. Only for tests and benchmarks.
	pessimistic bool

	// noRedoLog turns the redo log off, so that NoSync commits can be lost
	// by a crash of the process. Only for tests and benchmarks.
	noRedoLog bool

	// fs replaces the file system Pebble writes through (nil: the real
	// one), for injecting faults. Only for tests.
	fs vfs.FS
}

// Validate reports whether the options are usable.
func (o Options) Validate() error {
	if o.CacheSize < 0 {
		return fmt.Errorf("pebble: CacheSize %d is negative", o.CacheSize)
	}
	if o.MemTableSize != 0 && (o.MemTableSize < 1<<20 || o.MemTableSize >= 4<<30) {
		return fmt.Errorf("pebble: MemTableSize %d is outside [1 MiB, 4 GiB)", o.MemTableSize)
	}
	mem := o.MemTableSize
	if mem == 0 {
		mem = DefaultMemTableSize
	}
	if o.FreeSpaceReserve > 0 && uint64(o.FreeSpaceReserve) < 4*mem {
		return fmt.Errorf("pebble: FreeSpaceReserve %d is below 4 × MemTableSize (%d)", o.FreeSpaceReserve, 4*mem)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.CacheSize == 0 {
		o.CacheSize = DefaultCacheSize
	}
	if o.MemTableSize == 0 {
		o.MemTableSize = DefaultMemTableSize
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.FreeSpaceReserve == 0 {
		o.FreeSpaceReserve = max(DefaultFreeSpaceReserve, 4*int64(o.MemTableSize))
	}
	return o
}

// Store is a kv.Store on a Pebble database. Open one with Open.
type Store struct {
	kv.Hub // Notifier: one process holds the store

	path string
	opts Options
	db   *pebble.DB
	lock *pebble.Lock

	// writer admits one commit at a time; a channel so waiting for it
	// honours the context.
	writer chan struct{}

	commits  commitLog // keys written by recent commits (occ.go)
	observe  kv.Observers
	gate     occGate
	occCount occCounters

	mu       sync.Mutex // guards closed and adding to inflight
	closed   bool
	inflight sync.WaitGroup // operations using db; Close waits for them

	// space refuses commits while the disk is nearly full (space.go); nil
	// if ReadOnly or turned off.
	space *spaceGuard
	// fatal is set once Pebble reported an error it cannot go on from
	// (slogAdapter.Fatalf): from then on the store refuses writes.
	fatal *atomic.Pointer[fatalError]

	// Guarded by the writer slot (see redo.go):
	seq      uint64   // seq of the last Update committed to db
	redo     *os.File // the redo log, opened O_APPEND; nil if ReadOnly
	redoSize int      // bytes in the redo log
	// redoBroken says the last append failed: the log may end in a partial
	// record and lacks a commit, so it must be emptied by a sync before
	// anything is appended.
	redoBroken bool
	redoBuf    []byte // the record being appended, reused between Updates
}

var (
	_ kv.Store      = (*Store)(nil)
	_ kv.Notifier   = (*Store)(nil)
	_ kv.Observable = (*Store)(nil)
	_ kv.Toucher    = (*Store)(nil)
)

// Observe implements kv.Observable: this process is the only writer.
func (s *Store) Observe(o kv.CommitObserver) (func(), bool) { return s.observe.Add(o), true }

// Open opens the Pebble database in directory path, creating it if needed
// unless opts.ReadOnly or opts.MustExist. If another process has it open,
// the error wraps kv.ErrLocked.
func Open(path string, opts Options) (*Store, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	if opts.MustExist {
		if err := mustExist(path); err != nil {
			return nil, err
		}
	}
	if !opts.ReadOnly {
		if err := os.MkdirAll(path, 0o755); err != nil {
			return nil, fmt.Errorf("metadata at %s: %w", path, err)
		}
	}
	guarded := !opts.ReadOnly && opts.FreeSpaceReserve > 0
	// Take the directory lock ourselves so that a lock conflict can be told
	// apart from every other reason Open can fail.
	lock, err := pebble.LockDirectory(path, vfs.Default)
	if err != nil {
		if isLockConflict(err) {
			return nil, fmt.Errorf("metadata at %s is in use by another process (%v): %w", path, err, kv.ErrLocked)
		}
		return nil, fmt.Errorf("metadata at %s: %w", path, err)
	}
	if guarded {
		if err := checkOpen(path, opts.FreeSpaceReserve); err != nil {
			_ = lock.Close()
			return nil, err
		}
	}

	var space *spaceGuard
	if guarded {
		space = newSpaceGuard(path, opts.FreeSpaceReserve, opts.Logger)
	}
	fatal := new(atomic.Pointer[fatalError])
	bg := &backgroundErrors{log: opts.Logger, guard: space, now: time.Now}
	cache := pebble.NewCache(opts.CacheSize)
	defer cache.Unref() // the DB holds its own reference
	po := &pebble.Options{
		Cache:              cache,
		MemTableSize:       opts.MemTableSize,
		Logger:             slogAdapter{l: opts.Logger, fatal: fatal},
		EventListener:      &pebble.EventListener{BackgroundError: bg.report},
		ReadOnly:           opts.ReadOnly,
		Lock:               lock,
		FormatMajorVersion: pebble.FormatNewest,
		FS:                 opts.fs, // nil: Pebble's default
	}
	// Metadata reads are mostly point lookups (dentries, inodes): bloom
	// filters let them skip sstables that do not hold the key.
	for i := range po.Levels {
		po.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	// Checked above; Pebble checks again, in case it went meanwhile.
	po.ErrorIfNotExists = opts.MustExist
	var db *pebble.DB
	err = recoverFatal(func() (err error) {
		db, err = pebble.Open(path, po)
		return err
	})
	if err != nil {
		_ = lock.Close()
		return nil, fmt.Errorf("metadata at %s: %w", path, err)
	}
	s := &Store{
		path:   path,
		opts:   opts,
		db:     db,
		lock:   lock,
		writer: make(chan struct{}, 1),
		space:  space,
		fatal:  fatal,
	}
	if err := recoverFatal(s.recover); err != nil {
		if s.redo != nil {
			_ = s.redo.Close()
		}
		if fatal.Load() == nil {
			_ = db.Close() // after a fatal error it may wait forever
		}
		_ = lock.Close()
		return nil, err
	}
	return s, nil
}

// isLockConflict reports whether err from pebble.LockDirectory means the
// lock is held, by another process (fcntl EAGAIN/EACCES) or by another
// Store in this process.
func isLockConflict(err error) bool {
	var pathErr *os.PathError
	if errors.As(err, &pathErr) {
		return false // creating the LOCK file failed: not a conflict
	}
	return errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES) ||
		strings.Contains(err.Error(), "lock held by current process")
}

// enter registers an operation on db, or returns ErrClosed.
func (s *Store) enter() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return kv.ErrClosed
	}
	s.inflight.Add(1)
	return nil
}

// Update implements kv.Store. It runs fn optimistically, beside other
// Updates, and commits it if what fn read has not changed since it began;
// otherwise, and while optimism mostly fails, it runs fn alone under the
// writer slot, where it cannot conflict. fn runs at most twice and Update
// never returns kv.ErrConflict.
//
// While the disk is nearly full, a transaction that writes fails with an
// error wrapping base.ErrNoSpace, unless ctx is marked kv.Freeing and the
// hard floor is not reached either (see the package doc, "A full disk").
// After Pebble met a fatal error, every transaction that writes fails with
// an error wrapping base.ErrIO.
func (s *Store) Update(ctx context.Context, fn func(tx kv.Txn) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.inflight.Done()
	if err := s.failed(); err != nil {
		return err
	}
	freeing := kv.IsFreeing(ctx)
	if s.opts.pessimistic || !s.gate.try() {
		s.occCount.locked.Add(1)
		if err := s.acquire(ctx); err != nil {
			return err
		}
		return s.updateLocked(fn, freeing)
	}

	start := s.commits.seq.Load() // before any read
	b := s.db.NewIndexedBatch()
	tx := &txn{reader: reader{r: b, rs: &readSet{}}, b: b}
	err := tx.run(fn)
	// With nothing to commit, fn's outcome stands if its reads were one
	// consistent state (it may have failed because they were not); the
	// log is checked under the slot only for a commit.
	commit := err == nil && !b.Empty()
	if commit {
		if err := s.acquire(ctx); err != nil {
			_ = b.Close()
			return err
		}
	}
	if !s.commits.valid(start, tx.rs) {
		_ = b.Close()
		s.gate.conflicted()
		s.occCount.conflicts.Add(1)
		if !commit {
			if err := s.acquire(ctx); err != nil {
				return err
			}
		}
		return s.updateLocked(fn, freeing)
	}
	s.gate.succeeded()
	s.occCount.optimistic.Add(1)
	defer b.Close()
	if !commit {
		return err
	}
	return s.commit(b, tx.writes, freeing)
}

// Touch implements kv.Toucher: it logs keys as written by a commit, under
// the writer slot, so that optimistic Updates that read one of them and
// have not committed re-run (occ.go), and returns after every commit that
// held the slot before it.
func (s *Store) Touch(ctx context.Context, keys [][]byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.inflight.Done()
	if err := s.acquire(ctx); err != nil {
		return err
	}
	s.commits.add(slices.Clone(keys))
	<-s.writer
	return nil
}

// acquire takes the writer slot, honouring ctx.
func (s *Store) acquire(ctx context.Context) error {
	// A free slot is taken without asking ctx for its Done channel: a
	// FUSE request's context starts a goroutine that watches for the
	// request's interrupt when first asked (internal/fuse/interrupt.go),
	// and wakes it again when the request ends.
	select {
	case s.writer <- struct{}{}:
		return nil
	default:
	}
	select {
	case s.writer <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// updateLocked runs fn and commits it; the caller holds the writer slot,
// which updateLocked releases.
func (s *Store) updateLocked(fn func(tx kv.Txn) error, freeing bool) error {
	b := s.db.NewIndexedBatch()
	defer b.Close()
	tx := &txn{reader: reader{r: b}, b: b}
	if err := tx.run(fn); err != nil || b.Empty() {
		<-s.writer
		return err
	}
	return s.commit(b, tx.writes, freeing)
}

// commit commits b, which wrote keys, and logs keys for the optimistic
// transactions running beside it; freeing says its context is marked
// kv.Freeing. The caller holds the writer slot, which commit releases.
func (s *Store) commit(b *pebble.Batch, keys [][]byte, freeing bool) error {
	// Checked under the slot: a fatal error met by the commit before this
	// one leaves Pebble's commit pipeline stuck, and a commit would wait
	// forever.
	err := s.failed()
	if err == nil && s.space != nil {
		err = s.space.admit(len(b.Repr()), freeing)
	}
	if err != nil {
		<-s.writer
		return err
	}
	obs := s.observe.Active()
	var ws []kv.Write
	if obs != nil {
		ws = batchWrites(b)
		kv.Committing(obs, ws)
	}
	err = recoverFatal(func() error { return s.apply(b) })
	if obs != nil {
		kv.Committed(obs, ws, err == nil)
	}
	// Logged even if the commit failed: a batch that may be visible must
	// be checked against, and an extra entry only costs a spurious re-run.
	s.commits.add(keys)
	<-s.writer
	if err == nil && s.opts.SyncCommits {
		// Waited for outside the slot, so that the next transactions'
		// fsyncs group with ours.
		if err = b.SyncWait(); err != nil {
			err = fmt.Errorf("%s: commit sync: %w", s.Name(), err)
		}
	}
	return err
}

// batchWrites lists b's writes in order, for the observers; read before
// apply, which may add the store's own bookkeeping.
func batchWrites(b *pebble.Batch) []kv.Write {
	ws := make([]kv.Write, 0, b.Count())
	r := b.Reader()
	for {
		kind, k, v, ok, err := r.Next()
		if !ok || err != nil {
			// A batch this process built and never committed is legible.
			return ws
		}
		switch kind {
		case pebble.InternalKeyKindSet:
			ws = append(ws, kv.Write{Key: k, Value: v})
		case pebble.InternalKeyKindDelete:
			ws = append(ws, kv.Write{Key: k, Delete: true})
		}
	}
}

// apply makes b visible: through the redo log, or with SyncCommits
// committed for a sync that commit waits for. The caller holds the slot.
func (s *Store) apply(b *pebble.Batch) error {
	if s.redoBroken {
		if err := s.syncLocked(); err != nil {
			return fmt.Errorf("%s: %w", s.Name(), err)
		}
	}
	if !s.opts.SyncCommits {
		if err := s.commitLogged(b); err != nil {
			return fmt.Errorf("%s: %w", s.Name(), err)
		}
		return nil
	}
	if err := s.db.ApplyNoSyncWait(b, pebble.Sync); err != nil {
		return fmt.Errorf("%s: commit: %w", s.Name(), err)
	}
	return nil
}

// View implements kv.Store.
func (s *Store) View(ctx context.Context, fn func(r kv.Reader) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.inflight.Done()
	snap := s.db.NewSnapshot()
	defer snap.Close()
	return fn(&reader{r: snap})
}

// Sync implements kv.Store: it fsyncs the WAL, which holds every committed
// transaction not yet in an sstable (sstables are synced when written), and
// empties the redo log. Updates wait while it does.
func (s *Store) Sync(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.inflight.Done()
	if s.opts.ReadOnly {
		return nil
	}
	if err := s.failed(); err != nil {
		return err
	}
	if s.opts.SyncCommits || s.opts.noRedoLog {
		// No redo log to empty: Updates need not wait for the fsync.
		if err := recoverFatal(func() error { return s.db.LogData(nil, pebble.Sync) }); err != nil {
			return fmt.Errorf("%s: sync: %w", s.Name(), err)
		}
		return nil
	}
	// The slot keeps Updates from appending to the redo log between the
	// fsync and the truncation, which would lose them.
	select {
	case s.writer <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.writer }()
	if err := s.failed(); err != nil {
		return err
	}
	if err := recoverFatal(s.syncLocked); err != nil {
		return fmt.Errorf("%s: %w", s.Name(), err)
	}
	return nil
}

// Name implements kv.Store.
func (s *Store) Name() string { return "pebble:" + s.path }

// Close implements kv.Store. It waits for running transactions to finish;
// later calls return kv.ErrClosed. Closing syncs the WAL and empties the
// redo log.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return kv.ErrClosed
	}
	s.closed = true
	s.mu.Unlock()
	s.inflight.Wait()
	err := s.failed()
	if s.redo != nil {
		// Nothing else runs now, so the writer slot is not needed.
		if err == nil {
			err = recoverFatal(s.syncLocked)
		}
		if cerr := s.redo.Close(); err == nil {
			err = cerr
		}
	}
	if s.fatal.Load() == nil {
		if err == nil && s.opts.FlushOnClose && !s.opts.ReadOnly {
			if ferr := s.db.Flush(); ferr != nil {
				err = ferr
			}
		}
		// After a fatal error Pebble's Close may wait forever for its
		// stuck commit pipeline; the process is left to end instead.
		if derr := s.db.Close(); err == nil {
			err = derr
		}
	}
	if lerr := s.lock.Close(); err == nil {
		err = lerr
	}
	if err != nil {
		return fmt.Errorf("%s: close: %w", s.Name(), err)
	}
	return nil
}

// pebbleReader is what a batch and a snapshot have in common.
type pebbleReader interface {
	Get(key []byte) ([]byte, io.Closer, error)
	NewIter(o *pebble.IterOptions) (*pebble.Iterator, error)
}

type reader struct {
	r  pebbleReader
	rs *readSet // what an optimistic transaction read; nil otherwise
}

// Get and Scan hide the keys the store reserves for itself.
func (r *reader) Get(key []byte) ([]byte, error) {
	if isReserved(key) {
		return nil, nil
	}
	if r.rs != nil {
		r.rs.point(key)
	}
	v, closer, err := r.r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := append([]byte{}, v...)
	return out, closer.Close()
}

func (r *reader) Scan(start, end []byte, reverse bool, fn func(key, value []byte) bool) (err error) {
	if end != nil && string(end) <= string(start) {
		return nil
	}
	it, err := r.r.NewIter(&pebble.IterOptions{LowerBound: start, UpperBound: end})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := it.Close(); err == nil {
			err = cerr
		}
	}()
	// Only a range that reaches the reserved prefix needs the check per key.
	hide := (end == nil || string(end) > reservedPrefix) &&
		string(start) < reservedEnd
	if reverse {
		for ok := it.Last(); ok; ok = it.Prev() {
			if hide && isReserved(it.Key()) {
				continue
			}
			if !fn(it.Key(), it.Value()) {
				r.scanned(start, end, reverse, it.Key())
				return nil
			}
		}
	} else {
		for ok := it.First(); ok; ok = it.Next() {
			if hide && isReserved(it.Key()) {
				continue
			}
			if !fn(it.Key(), it.Value()) {
				r.scanned(start, end, reverse, it.Key())
				return nil
			}
		}
	}
	r.scanned(start, end, reverse, nil)
	return it.Error()
}

// Firsts implements kv.FirstReader with one iterator, given new bounds
// for each range: metadata transactions read several single keys or
// first versions at once, and re-bounding an iterator costs far less
// than building one per range.
func (r *reader) Firsts(ranges []kv.Range) (out []kv.Pair, err error) {
	var it *pebble.Iterator
	defer func() {
		if it != nil {
			if cerr := it.Close(); err == nil {
				err = cerr
			}
		}
	}()
	return kv.FirstsWith(ranges, func(start, end []byte) (kv.Pair, error) {
		if end != nil && string(end) <= string(start) {
			return kv.Pair{}, nil
		}
		if it == nil {
			var err error
			if it, err = r.r.NewIter(&pebble.IterOptions{LowerBound: start, UpperBound: end}); err != nil {
				return kv.Pair{}, err
			}
		} else {
			it.SetBounds(start, end)
		}
		hide := (end == nil || string(end) > reservedPrefix) && string(start) < reservedEnd
		for ok := it.First(); ok; ok = it.Next() {
			if hide && isReserved(it.Key()) {
				continue
			}
			r.scanned(start, end, false, it.Key())
			return kv.Pair{Key: append([]byte{}, it.Key()...), Value: append([]byte{}, it.Value()...)}, nil
		}
		r.scanned(start, end, false, nil)
		return kv.Pair{}, it.Error()
	})
}

var _ kv.FirstReader = (*reader)(nil)

// scanned notes a scan in the read set, if there is one.
func (r *reader) scanned(start, end []byte, reverse bool, last []byte) {
	if r.rs != nil {
		r.rs.scanned(start, end, reverse, last)
	}
}

// txn reads and writes through an indexed batch, so it sees its own writes.
type txn struct {
	reader
	b      *pebble.Batch
	err    error    // first reserved key written; Update fails with it
	writes [][]byte // keys set or deleted, for the commit log
}

// Set copies key and value into the batch; the batch's error is only for a
// batch that is already committed, which a Txn never is while fn runs.
func (tx *txn) Set(key, value []byte) {
	if tx.reserved(key) {
		return
	}
	tx.writes = append(tx.writes, bytes.Clone(key))
	_ = tx.b.Set(key, value, nil)
}

// NoteFirst implements kv.ReadNoter: the optimistic check covers the
// range up to p as if Firsts had read it.
func (tx *txn) NoteFirst(start, end []byte, p kv.Pair) {
	tx.scanned(start, end, false, p.Key)
}

// run runs fn on tx: its error, or the reserved-key error of a write.
func (tx *txn) run(fn func(tx kv.Txn) error) error {
	if err := fn(tx); err != nil {
		return err
	}
	return tx.err
}

func (tx *txn) Delete(key []byte) {
	if tx.reserved(key) {
		return
	}
	tx.writes = append(tx.writes, bytes.Clone(key))
	_ = tx.b.Delete(key, nil)
}

func (tx *txn) reserved(key []byte) bool {
	if !isReserved(key) {
		return false
	}
	if tx.err == nil {
		tx.err = fmt.Errorf("%w: %q", ErrReservedKey, key)
	}
	return true
}

// slogAdapter routes Pebble's log messages to a slog.Logger.
type slogAdapter struct {
	l     *slog.Logger
	fatal *atomic.Pointer[fatalError] // set by Fatalf
}

func (a slogAdapter) Infof(format string, args ...any) {
	if a.l.Enabled(context.Background(), slog.LevelDebug) {
		a.l.Debug(fmt.Sprintf(format, args...), "component", "pebble")
	}
}

func (a slogAdapter) Errorf(format string, args ...any) {
	a.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
}

// Fatalf is called by Pebble on an error it cannot go on from (a failed
// write of its WAL or MANIFEST, corruption) and must not return. It logs
// the error, marks the store failed and panics with a *fatalError. A
// call into Pebble from the store's own goroutines (a commit, a sync,
// Open) recovers that panic (recoverFatal): the process and the reads go
// on, writes fail. Pebble's background goroutines (flushes, compactions)
// cannot be recovered from outside: there the panic ends the process,
// after the log line. The free-space guard keeps a full disk from getting
// here (see the package doc, "A full disk").
func (a slogAdapter) Fatalf(format string, args ...any) {
	e := &fatalError{msg: fmt.Sprintf(format, args...)}
	a.l.Error("pebble fatal error: the metadata store accepts no more writes; restart the process",
		"component", "pebble", "err", e.msg)
	a.fatal.CompareAndSwap(nil, e)
	panic(e)
}

// fatalError is a fatal error reported by Pebble (slogAdapter.Fatalf).
type fatalError struct{ msg string }

func (e *fatalError) Error() string { return "pebble: " + e.msg }

// recoverFatal calls f, a call into Pebble, and returns the fatal error
// Pebble met in it as an error wrapping base.ErrIO instead of panicking.
// Other panics go on.
func recoverFatal(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			e, ok := r.(*fatalError)
			if !ok {
				panic(r)
			}
			err = fmt.Errorf("%w (%w)", e, base.ErrIO)
		}
	}()
	return f()
}

// failed returns the error writes fail with once Pebble met a fatal
// error, or nil.
func (s *Store) failed() error {
	if e := s.fatal.Load(); e != nil {
		return fmt.Errorf("%s accepts no more writes after a fatal error (%w); restart the process: %w", s.Name(), e, base.ErrIO)
	}
	return nil
}

var _ kv.Profiler = (*Store)(nil)

// Profile implements kv.Profiler: the only writer of its directory (it
// holds the lock), transactions in this process.
func (s *Store) Profile() kv.Profile {
	return kv.Profile{Engine: "pebble", SingleWriter: true, Observable: true, Toucher: true, Notifier: true}
}
