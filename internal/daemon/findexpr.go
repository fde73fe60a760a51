package daemon

import (
	"errors"
	"fmt"
	"math"
	"os/user"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/meta"
)

// ErrBadInput is wrapped by the errors of an admin request that is wrong
// in itself (a bad argument, a path or snapshot that does not exist), as
// opposed to a failure to carry it out; cairn exits with status 2 for
// them. It crosses the control socket.
var ErrBadInput = errors.New("bad input")

// badInput returns an error wrapping ErrBadInput.
func badInput(format string, args ...any) error {
	return &inputError{msg: fmt.Sprintf(format, args...)}
}

type inputError struct{ msg string }

func (e *inputError) Error() string { return e.msg }
func (e *inputError) Unwrap() error { return ErrBadInput }

// FindProgress is what a running find has searched: entries and
// directories, safe to read while it runs.
type FindProgress struct {
	Entries, Dirs atomic.Int64
}

// FindSpec is a parsed cairn find command line (after the META-URL).
type FindSpec struct {
	Paths        []string // default "/"
	MaxDepth     int      // -1: none
	MinDepth     int
	Snapshot     string
	ChangedSince string
	Print0       bool
	JSON         bool
	Summary      bool
	// Progress, if set, counts the entries and directories searched so
	// far (a terminal shows them).
	Progress *FindProgress

	preds []findPred // all must hold
	now   int64      // ns; the reference of -mtime and -ctime
	newer string     // -newer's file, resolved when the search starts
}

// findTest tests entry e of directory d (nil for a start path).
type findTest func(c *findCall, d *meta.FindDir, e *meta.FindEntry) bool

// findPred is one test of the expression.
type findPred struct {
	name string // as given, for messages
	neg  bool
	// entry tests what the directory entry tells (name, type, inode, the
	// path); attr tests the attribute (and inline data). Exactly one is
	// set.
	entry findTest
	attr  findTest
	// inline: attr needs FindEntry.Inline.
	inline bool
}

// findUsageNote ends every message about the expression.
const findUsageNote = "(see cairn find --help)"

// ParseFind parses the arguments of cairn find that follow the META-URL:
// start paths, then predicates and options. now is the time -mtime and
// -ctime count from. Every error wraps ErrBadInput.
func ParseFind(args []string, now time.Time) (*FindSpec, error) {
	s := &FindSpec{MaxDepth: -1, now: now.UnixNano()}
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if a == "!" || a == "(" || a == ")" || a == "," || strings.HasPrefix(a, "-") && len(a) > 1 {
			break
		}
		if a == "" {
			return nil, badInput("find: an empty path: want a path in the volume, like / or /home")
		}
		s.Paths = append(s.Paths, a)
	}
	if len(s.Paths) == 0 {
		s.Paths = []string{"/"}
	}
	neg := false
	for ; i < len(args); i++ {
		a := args[i]
		arg := func() (string, error) {
			if i+1 >= len(args) {
				return "", badInput("find: %s needs an argument %s", a, findUsageNote)
			}
			i++
			return args[i], nil
		}
		if neg && isFindOption(a) {
			return nil, badInput("find: %s after -not: only tests can be negated %s", a, findUsageNote)
		}
		var p findPred
		switch a {
		case "!", "-not":
			neg = !neg
			continue
		case "-a", "-and", "-print":
			continue // tests are ANDed; printing is what find does
		case "-o", "-or", "(", ")", ",":
			return nil, badInput("find: %s is not supported: every test given must hold (AND); there is no -o, parentheses or comma %s", a, findUsageNote)
		case "-print0":
			s.Print0 = true
			continue
		case "--json", "-json":
			s.JSON = true
			continue
		case "-summary":
			s.Summary = true
			continue
		case "-maxdepth", "-mindepth":
			v, err := arg()
			if err != nil {
				return nil, err
			}
			n, perr := strconv.Atoi(v)
			if perr != nil || n < 0 {
				return nil, badInput("find: %s %q: want a number of levels, 0 or more", a, v)
			}
			if a == "-maxdepth" {
				s.MaxDepth = n
			} else {
				s.MinDepth = n
			}
			continue
		case "-snapshot", "-changed-since":
			v, err := arg()
			if err != nil {
				return nil, err
			}
			if v == "" {
				return nil, badInput("find: %s needs a snapshot name", a)
			}
			if a == "-snapshot" {
				s.Snapshot = v
				continue
			}
			s.ChangedSince = v
			p = findPred{entry: func(_ *findCall, _ *meta.FindDir, e *meta.FindEntry) bool { return e.Changed }}
		case "-newer":
			v, err := arg()
			if err != nil {
				return nil, err
			}
			if s.newer != "" && s.newer != v {
				return nil, badInput("find: -newer is given twice, with different files")
			}
			s.newer = v
			p = findPred{attr: func(c *findCall, _ *meta.FindDir, e *meta.FindEntry) bool { return e.Attr.Mtime > c.newerThan }}
		case "-inline":
			p = findPred{inline: true, attr: func(_ *findCall, _ *meta.FindDir, e *meta.FindEntry) bool { return e.Inline }}
		default:
			if !strings.HasPrefix(a, "-") {
				return nil, badInput("find: %q: paths must come before the tests and options %s", a, findUsageNote)
			}
			v, err := arg()
			if err != nil && isFindTest(a) {
				return nil, err
			}
			if p, err = parseFindTest(a, v, s.now); err != nil {
				return nil, err
			}
		}
		p.name, p.neg = a, neg
		neg = false
		s.preds = append(s.preds, p)
	}
	if neg {
		return nil, badInput("find: -not (or !) at the end, with nothing to negate %s", findUsageNote)
	}
	if s.Print0 && s.JSON || s.Summary && s.Print0 {
		return nil, badInput("find: choose one output: -print0, --json, or -summary (with --json for JSON)")
	}
	if s.ChangedSince != "" && s.ChangedSince == s.Snapshot {
		return nil, badInput("find: -changed-since %q is the snapshot searched: want an older one", s.ChangedSince)
	}
	return s, nil
}

