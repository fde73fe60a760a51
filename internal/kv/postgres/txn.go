package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cairnfs/cairn/internal/kv"
)

// Scan pages: the first is small, for scans that stop after a few keys;
// each next one is twice as big, up to the largest.
const (
	firstPage = 16
	maxPage   = 256
)

// rollbackTimeout bounds a background ROLLBACK; a connection that does not
// answer in time is closed instead.
const rollbackTimeout = 5 * time.Second

// txn is the transaction of one Update (rw) or View. It starts on the
// server with its first read, so a transaction that reads nothing costs no
// round trip. Writes are buffered until commit, and reads merge them in.
type txn struct {
	s  *Store
	o  *op
	rw bool
	// loose: reads run outside a server transaction (ViewLoose).
	loose bool
	// exclusive: an UpdateExclusive transaction (READ COMMITTED).
	exclusive bool

	mu     sync.Mutex     // guards the fields below, and the connection
	conn   *pgxpool.Conn  // nil until the first statement
	began  bool           // the server transaction is open
	err    error          // the first failure: the transaction is void
	writes map[string]put // buffered Set and Delete
	// seen are the keys an Update read from the server: a Set of one of
	// them is sent as an UPDATE, so that it conflicts with a concurrent
	// DELETE of the row (an upsert would quietly insert it again).
	seen map[string]struct{}
	// pre holds what Preread read, by kv.RangeKey.
	pre map[string]kv.Pair
	// locked: the advisory lock of kv.Serialize was sent on conn, so the
	// connection may hold it until serialUnlockSQL runs on it.
	locked bool
}

// serialLock returns the advisory lock an update marked by kv.Serialize
// takes before its BEGIN: a hash of the store's table and the key, so
// that the volumes of one database do not queue on each other's keys.
// Views, exclusive updates and a store's own single-statement
// transactions take none.
func (tx *txn) serialLock() (int64, bool) {
	key, ok := kv.SerializeKey(tx.o.ctx)
	if !ok || !tx.rw || tx.exclusive || tx.loose {
		return 0, false
	}
	h := fnv.New64a()
	h.Write([]byte(tx.s.opts.Table))
	h.Write([]byte{0})
	h.Write(key)
	return int64(h.Sum64()), true
}

// put is a buffered write: a value, or a deletion.
type put struct {
	value []byte // never nil for a Set
	del   bool
}

// query runs sql on the transaction's connection, calling read with its
// rows; read may be called more than once, each time with all the rows.
//
// The first statement starts the server transaction: BEGIN and sql go in
// one round trip. Until that succeeds fn has read nothing of the
// transaction, so a connection that fails or cannot be had is replaced
// here, for as long as the outage lasts. Later failures void the
// transaction (tx.err). The caller holds tx.mu.
func (tx *txn) query(sql string, args []any, read func(pgx.Rows) error) error {
	if tx.err != nil {
		return tx.err
	}
	tx.s.reads.Add(1)
	ctx := tx.o.ctx
	if tx.began {
		rows, _ := tx.conn.Query(ctx, sql, args...)
		if err := readRows(rows, read); err != nil {
			tx.err = tx.s.failure(ctx, err, tx.conn)
		}
		return tx.err
	}
	for {
		err := tx.begin(sql, args, read)
		if err == nil {
			return nil
		}
		ferr := tx.s.failure(ctx, err, tx.conn)
		tx.drop()
		var lost *lostError
		if errors.As(ferr, &lost) {
			ferr = tx.o.wait(lost)
		}
		if ferr != nil {
			tx.err = ferr
			return ferr
		}
	}
}

