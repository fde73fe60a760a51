package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/daemon"
)

// cairn find is checked against GNU find on the same tree, made through a
// real FUSE mount: GNU find walks the mount, cairn find reads the
// metadata, through the mount process's control socket while mounted and
// from the store once unmounted.

// findCase is one search: start paths (relative to the mount's root,
// which cairn reads as relative to the volume's), then the expression.
type findCase struct {
	paths []string
	expr  []string
}

func (c findCase) String() string { return fmt.Sprintf("%q %q", c.paths, c.expr) }

// gnuFind runs GNU find in dir with -print0 and returns the paths, sorted.
func gnuFind(t *testing.T, dir string, c findCase) []string {
	t.Helper()
	cmd := exec.Command("find", append(append(slices.Clone(c.paths), c.expr...), "-print0")...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("GNU find %s: %v\n%s", c, err, stderr.String())
	}
	return splitNul(string(out))
}

// cairnFind runs cairn find and returns its standard output, its
// standard error and its exit status.
func cairnFind(t *testing.T, metaURL string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(cairnBinary(t), append([]string{"find", metaURL}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return stdout.String(), stderr.String(), 0
	case errors.As(err, &ee):
		return stdout.String(), stderr.String(), ee.ExitCode()
	}
	t.Fatalf("cairn find: %v", err)
	return "", "", 0
}

// cairnFindPaths runs cairn find with -print0 and returns the paths, sorted.
func cairnFindPaths(t *testing.T, metaURL string, c findCase) []string {
	t.Helper()
	out, stderr, code := cairnFind(t, metaURL, append(append(slices.Clone(c.paths), c.expr...), "-print0")...)
	if code != 0 {
		t.Fatalf("cairn find %s: exit %d\n%s", c, code, stderr)
	}
	return splitNul(out)
}

func splitNul(s string) []string {
	if s == "" {
		return nil
	}
	out := strings.Split(strings.TrimSuffix(s, "\x00"), "\x00")
	sort.Strings(out)
	return out
}

func diffPaths(want, got []string) string {
	in := func(s []string, x string) bool { _, ok := slices.BinarySearch(s, x); return ok }
	var b strings.Builder
	for _, p := range want {
		if !in(got, p) {
			fmt.Fprintf(&b, "  missing %q\n", p)
		}
	}
	for _, p := range got {
		if !in(want, p) {
			fmt.Fprintf(&b, "  extra   %q\n", p)
		}
	}
	return b.String()
}

// buildFindTree makes, through the mount at mnt, a tree with what find's
// tests tell apart; it returns the reference time of its file ages.
func buildFindTree(t *testing.T, mnt string) time.Time {
	t.Helper()
	sh(t, mnt, `
mkdir -p dir1/sub/deep 'sp ace dir' odd sizes links perm times owners special inline
printf hello > dir1/a.txt
truncate -s 512 dir1/B.TXT
truncate -s 1025 dir1/sub/deep/x.bin
truncate -s 1048576 dir1/sub/c.log
truncate -s 1 dir1/.hidden
truncate -s 511 'sp ace dir/file with spaces.txt'
truncate -s 513 odd/$'odd\xffname'
truncate -s 1023 odd/$'new\nline'
truncate -s 1024 odd/$'tab\there'
touch 'odd/star*name' 'odd/brack[et]' odd/CASEmix odd/casemix2
for s in 0 1 511 512 513 1023 1024 1025 2047 2048 2049 1048575 1048576 1048577 1073741824 1073741825; do truncate -s $s sizes/s$s; done
printf data > links/target
ln links/target links/hard1
ln links/target links/hard2
ln -s target links/sym
ln -s nowhere links/dangling
ln -s ../dir1 links/dirsym
for m in 644 600 755 4755 2755 777 000 4711 640 751; do touch perm/p$m; chmod $m perm/p$m; done
mkdir perm/d1777 perm/d2750; chmod 1777 perm/d1777; chmod 2750 perm/d2750
touch owners/u1000 owners/nobody owners/g1000
chown 1000:1000 owners/u1000; chown 65534:65534 owners/nobody; chown 0:1000 owners/g1000
mkfifo special/fifo
mknod special/cdev c 1 3
python3 -c "import socket; socket.socket(socket.AF_UNIX).bind('special/sock')"
head -c 100 /dev/urandom > inline/small
head -c 20000 /dev/urandom > inline/medium
truncate -s 100 inline/sparse
touch inline/empty
touch times/old40 times/d2 times/d1 times/d0 times/future times/ref
`)
	now := time.Now()
	day := 24 * time.Hour
	age := func(name string, d time.Duration) {
		t.Helper()
		at := now.Add(-d)
		if err := os.Chtimes(filepath.Join(mnt, name), at, at); err != nil {
			t.Fatal(err)
		}
	}
	age("times/old40", 40*day+12*time.Hour)
	age("times/d2", 2*day+12*time.Hour)
	age("times/d1", day+12*time.Hour)
	age("times/d0", 12*time.Hour)
	age("times/future", -day)
	age("times/ref", day+time.Hour)
	age("dir1/a.txt", 12*time.Hour)
	age("dir1/B.TXT", day+12*time.Hour)
	age("dir1/sub", 3*day+12*time.Hour)
	return now
}

func findCases(t *testing.T, mnt string) []findCase {
	all := []string{"."}
	c := func(expr ...string) findCase { return findCase{all, expr} }
	cases := []findCase{
		c(),
		c("-name", "*.txt"), c("-name", "*"), c("-name", ".*"), c("-name", "[a-c]*"), c("-name", "*[!0-9]"),
		c("-name", "*\\*name"), c("-name", "brack\\[et]"), c("-name", "?ASE*"), c("-name", "s1*[3-5]"),
		c("-iname", "case*"), c("-iname", "*.TXT"), c("-name", "[[:upper:]]*"),
		c("-path", "./dir1/*"), c("-path", "*sub*"), c("-path", "./odd/*name"), c("-ipath", "*DIR1*txt"),
		c("-type", "f"), c("-type", "d"), c("-type", "l"), c("-type", "p"), c("-type", "s"), c("-type", "c"), c("-type", "f,l"),
		c("-size", "0"), c("-size", "-1"), c("-size", "1"), c("-size", "+1"), c("-size", "2"), c("-size", "3"),
		c("-size", "512c"), c("-size", "-512c"), c("-size", "+512c"), c("-size", "1k"), c("-size", "-1k"), c("-size", "+1k"),
		c("-size", "2k"), c("-size", "1M"), c("-size", "-1M"), c("-size", "+1M"), c("-size", "1G"), c("-size", "+1G"),
		c("-size", "2G"), c("-size", "1023w"), c("-size", "-2b"),
		c("-mtime", "0"), c("-mtime", "1"), c("-mtime", "2"), c("-mtime", "+1"), c("-mtime", "-2"), c("-mtime", "+30"),
		c("-mtime", "-1"), c("-mtime", "+0"), c("-ctime", "-1"), c("-ctime", "+0"), c("-ctime", "0"),
		c("-newer", "times/ref"), c("-newer", "times/d1", "-type", "f"),
		c("-user", "root"), c("-user", "1000"), c("-uid", "1000"), c("-uid", "+0"), c("-uid", "-1000"),
		c("-gid", "1000"), c("-group", "root"), c("-group", "1000"), c("-not", "-user", "root"),
		c("-perm", "644"), c("-perm", "-u+x"), c("-perm", "/o+w"), c("-perm", "-4000"), c("-perm", "/6000"),
		c("-perm", "1777"), c("-perm", "-g=w"), c("-perm", "/u=x,g=x"), c("-perm", "u=rw,go=r"), c("-perm", "/0"),
		c("-perm", "-0"), c("-perm", "000"), c("-perm", "/a+X"), c("-perm", "-a+X"),
		c("-links", "3"), c("-links", "+1"), c("-links", "-2"),
		c("-maxdepth", "1"), c("-maxdepth", "0"), c("-mindepth", "2"), c("-maxdepth", "2", "-mindepth", "2", "-type", "f"),
		c("-mindepth", "4"), c("-maxdepth", "2", "-name", "*o*"),
		c("!", "-name", "*.txt", "-type", "f"), c("-not", "-type", "d", "-not", "-size", "0"), c("!", "!", "-type", "d"),
		c("-type", "f", "-size", "+0", "-mtime", "-1", "-perm", "-u+r"),
		{[]string{"dir1", "sp ace dir"}, nil},
		{[]string{"dir1/"}, []string{"-name", "dir1"}},
		{[]string{"dir1//"}, nil},
		{[]string{"links/target"}, []string{"-links", "3"}},
		{[]string{"links/dirsym"}, nil},
		{[]string{"./dir1/../odd"}, []string{"-name", "*e*"}},
		{[]string{"odd", "dir1/sub"}, []string{"-maxdepth", "1", "-name", "*"}},
	}
	if u, err := user.LookupId("1000"); err == nil {
		cases = append(cases, c("-user", u.Username))
	}
	if _, err := user.Lookup("nobody"); err == nil {
		cases = append(cases, c("-user", "nobody"))
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(mnt, "links/target"), &st); err != nil {
		t.Fatal(err)
	}
	cases = append(cases, c("-inum", fmt.Sprint(st.Ino)), c("-inum", "+100"))
	return cases
}

// checkFindCases runs every case with both finds (GNU's answers, when
// want is not nil, are what an earlier run found) and returns GNU's.
// With the volume mounted, cases run a few at a time (a store opened
// by cairn find itself is held by one process at a time).
func checkFindCases(t *testing.T, v *e2eVolume, cases []findCase, want map[string][]string) map[string][]string {
	t.Helper()
	_, mounted := mountedAt(v.mnt)
	if want == nil {
		want = map[string][]string{}
		for _, c := range cases {
			want[c.String()] = gnuFind(t, v.mnt, c)
		}
	}
	type result struct {
		got []string
		err error
	}
	results := make([]result, len(cases))
	width := 1
	if mounted {
		width = 4
	}
	sem := make(chan struct{}, width)
	var wg sync.WaitGroup
	for i, c := range cases {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			results[i].got, results[i].err = cairnFindList(cairnBinary(t), v.meta, c)
		}()
	}
	wg.Wait()
	for i, c := range cases {
		got, err := results[i].got, results[i].err
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		if d := diffPaths(want[c.String()], got); d != "" {
			t.Errorf("find %s differs from GNU find:\n%s", c, d)
		}
		if c.String() == (findCase{[]string{"."}, nil}).String() && len(got) < 60 {
			t.Fatalf("find found only %d entries: %q", len(got), got)
		}
	}
	return want
}

