package pebble

import "testing"

func TestCommitLogValid(t *testing.T) {
	var l commitLog
	rs := &readSet{}
	rs.point([]byte("p"))
	rs.scanned([]byte("s/"), []byte("s0"), false, []byte("s/5")) // read [s/, s/5]
	rs.scanned([]byte("r/"), []byte("r0"), true, []byte("r/5"))  // read [r/5, r0)
	rs.scanned([]byte("u/"), nil, false, nil)                    // read [u/, ∞)
	start := l.seq.Load()
	for _, c := range []struct {
		key      string
		conflict bool
	}{
		{"o", false}, {"p", true}, {"p\x00", false},
		{"s/", true}, {"s/5", true}, {"s/50", false}, {"s/6", false},
		{"r/4", false}, {"r/5", true}, {"r/9", true}, {"r0", false},
		{"u/", true}, {"zzz", true}, {"t", false},
	} {
		l.add([][]byte{[]byte("a"), []byte(c.key), []byte("a")})
		if got := !l.valid(l.seq.Load()-1, rs); got != c.conflict {
			t.Errorf("write of %q: conflict %v; want %v", c.key, got, c.conflict)
		}
	}
	if l.valid(start, rs) {
		t.Error("valid across conflicting commits")
	}
	if !l.valid(l.seq.Load(), rs) {
		t.Error("not valid with no commit since start")
	}
	// Commits beyond what the log keeps cannot be checked.
	old := l.seq.Load()
	for range 2*commitLogSize + 1 {
		l.add([][]byte{[]byte("a")})
	}
	if l.valid(old, rs) {
		t.Error("valid after the log dropped the commits since start")
	}
	if !l.valid(l.seq.Load()-commitLogSize+1, rs) {
		t.Error("not valid for a start the log still covers")
	}
}

func TestOCCGate(t *testing.T) {
	var g occGate
	for range 100 {
		g.succeeded()
	}
	if !g.try() {
		t.Fatal("gate closed with no conflicts")
	}
	for range 20 {
		g.conflicted()
	}
	if g.try() {
		t.Fatal("gate open after 20 conflicts in a row")
	}
	opened := false
	for range 2 * gateMax {
		if g.try() {
			opened = true
			break
		}
	}
	if !opened {
		t.Fatal("gate never reopens")
	}
}

// Big commits are dropped from the log once their keys pass
// commitLogBytes; a transaction older than them cannot be checked.
func TestCommitLogBytes(t *testing.T) {
	var l commitLog
	rs := &readSet{}
	rs.point([]byte("p"))
	start := l.seq.Load()
	big := make([][]byte, 64)
	for i := range big {
		big[i] = make([]byte, 64<<10) // 4 MiB of keys per commit
		big[i][0] = byte(i)
	}
	for range 10 {
		l.add(append([][]byte(nil), big...))
		if l.bytes > commitLogBytes {
			t.Fatalf("log holds %d key bytes; bound %d", l.bytes, commitLogBytes)
		}
	}
	if got := len(l.entries); got != commitLogBytes/(4<<20) {
		t.Errorf("log keeps %d commits of 4 MiB; want %d", got, commitLogBytes/(4<<20))
	}
	if l.valid(start, rs) {
		t.Error("valid although the commits since start were dropped")
	}
	if !l.valid(l.seq.Load()-1, rs) {
		t.Error("not valid against a kept commit that wrote nothing read")
	}
}
