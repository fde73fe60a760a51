package main

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// run executes the CLI in-process and returns its output and error.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func wantErr(t *testing.T, err error, substr string) {
	t.Helper()
	if err == nil {
		t.Fatalf("want an error containing %q, got success", substr)
	}
	if !strings.Contains(err.Error(), substr) {
		t.Fatalf("error %q does not contain %q", err, substr)
	}
}

// dirSnapshot lists every file under dir with its size, to prove a failed
// command changed nothing.
func dirSnapshot(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() && !strings.HasSuffix(p, ".log") {
			b.WriteString(p)
			b.WriteString(" ")
			b.WriteString(fi.ModTime().String())
			b.WriteString("\n")
		}
		return nil
	})
	return b.String()
}

func TestFormatAndStatus(t *testing.T) {
	dir := t.TempDir()
	meta := "pebble://" + dir + "/meta"
	out, err := run(t, "format", meta, "vol1")
	if err != nil {
		t.Fatalf("format: %v\n%s", err, out)
	}
	if !strings.Contains(out, "file://"+dir+"/data") {
		t.Fatalf("default data dir not beside metadata:\n%s", out)
	}
	out, err = run(t, "status", meta)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	for _, want := range []string{"vol1", "Block size", "Inline limit", "16.0 KiB (smaller slices", "Sessions"} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
	out, err = run(t, "fsck", meta)
	if err != nil {
		t.Fatalf("fsck of a fresh volume: %v\n%s", err, out)
	}
	out, err = run(t, "gc", meta)
	if err != nil || !strings.Contains(out, "0 orphans") {
		t.Fatalf("gc of a fresh volume: %v\n%s", err, out)
	}
	plain := "pebble://" + dir + "/plain"
	if out, err := run(t, "format", "--inline-max", "0", "--data", "file://"+dir+"/plaindata", plain, "plain"); err != nil || !strings.Contains(out, "inline limit: 0 bytes") {
		t.Fatalf("format --inline-max 0: %v\n%s", err, out)
	}
	if out, err := run(t, "status", plain); err != nil || !regexp.MustCompile(`Inline limit\s+none`).MatchString(out) {
		t.Fatalf("status of a volume without inline blocks: %v\n%s", err, out)
	}
}

