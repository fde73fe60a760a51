package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// appendLines appends n lines "<tag> <i>\n" to path, one write(2) each,
// pausing pace between them, through a descriptor opened O_WRONLY|
// O_CREAT|O_APPEND (without O_EXCL: the other writer may create the file
// first). It returns the first error.
func appendLines(path, tag string, n int, pace time.Duration, start <-chan struct{}) error {
	<-start
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("%s: open: %w", tag, err)
	}
	for i := 0; i < n; i++ {
		if _, err := fmt.Fprintf(f, "%s %05d\n", tag, i); err != nil {
			f.Close()
			return fmt.Errorf("%s: write %d: %w", tag, i, err)
		}
		if pace > 0 {
			time.Sleep(pace)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("%s: close: %w", tag, err)
	}
	return nil
}

// countLines checks that data holds each writer's n lines exactly once,
// in its order, and nothing else; it returns how many were lost and
// duplicated.
func countLines(t *testing.T, data []byte, tags []string, n int) (lost, dup int) {
	t.Helper()
	next := map[string]int{}
	seen := map[string]int{}
	for _, l := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
		var tag string
		var i int
		if _, err := fmt.Sscanf(string(l), "%s %d", &tag, &i); err != nil || len(l) != len(tag)+6 {
			t.Fatalf("garbage line %q in the file", l)
		}
		seen[string(l)]++
		if i != next[tag] {
			t.Errorf("writer %s: line %d after line %d", tag, i, next[tag]-1)
		}
		next[tag] = i + 1
	}
	for _, tag := range tags {
		for i := 0; i < n; i++ {
			switch c := seen[fmt.Sprintf("%s %05d", tag, i)]; {
			case c == 0:
				lost++
			case c > 1:
				dup += c - 1
			}
		}
	}
	return lost, dup
}

// TestSharedAppendTwoMounts: two processes on two mounts of one shared
// volume open the same new file with O_CREAT|O_APPEND at once and each
// append 2,000 lines, one write each, unpaced and then paced. No line is
// lost or duplicated, and both opens succeed (O_CREAT without O_EXCL of
// a name the other mount just created opens that file).
func TestSharedAppendTwoMounts(t *testing.T) {
	v := newSharedVolume(t)
	a := v.mount(t, "a")
	b := v.mount(t, "b")
	type run struct {
		lines int
		pace  time.Duration
	}
	runs := []run{{2000, 0}, {2000, 0}, {2000, 0}, {400, time.Millisecond}}
	if n, _ := strconv.Atoi(os.Getenv("CAIRN_APPEND_RUNS")); n > 0 {
		// The measured table of docs/durability.md: n unpaced runs and
		// n paced ones, 2,000 lines per writer each.
		runs = runs[:0]
		for range n {
			runs = append(runs, run{2000, 0}, run{2000, time.Millisecond})
		}
	}
	var lostAll, dupAll, lines int
	for r, run := range runs {
		name := fmt.Sprintf("log%d", r)
		start := make(chan struct{})
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for k, m := range []*sharedMount{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[k] = appendLines(m.path(name), string(rune('a'+k)), run.lines, run.pace, start)
			}()
		}
		close(start)
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatalf("run %d: %v", r, err)
			}
		}
		for _, m := range []*sharedMount{a, b} {
			lost, dup := countLines(t, readFile(t, m.path(name)), []string{"a", "b"}, run.lines)
			lostAll, dupAll, lines = lostAll+lost, dupAll+dup, lines+2*run.lines
			if lost != 0 || dup != 0 {
				t.Errorf("run %d (%d lines each, pace %v), read on %s: %d lines lost, %d duplicated",
					r, run.lines, run.pace, m.mnt, lost, dup)
			}
		}
	}
	t.Logf("%d runs: %d lines read back (on both mounts), %d lost, %d duplicated", len(runs), lines, lostAll, dupAll)
	if out, err := v.cairn(t, "fsck", v.meta); err != nil {
		t.Fatalf("fsck: %v\n%s", err, out)
	}
}

// TestSharedCreateRace: two mounts open(O_CREAT) one new name at once,
// many times: both opens always succeed, on the same file.
func TestSharedCreateRace(t *testing.T) {
	v := newSharedVolume(t)
	a := v.mount(t, "a")
	b := v.mount(t, "b")
	for i := 0; i < 60; i++ {
		name := fmt.Sprintf("f%d", i)
		start := make(chan struct{})
		inos := make([]uint64, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for k, m := range []*sharedMount{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				f, err := os.OpenFile(m.path(name), os.O_RDWR|os.O_CREATE, 0o644)
				if err != nil {
					errs[k] = err
					return
				}
				defer f.Close()
				var st syscall.Stat_t
				errs[k] = syscall.Fstat(int(f.Fd()), &st)
				inos[k] = st.Ino
			}()
		}
		close(start)
		wg.Wait()
		for k, err := range errs {
			if err != nil {
				t.Fatalf("round %d: open(O_CREAT) on mount %d: %v", i, k, err)
			}
		}
		if inos[0] != inos[1] {
			t.Fatalf("round %d: the two opens got inodes %d and %d", i, inos[0], inos[1])
		}
	}
}
