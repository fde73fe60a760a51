package meta

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// Options configures a Meta client. The zero value is valid.
type Options struct {
	// Logger receives warnings about background clean-up; default discards.
	Logger *slog.Logger
	// ReadOnly refuses every modification of the file system with
	// base.ErrReadOnly. Session bookkeeping still works.
	ReadOnly bool
	// InodeBatch and SliceBatch: how many ids are reserved per allocation
	// transaction (defaults 1024 each).
	InodeBatch, SliceBatch uint64
	// CompactThreshold: WriteSlice reports compaction is due when a chunk
	// has more slices than this (default 64).
	CompactThreshold int
	// HoldReleaseDelay, if positive, lets the last close of a file return
	// at once and deletes its open-file hold in a batch this much later,
	// with other closes (saving a transaction per close on shared
	// engines). An unlinked file is then destroyed that much later.
	HoldReleaseDelay time.Duration
	// LatestCacheEntries bounds the in-memory cache of attributes and
	// directory entries kept on stores no other process writes (see
	// latestcache.go): 0 means DefaultLatestCacheEntries, negative turns it off.
	LatestCacheEntries int
	// ListingTTL, if positive, turns the listing cache on for stores
	// other processes write (no latest-version cache): lookups walking a
	// directory are answered from a listing at most this old (listingcache.go).
	// Set it no longer than the front end's attribute and entry timeouts.
	ListingTTL time.Duration
	// NoGroupCommit turns group commit off (groupcommit.go). It is on for
	// stores without the latest-version cache, which other processes
	// write: database servers, where a commit costs most.
	NoGroupCommit bool
	// NoLeases turns directory leases and speculative creates off
	// (lease.go, speculative.go). They are on for stores other processes write
	// that can make a guarded write (kv.GuardedWriter), for clients with
	// a session. Every client of such a store respects the leases of
	// others whatever this says.
	NoLeases bool
	// WriteBack acknowledges creates and unlinks in directories this
	// client leases before they commit, and commits them in batches
	// (writeback.go): one guarded write for up to hundreds of changes.
	// A crash loses the changes since the last commit (at most about
	// 50 ms of them), never part of one; Sync commits them. Needs
	// leases.
	WriteBack bool
	// NoBlindOpens records the first open of a file in a transaction
	// that reads, then writes its hold (two round trips on a server)
	// rather than in one round trip whose write does not wait for the
	// read (kv.BlindWriter; open.go, openBlind). Blind opens are on for
	// stores without the latest-version cache.
	NoBlindOpens bool
	// MemoryHolds keeps open-file holds in this process's memory only,
	// with no hold records, on a store only this process uses at all
	// (an embedded volume: no other client can unlink a file it has
	// open). It applies where the latest-version cache is on and the
	// store can order changes made outside it (kv.Toucher); otherwise
	// holds are recorded as usual. An open and a close then cost no
	// transaction. Unlinked files still open when the process ends are
	// destroyed by the next Open with MemoryHolds. See session.go.
	MemoryHolds bool
}

// Validate checks the options (after defaults are applied).
func (o *Options) Validate() error {
	if o.CompactThreshold < 1 {
		return fmt.Errorf("compact threshold %d: %w", o.CompactThreshold, base.ErrInvalid)
	}
	return nil
}

func (o *Options) setDefaults() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.InodeBatch == 0 {
		o.InodeBatch = 1024
	}
	if o.SliceBatch == 0 {
		o.SliceBatch = 1024
	}
	if o.CompactThreshold == 0 {
		o.CompactThreshold = 64
	}
	if o.LatestCacheEntries == 0 {
		o.LatestCacheEntries = DefaultLatestCacheEntries
	}
}

// Limits.
const (
	MaxNameLen    = 255
	MaxSymlinkLen = 4096
	MaxLinks      = 65000
	MaxXattrName  = 255
	MaxXattrValue = 64 << 10
)

