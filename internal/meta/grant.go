package meta

// Shares of the volume's limits for write-back (design 0011, "Volume
// limits under write-back").
//
// A volume's capacity and inode limit are checked against every client's
// count. A change written back must not be refused when it commits, after
// it was acknowledged, so it cannot rest on a count other clients change.
// Instead, a client that writes back holds a grant of each limit: a part
// of what is free, taken in a transaction that reads every client's count
// and every grant, and recorded (grantKey) so that every other check
// counts it as used. A change in the log charges the grant, not the
// volume: the grant only this client writes, and only while it holds the
// log's lock, so what the log acknowledged against it is there when the
// log commits. A check outside the log counts what is used and every
// grant held.
//
// A grant is at most 1/grantShare of what is free when taken (so that the
// clients near the limit take less and less of it) and at most
// grantMax; below grantMin none is taken, and near the limit every
// change is checked against the store as before. A client gives its
// grants back when its session ends (unmount, expiry), and when it has
// charged none of them for a heartbeat interval (wbIdleGrants).

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

const grantShare = 8

// Per kind, as grantIndex numbers them: bytes, inodes.
var (
	grantMax   = [2]uint64{64 << 20, 1024}
	grantMin   = [2]uint64{1 << 20, 16}
	grantKinds = [2]byte{counterUsedBytes, counterUsedInodes}
)

// grantRetry is how long a client that found too little free to take a
// grant runs every limited change outside the log before it asks again.
const grantRetry = time.Second

func grantIndex(kind byte) int {
	if kind == counterUsedInodes {
		return 1
	}
	return 0
}

// errWbGrant: a change over the log needs more of a limit than this
// client's grant holds; writeBack takes a new grant and runs it again.
var errWbGrant = errors.New("meta: write-back needs a larger grant of a volume limit")

// wbGrants is a client's grants as its log knows them (w.mu).
type wbGrants struct {
	sid    uint64    // the session they belong to
	left   [2]uint64 // what the log may still charge
	stored bool      // the store may hold a grant of sid
	used   bool      // charged since the last heartbeat
	retry  time.Time // no new grant asked for before
	// need is what the change that failed with errWbGrant asked for.
	needKind  byte
	needDelta uint64
	// stale: the limits changed (noteLimits, without w.mu): what left
	// says is void until the grants are taken anew.
	stale atomic.Bool
}

// charged takes what a change that joined the log charged off what the
// log may still charge (w.mu held).
func (g *wbGrants) charged(n [2]uint64) {
	if n != [2]uint64{} {
		g.left[0] -= n[0]
		g.left[1] -= n[1]
		g.used = true
	}
}

// limitState returns what is used of kind and what every session's grant
// holds of it. A store only this process writes (embedded) has no grants:
// they are not read.
func (m *Meta) limitState(r kv.Reader, kind byte) (used, granted uint64, err error) {
	if used, err = usage(r, kind); err != nil || m.profile.SingleWriter {
		return used, 0, err
	}
	g, err := grantsOf(r, 0)
	return used, g.of(kind), err
}

// grantsOf sums the grants of every session but except (0: of every
// session), and counts the sessions holding one.
func grantsOf(r kv.Reader, except uint64) (Granted, error) {
	var g Granted
	holders := make(map[uint64]bool)
	var derr error
	err := r.Scan(prefixOnly(pGrant), kv.PrefixEnd(prefixOnly(pGrant)), false, func(k, v []byte) bool {
		sid, kind, err := decodeGrantKey(k)
		if err != nil || sid == except {
			return true // a bad key is fsck's
		}
		n, err := decodeU64(v)
		if err != nil {
			derr = fmt.Errorf("grant %x: %w", k, err)
			return false
		}
		*g.in(kind) += n
		holders[sid] = true
		return true
	})
	if err == nil {
		err = derr
	}
	g.Holders = len(holders)
	return g, err
}

// of is what g holds of kind.
func (g Granted) of(kind byte) uint64 { return *g.in(kind) }

// in is g's field for kind.
func (g *Granted) in(kind byte) *uint64 {
	if kind == counterUsedInodes {
		return &g.Inodes
	}
	return &g.Bytes
}

// grantOf reads session sid's grant of kind.
func grantOf(r kv.Reader, sid uint64, kind byte) (uint64, error) {
	v, err := r.Get(grantKey(sid, kind))
	if err != nil || v == nil {
		return 0, err
	}
	n, err := decodeU64(v)
	if err != nil {
		return 0, fmt.Errorf("grant of session %d: %w", sid, err)
	}
	return n, nil
}

// setGrant writes session sid's grant of kind.
func (t *wtx) setGrant(sid uint64, kind byte, n uint64) {
	if n == 0 {
		t.Delete(grantKey(sid, kind))
		return
	}
	t.Set(grantKey(sid, kind), u64(nil, n))
}

// chargeLimit counts delta more of kind against the volume's limit lim.
func (o *op) chargeLimit(kind byte, lim, delta uint64) error {
	if st, ok := o.wtx.Txn.(*wbTxn); ok {
		return st.chargeGrant(o, kind, delta)
	}
	used, granted, err := o.m.limitState(o, kind)
	if err != nil {
		return err
	}
	if sid := o.m.sessionID(); o.replaying && sid != 0 {
		// A change the log acknowledged against this client's grant,
		// run again (its batch's guard failed): the grant in the store
		// pays for it. It is never refused: it was acknowledged.
		own, err := grantOf(o, sid, kind)
		if err != nil {
			return err
		}
		o.setGrant(sid, kind, own-min(own, delta))
		if delta > own && used+granted-own+(delta-own) > lim {
			o.m.log.Warn("write-back: an acknowledged change, run again, passes the volume limit",
				"kind", string(kind), "limit", lim, "used", used, "granted", granted, "delta", delta)
		}
		return nil
	}
	if used+granted+delta > lim {
		what := "capacity"
		if kind == counterUsedInodes {
			what = "inode limit"
		}
		held := ""
		if granted > 0 {
			held = fmt.Sprintf(" (%d of it granted to clients that write back)", granted)
		}
		return fmt.Errorf("volume %s %d reached%s: %w", what, lim, held, base.ErrNoSpace)
	}
	return nil
}