// cairnFindList is cairnFindPaths for any goroutine.
func cairnFindList(bin, metaURL string, c findCase) ([]string, error) {
	cmd := exec.Command(bin, append(append([]string{"find", metaURL}, append(slices.Clone(c.paths), c.expr...)...), "-print0")...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("cairn find %s: %v\n%s", c, err, stderr.String())
	}
	return splitNul(stdout.String()), nil
}

func TestE2EFind(t *testing.T) {
	v := newE2EVolume(t)
	v.mount(t)
	buildFindTree(t, v.mnt)
	cases := findCases(t, v.mnt)
	// Mounted: through the mount process.
	checkFindCases(t, v, cases, nil)
	checkFindOutputs(t, v)
	checkFindBadInput(t, v.meta)
	snapCases, snapWant := checkFindSnapshots(t, v)
	// Unmounted: from the store, which each cairn find opens in turn, so
	// one case in three (the search is the same code; what differs is
	// who runs it). The tree changed since GNU's answers
	// (checkFindSnapshots): they are taken again before unmounting.
	var some []findCase
	for i, c := range cases {
		if i%3 == 0 || len(c.paths) != 1 {
			some = append(some, c)
		}
	}
	var gnu map[string][]string
	if !t.Failed() {
		gnu = map[string][]string{}
		for _, c := range append(some, findCase{[]string{"."}, nil}) {
			gnu[c.String()] = gnuFind(t, v.mnt, c)
		}
	}
	v.unmount(t)
	if _, mounted := mountedAt(v.mnt); mounted {
		t.Fatal("still mounted")
	}
	checkFindBadInput(t, v.meta)
	if gnu == nil {
		return
	}
	checkFindCases(t, v, some, gnu)
	checkFindCases(t, v, snapCases, snapWant)
	// The volume root as the start: GNU's ./x is /x.
	want := []string{"/"}
	for _, p := range gnu[(findCase{[]string{"."}, nil}).String()][1:] {
		want = append(want, strings.TrimPrefix(p, "."))
	}
	sort.Strings(want)
	if d := diffPaths(want, cairnFindPaths(t, v.meta, findCase{[]string{"/"}, nil})); d != "" {
		t.Errorf("find /:\n%s", d)
	}
	if d := diffPaths(want, cairnFindPaths(t, v.meta, findCase{nil, nil})); d != "" {
		t.Errorf("find without a path:\n%s", d)
	}
}

