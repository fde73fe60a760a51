// Package s3 is an object.Store in an S3 bucket (AWS S3 or any S3-compatible
// service: MinIO, versitygw, Ceph RGW, …), through minio-go. A store is
// named by a data URL, s3://BUCKET[/PREFIX]?endpoint=…; see Location. Key
// "a/b" of a store with prefix "p" is the S3 object "p/a/b".
//
// S3 gives what object.Store asks for: a PUT replaces an object atomically
// and is durable when it returns (so the store does not implement
// object.Syncer), a GET sees the latest PUT, and listings are in UTF-8
// binary order, which is byte order for Cairn's printable-ASCII keys. Gets
// are range GETs; objects up to Options.PartSize are written with one PUT.
//
// S3 lets keys nest ("a" and "a/b" both), and checking for it would cost a
// LIST per PUT, so the store does not: it reports AllowsNesting (see
// object.Store). Servers that keep objects as files refuse nesting keys;
// the store maps their refusal to object.ErrConflict.
//
// An endpoint that cannot be reached or fails with a transient error
// (5xx, throttling) makes an operation wait and retry, with back-off, for
// up to Options.OutageTimeout; then it fails with an error that says the
// endpoint could not be reached. Missing buckets and refused credentials
// fail at once with errors that say so.
//
// The package owns only the mapping of keys to S3 objects below the prefix.
// It must not hold any Cairn concept, and nothing else may write below the
// prefix while a Store is open.
package s3

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/minio/minio-go/v7"

	"github.com/cairnfs/cairn/internal/object"
)

var (
	_ object.Store                      = (*Store)(nil)
	_ object.BatchDeleter               = (*Store)(nil)
	_ object.StreamPutter               = (*Store)(nil)
	_ interface{ AllowsNesting() bool } = (*Store)(nil)
)

// awsEndpoint is where requests go when the URL names no endpoint.
const awsEndpoint = "https://s3.amazonaws.com"

// Store is an object store in an S3 bucket. It is safe for concurrent use.
type Store struct {
	loc       Location
	prefix    string   // loc.keyPrefix()
	endpoints []string // where requests go: one, or gateways to one store
	accessKey string   // for messages; the secret is kept only by the client
	credsFrom string   // where the key pair came from, for messages
	clients   []*minio.Client
	cur       atomic.Int32 // the endpoint (and client) requests go to
	transport http.RoundTripper
	opts      Options
	log       *slog.Logger
	down      atomic.Bool  // an operation is retrying a failing endpoint
	downSince atomic.Int64 // when down was last set (UnixNano)
}

