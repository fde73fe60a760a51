package s3_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/object/s3"
	"github.com/cairnfs/cairn/internal/testenv"
	"github.com/cairnfs/cairn/internal/testenv/s3test"
)

// The tests in this file stop the shared server: none may run in parallel.

// restart makes sure the server runs again when t ends, whatever happened.
func restart(t *testing.T, srv *s3test.Server) {
	t.Cleanup(func() {
		if err := srv.Start(); err != nil {
			t.Errorf("restart the server: %v", err)
		}
	})
}

// TestOutage takes the server away for two seconds while workers put and
// get: their operations wait and succeed.
func TestOutage(t *testing.T) {
	srv := s3test.Shared(t)
	b := srv.NewBucket(t)
	var log testenv.LogBuffer
	s := open(t, b, b.URL, s3.Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	restart(t, srv)

	ctx := t.Context()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	ops := make([]int, 4)
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("w%d/%d", w, i)
				data := bytes.Repeat([]byte{byte(w), byte(i)}, 1000+i)
				if err := s.Put(ctx, key, data); err != nil {
					errs <- err
					return
				}
				got, err := s.Get(ctx, key, 10, 100)
				if err != nil || !bytes.Equal(got, data[10:110]) {
					errs <- fmt.Errorf("Get(%q) = %d bytes, %v", key, len(got), err)
					return
				}
				ops[w]++
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	down := time.Now()
	time.Sleep(2 * time.Second)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Logf("server was down for %v", time.Since(down).Round(time.Millisecond))
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("put+get pairs per worker: %v", ops)
	out := log.String()
	if !strings.Contains(out, "S3 endpoint failing; retrying") || !strings.Contains(out, "S3 endpoint answers again") {
		t.Errorf("log does not tell of the outage and the recovery:\n%s", out)
	}
	if strings.Contains(out, b.SecretKey) {
		t.Errorf("log shows the secret key:\n%s", out)
	}
}

// TestOutageTimeout checks that operations give up with a clear error once
// OutageTimeout has passed.
func TestOutageTimeout(t *testing.T) {
	srv := s3test.Shared(t)
	b := srv.NewBucket(t)
	ctx := t.Context()
	s := open(t, b, b.URL, s3.Options{OutageTimeout: time.Second})
	once := open(t, b, b.URL, s3.Options{OutageTimeout: -1})
	patient := open(t, b, b.URL, s3.Options{})
	if err := s.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	restart(t, srv)
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	want := "cannot reach S3 endpoint " + b.Endpoint
	check := func(op string, timeout time.Duration, f func() error) {
		t.Helper()
		start := time.Now()
		err := f()
		took := time.Since(start)
		switch {
		case err == nil:
			t.Errorf("%s with the server down succeeded", op)
		case !strings.Contains(err.Error(), want):
			t.Errorf("%s: err = %v, want %q", op, err, want)
		case errors.Is(err, object.ErrNotFound):
			t.Errorf("%s: err = %v is ErrNotFound", op, err)
		case !errors.Is(err, object.ErrUnavailable):
			t.Errorf("%s: err = %v does not wrap ErrUnavailable", op, err)
		}
		if took > timeout {
			t.Errorf("%s failed after %v, want within %v", op, took, timeout)
		}
		t.Logf("%s: %v after %v", op, err, took.Round(time.Millisecond))
	}
	check("Put", 3*time.Second, func() error { return s.Put(ctx, "k2", []byte("v")) })
	// The outage has lasted the timeout: the next operations try once
	// and fail, instead of waiting a timeout each.
	check("Get", 500*time.Millisecond, func() error { _, err := s.Get(ctx, "k", 0, -1); return err })
	check("Head", 500*time.Millisecond, func() error { _, err := s.Head(ctx, "k"); return err })
	check("Delete", 500*time.Millisecond, func() error { return s.Delete(ctx, "k") })
	check("List", 500*time.Millisecond, func() error {
		return s.List(ctx, "", func(object.Info) bool { return true })
	})
	check("Put without retries", time.Second, func() error { return once.Put(ctx, "k2", []byte("v")) })

	// The caller's context ends the wait.
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := patient.Put(cctx, "k3", []byte("v"))
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Errorf("Put with a context that ends during the outage: err = %v after %v, want DeadlineExceeded soon",
			err, time.Since(start))
	}
}

