package meta

// File locks shared by every client of the volume: BSD flock locks and
// POSIX byte-range (fcntl) locks. The two kinds are independent of each
// other, as on Linux.
//
// A lock belongs to an owner: the session of the client that took it and
// the owner id the client's kernel gives (one per open file description for
// flock, one per process file table for POSIX locks). The locks of one owner
// on one inode are one record, so taking or releasing a lock is a single
// transaction that reads the inode's records, checks for conflicts and
// rewrites the owner's record, and writes the inode's lock guard key, so
// two clients' checks cannot both commit (kv.Txn: snapshot isolation
// needs a common written key).
//
// A blocking request that conflicts waits, without polling the database:
// every release is announced on the store's Notifier (kv.Notifier), and the
// waiter retries only when a release on its inode (or a session expiry) is
// announced. A long safety re-check (LockRecheck) covers notifications lost
// with a dropped connection. Waiters are woken together and race for the
// lock; there is no deadlock detection across clients.
//
// When a session ends or expires, its locks are deleted and a release is
// announced, so waiters of a crashed client get the lock after the session
// timeout.

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// Lock kinds (byte in the lock key). Persisted.
const (
	lockFlock = 'f'
	lockPosix = 'p'
	lockGuard = 'g'
)

// LockRecheck is how long a blocked lock request waits for a release
// notification before it checks again anyway.
var LockRecheck = 5 * time.Second

// lockChannel is the Notifier channel of lock releases; the payload is the
// inode number, or "*" for a release of many inodes (a session's end).
const lockChannel = "cairn_locks"

func conflicts(t, u LockType) bool {
	return t != Unlock && u != Unlock && (t == WriteLock || u == WriteLock)
}

// Flock takes, converts or releases (typ Unlock) the flock lock of owner on
// ino. With wait, a conflicting request waits until it can be granted or
// ctx ends (base.ErrInterrupted); without, it fails with
// base.ErrWouldBlock.
func (m *Meta) Flock(ctx context.Context, ino base.Ino, owner uint64, typ LockType, pid uint32, wait bool) error {
	l := Lock{Type: typ, Start: 0, End: LockEOF, Pid: pid}
	return m.setLock(ctx, ino, lockFlock, owner, l, wait)
}

// SetPosixLock applies a POSIX lock request of owner on ino: it takes or
// converts the lock on [l.Start, l.End], or releases that range (Unlock),
// splitting and merging the owner's ranges as fcntl does. Waiting as for
// Flock.
func (m *Meta) SetPosixLock(ctx context.Context, ino base.Ino, owner uint64, l Lock, wait bool) error {
	if l.End < l.Start {
		return fmt.Errorf("lock range %d-%d: %w", l.Start, l.End, base.ErrInvalid)
	}
	return m.setLock(ctx, ino, lockPosix, owner, l, wait)
}

// GetPosixLock returns the first lock of another owner that conflicts with
// request l, or a Lock of type Unlock if l could be granted now.
func (m *Meta) GetPosixLock(ctx context.Context, ino base.Ino, owner uint64, l Lock) (Lock, error) {
	sid := m.sessionID()
	var found Lock
	err := m.view(ctx, func(r kv.Reader) error {
		found = Lock{}
		c, _, err := scanLocks(r, ino, lockPosix, sid, owner, l)
		if c != nil {
			found = *c
		}
		return err
	})
	if err == nil && found.Type != Unlock && found.Session != sid {
		found.Pid = 0
	}
	return found, err
}

// listLocks lists every lock on ino (both kinds), for tests.
func (m *Meta) listLocks(ctx context.Context, ino base.Ino) (flock, posix []Lock, err error) {
	err = m.view(ctx, func(r kv.Reader) error {
		flock, posix = nil, nil
		var derr error
		err := r.Scan(lockPrefix(ino), kv.PrefixEnd(lockPrefix(ino)), false, func(k, v []byte) bool {
			ki, err := DecodeKey(k)
			if err != nil {
				derr = err
				return false
			}
			if ki.Kind != "lock" {
				return true // the guard
			}
			ls, err := decodeLocks(ki.Counter, v)
			if err != nil {
				derr = err
				return false
			}
			for _, l := range ls {
				l.Session, l.Owner = ki.ID, ki.Owner
				if ki.Counter == lockFlock {
					flock = append(flock, l)
				} else {
					posix = append(posix, l)
				}
			}
			return true
		})
		if err != nil {
			return err
		}
		return derr
	})
	return flock, posix, err
}

