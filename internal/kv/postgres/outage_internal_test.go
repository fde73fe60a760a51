package postgres

import (
	"math/rand/v2"
	"testing"
)

// TestOutageDelay checks the outage back-off at every retry count a long
// (or endless) outage reaches: always positive, never past outageMaxWait,
// and usable as the jitter's bound. A shift by the retry count overflowed
// around the 40th retry and rand.N panicked.
func TestOutageDelay(t *testing.T) {
	prev := outageDelay(1)
	if prev != outageFirstWait {
		t.Fatalf("first wait %v, want %v", prev, outageFirstWait)
	}
	for w := 2; w < 1_000_000; w++ {
		d := outageDelay(w)
		if d <= 0 || d > outageMaxWait || d < prev {
			t.Fatalf("outageDelay(%d) = %v (previous %v): want a non-decreasing wait in (0, %v]", w, d, prev, outageMaxWait)
		}
		_ = d/2 + rand.N(d/2+1) // what wait does with it
		prev = d
	}
	if prev != outageMaxWait {
		t.Fatalf("wait after many retries %v, want %v", prev, outageMaxWait)
	}
}