// TestOutageWaitForever: with WaitForever a Put waits through an outage
// longer than OutageTimeout and succeeds when the server is back.
func TestOutageWaitForever(t *testing.T) {
	srv := s3test.Shared(t)
	b := srv.NewBucket(t)
	s := open(t, b, b.URL, s3.Options{OutageTimeout: 500 * time.Millisecond, WaitForever: true})
	restart(t, srv)
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	back := make(chan error, 1)
	go func() {
		time.Sleep(2 * time.Second)
		back <- srv.Start()
	}()
	start := time.Now()
	if err := s.Put(t.Context(), "k", []byte("v")); err != nil {
		t.Errorf("Put through a 2 s outage with WaitForever: %v", err)
	}
	if took := time.Since(start); took < 1500*time.Millisecond {
		t.Errorf("Put returned after %v, before the server was back", took)
	}
	if err := <-back; err != nil {
		t.Fatal(err)
	}
}

// closedPort returns an endpoint where nothing listens.
func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	return "http://" + l.Addr().String()
}

func TestOpenErrors(t *testing.T) {
	b := s3test.NewBucket(t)
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		url  string
		opts s3.Options
		want string
	}{
		{
			name: "unreachable",
			url:  "s3://bucket?endpoint=" + closedPort(t),
			opts: s3.Options{AccessKey: "k", SecretKey: "s", OutageTimeout: 500 * time.Millisecond},
			want: "cannot reach S3 endpoint http://127.0.0.1:",
		},
		{
			name: "wrong secret",
			url:  b.URL,
			opts: s3.Options{AccessKey: b.AccessKey, SecretKey: "not-the-secret-123"},
			want: "S3 endpoint " + b.Endpoint + " refused the credentials (access key " + b.AccessKey + ")",
		},
		{
			name: "unknown access key",
			url:  b.URL,
			opts: s3.Options{AccessKey: "nobody", SecretKey: "not-the-secret-123"},
			want: "S3 endpoint " + b.Endpoint + " refused the credentials (access key nobody)",
		},
		{
			name: "missing bucket",
			url:  "s3://" + b.Name + "-missing/p?endpoint=" + b.Endpoint,
			opts: s3.Options{AccessKey: b.AccessKey, SecretKey: b.SecretKey},
			want: `bucket "` + b.Name + `-missing" does not exist at ` + b.Endpoint + " (format creates it)",
		},
		{
			name: "bad URL",
			url:  "s3://bucket?endpoint=localhost:7070",
			opts: s3.Options{AccessKey: "k", SecretKey: "s"},
			want: "bad URL",
		},
		{
			name: "bad options",
			url:  b.URL,
			opts: s3.Options{AccessKey: "k", SecretKey: "s", PartSize: 1 << 20},
			want: "PartSize",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			s, err := s3.Open(ctx, tc.url, tc.opts)
			if err == nil {
				t.Fatalf("Open succeeded: %v", s)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v\nwant it to contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "not-the-secret") || strings.Contains(err.Error(), b.SecretKey) {
				t.Errorf("err = %v shows a secret", err)
			}
			if took := time.Since(start); took > 3*time.Second {
				t.Errorf("Open failed after %v", took)
			}
			t.Log(err)
		})
	}
}

// noCredentials empties the environment's S3 credentials and points the
// shared files' defaults at an empty home.
func noCredentials(t *testing.T) {
	for _, v := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "MINIO_ROOT_USER", "MINIO_ROOT_PASSWORD",
		"AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI"} {
		t.Setenv(v, "")
	}
	t.Setenv("HOME", t.TempDir())
}

