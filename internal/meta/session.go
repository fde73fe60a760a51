package meta

// Sessions: each client's record, heartbeat, expiry and the release of
// what a dead session held (holds, locks, slice reservations). Open files
// and their holds are in open.go.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// mutateRaw is mutate without the read-only check, for session bookkeeping.
func (m *Meta) mutateRaw(ctx context.Context, fn func(o *op) error) error {
	return m.rawUpdate(ctx, func(t *wtx) error {
		o := m.newOp(t)
		if err := fn(o); err != nil {
			return err
		}
		return o.flush()
	})
}

func (m *Meta) sessionID() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sid
}

// SessionID returns the id of this client's session, 0 if none.
func (m *Meta) SessionID() uint64 { return m.sessionID() }

// NewSession registers a session for this client and returns its id. Files
// already open get persistent holds. ErrExist if the client has one.
func (m *Meta) NewSession(ctx context.Context, info SessionInfo) (uint64, error) {
	m.holdMu.Lock()
	defer m.holdMu.Unlock()
	if m.sessionID() != 0 {
		return 0, fmt.Errorf("client already has session %d: %w", m.sessionID(), base.ErrExist)
	}
	now := time.Now().UTC()
	if info.Started.IsZero() {
		info.Started = now
	}
	info.Heartbeat = now
	m.mu.Lock()
	open := make([]base.Ino, 0, len(m.opened))
	for ino := range m.opened {
		open = append(open, ino)
	}
	m.mu.Unlock()
	m.idMu.Lock()
	defer m.idMu.Unlock()
	// Slice ids this client may still commit: gc must not take their blocks.
	var res [2]uint64
	if m.nextSlic < m.maxSlic || len(m.inflight) > 0 {
		res = [2]uint64{m.nextSlic, max(m.maxSlic, m.nextSlic)}
		for id := range m.inflight {
			res[0] = min(res[0], id)
			res[1] = max(res[1], id+1)
		}
	}
	// A client that may write and has no id ranges yet reserves its first
	// inode and slice id ranges here, with the session, rather than in
	// its first create and its first block upload: those would each wait
	// for a transaction on a counter every client updates, and clients
	// started together (a cluster's mounts or gateways, then one job on
	// all of them) queue on it.
	wantIno := !m.opts.ReadOnly && m.nextIno >= m.maxIno && m.inoAhead[1] <= m.inoAhead[0]
	wantSlic := !m.opts.ReadOnly && res[1] <= res[0]
	var inoStart, slicStart uint64
	err := m.rawUpdate(ctx, func(t *wtx) error {
		id, err := counter(t, counterNextSess)
		if err != nil {
			return err
		}
		if id == 0 {
			id = 1
		}
		t.Set(counterKey(counterNextSess), u64(nil, id+1))
		info.ID = id
		js, err := json.Marshal(info)
		if err != nil {
			return err
		}
		t.Set(sessionKey(id), js)
		if res[1] > res[0] {
			t.Set(reservedKey(id, res[0]), u64(nil, res[1]))
		}
		if wantIno {
			if inoStart, err = takeIDs(t, counterNextInode, m.opts.InodeBatch); err != nil {
				return err
			}
		}
		if wantSlic {
			if slicStart, err = takeSliceIDs(t, id, m.opts.SliceBatch); err != nil {
				return err
			}
		}
		if !m.opts.ReadOnly && m.holdToucher == nil {
			for _, ino := range open {
				t.Set(holdKey(ino, id), nil)
			}
		}
		return nil
	})
	if err != nil {
		m.noteReach(false, false)
		return 0, fmt.Errorf("new session: %w", err)
	}
	m.reserved = m.reserved[:0]
	if res[1] > res[0] {
		m.reserved = append(m.reserved, res)
	}
	if wantIno {
		m.nextIno, m.maxIno = inoStart, inoStart+m.opts.InodeBatch
	}
	if wantSlic {
		m.nextSlic, m.maxSlic = slicStart, slicStart+m.opts.SliceBatch
		m.reserved = append(m.reserved, [2]uint64{m.nextSlic, m.maxSlic})
	}
	m.renew = false
	m.mu.Lock()
	m.sid, m.session = info.ID, info
	m.mu.Unlock()
	m.noteReach(true, true)
	m.startLeases(info.Timeout, now)
	return info.ID, nil
}

