package object

// Store URLs in messages: data URLs (and, through daemon, metadata URLs)
// may carry a password, which no error or log line may show. Here, in the
// lowest layer that store backends may import, so that they can use it.

import (
	"errors"
	"net/url"
	"strings"
)

// URLPassword finds the password written in a URL, also in one that
// net/url refuses: the text between the first ':' of the userinfo and its
// '@' (the last one before the path, query or fragment), at s[start:end].
func URLPassword(s string) (start, end int, ok bool) {
	i := strings.Index(s, "://")
	if i < 0 {
		return 0, 0, false
	}
	auth := s[i+3:]
	if j := strings.IndexAny(auth, "/?#"); j >= 0 {
		auth = auth[:j]
	}
	at := strings.LastIndex(auth, "@")
	if at < 0 {
		return 0, 0, false
	}
	colon := strings.IndexByte(auth[:at], ':')
	if colon < 0 {
		return 0, 0, false
	}
	return i + 3 + colon + 1, i + 3 + at, true
}

// RedactURL hides the password of a URL written for a message or a log
// (URLPassword) behind "xxxxx", as url.URL.Redacted writes it.
func RedactURL(s string) string {
	start, end, ok := URLPassword(s)
	if !ok {
		return s
	}
	return s[:start] + "xxxxx" + s[end:]
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
