package meta

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/testenv/pgtest"
)

// Sessions across an outage of the metadata store (reach.go): no session
// is declared dead because the store was away, and a client that really
// stops heartbeating still is.

// Short session times, as test mounts use.
const (
	outageTimeout   = time.Second
	outageHeartbeat = 200 * time.Millisecond
)

// sessionLoop does for a client what a mount's session loop does
// (daemon.keepSessionAlive): every interval a heartbeat, then a sweep for
// dead sessions, both bounded by half the session timeout.
type sessionLoop struct {
	quit, done chan struct{}
	once       sync.Once

	mu      sync.Mutex
	stale   []error       // heartbeats that found the session declared dead
	expired []SessionInfo // sessions this client declared dead
}

func startSessionLoop(t *testing.T, m *Meta) *sessionLoop {
	l := &sessionLoop{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		tick := time.NewTicker(outageHeartbeat)
		defer tick.Stop()
		for {
			select {
			case <-l.quit:
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), outageTimeout/2)
			err := m.Heartbeat(ctx)
			exp, _ := m.ExpireSessions(ctx, outageTimeout)
			cancel()
			l.mu.Lock()
			if errors.Is(err, base.ErrStale) {
				l.stale = append(l.stale, err)
			}
			l.expired = append(l.expired, exp...)
			l.mu.Unlock()
		}
	}()
	t.Cleanup(l.stop) // before the clients close: cleanups run last-in first-out
	return l
}

// stop ends the loop and waits for it: the client stops heartbeating.
func (l *sessionLoop) stop() {
	l.once.Do(func() { close(l.quit) })
	<-l.done
}

func (l *sessionLoop) results() (stale []error, expired []SessionInfo) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.stale...), append([]SessionInfo(nil), l.expired...)
}

// outageStore is a kv.Store whose transactions fail while it is down, as
// those of a store on an unreachable server do.
type outageStore struct {
	kv.Store
	down atomic.Bool
	// okLeft, when positive, is how many more transactions succeed before
	// the store goes down.
	okLeft atomic.Int64
}

var errStoreDown = errors.New("test: the store cannot be reached")

func (s *outageStore) fail() bool {
	if n := s.okLeft.Load(); n > 0 && s.okLeft.Add(-1) == 0 {
		s.down.Store(true)
		return false
	}
	return s.down.Load()
}

func (s *outageStore) Update(ctx context.Context, fn func(kv.Txn) error) error {
	if s.fail() {
		return errStoreDown
	}
	return s.Store.Update(ctx, fn)
}

func (s *outageStore) View(ctx context.Context, fn func(kv.Reader) error) error {
	if s.fail() {
		return errStoreDown
	}
	return s.Store.View(ctx, fn)
}

// outageClients opens two clients of one test store, each through its
// own outageStore, with sessions of outageTimeout.
func outageClients(t *testing.T) (a, b *Meta, sa, sb *outageStore) {
	t.Helper()
	store := newStore(t, Settings{Name: "outage"})
	var ms [2]*Meta
	var ss [2]*outageStore
	for i := range ms {
		ss[i] = &outageStore{Store: store}
		ms[i] = must[*Meta](t)(Open(ctx, ss[i], Options{}))
		t.Cleanup(func() { _ = ms[i].Close() })
		must[uint64](t)(ms[i].NewSession(ctx, SessionInfo{Host: string(rune('a' + i)), Timeout: outageTimeout}))
	}
	checkOnCleanup(t, ms[0])
	t.Cleanup(func() { // before the check
		for _, s := range ss {
			s.okLeft.Store(0)
			s.down.Store(false)
		}
	})
	return ms[0], ms[1], ss[0], ss[1]
}