// ErrCompactionStale is returned by CompactChunk when the chunk no longer
// starts with the slices the caller merged; the caller drops its merged
// slice and may retry later. It does not wrap kv.ErrConflict, so kv stores
// do not retry it.
var ErrCompactionStale = errors.New("meta: chunk changed during compaction")

// Meta is a metadata client over one kv.Store. Safe for concurrent use.
type Meta struct {
	store kv.Store
	opts  Options
	log   *slog.Logger
	// settings is the volume's settings record as last read (Open,
	// ChangeSettings, each heartbeat).
	settings atomic.Pointer[Settings]
	profile  kv.Profile   // what the store declares
	accel    Accelerators // chosen from it at Open

	idMu            sync.Mutex
	nextIno, maxIno uint64 // reserved inode range [nextIno, maxIno)
	// inoAhead is an inode range reserved ahead [start, end), taken when
	// [nextIno, maxIno) ends; inoAheadRuns: its reservation runs (with
	// write-back only: creates then wait for no round trip, alloc).
	inoAhead          [2]uint64
	inoAheadRuns      bool
	nextSlic, maxSlic uint64
	inflight          map[uint64]bool // slice ids handed out, not yet committed
	reserved          [][2]uint64     // slice id ranges recorded for this session (gc guard)
	lost              map[uint64]bool // in flight when the session was declared dead
	// renew is set while a session declared dead waits for its
	// replacement (its registration failed): Heartbeat tries again, and
	// slice ids handed out meanwhile are lost (no reservation keeps them).
	renew bool

	// holdMu is held for writing while the session changes and for
	// reading by opens and closes, which inoMu serializes per inode.
	holdMu sync.RWMutex
	inoMu  [64]sync.Mutex

	mu      sync.Mutex
	sid     uint64
	session SessionInfo
	reach   reachState       // this client's access to the store, for sweeps
	opened  map[base.Ino]int // open handles per inode in this client
	// holdToucher, if set, makes opened the only record of this
	// client's holds (Options.MemoryHolds) and orders changes of it
	// against transactions (session.go, "Holds in memory").
	holdToucher kv.Toucher
	// heldHook, if set (tests only, before the first operation), runs
	// in op.held with holds in memory, after the open count n is read.
	heldHook func(ino base.Ino, n int)
	// releases are closed files whose hold waits for releaseLoop.
	releases  map[base.Ino]bool
	releasing bool
	closed    bool

	deletes chan struct{}
	now     func() int64

	trashMu sync.Mutex
	trash   trashState // trash.go

	quotaHints quotaHints // quota.go

	lc         *latestCache  // nil: off
	listings   *listingCache // nil: off
	lastEpoch  atomic.Uint64 // the live epoch the last update read
	group      *committer    // nil: group commit off
	ahead      *aheadState   // nil: lookups start no transactions
	leases     *leaseState   // nil: this client takes no directory leases
	spec       *specCache    // nil: no speculative mutations
	wb         *wbLog        // nil: no write-back (writeback.go)
	shards     shardPool     // usage shards of the transactions in flight
	contention contention    // directories whose changes queue in the store (contention.go)
	stopLatest func()
}