// isFindOption reports whether a is one of the options, which are not
// tests and cannot be negated.
func isFindOption(a string) bool {
	switch a {
	case "-maxdepth", "-mindepth", "-snapshot", "-print0", "--json", "-json", "-summary", "-print", "-a", "-and":
		return true
	}
	return false
}

func isFindTest(a string) bool {
	switch a {
	case "-name", "-iname", "-path", "-ipath", "-type", "-size", "-mtime", "-ctime", "-user", "-group",
		"-uid", "-gid", "-perm", "-links", "-inum":
		return true
	}
	return false
}

// parseFindTest parses one test that takes an argument.
func parseFindTest(a, v string, now int64) (findPred, error) {
	switch a {
	case "-name", "-iname":
		fold := a == "-iname"
		return findPred{entry: func(c *findCall, d *meta.FindDir, e *meta.FindEntry) bool {
			return globMatch(v, c.baseName(d, e), fold)
		}}, nil
	case "-path", "-ipath":
		fold := a == "-ipath"
		return findPred{entry: func(c *findCall, d *meta.FindDir, e *meta.FindEntry) bool {
			return globMatch(v, c.path(d, e), fold)
		}}, nil
	case "-type":
		var types [8]bool
		for _, l := range strings.Split(v, ",") {
			t, ok := findTypes[l]
			if !ok {
				return findPred{}, badInput("find: -type %q: want f, d, l, p, s, c or b (or several, comma-separated)", v)
			}
			types[t] = true
		}
		return findPred{entry: func(_ *findCall, _ *meta.FindDir, e *meta.FindEntry) bool { return types[e.Type] }}, nil
	case "-inum":
		cmp, err := parseFindNumber(a, v)
		if err != nil {
			return findPred{}, err
		}
		return findPred{entry: func(_ *findCall, _ *meta.FindDir, e *meta.FindEntry) bool { return cmp.holds(uint64(e.Ino)) }}, nil
	case "-size":
		return parseFindSize(v)
	case "-mtime", "-ctime":
		return parseFindTime(a, v, now)
	case "-uid", "-gid", "-links":
		cmp, err := parseFindNumber(a, v)
		if err != nil {
			return findPred{}, err
		}
		field := map[string]func(*base.Attr) uint32{
			"-uid":   func(a *base.Attr) uint32 { return a.Uid },
			"-gid":   func(a *base.Attr) uint32 { return a.Gid },
			"-links": func(a *base.Attr) uint32 { return a.Nlink },
		}[a]
		return findPred{attr: func(_ *findCall, _ *meta.FindDir, e *meta.FindEntry) bool { return cmp.holds(uint64(field(&e.Attr))) }}, nil
	case "-user":
		uid, err := lookupID(v, "user")
		if err != nil {
			return findPred{}, err
		}
		return findPred{attr: func(_ *findCall, _ *meta.FindDir, e *meta.FindEntry) bool { return e.Attr.Uid == uid }}, nil
	case "-group":
		gid, err := lookupID(v, "group")
		if err != nil {
			return findPred{}, err
		}
		return findPred{attr: func(_ *findCall, _ *meta.FindDir, e *meta.FindEntry) bool { return e.Attr.Gid == gid }}, nil
	case "-perm":
		return parseFindPerm(v)
	}
	return findPred{}, badInput("find: unknown predicate %q %s", a, findUsageNote)
}

