package postgres

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// maxChannel is the longest name PostgreSQL keeps for a channel
// (NAMEDATALEN-1).
const maxChannel = 63

// listenWait bounds how long Subscribe waits for its LISTEN to take effect.
const listenWait = 5 * time.Second

// Back-off between the listener's tries to reconnect.
const (
	relistenFirstWait = 50 * time.Millisecond
	relistenMaxWait   = 2 * time.Second
)

// channel returns the PostgreSQL channel for a Notifier channel: the table
// name, a dot, the channel, so that stores on different tables of one
// database do not wake each other.
func (s *Store) channel(name string) string { return s.opts.Table + "." + name }

// Notify implements kv.Notifier with pg_notify, on a pooled connection: the
// notification is sent when the call returns. It does not wait for an
// unreachable server: delivery is best effort.
func (s *Store) Notify(ctx context.Context, channel, payload string) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.inflight.Done()
	name := s.channel(channel)
	if len(name) > maxChannel {
		return fmt.Errorf("%s: channel %q is too long (at most %d bytes with the table name)", s.name, channel, maxChannel-len(s.opts.Table)-1)
	}
	if _, err := s.pool.Exec(ctx, "SELECT pg_notify($1, $2)", name, payload); err != nil {
		return fmt.Errorf("%s: notify %s: %w", s.name, channel, err)
	}
	return nil
}

// Subscribe implements kv.Notifier. The first subscription to a channel
// starts listening on it (and starts the listener's connection, if it is
// the store's first), waiting up to a few seconds for the LISTEN to take
// effect, so that notifications sent after Subscribe returns arrive; if the
// server is unreachable it does not wait. Channels stay listened to until
// Close.
func (s *Store) Subscribe(channel string) (<-chan string, func()) {
	c, stop := s.hub.Subscribe(channel)
	name := s.channel(channel)
	if len(name) > maxChannel {
		s.log.Warn("notification channel name too long: no notifications", "channel", channel)
		return c, stop
	}
	s.lis.listen(name)
	return c, stop
}

// listener holds the store's one connection outside the pool, which
// LISTENs on the channels of local subscribers and hands what arrives to
// the store's hub. It reconnects and LISTENs again after losing its
// connection; notifications sent in between are lost, which the Notifier
// contract allows (waiters re-check after a timeout).
type listener struct {
	s   *Store
	cfg *pgconn.Config // for the listener's connection

	mu        sync.Mutex
	started   bool
	closed    bool
	cancel    context.CancelFunc // ends run
	finished  chan struct{}      // closed when run returns
	wanted    map[string]bool
	active    map[string]bool            // LISTENed on the current connection
	acks      map[string][]chan struct{} // closed when a channel becomes active
	down      bool                       // between a failed connection and the next try
	interrupt context.CancelFunc         // ends the current wait for notifications
}

func (l *listener) init(s *Store, cfg *pgconn.Config) {
	l.s, l.cfg = s, cfg
	cfg.OnNotification = func(_ *pgconn.PgConn, n *pgconn.Notification) {
		if ch, ok := strings.CutPrefix(n.Channel, s.opts.Table+"."); ok {
			s.hub.Deliver(ch, n.Payload)
		}
	}
	l.wanted = make(map[string]bool)
	l.active = make(map[string]bool)
	l.acks = make(map[string][]chan struct{})
}

// listen makes sure the listener LISTENs on name.
func (l *listener) listen(name string) {
	l.mu.Lock()
	if l.closed || l.active[name] {
		l.mu.Unlock()
		return
	}
	if !l.started {
		l.started = true
		ctx, cancel := context.WithCancel(context.Background())
		l.cancel, l.finished = cancel, make(chan struct{})
		go l.run(ctx)
	}
	l.wanted[name] = true
	var ack chan struct{}
	if !l.down { // connected or connecting: worth waiting
		ack = make(chan struct{})
		l.acks[name] = append(l.acks[name], ack)
	}
	if l.interrupt != nil {
		l.interrupt()
	}
	l.mu.Unlock()
	if ack == nil {
		return
	}
	t := time.NewTimer(listenWait)
	defer t.Stop()
	select {
	case <-ack:
	case <-t.C:
	}
}

// close ends the listener and waits for it.
func (l *listener) close() {
	l.mu.Lock()
	l.closed = true
	started := l.started
	l.mu.Unlock()
	if started {
		l.cancel()
		<-l.finished
	}
}

// run connects and serves until ctx ends, reconnecting with back-off.
func (l *listener) run(ctx context.Context) {
	defer close(l.finished)
	wait := relistenFirstWait
	for ctx.Err() == nil {
		l.mu.Lock()
		l.down = false
		l.mu.Unlock()
		conn, err := pgconn.ConnectConfig(ctx, l.cfg)
		if err == nil {
			err = l.serve(ctx, conn)
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			conn.Close(cctx)
			cancel()
			wait = relistenFirstWait
		}
		// Subscribers waiting for a LISTEN need not wait for a server
		// that is away.
		l.mu.Lock()
		l.down = true
		clear(l.active)
		for _, acks := range l.acks {
			for _, ack := range acks {
				close(ack)
			}
		}
		clear(l.acks)
		l.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		l.s.log.Warn("PostgreSQL notification listener disconnected; reconnecting", "server", l.s.where, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, relistenMaxWait)
	}
}

// serve LISTENs on every wanted channel, then waits for notifications
// (delivered by cfg.OnNotification) until a new channel is wanted, over and
// over, until the connection fails or ctx ends.
func (l *listener) serve(ctx context.Context, conn *pgconn.PgConn) error {
	for {
		l.mu.Lock()
		var todo []string
		for name := range l.wanted {
			if !l.active[name] {
				todo = append(todo, name)
			}
		}
		l.mu.Unlock()
		for _, name := range todo {
			if err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{name}.Sanitize()).Close(); err != nil {
				return err
			}
			l.mu.Lock()
			l.active[name] = true
			for _, ack := range l.acks[name] {
				close(ack)
			}
			delete(l.acks, name)
			l.mu.Unlock()
		}

		wctx, cancel := context.WithCancel(ctx)
		l.mu.Lock()
		pending := len(l.wanted) > len(l.active)
		l.interrupt = cancel
		l.mu.Unlock()
		var err error
		if !pending {
			err = conn.WaitForNotification(wctx)
		}
		l.mu.Lock()
		l.interrupt = nil
		l.mu.Unlock()
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil && conn.IsClosed() {
			return err
		}
	}
}