// Open opens a Meta client of a formatted volume. Unless read-only, it
// releases open-file holds of sessions that no longer exist and frees the
// unlinked inodes they kept alive.
func Open(ctx context.Context, store kv.Store, opts Options) (*Meta, error) {
	opts.setDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	s, err := LoadSettings(ctx, store)
	if err != nil {
		return nil, err
	}
	if s.FormatVersion > CurrentFormatVersion {
		return nil, fmt.Errorf("volume %s has format version %d, this build reads up to %d; upgrade cairn: %w",
			s.Name, s.FormatVersion, CurrentFormatVersion, base.ErrNotSupported)
	}
	m := &Meta{
		store: store, opts: opts, log: opts.Logger,
		opened:   make(map[base.Ino]int),
		releases: make(map[base.Ino]bool),
		inflight: make(map[uint64]bool),
		lost:     make(map[uint64]bool),
		deletes:  make(chan struct{}, 1),
		now:      func() int64 { return time.Now().UnixNano() },
	}
	m.settings.Store(&s)
	m.profile = kv.ProfileOf(store)
	m.accel = chooseAccelerators(m.profile, opts)
	m.contention.off = m.profile.SingleWriter
	if m.accel.LatestCache {
		if err := m.openLatestCache(ctx); err != nil {
			return nil, err
		}
		if m.lc == nil {
			// The store would not be observed after all: choose as
			// for a store others write.
			p := m.profile
			p.Observable = false
			m.accel = chooseAccelerators(p, opts)
		}
	}
	if m.accel.MemoryHolds {
		m.holdToucher, m.accel.MemoryHolds = store.(kv.Toucher)
	}
	if m.accel.ListingCache > 0 {
		m.listings = newListingCache(m.accel.ListingCache)
	}
	if m.accel.GroupCommit {
		m.group = &committer{}
	}
	if st, ok := store.(kv.Starter); ok && m.accel.StartAhead {
		// Lookups may start the transaction of the create that usually
		// follows them (startahead.go).
		m.ahead = &aheadState{starter: st, shards: &m.shards, waiting: make(map[aheadKey]*parked), absent: make(map[aheadKey]bool)}
	} else {
		m.accel.StartAhead = false
	}
	if m.accel.Leases {
		m.leases = newLeaseState()
		m.spec = newSpecCache()
		if m.accel.WriteBack {
			m.wb = newWbLog()
		}
	}
	if !opts.ReadOnly {
		if err := m.releaseDeadSessions(ctx); err != nil {
			m.closeLatestCache()
			return nil, fmt.Errorf("releasing holds of dead sessions: %w", err)
		}
	}
	if m.holdToucher != nil {
		if err := m.destroyUnheldOrphans(ctx); err != nil {
			m.closeLatestCache()
			return nil, fmt.Errorf("destroying unlinked files left open: %w", err)
		}
	}
	return m, nil
}

// Settings returns the volume's settings as last read: at Open, then at
// each heartbeat, so that a change another client made
// (ChangeSettings) reaches this one within a heartbeat.
func (m *Meta) Settings() Settings { return *m.settings.Load() }

// Store returns the kv.Store; the caller of Open still owns it.
func (m *Meta) Store() kv.Store { return m.store }

// Close closes the client's session (if any), releasing its holds. It does
// not close the store. Operations after Close fail with kv.ErrClosed.
func (m *Meta) Close() error {
	m.mu.Lock()
	sid := m.sid
	m.mu.Unlock()
	var err error
	if sid != 0 {
		err = m.CloseSession(context.Background())
	} else {
		m.idMu.Lock()
		m.renew = false // no session to renew after Close
		m.idMu.Unlock()
	}
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	if m.ahead != nil {
		m.ahead.close()
	}
	m.stopLeases()
	m.closeLatestCache()
	return err
}

// closeLatestCache stops the cache's observer.
func (m *Meta) closeLatestCache() {
	if m.stopLatest != nil {
		m.stopLatest()
	}
}

// Sync makes committed metadata durable (kv.Store.Sync).
// With write-back, it first commits the log, and reports (once) a change
// acknowledged earlier that could not be committed.
func (m *Meta) Sync(ctx context.Context) error {
	if err := m.wbBarrier(ctx); err != nil {
		return err
	}
	if err := m.wbTakeError(); err != nil {
		return err
	}
	return m.store.Sync(ctx)
}

func (m *Meta) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// update runs fn in a read-write transaction of a file-system mutation.
func (m *Meta) update(ctx context.Context, fn func(t *wtx) error) error {
	if m.opts.ReadOnly {
		return base.ErrReadOnly
	}
	return m.rawUpdate(ctx, fn)
}

