package daemon

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// The heap floor. Go collects garbage when the heap has grown by GOGC
// percent (100) over what the last collection found live. A mount doing
// metadata operations allocates quickly (FUSE requests, transactions) on
// a small live heap, some 20 MiB while its block cache is empty, so it
// collects many times a second. A mount or gateway therefore sets GOGC,
// after every collection, so that the next one comes when the heap
// reaches a floor, if that is later than GOGC=100 would. The floor is
// 64 MiB, or the memory block cache's bound if that is smaller: garbage
// then uses memory the block cache may hold and does not. Measured with
// 4 processes creating, stating and deleting files (docs/performance.md,
// "Garbage collection"), a 64 MiB floor beat GOGC=100 on all three and
// larger floors (128, 256 MiB) gained less: the allocator then walks more
// memory between collections. Once the live heap is half the floor or
// more this is GOGC=100, so the floor never raises the heap's peak,
// which comes when the caches are full. GOGC set in the environment is
// the user's choice: then nothing is tuned.

// heapFloor is the floor, at most the memory block cache's bound.
const heapFloor = 64 << 20

// maxGCPercent bounds the percent the floor may ask for (a nearly empty
// heap): the goal is then under 100 times the live heap.
const maxGCPercent = 10_000

// gcPercentFor is the GOGC that puts the next collection at floor bytes
// of heap when live bytes were live after the last one, and at least 100.
func gcPercentFor(live, floor uint64) int {
	if live == 0 {
		live = 1
	}
	if floor <= 2*live {
		return 100
	}
	p := (floor - live) * 100 / live
	if p > maxGCPercent {
		return maxGCPercent
	}
	return int(p)
}

// heapTuner keeps the floors asked for by the mounts and gateways of this
// process (the largest applies) and retunes after every collection.
type heapTuner struct {
	mu      sync.Mutex
	floors  map[*uint64]bool // one per holder
	gen     uint64           // changed when the last holder leaves: ends the chain
	prev    int              // GOGC before the first holder
	percent int              // last applied
}

var tuner heapTuner

// holdHeapFloor starts keeping the heap goal at floor bytes or more
// until release is called. It does nothing if GOGC is set.
func holdHeapFloor(floor int64) (release func()) {
	if floor <= 0 || os.Getenv("GOGC") != "" {
		return func() {}
	}
	t := &tuner
	f := uint64(floor)
	key := &f
	t.mu.Lock()
	if t.floors == nil {
		t.floors = map[*uint64]bool{}
	}
	first := len(t.floors) == 0
	t.floors[key] = true
	if first {
		t.gen++
		t.prev = debug.SetGCPercent(100)
		t.percent = 100
		t.arm(t.gen)
	}
	t.mu.Unlock()
	t.retune(0)
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			delete(t.floors, key)
			if len(t.floors) == 0 {
				t.gen++
				debug.SetGCPercent(t.prev)
			}
		})
	}
}

// arm registers a cleanup that the next collection runs: it retunes and
// arms again, as long as gen is current. The caller holds mu.
func (t *heapTuner) arm(gen uint64) {
	sentinel := new([64]byte)
	runtime.AddCleanup(sentinel, t.retune, gen)
}

// retune sets GOGC from the live heap of the last collection; gen 0 is a
// call outside the chain (no re-arming).
func (t *heapTuner) retune(gen uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.floors) == 0 || gen != 0 && gen != t.gen {
		return
	}
	var floor uint64
	for f := range t.floors {
		floor = max(floor, *f)
	}
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	live := uint64(0)
	if s[0].Value.Kind() == metrics.KindUint64 {
		live = s[0].Value.Uint64()
	}
	if p := gcPercentFor(live, floor); p != t.percent {
		debug.SetGCPercent(p)
		t.percent = p
	}
	if gen != 0 {
		t.arm(gen)
	}
}
