package kv

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// MaxRetries and MinRetryTime bound how long RunWithRetry re-runs a
// conflicting transaction before giving up with ErrConflict: at least
// MaxRetries times and for at least MinRetryTime. The time floor keeps a
// transaction that keeps losing to others on a loaded machine (each
// attempt slow, the backoff capped at 20 ms) from giving up after a
// second: 8 writers of one counter on 2 busy cores exhausted 50 retries.
const MaxRetries = 50

// MinRetryTime is a variable only so that tests counting retries can set
// it to zero.
var MinRetryTime = 10 * time.Second

// RunWithRetry calls attempt until it returns something other than a
// conflict, backing off with jitter between attempts. Backends use it to
// implement Update.
func RunWithRetry(ctx context.Context, attempt func() error) error {
	backoff := 50 * time.Microsecond
	start := time.Now()
	for i := 0; ; i++ {
		err := attempt()
		if !errors.Is(err, ErrConflict) || i >= MaxRetries && time.Since(start) >= MinRetryTime {
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