// rawUpdate is update without the read-only check (session bookkeeping).
func (m *Meta) rawUpdate(ctx context.Context, fn func(t *wtx) error) error {
	if m.isClosed() {
		return kv.ErrClosed
	}
	// A change of a directory another client leases waits for it.
	return m.retryLeased(ctx, func() error { return m.updateIn(ctx, nil, 0, fn) })
}

// updateIn is rawUpdate, whose first attempt runs in st if that is not
// nil (a transaction a lookup started: startahead.go), with usage shard shard,
// which the caller holds. Other attempts take a shard from m.shards.
func (m *Meta) updateIn(ctx context.Context, st kv.Started, shard byte, fn func(t *wtx) error) error {
	err := m.updateInOnce(ctx, st, shard, fn)
	if errors.Is(err, errWbPending) {
		// It read whether a fresh inode is held while the write-back log
		// changed that inode (op.decidingHeld): run again after the log,
		// with the log held so that no change joins it meanwhile.
		w := m.wb
		w.mu.Lock()
		defer w.mu.Unlock()
		if err := m.wbCommitLocked(ctx); err != nil {
			return err
		}
		err = m.updateInOnce(context.WithValue(ctx, wbFlusherKey{}, true), nil, 0, fn)
	}
	return err
}

// updateInOnce is updateIn without the second run.
func (m *Meta) updateInOnce(ctx context.Context, st kv.Started, shard byte, fn func(t *wtx) error) error {
	// A started transaction holds one of the store's connections, which
	// the log's commit may need: it is given back before any wait for the
	// log (as many creates as the pool has connections, each in its
	// lookup's transaction, waited for ever for a commit that waited for
	// a connection).
	abandon := func() {
		if st != nil {
			st.Abandon()
			st = nil
		}
	}
	if err := m.wbBarrierFreeing(ctx, abandon); err != nil {
		abandon()
		return err
	}
	queued := false
	touched := m.newTouchLog()
	var last *wtx
	lease := shardLease{p: &m.shards}
	defer lease.done()
	ctx, change := m.queueOnDir(ctx)
	flusher := m.wb != nil && isWbFlusher(ctx)
	run := func(tx kv.Txn) error {
		change.attempt()
		if st == nil || last != nil {
			shard = lease.next()
		}
		t := m.newWtx(tx, shard, m.lc, touched)
		t.flusher = flusher
		last = t
		err := fn(t)
		queued = t.deletesQueued
		return err
	}
	update := m.store.Update
	if st != nil {
		update = st.Update
	}
	err := update(ctx, run)
	var written map[base.Ino]base.Attr
	if last != nil {
		written = last.dirAttrs
	}
	m.updated(touched, written, queued, err)
	m.wbForget(touched)
	return err
}

// newTouchLog returns a log of the records an update writes, for the
// listing cache; nil when it is off.
func (m *Meta) newTouchLog() *touchLog {
	if m.listings == nil && m.leases == nil {
		return nil
	}
	return &touchLog{keys: m.wb != nil}
}

// newWtx returns the transaction state of one attempt of an update over
// tx, writing usage shard shard.
func (m *Meta) newWtx(tx kv.Txn, shard byte, lc *latestCache, touched *touchLog) *wtx {
	return &wtx{Txn: tx, shard: shard, epochSeen: &m.lastEpoch, epochGuess: m.lastEpoch.Load(),
		txnAccel: txnAccel{lc: lc, touched: touched, leaseCheck: m.lc == nil, leaseSid: m.sessionID()}}
}

// updated does what follows an update, whatever its outcome err: the
// listing cache learns what it wrote (touched; written, the directory
// attributes of its last attempt), and the deleter wakes if it queued
// slice deletes and committed.
func (m *Meta) updated(touched *touchLog, written map[base.Ino]base.Attr, queued bool, err error) {
	if touched != nil && m.listings != nil {
		// Whatever the outcome (it may be unknown): an attempt may have
		// committed.
		m.listings.touched(touched.inos, touched.names)
		m.listings.committed(touched.inos, written, err)
	}
	if touched != nil && m.leases != nil {
		for _, dir := range m.leases.committed(touched.names, touched.inos, written, err) {
			if err == nil && slices.Contains(touched.unleased, dir) {
				m.leases.forget(dir) // the change deleted the lease record itself (rmdir)
				continue
			}
			go m.releaseLease(context.Background(), dir, false)
		}
	}
	if err == nil && queued {
		m.signalDeletes()
	}
}

