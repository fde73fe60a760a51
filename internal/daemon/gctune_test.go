package daemon

import (
	"math"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"
)

func TestGCPercentFor(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, floor uint64
		want        int
	}{
		{live: 32 * mib, floor: 256 * mib, want: 700}, // next collection at 256 MiB
		{live: 128 * mib, floor: 256 * mib, want: 100},
		{live: 200 * mib, floor: 256 * mib, want: 100}, // GOGC=100 comes later than the floor
		{live: 1 * mib, floor: 256 * mib, want: 10_000},
		{live: 0, floor: 256 * mib, want: 10_000},
		{live: 100 * mib, floor: 0, want: 100},
	} {
		if got := gcPercentFor(c.live, c.floor); got != c.want {
			t.Errorf("gcPercentFor(%d MiB, %d MiB) = %d, want %d", c.live/mib, c.floor/mib, got, c.want)
		}
	}
}

// waitGCPercent collects until the runtime applies GOGC want.
func waitGCPercent(t *testing.T, want func(int) bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !want(currentGCPercent()) {
		if time.Now().After(deadline) {
			t.Fatalf("GOGC %d: want %s", currentGCPercent(), what)
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

func TestHeapFloor(t *testing.T) {
	t.Setenv("GOGC", "")
	before := currentGCPercent()
	// A floor well above this test's live heap: GOGC goes up.
	release := holdHeapFloor(256 << 20)
	waitGCPercent(t, func(p int) bool { return p > 200 }, "> 200 under a 256 MiB floor")
	// The live heap grows past half the floor: later collections bring
	// GOGC back to 100, and up again once it shrinks (the tuning follows
	// every collection).
	live := make([][]byte, 160)
	for i := range live {
		live[i] = make([]byte, 1<<20)
		live[i][0] = 1
	}
	waitGCPercent(t, func(p int) bool { return p == 100 }, "100 with 160 MiB live")
	runtime.KeepAlive(live)
	live = nil
	waitGCPercent(t, func(p int) bool { return p > 200 }, "> 200 again once the heap is small")
	// A second holder with a lower floor: the larger still applies.
	release2 := holdHeapFloor(1 << 20)
	runtime.GC()
	time.Sleep(50 * time.Millisecond)
	if p := currentGCPercent(); p <= 200 {
		t.Fatalf("GOGC %d: the larger floor should apply", p)
	}
	release()
	release() // twice is harmless
	waitGCPercent(t, func(p int) bool { return p == 100 }, "100 under a 1 MiB floor")
	release2()
	if p := currentGCPercent(); p != before {
		t.Fatalf("GOGC %d after the last release, want %d as before", p, before)
	}
	// No more tuning after the last release.
	for range 3 {
		runtime.GC()
	}
	time.Sleep(50 * time.Millisecond)
	if p := currentGCPercent(); p != before {
		t.Fatalf("GOGC %d: still tuned after the last release", p)
	}
}

func TestHeapFloorLeavesGOGC(t *testing.T) {
	t.Setenv("GOGC", "150")
	before := currentGCPercent()
	release := holdHeapFloor(4 << 30)
	defer release()
	runtime.GC()
	time.Sleep(50 * time.Millisecond)
	if p := currentGCPercent(); p != before {
		t.Fatalf("GOGC %d with GOGC set in the environment, want it left at %d", p, before)
	}
}

// currentGCPercent reads GOGC as the runtime applies it.
func currentGCPercent() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return -1
	}
	v := s[0].Value.Uint64()
	if v > math.MaxInt32 {
		return -1
	}
	return int(v)
}
