package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSharedQuotaOutage: PostgreSQL stops for 3 s while a client writes,
// fsyncs and removes files in a directory quota's tree with the trash on.
// Every call waits the outage out; afterwards every fsynced file reads
// back byte for byte, the quota's usage equals what its tree holds (quota
// check) and fsck is clean.
func TestSharedQuotaOutage(t *testing.T) {
	pg, v, a := outageQuotaVolume(t, "--bytes", "1G", "--inodes", "100000")
	// The writer: 64 KiB files, each fsynced; every third, the file
	// two before it removed (into the trash, leaving the quota).
	wr := startWriter(t, writerConfig{Dir: a.path("q"), Size: 64 << 10, Step: 1, SyncEvery: 1, RemoveEvery: 3, RemoveBack: 2})
	time.Sleep(time.Second)
	down := time.Now()
	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	stopTook := time.Since(down)
	time.Sleep(3 * time.Second)
	up := time.Now()
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	startTook, outage := time.Since(up), time.Since(down)
	time.Sleep(2 * time.Second)
	wr.Stop()
	if wr.Err != "" {
		log, _ := os.ReadFile(filepath.Join(v.dir, "a.log"))
		t.Fatalf("a write or removal through a %v PostgreSQL outage (stop %v, start %v): %s\nthe mount's log:\n%s",
			outage.Round(time.Millisecond), stopTook.Round(time.Millisecond), startTook.Round(time.Millisecond), wr.Err, lastLines(string(log), 20))
	}
	t.Logf("%d files written through a %v outage (stop %v, start %v)", wr.Files, outage.Round(time.Millisecond), stopTook.Round(time.Millisecond), startTook.Round(time.Millisecond))
	synced := map[string][]byte{}
	for i := range wr.Synced {
		synced[fmt.Sprintf("q/f%04d", i)] = writerData(i, 64<<10+i)
	}
	if len(synced) < 10 {
		t.Fatalf("only %d files written", len(synced))
	}
	b := v.mount(t, "b") // a fresh client: what is stored, not a cache
	for name, data := range synced {
		got, err := os.ReadFile(b.path(name))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s: %d bytes (%v) after the outage, want the %d fsynced", name, len(got), err, len(data))
		}
	}
	if out, err := v.cairn(t, "quota", "check", v.meta); err != nil || !strings.Contains(out, "no problems") {
		t.Fatalf("quota check after the outage: %v\n%s", err, out)
	}
	a.stop(t)
	b.stop(t)
	if out, err := v.cairn(t, "fsck", v.meta); err != nil {
		t.Fatalf("fsck: %v\n%s", err, out)
	}
}