func TestFormatRefusesExistingVolume(t *testing.T) {
	dir := t.TempDir()
	meta := "pebble://" + dir + "/meta"
	if _, err := run(t, "format", meta, "first"); err != nil {
		t.Fatal(err)
	}
	// Pebble rewrites its own files on every open, so compare the volume's
	// logical state (status) and the data store's files.
	before := dirSnapshot(t, dir+"/data")
	statusBefore, _ := run(t, "status", meta)
	_, err := run(t, "format", meta, "second")
	wantErr(t, err, `already holds volume "first"`)
	wantErr(t, err, "--force")
	statusAfter, _ := run(t, "status", meta)
	if after := dirSnapshot(t, dir+"/data"); after != before || statusAfter != statusBefore {
		t.Fatalf("refused format changed the volume:\nbefore:\n%s%s\nafter:\n%s%s", before, statusBefore, after, statusAfter)
	}
	// A second volume must not take over the first one's data store.
	_, err = run(t, "format", "--data", "file://"+dir+"/data", "pebble://"+dir+"/meta2", "third")
	wantErr(t, err, `already belongs to volume "first"`)
	if _, err := run(t, "format", "--force", meta, "second"); err != nil {
		t.Fatalf("format --force: %v", err)
	}
	out, err := run(t, "status", meta)
	if err != nil || !strings.Contains(out, "second") {
		t.Fatalf("status after --force: %v\n%s", err, out)
	}
}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"unknown scheme", []string{"format", "redis://x/y", "v"}, `unknown scheme "redis"`},
		{"relative pebble path", []string{"format", "pebble://rel/path", "v"}, "pebble:///absolute/path"},
		{"no scheme", []string{"status", "/var/lib/x"}, "no scheme"},
		{"bad data url", []string{"format", "--data", "s4://b", "pebble://" + dir + "/m", "v"}, `unknown scheme "s4"`},
		{"bad block size", []string{"format", "--block-size", "3M", "pebble://" + dir + "/m2", "v"}, "block size"},
		{"inline limit too big", []string{"format", "--inline-max", "65K", "pebble://" + dir + "/m2", "v"}, "inline limit 66560: want at most 65536"},
		{"inline limit not below the block size", []string{"format", "--block-size", "64K", "--inline-max", "64K", "pebble://" + dir + "/m2", "v"}, "less than the block size"},
		{"bad inline limit", []string{"format", "--inline-max", "lots", "pebble://" + dir + "/m2", "v"}, "--inline-max"},
		{"unformatted", []string{"status", "pebble://" + dir + "/empty"}, "no Cairn volume at"},
		{"missing mountpoint", []string{"mount", "pebble://" + dir + "/m3", dir + "/nope"}, "does not exist"},
		{"mountpoint is a file", []string{"mount", "pebble://" + dir + "/m3", "/etc/hostname"}, "not a directory"},
		{"mount unknown scheme", []string{"mount", "etcd://x", dir}, "unknown scheme"},
		{"read-ahead too deep", []string{"mount", "--read-ahead", "65", "pebble://" + dir + "/m3", dir}, "--read-ahead 65: want 0 to 64 blocks"},
		{"negative read-ahead", []string{"gateway", "nfs", "--read-ahead", "-2", "pebble://" + dir + "/m3"}, "--read-ahead -2: want 0 to 64 blocks"},
		{"umount non-mount", []string{"umount", dir}, "not a mount point"},
		{"info outside cairn", []string{"info", "/etc/hostname"}, "not inside a mounted Cairn volume"},
		{"missing args", []string{"format", "pebble:///x"}, "accepts 2 arg"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := run(t, c.args...)
			wantErr(t, err, c.want)
		})
	}
	if _, err := os.Stat(dir + "/m2/MANIFEST-000001"); err == nil {
		t.Errorf("a refused format left metadata behind")
	}
}

func TestHelpHasExamples(t *testing.T) {
	for _, c := range newRootCommand().Commands() {
		if c.Name() == "help" || c.Name() == "completion" {
			continue
		}
		if c.Example == "" {
			t.Errorf("%s --help has no example", c.Name())
		}
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]uint64{
		"4096": 4096, "64K": 64 << 10, "4M": 4 << 20, "1g": 1 << 30, "2TiB": 2 << 40, "3KB": 3 << 10,
		"1.5G": 3 << 29, "0.5k": 512, ".25M": 1 << 18, "2.": 2, " 7 ": 7, "1.0001K": 1024, // rounded down
		"16383P": 16383 << 50, "15E": 15 << 60, "18446744073709551615": math.MaxUint64,
	} {
		got, err := parseSize(in)
		if err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"x12", "", "K", ".", "-1", "+4K", "1.2.3", "1e3", "4 K", "0x10"} {
		if n, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", in, n)
		}
	}
	for _, in := range []string{"99999999P", "16E", "18446744073709551616"} {
		if n, err := parseSize(in); err == nil || !strings.Contains(err.Error(), "more than") {
			t.Errorf("parseSize(%q) = %d, %v; want a too-large error", in, n, err)
		}
	}
}

