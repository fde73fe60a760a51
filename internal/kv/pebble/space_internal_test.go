package pebble

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// A background error that repeats (Pebble retries a failed flush at once,
// forever) is logged once every backgroundErrorEvery, with the count of
// those left out: a full disk once wrote 59 MB of them.
func TestBackgroundErrorsRateLimited(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(0, 0)
	b := &backgroundErrors{log: slog.New(slog.NewTextHandler(&buf, nil)), now: func() time.Time { return now }}
	err := errors.New("flush: no space left on device")
	for range 100000 {
		b.report(err)
		now = now.Add(10 * time.Microsecond) // a second in all
	}
	if n := strings.Count(buf.String(), "\n"); n != 1 {
		t.Fatalf("%d lines for a second of repeated errors; want 1:\n%s", n, buf.String())
	}
	now = now.Add(backgroundErrorEvery)
	b.report(err)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], "similar_not_logged=99999") {
		t.Fatalf("after %v: want a second line counting 99999 left out:\n%s", backgroundErrorEvery, buf.String())
	}
}
