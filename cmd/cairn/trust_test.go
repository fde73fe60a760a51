package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/kv/postgres"
	"github.com/cairnfs/cairn/internal/testenv"
	"github.com/cairnfs/cairn/internal/testenv/pgtest"
)

// Issue 32, "Trust first": a password in a metadata URL shows nowhere, and
// admin verbs create nothing where there is no volume.

// withPassword returns the URL of a pgtest database with a password in
// its userinfo (form "user") or in a password query parameter ("query").
// The test server trusts local connections, so any password is accepted.
func withPassword(t *testing.T, url, form, pw string) string {
	t.Helper()
	switch form {
	case "user":
		const user = "postgres://" + pgtest.User + "@"
		if !strings.HasPrefix(url, user) {
			t.Fatalf("pgtest URL %q does not start with %q", url, user)
		}
		return "postgres://" + pgtest.User + ":" + pw + "@" + strings.TrimPrefix(url, user)
	case "query":
		return url + "&password=" + pw
	}
	t.Fatalf("unknown form %q", form)
	return ""
}

// noSecret fails t if text shows pw.
func noSecret(t *testing.T, what, text, pw string) {
	t.Helper()
	if strings.Contains(text, pw) {
		t.Errorf("%s shows the password %q:\n%s", what, pw, text)
	}
}

// TestPasswordShowsNowhere: with the password of a PostgreSQL metadata
// URL in either form, neither format's and status's output, nor mount -d's
// message, its log file (created 0600), /proc/mounts, nor the command line
// of the mount process it starts (ps) shows it; the mount works.
func TestPasswordShowsNowhere(t *testing.T) {
	for _, form := range []string{"user", "query"} {
		t.Run(form, func(t *testing.T) {
			cairnBinary(t) // mount -d runs the binary
			pw := "pw-" + form + "-Sekr1t"
			meta := withPassword(t, pgtest.NewDatabase(t), form, pw)
			dir := t.TempDir()
			mnt := filepath.Join(dir, "mnt")
			if err := os.Mkdir(mnt, 0o755); err != nil {
				t.Fatal(err)
			}

			out, err := run(t, "format", "--data", "file://"+dir+"/data", meta, "trust")
			if err != nil {
				t.Fatalf("format: %v\n%s", err, out)
			}
			noSecret(t, "format's output", out, pw)
			_, err = run(t, "format", "--data", "file://"+dir+"/data2", meta, "again")
			wantErr(t, err, "already holds volume")
			noSecret(t, "format's refusal", err.Error(), pw)
			out, err = run(t, "status", meta)
			if err != nil {
				t.Fatalf("status: %v\n%s", err, out)
			}
			noSecret(t, "status", out, pw)

			// No --log: the mount's default log file, in the temporary
			// directory for a shared volume.
			out = cairn(t, "mount", "-d", meta, mnt)
			t.Cleanup(func() {
				if _, ok := mountedAt(mnt); ok {
					cairn(t, "umount", mnt)
				}
			})
			noSecret(t, "mount's message", out, pw)
			m := regexp.MustCompile(`\(pid (\d+), log (\S+)\)`).FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("mount's message names no pid and log: %s", out)
			}
			pid, _ := strconv.Atoi(m[1])
			logFile := m[2]
			t.Cleanup(func() { os.Remove(m[2]) })

			cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
			if err != nil {
				t.Fatal(err)
			}
			noSecret(t, "the mount process's command line", strings.ReplaceAll(string(cmdline), "\x00", " "), pw)
			if !strings.Contains(string(cmdline), "xxxxx") {
				t.Errorf("the mount process's command line holds no redacted URL: %q", cmdline)
			}
			mounts, err := os.ReadFile("/proc/mounts")
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range strings.Split(string(mounts), "\n") {
				noSecret(t, "/proc/mounts", l, pw)
			}
			line, ok := mountedAt(mnt)
			if !ok || !strings.Contains(line, "xxxxx") {
				t.Errorf("the mount's source is not the redacted URL: %q", line)
			}

			// The mount process got the real URL: it serves the volume.
			writeFile(t, filepath.Join(mnt, "f"), []byte("hello"))
			if got := readFile(t, filepath.Join(mnt, "f")); string(got) != "hello" {
				t.Fatalf("read back %q", got)
			}
			out, err = run(t, "status", meta)
			if err != nil || !strings.Contains(out, mnt) {
				t.Fatalf("status while mounted: %v\n%s", err, out)
			}
			noSecret(t, "status while mounted", out, pw)
			cairn(t, "umount", mnt)

			fi, err := os.Stat(logFile)
			if err != nil {
				t.Fatal(err)
			}
			if perm := fi.Mode().Perm(); perm != 0o600 {
				t.Errorf("log file %s has mode %v, want 0600", logFile, perm)
			}
			log, _ := os.ReadFile(logFile)
			if !strings.Contains(string(log), "mounted") {
				t.Errorf("log file %s lacks the mounted line:\n%s", logFile, log)
			}
			noSecret(t, "the mount log", string(log), pw)

			// --log: created 0600 as well.
			logFile = filepath.Join(dir, "given.log")
			cairn(t, "mount", "-d", "--log", logFile, meta, mnt)
			cairn(t, "umount", mnt)
			if fi, err := os.Stat(logFile); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("--log file: %v, %v; want mode 0600", fi.Mode(), err)
			}
			log, _ = os.ReadFile(logFile)
			noSecret(t, "the --log file", string(log), pw)
		})
	}
}