var findTypes = map[string]base.FileType{
	"f": base.TypeFile, "d": base.TypeDir, "l": base.TypeSymlink, "p": base.TypeFIFO,
	"s": base.TypeSocket, "c": base.TypeChar, "b": base.TypeBlock,
}

// findNumber is a numeric argument: N exactly, +N more than N, -N less.
type findNumber struct {
	sign int // -1, 0, +1
	n    uint64
}

func (c findNumber) holds(v uint64) bool {
	switch c.sign {
	case 1:
		return v > c.n
	case -1:
		return v < c.n
	}
	return v == c.n
}

func splitSign(v string) (int, string) {
	switch {
	case strings.HasPrefix(v, "+"):
		return 1, v[1:]
	case strings.HasPrefix(v, "-"):
		return -1, v[1:]
	}
	return 0, v
}

func parseFindNumber(a, v string) (findNumber, error) {
	sign, digits := splitSign(v)
	n, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return findNumber{}, badInput("find: %s %q: want a number, with + for more than it or - for less", a, v)
	}
	return findNumber{sign, n}, nil
}

// parseFindSize parses -size's [+-]N[cwbkMG] as GNU find does: a size in
// units, rounded up (a 1-byte file is 1k, and -size -1M finds only empty
// files); 512-byte blocks when no unit is given.
func parseFindSize(v string) (findPred, error) {
	sign, rest := splitSign(v)
	unit := uint64(512)
	if rest != "" {
		if u, ok := map[byte]uint64{'c': 1, 'w': 2, 'b': 512, 'k': 1 << 10, 'M': 1 << 20, 'G': 1 << 30}[rest[len(rest)-1]]; ok {
			unit, rest = u, rest[:len(rest)-1]
		}
	}
	n, err := strconv.ParseUint(rest, 10, 64)
	if err != nil {
		return findPred{}, badInput("find: -size %q: want [+-]N with an optional unit c (bytes), w (2 bytes), b (512 bytes, the default), k, M or G", v)
	}
	cmp := findNumber{sign, n}
	return findPred{attr: func(_ *findCall, _ *meta.FindDir, e *meta.FindEntry) bool {
		l := e.Attr.Length
		units := l / unit
		if l%unit != 0 {
			units++
		}
		return cmp.holds(units)
	}}, nil
}

const daySeconds = 24 * 60 * 60

// parseFindTime parses -mtime/-ctime N as GNU find does: the file's age
// in whole days, fractions dropped; +N: more than N whole days (at least
// N+1 days), -N: less than N days (up to the second).
func parseFindTime(a, v string, now int64) (findPred, error) {
	sign, rest := splitSign(v)
	days, err := strconv.ParseFloat(rest, 64)
	if err != nil || math.IsNaN(days) || math.IsInf(days, 0) || days > 1e6 {
		return findPred{}, badInput("find: %s %q: want a number of days, with + for more or - for less", a, v)
	}
	field := func(a *base.Attr) int64 { return a.Mtime }
	if a == "-ctime" {
		field = func(a *base.Attr) int64 { return a.Ctime }
	}
	const day = int64(daySeconds * time.Second)
	off := int64(days * float64(day))
	var test func(t int64) bool
	switch sign {
	case 1:
		ref := now - day - off
		test = func(t int64) bool { return t < ref }
	case -1:
		ref := now - int64(time.Second) - off
		test = func(t int64) bool { return t > ref }
	default:
		ref := now - day - off
		test = func(t int64) bool { return t > ref && t <= ref+day }
	}
	return findPred{attr: func(_ *findCall, _ *meta.FindDir, e *meta.FindEntry) bool { return test(field(&e.Attr)) }}, nil
}

