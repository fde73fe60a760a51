package meta

// Sweeps after an outage of the store.
//
// A client declares another session dead when its heartbeat is older than
// its timeout (expireSessions). That age only says the session missed its
// heartbeats; it does not say why. When the store itself was away (a
// PostgreSQL restart or a network cut in front of it), every client missed
// them, and the first sweep after the store's return would declare all the
// others dead: their locks released, their reservations dropped, their
// writes in flight lost with ESTALE, although only the store was away.
//
// So a client judges others only once it has itself reached the store,
// without a break, for one session timeout of the session it judges plus
// that session's heartbeat interval (at most half its timeout: the daemon
// checks timeout >= 2 × heartbeat, and the rule counts half the timeout).
// Every client had that long, with the store up, to heartbeat again; one
// that did not is really gone. The judge's own access is what its session
// sees of the store: NewSession and each heartbeat. A break is a failed
// heartbeat (any error: the store unreachable, its answer too late for the
// heartbeat's context), or more than its own session timeout since its last
// success (the process was paused, or the heartbeats stopped): its
// heartbeats could not tell whether the store was there meanwhile. A new
// session starts a run, so a client that starts just after an outage waits
// like the others. The run uses the monotonic clock; heartbeats themselves
// are wall-clock times written by each client (clocks must agree to well
// within the timeout, as before).
//
// An outage shorter than one heartbeat interval may pass between two
// heartbeats unseen; the session timeout's margin over two heartbeat
// intervals absorbs it, as it absorbs a slow heartbeat.

import (
	"time"
)

// reachState is this client's access to the store as its session sees it.
// Guarded by Meta.mu. Times carry the monotonic clock.
type reachState struct {
	since time.Time // start of the current run of successes; zero: a break
	last  time.Time // the last success
}

// noteReach records the outcome of a session transaction: a heartbeat or
// the registration of a session (which starts a run).
func (m *Meta) noteReach(ok, fresh bool) {
	now := time.Now()
	m.mu.Lock()
	r := &m.reach
	own := m.session.Timeout
	wasBroken := r.since.IsZero() && !r.last.IsZero()
	switch {
	case !ok:
		r.since = time.Time{}
	case fresh || r.since.IsZero() || own > 0 && now.Sub(r.last) > own:
		r.since, r.last = now, now
	default:
		r.last = now
	}
	m.mu.Unlock()
	if ok && wasBroken && own > 0 {
		m.log.Info("metadata store reachable again; other sessions get a session timeout and a heartbeat interval to heartbeat before any is declared dead",
			"wait", own+own/2)
	}
}

// reachedFor returns how long this client has reached the store without a
// break, up to now (monotonic): zero after a failed heartbeat, or when its
// last success is older than its session's timeout (fallback if it records
// none), or without a session.
func (m *Meta) reachedFor(now time.Time, fallback time.Duration) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.reach
	own := m.session.Timeout
	if own <= 0 {
		own = fallback
	}
	if m.sid == 0 || r.since.IsZero() || now.Sub(r.last) > own {
		return 0
	}
	return now.Sub(r.since)
}

// judgeAfter is how long a client must have reached the store without a
// break before it may declare dead a session whose timeout is limit: the
// timeout, and the session's heartbeat interval, at most half of it.
func judgeAfter(limit time.Duration) time.Duration { return limit + limit/2 }
