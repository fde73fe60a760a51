package s3_test

import (
	"bytes"
	"errors"
	"hash/crc32"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/object/mem"
	"github.com/cairnfs/cairn/internal/object/objtest"
	"github.com/cairnfs/cairn/internal/object/s3"
	"github.com/cairnfs/cairn/internal/testenv/s3test"
)

func TestMain(m *testing.M) { s3test.Main(m) }

// open opens the store url names with the bucket's credentials and opts.
func open(t testing.TB, b s3test.Bucket, url string, opts s3.Options) *s3.Store {
	t.Helper()
	opts.AccessKey, opts.SecretKey = b.AccessKey, b.SecretKey
	s, err := s3.Open(t.Context(), url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	objtest.Run(t, func(t *testing.T) object.Store {
		b := s3test.NewBucket(t)
		return open(t, b, b.URL, s3.Options{})
	})
}

func TestString(t *testing.T) {
	b := s3test.NewBucket(t)
	s := open(t, b, "s3://"+b.Name+"/some/prefix/?endpoint="+b.Endpoint+"/", s3.Options{})
	want := "s3://" + b.Name + "/some/prefix?endpoint=" + b.Endpoint
	if got := s.String(); got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if strings.Contains(s.String(), b.SecretKey) || strings.Contains(s.String(), b.AccessKey) {
		t.Errorf("String() = %q shows the credentials", s.String())
	}
}

// TestPrefix checks that stores with a prefix see only their own keys, and
// that the prefix is stripped from listings.
func TestPrefix(t *testing.T) {
	b := s3test.NewBucket(t)
	ctx := t.Context()
	whole := open(t, b, b.URL, s3.Options{})
	p := open(t, b, "s3://"+b.Name+"/p?endpoint="+b.Endpoint, s3.Options{})
	pq := open(t, b, "s3://"+b.Name+"/p/q?endpoint="+b.Endpoint, s3.Options{})
	p2 := open(t, b, "s3://"+b.Name+"/p2?endpoint="+b.Endpoint, s3.Options{})
	for _, kv := range []struct {
		s   *s3.Store
		key string
	}{{whole, "top"}, {p, "a"}, {p, "b/c"}, {pq, "x"}, {p2, "a"}} {
		if err := kv.s.Put(ctx, kv.key, []byte(kv.s.String()+" "+kv.key)); err != nil {
			t.Fatal(err)
		}
	}
	keys := func(s *s3.Store, prefix string) []string {
		var got []string
		if err := s.List(ctx, prefix, func(i object.Info) bool {
			got = append(got, i.Key)
			return true
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	for _, tc := range []struct {
		s      *s3.Store
		prefix string
		want   []string
	}{
		{whole, "", []string{"p/a", "p/b/c", "p/q/x", "p2/a", "top"}},
		{p, "", []string{"a", "b/c", "q/x"}},
		{p, "b", []string{"b/c"}},
		{pq, "", []string{"x"}},
		{p2, "", []string{"a"}},
	} {
		if got := keys(tc.s, tc.prefix); !slices.Equal(got, tc.want) {
			t.Errorf("%s: List(%q) = %q, want %q", tc.s, tc.prefix, got, tc.want)
		}
	}
	got, err := whole.Get(ctx, "p/a", 0, -1)
	if want := p.String() + " a"; err != nil || string(got) != want {
		t.Errorf("whole.Get(p/a) = %q, %v; want %q", got, err, want)
	}
	if _, err := p.Get(ctx, "top", 0, -1); !errors.Is(err, object.ErrNotFound) {
		t.Errorf("p.Get(top): err = %v, want ErrNotFound", err)
	}
	if err := p.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if got := keys(p2, ""); !slices.Equal(got, []string{"a"}) {
		t.Errorf("p.Delete(a) touched p2: %q", got)
	}
}

// TestMultipart writes an object larger than the part size, which goes up in
// parts.
func TestMultipart(t *testing.T) {
	b := s3test.NewBucket(t)
	s := open(t, b, b.URL, s3.Options{PartSize: s3.MinPartSize})
	data := make([]byte, 2*s3.MinPartSize+12345)
	for i := range data {
		data[i] = byte(i * 7 / 3)
	}
	if err := s.Put(t.Context(), "big", data); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(t.Context(), "big", 0, -1)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Get after multipart Put: %d bytes, %v; want the %d put", len(got), err, len(data))
	}
	off := int64(s3.MinPartSize - 10)
	got, err = s.Get(t.Context(), "big", off, 20)
	if err != nil || !bytes.Equal(got, data[off:off+20]) {
		t.Fatalf("Get across a part boundary: %v, %v", got, err)
	}
}

// TestPutStreamParts streams an object of several parts (PutStream) and one
// that fails after its third part: the first is stored whole, the second
// not at all.
func TestPutStreamParts(t *testing.T) {
	b := s3test.NewBucket(t)
	s := open(t, b, b.URL, s3.Options{PartSize: s3.MinPartSize})
	data := make([]byte, 2*s3.MinPartSize+12345)
	for i := range data {
		data[i] = byte(i * 5 / 3)
	}
	if err := s.PutStream(t.Context(), "big", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(t.Context(), "big", 0, -1)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Get after PutStream: %d bytes, %v; want the %d streamed", len(got), err, len(data))
	}
	broken := errors.New("broken")
	r := io.MultiReader(bytes.NewReader(data), iotest.ErrReader(broken))
	if err := s.PutStream(t.Context(), "cut", r); !errors.Is(err, broken) {
		t.Fatalf("PutStream of a stream that fails after %d bytes: %v", len(data), err)
	}
	if _, err := s.Head(t.Context(), "cut"); !errors.Is(err, object.ErrNotFound) {
		t.Fatalf("the failed stream left an object: %v", err)
	}
}

func TestOpenCreate(t *testing.T) {
	b := s3test.Shared(t).MissingBucket(t)
	_, err := s3.Open(t.Context(), b.URL, s3.Options{AccessKey: b.AccessKey, SecretKey: b.SecretKey})
	if err == nil || !strings.Contains(err.Error(), `bucket "`+b.Name+`" does not exist`) ||
		!strings.Contains(err.Error(), "format creates it") {
		t.Fatalf("Open of a missing bucket: err = %v, want 'bucket … does not exist (format creates it)'", err)
	}
	s := open(t, b, b.URL, s3.Options{Create: true})
	if err := s.Put(t.Context(), "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	// Create of a bucket that exists is not an error.
	s = open(t, b, b.URL, s3.Options{Create: true})
	if got, err := s.Get(t.Context(), "k", 0, -1); err != nil || string(got) != "v" {
		t.Fatalf("Get after second Open = %q, %v", got, err)
	}
}

// TestGivenCRC32C: a CRC-32C passed with object.WithCRC32C is the one the
// upload is checked against: the right one stores the object, a wrong one
// makes the server refuse it, and nothing is stored.
func TestGivenCRC32C(t *testing.T) {
	b := s3test.NewBucket(t)
	// BadDigest is retried (damage on the way); a wrong sum fails each
	// time, so the retries are kept short.
	s := open(t, b, b.URL, s3.Options{MaxRetries: 1, OutageTimeout: time.Second})
	ctx := t.Context()
	data := []byte("a block of some bytes")
	sum := crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli))
	if err := s.Put(object.WithCRC32C(ctx, sum), "good", data); err != nil {
		t.Fatalf("put with its CRC-32C: %v", err)
	}
	if got, err := s.Get(ctx, "good", 0, -1); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("get: %q, %v", got, err)
	}
	if err := s.Put(object.WithCRC32C(ctx, sum^1), "bad", data); err == nil {
		t.Fatal("put with a wrong CRC-32C: no error")
	}
	if _, err := s.Get(ctx, "bad", 0, -1); !errors.Is(err, object.ErrNotFound) {
		t.Fatalf("get of the refused object: %v, want ErrNotFound", err)
	}
}

// TestCopyFrom: an object of another store of the same endpoint and key
// pair (here another prefix of the bucket) is copied by the server; a
// missing one is ErrNotFound; a store of another kind is not copied.
func TestCopyFrom(t *testing.T) {
	b := s3test.NewBucket(t)
	pre := strings.Replace(b.URL, "?", "/a?", 1)
	src, dst := open(t, b, pre, s3.Options{}), open(t, b, strings.Replace(b.URL, "?", "/b?", 1), s3.Options{})
	data := bytes.Repeat([]byte("block"), 100000)
	if err := src.Put(t.Context(), "k/1", data); err != nil {
		t.Fatal(err)
	}
	ok, err := dst.CopyFrom(t.Context(), src, "k/1")
	if !ok || err != nil {
		t.Fatalf("CopyFrom: %v %v", ok, err)
	}
	got, err := object.ReadAll(t.Context(), dst, "k/1")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("copied object: %d bytes, %v", len(got), err)
	}
	if ok, err := dst.CopyFrom(t.Context(), src, "k/none"); !ok || !errors.Is(err, object.ErrNotFound) {
		t.Fatalf("CopyFrom of a missing object: %v %v, want ErrNotFound", ok, err)
	}
	if ok, _ := dst.CopyFrom(t.Context(), mem.New(), "k/1"); ok {
		t.Fatal("CopyFrom of another kind of store claimed to copy")
	}
}