// chargeGrant charges delta of kind to this client's grant, for a change
// over the log: errWbGrant if the grant does not hold it. Its record is
// written with what is left, without a read: only this client writes it,
// under the log's lock.
func (s *wbTxn) chargeGrant(o *op, kind byte, delta uint64) error {
	i := grantIndex(kind)
	g := &s.log.grants
	if delta > grantMax[i] {
		return s.fail(errNoSpec) // more than any grant: checked against the store
	}
	var left uint64
	if g.sid == o.m.sessionID() && !g.stale.Load() {
		left = g.left[i] - s.grantUsed[i]
	}
	if left < delta {
		g.needKind, g.needDelta = kind, delta
		return s.fail(errWbGrant)
	}
	s.grantUsed[i] += delta
	o.setGrant(g.sid, kind, left-delta)
	return nil
}

// wbGrantLocked takes this client's grants anew (w.mu held), after the
// log committed: each is what is free of its limit, with this client's
// own grant counted free, divided by grantShare and bounded by grantMax.
// It reports whether the change that asked (g.need) now fits.
func (m *Meta) wbGrantLocked(ctx context.Context) bool {
	w := m.wb
	g := &w.grants
	if sid := m.sessionID(); sid == 0 || time.Now().Before(g.retry) {
		return false
	}
	if err := m.wbCommitLocked(ctx); err != nil {
		return false
	}
	g.stale.Store(false) // before the limits are read: a change after this makes them stale again
	sid, s := m.sessionID(), m.Settings()
	if sid == 0 {
		return false
	}
	var got [2]uint64
	err := m.updateInOnce(context.WithValue(ctx, wbFlusherKey{}, true), nil, 0, func(t *wtx) error {
		got = [2]uint64{}
		others, err := grantsOf(t, sid)
		if err != nil {
			return err
		}
		for i, kind := range grantKinds {
			own, err := grantOf(t, sid, kind)
			if err != nil {
				return err
			}
			lim := [2]uint64{s.Capacity, s.Inodes}[i]
			if lim > 0 {
				used, err := usage(t, kind)
				if err != nil {
					return err
				}
				if taken := used + others.of(kind); taken < lim {
					if n := min(grantMax[i], (lim-taken)/grantShare); n >= grantMin[i] {
						got[i] = n
					}
				}
			}
			if got[i] != own {
				t.setGrant(sid, kind, got[i])
			}
		}
		return nil
	})
	if err != nil {
		m.log.Warn("write-back: taking a grant of the volume's limits failed", "err", err)
		g.retry = time.Now().Add(grantRetry)
		return false
	}
	w.granted.Add(1)
	g.sid, g.left, g.stored = sid, got, got != [2]uint64{}
	fits := got[grantIndex(g.needKind)] >= g.needDelta
	if !fits {
		g.retry = time.Now().Add(grantRetry)
	}
	return fits
}

// wbDropGrants forgets what the log may charge of its grants (w.mu
// held): the store's may differ (a batch ran again), or the limits
// changed. The next change that needs one takes them anew.
func (w *wbLog) wbDropGrants() { w.grants.left = [2]uint64{} }

// wbIdleGrants gives back the grants the log charged nothing of since it
// was last called (each heartbeat): a client that stopped writing keeps
// no part of the volume from the others. It does not wait for the log's
// lock (a heartbeat must not wait for replays): if the log is busy, its
// grants are not idle.
func (m *Meta) wbIdleGrants(ctx context.Context) error {
	w := m.wb
	if w == nil || !w.mu.TryLock() {
		return nil
	}
	defer w.mu.Unlock()
	g := &w.grants
	if g.used || !g.stored || g.sid != m.sessionID() {
		g.used = false
		return nil
	}
	if err := m.wbCommitLocked(ctx); err != nil {
		return err
	}
	sid := g.sid
	err := m.updateInOnce(context.WithValue(ctx, wbFlusherKey{}, true), nil, 0, func(t *wtx) error {
		return t.deletePrefix(grantPrefix(sid))
	})
	if err != nil {
		return fmt.Errorf("giving back the grants of the volume's limits: %w", err)
	}
	w.wbDropGrants()
	g.stored = false
	return nil
}

// noteLimits voids the log's grants when the volume's limits changed from
// before to after: they were taken under the old ones. (Without the
// log's lock: a heartbeat calls it.)
func (m *Meta) noteLimits(before, after *Settings) {
	if m.wb == nil || before == nil || after == nil ||
		before.Capacity == after.Capacity && before.Inodes == after.Inodes {
		return
	}
	m.wb.grants.stale.Store(true)
}

// Granted is what clients that write back hold of the volume's limits.
type Granted struct {
	Bytes   uint64 `json:"bytes"`
	Inodes  uint64 `json:"inodes"`
	Holders int    `json:"holders"` // sessions holding a grant
}

// Grants sums the grants every session holds (cairn status).
func (m *Meta) Grants(ctx context.Context) (Granted, error) {
	var g Granted
	err := m.view(ctx, func(r kv.Reader) (err error) {
		g, err = grantsOf(r, 0)
		return err
	})
	return g, err
}