// looseView runs fn where each read may see a different moment (the
// store's kv.LooseViewer, which is cheaper on a server), for lookups whose
// reads need no common snapshot; else a View.
func (m *Meta) looseView(ctx context.Context, fn func(r kv.Reader) error) error {
	if m.isClosed() {
		return kv.ErrClosed
	}
	if m.lc != nil {
		// First from the cache alone: most lookups and getattrs find
		// everything there and need no view of the store.
		if err := fn(cachedReader{cacheOnly{}, m.lc, nil}); !errors.Is(err, errNeedStore) {
			return err
		}
		// The generations are taken before the store's view begins.
		inner, gens := fn, m.lc.begin()
		fn = func(r kv.Reader) error { return inner(cachedReader{r, m.lc, gens}) }
	}
	if lv, ok := m.store.(kv.LooseViewer); ok {
		return lv.ViewLoose(ctx, fn)
	}
	return m.store.View(ctx, fn)
}

// readTxn lets read-only code use wtx's read caches over a Reader; it
// never writes.
type readTxn struct{ kv.Reader }

func (readTxn) Set(_, _ []byte) { panic("meta: write through a read-only view") }
func (readTxn) Delete(_ []byte) { panic("meta: write through a read-only view") }

// Firsts passes the reader's kv.FirstReader ability on.
func (r readTxn) Firsts(ranges []kv.Range) ([]kv.Pair, error) { return kv.Firsts(r.Reader, ranges) }

func (m *Meta) view(ctx context.Context, fn func(r kv.Reader) error) error {
	if m.isClosed() {
		return kv.ErrClosed
	}
	return m.store.View(ctx, fn)
}

// viewAgain is view for an fn that can run again (it resets what it
// collects when it starts): a view whose connection broke after fn had
// read (kv/postgres runs fn only once then) is run again, at most twice;
// each run waits out an outage as long as the store's policy allows. Long
// readers that page through many views (dump) use it, so that a server
// restart in the middle does not end them.
func (m *Meta) viewAgain(ctx context.Context, fn func(r kv.Reader) error) error {
	err := m.view(ctx, fn)
	for try := 0; try < 2 && errors.Is(err, kv.ErrUnavailable) && ctx.Err() == nil; try++ {
		m.log.Warn("a view lost its store; reading again", "err", err)
		err = m.view(ctx, fn)
	}
	return err
}

// allocIno hands out a fresh inode number, reserving a batch when needed.
func (m *Meta) allocIno(ctx context.Context) (base.Ino, error) {
	id, err := m.alloc(ctx, counterNextInode, &m.nextIno, &m.maxIno, m.opts.InodeBatch)
	if err == nil && m.lc != nil {
		m.lc.markFresh(base.Ino(id))
	}
	return base.Ino(id), err
}

// NewSliceID returns a fresh, never used slice id. The id counts as in
// flight (InFlightSlices) until WriteSlice or CompactChunk commits it or the
// caller calls ForgetSlice. The caller may commit it with base.InlineBit
// set (a small slice whose block it put in the metadata engine).
func (m *Meta) NewSliceID(ctx context.Context) (uint64, error) {
	return m.alloc(ctx, counterNextSlice, &m.nextSlic, &m.maxSlic, m.opts.SliceBatch)
}

// CompactThreshold is the slice count above which WriteSlice reports a
// chunk due for compaction.
func (m *Meta) CompactThreshold() int { return m.opts.CompactThreshold }

// ForgetSlice ends the in-flight state of a slice id the caller abandons.
func (m *Meta) ForgetSlice(id uint64) {
	id = base.SliceNumber(id)
	m.idMu.Lock()
	delete(m.inflight, id)
	delete(m.lost, id)
	m.idMu.Unlock()
}

