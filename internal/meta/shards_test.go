package meta

import "testing"

func TestShardPool(t *testing.T) {
	var p shardPool
	held := map[byte]bool{}
	for range usageShards {
		s := p.get()
		if held[s] {
			t.Fatalf("shard %d handed out twice while held (%d held)", s, len(held))
		}
		held[s] = true
	}
	// Every shard is held: the next one shares, and its user is counted.
	extra := p.get()
	p.put(extra)
	if p.users[extra] != 1 {
		t.Fatalf("shard %d has %d users after a shared get and put, want 1", extra, p.users[extra])
	}
	p.put(7)
	if s := p.get(); s != 7 {
		t.Fatalf("get = %d, want 7, the only free shard", s)
	}
	for s := range held {
		p.put(s)
	}
	for s, n := range p.users {
		if n != 0 {
			t.Fatalf("shard %d has %d users after every put", s, n)
		}
	}
}