// Heartbeat records that the session is alive and drops the reservations
// of slice ids that are all committed or abandoned. If another client
// declared the session dead meanwhile (its locks and holds are gone), it
// registers a new session, taking the holds of open files again, and
// returns an error wrapping base.ErrStale that says so; if that
// registration fails, the next Heartbeat tries again. ErrInvalid if the
// client has no session. Its outcome is what this client knows of its own
// access to the store, which ExpireSessions waits for (reach.go).
func (m *Meta) Heartbeat(ctx context.Context) error {
	sid := m.sessionID()
	if sid == 0 {
		m.idMu.Lock()
		renew := m.renew
		m.idMu.Unlock()
		if !renew {
			return fmt.Errorf("heartbeat without a session: %w", base.ErrInvalid)
		}
		id, err := m.renewSession(ctx)
		if err != nil {
			return fmt.Errorf("this client's session was declared dead and could still not be renewed: %v: %w", err, base.ErrStale)
		}
		m.log.Warn("registered a new session after the last one was declared dead", "session", id)
		return nil
	}
	m.idMu.Lock()
	var done [][2]uint64
	keep := m.reserved[:0]
	for _, r := range m.reserved {
		if r[1] <= m.nextSlic && !m.inflightIn(r) {
			done = append(done, r)
		} else {
			keep = append(keep, r)
		}
	}
	m.reserved = keep
	m.idMu.Unlock()
	gone := false
	start := time.Now()
	var recalled []base.Ino
	var settings *Settings
	err := m.rawUpdate(ctx, func(t *wtx) error {
		gone, recalled, settings = false, nil, nil
		// Settings another client changed (ChangeSettings) apply here
		// from this heartbeat on; read in its transaction.
		if sv, err := t.Get(settingsKey()); err != nil {
			return err
		} else if sv != nil {
			s, err := decodeSettings(sv)
			if err != nil {
				return err
			}
			settings = &s
		}
		v, err := t.Get(sessionKey(sid))
		if err != nil {
			return err
		}
		if v == nil {
			gone = true
			return nil
		}
		var info SessionInfo
		if err := json.Unmarshal(v, &info); err != nil {
			return fmt.Errorf("session %d: %v: %w", sid, err, base.ErrIO)
		}
		info.Heartbeat = time.Now().UTC()
		js, err := json.Marshal(info)
		if err != nil {
			return err
		}
		t.Set(sessionKey(sid), js)
		for _, r := range done {
			t.Delete(reservedKey(sid, r[0]))
		}
		if m.leases != nil {
			// Recalls whose notification was lost.
			recalled, err = recalledLeases(t, sid)
		}
		return err
	})
	m.noteReach(err == nil, false)
	if err == nil && settings != nil {
		m.storeSettings(settings)
	}
	if err == nil && !gone && m.leases != nil {
		m.leases.alive(start)
		m.releaseLeases(ctx, recalled)
	}
	if err == nil && !gone {
		if gerr := m.wbIdleGrants(ctx); gerr != nil {
			m.log.Warn("write-back: giving back idle grants", "err", gerr)
		}
	}
	if err != nil || !gone {
		return err
	}
	if m.leases != nil {
		m.leases.forgetAll()
		m.spec.invalidate() // predictions and usage shards
		m.spec.newTerm()
	}
	m.mu.Lock()
	m.sid = 0
	m.mu.Unlock()
	// Writes in flight belonged to the dead session: gc may have taken
	// their blocks, so their commits must fail rather than reference them.
	// So must those of ids handed out before a new session has them
	// reserved (alloc).
	m.idMu.Lock()
	for id := range m.inflight {
		m.lost[id] = true
	}
	clear(m.inflight)
	m.renew = true
	m.idMu.Unlock()
	id, err := m.renewSession(ctx)
	if err != nil {
		return fmt.Errorf("session %d was declared dead by another client and could not be renewed: %v: %w", sid, err, base.ErrStale)
	}
	return fmt.Errorf("session %d was declared dead by another client (its locks were released); continuing as session %d: %w", sid, id, base.ErrStale)
}