func (m *Meta) setLock(ctx context.Context, ino base.Ino, kind byte, owner uint64, l Lock, wait bool) error {
	if l.Type > WriteLock {
		return fmt.Errorf("lock type %d: %w", l.Type, base.ErrInvalid)
	}
	var sub <-chan string
	if n, ok := m.store.(kv.Notifier); ok && wait && l.Type != Unlock {
		var stop func()
		sub, stop = n.Subscribe(lockChannel)
		defer stop()
	}
	me := strconv.FormatUint(uint64(ino), 10)
	for {
		blocked, released, err := m.tryLock(ctx, ino, kind, owner, l)
		if err != nil {
			return err
		}
		if released {
			m.announceRelease(ctx, me)
		}
		if !blocked {
			return nil
		}
		if !wait {
			return fmt.Errorf("inode %d is locked: %w", ino, base.ErrWouldBlock)
		}
		if err := waitRelease(ctx, sub, me); err != nil {
			return err
		}
	}
}

// waitRelease waits for a release announcement concerning ino, the
// re-check timeout, or the end of ctx.
func waitRelease(ctx context.Context, sub <-chan string, ino string) error {
	t := time.NewTimer(LockRecheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for a lock: %w", base.ErrInterrupted)
		case <-t.C:
			return nil
		case p := <-sub:
			if p == ino || p == "*" {
				return nil
			}
		}
	}
}

func (m *Meta) announceRelease(ctx context.Context, payload string) {
	n, ok := m.store.(kv.Notifier)
	if !ok {
		return
	}
	if err := n.Notify(ctx, lockChannel, payload); err != nil {
		m.log.Warn("announcing a lock release", "inode", payload, "err", err)
	}
}

// tryLock applies l for (session, owner) unless another owner holds a
// conflicting lock (blocked). released reports that the owner gave up
// coverage or strength, so waiters should look again.
func (m *Meta) tryLock(ctx context.Context, ino base.Ino, kind byte, owner uint64, l Lock) (blocked, released bool, err error) {
	sid := m.sessionID()
	key := lockKey(ino, kind, sid, owner)
	err = m.rawUpdate(ctx, func(t *wtx) error {
		blocked, released = false, false
		c, mine, err := scanLocks(t, ino, kind, sid, owner, l)
		if err != nil {
			return err
		}
		if c != nil {
			blocked = true
			return nil
		}
		var next []Lock
		next, released = applyLock(mine, l)
		// Every change writes the guard, so two clients that each saw no
		// conflict cannot both commit (kv.Txn).
		t.Set(lockGuardKey(ino), u64(nil, uint64(time.Now().UnixNano())))
		if len(next) == 0 {
			if mine != nil {
				t.Delete(key)
			}
			return nil
		}
		t.Set(key, encodeLocks(kind, next))
		return nil
	})
	return blocked, released, err
}

// scanLocks reads the locks of kind on ino: it returns the first lock of
// another owner conflicting with request l (nil if none) and the locks of
// (sid, owner) itself.
func scanLocks(r kv.Reader, ino base.Ino, kind byte, sid, owner uint64, l Lock) (conflict *Lock, mine []Lock, err error) {
	start := lockKindPrefix(ino, kind)
	var derr error
	err = r.Scan(start, kv.PrefixEnd(start), false, func(k, v []byte) bool {
		_, _, ksid, kowner, err := decodeLockKey(k)
		if err != nil {
			derr = err
			return false
		}
		ls, err := decodeLocks(kind, v)
		if err != nil {
			derr = err
			return false
		}
		if ksid == sid && kowner == owner {
			mine = ls
			return true
		}
		if conflict != nil {
			return true
		}
		for _, h := range ls {
			if h.Start <= l.End && l.Start <= h.End && conflicts(h.Type, l.Type) {
				h.Session, h.Owner = ksid, kowner
				conflict = &h
				break
			}
		}
		return true
	})
	if err == nil {
		err = derr
	}
	return conflict, mine, err
}