// lookupID resolves a user or group name with this host's databases; a
// number that names none is taken as the id.
func lookupID(name, kind string) (uint32, error) {
	var id string
	var err error
	if kind == "user" {
		var u *user.User
		if u, err = user.Lookup(name); err == nil {
			id = u.Uid
		}
	} else {
		var g *user.Group
		if g, err = user.LookupGroup(name); err == nil {
			id = g.Gid
		}
	}
	if err != nil {
		id = name
	}
	n, perr := strconv.ParseUint(id, 10, 32)
	if perr != nil {
		return 0, badInput("find: -%s %q: no such %s on this host (give a number to search by id)", kind, name, kind)
	}
	return uint32(n), nil
}

// Permission bits, as in chmod(1).
const (
	permSetuid = 0o4000
	permSetgid = 0o2000
	permSticky = 0o1000
)

// parseFindPerm parses -perm MODE (exactly these bits), -MODE (at least
// these), /MODE (any of these; none given: any file), MODE octal or
// symbolic as chmod's, applied to no bits.
func parseFindPerm(v string) (findPred, error) {
	kind, m := byte(0), v
	if strings.HasPrefix(v, "-") || strings.HasPrefix(v, "/") {
		kind, m = v[0], v[1:]
	}
	var file, dir uint32
	if n, err := strconv.ParseUint(m, 8, 32); err == nil && n <= 0o7777 {
		file, dir = uint32(n), uint32(n)
	} else {
		var ferr, derr error
		file, ferr = symbolicMode(m, false)
		dir, derr = symbolicMode(m, true)
		if ferr != nil || derr != nil {
			return findPred{}, badInput("find: -perm %q: want an octal mode like 644 or a symbolic one like u+w,g=r, prefixed with - (all of these bits) or / (any of them)", v)
		}
	}
	return findPred{attr: func(_ *findCall, _ *meta.FindDir, e *meta.FindEntry) bool {
		mode, want := e.Attr.Mode&0o7777, file
		if e.Type == base.TypeDir {
			want = dir
		}
		switch kind {
		case '-':
			return mode&want == want
		case '/':
			return want == 0 || mode&want != 0
		}
		return mode == want
	}}, nil
}

// symbolicMode applies chmod's symbolic mode s ("u+rwx,go=r") to no bits,
// for a directory or not (X).
func symbolicMode(s string, isDir bool) (uint32, error) {
	var mode uint32
	bad := fmt.Errorf("bad symbolic mode %q", s)
	for _, clause := range strings.Split(s, ",") {
		i := 0
		var who uint32
		for ; i < len(clause) && strings.IndexByte("ugoa", clause[i]) >= 0; i++ {
			who |= map[byte]uint32{'u': 0o4700, 'g': 0o2070, 'o': 0o1007, 'a': 0o7777}[clause[i]]
		}
		if who == 0 {
			who = 0o7777
		}
		if i == len(clause) {
			return 0, bad
		}
		for i < len(clause) {
			op := clause[i]
			if op != '+' && op != '-' && op != '=' {
				return 0, bad
			}
			i++
			var bits uint32
			for ; i < len(clause) && strings.IndexByte("+-=", clause[i]) < 0; i++ {
				switch clause[i] {
				case 'r':
					bits |= 0o444
				case 'w':
					bits |= 0o222
				case 'x':
					bits |= 0o111
				case 'X':
					if isDir || mode&0o111 != 0 {
						bits |= 0o111
					}
				case 's':
					bits |= permSetuid | permSetgid
				case 't':
					bits |= permSticky
				default:
					return 0, bad
				}
			}
			bits &= who
			switch op {
			case '+':
				mode |= bits
			case '-':
				mode &^= bits
			case '=':
				mode = mode&^who | bits
			}
		}
	}
	return mode, nil
}
