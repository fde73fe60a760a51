package cache_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/cache"
)

// size returns what the cache charges for an item: key + data + 64.
func size(key string, n int) int64 { return int64(len(key) + n + 64) }

func TestMemoryBasics(t *testing.T) {
	m := cache.NewMemory(10_000)
	if _, ok := m.Get("a"); ok {
		t.Fatal("hit in an empty cache")
	}
	m.Put("a", []byte("alpha"))
	if got, ok := m.Get("a"); !ok || string(got) != "alpha" {
		t.Fatalf("Get(a) = %q, %v", got, ok)
	}
	m.Put("a", []byte("replaced"))
	if got, _ := m.Get("a"); string(got) != "replaced" {
		t.Fatalf("Get(a) after replace = %q", got)
	}
	m.Delete("a")
	m.Delete("never")
	if _, ok := m.Get("a"); ok {
		t.Fatal("hit after Delete")
	}
	want := cache.Stats{Hits: 2, Misses: 2, HitBytes: 13, PutBytes: 13}
	if got := m.Stats(); got != want {
		t.Fatalf("Stats = %+v, want %+v", got, want)
	}
	m.Put("b", make([]byte, 100))
	if got := m.Stats(); got.Bytes != size("b", 100) || got.Items != 1 {
		t.Fatalf("Stats = %+v, want 1 item of %d bytes", got, size("b", 100))
	}
}

func TestMemoryLRU(t *testing.T) {
	item := size("k0", 1000)
	m := cache.NewMemory(4 * item) // room for exactly 4
	for i := range 4 {
		m.Put(fmt.Sprint("k", i), make([]byte, 1000))
	}
	m.Get("k0") // k1 is now the least recently used
	m.Put("k4", make([]byte, 1000))
	if _, ok := m.Get("k1"); ok {
		t.Error("k1 should have been evicted")
	}
	for _, k := range []string{"k0", "k2", "k3", "k4"} {
		if _, ok := m.Get(k); !ok {
			t.Errorf("%s evicted", k)
		}
	}
	if s := m.Stats(); s.Evictions != 1 || s.Items != 4 || s.Bytes != 4*item {
		t.Errorf("Stats = %+v", s)
	}
}

func TestMemoryTooLarge(t *testing.T) {
	m := cache.NewMemory(4000)
	m.Put("small", make([]byte, 100))
	m.Put("big", make([]byte, 1000)) // 1000+3+64 > 4000/4
	if _, ok := m.Get("big"); ok {
		t.Error("item above MaxItem was cached")
	}
	m.Put("small", make([]byte, 2000)) // replacing with a too-large item drops the old
	if _, ok := m.Get("small"); ok {
		t.Error("stale item kept after a too-large replacement")
	}
	if s := m.Stats(); s.Bytes != 0 || s.Items != 0 || s.Evictions != 0 {
		t.Errorf("Stats = %+v", s)
	}
	z := cache.NewMemory(0)
	z.Put("x", nil)
	if _, ok := z.Get("x"); ok {
		t.Error("zero-size cache holds something")
	}
}

// TestMemoryBound hammers a cache from many goroutines and checks, while
// they run, that the bound is never exceeded and that the counters add up.
func TestMemoryBound(t *testing.T) {
	const maxBytes = 64 << 10
	m := cache.NewMemory(maxBytes)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var gets atomic.Int64
	for w := range 6 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				n := r.IntN(200)
				key := fmt.Sprint("blk/", n)
				switch r.IntN(10) {
				case 0:
					m.Delete(key)
				case 1, 2, 3:
					data := make([]byte, 1+r.IntN(int(m.MaxItem())))
					data[0] = byte(n) // recognisable content
					m.Put(key, data)
				default:
					gets.Add(1)
					if data, ok := m.Get(key); ok && data[0] != byte(n) {
						t.Errorf("Get(%s) returned foreign data", key)
					}
				}
			}
		})
	}
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		if s := m.Stats(); s.Bytes > maxBytes || s.Bytes < 0 || s.Items < 0 {
			t.Fatalf("bound broken: %+v", s)
		}
	}
	close(stop)
	wg.Wait()
	s := m.Stats()
	if s.Bytes > maxBytes || s.Hits+s.Misses != gets.Load() || s.Evictions == 0 {
		t.Fatalf("Stats = %+v after %d gets", s, gets.Load())
	}
}

func TestGroupDo(t *testing.T) {
	var g cache.Group
	var calls atomic.Int32
	release := make(chan struct{})
	var wg sync.WaitGroup
	results := make([][]byte, 10)
	for i := range results {
		wg.Go(func() {
			data, err := g.Do("k", func() ([]byte, error) {
				calls.Add(1)
				<-release
				return []byte("v"), nil
			})
			if err != nil {
				t.Error(err)
			}
			results[i] = data
		})
	}
	time.Sleep(50 * time.Millisecond) // let them pile up on the first call
	close(release)
	wg.Wait()
	if n := calls.Load(); n < 1 || n > 2 {
		// Normally 1; a goroutine scheduled after the first call ended
		// starts a second one, which is correct too.
		t.Errorf("fn called %d times for 10 concurrent Do", n)
	}
	for _, r := range results {
		if string(r) != "v" {
			t.Fatalf("result %q", r)
		}
	}
	// Errors are shared but not kept.
	boom := errors.New("boom")
	if _, err := g.Do("k", func() ([]byte, error) { return nil, boom }); err != boom {
		t.Fatalf("err = %v", err)
	}
	if data, err := g.Do("k", func() ([]byte, error) { return []byte("w"), nil }); err != nil || string(data) != "w" {
		t.Fatalf("Do after error = %q, %v", data, err)
	}
}

func TestGroupPanic(t *testing.T) {
	var g cache.Group
	started := make(chan struct{})
	waiterErr := make(chan error)
	go func() {
		<-started
		_, err := g.Do("k", func() ([]byte, error) { return []byte("not shared"), nil })
		waiterErr <- err
	}()
	func() {
		defer func() {
			if recover() == nil {
				t.Error("panic not propagated")
			}
		}()
		g.Do("k", func() ([]byte, error) {
			close(started)
			time.Sleep(20 * time.Millisecond)
			panic("fetch failed")
		})
	}()
	// The waiter either shared the panicked call (error) or ran after it.
	if err := <-waiterErr; err != nil && err.Error() != `cache: load of "k" panicked` {
		t.Fatalf("waiter err = %v", err)
	}
}

func TestLoad(t *testing.T) {
	m := cache.NewMemory(1 << 20)
	var g cache.Group
	var fetches atomic.Int32
	fetch := func() ([]byte, error) {
		fetches.Add(1)
		time.Sleep(10 * time.Millisecond)
		return []byte("block"), nil
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if data, err := m.Load(&g, "b", fetch); err != nil || string(data) != "block" {
				t.Errorf("Load = %q, %v", data, err)
			}
		})
	}
	wg.Wait()
	if n := fetches.Load(); n != 1 {
		t.Errorf("%d fetches for 8 concurrent Loads", n)
	}
	if _, err := m.Load(nil, "b", fetch); err != nil || fetches.Load() != 1 {
		t.Errorf("cached Load fetched again: %v", err)
	}
	boom := errors.New("boom")
	if _, err := m.Load(&g, "e", func() ([]byte, error) { return nil, boom }); err != boom {
		t.Errorf("err = %v", err)
	}
	if _, ok := m.Get("e"); ok {
		t.Error("error result was cached")
	}
}