func TestDataStoreMissing(t *testing.T) {
	dir := t.TempDir()
	meta := "pebble://" + dir + "/meta"
	if _, err := run(t, "format", meta, "v"); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir + "/data"); err != nil {
		t.Fatal(err)
	}
	// The data directory is gone (unmounted disk, wrong path): refuse with
	// a message that says so, and leave the metadata alone.
	_, err := run(t, "status", meta)
	wantErr(t, err, "does not answer")
	mnt := t.TempDir()
	_, err = run(t, "mount", meta, mnt)
	wantErr(t, err, "does not answer")
	if _, err := os.Stat(dir + "/data"); err == nil {
		t.Fatal("opening the volume created its missing data store")
	}
	// An empty directory in its place (say, a disk not mounted there).
	if err := os.Mkdir(dir+"/data", 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = run(t, "status", meta)
	wantErr(t, err, "has no marker of volume")
	if err := os.Remove(dir + "/data"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/data", []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = run(t, "status", meta)
	wantErr(t, err, "is not a directory")
}

// TestFlagsFromEnvironment: every flag may be given as CAIRN_<FLAG>; the
// command line wins, and a bad value names the variable.
func TestFlagsFromEnvironment(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("CAIRN_BLOCK_SIZE", "1M")
	t.Setenv("CAIRN_INLINE_MAX", "0")
	meta := "pebble://" + dir + "/meta"
	if out, err := run(t, "format", "--inline-max", "8K", "--data", "file://"+dir+"/data", meta, "env"); err != nil {
		t.Fatalf("format: %v\n%s", err, out)
	}
	out, err := run(t, "status", meta)
	if err != nil || !regexp.MustCompile(`Block size\s+1.0 MiB`).MatchString(out) || !regexp.MustCompile(`Inline limit\s+8.0 KiB`).MatchString(out) {
		t.Fatalf("status after format with CAIRN_BLOCK_SIZE=1M and --inline-max 8K over CAIRN_INLINE_MAX=0: %v\n%s", err, out)
	}
	t.Setenv("CAIRN_BLOCK_SIZE", "huge")
	_, err = run(t, "format", "--data", "file://"+dir+"/data2", "pebble://"+dir+"/meta2", "env2")
	wantErr(t, err, `--block-size was set by CAIRN_BLOCK_SIZE="huge"`)
	if _, serr := os.Stat(dir + "/meta2"); serr == nil {
		t.Error("a format refused for its environment created the volume")
	}
}

// TestGenMan: the manual pages of every command are generated, with their
// flags.
func TestGenMan(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("SOURCE_DATE_EPOCH", "1764892800")
	if out, err := run(t, "gen-man", dir); err != nil {
		t.Fatalf("gen-man: %v\n%s", err, out)
	}
	for page, want := range map[string]string{"cairn.1": "cairn-mount(1)", "cairn-mount.1": "cache-mem", "cairn-fsck.1": "Exit status",
		"cairn-snapshot-restore.1": "SYNOPSIS"} {
		b, err := os.ReadFile(filepath.Join(dir, page))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `.TH "CAIRN" "1" "Dec 2025"`) || !strings.Contains(string(b), want) {
			t.Errorf("%s: no header or no %q:\n%.400s", page, want, b)
		}
	}
}

// TestMountHelperArgs: what mount(8) gives mount.cairn becomes cairn mount
// -d: options named like mount flags set them, the others go to -o, which
// refuses unknown ones unless mount(8) said -s; -f mounts nothing.
func TestMountHelperArgs(t *testing.T) {
	mount, _, err := newRootCommand().Find([]string{"mount"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		in   []string
		want string
		fake bool
	}{
		{[]string{"pebble:///m", "/mnt", "-o", "rw,_netdev,allow_other,cache-dir=/c,cache-size=5G,writeback"},
			"mount -d --cache-dir=/c --cache-size=5G --writeback -o rw,allow_other pebble:///m /mnt", false},
		{[]string{"-s", "-n", "pebble:///m", "/mnt", "-o", "bogus,noatime", "-t", "cairn"}, "mount -d -o noatime pebble:///m /mnt", false},
		{[]string{"-fv", "pebble:///m", "/mnt"}, "mount -d pebble:///m /mnt", true},
	} {
		out, fake, _, err := mountHelperArgs(c.in, mount.Flags())
		if err != nil || strings.Join(out, " ") != c.want || fake != c.fake {
			t.Errorf("mountHelperArgs(%q) = %q, %v, %v; want %q, %v", c.in, out, fake, err, c.want, c.fake)
		}
	}
	for _, in := range [][]string{
		{"pebble:///m", "/mnt", "-o", "bogus"},
		{"pebble:///m"},
		{"pebble:///m", "/mnt", "-o", "cache-dir"},
		{"-x", "pebble:///m", "/mnt"},
	} {
		if out, _, _, err := mountHelperArgs(in, mount.Flags()); err == nil {
			t.Errorf("mountHelperArgs(%q) = %q, want an error", in, out)
		}
	}
}
