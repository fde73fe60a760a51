package meta

// Directory quotas (docs/design/0008-directory-quotas.md).
//
// A quota on directory D limits the bytes (file lengths rounded up to 4
// KiB, as Usage counts them) and the inodes of D's tree, D included.
// Every inode names in its attribute the quota that counts it
// (Attr.Quota): the nearest directory at or above it that has one. A new
// inode inherits its parent's; a quota's record names the quota that
// encloses it (Up), so a charge walks a short chain of quotas, not the
// path to the root. Nested quotas all apply.
//
// Usage is counted in the same transaction as the change that causes it
// (usage.go's chargeInode, chargeBytes and uncharge), so it is exact after
// any crash. To keep concurrent writers of one tree from all writing one
// key, a quota's usage is split into shards, and each shard holds a grant:
// a part of the limit it may use without looking at the others. A charge
// reads and writes only its own shard while it stays within the shard's
// grant. Beyond it, the charge reads every shard and takes more of what
// no shard was granted (writing the record, so two such charges
// conflict); when nothing is left it takes back every other shard's
// unused grant (writing every shard, so it conflicts with every charge
// in flight) and fails with ErrQuota only if the true total would pass
// the limit. The sum of the grants never passes the limit, so neither
// does the usage: limits are exact, on every client at once.

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// Quota states.
const (
	quotaActive   = ""         // limits enforced
	quotaCounting = "counting" // being set: the tree's usage is still being counted
	quotaDeleting = "deleting" // being deleted: the tree is being handed to Up
)

// quotaRecord is the value of quotaKey.
type quotaRecord struct {
	Up        base.Ino `json:"up,omitempty"`     // the enclosing quota's directory (0: none)
	MaxBytes  uint64   `json:"bytes,omitempty"`  // 0: no byte limit
	MaxInodes uint64   `json:"inodes,omitempty"` // 0: no inode limit
	State     string   `json:"state,omitempty"`
	// Gen changes with every grant taken from the record, so that two
	// transactions handing out grants write a common key.
	Gen uint64 `json:"gen"`
}

func (r *quotaRecord) limit(dim int) uint64 {
	if r.State != quotaActive {
		return 0
	}
	if dim == dimBytes {
		return r.MaxBytes
	}
	return r.MaxInodes
}

// Dimensions of a quota's usage.
const (
	dimBytes  = 0
	dimInodes = 1
)

// unlimitedGrant is the grant of a dimension without a limit: no charge
// ever passes it.
const unlimitedGrant = math.MaxInt64 / 4

// maxQuotaDepth bounds a chain of nested quotas, against a cycle that a
// damaged store could hold.
const maxQuotaDepth = 4096

// quotaShard is the value of quotaShardKey.
type quotaShard struct {
	up    base.Ino
	used  [2]int64 // may go below zero: a shard counts deltas
	grant [2]int64 // at least used
}

const quotaShardLen = 8 + 4*8

func encodeQuotaShard(s *quotaShard) []byte {
	b := make([]byte, 0, quotaShardLen)
	b = u64(b, uint64(s.up))
	for d := range 2 {
		b = u64(b, uint64(s.used[d]))
		b = u64(b, uint64(s.grant[d]))
	}
	return b
}

func decodeQuotaShard(v []byte) (quotaShard, error) {
	var s quotaShard
	if len(v) != quotaShardLen {
		return s, fmt.Errorf("quota shard: %d bytes, want %d: %w", len(v), quotaShardLen, base.ErrIO)
	}
	be := binary.BigEndian
	s.up = base.Ino(be.Uint64(v))
	for d := range 2 {
		s.used[d] = int64(be.Uint64(v[8+16*d:]))
		s.grant[d] = int64(be.Uint64(v[16+16*d:]))
	}
	return s, nil
}

