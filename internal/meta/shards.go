package meta

import (
	"math/rand/v2"
	"sync"
)

// shardPool hands out usage shards, and with them epoch fence shards
// (versioned.go), to this client's transactions. Two transactions in flight
// at once that write one shard's records conflict on them, and one runs
// again: with shards drawn at random, four processes creating files in
// their own directories re-ran 3% of their creates. The pool gives each
// transaction a shard no other of this client's holds, starting the search
// at random so that clients spread over the shards as before. With every
// shard taken, a transaction shares one.
type shardPool struct {
	mu    sync.Mutex
	users [usageShards]uint16
}

// get returns a shard for a transaction; put gives it back once the
// transaction has ended.
func (p *shardPool) get() byte {
	start := rand.IntN(usageShards)
	p.mu.Lock()
	defer p.mu.Unlock()
	s := start
	for i := range usageShards {
		if c := (start + i) % usageShards; p.users[c] == 0 {
			s = c
			break
		}
	}
	p.users[s]++
	return byte(s)
}

// getOf is get, preferring the first free shard of prefer (shards whose
// records the caller has predictions of: speculative.go).
func (p *shardPool) getOf(prefer []byte) byte {
	p.mu.Lock()
	for _, s := range prefer {
		if p.users[s] == 0 {
			p.users[s]++
			p.mu.Unlock()
			return s
		}
	}
	p.mu.Unlock()
	return p.get()
}

// take counts one more user of shard s, which another holds (a batch of
// the write-back log sharing the shard of the one before it).
func (p *shardPool) take(s byte) {
	p.mu.Lock()
	p.users[s]++
	p.mu.Unlock()
}

func (p *shardPool) put(s byte) {
	p.mu.Lock()
	p.users[s]--
	p.mu.Unlock()
}

// shardLease is the shard of one transaction across its attempts.
type shardLease struct {
	p    *shardPool
	s    byte
	held bool
}

// next gives back the shard of the previous attempt, if any, and takes
// one for the next.
func (l *shardLease) next() byte {
	l.done()
	l.s, l.held = l.p.get(), true
	return l.s
}

// done gives back the shard held, if any.
func (l *shardLease) done() {
	if l.held {
		l.p.put(l.s)
		l.held = false
	}
}