// testSessionsThroughOutage takes the store away for three session
// timeouts (down, up) under two clients that heartbeat: neither may be
// declared dead, and a write in flight across the outage commits. Then a
// that stops heartbeating while the store is up is declared dead.
func testSessionsThroughOutage(t *testing.T, a, b *Meta, down, up func()) {
	ino := create(t, a, root, base.RootIno, "f")
	id := must[uint64](t)(a.NewSliceID(ctx)) // in flight across the outage
	sa, sb := a.SessionID(), b.SessionID()
	la, lb := startSessionLoop(t, a), startSessionLoop(t, b)
	time.Sleep(2 * outageTimeout)

	down()
	time.Sleep(3 * outageTimeout)
	up()
	// Past the moment both clients may judge again, with room to do it.
	time.Sleep(judgeAfter(outageTimeout) + 2*outageTimeout)

	for name, l := range map[string]*sessionLoop{"a": la, "b": lb} {
		stale, expired := l.results()
		if len(expired) > 0 {
			t.Errorf("%s declared sessions dead after an outage of the store: %+v", name, expired)
		}
		if len(stale) > 0 {
			t.Errorf("%s's heartbeats found its session declared dead: %v", name, stale)
		}
	}
	if a.SessionID() != sa || b.SessionID() != sb {
		t.Errorf("sessions %d, %d became %d, %d", sa, sb, a.SessionID(), b.SessionID())
	}
	if gone := must[[]ExpiredSession](t)(b.ListExpiredSessions(ctx)); len(gone) > 0 {
		t.Errorf("expired sessions recorded: %+v", gone)
	}
	if _, err := a.WriteSlices(ctx, ino, []SliceWrite{{Slice: base.Slice{ID: id, Size: 10, Len: 10}}}, 1); err != nil {
		t.Fatalf("a slice reserved before the outage does not commit after it: %v", err)
	}
	if t.Failed() {
		return
	}

	// a stops heartbeating while the store is up: b declares it dead.
	la.stop()
	stopped := time.Now()
	waitExpired(t, lb, b, sa, stopped)
	id2 := must[uint64](t)(a.NewSliceID(ctx))
	_, err := a.WriteSlices(ctx, ino, []SliceWrite{{Slice: base.Slice{ID: id2, Size: 10, Len: 10}}}, 2)
	wantErr(t, err, base.ErrStale)
	a.ForgetSlice(id2)
	wantErr(t, a.Heartbeat(ctx), base.ErrStale)
	if a.SessionID() == 0 || a.SessionID() == sa {
		t.Fatalf("a's session after it was declared dead: %d", a.SessionID())
	}
}