// begin acquires a connection and sends BEGIN with the first statement.
func (tx *txn) begin(sql string, args []any, read func(pgx.Rows) error) error {
	ctx := tx.o.ctx
	if tx.conn == nil {
		c, err := tx.s.pool.Acquire(ctx)
		if err != nil {
			return err
		}
		tx.conn = c
	}
	if tx.loose {
		rows, _ := tx.conn.Query(ctx, sql, args...)
		err := readRows(rows, read)
		if err == nil {
			tx.began = true
		}
		return err
	}
	var b pgx.Batch
	lock, serial := tx.serialLock()
	if serial {
		// Queued behind the transactions that hold it, before the
		// snapshot is taken: it does not see them as concurrent. The
		// statements of a batch share an implicit transaction until one
		// ends it: COMMIT ends the lock's, so that BEGIN starts a new
		// one (which may then set its isolation level).
		b.Queue(serialLockSQL, lock)
		b.Queue(commitSQL)
		tx.locked = true // sent: held or not, drop gives it back
	}
	switch {
	case tx.exclusive:
		b.Queue(beginExclusive)
	case tx.rw:
		b.Queue(beginUpdate)
	default:
		b.Queue(beginView)
	}
	b.Queue(sql, args...)
	br := tx.conn.SendBatch(ctx, &b)
	var err error
	if serial {
		if _, err = br.Exec(); err == nil {
			_, err = br.Exec()
		}
	}
	if err == nil {
		_, err = br.Exec()
	}
	if err == nil {
		rows, _ := br.Query()
		err = readRows(rows, read)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		tx.began = true
	}
	return err
}

// readRows calls read with rows, then closes them and returns the first
// error.
func readRows(rows pgx.Rows, read func(pgx.Rows) error) error {
	err := read(rows)
	rows.Close()
	if err == nil {
		err = rows.Err()
	}
	return err
}

// drop ends the transaction's use of its connection without committing.
// An open server transaction is rolled back in the background, since
// nothing the caller waits for depends on it; a broken connection goes
// back to the pool, which closes it.
//
// A connection that may hold the advisory lock of kv.Serialize gives it
// back first, or is closed: the pool must never hand out a connection
// holding one, or the updates queued on it would wait forever.
func (tx *txn) drop() {
	c := tx.conn
	locked := tx.locked
	tx.conn, tx.began, tx.locked = nil, false, false
	if c == nil {
		return
	}
	idle := c.Conn().PgConn().TxStatus() == 'I'
	if c.Conn().IsClosed() || idle && !locked {
		c.Release()
		return
	}
	tx.s.inflight.Add(1) // the operation holds one too, so Close is not yet waiting
	go func() {
		defer tx.s.inflight.Done()
		ctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
		defer cancel()
		if !idle {
			_, _ = c.Exec(ctx, rollbackSQL) // on failure, Release closes the connection
		}
		if locked {
			if _, err := c.Exec(ctx, serialUnlockSQL); err != nil {
				_ = c.Conn().Close(ctx)
			}
		}
		c.Release()
	}()
}

// commit commits the transaction: its buffered writes and COMMIT go in one
// round trip (with BEGIN if nothing was read). A transaction that wrote
// nothing commits to learn whether its reads were serializable, or costs
// nothing if it read nothing either.
//
// The commit is not cancelled by the caller's context, which could leave
// its outcome unknown; the server's answer is awaited for OutageTimeout.
// If the connection fails once the commit may have reached the server, the
// outcome is unknown and commit fails with kv.ErrUnknownOutcome rather
// than let Update run fn again.
func (tx *txn) commit() error {
	s := tx.s
	if len(tx.writes) == 0 && !tx.began {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(tx.o.ctx), s.opts.OutageTimeout)
	defer cancel()
	var b pgx.Batch
	if len(tx.writes) > 0 {
		if !tx.began {
			b.Queue(beginUpdate)
		}
		var w writeSet
		for k, p := range tx.writes {
			_, seen := tx.seen[k]
			w.add([]byte(k), p, seen)
		}
		w.queue(s, &b)
	}
	b.Queue(commitSQL)
	at := b.Len() - 1
	if tx.locked {
		// Given back in the same round trip. If a statement before it
		// fails, the rest are skipped and drop gives the lock back.
		b.Queue(serialUnlockSQL)
	}
	if tx.conn == nil {
		c, err := s.pool.Acquire(tx.o.ctx)
		if err != nil {
			return s.failure(tx.o.ctx, err, nil)
		}
		tx.conn = c
	}
	tag, err := sendAll(ctx, tx.conn, &b, at)
	if err == nil {
		tx.locked = false
		if tag.String() != "COMMIT" {
			// COMMIT of a transaction that had failed rolls it back.
			return fmt.Errorf("%s: COMMIT answered %q: the transaction was rolled back", s.name, tag)
		}
		return nil
	}
	return s.sendFailure(ctx, err, tx.conn, len(tx.writes) == 0, "a commit")
}

