package object

import "testing"

func TestRedactURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"postgres://cairn:s3cret@db1:5432/vol1?x=1", "postgres://cairn:xxxxx@db1:5432/vol1?x=1"},
		{"postgres://cairn@db1/vol1", "postgres://cairn@db1/vol1"},
		{"postgres://u:pa@ss@h/db", "postgres://u:xxxxx@h/db"},       // '@' in the password
		{"postgres://u:pass%zzword@h/db", "postgres://u:xxxxx@h/db"}, // refused by net/url
		{"s3://bucket/a@b:c", "s3://bucket/a@b:c"},                   // '@' in the path only
		{"pebble:///var/lib/cairn/meta", "pebble:///var/lib/cairn/meta"},
		{"no scheme:pw@x", "no scheme:pw@x"},
	} {
		if got := RedactURL(c.in); got != c.want {
			t.Errorf("RedactURL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
