package kv

import (
	"bytes"
	"slices"
)

// Sub is a nested transaction inside a Txn: its writes are kept apart
// until Apply hands them to the parent, and its reads see them over the
// parent's state (the parent's own writes included). A Sub that is dropped
// without Apply leaves the parent as it was, so several independent pieces
// of work can share one parent transaction, and one commit, while a piece
// that fails takes nothing of its writes into it.
//
// Reads go to the parent: a failed read fails the parent too (a server
// transaction is void after one), which Failed reports. A Sub is used by
// one goroutine, like its parent.
type Sub struct {
	parent Txn
	writes map[string]subWrite
	failed error
}

type subWrite struct {
	value []byte
	del   bool
}

// NewSub returns a nested transaction over parent.
func NewSub(parent Txn) *Sub { return &Sub{parent: parent} }

// Failed returns the first error a read through the Sub returned: the
// parent transaction cannot commit after it.
func (s *Sub) Failed() error { return s.failed }

// Apply hands the Sub's writes to the parent. The Sub must not be used
// after.
func (s *Sub) Apply() {
	for k, w := range s.writes {
		if w.del {
			s.parent.Delete([]byte(k))
		} else {
			s.parent.Set([]byte(k), w.value)
		}
	}
	s.writes = nil
}

func (s *Sub) fail(err error) error {
	if err != nil && s.failed == nil {
		s.failed = err
	}
	return err
}

// Get implements Reader.
func (s *Sub) Get(key []byte) ([]byte, error) {
	if w, ok := s.writes[string(key)]; ok {
		if w.del {
			return nil, nil
		}
		return bytes.Clone(w.value), nil
	}
	v, err := s.parent.Get(key)
	return v, s.fail(err)
}

// Set implements Txn.
func (s *Sub) Set(key, value []byte) {
	if s.writes == nil {
		s.writes = make(map[string]subWrite)
	}
	s.writes[string(key)] = subWrite{value: append([]byte{}, value...)}
}

// Delete implements Txn.
func (s *Sub) Delete(key []byte) {
	if s.writes == nil {
		s.writes = make(map[string]subWrite)
	}
	s.writes[string(key)] = subWrite{del: true}
}

// subEntry is one buffered write in scan order.
type subEntry struct {
	key []byte
	subWrite
}

// buffered returns the Sub's writes in [start, end) in scan order.
func (s *Sub) buffered(start, end []byte, reverse bool) []subEntry {
	var out []subEntry
	for k, w := range s.writes {
		if k < string(start) || end != nil && k >= string(end) {
			continue
		}
		out = append(out, subEntry{key: []byte(k), subWrite: w})
	}
	slices.SortFunc(out, func(a, b subEntry) int { return bytes.Compare(a.key, b.key) })
	if reverse {
		slices.Reverse(out)
	}
	return out
}

// Scan implements Reader: the parent's pairs, with the Sub's writes
// merged in (a buffered key replaces the parent's, a buffered delete hides
// it).
func (s *Sub) Scan(start, end []byte, reverse bool, fn func(key, value []byte) bool) error {
	if end != nil && bytes.Compare(end, start) <= 0 {
		return nil
	}
	buf := s.buffered(start, end, reverse)
	if len(buf) == 0 {
		return s.fail(s.parent.Scan(start, end, reverse, fn))
	}
	// before reports whether key a comes before key b in scan order.
	before := func(a, b []byte) bool {
		c := bytes.Compare(a, b)
		if reverse {
			c = -c
		}
		return c < 0
	}
	stopped := false
	// emit passes the buffered writes before key (all of them if key is
	// nil) to fn, and drops them from buf.
	emit := func(key []byte) {
		for len(buf) > 0 && !stopped && (key == nil || before(buf[0].key, key)) {
			e := buf[0]
			buf = buf[1:]
			if !e.del && !fn(e.key, e.value) {
				stopped = true
			}
		}
	}
	err := s.parent.Scan(start, end, reverse, func(k, v []byte) bool {
		emit(k)
		if stopped {
			return false
		}
		if len(buf) > 0 && bytes.Equal(buf[0].key, k) {
			e := buf[0]
			buf = buf[1:]
			if e.del {
				return true
			}
			if !fn(e.key, e.value) {
				stopped = true
			}
			return !stopped
		}
		if !fn(k, v) {
			stopped = true
		}
		return !stopped
	})
	if err != nil {
		return s.fail(err)
	}
	emit(nil)
	return nil
}

var _ FirstReader = (*Sub)(nil)

// Firsts implements FirstReader: through the parent's ability (one round
// trip on a server) while the Sub has written nothing, else one merged
// Scan per range.
func (s *Sub) Firsts(ranges []Range) ([]Pair, error) {
	if len(s.writes) == 0 {
		ps, err := Firsts(s.parent, ranges)
		return ps, s.fail(err)
	}
	return FirstsWith(ranges, func(start, end []byte) (Pair, error) { return first(s, start, end) })
}
