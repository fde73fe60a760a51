package pebble

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/internal/kv"
)

func TestParseRedoLog(t *testing.T) {
	rec := func(seq uint64, repr string) []byte { return appendRedoRecord(nil, seq, []byte(repr)) }
	cat := func(recs ...[]byte) []byte { return bytes.Join(recs, nil) }
	flip := func(b []byte, i int) []byte {
		b = bytes.Clone(b)
		b[i] ^= 1
		return b
	}
	r1, r2, r3 := rec(1, "one"), rec(2, "two"), rec(3, "three")
	for _, tc := range []struct {
		name    string
		data    []byte
		applied uint64
		want    []uint64 // seqs returned
		stopped bool     // reason is non-empty
	}{
		{"empty", nil, 0, nil, false},
		{"all", cat(r1, r2, r3), 0, []uint64{1, 2, 3}, false},
		{"applied skipped", cat(r1, r2, r3), 2, []uint64{3}, false},
		{"all applied", cat(r1, r2, r3), 7, nil, false},
		{"torn header", cat(r1, r2, r3[:5]), 0, []uint64{1, 2}, true},
		{"torn payload", cat(r1, r2, r3[:len(r3)-1]), 0, []uint64{1, 2}, true},
		{"zeros", cat(r1, make([]byte, 64)), 0, []uint64{1}, true},
		{"bad crc", cat(r1, flip(r2, 4), r3), 0, []uint64{1}, true},
		{"bad payload", cat(r1, flip(r2, len(r2)-1), r3), 0, []uint64{1}, true},
		{"bad length", cat(r1, flip(r2, 0), r3), 0, []uint64{1}, true},
		{"gap", cat(r1, r3), 0, []uint64{1}, true},
		{"gap after applied", cat(r1, r3), 1, nil, true},
		{"first after applied missing", cat(r3), 1, nil, true},
		{"stale after new", cat(r2, r3, r1), 1, []uint64{2, 3}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recs, reason := parseRedoLog(tc.data, tc.applied)
			var got []uint64
			for _, r := range recs {
				got = append(got, r.seq)
			}
			if !slicesEqual(got, tc.want) || (reason != "") != tc.stopped {
				t.Errorf("parse = %v, %q; want %v, stopped=%v", got, reason, tc.want, tc.stopped)
			}
			for _, r := range recs {
				if want := map[uint64]string{1: "one", 2: "two", 3: "three"}[r.seq]; string(r.repr) != want {
					t.Errorf("record %d repr = %q; want %q", r.seq, r.repr, want)
				}
			}
		})
	}
}

func FuzzParseRedoLog(f *testing.F) {
	f.Add(appendRedoRecord(appendRedoRecord(nil, 1, []byte("a")), 2, []byte("b")), uint64(0))
	f.Fuzz(func(t *testing.T, data []byte, applied uint64) {
		recs, _ := parseRedoLog(data, applied)
		for i, r := range recs {
			if r.seq != applied+1+uint64(i) {
				t.Fatalf("record %d has seq %d after applied %d", i, r.seq, applied)
			}
		}
	})
}

