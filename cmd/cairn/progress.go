package main

import (
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/cairnfs/cairn/internal/daemon"
)

// startProgress redraws line() on w every quarter second while w is a
// terminal, and returns what stops it and clears the line.
func startProgress(w *os.File, line func() string) (stop func()) {
	if !isTerminal(w) {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				fmt.Fprint(w, "\r\033[K")
				return
			case <-t.C:
				fmt.Fprint(w, "\r\033[K"+line())
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}

// rateLine renders a dump's or a load's progress: inodes (of total when
// known), records, bytes and the rate since the start.
func rateLine(what string, p *daemon.DumpProgress, total uint64) func() string {
	start := time.Now()
	return func() string {
		n := p.Inodes.Load()
		s := fmt.Sprintf("%s: %d inodes", what, n)
		if total > 0 {
			s += fmt.Sprintf(" of ~%d (%.0f%%)", total, 100*float64(n)/float64(total))
		}
		return s + fmt.Sprintf(", %d records, %s, %.0f inodes/s", p.Records.Load(), fmtSize(p.Bytes.Load()),
			float64(n)/time.Since(start).Seconds())
	}
}

func fmtSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
}

// fsckLine renders a running fsck's progress: its phase, and the items and
// bytes of the phase with their rate (empty until fsck starts, and
// through a control socket, where it is not seen).
func fsckLine(p *daemon.FsckProgress) func() string {
	var phase string
	var since time.Time
	return func() string {
		ph := p.Phase.Load()
		if ph == nil {
			return ""
		}
		if *ph != phase {
			phase, since = *ph, time.Now()
		}
		s := "fsck: " + phase
		done, total := p.Done.Load(), p.Total.Load()
		rate := float64(done) / max(time.Since(since).Seconds(), 1e-3)
		switch {
		case total > 0:
			s += fmt.Sprintf(": %d of %d (%.0f%%), %.0f/s", done, total, 100*float64(done)/float64(total), rate)
		case done > 0:
			s += fmt.Sprintf(": %d, %.0f/s", done, rate)
		}
		if b := p.Bytes.Load(); b > 0 {
			s += ", " + fmtSize(b) + " read"
		}
		return s
	}
}