func TestCredentialsFromEnvironment(t *testing.T) {
	b := s3test.NewBucket(t)
	noCredentials(t)
	_, err := s3.Open(t.Context(), b.URL, s3.Options{})
	if err == nil || !strings.Contains(err.Error(), "no S3 credentials") || !strings.Contains(err.Error(), "AWS_ACCESS_KEY_ID") {
		t.Errorf("Open without credentials: err = %v, want 'no S3 credentials … AWS_ACCESS_KEY_ID'", err)
	}
	use := func(vars ...string) {
		t.Helper()
		for i := 0; i < len(vars); i += 2 {
			t.Setenv(vars[i], vars[i+1])
		}
		s, err := s3.Open(t.Context(), b.URL, s3.Options{})
		if err == nil {
			err = s.Put(t.Context(), "k", []byte("v"))
		}
		if err != nil {
			t.Errorf("with %s: %v", vars[0], err)
		}
		for i := 0; i < len(vars); i += 2 {
			t.Setenv(vars[i], "")
		}
	}
	use("MINIO_ROOT_USER", b.AccessKey, "MINIO_ROOT_PASSWORD", b.SecretKey)
	use("AWS_ACCESS_KEY_ID", b.AccessKey, "AWS_SECRET_ACCESS_KEY", b.SecretKey)
	// The AWS variables come first.
	use("AWS_ACCESS_KEY_ID", b.AccessKey, "AWS_SECRET_ACCESS_KEY", b.SecretKey, "MINIO_ROOT_USER", "wrong", "MINIO_ROOT_PASSWORD", "wrong")
}

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		opts s3.Options
		want string // "" for valid
	}{
		{s3.Options{}, ""},
		{s3.Options{AccessKey: "a", SecretKey: "s", SessionToken: "t"}, ""},
		{s3.Options{PartSize: s3.MinPartSize}, ""},
		{s3.Options{PartSize: s3.MinPartSize - 1}, "PartSize"},
		{s3.Options{PartSize: s3.MaxPartSize + 1}, "PartSize"},
		{s3.Options{MaxConns: -1}, "MaxConns"},
		{s3.Options{AccessKey: "a"}, "AccessKey and SecretKey"},
		{s3.Options{SecretKey: "s"}, "AccessKey and SecretKey"},
		{s3.Options{SessionToken: "t"}, "SessionToken"},
		{s3.Options{OutageTimeout: -1, MaxRetries: -1}, ""},
	} {
		err := tc.opts.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", tc.opts, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: err = %v, want %q", tc.opts, err, tc.want)
		}
	}
	var o s3.Options
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if o.OutageTimeout != s3.DefaultOutageTimeout || o.MaxRetries != s3.DefaultMaxRetries ||
		o.PartSize != s3.DefaultPartSize || o.MaxConns != s3.DefaultMaxConns || o.Logger == nil {
		t.Errorf("defaults not filled in: %+v", o)
	}
}

// faultyTransport fails the first n requests that match, with what fault
// returns, and passes everything else on.
type faultyTransport struct {
	next  http.RoundTripper
	match func(*http.Request) bool
	fault func(*http.Request, http.RoundTripper) (*http.Response, error)

	mu     sync.Mutex
	n      int // faults left to inject
	faults int // faults injected
}

func (f *faultyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	f.mu.Lock()
	hit := f.n > 0 && f.match(r)
	if hit {
		f.n--
		f.faults++
	}
	f.mu.Unlock()
	if hit {
		return f.fault(r, f.next)
	}
	return f.next.RoundTrip(r)
}

func (f *faultyTransport) injected() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.faults
}

// breakingBody returns n bytes of body, then a connection reset.
type breakingBody struct {
	body io.ReadCloser
	n    int
}

func (b *breakingBody) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, syscall.ECONNRESET
	}
	n, err := b.body.Read(p[:min(len(p), b.n)])
	b.n -= n
	return n, err
}

func (b *breakingBody) Close() error { return b.body.Close() }

func slowDown(r *http.Request, _ http.RoundTripper) (*http.Response, error) {
	body := `<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>`
	return &http.Response{
		Status:        "503 Service Unavailable",
		StatusCode:    http.StatusServiceUnavailable,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Type": {"application/xml"}},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       r,
	}, nil
}