// renewSession registers a new session in place of the one declared dead,
// with the same description.
func (m *Meta) renewSession(ctx context.Context) (uint64, error) {
	m.mu.Lock()
	info := m.session
	m.mu.Unlock()
	info.ID, info.Started = 0, time.Time{}
	return m.NewSession(ctx, info)
}

// inflightIn reports whether an in-flight slice id lies in [r[0], r[1]).
// Called with idMu held.
func (m *Meta) inflightIn(r [2]uint64) bool {
	for id := range m.inflight {
		if id >= r[0] && id < r[1] {
			return true
		}
	}
	return false
}

// CloseSession removes this client's session and its holds, destroying
// orphans no longer held by anyone (files still open in this client stay
// protected by the in-memory count until CloseFile). No-op without a
// session.
func (m *Meta) CloseSession(ctx context.Context) error {
	m.holdMu.Lock()
	defer m.holdMu.Unlock()
	m.idMu.Lock()
	m.renew = false // a session declared dead is not renewed after this
	m.idMu.Unlock()
	sid := m.sessionID()
	if sid == 0 {
		return nil
	}
	if m.leases != nil {
		m.leases.forgetAll()
	}
	err := m.mutateRaw(ctx, func(o *op) error {
		o.Delete(sessionKey(sid))
		return o.releaseSessions(map[uint64]bool{sid: true})
	})
	if err != nil {
		return fmt.Errorf("closing session %d: %w", sid, err)
	}
	m.announceRelease(ctx, "*")
	m.mu.Lock()
	m.sid = 0
	clear(m.releases) // their holds went with the session
	m.mu.Unlock()
	return nil
}

// releaseSessions releases what the given (ended) sessions held: their
// locks, slice reservations, grants of the volume's limits and open-file
// holds.
func (o *op) releaseSessions(dead map[uint64]bool) error {
	if _, err := o.releaseSessionLocks(dead); err != nil {
		return err
	}
	if err := o.releaseSessionLeases(dead); err != nil {
		return err
	}
	for sid := range dead {
		if err := o.deletePrefix(reservedPrefix(sid)); err != nil {
			return err
		}
		if err := o.deletePrefix(grantPrefix(sid)); err != nil {
			return err
		}
	}
	return o.releaseSessionHolds(dead)
}

// deletePrefix deletes every key that starts with p.
func (t *wtx) deletePrefix(p []byte) error {
	var keys [][]byte
	if err := t.Scan(p, kv.PrefixEnd(p), false, func(k, _ []byte) bool {
		keys = append(keys, bytes.Clone(k))
		return true
	}); err != nil {
		return err
	}
	for _, k := range keys {
		t.Delete(k)
	}
	return nil
}

// releaseSessionHolds deletes every hold of the given sessions and
// destroys orphans left without any hold.
func (o *op) releaseSessionHolds(dead map[uint64]bool) error {
	var inos []base.Ino
	var keys [][]byte
	err := o.Scan(prefixOnly(pHold), kv.PrefixEnd(prefixOnly(pHold)), false, func(k, _ []byte) bool {
		ino, sid, err := decodeHoldKey(k)
		if err != nil {
			return true
		}
		if dead[sid] {
			inos = append(inos, ino)
			keys = append(keys, append([]byte(nil), k...))
		}
		return true
	})
	if err != nil {
		return err
	}
	for _, k := range keys {
		o.Delete(k)
	}
	for _, ino := range inos {
		if err := o.destroyIfOrphan(ino); err != nil {
			return err
		}
	}
	return nil
}