// checkFindOutputs checks the default output (a newline after each
// path), --json against lstat on the mount, -inline, and -summary
// against du.
func checkFindOutputs(t *testing.T, v *e2eVolume) {
	t.Helper()
	out, _, code := cairnFind(t, v.meta, "dir1", "-name", "*.*")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	sort.Strings(lines)
	if want := []string{"dir1/.hidden", "dir1/B.TXT", "dir1/a.txt", "dir1/sub/c.log", "dir1/sub/deep/x.bin"}; code != 0 || !slices.Equal(lines, want) {
		t.Errorf("lines %q (exit %d), want %q", lines, code, want)
	}

	out, _, code = cairnFind(t, v.meta, "--json", ".", "-not", "-type", "d")
	if code != 0 {
		t.Fatalf("--json: exit %d", code)
	}
	n := 0
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		n++
		var r daemon.FindRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("--json line %q: %v", sc.Text(), err)
		}
		p := r.Path
		if r.PathBase64 != "" {
			b, _ := base64.StdEncoding.DecodeString(r.PathBase64)
			p = string(b)
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(v.mnt, p), &st); err != nil {
			t.Errorf("--json path %q: %v", p, err)
			continue
		}
		mt := time.Unix(st.Mtim.Sec, st.Mtim.Nsec)
		if uint64(r.Ino) != st.Ino || r.Size != uint64(st.Size) || r.Mode != st.Mode&0o7777 || r.Uid != st.Uid ||
			r.Gid != st.Gid || uint64(r.Nlink) != uint64(st.Nlink) || !r.Mtime.Equal(mt) || r.Type == "dir" {
			t.Errorf("--json %+v, lstat %+v (mtime %v)", r, st, mt)
		}
	}
	if want := len(gnuFind(t, v.mnt, findCase{[]string{"."}, []string{"-not", "-type", "d"}})); n != want || n == 0 {
		t.Errorf("--json printed %d entries, want %d", n, want)
	}
	if !strings.Contains(out, `"path_base64":`) {
		t.Errorf("--json has no path_base64 for the name that is not UTF-8")
	}

	got := cairnFindPaths(t, v.meta, findCase{[]string{"."}, []string{"-inline"}})
	if want := []string{"./dir1/a.txt", "./inline/small", "./links/hard1", "./links/hard2", "./links/target"}; !slices.Equal(got, want) {
		t.Errorf("-inline: %q, want %q", got, want)
	}

	// -summary of a tree without hard links is du's apparent size.
	out, _, code = cairnFind(t, v.meta, "dir1", "-summary")
	du := sh(t, v.mnt, "du -b --apparent-size dir1 | sort -k2")
	var mine []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Split(l, "\t")
		if len(f) != 3 {
			t.Fatalf("-summary line %q", l)
		}
		entries := len(gnuFind(t, v.mnt, findCase{[]string{f[2]}, []string{"-mindepth", "1"}}))
		if f[0] != fmt.Sprint(entries) {
			t.Errorf("-summary %q: %s entries, find says %d", f[2], f[0], entries)
		}
		mine = append(mine, f[1]+"\t"+f[2])
	}
	sort.Slice(mine, func(i, j int) bool { return strings.Split(mine[i], "\t")[1] < strings.Split(mine[j], "\t")[1] })
	if code != 0 || strings.Join(mine, "\n") != strings.TrimSpace(du) {
		t.Errorf("-summary (exit %d):\n%s\ndu:\n%s", code, strings.Join(mine, "\n"), du)
	}
	if ls := strings.Split(strings.TrimSpace(out), "\n"); ls[len(ls)-1] != "7\t1050119\tdir1" {
		t.Errorf("-summary does not end with the start (children first):\n%s", out)
	}
	out, _, _ = cairnFind(t, v.meta, "--json", "dir1", "-summary", "-type", "f")
	var s daemon.FindSummary
	ls := strings.Split(strings.TrimSpace(out), "\n")
	last := ls[len(ls)-1]
	if err := json.Unmarshal([]byte(last), &s); err != nil || s.Path != "dir1" || s.Entries != 5 || s.Bytes != 1050119 {
		t.Errorf("-summary --json: %q: %+v, %v", last, s, err)
	}
}