// InFlightSlices returns (a copy of) the slice ids this client handed out
// and has not yet seen committed or forgotten: gc must not delete their
// blocks. The ids are as handed out, without base.InlineBit (look up
// base.SliceNumber of a stored id).
func (m *Meta) InFlightSlices() map[uint64]bool {
	m.idMu.Lock()
	defer m.idMu.Unlock()
	out := make(map[uint64]bool, len(m.inflight))
	for id := range m.inflight {
		out[id] = true
	}
	return out
}

func (m *Meta) alloc(ctx context.Context, kind byte, next, max *uint64, batch uint64) (uint64, error) {
	m.idMu.Lock()
	defer m.idMu.Unlock()
	if *next >= *max && kind == counterNextInode && m.inoAhead[1] > m.inoAhead[0] {
		*next, *max = m.inoAhead[0], m.inoAhead[1]
		m.inoAhead = [2]uint64{}
	}
	if *next >= *max {
		start, err := m.reserveIDs(ctx, kind, batch)
		if err != nil {
			return 0, err
		}
		*next, *max = start, start+batch
	}
	id := *next
	*next++
	if kind == counterNextSlice {
		// In flight from the moment it is handed out, under idMu: a
		// session declared dead meanwhile finds it (Heartbeat).
		m.inflight[id] = true
		if m.renew {
			m.lost[id] = true
		}
	}
	if kind == counterNextInode && m.wb != nil && !m.inoAheadRuns && m.inoAhead[1] == 0 && *max-*next < batch/4 {
		// A client writing back creates at thousands a second: the next
		// range is reserved before this one ends, off their path.
		m.inoAheadRuns = true
		go m.reserveInodesAhead(batch)
	}
	return id, nil
}

// reserveInodesAhead reserves the inode range alloc takes when the
// current one ends.
func (m *Meta) reserveInodesAhead(batch uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start, err := m.reserveIDs(ctx, counterNextInode, batch)
	m.idMu.Lock()
	defer m.idMu.Unlock()
	m.inoAheadRuns = false
	if err == nil {
		m.inoAhead = [2]uint64{start, start + batch}
	}
}

// takeIDs advances the counter kind by batch in t and returns the first
// of the ids it passed.
func takeIDs(t *wtx, kind byte, batch uint64) (uint64, error) {
	n, err := counter(t, kind)
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, fmt.Errorf("id counter %c missing: %w", kind, base.ErrIO)
	}
	t.Set(counterKey(kind), u64(nil, n+batch))
	return n, nil
}

// takeSliceIDs is takeIDs for slice ids of session sid (0: none). Until
// they are committed or abandoned, gc of any client must leave their
// blocks alone: the range is recorded with the session.
func takeSliceIDs(t *wtx, sid, batch uint64) (uint64, error) {
	n, err := takeIDs(t, counterNextSlice, batch)
	if err == nil && sid != 0 {
		t.Set(reservedKey(sid, n), u64(nil, n+batch))
	}
	return n, err
}

// reserveIDs reserves batch ids of the counter kind and returns the
// first (idMu held for slices: m.reserved). The counter is no record
// the write-back log writes: its transaction does not wait for the log
// (wbBarrier).
func (m *Meta) reserveIDs(ctx context.Context, kind byte, batch uint64) (uint64, error) {
	var start uint64
	sid := m.sessionID()
	ctx = context.WithValue(ctx, wbNoBarrierKey{}, true)
	err := m.update(ctx, func(t *wtx) (err error) {
		if kind == counterNextSlice {
			start, err = takeSliceIDs(t, sid, batch)
		} else {
			start, err = takeIDs(t, kind, batch)
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("reserving ids: %w", err)
	}
	if kind == counterNextSlice && sid != 0 {
		m.reserved = append(m.reserved, [2]uint64{start, start + batch})
	}
	return start, nil
}
