package meta

// Usage and limits: the one place where what the volume holds is counted
// and where its limits are enforced. Every change of the count goes
// through chargeInode, chargeBytes and uncharge, each told which inode it
// is for, so that a limit narrower than the volume's (a directory quota)
// can be added here without touching the operations.

import (
	"context"
	"fmt"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// chargeInode counts one more inode, ino (attributes a), made in
// directory parent, whose attributes are p (create, restore): a takes p's quota,
// and neither the volume's inode limit nor a quota's may be passed.
func (o *op) chargeInode(ino base.Ino, a *base.Attr, parent base.Ino, p *base.Attr) error {
	if lim := o.m.Settings().Inodes; lim > 0 {
		if err := o.chargeLimit(counterUsedInodes, lim, 1); err != nil {
			return err
		}
	}
	a.Quota = p.Quota
	chain, err := o.chargeChain(a.Quota, [2]int64{0, 1})
	if err != nil {
		return err
	}
	o.m.quotaHints.note(parent, chain)
	o.m.quotaHints.note(ino, chain)
	return o.addUsage(counterUsedInodes, 1)
}

// chargeBytes adds delta to the bytes counted for ino, whose attributes
// are a (a write, truncate or restore changed its length), refusing
// growth past the capacity or a quota.
func (o *op) chargeBytes(ino base.Ino, a *base.Attr, delta int64) error {
	if capa := o.m.Settings().Capacity; capa > 0 && delta > 0 {
		if err := o.chargeLimit(counterUsedBytes, capa, uint64(delta)); err != nil {
			return err
		}
	}
	chain, err := o.chargeChain(a.Quota, [2]int64{delta, 0})
	if err != nil {
		return fmt.Errorf("inode %d: %w", ino, err)
	}
	o.m.quotaHints.note(ino, chain)
	return o.addUsage(counterUsedBytes, delta)
}

// uncharge takes back everything counted for ino, whose last attributes
// are a: it is being destroyed.
func (o *op) uncharge(ino base.Ino, a *base.Attr) error {
	u := inodeUsage(a)
	if a.Type == base.TypeDir && a.Quota == ino {
		// The directory's own quota goes with it; what it counted
		// (itself, as it is empty) leaves the enclosing ones.
		q, err := o.quotaOuter(ino, a)
		if err != nil {
			return err
		}
		if err := o.dropQuota(ino); err != nil {
			return err
		}
		a.Quota = q
	}
	if err := o.chargeQuota(a.Quota, [2]int64{-u[0], -u[1]}); err != nil {
		return err
	}
	if err := o.addUsage(counterUsedBytes, -usageBytes(a)); err != nil {
		return err
	}
	return o.addUsage(counterUsedInodes, -1)
}

// usageBytes is what a regular file of length n counts in Usage.Bytes.
func usageBytes(a *base.Attr) int64 {
	if a.Type != base.TypeFile {
		return 0
	}
	return int64((a.Length + 4095) &^ 4095)
}

// counter reads a counter.
func counter(r kv.Reader, kind byte) (uint64, error) {
	v, err := r.Get(counterKey(kind))
	if err != nil {
		return 0, err
	}
	n, err := decodeU64(v)
	if err != nil {
		return 0, fmt.Errorf("counter %c: %w", kind, err)
	}
	return n, nil
}

// bump increments a plain counter: a key that transactions which must not
// run concurrently all write (kv.Txn: materialized conflicts).
func (t *wtx) bump(kind byte) error {
	n, err := counter(t, kind)
	if err != nil {
		return err
	}
	t.Set(counterKey(kind), u64(nil, n+1))
	return nil
}

// usageShards is how many delta shards a usage counter has. Every mutation
// updates one shard chosen at random, so concurrent transactions (of one
// client or many) seldom touch the same key and do not conflict on it.
const usageShards = 64

// usage returns a usage counter: its base value plus all its delta shards,
// clamped at zero.
func usage(r kv.Reader, kind byte) (uint64, error) {
	base, err := counter(r, kind)
	if err != nil {
		return 0, err
	}
	total := int64(base)
	start := counterShardKey(kind, 0)
	var derr error
	err = r.Scan(start, kv.PrefixEnd(counterKey(kind)), false, func(_, v []byte) bool {
		d, err := decodeU64(v)
		if err != nil {
			derr = fmt.Errorf("counter %c shard: %w", kind, err)
			return false
		}
		total += int64(d)
		return true
	})
	if err == nil {
		err = derr
	}
	if err != nil {
		return 0, err
	}
	return uint64(max(total, 0)), nil
}

// addUsage adds delta to a usage counter through one random delta shard.
func (t *wtx) addUsage(kind byte, delta int64) error {
	if delta == 0 {
		return nil
	}
	key := counterShardKey(kind, t.shard)
	v, err := t.Get(key)
	if err != nil {
		return err
	}
	var d uint64
	if v != nil {
		if d, err = decodeU64(v); err != nil {
			return fmt.Errorf("counter %c shard: %w", kind, err)
		}
	}
	if n := int64(d) + delta; n == 0 {
		t.Delete(key)
	} else {
		t.Set(key, u64(nil, uint64(n)))
	}
	return nil
}

// setUsage sets a usage counter to n: the base takes the value and every
// delta shard goes (fsck repair).
func (t *wtx) setUsage(kind byte, n uint64) error {
	var keys [][]byte
	err := t.Scan(counterShardKey(kind, 0), kv.PrefixEnd(counterKey(kind)), false, func(k, _ []byte) bool {
		keys = append(keys, append([]byte(nil), k...))
		return true
	})
	if err != nil {
		return err
	}
	for _, k := range keys {
		t.Delete(k)
	}
	t.Set(counterKey(kind), u64(nil, n))
	return nil
}

// Usage returns the usage counters.
func (m *Meta) Usage(ctx context.Context) (Usage, error) {
	var u Usage
	err := m.view(ctx, func(r kv.Reader) (err error) {
		u, err = usageOf(r)
		return err
	})
	return u, err
}

// usageOf reads both usage counters.
func usageOf(r kv.Reader) (u Usage, err error) {
	if u.Bytes, err = usage(r, counterUsedBytes); err != nil {
		return u, err
	}
	u.Inodes, err = usage(r, counterUsedInodes)
	return u, err
}

// Virtual sizes reported when the volume has no capacity or inode limit.
const (
	VirtualCapacity = 1 << 50 // 1 PiB
	VirtualInodes   = 1 << 40
)

// StatFS reports capacity and usage. Without a configured capacity (or
// inode limit) the volume reports a large virtual size.
func (m *Meta) StatFS(ctx context.Context) (StatFS, error) {
	if err := m.wbBarrier(ctx); err != nil {
		return StatFS{}, err
	}
	s := m.Settings()
	total := s.Capacity
	if total == 0 {
		total = VirtualCapacity
	}
	files := s.Inodes
	if files == 0 {
		files = VirtualInodes
	}
	// What other clients' grants hold is not available here (grant.go):
	// read with the counters, in one view.
	var u Usage
	var held Granted
	err := m.view(ctx, func(r kv.Reader) (err error) {
		if u, err = usageOf(r); err != nil {
			return err
		}
		if (s.Capacity > 0 || s.Inodes > 0) && !m.profile.SingleWriter {
			held, err = grantsOf(r, m.sessionID())
		}
		return err
	})
	if err != nil {
		return StatFS{}, err
	}
	st := StatFS{TotalBytes: total, UsedBytes: u.Bytes, Files: u.Inodes}
	if total > u.Bytes+held.Bytes {
		st.AvailBytes = total - u.Bytes - held.Bytes
	}
	if files > u.Inodes+held.Inodes {
		st.AvailFiles = files - u.Inodes - held.Inodes
	}
	return st, nil
}