// Open opens the store the data URL rawURL names (see Location). It checks
// that the endpoint answers, accepts the credentials and has the bucket,
// creating the bucket if opts.Create is set; it retries an endpoint that
// does not answer like any operation does (see Options.OutageTimeout).
func Open(ctx context.Context, rawURL string, opts Options) (*Store, error) {
	loc, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	creds, credsFrom, err := opts.credentials(loc.Endpoint == "")
	if err != nil {
		return nil, err
	}
	v, err := creds.GetWithContext(nil)
	if err != nil {
		return nil, fmt.Errorf("object/s3: S3 credentials from %s: %w", credsFrom, err)
	}
	endpoints := loc.Endpoints()
	if len(endpoints) == 0 {
		endpoints = []string{awsEndpoint}
	}
	region := loc.Region
	switch {
	case region != "":
	case loc.Endpoint != "":
		region = "us-east-1"
	case os.Getenv("AWS_REGION") != "":
		region = os.Getenv("AWS_REGION")
	default:
		region = os.Getenv("AWS_DEFAULT_REGION") // "": the client asks the bucket
	}
	lookup := minio.BucketLookupDNS
	if loc.PathStyle {
		lookup = minio.BucketLookupPath
	}
	transport := opts.transport()
	s := &Store{
		loc:       loc,
		prefix:    loc.keyPrefix(),
		endpoints: endpoints,
		accessKey: v.AccessKeyID,
		credsFrom: credsFrom,
		transport: transport,
		opts:      opts,
		log:       opts.Logger,
	}
	for _, endpoint := range endpoints {
		ep, err := url.Parse(endpoint)
		if err != nil {
			return nil, fmt.Errorf("object/s3: endpoint %q: %w", endpoint, err)
		}
		client, err := minio.New(ep.Host, &minio.Options{
			Creds:        creds,
			Secure:       ep.Scheme == "https",
			Transport:    transport,
			Region:       region,
			BucketLookup: lookup,
			MaxRetries:   1, // the store retries, with its own policy
			// Lets Put send a checksum of the payload (minio-go refuses
			// checksum headers without it); multipart parts get CRC-32C
			// headers too.
			TrailingHeaders: true,
		})
		if err != nil {
			return nil, fmt.Errorf("object/s3: %s: %w", loc, err)
		}
		s.clients = append(s.clients, client)
	}
	if err := s.checkBucket(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// cl returns the client of the endpoint requests go to now.
func (s *Store) cl() *minio.Client { return s.clients[s.cur.Load()] }

// ep returns the endpoint requests go to now, for messages.
func (s *Store) ep() string { return s.endpoints[s.cur.Load()] }

// failOver moves requests from endpoint i, which just failed, to the next
// one, unless another request moved them already; false with one
// endpoint.
func (s *Store) failOver(i int32) bool {
	n := int32(len(s.endpoints))
	if n < 2 || !s.cur.CompareAndSwap(i, (i+1)%n) {
		return false
	}
	s.log.Warn("S3 endpoint failing; trying the next", "failing", s.endpoints[i], "next", s.endpoints[(i+1)%n])
	return true
}

// checkBucket lists at most one object below the prefix: that needs a
// reachable endpoint, accepted credentials, the bucket, and the permission
// to list that the store needs anyway. A HEAD of the bucket would be
// cheaper, but its answer has no body to say which of these failed.
func (s *Store) checkBucket(ctx context.Context) error {
	list := func(ctx context.Context) error {
		for o := range s.cl().ListObjectsIter(ctx, s.loc.Bucket, minio.ListObjectsOptions{
			Prefix: s.prefix, Recursive: true, MaxKeys: 1, FetchOwner: new(false),
		}) {
			return o.Err
		}
		return nil
	}
	err := s.do(ctx, "open", "", list)
	var er minio.ErrorResponse
	if !s.opts.Create || !errors.As(err, &er) || er.Code != "NoSuchBucket" {
		return err
	}
	err = s.do(ctx, "create bucket", "", func(ctx context.Context) error {
		err := s.cl().MakeBucket(ctx, s.loc.Bucket, minio.MakeBucketOptions{Region: s.loc.Region})
		if errors.As(err, &er) && (er.Code == "BucketAlreadyOwnedByYou" || er.Code == "BucketAlreadyExists") {
			return nil // made by a concurrent Open, or by a retried request
		}
		return err
	})
	if err != nil {
		return err
	}
	s.log.Info("created S3 bucket", "bucket", s.loc.Bucket, "endpoint", s.ep())
	return s.do(ctx, "open", "", list)
}

// Close closes the store's idle connections (not those of a transport given
// in Options). Other methods must not be called after Close.
func (s *Store) Close() error {
	if t, ok := s.transport.(*http.Transport); ok && s.opts.Transport == nil {
		t.CloseIdleConnections()
	}
	return nil
}

// String implements object.Store: the store's data URL in canonical form.
func (s *Store) String() string { return s.loc.String() }

// Location returns the store's parsed URL.
func (s *Store) Location() Location { return s.loc }

// AllowsNesting reports that the store may hold nesting keys; see the
// package documentation and object.Store.
func (s *Store) AllowsNesting() bool { return true }

// nestingCodes are errors with which servers that keep objects as files
// (versitygw's posix backend, MinIO in file-system mode) refuse nesting keys.
var nestingCodes = map[string]bool{
	"ExistingObjectIsDirectory":     true,
	"ObjectParentIsFile":            true,
	"XMinioParentIsObject":          true,
	"XMinioObjectExistsAsDirectory": true,
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Put implements object.Store with one PUT, or a multipart upload for
// objects larger than Options.PartSize.
func (s *Store) Put(ctx context.Context, key string, data []byte) error {
	if err := object.ValidKey(key); err != nil {
		return err
	}
	opts := minio.PutObjectOptions{
		PartSize: uint64(s.opts.PartSize),
		// The payload is sent unsigned (UNSIGNED-PAYLOAD): over plain
		// HTTP minio-go would otherwise hash it with SHA-256 in
		// aws-chunked encoding, which costs more CPU than the upload
		// (and breaks empty payloads on some servers). The request
		// itself stays signed; Cairn's blocks carry a CRC-32C per 64 KiB
		// segment that every read verifies.
		DisableContentSha256: true,
	}
	if int64(len(data)) <= s.opts.PartSize {
		// One PUT: the server checks the payload against its CRC-32C
		// and refuses a damaged one (BadDigest). Servers that compute a
		// checksum of every object (CRC64NVME by default) take this one
		// instead, which costs them less: versitygw spent a sixth of its
		// CPU on CRC64NVME during sequential writes.
		// The caller may have it already (chunk derives it from its
		// segment checksums): then the object is not read again.
		sum, ok := object.CRC32C(ctx)
		if !ok {
			sum = crc32.Checksum(data, castagnoli)
		}
		opts.UserMetadata = map[string]string{
			"x-amz-checksum-crc32c": base64.StdEncoding.EncodeToString(binary.BigEndian.AppendUint32(nil, sum)),
		}
	}
	err := s.do(ctx, "put", key, func(ctx context.Context) error {
		_, err := s.cl().PutObject(ctx, s.loc.Bucket, s.prefix+key, bytes.NewReader(data), int64(len(data)), opts)
		return err
	})
	var er minio.ErrorResponse
	if errors.As(err, &er) && nestingCodes[er.Code] {
		return fmt.Errorf("%w: put %q: %s", object.ErrConflict, key, er.Message)
	}
	return err
}

// PutStream implements object.StreamPutter with a multipart upload in
// parts of Options.PartSize, read from r one at a time: one part is in
// memory, and each part's request is retried as minio-go retries them.
// The upload is completed only when r ends with io.EOF; when r fails or
// ctx ends, the parts sent are aborted and key is left as it was. A
// failure before anything was read from r (the upload could not start)
// is retried as Put's are; a later one is not, since r cannot be read
// again.
func (s *Store) PutStream(ctx context.Context, key string, r io.Reader) error {
	if err := object.ValidKey(key); err != nil {
		return err
	}
	opts := minio.PutObjectOptions{PartSize: uint64(s.opts.PartSize), DisableContentSha256: true}
	sr := &streamReader{r: r}
	var failed error // after reading from r: not retried
	err := s.do(ctx, "put", key, func(ctx context.Context) error {
		_, err := s.cl().PutObject(ctx, s.loc.Bucket, s.prefix+key, sr, -1, opts)
		if err != nil && sr.n > 0 {
			failed = err
			return nil
		}
		return err
	})
	if failed != nil {
		return fmt.Errorf("object/s3: put %q (a stream, after %d bytes): %w", key, sr.n, failed)
	}
	return err
}

// streamReader counts what PutStream read, and keeps a stream that broke
// off from looking like one that ended: minio-go takes
// io.ErrUnexpectedEOF from a part's read as the end of the object.
type streamReader struct {
	r io.Reader
	n int64
}

func (s *streamReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	s.n += int64(n)
	if errors.Is(err, io.ErrUnexpectedEOF) {
		err = fmt.Errorf("the stream broke off: %v", err)
	}
	return n, err
}

// Get implements object.Store with a range GET.
func (s *Store) Get(ctx context.Context, key string, off, length int64) ([]byte, error) {
	if err := object.ValidKey(key); err != nil {
		return nil, err
	}
	if off < 0 {
		return nil, fmt.Errorf("object/s3: get %q: negative offset %d", key, off)
	}
	if length == 0 {
		// A GET cannot ask for no bytes; a HEAD tells a missing object.
		if _, err := s.Head(ctx, key); err != nil {
			return nil, err
		}
		return []byte{}, nil
	}
	var rng string
	switch {
	case off == 0 && length < 0:
		// The whole object: no range.
	case length < 0 || length > math.MaxInt64-off:
		rng = "bytes=" + strconv.FormatInt(off, 10) + "-"
	default:
		rng = "bytes=" + strconv.FormatInt(off, 10) + "-" + strconv.FormatInt(off+length-1, 10)
	}
	var buf []byte
	err := s.do(ctx, "get", key, func(ctx context.Context) error {
		var err error
		buf, err = s.get(ctx, key, rng, off, length)
		return err
	})
	var er minio.ErrorResponse
	switch {
	case errors.As(err, &er) && er.Code == "NoSuchKey":
		return nil, fmt.Errorf("get %q: %w", key, object.ErrNotFound)
	case errors.As(err, &er) && er.Code == "InvalidRange":
		// The object exists (else NoSuchKey) and off is at or past its
		// end: nothing to read.
		return []byte{}, nil
	case err != nil:
		return nil, err
	}
	return buf, nil
}

// get does one GET of key with range header rng (none if "") for the bytes
// [off, off+length) (length < 0: to the end).
func (s *Store) get(ctx context.Context, key, rng string, off, length int64) ([]byte, error) {
	var opts minio.GetObjectOptions
	if rng != "" {
		opts.Set("Range", rng)
	}
	body, info, hdr, err := minio.Core{Client: s.cl()}.GetObject(ctx, s.loc.Bucket, s.prefix+key, opts)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	var buf []byte
	if info.Size >= 0 {
		// Content-Length: read exactly that much.
		buf = make([]byte, info.Size)
		if _, err := io.ReadFull(body, buf); err != nil {
			return nil, fmt.Errorf("reading %d bytes: %w", info.Size, unexpectedEOF(err))
		}
	} else if buf, err = io.ReadAll(body); err != nil {
		return nil, err
	}
	if rng != "" && hdr.Get("Content-Range") == "" {
		// The server ignored the range and sent the whole object.
		buf = buf[min(off, int64(len(buf))):]
		if length >= 0 && length < int64(len(buf)) {
			buf = buf[:length]
		}
	}
	return buf, nil
}

// unexpectedEOF makes a body that ended early an io.ErrUnexpectedEOF, which
// is worth a retry.
func unexpectedEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// Head implements object.Store.
func (s *Store) Head(ctx context.Context, key string) (object.Info, error) {
	if err := object.ValidKey(key); err != nil {
		return object.Info{}, err
	}
	var info minio.ObjectInfo
	err := s.do(ctx, "head", key, func(ctx context.Context) error {
		var err error
		info, err = s.cl().StatObject(ctx, s.loc.Bucket, s.prefix+key, minio.StatObjectOptions{})
		return err
	})
	var er minio.ErrorResponse
	switch {
	case errors.As(err, &er) && er.Code == "NoSuchKey":
		return object.Info{}, fmt.Errorf("head %q: %w", key, object.ErrNotFound)
	case err != nil:
		return object.Info{}, err
	}
	return object.Info{Key: key, Size: info.Size}, nil
}

// Delete implements object.Store. S3 answers a DELETE of a missing object
// with success.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := object.ValidKey(key); err != nil {
		return err
	}
	return s.do(ctx, "delete", key, func(ctx context.Context) error {
		err := s.cl().RemoveObject(ctx, s.loc.Bucket, s.prefix+key, minio.RemoveObjectOptions{})
		var er minio.ErrorResponse
		if errors.As(err, &er) && er.Code == "NoSuchKey" {
			return nil // some servers say so; the contract says it is fine
		}
		return err
	})
}

// DeleteMany implements object.BatchDeleter with DeleteObjects: up to
// 1,000 keys per request, retried like Delete. Keys the server reports
// missing are fine; any other per-key failure fails the call (the keys
// that were deleted stay deleted, and a retry of the call deletes the
// rest).
func (s *Store) DeleteMany(ctx context.Context, keys []string) error {
	for _, k := range keys {
		if err := object.ValidKey(k); err != nil {
			return err
		}
	}
	for len(keys) > 0 {
		batch := keys[:min(len(keys), object.MaxBatchDelete)]
		keys = keys[len(batch):]
		err := s.do(ctx, "delete", batch[0], func(ctx context.Context) error {
			ch := make(chan minio.ObjectInfo, len(batch))
			for _, k := range batch {
				ch <- minio.ObjectInfo{Key: s.prefix + k}
			}
			close(ch)
			var first error
			for e := range s.cl().RemoveObjects(ctx, s.loc.Bucket, ch, minio.RemoveObjectsOptions{}) {
				var er minio.ErrorResponse
				if errors.As(e.Err, &er) && er.Code == "NoSuchKey" {
					continue
				}
				if first == nil && e.Err != nil {
					first = fmt.Errorf("%s: %w", e.ObjectName, e.Err)
				}
			}
			return first
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// List implements object.Store with ListObjectsV2, a page of up to 1,000
// keys at a time. S3 lists in UTF-8 binary order, which for printable ASCII
// keys is byte order. A listing that fails part way resumes after the last
// key it passed on. Objects below the prefix whose names are not valid keys
// (none that the store wrote) are skipped.
func (s *Store) List(ctx context.Context, prefix string, fn func(object.Info) bool) error {
	r := s.retrier("list", prefix)
	last := "" // full S3 name of the last object seen
	for {
		stopped := false
		progress := false
		var err error
		for o := range s.cl().ListObjectsIter(ctx, s.loc.Bucket, minio.ListObjectsOptions{
			Prefix: s.prefix + prefix, Recursive: true, StartAfter: last, FetchOwner: new(false),
		}) {
			if o.Err != nil {
				err = o.Err
				break
			}
			if !progress {
				progress = true
				r.progress()
			}
			last = o.Key
			key, ok := strings.CutPrefix(o.Key, s.prefix)
			if !ok || object.ValidKey(key) != nil {
				continue
			}
			if !fn(object.Info{Key: key, Size: o.Size}) {
				stopped = true
				break
			}
		}
		if stopped {
			return nil
		}
		if err == nil {
			if err = ctx.Err(); err != nil {
				// The iterator ends quietly when ctx is done.
				return fmt.Errorf("object/s3: list %q: %w", prefix, err)
			}
			r.progress()
			return nil
		}
		if err = r.wait(ctx, err); err != nil {
			return err
		}
	}
}

// CopyFrom implements object.Copier: an object of another bucket (or
// prefix) of the same endpoint, reached with the same key pair, is copied
// by the server (CopyObject); its bytes do not pass through this process.
func (s *Store) CopyFrom(ctx context.Context, src object.Store, key string) (bool, error) {
	o, ok := object.Base(src).(*Store)
	if !ok || o.loc.Endpoint != s.loc.Endpoint || o.accessKey != s.accessKey {
		return false, nil
	}
	if err := object.ValidKey(key); err != nil {
		return true, err
	}
	err := s.do(ctx, "copy", key, func(ctx context.Context) error {
		_, err := s.cl().CopyObject(ctx,
			minio.CopyDestOptions{Bucket: s.loc.Bucket, Object: s.prefix + key},
			minio.CopySrcOptions{Bucket: o.loc.Bucket, Object: o.prefix + key})
		return err
	})
	var er minio.ErrorResponse
	if errors.As(err, &er) && er.Code == "NoSuchKey" {
		return true, fmt.Errorf("copy %q from bucket %s: %w", key, o.loc.Bucket, object.ErrNotFound)
	}
	return true, err
}