// waitExpired waits until loop l of client m declared session sid dead,
// no sooner than a session timeout after the session's last heartbeat and
// no later than judgeAfter and a few seconds after stopped (when its
// client stopped heartbeating).
func waitExpired(t *testing.T, l *sessionLoop, m *Meta, sid uint64, stopped time.Time) {
	t.Helper()
	deadline := stopped.Add(judgeAfter(outageTimeout) + 5*time.Second)
	for {
		_, expired := l.results()
		for _, s := range expired {
			if s.ID != sid {
				t.Fatalf("declared session %d dead, want only %d", s.ID, sid)
			}
		}
		if len(expired) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %d not declared dead %v after its client stopped heartbeating", sid, time.Since(stopped))
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, e := range must[[]ExpiredSession](t)(m.ListExpiredSessions(ctx)) {
		if e.ID == sid {
			if age := e.Expired.Sub(e.Heartbeat); age <= outageTimeout {
				t.Fatalf("session %d declared dead %v after its last heartbeat, within its timeout %v", sid, age, outageTimeout)
			}
			return
		}
	}
	t.Fatalf("session %d declared dead has no record", sid)
}

func TestSessionsThroughStoreOutage(t *testing.T) {
	a, b, sa, sb := outageClients(t)
	testSessionsThroughOutage(t, a, b,
		func() { sa.down.Store(true); sb.down.Store(true) },
		func() { sa.down.Store(false); sb.down.Store(false) })
}

// The outage found by a test on a real volume: PostgreSQL stopped for
// longer than the session timeout under clients that heartbeat.
func TestSharedSessionsThroughPostgresOutage(t *testing.T) {
	srv := pgtest.Shared(t)
	ms, _ := leaseClients(t, 2, outageTimeout)
	testSessionsThroughOutage(t, ms[0], ms[1],
		func() { ok(t, srv.Stop()) },
		func() { ok(t, srv.Start()) })
}

// A client whose store is up but which stops heartbeating is declared
// dead after its timeout; its write in flight then fails with ESTALE, and
// its next heartbeat registers a new session whose writes commit.
func TestSessionOfSilentClientExpires(t *testing.T) {
	a, b, _, _ := outageClients(t)
	ino := create(t, a, root, base.RootIno, "f")
	id := must[uint64](t)(a.NewSliceID(ctx))
	la, lb := startSessionLoop(t, a), startSessionLoop(t, b)
	sa := a.SessionID()
	time.Sleep(2 * outageTimeout)
	la.stop()
	waitExpired(t, lb, b, sa, time.Now())
	_, err := a.WriteSlices(ctx, ino, []SliceWrite{{Slice: base.Slice{ID: id, Size: 10, Len: 10}}}, 1)
	wantErr(t, err, base.ErrStale)
	a.ForgetSlice(id)
	wantErr(t, a.Heartbeat(ctx), base.ErrStale)
	ok(t, a.Heartbeat(ctx))
	id2 := must[uint64](t)(a.NewSliceID(ctx))
	must[[]uint32](t)(a.WriteSlices(ctx, ino, []SliceWrite{{Slice: base.Slice{ID: id2, Size: 10, Len: 10}}}, 2))
	if stale, _ := lb.results(); len(stale) > 0 {
		t.Fatalf("b's heartbeats found its session declared dead: %v", stale)
	}
}

// A client that finds its session declared dead while the store goes
// away again cannot register a new one at once: it stays without a
// session, its writes fail with ESTALE (no reservation protects them from
// gc), and its next heartbeat that reaches the store registers one.
func TestSessionRenewedAfterFailedRenewal(t *testing.T) {
	a, b, sa, _ := outageClients(t)
	ino := create(t, a, root, base.RootIno, "f")
	id := must[uint64](t)(a.NewSliceID(ctx))
	old := a.SessionID()
	if exp := must[[]SessionInfo](t)(b.ExpireAllSessions(ctx)); len(exp) != 1 || exp[0].ID != old {
		t.Fatalf("expired %+v, want a's session %d", exp, old)
	}
	sa.okLeft.Store(1) // the heartbeat finds the session gone; its renewal fails
	err := a.Heartbeat(ctx)
	if !errors.Is(err, base.ErrStale) || a.SessionID() != 0 {
		t.Fatalf("heartbeat of a session declared dead while the store goes away: %v, session %d", err, a.SessionID())
	}
	wantErr(t, a.Heartbeat(ctx), base.ErrStale)
	sa.down.Store(false)
	// Without a session, neither the write in flight before nor one
	// started now may commit.
	id2 := must[uint64](t)(a.NewSliceID(ctx))
	for _, id := range []uint64{id, id2} {
		_, err := a.WriteSlices(ctx, ino, []SliceWrite{{Slice: base.Slice{ID: id, Size: 10, Len: 10}}}, 1)
		wantErr(t, err, base.ErrStale)
		a.ForgetSlice(id)
	}
	if got := must[[]SessionInfo](t)(a.ExpireSessions(ctx, outageTimeout)); len(got) > 0 {
		t.Fatalf("a client without a session declared sessions dead: %+v", got)
	}
	ok(t, a.Heartbeat(ctx))
	if a.SessionID() == 0 || a.SessionID() == old {
		t.Fatalf("session after renewal: %d", a.SessionID())
	}
	id3 := must[uint64](t)(a.NewSliceID(ctx))
	must[[]uint32](t)(a.WriteSlices(ctx, ino, []SliceWrite{{Slice: base.Slice{ID: id3, Size: 10, Len: 10}}}, 2))
}
