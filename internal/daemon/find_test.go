package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/meta"
)

// findLocalTree makes files in a local directory for GNU find to judge:
// names for the patterns, sizes around the units, modes, ages around
// the day boundaries (from now).
func findLocalTree(t *testing.T, now time.Time) string {
	t.Helper()
	dir := t.TempDir()
	names := []string{"abc", ".hidden", "a*b", "a[b", "A.TXT", "x-y", "ü-umlaut", "odd\xffbyte", "back\\slash",
		"]x", "-dash", "?q", "UPPER", "tab\tx", "sp ace", "a.txt", "ab", "zz9"}
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []int64{0, 1, 2, 3, 511, 512, 513, 1023, 1024, 1025, 2048, 2049, 1<<20 - 1, 1 << 20, 1<<20 + 1, 1<<30 + 1} {
		p := filepath.Join(dir, "size-"+itoa(s))
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, s); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range []uint32{0o644, 0o600, 0o755, 0o4755, 0o2755, 0o777, 0, 0o4711, 0o1777, 0o640, 0o2070} {
		p := filepath.Join(dir, "mode-"+itoa8(m))
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, os.FileMode(m&0o777)|modeBits(m)); err != nil {
			t.Fatal(err)
		}
	}
	setAges(t, dir, now)
	return dir
}

