package kv

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// MaxRetries bounds how many times RunWithRetry re-runs a conflicting
// transaction before giving up with ErrConflict.
const MaxRetries = 50

// RunWithRetry calls attempt until it returns something other than a
// conflict, backing off with jitter between attempts. Backends use it to
// implement Update.
func RunWithRetry(ctx context.Context, attempt func() error) error {
	backoff := 50 * time.Microsecond
	for i := 0; ; i++ {
		err := attempt()
		if !errors.Is(err, ErrConflict) || i >= MaxRetries {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		d := backoff/2 + time.Duration(rand.Int64N(int64(backoff)))
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		if backoff < 20*time.Millisecond {
			backoff *= 2
		}
	}
}