// releaseDeadSessions releases the holds, locks and slice reservations of
// sessions whose record is gone (closed or expired while this was not
// finished, or a crashed embedded client).
func (m *Meta) releaseDeadSessions(ctx context.Context) error {
	return m.mutateRaw(ctx, func(o *op) error {
		live := make(map[uint64]bool)
		if err := o.Scan(prefixOnly(pSession), kv.PrefixEnd(prefixOnly(pSession)), false, func(k, _ []byte) bool {
			if sid, err := decodeSessionKey(k); err == nil {
				live[sid] = true
			}
			return true
		}); err != nil {
			return err
		}
		dead := make(map[uint64]bool)
		collect := func(prefix byte) error {
			return o.Scan(prefixOnly(prefix), kv.PrefixEnd(prefixOnly(prefix)), false, func(k, _ []byte) bool {
				if sid, ok := keySession(k); ok && sid != 0 && !live[sid] {
					dead[sid] = true
				}
				return true
			})
		}
		for _, p := range []byte{pHold, pLock, pReserved, pRecall, pGrant} {
			if err := collect(p); err != nil {
				return err
			}
		}
		if err := o.Scan(prefixOnly(pLease), kv.PrefixEnd(prefixOnly(pLease)), false, func(_, v []byte) bool {
			if sid, _, ok := leaseHolder(v); ok {
				if sid != 0 && !live[sid] {
					dead[sid] = true
				}
			}
			return true
		}); err != nil {
			return err
		}
		if len(dead) == 0 {
			return nil
		}
		m.log.Info("releasing holds, locks and reservations of dead sessions", "sessions", len(dead))
		return o.releaseSessions(dead)
	})
}

// ExpiredSession is the record of a session another client declared dead.
type ExpiredSession struct {
	SessionInfo
	Expired   time.Time `json:"expired"`
	ExpiredBy uint64    `json:"expired_by"`
}

// expiredKeep is how long expired-session records are kept for status.
const expiredKeep = 24 * time.Hour

// ExpireSessions declares dead every other session whose last heartbeat is
// older than its own Timeout, or than timeout for sessions that give none:
// it deletes the session, releases its locks, holds (destroying the
// unlinked files only it kept) and slice reservations, and keeps an
// ExpiredSession record for a day. It returns the expired sessions. Clocks
// of the clients must agree to well within timeout.
//
// It judges a session only once this client has reached the store without
// a break for that session's timeout and half again (reach.go): after an
// outage of the store every client gets that long to heartbeat again. So
// the caller must heartbeat (Heartbeat) more often than its own session
// timeout; a client without a session expires nothing.
func (m *Meta) ExpireSessions(ctx context.Context, timeout time.Duration) ([]SessionInfo, error) {
	if timeout <= 0 {
		return nil, fmt.Errorf("session timeout %v: %w", timeout, base.ErrInvalid)
	}
	return m.expireSessions(ctx, timeout, false)
}

// ExpireAllSessions declares every other session dead, whatever its
// heartbeat: for an embedded store, which one process holds at a time,
// every session found at open belongs to a client that crashed.
func (m *Meta) ExpireAllSessions(ctx context.Context) ([]SessionInfo, error) {
	return m.expireSessions(ctx, 0, true)
}

