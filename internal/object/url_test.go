package object

import (
	"net/url"
	"strings"
	"testing"
)

func TestRedactURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"postgres://cairn:s3cret@db1:5432/vol1?x=1", "postgres://cairn:xxxxx@db1:5432/vol1?x=1"},
		{"postgres://cairn@db1/vol1", "postgres://cairn@db1/vol1"},
		{"postgres://u:pa@ss@h/db", "postgres://u:xxxxx@h/db"},       // '@' in the password
		{"postgres://u:pass%zzword@h/db", "postgres://u:xxxxx@h/db"}, // refused by net/url
		{"s3://bucket/a@b:c", "s3://bucket/a@b:c"},                   // '@' in the path only
		{"pebble:///var/lib/cairn/meta", "pebble:///var/lib/cairn/meta"},
		{"no scheme:pw@x", "no scheme:pw@x"},
		// The password as a query parameter, as libpq and pgx take it.
		{"postgres://u@host/db?password=secret", "postgres://u@host/db?password=xxxxx"},
		{"postgres://u@host/db?sslmode=disable&password=secret&x=1", "postgres://u@host/db?sslmode=disable&password=xxxxx&x=1"},
		{"postgresql://h/db?sslpassword=keypw&password=pw2", "postgresql://h/db?sslpassword=xxxxx&password=xxxxx"},
		{"postgres://h/db?password=se%26cr%3Det", "postgres://h/db?password=xxxxx"}, // escapes in the value
		{"postgres://h/db?pass%77ord=secret", "postgres://h/db?pass%77ord=xxxxx"},   // and in the key
		{"postgres://h/db?PASSWORD=secret", "postgres://h/db?PASSWORD=xxxxx"},
		{"postgres://h/db?password=a?b#c&x=1", "postgres://h/db?password=xxxxx&x=1"}, // '?' and '#' in the value
		{"postgres://h/db?password=", "postgres://h/db?password="},
		{"postgres://h/db?passwords=x&mypassword=y", "postgres://h/db?passwords=x&mypassword=y"},
		{"postgres://u:pw@h/db?password=pw2", "postgres://u:xxxxx@h/db?password=xxxxx"},
		{"postgres://h?password=secret", "postgres://h?password=xxxxx"}, // no path
		// libpq ends the userinfo at an '@' before the first '/' only.
		{"postgres://u:pa?ss@h/db", "postgres://u:xxxxx@h/db"},
		{"postgres://h?password=a@b/db", "postgres://h?password=xxxxx"},
		{"postgres://[::1?x]/db?password=secret", "postgres://[::1?x]/db?password=xxxxx"},
		{"s3://bucket?password=secret", "s3://bucket?password=xxxxx"},
	} {
		if got := RedactURL(c.in); got != c.want {
			t.Errorf("RedactURL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// FuzzRedactURL: whatever net/url takes for a password, in the userinfo
// or in a password query parameter, RedactURL does not show.
func FuzzRedactURL(f *testing.F) {
	for _, s := range []string{
		"postgres://cairn:s3cret@db1:5432/vol1?x=1", "postgres://u@h/db?password=secret",
		"postgres://h/db?a=1&pass%77ord=secret", "postgresql://h/db?sslpassword=keypw",
		"postgres://u:pa?ss@h/db", "postgres://h?password=a@b/db", "s3://k:secretpw@bucket",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		last := 0
		for _, sp := range URLSecrets(s) {
			if sp[0] < last || sp[1] > len(s) || sp[0] >= sp[1] {
				t.Fatalf("URLSecrets(%q): span %v out of order or empty", s, sp)
			}
			last = sp[1]
		}
		u, err := url.Parse(s)
		if err != nil {
			return
		}
		var secrets []string
		if pw, ok := u.User.Password(); ok {
			secrets = append(secrets, pw)
		}
		for k, vs := range u.Query() {
			if isSecretParam(k) {
				secrets = append(secrets, vs...)
			}
		}
		red := RedactURL(s)
		for _, pw := range secrets {
			// Too short, written elsewhere in s too, or a part of the mask.
			if len(pw) < 4 || strings.Count(s, pw) != 1 || strings.Contains(pw, "x") {
				continue
			}
			if strings.Contains(red, pw) {
				t.Fatalf("RedactURL(%q) = %q shows %q", s, red, pw)
			}
		}
	})
}