func decodeQuotaRecord(dir base.Ino, v []byte) (quotaRecord, error) {
	var r quotaRecord
	if err := json.Unmarshal(v, &r); err != nil {
		return r, fmt.Errorf("quota record of directory %d: %v: %w", dir, err, base.ErrIO)
	}
	if r.Up == dir {
		return r, fmt.Errorf("quota record of directory %d encloses itself: %w", dir, base.ErrIO)
	}
	return r, nil
}

// getQuotaRecord reads the record of the quota on dir (ok false: none).
func getQuotaRecord(r kv.Reader, dir base.Ino) (quotaRecord, bool, error) {
	v, err := r.Get(quotaKey(dir))
	if err != nil || v == nil {
		return quotaRecord{}, false, err
	}
	rec, err := decodeQuotaRecord(dir, v)
	return rec, err == nil, err
}

// quotaState is a quota's record with every shard.
type quotaState struct {
	rec    quotaRecord
	found  bool // rec was read (a quota seen in a scan may have shards only)
	shards map[byte]quotaShard
}

func (q *quotaState) used(dim int) int64 {
	var n int64
	for _, s := range q.shards {
		n += s.used[dim]
	}
	return n
}

// readQuota reads the record and the shards of the quota on dir in one
// scan (ok false: no record).
func readQuota(r kv.Reader, dir base.Ino) (q quotaState, ok bool, err error) {
	q.shards = map[byte]quotaShard{}
	var derr error
	err = r.Scan(quotaKey(dir), kv.PrefixEnd(quotaKey(dir)), false, func(k, v []byte) bool {
		_, shard, err := decodeQuotaKey(k)
		if err == nil && shard < 0 {
			q.rec, err = decodeQuotaRecord(dir, v)
			ok = err == nil
		} else if err == nil {
			var s quotaShard
			if s, err = decodeQuotaShard(v); err == nil {
				q.shards[byte(shard)] = s
			}
		}
		derr = err
		return err == nil
	})
	if err == nil {
		err = derr
	}
	return q, ok, err
}

// chargeQuota counts d (bytes, inodes) against the quota on dir q and
// every quota enclosing it; a growth that one of them cannot take fails
// with ErrQuota, and nothing is counted (the transaction aborts).
func (o *op) chargeQuota(q base.Ino, d [2]int64) error {
	_, err := o.chargeChain(q, d)
	return err
}

// chargeChain is chargeQuota, and returns the quotas it charged (nil if
// none).
func (o *op) chargeChain(q base.Ino, d [2]int64) ([]base.Ino, error) {
	if q != 0 {
		// A quota's check needs every client's usage, committed: no
		// write-back (writeback.go) where a quota applies.
		if err := o.refuseWriteBack(); err != nil {
			return nil, err
		}
	}
	var chain []base.Ino
	for depth := 0; q != 0; depth++ {
		if depth == maxQuotaDepth {
			return nil, fmt.Errorf("quotas nested more than %d deep (a cycle?): %w", maxQuotaDepth, base.ErrIO)
		}
		chain = append(chain, q)
		up, err := o.chargeOne(q, d, true)
		if err != nil {
			return nil, err
		}
		q = up
	}
	return chain, nil
}

// quotaHints remembers, per directory and per file this client made or
// wrote under a quota, the chain of quotas its last charge went through,
// so that the next create in the directory, or write of the file, reads
// their usage shards in the same round trip as its other first reads
// (createRead, WriteSlices): on a server, a quota then costs a create or
// a write no round trip. A wrong hint costs only that round trip. The map
// is emptied when it grows past quotaHintMax entries.
type quotaHints struct {
	any atomic.Bool // some hint was ever recorded: the common path looks no further
	mu  sync.Mutex
	m   map[base.Ino][]base.Ino
}

const quotaHintMax = 1 << 16