// applyLock returns the owner's ranges after request l (sorted, merged) and
// whether any range was released or weakened.
func applyLock(mine []Lock, l Lock) (next []Lock, released bool) {
	for _, h := range mine {
		if h.End < l.Start || h.Start > l.End {
			next = append(next, h)
			continue
		}
		if l.Type != h.Type {
			released = released || l.Type == Unlock || h.Type == WriteLock
		}
		if h.Start < l.Start {
			left := h
			left.End = l.Start - 1
			next = append(next, left)
		}
		if h.End > l.End {
			right := h
			right.Start = l.End + 1
			next = append(next, right)
		}
	}
	if l.Type != Unlock {
		next = append(next, Lock{Type: l.Type, Start: l.Start, End: l.End, Pid: l.Pid})
	}
	slices.SortFunc(next, func(a, b Lock) int { return cmp.Compare(a.Start, b.Start) })
	merged := next[:0]
	for _, h := range next {
		if n := len(merged); n > 0 {
			p := &merged[n-1]
			if p.Type == h.Type && p.End != LockEOF && p.End+1 >= h.Start {
				p.End = max(p.End, h.End)
				continue
			}
		}
		merged = append(merged, h)
	}
	return merged, released
}

const lockRecordLen = 8 + 8 + 1 + 4

func encodeLocks(kind byte, ls []Lock) []byte {
	if kind == lockFlock {
		return binary.BigEndian.AppendUint32([]byte{byte(ls[0].Type)}, ls[0].Pid)
	}
	b := make([]byte, 0, len(ls)*lockRecordLen)
	for _, l := range ls {
		b = u64(b, l.Start)
		b = u64(b, l.End)
		b = append(b, byte(l.Type))
		b = binary.BigEndian.AppendUint32(b, l.Pid)
	}
	return b
}

func decodeLocks(kind byte, v []byte) ([]Lock, error) {
	bad := func() ([]Lock, error) { return nil, fmt.Errorf("lock record %x: %w", v, base.ErrIO) }
	if kind == lockFlock {
		if len(v) != 5 || v[0] == byte(Unlock) || v[0] > byte(WriteLock) {
			return bad()
		}
		return []Lock{{Type: LockType(v[0]), End: LockEOF, Pid: binary.BigEndian.Uint32(v[1:])}}, nil
	}
	if len(v) == 0 || len(v)%lockRecordLen != 0 {
		return bad()
	}
	ls := make([]Lock, 0, len(v)/lockRecordLen)
	for ; len(v) > 0; v = v[lockRecordLen:] {
		l := Lock{Start: binary.BigEndian.Uint64(v), End: binary.BigEndian.Uint64(v[8:]),
			Type: LockType(v[16]), Pid: binary.BigEndian.Uint32(v[17:])}
		if l.End < l.Start || l.Type == Unlock || l.Type > WriteLock {
			return bad()
		}
		ls = append(ls, l)
	}
	return ls, nil
}

// releaseSessionLocks deletes every lock of the given sessions.
func (o *op) releaseSessionLocks(dead map[uint64]bool) (int, error) {
	var keys [][]byte
	err := o.Scan(prefixOnly(pLock), kv.PrefixEnd(prefixOnly(pLock)), false, func(k, _ []byte) bool {
		if _, _, sid, _, err := decodeLockKey(k); err == nil && dead[sid] {
			keys = append(keys, append([]byte(nil), k...))
		}
		return true
	})
	for _, k := range keys {
		o.Delete(k)
	}
	return len(keys), err
}