// TestAdminCreatesNothing: every verb but format, given a pebble:// URL
// where there is no volume (a directory of other files, an empty one, or
// none), refuses, says to run cairn format, and leaves the place as it
// was: no directory created, no file added.
func TestAdminCreatesNothing(t *testing.T) {
	parent := t.TempDir()
	unrelated := filepath.Join(parent, "unrelated")
	if err := os.MkdirAll(filepath.Join(unrelated, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(unrelated, "notes.txt"), []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(parent, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	mnt := t.TempDir()
	for _, path := range []string{unrelated, empty, filepath.Join(parent, "missing", "meta")} {
		meta := "pebble://" + path
		for _, args := range [][]string{
			{"status", meta},
			{"fsck", meta},
			{"gc", meta},
			{"snapshot", "list", meta},
			{"snapshot", "create", meta, "s1"},
			{"mount", meta, mnt},
			{"gateway", "nfs", "--listen", "127.0.0.1:0", meta},
		} {
			before := testenv.Tree(t, parent, true)
			_, err := run(t, args...)
			if after := testenv.Tree(t, parent, true); after != before {
				t.Errorf("cairn %s changed %s:\nbefore:\n%s\nafter:\n%s", strings.Join(args, " "), parent, before, after)
			}
			if err == nil || !strings.Contains(err.Error(), "no Cairn volume at "+meta) || !strings.Contains(err.Error(), "cairn format") {
				t.Errorf("cairn %s: %v; want no Cairn volume at %s ... cairn format", strings.Join(args, " "), err, meta)
			}
		}
	}
	if os.Geteuid() == 0 {
		// mount -d runs the binary; it must not make the directory for
		// its log either (its log goes to the temporary directory).
		meta := "pebble://" + filepath.Join(parent, "missing", "meta")
		t.Cleanup(func() {
			os.Remove(filepath.Join(os.TempDir(), "cairn-mount-"+strings.ReplaceAll(strings.Trim(mnt, "/"), "/", "_")+".log"))
		})
		before := testenv.Tree(t, parent, true)
		out, err := cairnErr(t, "mount", "-d", meta, mnt)
		if err == nil || !strings.Contains(out, "no Cairn volume at "+meta) {
			t.Errorf("mount -d where there is no volume: %v\n%s", err, out)
		}
		if after := testenv.Tree(t, parent, true); after != before {
			t.Errorf("mount -d changed %s:\nbefore:\n%s\nafter:\n%s", parent, before, after)
		}
	}
}

// TestFailedFormatLeavesNothing: a format refused after it created the
// directories of its embedded store or local data store removes them, and
// only them: a directory that was there keeps all it held.
func TestFailedFormatLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	taken := "file://" + dir + "/taken"
	if _, err := run(t, "format", "--data", taken, "pebble://"+dir+"/vol", "first"); err != nil {
		t.Fatal(err)
	}
	// A data store where the marker cannot be written, found after the
	// metadata was formatted.
	broken := dir + "/broken"
	if err := os.MkdirAll(broken+"/cairn/volume.json", 0o755); err != nil {
		t.Fatal(err)
	}
	unrelated := dir + "/unrelated"
	if err := os.MkdirAll(unrelated+"/sub", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(unrelated+"/notes.txt", []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := dir + "/empty"
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, data, meta, want string
	}{
		{"data store of another volume", taken, dir + "/new/meta", `already belongs to volume "first"`},
		{"data store that refuses the marker", "file://" + broken, dir + "/new/meta", "writing volume marker"},
		{"into an unrelated directory", taken, unrelated, `already belongs to volume "first"`},
		{"into an empty directory", "file://" + broken, empty, "writing volume marker"},
		{"new data store of an existing volume", "file://" + dir + "/fresh/data", dir + "/vol", `already holds volume "first"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := testenv.Tree(t, dir, false)
			_, err := run(t, "format", "--data", c.data, "pebble://"+c.meta, "second")
			wantErr(t, err, c.want)
			// The existing volume's Pebble files change on every open;
			// compare the rest, and the volume by its status.
			if after := testenv.Tree(t, dir, false); withoutDir(after, dir+"/vol") != withoutDir(before, dir+"/vol") {
				t.Errorf("refused format left:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
	if out, err := run(t, "status", "pebble://"+dir+"/vol"); err != nil || !strings.Contains(out, "first") {
		t.Fatalf("the first volume after the refused formats: %v\n%s", err, out)
	}
}

// withoutDir drops the lines of tree listing l of directory d and what it
// holds.
func withoutDir(l, d string) string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(l, "\n") {
		if !strings.HasPrefix(line, d+"/") && !strings.HasPrefix(line, d+" ") {
			b.WriteString(line)
		}
	}
	return b.String()
}

// TestAdminCreatesNothingOnPostgres: the admin verbs on a PostgreSQL
// database that holds no volume say so and leave the database as it was
// (no Cairn table made).
func TestAdminCreatesNothingOnPostgres(t *testing.T) {
	db := pgtest.NewDatabase(t)
	for _, args := range [][]string{
		{"status", db},
		{"fsck", db},
		{"gc", db},
		{"snapshot", "list", db},
	} {
		_, err := run(t, args...)
		if err == nil || !strings.Contains(err.Error(), "no Cairn volume at ") || !strings.Contains(err.Error(), "cairn format") {
			t.Errorf("cairn %s: %v; want no Cairn volume ... cairn format", args[0], err)
		}
	}
	_, err := postgres.Open(context.Background(), db, postgres.Options{MustExist: true})
	if !errors.Is(err, kv.ErrNotExist) {
		t.Errorf("after the admin verbs, opening the database finds %v; want no table (kv.ErrNotExist)", err)
	}
}