// checkFindBadInput: wrong command lines fail with exit status 2 and say
// why, mounted or not, and print nothing.
func checkFindBadInput(t *testing.T, metaURL string) {
	t.Helper()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-bogus"}, `unknown predicate "-bogus"`},
		{[]string{"/", "-size", "12Q"}, `-size "12Q"`},
		{[]string{"-size"}, "-size needs an argument"},
		{[]string{"-name", "a", "-o", "-name", "b"}, "-o is not supported"},
		{[]string{"(", "-name", "a", ")"}, "( is not supported"},
		{[]string{"-maxdepth", "x"}, `-maxdepth "x"`},
		{[]string{"-mtime", "soon"}, `-mtime "soon"`},
		{[]string{"-type", "q"}, `-type "q"`},
		{[]string{"-perm", "u+q"}, `-perm "u+q"`},
		{[]string{"-user", "no-such-user-here"}, "no such user"},
		{[]string{"-not"}, "nothing to negate"},
		{[]string{"-snapshot", "nosuch"}, "-snapshot nosuch: no such"},
		{[]string{"-changed-since", "nosuch"}, "-changed-since nosuch: no such"},
		{[]string{"/no/such/dir"}, "/no/such/dir: no such file"},
		{[]string{"dir1", "nope"}, "nope: no such file"},
		{[]string{"dir1/.hidden/"}, "not a directory"},
		{[]string{"-newer", "/nope"}, "-newer /nope: no such"},
	} {
		out, stderr, code := cairnFind(t, metaURL, c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) || out != "" || strings.Contains(stderr, "panic") {
			t.Errorf("find %q: exit %d, output %q, stderr %q; want exit 2 and %q", c.args, code, out, stderr, c.want)
		}
	}
	_, stderr, code := cairnFind(t, "pebble:///no/such/volume")
	if code != 2 || !strings.Contains(stderr, "no Cairn volume") {
		t.Errorf("find on no volume: exit %d, %q", code, stderr)
	}
}

