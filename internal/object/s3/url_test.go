package s3_test

import (
	"strings"
	"testing"

	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/object/s3"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want s3.Location
		str  string // String(), if not url
	}{
		{url: "s3://bucket", want: s3.Location{Bucket: "bucket"}},
		{url: "s3://bucket/", want: s3.Location{Bucket: "bucket"}, str: "s3://bucket"},
		{url: "s3://my.bucket-1/some/prefix", want: s3.Location{Bucket: "my.bucket-1", Prefix: "some/prefix"}},
		{url: "s3://b01/p/", want: s3.Location{Bucket: "b01", Prefix: "p"}, str: "s3://b01/p"},
		{url: "s3://b01/a%20b", want: s3.Location{Bucket: "b01", Prefix: "a b"}},
		{
			url:  "s3://bucket/pre?endpoint=http://127.0.0.1:7070",
			want: s3.Location{Bucket: "bucket", Prefix: "pre", Endpoint: "http://127.0.0.1:7070", PathStyle: true},
		},
		{
			url:  "s3://bucket?endpoint=https://minio.example.com/&region=eu-west-3",
			want: s3.Location{Bucket: "bucket", Endpoint: "https://minio.example.com", Region: "eu-west-3", PathStyle: true},
			str:  "s3://bucket?endpoint=https://minio.example.com&region=eu-west-3",
		},
		{
			url:  "s3://bucket?path-style=false&endpoint=http://[::1]:9000",
			want: s3.Location{Bucket: "bucket", Endpoint: "http://[::1]:9000"},
			str:  "s3://bucket?endpoint=http://[::1]:9000&path-style=false",
		},
		{
			url:  "s3://bucket?endpoint=http://a:1,https://b:2/",
			want: s3.Location{Bucket: "bucket", Endpoint: "http://a:1,https://b:2", PathStyle: true},
			str:  "s3://bucket?endpoint=http://a:1,https://b:2",
		},
		{
			url:  "s3://bucket?endpoint=http://h:1&path-style=true",
			want: s3.Location{Bucket: "bucket", Endpoint: "http://h:1", PathStyle: true},
			str:  "s3://bucket?endpoint=http://h:1",
		},
		{url: "s3://bucket?region=us-west-2", want: s3.Location{Bucket: "bucket", Region: "us-west-2"}},
		{url: "s3://bucket?path-style=true", want: s3.Location{Bucket: "bucket", PathStyle: true}},
		{url: "s3://bucket?path-style=1", want: s3.Location{Bucket: "bucket", PathStyle: true}, str: "s3://bucket?path-style=true"},
	} {
		got, err := s3.ParseURL(tc.url)
		if err != nil {
			t.Errorf("ParseURL(%q): %v", tc.url, err)
			continue
		}
		if got != tc.want {
			t.Errorf("ParseURL(%q) = %+v, want %+v", tc.url, got, tc.want)
		}
		str := tc.str
		if str == "" {
			str = tc.url
		}
		if got.String() != str {
			t.Errorf("ParseURL(%q).String() = %q, want %q", tc.url, got.String(), str)
		}
	}
}

func TestParseURLErrors(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"", `scheme is ""`},
		{"bucket", `scheme is ""`},
		{"file:///data", `scheme is "file"`},
		{"S3://bucket", ""}, // url.Parse lower-cases the scheme: accepted
		{"s3:bucket", "want s3://BUCKET"},
		{"s3://", "bucket"},
		{"s3:///prefix", "bucket"},
		{"s3://ab", "bucket"},
		{"s3://bucket?endpoint=http://a:1,ftp://b", "want http://HOST[:PORT]"},
		{"s3://bucket?endpoint=http://a:1,", "want http://HOST[:PORT]"},
		{"s3://Bucket", "bucket"},
		{"s3://bu_cket", "bucket"},
		{"s3://192.168.1.1", "bucket"},
		{"s3://" + strings.Repeat("b", 64), "bucket"},
		{"s3://bucket:9000", "port belongs in the endpoint"},
		{"s3://key:secret@bucket", "credentials do not belong"},
		{"s3://bucket#frag", "fragment"},
		{"s3://bucket//p", "prefix"},
		{"s3://bucket/a//b", "prefix"},
		{"s3://bucket/../p", "prefix"},
		{"s3://bucket/a/./b", "prefix"},
		{"s3://bucket/caf%C3%A9", "prefix"},
		{"s3://bucket/" + strings.Repeat("a/", 600), "prefix"},
		{"s3://bucket?endpoint=127.0.0.1:7070", "endpoint"},
		{"s3://bucket?endpoint=ftp://host", "endpoint"},
		{"s3://bucket?endpoint=http://", "no host"},
		{"s3://bucket?endpoint=http://:7070", "no host"},
		{"s3://bucket?endpoint=http://u:p@host", "credentials do not belong"},
		{"s3://bucket?endpoint=http://host/path", "only scheme, host and port"},
		{"s3://bucket?endpoint=http://host:99999", "bad port"},
		{"s3://bucket?endpoint=http://host&endpoint=http://other", "2 times"},
		{"s3://bucket?region=", "region"},
		{"s3://bucket?region=US_EAST", "region"},
		{"s3://bucket?path-style=maybe", "path-style"},
		{"s3://bucket?pathstyle=true", `unknown parameter "pathstyle"`},
		{"s3://bucket?a=1;b=2", "query"},
		{"s3://bucket%zz", ""},
	} {
		_, err := s3.ParseURL(tc.url)
		switch {
		case tc.want == "" && tc.url == "S3://bucket":
			if err != nil {
				t.Errorf("ParseURL(%q): %v", tc.url, err)
			}
		case err == nil:
			t.Errorf("ParseURL(%q) succeeded, want an error", tc.url)
		case !strings.Contains(err.Error(), tc.want):
			t.Errorf("ParseURL(%q): err = %v, want it to mention %q", tc.url, err, tc.want)
		case strings.Contains(err.Error(), "secret") && !strings.Contains(tc.url, "secret@"):
			t.Errorf("ParseURL(%q): err = %v", tc.url, err)
		}
		if err != nil && strings.Contains(err.Error(), ":secret@") {
			t.Errorf("ParseURL(%q): error shows the password: %v", tc.url, err)
		}
	}
}

// FuzzParseURL checks that ParseURL does not panic and that a parsed URL's
// String parses back to the same location.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{
		"s3://bucket", "s3://b01/p/q?endpoint=http://127.0.0.1:7070&region=r&path-style=false",
		"s3://bucket?endpoint=https://[::1]:9000/", "s3://bucket/a%20b%25c", "s3://x:y@bucket",
		"s3://bucket?endpoint=http://h%25zone:1",
	} {
		f.Add(s)
	}
	f.Add("s3://key:secretpw@bucket")
	f.Add("s3://key:secret%zzpw@bucket")
	f.Fuzz(func(t *testing.T, raw string) {
		loc, err := s3.ParseURL(raw)
		if err != nil {
			// An error never shows a password written in the URL.
			if i, j, ok := object.URLPassword(raw); ok && j-i >= 4 && strings.Count(raw, raw[i:j]) == 1 &&
				strings.Contains(err.Error(), raw[i:j]) {
				t.Fatalf("ParseURL(%q): the error shows the password: %v", raw, err)
			}
			return
		}
		again, err := s3.ParseURL(loc.String())
		if err != nil {
			t.Fatalf("ParseURL(%q) = %+v, whose String %q does not parse: %v", raw, loc, loc.String(), err)
		}
		if again != loc {
			t.Fatalf("ParseURL(%q) = %+v, String %q parses to %+v", raw, loc, loc.String(), again)
		}
	})
}