func (h *quotaHints) note(ino base.Ino, chain []base.Ino) {
	if chain == nil && !h.any.Load() {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if chain == nil {
		delete(h.m, ino)
		return
	}
	if h.m == nil || len(h.m) >= quotaHintMax {
		h.m = make(map[base.Ino][]base.Ino)
	}
	h.m[ino] = chain
	h.any.Store(true)
}

// shardKeys are the usage shard keys (of shard) of ino's hinted chain.
func (h *quotaHints) shardKeys(ino base.Ino, shard byte) [][]byte {
	if !h.any.Load() {
		return nil
	}
	h.mu.Lock()
	chain := h.m[ino]
	h.mu.Unlock()
	keys := make([][]byte, len(chain))
	for i, q := range chain {
		keys[i] = quotaShardKey(q, shard)
	}
	return keys
}

// countQuota is chargeQuota without the limits: usage that must be
// counted even past them (the trash's own directories).
func (o *op) countQuota(q base.Ino, d [2]int64) error {
	for depth := 0; q != 0; depth++ {
		if depth == maxQuotaDepth {
			return fmt.Errorf("quotas nested more than %d deep (a cycle?): %w", maxQuotaDepth, base.ErrIO)
		}
		up, err := o.chargeOne(q, d, false)
		if err != nil {
			return err
		}
		q = up
	}
	return nil
}

// chargeOne counts d against the quota on dir q alone, through this
// transaction's shard, and returns the enclosing quota. enforce false
// counts without checking the limit (a shrink, or usage that moves
// between quotas that both count it).
func (o *op) chargeOne(q base.Ino, d [2]int64, enforce bool) (base.Ino, error) {
	key := quotaShardKey(q, o.shard)
	v, err := o.Get(key)
	if err != nil {
		return 0, err
	}
	var s quotaShard
	if v != nil {
		if s, err = decodeQuotaShard(v); err != nil {
			return 0, fmt.Errorf("quota of directory %d: %w", q, err)
		}
	} else {
		rec, ok, err := getQuotaRecord(o, q)
		if err != nil {
			return 0, err
		}
		if !ok {
			// The quota went away (deleted while this inode still named
			// it, which fsck reports): nothing to count.
			return 0, nil
		}
		s.up = rec.Up
	}
	for dim := range 2 {
		if enforce && d[dim] > 0 && s.used[dim]+d[dim] > s.grant[dim] {
			if err := o.grantQuota(q, &s, d); err != nil {
				return 0, err
			}
			break
		}
	}
	for dim := range 2 {
		s.used[dim] += d[dim]
		if s.grant[dim] < s.used[dim] {
			s.grant[dim] = s.used[dim]
		}
	}
	o.Set(key, encodeQuotaShard(&s))
	return s.up, nil
}

// grantQuota raises the grant of this transaction's shard s of quota q so
// that it covers d, from what no shard holds or, that failing, by taking
// back the other shards' unused grants; ErrQuota if the limit leaves no
// room for d.
func (o *op) grantQuota(q base.Ino, s *quotaShard, d [2]int64) error {
	st, ok, err := readQuota(o, q)
	if err != nil {
		return err
	}
	if !ok {
		return nil
	}
	reclaim := false
	for dim := range 2 {
		lim := st.rec.limit(dim)
		if d[dim] <= 0 || s.used[dim]+d[dim] <= s.grant[dim] {
			continue
		}
		if lim == 0 {
			s.grant[dim] = unlimitedGrant
			continue
		}
		var granted int64
		for sh, x := range st.shards {
			if sh != o.shard {
				granted += x.grant[dim]
			}
		}
		need := s.used[dim] + d[dim]
		free := int64(lim) - granted
		if free < need {
			reclaim = true
			break
		}
		// Besides what it needs, the shard takes a small part of what is
		// free, so that its next charges stay on the fast path; near the
		// limit the parts shrink.
		s.grant[dim] = need + (free-need)/(2*usageShards)
	}
	if reclaim {
		return o.reclaimQuota(q, &st, s, d)
	}
	st.rec.Gen++
	return o.putQuotaRecord(q, &st.rec)
}

// reclaimQuota sets every other shard's grant to its usage and grants s
// what it needs from the rest, or fails with ErrQuota.
func (o *op) reclaimQuota(q base.Ino, st *quotaState, s *quotaShard, d [2]int64) error {
	for dim := range 2 {
		lim := st.rec.limit(dim)
		if lim == 0 {
			if d[dim] > 0 {
				s.grant[dim] = max(s.grant[dim], unlimitedGrant)
			}
			continue
		}
		var others int64
		for sh, x := range st.shards {
			if sh != o.shard {
				others += x.used[dim]
			}
		}
		need := s.used[dim] + max(d[dim], 0)
		if others+need > int64(lim) {
			what := "bytes"
			if dim == dimInodes {
				what = "inodes"
			}
			used := max(others+s.used[dim], 0)
			return fmt.Errorf("directory %d: quota of %d %s reached (%d used): %w", q, lim, what, used, base.ErrQuota)
		}
		s.grant[dim] = need
	}
	for sh, x := range st.shards {
		if sh == o.shard {
			continue
		}
		changed := false
		for dim := range 2 {
			if st.rec.limit(dim) != 0 && x.grant[dim] != x.used[dim] {
				x.grant[dim] = x.used[dim]
				changed = true
			}
		}
		if changed {
			o.Set(quotaShardKey(q, sh), encodeQuotaShard(&x))
		}
	}
	st.rec.Gen++
	return o.putQuotaRecord(q, &st.rec)
}

func (o *op) putQuotaRecord(dir base.Ino, r *quotaRecord) error {
	js, err := json.Marshal(r)
	if err != nil {
		return err
	}
	o.Set(quotaKey(dir), js)
	return nil
}

// resetGrants writes every shard of quota q with the grant it should have
// under rec: its usage where there is a limit, unlimited elsewhere, and
// up as the enclosing quota. It writes every shard, so it conflicts with
// every charge in flight.
func (o *op) resetGrants(q base.Ino, st *quotaState) {
	if len(st.shards) == 0 {
		st.shards[o.shard] = quotaShard{}
	}
	for sh, x := range st.shards {
		x.up = st.rec.Up
		for dim := range 2 {
			if st.rec.limit(dim) == 0 {
				x.grant[dim] = max(unlimitedGrant, x.used[dim])
			} else {
				x.grant[dim] = x.used[dim]
			}
		}
		st.shards[sh] = x
		o.Set(quotaShardKey(q, sh), encodeQuotaShard(&x))
	}
}

// quotaChain lists the quota on dir q and every quota enclosing it.
func quotaChain(r kv.Reader, q base.Ino) ([]base.Ino, error) {
	var chain []base.Ino
	for q != 0 {
		if len(chain) == maxQuotaDepth {
			return nil, fmt.Errorf("quotas nested more than %d deep (a cycle?): %w", maxQuotaDepth, base.ErrIO)
		}
		rec, ok, err := getQuotaRecord(r, q)
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		chain = append(chain, q)
		q = rec.Up
	}
	return chain, nil
}

// moveUsage moves d from the quotas of chain from to those of chain to:
// the quotas on both count it already. The growth of the quotas only on
// to is checked against their limits.
func (o *op) moveUsage(from, to base.Ino, d [2]int64) error {
	if from == to || d == [2]int64{} {
		return nil
	}
	fc, err := quotaChain(o, from)
	if err != nil {
		return err
	}
	tc, err := quotaChain(o, to)
	if err != nil {
		return err
	}
	in := func(c []base.Ino, q base.Ino) bool {
		for _, x := range c {
			if x == q {
				return true
			}
		}
		return false
	}
	for _, q := range tc {
		if !in(fc, q) {
			if _, err := o.chargeOne(q, d, true); err != nil {
				return err
			}
		}
	}
	neg := [2]int64{-d[0], -d[1]}
	for _, q := range fc {
		if !in(tc, q) {
			if _, err := o.chargeOne(q, neg, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// inodeUsage is what one inode counts in a quota.
func inodeUsage(a *base.Attr) [2]int64 {
	return [2]int64{usageBytes(a), 1}
}

// maxQuotaMove bounds the tree a rename may carry from one quota to
// another in its transaction; a larger one is refused with EXDEV, which
// mv answers by copying (as XFS does for project quotas).
const maxQuotaMove = 10000

// quotaOuter is the quota that counts inode ino (attributes a) as seen
// from its parent: for a directory with a quota of its own, the quota
// enclosing it.
func (o *op) quotaOuter(ino base.Ino, a *base.Attr) (base.Ino, error) {
	if a.Type != base.TypeDir || a.Quota != ino {
		return a.Quota, nil
	}
	rec, ok, err := getQuotaRecord(o, ino)
	if err != nil || !ok {
		return 0, err
	}
	return rec.Up, nil
}

// moveQuota hands inode ino (attributes a), which a rename moves into a
// directory that quota to counts, to that quota: its usage (with its
// tree's, for a directory) leaves the quotas that no longer count it and
// joins the new ones, within their limits. A file with other links stays
// where it is counted: EXDEV, as link does.
func (o *op) moveQuota(ino base.Ino, a *base.Attr, to base.Ino) error {
	from, err := o.quotaOuter(ino, a)
	if err != nil || from == to {
		return err
	}
	switch {
	case a.Type == base.TypeDir && a.Quota == ino:
		// A directory with its own quota: its record and shards point
		// at the new enclosing quota; its whole usage moves.
		st, ok, err := readQuota(o, ino)
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		d := [2]int64{max(st.used(dimBytes), 0), max(st.used(dimInodes), 0)}
		if err := o.moveUsage(from, to, d); err != nil {
			return err
		}
		return o.setQuotaUp(ino, &st, to)
	case a.Type != base.TypeDir:
		if a.Nlink > 1 {
			return fmt.Errorf("inode %d has %d links and another quota counts it: %w", ino, a.Nlink, base.ErrCrossDevice)
		}
		if err := o.moveUsage(from, to, inodeUsage(a)); err != nil {
			return err
		}
		a.Quota = to
		o.put(ino, a)
		return nil
	}
	d, err := o.restampTree(ino, a, from, to, maxQuotaMove)
	if err != nil {
		return err
	}
	return o.moveUsage(from, to, d)
}

// restampTree makes quota to count directory dir (attributes a) and the
// tree under it, in place of quota from, and returns the usage it moved.
// Directories with a quota of their own inside keep it, enclosed by to
// now. More than limit inodes, or a file linked from outside, fail with
// EXDEV.
func (o *op) restampTree(dir base.Ino, a *base.Attr, from, to base.Ino, limit int) ([2]int64, error) {
	var d [2]int64
	n := 0
	check := func(ino base.Ino, a *base.Attr) error {
		if n++; n > limit {
			return fmt.Errorf("moving a tree of more than %d inodes between directory quotas: %w", limit, base.ErrCrossDevice)
		}
		if a.Type != base.TypeDir && a.Nlink > 1 {
			return fmt.Errorf("inode %d has %d links and would change directory quota: %w", ino, a.Nlink, base.ErrCrossDevice)
		}
		return nil
	}
	stack := []base.Ino{}
	add := func(ino base.Ino, a *base.Attr) error {
		u, descend, err := o.restampEntry(ino, a, from, to, check)
		d[0] += u[0]
		d[1] += u[1]
		if descend {
			stack = append(stack, ino)
		}
		return err
	}
	if err := add(dir, a); err != nil {
		return d, err
	}
	for len(stack) > 0 {
		cur := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		after := ""
		for {
			_, ents, err := readdirDir(o, RootCaller, cur, after, 1000, false, latestEpoch, false)
			if err != nil {
				return d, err
			}
			if len(ents) == 0 {
				break
			}
			after = ents[len(ents)-1].Name
			for _, e := range ents {
				ca, err := o.attr(e.Ino)
				if err != nil {
					return d, err
				}
				if err := add(e.Ino, ca); err != nil {
					return d, err
				}
			}
		}
	}
	return d, nil
}

// restampEntry hands inode ino (attributes a), in a tree going from quota
// from to quota to, over to to: a directory with a quota of its own that
// from enclosed is enclosed by to now (u: its whole usage); an inode that
// from counted is counted by to (u: its own usage; descend: a directory,
// whose entries follow). check, if not nil, may refuse an inode before it
// changes. Anything else is left alone.
func (o *op) restampEntry(ino base.Ino, a *base.Attr, from, to base.Ino, check func(base.Ino, *base.Attr) error) (u [2]int64, descend bool, err error) {
	switch {
	case a.Type == base.TypeDir && a.Quota == ino:
		st, ok, err := readQuota(o, ino)
		if err != nil || !ok || st.rec.Up != from {
			return u, false, err
		}
		u = [2]int64{max(st.used(dimBytes), 0), max(st.used(dimInodes), 0)}
		return u, false, o.setQuotaUp(ino, &st, to)
	case a.Quota == from:
		if check != nil {
			if err := check(ino, a); err != nil {
				return u, false, err
			}
		}
		a.Quota = to
		o.put(ino, a)
		return inodeUsage(a), a.Type == base.TypeDir, nil
	}
	return u, false, nil
}

// setQuotaUp makes quota to enclose the quota on dir (state st): its
// record and every shard name it.
func (o *op) setQuotaUp(dir base.Ino, st *quotaState, up base.Ino) error {
	st.rec.Up = up
	if err := o.putQuotaRecord(dir, &st.rec); err != nil {
		return err
	}
	for sh, x := range st.shards {
		x.up = up
		o.Set(quotaShardKey(dir, sh), encodeQuotaShard(&x))
	}
	return nil
}

// dropQuota deletes the quota of directory dir, which is being destroyed.
func (o *op) dropQuota(dir base.Ino) error {
	var keys [][]byte
	err := o.Scan(quotaKey(dir), kv.PrefixEnd(quotaKey(dir)), false, func(k, _ []byte) bool {
		keys = append(keys, append([]byte(nil), k...))
		return true
	})
	for _, k := range keys {
		o.Delete(k)
	}
	return err
}

// QuotaLimits are the limits of a directory quota; 0 means none.
type QuotaLimits struct {
	Bytes  uint64 `json:"bytes"`
	Inodes uint64 `json:"inodes"`
}

// Quota is a directory quota as reported.
type Quota struct {
	Dir        base.Ino    `json:"dir"`
	Path       string      `json:"path,omitempty"`
	Up         base.Ino    `json:"up,omitempty"`
	Limits     QuotaLimits `json:"limits"`
	UsedBytes  uint64      `json:"used_bytes"`
	UsedInodes uint64      `json:"used_inodes"`
	State      string      `json:"state,omitempty"` // "", "counting" or "deleting": an interrupted set or delete
}

func quotaFrom(dir base.Ino, st *quotaState) Quota {
	return Quota{Dir: dir, Up: st.rec.Up, Limits: QuotaLimits{Bytes: st.rec.MaxBytes, Inodes: st.rec.MaxInodes},
		UsedBytes: uint64(max(st.used(dimBytes), 0)), UsedInodes: uint64(max(st.used(dimInodes), 0)), State: st.rec.State}
}

// GetQuota returns the quota on directory dir; ErrNotFound if it has none.
func (m *Meta) GetQuota(ctx context.Context, dir base.Ino) (Quota, error) {
	var q Quota
	err := m.view(ctx, func(r kv.Reader) error {
		st, ok, err := readQuota(r, dir)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("directory %d has no quota: %w", dir, base.ErrNotFound)
		}
		q = quotaFrom(dir, &st)
		return nil
	})
	return q, err
}

// Quotas lists every quota, by directory inode.
func (m *Meta) Quotas(ctx context.Context) ([]Quota, error) {
	var out []Quota
	err := m.view(ctx, func(r kv.Reader) error {
		states, order, err := readAllQuotas(r)
		if err != nil {
			return err
		}
		out = out[:0]
		for _, dir := range order {
			if states[dir].found {
				out = append(out, quotaFrom(dir, states[dir]))
			}
		}
		return nil
	})
	return out, err
}

// SetQuota sets the limits of the quota on directory dir, creating it if
// there is none: then the tree under dir is counted (in transactions of a
// directory page each, concurrently with any client's writes, which count
// themselves as they go) and the limits apply once the count is complete.
// An interrupted count is resumed by setting the quota again. progress,
// if not nil, is called with the inodes counted so far.
func (m *Meta) SetQuota(ctx context.Context, dir base.Ino, lim QuotaLimits, progress func(inodes uint64)) (Quota, error) {
	if m.opts.ReadOnly {
		return Quota{}, base.ErrReadOnly
	}
	var from base.Ino
	var counting bool
	err := m.mutate(ctx, func(o *op) error {
		a, err := o.dirAttr(dir)
		if err != nil {
			return err
		}
		st, ok, err := readQuota(o, dir)
		if err != nil {
			return err
		}
		if ok {
			if st.rec.State == quotaDeleting {
				return fmt.Errorf("directory %d: its quota is being deleted; run quota delete again to finish: %w", dir, base.ErrBusy)
			}
			st.rec.MaxBytes, st.rec.MaxInodes = lim.Bytes, lim.Inodes
			st.rec.Gen++
			counting = st.rec.State == quotaCounting
			from = st.rec.Up
			if err := o.putQuotaRecord(dir, &st.rec); err != nil {
				return err
			}
			o.resetGrants(dir, &st)
			return nil
		}
		counting = true
		from = a.Quota
		st.rec = quotaRecord{Up: from, MaxBytes: lim.Bytes, MaxInodes: lim.Inodes, State: quotaCounting}
		if err := o.putQuotaRecord(dir, &st.rec); err != nil {
			return err
		}
		a.Quota = dir
		o.put(dir, a)
		sh := quotaShard{up: from, used: inodeUsage(a), grant: [2]int64{unlimitedGrant, unlimitedGrant}}
		o.Set(quotaShardKey(dir, o.shard), encodeQuotaShard(&sh))
		return nil
	})
	if err != nil {
		return Quota{}, err
	}
	if counting {
		if err := m.restampWalk(ctx, dir, from, dir, true, progress); err != nil {
			return Quota{}, err
		}
		err = m.mutate(ctx, func(o *op) error {
			st, ok, err := readQuota(o, dir)
			if err != nil {
				return err
			}
			if !ok || st.rec.State != quotaCounting {
				return fmt.Errorf("directory %d: the quota changed while its tree was counted: %w", dir, base.ErrBusy)
			}
			st.rec.State = quotaActive
			st.rec.Gen++
			if err := o.putQuotaRecord(dir, &st.rec); err != nil {
				return err
			}
			o.resetGrants(dir, &st)
			return nil
		})
		if err != nil {
			return Quota{}, err
		}
	}
	return m.GetQuota(ctx, dir)
}

// DeleteQuota removes the quota on directory dir: its tree is handed to
// the enclosing quota (in transactions of a directory page each), then
// the record goes. An interrupted delete is finished by deleting again.
func (m *Meta) DeleteQuota(ctx context.Context, dir base.Ino, progress func(inodes uint64)) error {
	if m.opts.ReadOnly {
		return base.ErrReadOnly
	}
	var up base.Ino
	err := m.mutate(ctx, func(o *op) error {
		st, ok, err := readQuota(o, dir)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("directory %d has no quota: %w", dir, base.ErrNotFound)
		}
		up = st.rec.Up
		st.rec.State = quotaDeleting
		st.rec.Gen++
		if err := o.putQuotaRecord(dir, &st.rec); err != nil {
			return err
		}
		o.resetGrants(dir, &st)
		a, err := o.attr(dir)
		if errors.Is(err, base.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if a.Quota == dir {
			a.Quota = up
			o.put(dir, a)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := m.restampWalk(ctx, dir, dir, up, false, progress); err != nil && !errors.Is(err, base.ErrNotFound) {
		return err
	}
	return m.mutate(ctx, func(o *op) error { return o.dropQuota(dir) })
}

// restampWalk walks the tree under directory top and makes quota to
// count, in place of quota from, every inode that from counts; a
// directory with a quota of its own is not entered, and is enclosed by
// to if it was by from. count: the inodes stamped are counted in top's
// quota (setting a quota). Each directory is stamped before its entries
// are read, so an entry made meanwhile inherits the new quota; one page
// of entries is one transaction.
func (m *Meta) restampWalk(ctx context.Context, top, from, to base.Ino, count bool, progress func(uint64)) error {
	var done uint64
	stack := []base.Ino{top}
	for len(stack) > 0 {
		cur := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		after := ""
		for {
			var dirs []base.Ino
			var n int
			var last string
			err := m.mutate(ctx, func(o *op) error {
				dirs, n, last = dirs[:0], 0, ""
				_, ents, err := readdirDir(o, RootCaller, cur, after, 512, false, latestEpoch, false)
				if err != nil {
					return err
				}
				if len(ents) == 0 {
					return nil
				}
				last = ents[len(ents)-1].Name
				var d [2]int64
				for _, e := range ents {
					ca, err := o.attr(e.Ino)
					if errors.Is(err, base.ErrNotFound) {
						continue
					}
					if err != nil {
						return err
					}
					n++
					u, descend, err := o.restampEntry(e.Ino, ca, from, to, nil)
					if err != nil {
						return err
					}
					if count {
						d[0] += u[0]
						d[1] += u[1]
					}
					if descend {
						dirs = append(dirs, e.Ino)
					}
				}
				if count {
					if _, err := o.chargeOne(top, d, false); err != nil {
						return err
					}
				}
				return nil
			})
			if errors.Is(err, base.ErrNotFound) && cur != top {
				break // the directory went away meanwhile
			}
			if err != nil {
				return err
			}
			if last == "" {
				break
			}
			after = last
			stack = append(stack, dirs...)
			done += uint64(n)
			if progress != nil {
				progress(done)
			}
		}
	}
	return nil
}

// StatFSDir is StatFS as seen from inode ino: in a tree with a quota, the
// nearest quota's limits (where it has them) and usage, and no more than
// the volume has left.
func (m *Meta) StatFSDir(ctx context.Context, ino base.Ino) (StatFS, error) {
	st, err := m.StatFS(ctx)
	if err != nil || ino == 0 {
		return st, err
	}
	err = m.view(ctx, func(r kv.Reader) error {
		a, err := getAttr(r, ino)
		if errors.Is(err, base.ErrNotFound) {
			return nil // gone meanwhile: the volume's figures
		}
		if err != nil {
			return err
		}
		bytesDone, inodesDone := false, false
		for q, depth := a.Quota, 0; q != 0 && depth < maxQuotaDepth && !(bytesDone && inodesDone); depth++ {
			qs, ok, err := readQuota(r, q)
			if err != nil || !ok {
				return err
			}
			if lim := qs.rec.limit(dimBytes); lim > 0 && !bytesDone {
				used := uint64(max(qs.used(dimBytes), 0))
				avail := uint64(0)
				if lim > used {
					avail = lim - used
				}
				st.TotalBytes, st.UsedBytes, st.AvailBytes = lim, used, min(avail, st.AvailBytes)
				st.QuotaBytes, bytesDone = true, true
			}
			if lim := qs.rec.limit(dimInodes); lim > 0 && !inodesDone {
				used := uint64(max(qs.used(dimInodes), 0))
				avail := uint64(0)
				if lim > used {
					avail = lim - used
				}
				st.Files, st.AvailFiles = used, min(avail, st.AvailFiles)
				inodesDone = true
			}
			q = qs.rec.Up
		}
		return nil
	})
	return st, err
}
