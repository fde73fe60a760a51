package postgres

import (
	"fmt"
	"log/slog"
	"regexp"
	"time"
)

// Defaults for Options fields left zero.
const (
	DefaultMaxConns      = 16
	DefaultOutageTimeout = 30 * time.Second
	DefaultTable         = "cairn_kv"
)

// Options configures Open. The zero value is valid and means the defaults.
type Options struct {
	// Logger receives outages and recoveries (warning and info level),
	// commits whose outcome is unknown (error level) and the listener's
	// reconnections. Nil discards them.
	Logger *slog.Logger
	// MaxConns bounds the pool of connections that run transactions; each
	// running Update or View holds one. Zero means pool_max_conns of the
	// URL if it sets one (many clients of one server: see
	// docs/operations.md), else DefaultMaxConns. A Store that has
	// subscribers holds one more connection, for LISTEN. A transaction
	// that needs a new connection while the server refuses more
	// (max_connections) waits for one, as through an outage.
	MaxConns int32
	// OutageTimeout is how long an Update or View keeps waiting and
	// retrying while the server is unreachable (down, restarting, the
	// socket gone) before it fails with ErrUnreachable. It also bounds how
	// long a commit waits for the server's answer. Zero means
	// DefaultOutageTimeout. The clock is the store's, not the call's: a
	// call that starts while an outage has already lasted OutageTimeout
	// tries the server once and fails, instead of waiting a whole
	// OutageTimeout of its own.
	OutageTimeout time.Duration
	// WaitForever makes Update and View wait through an outage of any
	// length (as an NFS hard mount does) instead of failing after
	// OutageTimeout; only their context ends the wait. OutageTimeout
	// still bounds the wait for a commit's answer.
	WaitForever bool
	// MustExist opens only a store whose table exists: Open fails with an
	// error wrapping kv.ErrNotExist, and creates nothing, where there is
	// none. Without it Open creates the table.
	MustExist bool
	// Table is the name of the table that holds the keys, created by Open
	// if missing. Several stores can share a database with different
	// tables; notifications are kept apart by table too. Zero means
	// DefaultTable.
	Table string
}

// tableName is what Options.Table may be: an identifier that needs no
// quoting, short enough to leave room in PostgreSQL's 63-byte names for the
// notification channels named after it (see Store.Notify).
var tableName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,31}$`)

// Validate reports whether the options are usable.
func (o Options) Validate() error {
	if o.MaxConns < 0 {
		return fmt.Errorf("postgres: MaxConns %d is negative", o.MaxConns)
	}
	if o.OutageTimeout < 0 {
		return fmt.Errorf("postgres: OutageTimeout %v is negative", o.OutageTimeout)
	}
	if o.Table != "" && !tableName.MatchString(o.Table) {
		return fmt.Errorf("postgres: Table %q is not a lower-case identifier of at most 32 bytes", o.Table)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MaxConns == 0 {
		o.MaxConns = DefaultMaxConns
	}
	if o.OutageTimeout == 0 {
		o.OutageTimeout = DefaultOutageTimeout
	}
	if o.Table == "" {
		o.Table = DefaultTable
	}
	return o
}