// sendFailure is the error of a batch that ends a transaction (what:
// "a commit"), which failed with err on conn once sent. If the server
// refused the transaction, or never saw it (nothing was sent, or only the
// preparation of statements new to the connection), or it wrote nothing
// (nothing), the outcome is known: as failure. Otherwise the connection
// was lost with the batch on its way: kv.ErrUnknownOutcome.
func (s *Store) sendFailure(ctx context.Context, err error, conn *pgxpool.Conn, nothing bool, what string) error {
	var pe *pgconn.PgError
	var prep pgx.ErrPreprocessingBatch
	if errors.As(err, &pe) || pgconn.SafeToRetry(err) || errors.As(err, &prep) || nothing {
		return s.failure(ctx, err, conn)
	}
	s.log.Error("connection lost during "+what+": its outcome is unknown", "server", s.where, "err", err)
	return fmt.Errorf("%s: %w: %w", s.name, kv.ErrUnknownOutcome, err)
}

// writeSet sorts a commit's writes by the statement that makes them.
type writeSet struct {
	dels, keys, values, ukeys, uvalues [][]byte
	// touched are the prefixes of kv.Write.Touch.
	touched [][]byte
}

// touch adds a kv.Write.Touch of prefix.
func (w *writeSet) touch(prefix []byte) { w.touched = append(w.touched, prefix) }

// add adds a write of key; seen: the transaction read key from the
// server, so a Set of it is an UPDATE (see txn.seen).
func (w *writeSet) add(key []byte, p put, seen bool) {
	switch {
	case p.del:
		w.dels = append(w.dels, key)
	case seen:
		w.ukeys = append(w.ukeys, key)
		w.uvalues = append(w.uvalues, p.value)
	default:
		w.keys = append(w.keys, key)
		w.values = append(w.values, p.value)
	}
}

// queue queues the statements of the writes on b and returns how many.
func (w *writeSet) queue(s *Store, b *pgx.Batch) int {
	n := 0
	if len(w.dels) > 0 {
		b.Queue(s.sql.del, w.dels)
		n++
	}
	if len(w.ukeys) > 0 {
		b.Queue(s.sql.update, w.ukeys, w.uvalues)
		n++
	}
	if len(w.keys) > 0 {
		b.Queue(s.sql.upsert, w.keys, w.values)
		n++
	}
	if len(w.touched) > 0 {
		ends := make([][]byte, len(w.touched))
		for i, p := range w.touched {
			ends[i] = kv.PrefixEnd(p)
		}
		b.Queue(s.sql.touch, w.touched, ends)
		n++
	}
	return n
}

// sendAll sends b on conn and reads every result. It returns the command
// tag of statement at, or the first error up to it. Once the result of
// statement at is in (a COMMIT), an error that follows (a statement after
// it failed, or the FATAL message of a server shutting down, which
// arrives after the answer to the batch's last statement) does not undo
// it and is not reported: the caller must not run a committed
// transaction again. The connection is then closed, which also gives back
// any advisory lock the failed statement was to release.
func sendAll(ctx context.Context, conn *pgxpool.Conn, b *pgx.Batch, at int) (pgconn.CommandTag, error) {
	br := conn.SendBatch(ctx, b)
	var tag pgconn.CommandTag
	for i := range b.Len() {
		t, err := br.Exec()
		if err != nil {
			br.Close()
			if i > at {
				_ = conn.Conn().Close(ctx)
				return tag, nil
			}
			return tag, err
		}
		if i == at {
			tag = t
		}
	}
	br.Close()
	return tag, nil
}