func (m *Meta) expireSessions(ctx context.Context, timeout time.Duration, all bool) ([]SessionInfo, error) {
	me := m.sessionID()
	var expired []SessionInfo
	wall := time.Now()
	// The ages are taken at this moment even if the transaction runs
	// later (retried across an outage): they can only come out younger.
	now := wall.UTC()
	reached := m.reachedFor(wall, timeout)
	if !all && reached == 0 {
		return nil, nil // not judging anyone: see reach.go
	}
	held := 0
	err := m.mutateRaw(ctx, func(o *op) error {
		expired, held = expired[:0], 0
		var derr error
		if err := o.Scan(prefixOnly(pSession), kv.PrefixEnd(prefixOnly(pSession)), false, func(k, v []byte) bool {
			var info SessionInfo
			if err := json.Unmarshal(v, &info); err != nil {
				derr = fmt.Errorf("session %x: %v: %w", k, err, base.ErrIO)
				return false
			}
			limit := timeout
			if info.Timeout > 0 {
				limit = info.Timeout
			}
			switch {
			case info.ID == me:
			case all:
				expired = append(expired, info)
			case now.Sub(info.Heartbeat) <= limit:
			case reached >= judgeAfter(limit):
				expired = append(expired, info)
			default:
				held++ // stale, but maybe only because the store was away
			}
			return true
		}); err != nil {
			return err
		}
		if derr != nil {
			return derr
		}
		var old [][]byte
		if err := o.Scan(prefixOnly(pExpired), kv.PrefixEnd(prefixOnly(pExpired)), false, func(k, v []byte) bool {
			var e ExpiredSession
			if json.Unmarshal(v, &e) != nil || now.Sub(e.Expired) > expiredKeep {
				old = append(old, append([]byte(nil), k...))
			}
			return true
		}); err != nil {
			return err
		}
		for _, k := range old {
			o.Delete(k)
		}
		if len(expired) == 0 {
			return nil
		}
		dead := make(map[uint64]bool, len(expired))
		for _, info := range expired {
			dead[info.ID] = true
			o.Delete(sessionKey(info.ID))
			js, err := json.Marshal(ExpiredSession{SessionInfo: info, Expired: now, ExpiredBy: me})
			if err != nil {
				return err
			}
			o.Set(expiredKey(info.ID), js)
		}
		return o.releaseSessions(dead)
	})
	if err != nil {
		return nil, fmt.Errorf("expiring sessions: %w", err)
	}
	if held > 0 {
		m.log.Debug("sessions without a recent heartbeat not judged yet: this client has not reached the store long enough",
			"sessions", held, "reached_for", reached)
	}
	if len(expired) > 0 {
		for _, info := range expired {
			m.log.Warn("declared a session dead: no heartbeat", "session", info.ID, "host", info.Host,
				"pid", info.Pid, "last_heartbeat", info.Heartbeat, "timeout", timeout)
		}
		m.announceRelease(ctx, "*")
	}
	return expired, nil
}

// ListExpiredSessions lists the sessions declared dead in the last day.
func (m *Meta) ListExpiredSessions(ctx context.Context) ([]ExpiredSession, error) {
	var out []ExpiredSession
	err := m.view(ctx, func(r kv.Reader) error {
		out = out[:0]
		return r.Scan(prefixOnly(pExpired), kv.PrefixEnd(prefixOnly(pExpired)), false, func(_, v []byte) bool {
			var e ExpiredSession
			if json.Unmarshal(v, &e) == nil {
				out = append(out, e)
			}
			return true
		})
	})
	return out, err
}

// SliceGuard tells gc which slice ids may belong to writes still in
// flight in some live client.
type SliceGuard struct {
	// Next is the slice id counter: ids at or above it were not handed out
	// when the guard was read.
	Next uint64
	// Reserved are the [start, end) ranges reserved by live sessions.
	Reserved [][2]uint64
}

// Protects reports whether gc must keep the blocks of slice id.
func (g SliceGuard) Protects(id uint64) bool {
	id = base.SliceNumber(id)
	if id >= g.Next {
		return true
	}
	for _, r := range g.Reserved {
		if id >= r[0] && id < r[1] {
			return true
		}
	}
	return false
}

// SliceGuard reads the slice guard in the same view as fn, which gc uses to
// read the referenced slices, so both describe one moment.
func (m *Meta) SliceGuard(ctx context.Context) (SliceGuard, error) {
	var g SliceGuard
	err := m.view(ctx, func(r kv.Reader) error {
		var err error
		g = SliceGuard{}
		if g.Next, err = counter(r, counterNextSlice); err != nil {
			return err
		}
		live := make(map[uint64]bool)
		if err := r.Scan(prefixOnly(pSession), kv.PrefixEnd(prefixOnly(pSession)), false, func(k, _ []byte) bool {
			if sid, err := decodeSessionKey(k); err == nil {
				live[sid] = true
			}
			return true
		}); err != nil {
			return err
		}
		return r.Scan(prefixOnly(pReserved), kv.PrefixEnd(prefixOnly(pReserved)), false, func(k, v []byte) bool {
			if sid, start, err := decodeReservedKey(k); err == nil && live[sid] {
				if end, err := decodeU64(v); err == nil {
					g.Reserved = append(g.Reserved, [2]uint64{start, end})
				}
			}
			return true
		})
	})
	return g, err
}

