package daemon

import (
	"unicode"
	"unicode/utf8"
)

// Shell patterns as find(1)'s -name, -iname and -path match them:
// fnmatch(3) without FNM_PATHNAME ('*' and '?' match '/' too) and without
// FNM_PERIOD (a leading '.' needs no explicit match), with backslash
// escapes. Names are bytes: a byte that is not part of valid UTF-8 is
// one character of its own, equal only to itself.

// invalidBase is where the characters that stand for invalid bytes start:
// past every rune.
const invalidBase = unicode.MaxRune + 1

// nextChar decodes the character at the start of s and its width.
func nextChar(s string) (rune, int) {
	r, n := utf8.DecodeRuneInString(s)
	if r == utf8.RuneError && n == 1 {
		return invalidBase + rune(s[0]), 1
	}
	return r, n
}

// globMatch reports whether name matches pattern; fold ignores case.
func globMatch(pattern, name string, fold bool) bool {
	// The classic backtracking match: on a mismatch, retry from the last
	// '*' with one more character consumed by it.
	px, nx := 0, 0
	starPx, starNx := -1, -1
	for px < len(pattern) || nx < len(name) {
		if px < len(pattern) {
			switch c := pattern[px]; c {
			case '*':
				starPx, starNx = px, nx
				px++
				continue
			case '?':
				if nx < len(name) {
					_, n := nextChar(name[nx:])
					px++
					nx += n
					continue
				}
			case '[':
				if nx < len(name) {
					r, n := nextChar(name[nx:])
					if matched, width, ok := matchBracket(pattern[px:], r, fold); ok {
						if matched {
							px += width
							nx += n
							continue
						}
						break
					}
				}
				// An unterminated '[' is an ordinary character.
				if nx < len(name) && name[nx] == '[' {
					px++
					nx++
					continue
				}
			default:
				pc, pn := nextChar(pattern[px:])
				if c == '\\' && px+1 < len(pattern) {
					pc, pn = nextChar(pattern[px+1:])
					pn++
				}
				if nx < len(name) {
					nc, nn := nextChar(name[nx:])
					if sameChar(pc, nc, fold) {
						px += pn
						nx += nn
						continue
					}
				}
			}
		}
		if starPx < 0 || starNx >= len(name) {
			return false
		}
		_, n := nextChar(name[starNx:])
		starNx += n
		px, nx = starPx+1, starNx
	}
	return true
}

func sameChar(a, b rune, fold bool) bool {
	if a == b {
		return true
	}
	if !fold || a >= invalidBase || b >= invalidBase {
		return false
	}
	return unicode.ToLower(a) == unicode.ToLower(b) || unicode.ToUpper(a) == unicode.ToUpper(b)
}

// matchBracket matches r against the bracket expression at the start of
// p ("[...]"). ok is false if p has no closing ']' (then '[' is an
// ordinary character); width is the expression's length.
func matchBracket(p string, r rune, fold bool) (matched bool, width int, ok bool) {
	i := 1
	negate := false
	if i < len(p) && (p[i] == '!' || p[i] == '^') {
		negate = true
		i++
	}
	first := true
	for {
		if i >= len(p) {
			return false, 0, false
		}
		if p[i] == ']' && !first {
			i++
			break
		}
		first = false
		if p[i] == '[' && i+1 < len(p) && p[i+1] == ':' {
			if end := indexFrom(p, ":]", i+2); end >= 0 {
				if inClass(p[i+2:end], r) {
					matched = true
				}
				i = end + 2
				continue
			}
		}
		lo, n := bracketChar(p[i:])
		i += n
		hi := lo
		if i+1 < len(p) && p[i] == '-' && p[i+1] != ']' {
			hi, n = bracketChar(p[i+1:])
			i += 1 + n
		}
		if inRange(r, lo, hi, fold) {
			matched = true
		}
	}
	return matched != negate, i, true
}

// bracketChar decodes one character of a bracket expression, which a
// backslash may quote.
func bracketChar(p string) (rune, int) {
	if p[0] == '\\' && len(p) > 1 {
		r, n := nextChar(p[1:])
		return r, n + 1
	}
	return nextChar(p)
}

func inRange(r, lo, hi rune, fold bool) bool {
	if lo <= r && r <= hi {
		return true
	}
	if !fold || r >= invalidBase {
		return false
	}
	for _, c := range []rune{unicode.ToLower(r), unicode.ToUpper(r)} {
		if lo <= c && c <= hi {
			return true
		}
	}
	return false
}

func indexFrom(s, sub string, from int) int {
	for i := from; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

// inClass reports whether r is in the POSIX character class name.
func inClass(name string, r rune) bool {
	if r >= invalidBase {
		return false
	}
	switch name {
	case "alpha":
		return unicode.IsLetter(r)
	case "digit":
		return r >= '0' && r <= '9'
	case "alnum":
		return unicode.IsLetter(r) || unicode.IsDigit(r)
	case "upper":
		return unicode.IsUpper(r)
	case "lower":
		return unicode.IsLower(r)
	case "space":
		return unicode.IsSpace(r)
	case "blank":
		return r == ' ' || r == '\t'
	case "punct":
		return unicode.IsPunct(r) || unicode.IsSymbol(r)
	case "print":
		return unicode.IsPrint(r)
	case "graph":
		return unicode.IsGraphic(r) && !unicode.IsSpace(r)
	case "cntrl":
		return unicode.IsControl(r)
	case "xdigit":
		return r >= '0' && r <= '9' || r >= 'a' && r <= 'f' || r >= 'A' && r <= 'F'
	}
	return false
}