// checkFindSnapshots: -snapshot finds what the snapshot's directory on
// the mount shows; -changed-since finds what changed since. It returns
// searches with their answers, to ask again unmounted.
func checkFindSnapshots(t *testing.T, v *e2eVolume) ([]findCase, map[string][]string) {
	t.Helper()
	cairn(t, "snapshot", "create", v.meta, "s1")
	sh(t, v.mnt, `
printf new > dir1/new.txt
rm dir1/B.TXT
mv dir1/a.txt dir1/renamed.txt
chmod 600 perm/p644
printf more >> links/target
ln links/target links/hard3
touch -d '2001-01-01' times/d0
mkdir -p fresh/sub
`)
	var cases []findCase
	want := map[string][]string{}
	// Searches of snapshots, and of the last state, are asked again.
	check := func(c findCase, w []string, what string) {
		t.Helper()
		if slices.Contains(c.expr, "-snapshot") || slices.Contains(c.expr, "s2") {
			cases = append(cases, c)
			want[c.String()] = w
		}
		if d := diffPaths(w, cairnFindPaths(t, v.meta, c)); d != "" {
			t.Errorf("find %s differs from %s:\n%s", c, what, d)
		}
	}
	snapDir := filepath.Join(v.mnt, ".snapshots", "s1")
	for _, c := range []findCase{
		{[]string{"."}, nil},
		{[]string{"."}, []string{"-type", "f", "-size", "+0"}},
		{[]string{"."}, []string{"-name", "*.txt", "-mtime", "-1"}},
		{[]string{"dir1"}, []string{"-perm", "644"}},
		{[]string{"perm"}, []string{"-perm", "-u+r"}},
	} {
		check(findCase{c.paths, append([]string{"-snapshot", "s1"}, c.expr...)}, gnuFind(t, snapDir, c), "GNU find in "+snapDir)
		check(c, gnuFind(t, v.mnt, c), "GNU find")
	}
	check(findCase{[]string{"."}, []string{"-changed-since", "s1"}},
		[]string{".", "./dir1", "./dir1/new.txt", "./dir1/renamed.txt", "./fresh", "./fresh/sub",
			"./links", "./links/hard1", "./links/hard2", "./links/hard3", "./links/target", "./perm/p644", "./times/d0"},
		"the changes")
	check(findCase{[]string{"dir1"}, []string{"-not", "-changed-since", "s1", "-type", "f"}},
		[]string{"dir1/.hidden", "dir1/sub/c.log", "dir1/sub/deep/x.bin"}, "the files left alone")
	cairn(t, "snapshot", "create", v.meta, "s2")
	sh(t, v.mnt, "touch dir1/after-s2 && chmod 640 dir1/.hidden")
	check(findCase{[]string{"."}, []string{"-snapshot", "s2", "-changed-since", "s1", "-type", "f"}},
		[]string{"./dir1/new.txt", "./dir1/renamed.txt", "./links/hard1", "./links/hard2", "./links/hard3",
			"./links/target", "./perm/p644", "./times/d0"}, "the changes from s1 to s2")
	check(findCase{[]string{"dir1"}, []string{"-changed-since", "s2"}},
		[]string{"dir1", "dir1/.hidden", "dir1/after-s2"}, "the changes since s2")
	_, stderr, code := cairnFind(t, v.meta, "-snapshot", "s1", "-changed-since", "s2")
	if code != 2 || !strings.Contains(stderr, "not older") {
		t.Errorf("-snapshot s1 -changed-since s2: exit %d, %q", code, stderr)
	}
	return cases, want
}