func itoa(n int64) string   { return strconv.FormatInt(n, 10) }
func itoa8(m uint32) string { return strconv.FormatUint(uint64(m), 8) }
func ftoa(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func modeBits(m uint32) os.FileMode {
	var b os.FileMode
	if m&0o4000 != 0 {
		b |= os.ModeSetuid
	}
	if m&0o2000 != 0 {
		b |= os.ModeSetgid
	}
	if m&0o1000 != 0 {
		b |= os.ModeSticky
	}
	return b
}

// evalFind runs the tests of cairn find's expr on the files of dir, as
// lstat describes them, and returns the names that pass.
// setAges makes (or makes again) the files whose ages are half a second
// from GNU find's boundaries, as of now: n whole days, and n days and one
// second (the -N boundary).
func setAges(t *testing.T, dir string, now time.Time) {
	t.Helper()
	for _, age := range []float64{0.5, 86399.5, 86400.5, 86401.5, 172799.5, 172800.5, 172801.5, 259200.5, 259201.5, -3600} {
		p := filepath.Join(dir, "age-"+strings.ReplaceAll(ftoa(age), ".", "_"))
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		at := now.Add(-time.Duration(age * float64(time.Second)))
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
}

func evalFind(t *testing.T, dir string, expr []string, now time.Time) []string {
	t.Helper()
	spec, err := ParseFind(append([]string{"."}, expr...), now)
	if err != nil {
		t.Fatalf("%q: %v", expr, err)
	}
	c := &findCall{spec: spec, start: ".", prefix: "./", startBase: "."}
	for _, p := range spec.preds {
		if p.entry != nil {
			c.entry = append(c.entry, p)
		} else {
			c.attr = append(c.attr, p)
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	d := &meta.FindDir{}
	var out []string
	for _, de := range ents {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(dir, de.Name()), &st); err != nil {
			t.Fatal(err)
		}
		e := meta.FindEntry{Name: de.Name(), Ino: base.Ino(st.Ino), Type: base.TypeFromMode(st.Mode), Depth: 1,
			Attr: base.Attr{Type: base.TypeFromMode(st.Mode), Mode: st.Mode & 0o7777, Uid: st.Uid, Gid: st.Gid,
				Nlink: uint32(st.Nlink), Length: uint64(st.Size), Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano()}}
		if c.keep(d, &e) && c.match(d, &e) {
			out = append(out, "./"+de.Name())
		}
	}
	sort.Strings(out)
	return out
}

// TestFindTestsLikeGNU: the tests of cairn find pass the same files as
// GNU find's on a local directory (names, sizes, modes, ages at the
// boundaries of days, negation).
func TestFindTestsLikeGNU(t *testing.T) {
	if _, err := exec.LookPath("find"); err != nil {
		t.Skip("no find")
	}
	dir := findLocalTree(t, time.Now())
	now := time.Now() // after every file was made, as GNU find's start
	var exprs [][]string
	for _, p := range []string{"*", "?", "a*", "*.txt", "*.[tT][xX][tT]", "[!a]*", "[^a]*", "[]x]*", "a\\*b", "a[b",
		"[a-c]?", "*\\\\*", "[[:upper:]]*", "[[:punct:]]*", "\\?*", "*[", "[!]]*", "???", "[x-]*", "[-x]*", "*[[:digit:]]",
		"*b", "a*b*", "*-*-*", ".*", "*[[:space:]]*", "odd?byte", "?-umlaut", "*\xff*", "[[:alpha:]][[:alpha:]]"} {
		exprs = append(exprs, []string{"-name", p}, []string{"-iname", p})
	}
	for _, s := range []string{"0", "-1", "1", "+1", "2", "3", "512c", "-512c", "+512c", "1k", "-1k", "+1k", "2k", "+2k",
		"1M", "-1M", "+1M", "2M", "1G", "+1G", "2G", "1023w", "1024w", "-2b", "4", "5"} {
		exprs = append(exprs, []string{"-size", s})
	}
	for _, m := range []string{"644", "-644", "/644", "-u+x", "/o+w", "-4000", "/6000", "1777", "-g=w", "/u=x,g=x",
		"u=rw,go=r", "/0", "-0", "000", "/a+X", "-a+X", "-u=s", "/g+s", "+t", "-o+t", "u=rwx,g=rx,o=rx", "a=,u+w"} {
		exprs = append(exprs, []string{"-perm", m})
	}
	for _, d := range []string{"0", "1", "2", "3", "+0", "+1", "+2", "-1", "-2", "-3", "-0", "1.5", "+0.5", "-2.5"} {
		exprs = append(exprs, []string{"-mtime", d}, []string{"-ctime", d})
	}
	exprs = append(exprs, []string{"-not", "-name", "*a*", "-not", "-size", "0"}, []string{"!", "-perm", "-u+w", "-mtime", "-3"},
		[]string{"-links", "1"}, []string{"-links", "+1"}, []string{"-uid", "0"}, []string{"-gid", "+0"}, []string{"-type", "f"},
		[]string{"-type", "d"}, []string{"-path", "./a*"}, []string{"-path", "*/*b*"}, []string{"-ipath", "./A*"})
	for _, expr := range exprs {
		if slices.ContainsFunc(expr, func(a string) bool { return a == "-mtime" || a == "-ctime" }) {
			// GNU find judges ages from the moment it starts: make them
			// again from now, so that a slow machine (or the searches
			// before) moves no file across a boundary half a second away.
			setAges(t, dir, time.Now())
			now = time.Now() // after the changes (ctime) the ages set
		}
		args := append([]string{".", "-mindepth", "1"}, expr...)
		cmd := exec.Command("find", append(args, "-print0")...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("GNU find %q: %v\n%s", expr, err, stderr.String())
		}
		var want []string
		if len(out) > 0 {
			want = strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
		}
		sort.Strings(want)
		if got := evalFind(t, dir, expr, now); !slices.Equal(got, want) {
			t.Errorf("%q: cairn %q, GNU %q", expr, got, want)
		}
	}
}

func TestParseFindBadInput(t *testing.T) {
	now := time.Now()
	for _, args := range [][]string{
		{"-bogus"}, {"-name"}, {"-size", "1X"}, {"-size", "+"}, {"-size", "k"}, {"-mtime", "x"}, {"-mtime", "NaN"},
		{"-mtime", "1e300"}, {"-type", "x"}, {"-type", "f,"}, {"-perm", "999"}, {"-perm", "u+z"}, {"-perm", "-"},
		{"-perm", "u"}, {"-links", "a"}, {"-uid", "-x"}, {"-maxdepth", "-1"}, {"-mindepth", "b"}, {"-o"}, {"-or"},
		{"("}, {","}, {"-not"}, {"-not", "-maxdepth", "1"}, {"-print0", "--json"}, {"-summary", "-print0"},
		{"-snapshot", ""}, {"-snapshot", "a", "-changed-since", "a"}, {"-newer", "a", "-newer", "b"},
		{"-user", "no-such-user-anywhere"}, {"-group", "no-such-group-anywhere"}, {"", "-name", "x"},
		{"-name", "x", "/late/path"},
	} {
		_, err := ParseFind(args, now)
		if !errors.Is(err, ErrBadInput) {
			t.Errorf("ParseFind(%q) = %v, want bad input", args, err)
		}
	}
	s, err := ParseFind([]string{"/a", "b/", "-maxdepth", "2", "-mindepth", "1", "-a", "-print", "-snapshot", "x", "--json"}, now)
	if err != nil || !slices.Equal(s.Paths, []string{"/a", "b/"}) || s.MaxDepth != 2 || s.MinDepth != 1 || s.Snapshot != "x" || !s.JSON {
		t.Errorf("ParseFind: %+v, %v", s, err)
	}
	if s, err := ParseFind(nil, now); err != nil || !slices.Equal(s.Paths, []string{"/"}) || s.MaxDepth != -1 {
		t.Errorf("ParseFind(nil): %+v, %v", s, err)
	}
}

// TestFindControlSocket: a find asked through a mount process's socket
// prints what it finds, and bad input comes back as bad input.
func TestFindControlSocket(t *testing.T) {
	vol, dir := newVolume(t, "ctl")
	for _, n := range []string{"a", "b\xff", "c\nd"} {
		if _, _, err := vol.Meta.Mknod(t.Context(), base.RootCaller, base.RootIno, n, base.TypeFile, 0o644, 0, 0, ""); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := ServeControlAt(dir+"/f.sock", vol, Holder{Pid: 1}, RunAdmin)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var out bytes.Buffer
	if err := CallSocket(dir+"/f.sock", FindRequest([]string{"/", "-type", "f", "-print0"}, time.Now()), &out); err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSuffix(out.String(), "\x00"), "\x00")
	sort.Strings(got)
	if want := []string{"/a", "/b\xff", "/c\nd"}; !slices.Equal(got, want) {
		t.Errorf("find -print0 over the socket: %q, want %q", got, want)
	}
	// -summary's progress (a terminal shows it): every entry and
	// directory searched.
	spec, err := ParseFind([]string{"-summary"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	spec.Progress = new(FindProgress)
	if err := RunFind(t.Context(), vol.Meta, spec, io.Discard); err != nil {
		t.Fatal(err)
	}
	if e, d := spec.Progress.Entries.Load(), spec.Progress.Dirs.Load(); e != 4 || d != 1 { // the root and its three files
		t.Errorf("find -summary progress: %d entries in %d directories, want 4 in 1", e, d)
	}
	for _, args := range [][]string{{"-size", "1X"}, {"/nope"}, {"-snapshot", "none"}} {
		err := CallSocket(dir+"/f.sock", FindRequest(args, time.Now()), &out)
		if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "find: ") {
			t.Errorf("find %q over the socket: %v, want bad input", args, err)
		}
	}
}

// TestFindRecordJSON: --json's hand-made lines decode as encoding/json's
// do, whatever the path holds.
func TestFindRecordJSON(t *testing.T) {
	for _, p := range []string{"/plain", `/q"uote\back`, "/ctl\x00\x01\n\t\x1f", "/odd\xff\xfe", "/ü\u2028\u2029 <&>", ""} {
		r := FindRecord{Path: p, Ino: 1 << 60, Type: "file", Size: 1<<64 - 1, Mode: 0o4755, Uid: 1<<32 - 1, Gid: 7,
			Mtime: time.Unix(1700000000, 120).UTC(), Nlink: 3}
		if !utf8.ValidString(p) {
			r.PathBase64 = "b2Rk/w=="
		}
		line := appendFindRecord(nil, r)
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var got, exp FindRecord
		if err := json.Unmarshal(line, &got); err != nil || !bytes.HasSuffix(line, []byte("}\n")) {
			t.Fatalf("%q: %s: %v", p, line, err)
		}
		if err := json.Unmarshal(want, &exp); err != nil {
			t.Fatal(err)
		}
		if got != exp {
			t.Errorf("%q: decoded %+v, encoding/json's %+v", p, got, exp)
		}
		if !strings.ContainsAny(p, "<&>\u2028\u2029") && string(line) != string(want)+"\n" {
			t.Errorf("%q:\n%s\nencoding/json:\n%s", p, line, want)
		}
	}
}
