package object

// Store URLs in messages: data URLs (and, through daemon, metadata URLs)
// may carry a password, which no error or log line may show. Here, in the
// lowest layer that store backends may import, so that they can use it.

import (
	"errors"
	"net/url"
	"slices"
	"strings"
)

// URLPassword finds the password written in the userinfo of a URL, also in
// one that net/url refuses: the text between the first ':' of the userinfo
// and its '@' (the last one before the path, query or fragment), at
// s[start:end]. In a PostgreSQL URL (postgres://, postgresql://) the
// userinfo ends, as libpq and pgx read it, at an '@' anywhere before the
// first '/': a '?' or '#' before it belongs to the password.
func URLPassword(s string) (start, end int, ok bool) {
	auth, at, ok := userinfo(s)
	if !ok {
		return 0, 0, false
	}
	colon := strings.IndexByte(s[auth:at], ':')
	if colon < 0 {
		return 0, 0, false
	}
	return auth + colon + 1, at, true
}

// userinfo finds the '@' that ends the userinfo of URL s, at s[at], and
// where the authority starts, s[auth:]: after the first "://" (unless a
// query or fragment comes first), or after the "//" of a URL without a
// scheme. ok is false without an '@'; auth is -1 without an authority.
func userinfo(s string) (auth, at int, ok bool) {
	scheme := ""
	if i := strings.Index(s, "://"); i >= 0 && !strings.ContainsAny(s[:i], "?#") {
		scheme, auth = strings.ToLower(s[:i]), i+3
	} else if strings.HasPrefix(s, "//") {
		auth = 2
	} else {
		return -1, 0, false
	}
	stop := "/?#"
	if scheme == "postgres" || scheme == "postgresql" {
		stop = "/"
	}
	a := s[auth:]
	if j := strings.IndexAny(a, stop); j >= 0 {
		a = a[:j]
	}
	k := strings.LastIndex(a, "@")
	if k < 0 {
		return auth, 0, false
	}
	return auth, auth + k, true
}

// secretParams are the query parameters whose value is a secret:
// PostgreSQL's password (postgres://u@host/db?password=…) and the
// password of its client key, sslpassword. They are matched as libpq
// matches them, after decoding percent-escapes (pass%77ord), and also
// regardless of case and of spaces around them.
var secretParams = []string{"password", "sslpassword"}

// URLSecrets finds every secret written in a URL, as non-empty [start,
// end) spans of s in order, apart from one another: the userinfo's password
// (URLPassword) and the values of its password and sslpassword query
// parameters, each whole as written (percent-escapes and all), up to the
// next '&'. Where net/url and libpq would read a malformed URL apart, a
// span covers what either takes for a secret.
func URLSecrets(s string) [][2]int {
	auth, at, hasUser := userinfo(s)
	auth = max(auth, 0) // a query without an authority is one too
	var spans [][2]int
	if start, end, ok := URLPassword(s); ok && start < end {
		spans = append(spans, [2]int{start, end})
	}
	// The query starts at the first '?' for net/url, at the first one
	// after the userinfo for libpq.
	spans = append(spans, querySecrets(s, auth)...)
	if hasUser {
		spans = append(spans, querySecrets(s, at+1)...)
	}
	slices.SortFunc(spans, func(a, b [2]int) int { return a[0] - b[0] })
	var out [][2]int
	for _, sp := range spans {
		if n := len(out); n > 0 && sp[0] <= out[n-1][1] {
			out[n-1][1] = max(out[n-1][1], sp[1])
			continue
		}
		out = append(out, sp)
	}
	return out
}

// querySecrets finds the values of the secret parameters of the query
// that starts at the first '?' of s[from:].
func querySecrets(s string, from int) [][2]int {
	j := strings.IndexByte(s[from:], '?')
	if j < 0 {
		return nil
	}
	var spans [][2]int
	pos := from + j + 1
	for _, pair := range strings.Split(s[pos:], "&") {
		if eq := strings.IndexByte(pair, '='); eq >= 0 {
			key := pair[:eq]
			// A '?' of a host in brackets may have been taken for the
			// query's: the key is what follows the last one.
			if k := strings.LastIndexByte(key, '?'); k >= 0 {
				key = key[k+1:]
			}
			if isSecretParam(key) && eq+1 < len(pair) {
				spans = append(spans, [2]int{pos + eq + 1, pos + len(pair)})
			}
		}
		pos += len(pair) + 1
	}
	return spans
}

func isSecretParam(key string) bool {
	// As written, and as net/url's form decoding reads it ('+' a space).
	k := strings.ReplaceAll(decodeLenient(key), "+", " ")
	k = strings.ToLower(strings.TrimSpace(k))
	return slices.Contains(secretParams, k)
}

// decodeLenient undoes the valid percent-escapes of s and keeps the rest
// as written, as libpq does with a URL's query keys.
func decodeLenient(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// RedactURL hides every secret of a URL written for a message, a log, a
// status line or a mount's source (URLSecrets: the userinfo's password and
// password query parameters) behind "xxxxx", as url.URL.Redacted writes
// it. It is the one redaction of URLs in Cairn: use it wherever a URL is
// shown.
func RedactURL(s string) string {
	spans := URLSecrets(s)
	if len(spans) == 0 {
		return s
	}
	var b strings.Builder
	last := 0
	for _, sp := range spans {
		b.WriteString(s[last:sp[0]])
		b.WriteString("xxxxx")
		last = sp[1]
	}
	b.WriteString(s[last:])
	return b.String()
}

// URLParseReason is the reason of a url.Parse error without the
// *url.Error's copy of the URL, which may hold a password: callers print
// the URL themselves, through RedactURL.
func URLParseReason(err error) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return ue.Err
	}
	return err
}