func slicesEqual(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func mustOpen(t *testing.T, dir string, opts Options) *Store {
	t.Helper()
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func mustPut(t *testing.T, s *Store, key, value string) {
	t.Helper()
	err := s.Update(context.Background(), func(tx kv.Txn) error {
		tx.Set([]byte(key), []byte(value))
		return nil
	})
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
}

func mustGet(t *testing.T, s *Store, key string) string {
	t.Helper()
	var v []byte
	err := s.View(context.Background(), func(r kv.Reader) error {
		var err error
		v, err = r.Get([]byte(key))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if v == nil {
		return "<none>"
	}
	return string(v)
}

func redoPath(dir string) string { return filepath.Join(dir, redoLogName) }

func readRedo(t *testing.T, dir string) []byte {
	t.Helper()
	data, err := os.ReadFile(redoPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// redoRecords commits one Update per key in a scratch store and returns its
// redo log, split into records: seqs 1, 2, … as a fresh store numbers them.
func redoRecords(t *testing.T, keys ...string) [][]byte {
	t.Helper()
	dir := t.TempDir()
	s := mustOpen(t, dir, Options{})
	var recs [][]byte
	for _, k := range keys {
		before := len(readRedo(t, dir))
		mustPut(t, s, k, "v"+k)
		recs = append(recs, readRedo(t, dir)[before:])
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return recs
}

// freshWithRedo makes a store that has committed nothing, as if it crashed
// leaving log in its redo log.
func freshWithRedo(t *testing.T, log []byte) string {
	t.Helper()
	dir := t.TempDir()
	if err := mustOpen(t, dir, Options{}).Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(redoPath(dir), log, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestReplay(t *testing.T) {
	recs := redoRecords(t, "x", "y", "z")
	x, y, z := recs[0], recs[1], recs[2]
	cat := func(recs ...[]byte) []byte { return bytes.Join(recs, nil) }
	badY := bytes.Clone(y)
	badY[len(badY)-1] ^= 0x80
	for _, tc := range []struct {
		name string
		log  []byte
		want string // keys present after replay
	}{
		{"all", cat(x, y, z), "xyz"},
		{"torn tail", cat(x, y, z[:len(z)-3]), "xy"},
		{"corrupt middle", cat(x, badY, z), "x"},
		{"gap", cat(x, z), "x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := freshWithRedo(t, tc.log)
			s := mustOpen(t, dir, Options{})
			check := func() {
				t.Helper()
				for _, k := range []string{"x", "y", "z"} {
					got := mustGet(t, s, k)
					if want := map[bool]string{true: "v" + k, false: "<none>"}[strings.Contains(tc.want, k)]; got != want {
						t.Errorf("%s = %s; want %s", k, got, want)
					}
				}
			}
			check()
			if n := len(readRedo(t, dir)); n != 0 {
				t.Errorf("redo log holds %d bytes after Open; want it emptied", n)
			}
			// The numbering continues after the replayed records, and what
			// follows replays too.
			if want := uint64(len(tc.want)); s.seq != want {
				t.Errorf("seq after replay = %d; want %d", s.seq, want)
			}
			mustPut(t, s, "w", "vw")
			after := readRedo(t, dir)
			if recs, reason := parseRedoLog(after, uint64(len(tc.want))); len(recs) != 1 || reason != "" {
				t.Errorf("redo log after one more Update: %d records, %q", len(recs), reason)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = mustOpen(t, dir, Options{})
			defer s.Close()
			check()
			if got := mustGet(t, s, "w"); got != "vw" {
				t.Errorf("w = %s", got)
			}
		})
	}
}

// TestReplaySkipsApplied puts back a redo log whose records the database
// already holds (as after a machine crash undid the truncation that
// followed a Sync): replaying them must not roll newer values back.
func TestReplaySkipsApplied(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, Options{})
	mustPut(t, s, "a", "1")
	old := readRedo(t, dir)
	mustPut(t, s, "a", "2")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(redoPath(dir), old, 0o644); err != nil {
		t.Fatal(err)
	}
	// Read-only opens accept a log with nothing to replay.
	ro := mustOpen(t, dir, Options{ReadOnly: true})
	if got := mustGet(t, ro, "a"); got != "2" {
		t.Errorf("read-only a = %s; want 2", got)
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		s = mustOpen(t, dir, Options{})
		if got := mustGet(t, s, "a"); got != "2" {
			t.Errorf("a = %s; want 2", got)
		}
		if s.seq != 2 {
			t.Errorf("seq = %d; want 2", s.seq)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestReadOnlyRefusesUnreplayedLog(t *testing.T) {
	dir := freshWithRedo(t, bytes.Join(redoRecords(t, "x"), nil))
	_, err := Open(dir, Options{ReadOnly: true})
	if err == nil || !strings.Contains(err.Error(), "open it read-write") {
		t.Fatalf("read-only Open = %v; want a not-closed-cleanly error", err)
	}
	// The failed open released the directory.
	s := mustOpen(t, dir, Options{})
	if got := mustGet(t, s, "x"); got != "vx" {
		t.Errorf("x = %s", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestSyncEmptiesRedoLog(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, Options{})
	defer s.Close()
	mustPut(t, s, "a", "1")
	mustPut(t, s, "b", "2")
	if recs, _ := parseRedoLog(readRedo(t, dir), 0); len(recs) != 2 {
		t.Fatalf("redo log holds %d records; want 2", len(recs))
	}
	if err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(readRedo(t, dir)); n != 0 {
		t.Errorf("redo log holds %d bytes after Sync", n)
	}
	// Transactions that write nothing add nothing.
	err := s.Update(context.Background(), func(tx kv.Txn) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if n := len(readRedo(t, dir)); n != 0 {
		t.Errorf("empty Update wrote %d bytes to the redo log", n)
	}
}

func TestSyncCommitsSkipsRedoLog(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, Options{SyncCommits: true})
	defer s.Close()
	mustPut(t, s, "a", "1")
	if n := len(readRedo(t, dir)); n != 0 {
		t.Errorf("SyncCommits Update wrote %d bytes to the redo log", n)
	}
}

func TestReservedKeys(t *testing.T) {
	s := mustOpen(t, t.TempDir(), Options{})
	defer s.Close()
	ctx := context.Background()
	mustPut(t, s, "\xff\xff", "user")
	mustPut(t, s, "\xff\xffz", "user")
	for _, write := range []func(tx kv.Txn){
		func(tx kv.Txn) { tx.Set(appliedSeqKey, []byte("x")) },
		func(tx kv.Txn) { tx.Delete(appliedSeqKey) },
		func(tx kv.Txn) { tx.Set([]byte(reservedPrefix), nil) },
	} {
		err := s.Update(ctx, func(tx kv.Txn) error {
			tx.Set([]byte("lost"), []byte("1"))
			write(tx)
			return nil
		})
		if !errors.Is(err, ErrReservedKey) {
			t.Errorf("Update writing a reserved key = %v; want ErrReservedKey", err)
		}
	}
	if got := mustGet(t, s, "lost"); got != "<none>" {
		t.Errorf("a failed Update committed: lost = %s", got)
	}
	if got := mustGet(t, s, string(appliedSeqKey)); got != "<none>" {
		t.Errorf("Get(applied seq) = %q; want it hidden", got)
	}
	for _, tc := range []struct {
		start, end string
	}{
		{"", ""},
		{"\xff", ""},
		{reservedPrefix, reservedEnd},
		{string(appliedSeqKey), ""},
		{"\xff\xff", "\xff\xffz"},
	} {
		var end []byte
		if tc.end != "" {
			end = []byte(tc.end)
		}
		for _, reverse := range []bool{false, true} {
			err := s.View(ctx, func(r kv.Reader) error {
				return r.Scan([]byte(tc.start), end, reverse, func(k, _ []byte) bool {
					if isReserved(k) {
						t.Errorf("Scan(%q, %q, %v) returned reserved key %q", tc.start, tc.end, reverse, k)
					}
					return true
				})
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	var keys []string
	err := s.View(ctx, func(r kv.Reader) error {
		return r.Scan(nil, nil, true, func(k, _ []byte) bool {
			keys = append(keys, string(k))
			return true
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"\xff\xffz", "\xff\xff"}; strings.Join(keys, ",") != strings.Join(want, ",") {
		t.Errorf("reverse Scan = %q; want %q", keys, want)
	}
}

func TestFullRedoLogSyncs(t *testing.T) {
	defer func(old int) { maxRedoLogSize = old }(maxRedoLogSize)
	maxRedoLogSize = 1000
	dir := t.TempDir()
	s := mustOpen(t, dir, Options{})
	defer s.Close()
	for i := range 100 {
		mustPut(t, s, "k", strings.Repeat("v", i))
		if n := len(readRedo(t, dir)); n >= maxRedoLogSize {
			t.Fatalf("redo log has %d bytes, past its limit", n)
		}
	}
}

// TestRedoAppendFails checks that an Update whose record cannot be written
// is made durable by a sync instead, or reported, and that the log is
// emptied before anything else is appended to it.
func TestRedoAppendFails(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, Options{})
	mustPut(t, s, "a", "1")
	good := s.redo
	bad, err := os.Open(redoPath(dir)) // read-only: writes and truncation fail
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	s.redo = bad
	err = s.Update(context.Background(), func(tx kv.Txn) error {
		tx.Set([]byte("b"), []byte("2"))
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "not durable") {
		t.Errorf("Update with a failing redo log = %v; want a not-durable error", err)
	}
	if !s.redoBroken {
		t.Error("redoBroken not set")
	}
	s.redo = good
	mustPut(t, s, "c", "3") // syncs and empties the log first
	if recs, reason := parseRedoLog(readRedo(t, dir), 2); len(recs) != 1 || reason != "" {
		t.Errorf("redo log: %d records, %q; want only c's", len(recs), reason)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, dir, Options{})
	defer s.Close()
	for k, want := range map[string]string{"a": "1", "b": "2", "c": "3"} {
		if got := mustGet(t, s, k); got != want {
			t.Errorf("%s = %s; want %s", k, got, want)
		}
	}
}
