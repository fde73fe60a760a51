package meta

// Sessions, open-file holds and usage.
//
// A client counts its open handles per inode in memory (OpenFile,
// CloseFile). When it has a session, the first open of an inode also
// writes a persistent hold (ino, session) so other clients do not destroy
// the inode when they unlink its last name, and so that holds of a crashed
// session can be found and released. An inode whose last link goes while
// it is held becomes an orphan (nlink 0, orphan record) and is destroyed at
// the last close, at CloseSession, or when a later client finds its
// session gone.

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// mutateRaw is mutate without the read-only check, for session bookkeeping.
func (m *Meta) mutateRaw(ctx context.Context, fn func(o *op) error) error {
	return m.rawUpdate(ctx, func(t *wtx) error {
		o := &op{wtx: t, m: m, now: m.now(), attrs: make(map[base.Ino]*base.Attr)}
		if err := fn(o); err != nil {
			return err
		}
		return o.flush()
	})
}

func (m *Meta) openCount(ino base.Ino) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.opened[ino]
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
		if !m.opts.ReadOnly {
			for _, ino := range open {
				t.Set(holdKey(ino, id), nil)
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("new session: %w", err)
	}
	m.mu.Lock()
	m.sid, m.session = info.ID, info
	m.mu.Unlock()
	return info.ID, nil
}