// ListSessions lists the registered sessions in id order.
func (m *Meta) ListSessions(ctx context.Context) ([]SessionInfo, error) {
	var out []SessionInfo
	err := m.view(ctx, func(r kv.Reader) error {
		out = out[:0]
		var derr error
		err := r.Scan(prefixOnly(pSession), kv.PrefixEnd(prefixOnly(pSession)), false, func(k, v []byte) bool {
			var info SessionInfo
			if err := json.Unmarshal(v, &info); err != nil {
				derr = fmt.Errorf("session %x: %v: %w", k, err, base.ErrIO)
				return false
			}
			out = append(out, info)
			return true
		})
		if err != nil {
			return err
		}
		return derr
	})
	return out, err
}

// Holds in memory (Options.MemoryHolds). An unlink decides whether to
// destroy the inode of a name's last link by reading this client's open
// count (op.held) inside its transaction. An open that raises the count
// from zero, or a close that drops it to zero, between that read and the
// unlink's commit would be missed: the open would then hand out a file
// the commit destroys, the close would leave an orphan nobody closes.
// With hold records the two transactions conflicted; here both touch the
// hold key (ino, session 0) after changing the count, and the unlink
// reads that key (held reads the inode's hold prefix, or the key itself).
// Either the touch comes before the unlink's commit, which then runs
// again and sees the new count; or after it, and the open's or close's
// read of the attributes, which follows the touch, sees what the unlink
// committed: an open of a destroyed inode fails, and a close finding the
// inode unlinked destroys it (op.destroyIfOrphan).

// reservationGuard is a reservation record a commit of slice id needs.
type reservationGuard struct {
	id  uint64
	key []byte
}

// reservationKeys returns the reservation records that cover the given
// slice ids in this client's session (none without a session), and a
// guard without a record for each id that is lost.
func (m *Meta) reservationKeys(ids []uint64) []reservationGuard {
	sid := m.sessionID()
	m.idMu.Lock()
	defer m.idMu.Unlock()
	var out []reservationGuard
	seen := map[uint64]bool{}
	for _, id := range ids {
		id = base.SliceNumber(id)
		if m.lost[id] {
			// Also without a session: one declared dead and not yet
			// renewed.
			out = append(out, reservationGuard{id: id})
			continue
		}
		if sid == 0 {
			continue
		}
		for _, r := range m.reserved {
			if id >= r[0] && id < r[1] && !seen[r[0]] {
				seen[r[0]] = true
				out = append(out, reservationGuard{id: id, key: reservedKey(sid, r[0])})
			}
		}
	}
	return out
}

// checkReserved fails a commit whose slices' reservation is gone: the
// session was declared dead meanwhile, and gc may already have deleted
// the slices' blocks, so committing them would reference missing data.
func (o *op) checkReserved(guards []reservationGuard) error {
	for _, g := range guards {
		if g.key == nil {
			return fmt.Errorf("slice %d was written under a session that was declared dead; the write is lost: %w", g.id, base.ErrStale)
		}
		v, err := o.Get(g.key)
		if err != nil {
			return err
		}
		if v == nil {
			return fmt.Errorf("slice %d: this client's session was declared dead (no heartbeat) and its unfinished writes may have been collected; the write is lost: %w", g.id, base.ErrStale)
		}
		// Written back unchanged: an expiry deleting it concurrently
		// conflicts with this commit (kv.Txn).
		o.Set(g.key, v)
	}
	return nil
}
