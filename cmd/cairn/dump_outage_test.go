package main

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/testenv/pgtest"
)

// TestSharedDumpLoadOutage: PostgreSQL stops for 3 s in the middle of a
// load into it and of a dump from it: both wait the outage out and finish
// (a load that failed would have to say so and be resumed by a second run;
// a failed dump must leave no file). A load started while the server is
// away fails at once with a clear message. Every loaded volume lists the
// dump source's files and fsck finds it clean.
func TestSharedDumpLoadOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("stops the shared PostgreSQL server")
	}
	pg := pgtest.Shared(t)
	t.Cleanup(func() { _ = pg.Start() }) // whatever happened, it runs again for the other tests
	v := newE2EVolume(t)
	src := v.dir + "/syn.cdump"
	cairn(t, "gen-dump", v.meta, "--files", fmt.Sprint(outageFiles), "--size", "64", "-o", src)
	srcList := findFiles(t, "pebble://"+v.dir+"/meta-ref", src)

	// A load that PostgreSQL leaves in the middle.
	db := pg.NewDatabase(t)
	load := exec.Command(cairnBinary(t), "load", src, db)
	outage := func(after, length time.Duration) {
		time.Sleep(after)
		if err := pg.Stop(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(length)
		if err := pg.Start(); err != nil {
			t.Fatal(err)
		}
	}
	var out strings.Builder
	load.Stdout, load.Stderr = &out, &out
	if err := load.Start(); err != nil {
		t.Fatal(err)
	}
	outage(700*time.Millisecond, 3*time.Second)
	if err := load.Wait(); err != nil {
		t.Logf("the load stopped by the outage: %v\n%s", err, out.String())
		if !strings.Contains(out.String(), "load") {
			t.Fatalf("the failed load's message does not say what failed:\n%s", out.String())
		}
		cairn(t, "load", src, db) // resumes
	} else {
		t.Logf("the load waited the outage out:\n%s", lastLines(out.String(), 3))
	}
	if got := findFilesOf(t, db); got != srcList {
		t.Fatal("after a load through an outage the volume lists other files than the dump's source")
	}
	if out := cairn(t, "fsck", db); !strings.Contains(out, " 0 metadata problems") {
		t.Fatalf("fsck after the load: %s", out)
	}

	// A dump that PostgreSQL leaves in the middle.
	again := v.dir + "/again.cdump"
	dump := exec.Command(cairnBinary(t), "dump", db, "-o", again)
	out.Reset()
	dump.Stdout, dump.Stderr = &out, &out
	if err := dump.Start(); err != nil {
		t.Fatal(err)
	}
	outage(300*time.Millisecond, 3*time.Second)
	if err := dump.Wait(); err != nil {
		t.Logf("the dump stopped by the outage: %v\n%s", err, out.String())
		for _, f := range []string{again, again + ".partial"} {
			if _, err := os.Stat(f); err == nil {
				t.Fatalf("a failed dump left %s", f)
			}
		}
		cairn(t, "dump", db, "-o", again)
	} else {
		t.Logf("the dump waited the outage out:\n%s", lastLines(out.String(), 3))
	}
	if got := findFiles(t, "pebble://"+v.dir+"/meta-again", again); got != srcList {
		t.Fatal("a dump taken through an outage loads a different tree")
	}

	// A load that starts while PostgreSQL is away fails at once, saying
	// so, and writes nothing; run again once the server is back, it loads.
	db2 := pg.NewDatabase(t)
	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	out2, err := cairnErr(t, "load", again, db2)
	if err == nil || !strings.Contains(out2, "cannot reach PostgreSQL") {
		t.Fatalf("a load while PostgreSQL is stopped: %v\n%s", err, out2)
	}
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	cairn(t, "load", again, db2)
	if got := findFilesOf(t, db2); got != srcList {
		t.Fatal("a load started during an outage lists a different tree")
	}
	if out := cairn(t, "fsck", db2); !strings.Contains(out, " 0 metadata problems") {
		t.Fatalf("fsck after the second load: %s", out)
	}
}

const outageFiles = 150000

// findFiles loads dump into a new embedded store at meta and lists its
// files with sizes.
func findFiles(t *testing.T, meta, dump string) string {
	t.Helper()
	cairn(t, "load", dump, meta)
	return findFilesOf(t, meta)
}

func findFilesOf(t *testing.T, meta string) string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(cairn(t, "find", meta, "/", "-type", "f")), "\n")
	if len(lines) != outageFiles {
		t.Fatalf("%s lists %d files, want %d", meta, len(lines), outageFiles)
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}