// Heartbeat records that the session is alive. ErrStale if the session
// record is gone (closed, or expired by another client); ErrInvalid if the
// client has no session.
func (m *Meta) Heartbeat(ctx context.Context) error {
	sid := m.sessionID()
	if sid == 0 {
		return fmt.Errorf("heartbeat without a session: %w", base.ErrInvalid)
	}
	return m.rawUpdate(ctx, func(t *wtx) error {
		v, err := t.Get(sessionKey(sid))
		if err != nil {
			return err
		}
		if v == nil {
			return fmt.Errorf("session %d is gone: %w", sid, base.ErrStale)
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
		return nil
	})
}

// CloseSession removes this client's session and its holds, destroying
// orphans no longer held by anyone (files still open in this client stay
// protected by the in-memory count until CloseFile). No-op without a
// session.
func (m *Meta) CloseSession(ctx context.Context) error {
	m.holdMu.Lock()
	defer m.holdMu.Unlock()
	sid := m.sessionID()
	if sid == 0 {
		return nil
	}
	err := m.mutateRaw(ctx, func(o *op) error {
		o.Delete(sessionKey(sid))
		return o.releaseSessionHolds(map[uint64]bool{sid: true})
	})
	if err != nil {
		return fmt.Errorf("closing session %d: %w", sid, err)
	}
	m.mu.Lock()
	m.sid = 0
	m.mu.Unlock()
	return nil
}

// releaseSessionHolds deletes every hold of the given sessions and
// destroys orphans left without any hold.
func (o *op) releaseSessionHolds(dead map[uint64]bool) error {
	var inos []base.Ino
	var keys [][]byte
	err := o.Scan([]byte{pHold}, kv.PrefixEnd([]byte{pHold}), false, func(k, _ []byte) bool {
		if len(k) != 17 {
			return true
		}
		ino, sid := base.Ino(binary.BigEndian.Uint64(k[1:])), binary.BigEndian.Uint64(k[9:])
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

func (o *op) destroyIfOrphan(ino base.Ino) error {
	a, err := o.attr(ino)
	if err != nil {
		return nil // already gone
	}
	if a.Nlink > 0 {
		return nil
	}
	if held, err := o.held(ino); err != nil || held {
		return err
	}
	return o.destroy(ino, a)
}

// releaseDeadHolds releases holds of sessions whose record is gone.
func (m *Meta) releaseDeadHolds(ctx context.Context) error {
	return m.mutateRaw(ctx, func(o *op) error {
		live := make(map[uint64]bool)
		if err := o.Scan([]byte{pSession}, kv.PrefixEnd([]byte{pSession}), false, func(k, _ []byte) bool {
			if len(k) == 9 {
				live[binary.BigEndian.Uint64(k[1:])] = true
			}
			return true
		}); err != nil {
			return err
		}
		dead := make(map[uint64]bool)
		if err := o.Scan([]byte{pHold}, kv.PrefixEnd([]byte{pHold}), false, func(k, _ []byte) bool {
			if len(k) == 17 {
				if sid := binary.BigEndian.Uint64(k[9:]); sid != 0 && !live[sid] {
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
		m.log.Info("releasing open-file holds of dead sessions", "sessions", len(dead))
		return o.releaseSessionHolds(dead)
	})
}

// ListSessions lists the registered sessions in id order.
func (m *Meta) ListSessions(ctx context.Context) ([]SessionInfo, error) {
	var out []SessionInfo
	err := m.view(ctx, func(r kv.Reader) error {
		out = out[:0]
		var derr error
		err := r.Scan([]byte{pSession}, kv.PrefixEnd([]byte{pSession}), false, func(k, v []byte) bool {
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

// OpenFile records an open handle of ino in this client. The first open
// writes a persistent hold if the client has a session; a failure to write
// it is logged (the in-memory count still protects against this client's
// own unlinks).
func (m *Meta) OpenFile(ino base.Ino) {
	m.holdMu.Lock()
	defer m.holdMu.Unlock()
	m.mu.Lock()
	n := m.opened[ino]
	m.opened[ino] = n + 1
	sid := m.sid
	m.mu.Unlock()
	if n > 0 || sid == 0 || m.opts.ReadOnly {
		return
	}
	err := m.rawUpdate(context.Background(), func(t *wtx) error {
		t.Set(holdKey(ino, sid), nil)
		return nil
	})
	if err != nil {
		m.log.Warn("recording open-file hold", "ino", ino, "session", sid, "err", err)
	}
}

// CloseFile releases one handle of ino. At the last handle the hold is
// dropped and, if the inode was unlinked meanwhile and nobody else holds
// it, it is destroyed. ErrBadFD if ino is not open in this client.
func (m *Meta) CloseFile(ctx context.Context, ino base.Ino) error {
	m.holdMu.Lock()
	defer m.holdMu.Unlock()
	m.mu.Lock()
	n := m.opened[ino]
	if n == 0 {
		m.mu.Unlock()
		return fmt.Errorf("close of inode %d that is not open: %w", ino, base.ErrBadFD)
	}
	if n == 1 {
		delete(m.opened, ino)
	} else {
		m.opened[ino] = n - 1
	}
	sid := m.sid
	m.mu.Unlock()
	if n > 1 || m.opts.ReadOnly {
		return nil
	}
	return m.mutate(ctx, func(o *op) error {
		if sid != 0 {
			o.Delete(holdKey(ino, sid))
		}
		return o.destroyIfOrphan(ino)
	})
}

// Usage returns the usage counters.
func (m *Meta) Usage(ctx context.Context) (Usage, error) {
	var u Usage
	err := m.view(ctx, func(r kv.Reader) error {
		var err error
		if u.Bytes, err = counter(r, counterUsedBytes); err != nil {
			return err
		}
		u.Inodes, err = counter(r, counterUsedInodes)
		return err
	})
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
	u, err := m.Usage(ctx)
	if err != nil {
		return StatFS{}, err
	}
	total := m.settings.Capacity
	if total == 0 {
		total = VirtualCapacity
	}
	files := m.settings.Inodes
	if files == 0 {
		files = VirtualInodes
	}
	st := StatFS{TotalBytes: total, UsedBytes: u.Bytes, Files: u.Inodes}
	if total > u.Bytes {
		st.AvailBytes = total - u.Bytes
	}
	if files > u.Inodes {
		st.AvailFiles = files - u.Inodes
	}
	return st, nil
}
