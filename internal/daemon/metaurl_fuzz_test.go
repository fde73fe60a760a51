package daemon

import (
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/internal/object"
)

// FuzzParseMetaURL: ParseMetaURL never panics, accepts only what it
// documents, and never puts a URL's password in its errors or in
// Display (they go to logs and terminals).
func FuzzParseMetaURL(f *testing.F) {
	for _, s := range []string{
		"pebble:///var/lib/cairn/meta", "pebble://host/x", "pebble://u:secret1@host/x",
		"postgres://cairn:s3cret@db1:5432/vol1?sslmode=disable", "postgres://cairn:s3cret@db1:bad/vol1",
		"postgres://cairn:s3cret@db1/", "postgresql://u:pw%41x@h/db", "postgres://u:pass%zzword@h/db",
		"mysql://root:hunter22@h/db", "/plain/path", "::", "",
		"postgres://cairn@db1/vol1?password=s3cret", "postgres://cairn@db1/vol1?sslmode=disable&password=s3cret%21",
		"postgres://u:pa?ss@h/db", "postgres://db1?password=s3cret",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		loc, err := ParseMetaURL(s)
		if err == nil {
			switch loc.Scheme {
			case "pebble":
				if !filepath.IsAbs(loc.Path) {
					t.Fatalf("%q: accepted a relative pebble path %q", s, loc.Path)
				}
			case "postgres":
			default:
				t.Fatalf("%q: accepted scheme %q", s, loc.Scheme)
			}
		}
		// The password as url.Parse decodes it, and as written (also
		// where url.Parse refuses the URL).
		var pws []string
		if u, perr := url.Parse(s); perr == nil {
			if pw, ok := u.User.Password(); ok {
				pws = append(pws, pw)
			}
			for k, vs := range u.Query() {
				if k == "password" || k == "sslpassword" {
					pws = append(pws, vs...)
				}
			}
		}
		if i, j, ok := object.URLPassword(s); ok {
			pws = append(pws, s[i:j])
		}
		for _, pw := range pws {
			if len(pw) < 4 || strings.Count(s, pw) > 1 {
				continue // too short, or also written elsewhere in s
			}
			if err != nil && strings.Contains(err.Error(), pw) {
				t.Fatalf("%q: the error shows the password: %v", s, err)
			}
			if err == nil && strings.Contains(loc.Display(), pw) {
				t.Fatalf("%q: Display shows the password: %s", s, loc.Display())
			}
		}
	})
}