// Get implements kv.Reader.
func (tx *txn) Get(key []byte) ([]byte, error) {
	tx.mu.Lock()
	defer tx.mu.Unlock()
	if p, ok := tx.writes[string(key)]; ok {
		if p.del {
			return nil, nil
		}
		return append([]byte{}, p.value...), nil
	}
	var value []byte
	err := tx.query(tx.s.sql.get, []any{key}, func(rows pgx.Rows) error {
		value = nil // read may be called again, on a new connection
		for rows.Next() {
			if err := rows.Scan(&value); err != nil {
				return err
			}
			if value == nil {
				value = []byte{}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if value != nil {
		tx.saw(key)
	}
	return value, nil
}

// Set implements kv.Txn.
func (tx *txn) Set(key, value []byte) {
	tx.write(key, put{value: append([]byte{}, value...)})
}

// Delete implements kv.Txn.
func (tx *txn) Delete(key []byte) {
	tx.write(key, put{del: true})
}

func (tx *txn) write(key []byte, p put) {
	tx.mu.Lock()
	defer tx.mu.Unlock()
	if !tx.rw {
		if tx.err == nil {
			tx.err = fmt.Errorf("%s: write in a View", tx.s.name)
		}
		return
	}
	if tx.writes == nil {
		tx.writes = make(map[string]put)
	}
	tx.writes[string(key)] = p
}

// saw records that an Update read key from the server. Called with tx.mu
// held.
func (tx *txn) saw(key []byte) {
	if !tx.rw {
		return
	}
	if tx.seen == nil {
		tx.seen = make(map[string]struct{})
	}
	tx.seen[string(key)] = struct{}{}
}

// entry is a key and its value, or a buffered deletion of the key.
type entry struct {
	key, value []byte
	del        bool
}

// Scan implements kv.Reader. It merges the buffered writes in [start, end)
// with the server's rows, which it reads a page at a time, so a scan that
// fn stops early reads little more than it used. fn is called with no
// statement running, so it may call Get.
func (tx *txn) Scan(start, end []byte, reverse bool, fn func(key, value []byte) bool) error {
	if end != nil && bytes.Compare(end, start) <= 0 {
		return nil
	}
	tx.mu.Lock()
	buffered := tx.buffered(start, end, reverse)
	tx.mu.Unlock()
	it := &rowIter{
		tx:      tx,
		start:   append([]byte{}, start...), // never nil: nil would be NULL
		end:     bytes.Clone(end),
		reverse: reverse,
		limit:   firstPage,
	}
	row, ok, err := it.next()
	for err == nil {
		// The buffered write comes first, or replaces the row with its
		// key; a row is only valid until the next call of it.next.
		var e entry
		useBuffered, nextRow := false, ok
		if len(buffered) > 0 {
			c := -1
			if ok {
				c = bytes.Compare(buffered[0].key, row.key)
				if reverse {
					c = -c
				}
			}
			useBuffered, nextRow = c <= 0, c >= 0
		}
		switch {
		case useBuffered:
			e, buffered = buffered[0], buffered[1:]
		case ok:
			e = row
		default:
			return nil
		}
		if !e.del && !fn(e.key, e.value) {
			return nil
		}
		if nextRow {
			row, ok, err = it.next()
		}
	}
	return err
}

// buffered returns the buffered writes in [start, end), sorted in scan
// order. The caller holds tx.mu.
func (tx *txn) buffered(start, end []byte, reverse bool) []entry {
	var out []entry
	for k, p := range tx.writes {
		if k < string(start) || end != nil && k >= string(end) {
			continue
		}
		out = append(out, entry{key: []byte(k), value: p.value, del: p.del})
	}
	slices.SortFunc(out, func(a, b entry) int { return bytes.Compare(a.key, b.key) })
	if reverse {
		slices.Reverse(out)
	}
	return out
}

// rowIter reads the server's rows in [start, end) in pages, narrowing the
// range past each page it reads.
type rowIter struct {
	tx         *txn
	start, end []byte // what is left to read; end nil for no bound
	reverse    bool
	limit      int // size of the next page
	done       bool
	page       []entry
	arena      []byte // the page's keys and values
	i          int
}

// next returns the next row; it is valid until the call after next.
func (it *rowIter) next() (entry, bool, error) {
	if it.i == len(it.page) {
		if it.done {
			return entry{}, false, nil
		}
		if err := it.fetch(); err != nil {
			return entry{}, false, err
		}
		if len(it.page) == 0 {
			return entry{}, false, nil
		}
	}
	it.i++
	return it.page[it.i-1], true, nil
}

func (it *rowIter) fetch() error {
	sql := &it.tx.s.sql
	var query string
	var args []any
	switch {
	case !it.reverse && it.end == nil:
		query, args = sql.scanOpen, []any{it.start, it.limit}
	case !it.reverse:
		query, args = sql.scan, []any{it.start, it.end, it.limit}
	case it.end == nil:
		query, args = sql.rscanOpen, []any{it.start, it.limit}
	default:
		query, args = sql.rscan, []any{it.start, it.end, it.limit}
	}
	type span struct{ k0, k1, v1 int }
	var spans []span
	it.page, it.i = it.page[:0], 0
	it.tx.mu.Lock()
	err := it.tx.query(query, args, func(rows pgx.Rows) error {
		it.arena, spans = it.arena[:0], spans[:0] // read may be called again
		for rows.Next() {
			var k, v pgtype.DriverBytes
			if err := rows.Scan(&k, &v); err != nil {
				return err
			}
			k0 := len(it.arena)
			it.arena = append(append(it.arena, k...), v...)
			spans = append(spans, span{k0, k0 + len(k), len(it.arena)})
		}
		return nil
	})
	if err == nil {
		for _, sp := range spans {
			it.tx.saw(it.arena[sp.k0:sp.k1])
		}
	}
	it.tx.mu.Unlock()
	if err != nil {
		return err
	}
	for _, sp := range spans {
		a := it.arena
		it.page = append(it.page, entry{key: a[sp.k0:sp.k1:sp.k1], value: a[sp.k1:sp.v1:sp.v1]})
	}
	if len(it.page) < it.limit {
		it.done = true
		return nil
	}
	last := it.page[len(it.page)-1].key
	if it.reverse {
		it.end = append(it.end[:0:0], last...)
	} else {
		it.start = append(append(it.start[:0:0], last...), 0) // the next key after last
	}
	it.limit = min(2*it.limit, maxPage)
	return nil
}

var _ kv.FirstReader = (*txn)(nil)

// Firsts implements kv.FirstReader: one statement reads the first row of
// every range (and its Follow). Ranges without an upper bound or with
// buffered writes in them, and follows with buffered writes in what they
// follow, are read by Scan instead (the merge is Scan's job); a range
// whose first possible key this transaction set needs no read, nor does
// one Preread read (in this transaction's snapshot, only its own writes
// could change the answer, and it has none there).
func (tx *txn) Firsts(ranges []kv.Range) ([]kv.Pair, error) {
	out := make([]kv.Pair, len(ranges))
	var server []kv.Range
	var idx, known []int
	for i, r := range ranges {
		tx.mu.Lock()
		clean := len(tx.writes) == 0 || len(tx.buffered(r.Start, r.End, false)) == 0
		w, written := tx.writes[string(r.Start)]
		var pre kv.Pair
		prefetched := false
		if tx.pre != nil { // most transactions: no key to build
			pre, prefetched = tx.pre[kv.RangeKey(r)]
		}
		tx.mu.Unlock()
		if written && !w.del && r.Follow == nil && (r.End == nil || bytes.Compare(r.Start, r.End) < 0) {
			// This transaction set the range's first possible key: no
			// read can find one before it (a counter of a group commit,
			// written by an earlier member).
			out[i] = kv.Pair{Key: bytes.Clone(r.Start), Value: bytes.Clone(w.value)}
			continue
		}
		if clean && r.End != nil && bytes.Compare(r.Start, r.End) < 0 {
			if prefetched {
				out[i] = clonePair(pre)
				known = append(known, i)
				continue
			}
			server = append(server, r)
			idx = append(idx, i)
			continue
		}
		ps, err := kv.Firsts(scanOnly{tx}, []kv.Range{r})
		if err != nil {
			return nil, err
		}
		out[i] = ps[0]
	}
	if len(server) > 0 {
		ps, err := tx.serverFirsts(server)
		if err != nil {
			return nil, err
		}
		for n, i := range idx {
			out[i] = ps[n]
		}
	}
	// A followed range is read on the server before this transaction's
	// writes in it are known: those are merged by Scan.
	var again []int
	tx.mu.Lock()
	for _, i := range append(idx, known...) {
		if ranges[i].Follow != nil && len(tx.writes) > 0 && out[i].Key != nil {
			if start, end, ok := ranges[i].Follow.Bounds(out[i].Value); ok && len(tx.buffered(start, end, false)) > 0 {
				again = append(again, i)
			}
		}
	}
	tx.mu.Unlock()
	for _, i := range again {
		start, end, _ := ranges[i].Follow.Bounds(out[i].Value)
		ps, err := kv.Firsts(scanOnly{tx}, []kv.Range{{Start: start, End: end}})
		if err != nil {
			return nil, err
		}
		out[i].Followed = &ps[0]
	}
	return out, nil
}

// Preread implements kv.Prereader: one statement reads the first rows of
// the ranges that Firsts would read on the server now, and keeps them for
// the Firsts calls that ask for them later.
func (tx *txn) Preread(ranges []kv.Range) error {
	var todo []kv.Range
	var keys []string
	seen := make(map[string]bool)
	// A range asked for both with and without a Follow is read once: the
	// followed read answers both.
	for _, r := range ranges {
		if r.Follow != nil {
			seen[kv.RangeKey(kv.Range{Start: r.Start, End: r.End})] = true
		}
	}
	tx.mu.Lock()
	for _, r := range ranges {
		if r.End == nil || bytes.Compare(r.Start, r.End) >= 0 {
			continue
		}
		k := kv.RangeKey(r)
		if _, ok := tx.pre[k]; ok || seen[k] {
			continue
		}
		if len(tx.writes) > 0 && len(tx.buffered(r.Start, r.End, false)) > 0 {
			continue
		}
		seen[k] = true
		todo = append(todo, r)
		keys = append(keys, k)
	}
	tx.mu.Unlock()
	if len(todo) == 0 {
		return nil
	}
	ps, err := tx.serverFirsts(todo)
	if err != nil {
		return err
	}
	tx.mu.Lock()
	defer tx.mu.Unlock()
	if tx.pre == nil {
		tx.pre = make(map[string]kv.Pair, len(todo))
	}
	for i, k := range keys {
		tx.pre[k] = ps[i]
		if todo[i].Follow != nil {
			plain := kv.RangeKey(kv.Range{Start: todo[i].Start, End: todo[i].End})
			if _, ok := tx.pre[plain]; !ok {
				tx.pre[plain] = kv.Pair{Key: ps[i].Key, Value: ps[i].Value}
			}
		}
	}
	return nil
}

// clonePair returns a copy of p the caller owns.
func clonePair(p kv.Pair) kv.Pair {
	q := kv.Pair{Key: bytes.Clone(p.Key), Value: bytes.Clone(p.Value)}
	if p.Followed != nil {
		f := clonePair(*p.Followed)
		q.Followed = &f
	}
	return q
}

// serverFirsts reads the first row of every range (bounded, not empty)
// and of its Follow in one statement, and notes the keys seen.
func (tx *txn) serverFirsts(ranges []kv.Range) ([]kv.Pair, error) {
	out := make([]kv.Pair, len(ranges))
	sql, args, follow := tx.s.firstsStatement(ranges)
	tx.mu.Lock()
	defer tx.mu.Unlock()
	err := tx.query(sql, args, func(rows pgx.Rows) error {
		return tx.s.scanFirsts(rows, ranges, follow, out)
	})
	if err != nil {
		return nil, err
	}
	for i := range out {
		if out[i].Key != nil {
			tx.saw(out[i].Key)
		}
		if f := out[i].Followed; f != nil && f.Key != nil {
			tx.saw(f.Key)
		}
	}
	return out, nil
}

// firstsStatement returns the statement that reads the first row of every
// range and of its Follow, its arguments, and whether it follows.
func (s *Store) firstsStatement(ranges []kv.Range) (sql string, args []any, follow bool) {
	starts, ends := make([][]byte, len(ranges)), make([][]byte, len(ranges))
	pfxs, sss, ess := make([][]byte, len(ranges)), make([][]byte, len(ranges)), make([][]byte, len(ranges))
	offs, lens := make([]int32, len(ranges)), make([]int32, len(ranges))
	for i, r := range ranges {
		starts[i], ends[i] = append([]byte{}, r.Start...), r.End
		f := r.Follow
		if f == nil {
			f = &kv.Follow{}
		} else {
			follow = true
		}
		offs[i], lens[i] = int32(f.Offset), int32(f.Length)
		pfxs[i] = append([]byte{}, f.Prefix...)
		sss[i] = append([]byte{}, f.StartSuffix...)
		ess[i] = append([]byte{}, f.EndSuffix...)
	}
	if follow {
		return s.sql.firstsFollow, []any{starts, ends, offs, lens, pfxs, sss, ess}, true
	}
	return s.sql.firsts, []any{starts, ends}, false
}

// scanFirsts fills out, one pair per range, from the rows of
// firstsStatement(ranges). It may be called again with new rows (a
// retry on a new connection).
func (s *Store) scanFirsts(rows pgx.Rows, ranges []kv.Range, follow bool, out []kv.Pair) error {
	clear(out)
	for rows.Next() {
		var n int64
		var k, v, gk, gv []byte
		dest := []any{&n, &k, &v}
		if follow {
			dest = append(dest, &gk, &gv)
		}
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		if n < 1 || int(n) > len(ranges) {
			return fmt.Errorf("%s: range number %d out of %d", s.name, n, len(ranges))
		}
		if v == nil {
			v = []byte{}
		}
		i := n - 1
		out[i] = kv.Pair{Key: k, Value: v}
		if ranges[i].Follow != nil {
			f := kv.Pair{}
			if gk != nil {
				if gv == nil {
					gv = []byte{}
				}
				f = kv.Pair{Key: gk, Value: gv}
			}
			out[i].Followed = &f
		}
	}
	for i := range ranges {
		if ranges[i].Follow != nil && out[i].Followed == nil {
			out[i].Followed = &kv.Pair{}
		}
	}
	return nil
}

// scanOnly hides a txn's FirstReader ability, so kv.Firsts falls back to
// Scan (which merges buffered writes).
type scanOnly struct{ tx *txn }

func (s scanOnly) Get(key []byte) ([]byte, error) { return s.tx.Get(key) }
func (s scanOnly) Scan(start, end []byte, reverse bool, fn func(key, value []byte) bool) error {
	return s.tx.Scan(start, end, reverse, fn)
}
