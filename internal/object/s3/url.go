package s3

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/minio/minio-go/v7/pkg/s3utils"

	"github.com/cairnfs/cairn/internal/object"
)

// Location is a parsed data URL:
//
//	s3://BUCKET[/PREFIX][?endpoint=URL][&region=REGION][&path-style=BOOL]
//
// With an endpoint ("http://127.0.0.1:7070", "https://minio.example.com")
// requests go there, path-style by default ("http://HOST/BUCKET/KEY"), in
// region us-east-1 unless region says otherwise. Without one they go to
// AWS (https://s3.amazonaws.com), virtual-host style
// ("https://BUCKET.s3.amazonaws.com/KEY") by default, in the region the
// URL, AWS_REGION or AWS_DEFAULT_REGION names, else the bucket's own
// region, which the client looks up. Credentials never go in the URL.
type Location struct {
	Bucket string
	// Prefix is prepended, with a "/", to every key; "" for the whole
	// bucket. It follows the key rules of object.Store, and it shortens
	// the longest key the store can hold (S3's limit is on the whole
	// name) by its length plus one.
	Prefix string
	// Endpoint is the scheme and host[:port] of the S3 service, "" for AWS;
	// or several, comma-separated: gateways to one store, used in turn
	// when one fails (Endpoints).
	Endpoint string
	// Region is the region given in the URL, "" if none.
	Region string
	// PathStyle is the addressing style: true for path-style, false for
	// virtual-host style.
	PathStyle bool
}

// ParseURL parses a data URL; see Location.
func ParseURL(raw string) (Location, error) {
	bad := func(format string, a ...any) (Location, error) {
		return Location{}, fmt.Errorf("object/s3: bad URL %q: %s", object.RedactURL(raw), fmt.Sprintf(format, a...))
	}
	u, err := url.Parse(raw)
	if err != nil {
		return bad("%v", object.URLParseReason(err))
	}
	switch {
	case u.Scheme != "s3":
		return bad(`scheme is %q, want "s3"`, u.Scheme)
	case u.Opaque != "":
		return bad(`want s3://BUCKET[/PREFIX]`)
	case u.User != nil:
		return bad("credentials do not belong in the URL; pass them as options or in the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)")
	case u.Fragment != "" || strings.HasSuffix(raw, "#"):
		return bad("fragment %q", u.Fragment)
	case u.Port() != "":
		return bad("a port belongs in the endpoint, not after the bucket")
	}
	loc := Location{Bucket: u.Host}
	if err := s3utils.CheckValidBucketNameStrict(loc.Bucket); err != nil {
		return bad("bucket %q: %v", loc.Bucket, err)
	}
	if p := strings.TrimSuffix(strings.TrimPrefix(u.Path, "/"), "/"); p != "" {
		if err := object.ValidKey(p); err != nil {
			return bad("prefix %q: %v", p, err)
		}
		if len(p)+1 >= object.MaxKeyLen {
			return bad("prefix %q leaves no room for keys", p)
		}
		loc.Prefix = p
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return bad("query: %v", err)
	}
	pathStyleSet := false
	for name, vals := range q {
		if len(vals) != 1 {
			return bad("%s given %d times", name, len(vals))
		}
		val := vals[0]
		switch name {
		case "endpoint":
			// Several endpoints, comma-separated, are gateways to one
			// store: the client moves to the next when one fails.
			var eps []string
			for _, val := range strings.Split(val, ",") {
				ep, err := url.Parse(val)
				switch {
				case err != nil:
					return bad("endpoint: %v", object.URLParseReason(err))
				case ep.Scheme != "http" && ep.Scheme != "https":
					return bad(`endpoint %q: want http://HOST[:PORT] or https://HOST[:PORT]`, val)
				case ep.Host == "" || ep.Hostname() == "":
					return bad("endpoint %q has no host", val)
				case ep.User != nil:
					return bad("credentials do not belong in the endpoint")
				case ep.Path != "" && ep.Path != "/" || ep.RawQuery != "" || ep.Fragment != "":
					return bad("endpoint %q: only scheme, host and port are allowed", val)
				}
				if p := ep.Port(); p != "" {
					if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
						return bad("endpoint %q: bad port", val)
					}
				}
				eps = append(eps, ep.Scheme+"://"+ep.Host)
			}
			loc.Endpoint = strings.Join(eps, ",")
		case "region":
			if val == "" || strings.ContainsFunc(val, func(r rune) bool {
				return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-')
			}) {
				return bad("region %q: want lower-case letters, digits and '-'", val)
			}
			loc.Region = val
		case "path-style":
			b, err := strconv.ParseBool(val)
			if err != nil {
				return bad("path-style %q: want true or false", val)
			}
			loc.PathStyle, pathStyleSet = b, true
		default:
			return bad("unknown parameter %q (known: endpoint, region, path-style)", name)
		}
	}
	if !pathStyleSet {
		loc.PathStyle = loc.Endpoint != ""
	}
	return loc, nil
}

// String returns the URL in canonical form: parameters in a fixed order,
// path-style only when it is not the default, no secrets (there are none in
// it). ParseURL(l.String()) returns l.
func (l Location) String() string {
	var b strings.Builder
	b.WriteString("s3://")
	b.WriteString(l.Bucket)
	if l.Prefix != "" {
		b.WriteByte('/')
		b.WriteString((&url.URL{Path: l.Prefix}).EscapedPath())
	}
	sep := byte('?')
	param := func(name, val string) {
		b.WriteByte(sep)
		sep = '&'
		b.WriteString(name)
		b.WriteByte('=')
		b.WriteString(val)
	}
	if l.Endpoint != "" {
		param("endpoint", l.Endpoint)
	}
	if l.Region != "" {
		param("region", l.Region)
	}
	if l.PathStyle != (l.Endpoint != "") {
		param("path-style", strconv.FormatBool(l.PathStyle))
	}
	return b.String()
}

// Endpoints returns the endpoints of Endpoint, in order (none for AWS).
func (l Location) Endpoints() []string {
	if l.Endpoint == "" {
		return nil
	}
	return strings.Split(l.Endpoint, ",")
}

// keyPrefix returns what is prepended to keys: "" or the prefix and "/".
func (l Location) keyPrefix() string {
	if l.Prefix == "" {
		return ""
	}
	return l.Prefix + "/"
}