// TestTransientFaults injects the faults a busy or flaky S3 service shows
// and checks that operations retry through them.
func TestTransientFaults(t *testing.T) {
	b := s3test.NewBucket(t)
	ctx := t.Context()
	ft := &faultyTransport{next: http.DefaultTransport}
	s := open(t, b, b.URL, s3.Options{Transport: ft})
	inject := func(n int, match func(*http.Request) bool, fault func(*http.Request, http.RoundTripper) (*http.Response, error)) {
		ft.mu.Lock()
		ft.n, ft.faults, ft.match, ft.fault = n, 0, match, fault
		ft.mu.Unlock()
	}

	t.Run("SlowDown", func(t *testing.T) {
		inject(2, func(r *http.Request) bool { return r.Method == http.MethodPut }, slowDown)
		if err := s.Put(ctx, "slow", []byte("data")); err != nil {
			t.Fatalf("Put through two 503 SlowDown: %v", err)
		}
		if got, err := s.Get(ctx, "slow", 0, -1); err != nil || string(got) != "data" {
			t.Fatalf("Get = %q, %v", got, err)
		}
		if ft.injected() != 2 {
			t.Fatalf("%d faults injected, want 2", ft.injected())
		}
	})

	t.Run("DamagedPayload", func(t *testing.T) {
		// One byte of a PUT's body flipped on the way: the server checks
		// the CRC-32C Put sends, refuses it, and Put sends it again.
		data := bytes.Repeat([]byte("0123456789abcdef"), 1<<14)
		inject(1, func(r *http.Request) bool { return r.Method == http.MethodPut },
			func(r *http.Request, next http.RoundTripper) (*http.Response, error) {
				body, err := io.ReadAll(r.Body)
				if err != nil {
					return nil, err
				}
				body[len(body)/2] ^= 1
				r.Body = io.NopCloser(bytes.NewReader(body))
				return next.RoundTrip(r)
			})
		if err := s.Put(ctx, "damaged", data); err != nil {
			t.Fatalf("Put through a damaged payload: %v", err)
		}
		if ft.injected() != 1 {
			t.Fatalf("%d faults injected, want 1", ft.injected())
		}
		if got, err := s.Get(ctx, "damaged", 0, -1); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("Get after a damaged PUT: %d bytes, equal %v, %v", len(got), bytes.Equal(got, data), err)
		}
	})

	t.Run("BrokenBody", func(t *testing.T) {
		data := bytes.Repeat([]byte("0123456789abcdef"), 1<<14)
		if err := s.Put(ctx, "body", data); err != nil {
			t.Fatal(err)
		}
		inject(1, func(r *http.Request) bool { return r.Method == http.MethodGet },
			func(r *http.Request, next http.RoundTripper) (*http.Response, error) {
				resp, err := next.RoundTrip(r)
				if err == nil {
					resp.Body = &breakingBody{body: resp.Body, n: 1000}
				}
				return resp, err
			})
		got, err := s.Get(ctx, "body", 5, -1)
		if err != nil || !bytes.Equal(got, data[5:]) {
			t.Fatalf("Get through a broken body: %d bytes, %v", len(got), err)
		}
		if ft.injected() != 1 {
			t.Fatalf("%d faults injected, want 1", ft.injected())
		}
	})

	t.Run("ListResumes", func(t *testing.T) {
		// More keys than one page of a listing (1,000).
		const n = 1100
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for w := range 8 {
			wg.Go(func() {
				for i := w; i < n; i += 8 {
					if err := s.Put(ctx, fmt.Sprintf("l/%04d", i), nil); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		// Break the request for the second page.
		inject(1, func(r *http.Request) bool { return r.URL.Query().Has("continuation-token") },
			func(*http.Request, http.RoundTripper) (*http.Response, error) { return nil, syscall.ECONNRESET })
		var got []string
		if err := s.List(ctx, "l/", func(i object.Info) bool {
			got = append(got, i.Key)
			return true
		}); err != nil {
			t.Fatal(err)
		}
		if ft.injected() != 1 {
			t.Fatalf("%d faults injected, want 1", ft.injected())
		}
		if len(got) != n {
			t.Fatalf("List through a broken page: %d keys, want %d", len(got), n)
		}
		for i, k := range got {
			if want := fmt.Sprintf("l/%04d", i); k != want {
				t.Fatalf("List through a broken page: key %d is %q, want %q", i, k, want)
			}
		}
	})

	t.Run("NotRetried", func(t *testing.T) {
		// An answer that will not change is not retried.
		inject(1, func(r *http.Request) bool { return r.Method == http.MethodPut },
			func(r *http.Request, _ http.RoundTripper) (*http.Response, error) {
				resp, _ := slowDown(r, nil)
				resp.StatusCode, resp.Status = http.StatusBadRequest, "400 Bad Request"
				body := `<Error><Code>InvalidArgument</Code><Message>refused on purpose</Message></Error>`
				resp.Body, resp.ContentLength = io.NopCloser(strings.NewReader(body)), int64(len(body))
				return resp, nil
			})
		if err := s.Put(ctx, "bad", []byte("x")); err == nil || !strings.Contains(err.Error(), "refused on purpose") {
			t.Fatalf("Put answered 400: err = %v", err)
		}
		if err := s.Put(ctx, "bad", []byte("x")); err != nil {
			t.Fatalf("Put after the fault: %v", err)
		}
	})
}

// TestCredentialsFromSharedFile: the key pair comes from a shared
// credentials file, its profile chosen by Options or AWS_PROFILE, the file
// by Options or AWS_SHARED_CREDENTIALS_FILE (or ~/.aws/credentials); the
// environment's keys come first; a file without the profile, or missing,
// is an error that names it.
func TestCredentialsFromSharedFile(t *testing.T) {
	b := s3test.NewBucket(t)
	noCredentials(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "credentials")
	body := fmt.Sprintf("[default]\naws_access_key_id = wrong\naws_secret_access_key = wrong\n\n[cairn]\naws_access_key_id = %s\naws_secret_access_key = %s\n", b.AccessKey, b.SecretKey)
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	works := func(what string, o s3.Options) {
		t.Helper()
		s, err := s3.Open(t.Context(), b.URL, o)
		if err == nil {
			err = s.Put(t.Context(), "k", []byte("v"))
			s.Close()
		}
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
	works("Options.CredentialsFile and Profile", s3.Options{CredentialsFile: file, Profile: "cairn"})
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", file)
	t.Setenv("AWS_PROFILE", "cairn")
	works("AWS_SHARED_CREDENTIALS_FILE and AWS_PROFILE", s3.Options{})
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "")
	if err := os.MkdirAll(filepath.Join(os.Getenv("HOME"), ".aws"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(os.Getenv("HOME"), ".aws", "credentials"), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	works("~/.aws/credentials", s3.Options{})
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_ACCESS_KEY_ID", b.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", b.SecretKey)
	works("the environment before the file's wrong default profile", s3.Options{})
	noCredentials(t)

	for _, c := range []struct {
		o    s3.Options
		want string
	}{
		{s3.Options{CredentialsFile: file, Profile: "nope"}, `has no key pair for profile "nope"`},
		{s3.Options{CredentialsFile: filepath.Join(dir, "missing")}, "missing"},
	} {
		_, err := s3.Open(t.Context(), b.URL, c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "credentials") {
			t.Errorf("Open with %+v: %v, want an error with %q", c.o, err, c.want)
		}
	}
	_, err := s3.Open(t.Context(), b.URL, s3.Options{})
	if err == nil || !strings.Contains(err.Error(), "tried") || !strings.Contains(err.Error(), "shared credentials file") {
		t.Errorf("Open with no credentials anywhere: %v, want what it tried", err)
	}
}

// TestTwoGateways: a store given two gateways to one bucket goes on
// through the second when the first dies, at once (no outage wait), and
// back through the first when the second dies after it came back.
func TestTwoGateways(t *testing.T) {
	srv := s3test.Shared(t)
	b := srv.NewBucket(t)
	twin := srv.Twin(t)
	restart(t, srv)
	url := strings.Replace(b.URL, srv.Endpoint, srv.Endpoint+","+twin.Endpoint, 1)
	var log testenv.LogBuffer
	s := open(t, b, url, s3.Options{Logger: slog.New(slog.NewTextHandler(&log, nil)), OutageTimeout: time.Minute})
	if got := s.Location().Endpoints(); len(got) != 2 {
		t.Fatalf("endpoints %q, want two", got)
	}
	ctx := t.Context()
	put := func(key string) {
		t.Helper()
		start := time.Now()
		if err := s.Put(ctx, key, []byte(key)); err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
		got, err := object.ReadAll(ctx, s, key)
		if err != nil || string(got) != key {
			t.Fatalf("get %s: %q %v", key, got, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("put and get of %s took %v: it waited instead of moving to the other gateway", key, d)
		}
	}
	put("a")
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	put("b")
	if !strings.Contains(log.String(), "trying the next") {
		t.Fatalf("no move to the second gateway logged:\n%s", log.String())
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	if err := twin.Stop(); err != nil {
		t.Fatal(err)
	}
	put("c")
	for _, k := range []string{"a", "b", "c"} {
		if _, err := s.Head(ctx, k); err != nil {
			t.Fatalf("head %s after both moves: %v", k, err)
		}
	}
}