// TestFindCommand: cairn find in this process, on a volume nothing
// mounts: help, a search, and bad input with exit status 2.
func TestFindCommand(t *testing.T) {
	url := "pebble://" + t.TempDir() + "/meta"
	if out, err := run(t, "format", url, "v"); err != nil {
		t.Fatalf("format: %v\n%s", err, out)
	}
	out, err := run(t, "find", "--help")
	if err != nil || !strings.Contains(out, "-changed-since S") || !strings.Contains(out, "there is no -o") {
		t.Fatalf("find --help: %v\n%s", err, out)
	}
	mkdirOffline(t, url, "d")
	if out, err := run(t, "find", url, "-type", "d"); err != nil || out != "/\n/d\n" && out != "/d\n/\n" {
		t.Fatalf("find -type d: %v\n%q", err, out)
	}
	if out, err := run(t, "find", "--json", url, "/d"); err != nil || !strings.Contains(out, `"path":"/d","ino":2,"type":"dir"`) {
		t.Fatalf("find --json before the URL: %v\n%q", err, out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "want META-URL first"},
		{[]string{"-name", "x"}, "want META-URL first"},
		{[]string{url, "-bogus"}, `unknown predicate "-bogus"`},
		{[]string{url, "-size", "1Q"}, `-size "1Q"`},
		{[]string{url, "/d/nope"}, "/d/nope: no such file or directory in the volume"},
		{[]string{url, "-snapshot", "none"}, "-snapshot none: no such snapshot"},
		{[]string{"redis://x", "/"}, `unknown scheme "redis"`},
		{[]string{"pebble://" + t.TempDir() + "/empty"}, "no Cairn volume at"},
	} {
		_, err := run(t, append([]string{"find"}, c.args...)...)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != findBadInput || !strings.Contains(err.Error(), c.want) {
			t.Errorf("find %q: %v, want exit status 2 and %q", c.args, err, c.want)
		}
	}
}
