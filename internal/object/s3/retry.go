package s3

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/cairnfs/cairn/internal/object"
)

// retrier runs one operation's retries: it decides whether a failure is
// worth another try, waits the back-off, and turns the final failure into
// a clear error.
type retrier struct {
	s        *Store
	op, key  string
	tries    int       // failures since the last progress
	since    time.Time // first failure since the last progress
	delay    time.Duration
	lastWarn bool // this operation reported the outage
}

func (s *Store) retrier(op, key string) *retrier {
	return &retrier{s: s, op: op, key: key, delay: minBackoff}
}

// do runs fn until it succeeds, fails with an error that is not transient,
// or the retries run out (see Options.OutageTimeout).
func (s *Store) do(ctx context.Context, op, key string, fn func(context.Context) error) error {
	r := s.retrier(op, key)
	hops := 0 // endpoints tried at once since the last back-off
	for {
		at := s.cur.Load()
		err := fn(ctx)
		if err == nil {
			r.progress()
			return nil
		}
		if hops < len(s.endpoints)-1 && transient(err) && ctx.Err() == nil && (s.failOver(at) || s.cur.Load() != at) {
			// Another gateway to the same store, at once; once each
			// has failed in a row, the back-off as with one.
			hops++
			continue
		}
		hops = 0
		if err = r.wait(ctx, err); err != nil {
			return err
		}
	}
}

// progress records a success: the next failure starts a new count, and a
// store that was down is up again.
func (r *retrier) progress() {
	if r.s.down.Load() && r.s.down.CompareAndSwap(true, false) {
		r.s.log.Info("S3 endpoint answers again", "endpoint", r.s.ep(), "op", r.op, "key", r.key)
	}
	r.tries, r.delay = 0, minBackoff
}

// wait returns nil after the back-off if err is worth another try, else
// the error the operation fails with.
func (r *retrier) wait(ctx context.Context, err error) error {
	if ctx.Err() != nil || !transient(err) || !r.s.opts.retries() {
		return r.s.fail(r.op, r.key, err, r.tries+1, r.elapsed())
	}
	if r.tries == 0 {
		r.since = time.Now()
	}
	r.tries++
	d := r.delay/2 + rand.N(r.delay/2)
	if !r.s.opts.WaitForever && (r.tries > r.s.opts.MaxRetries || d > r.s.opts.OutageTimeout-r.outage()) {
		return r.s.fail(r.op, r.key, err, r.tries, r.elapsed())
	}
	if r.s.down.CompareAndSwap(false, true) {
		r.s.downSince.Store(r.since.UnixNano())
		limit := r.s.opts.OutageTimeout.String()
		if r.s.opts.WaitForever {
			limit = "ever"
		}
		r.s.log.Warn("S3 endpoint failing; retrying", "endpoint", r.s.ep(), "op", r.op, "key", r.key,
			"for", limit, "err", err)
	}
	r.delay = min(2*r.delay, maxBackoff)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return r.s.fail(r.op, r.key, fmt.Errorf("%w (while retrying after: %v)", ctx.Err(), err), r.tries, r.elapsed())
	}
}

func (r *retrier) elapsed() time.Duration {
	if r.tries == 0 {
		return 0
	}
	return time.Since(r.since)
}

// outage is how long the endpoint has been failing: since this
// operation's first failure, or since another operation's if the store
// has been down since before that (no success in between).
func (r *retrier) outage() time.Duration {
	since := r.since
	if t := r.s.downSince.Load(); r.s.down.Load() && t != 0 && t < since.UnixNano() {
		since = time.Unix(0, t)
	}
	return time.Since(since)
}

// transient reports whether err may go away if the request is repeated:
// the endpoint could not be reached or broke the connection, timed out,
// throttled, or failed on its side (5xx).
func transient(err error) bool {
	var er minio.ErrorResponse
	if errors.As(err, &er) {
		switch er.StatusCode {
		case http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusInternalServerError,
			http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return true
		}
		switch er.Code {
		case "RequestTimeout", "InternalError", "ServiceUnavailable", "SlowDown", "SlowDownRead",
			"SlowDownWrite", "Throttling", "ThrottlingException", "RequestLimitExceeded", "RequestThrottled":
			return true
		case "BadDigest":
			// The payload did not match its checksum (Put sends one):
			// damaged on the way. The caller's copy is whole; send it
			// again.
			return true
		}
		return false
	}
	if reachability(err) {
		return true
	}
	// A connection that broke while a response body was being read.
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// reachability reports whether err says the endpoint could not be reached
// or did not answer (as opposed to answering with an error). Certificate
// errors do not count: they will not go away.
func reachability(err error) bool {
	var (
		unknownCA *x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		verify    *tls.CertificateVerificationError
		ue        *url.Error
		ne        net.Error
	)
	switch {
	case errors.As(err, &unknownCA), errors.As(err, &hostname), errors.As(err, &invalid), errors.As(err, &verify):
		return false
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The caller's context; a timeout of the transport is a net.Error.
		return false
	}
	return errors.As(err, &ue) || errors.As(err, &ne) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// Codes with which S3 refuses the credentials themselves.
var credentialCodes = map[string]bool{
	"InvalidAccessKeyId":    true,
	"SignatureDoesNotMatch": true,
	"InvalidToken":          true,
	"ExpiredToken":          true,
	"InvalidClientTokenId":  true,
	"TokenRefreshRequired":  true,
	"AccessDenied":          true,
	"AllAccessDisabled":     true,
	"XAdminUserNotFound":    true, // versitygw's InvalidAccessKeyId
}

// fail turns the final error of an operation into the one it returns:
// ErrNotFound for a missing object and errors that say what to do for the
// usual failures, every one wrapping err.
func (s *Store) fail(op, key string, err error, tries int, elapsed time.Duration) error {
	what := op
	if key != "" || op == "list" {
		what = fmt.Sprintf("%s %q", op, key)
	}
	var er minio.ErrorResponse
	if errors.As(err, &er) {
		switch {
		case er.Code == "NoSuchBucket":
			return fmt.Errorf("object/s3: %s: bucket %q does not exist at %s (format creates it): %w",
				what, s.loc.Bucket, s.ep(), err)
		case credentialCodes[er.Code] || er.StatusCode == http.StatusForbidden:
			return fmt.Errorf("object/s3: %s: S3 endpoint %s refused the credentials (access key %s) from %s for bucket %q: %w",
				what, s.ep(), s.accessKey, s.credsFrom, s.loc.Bucket, err)
		}
	}
	if !transient(err) || tries <= 1 {
		if reachability(err) {
			return fmt.Errorf("object/s3: %s: cannot reach S3 endpoint %s: %w", what, s.ep(), unavailableError{err})
		}
		return fmt.Errorf("object/s3: %s: %w", what, err)
	}
	gaveUp := fmt.Sprintf("gave up after %d tries in %v", tries, elapsed.Round(time.Millisecond))
	if reachability(err) {
		return fmt.Errorf("object/s3: %s: cannot reach S3 endpoint %s (%s): %w", what, s.ep(), gaveUp, unavailableError{err})
	}
	return fmt.Errorf("object/s3: %s: S3 endpoint %s kept failing (%s): %w", what, s.ep(), gaveUp, unavailableError{err})
}

// unavailableError marks the final error of an operation that the
// endpoint's outage ended: it matches object.ErrUnavailable and says what
// err says.
type unavailableError struct{ err error }

func (e unavailableError) Error() string   { return e.err.Error() }
func (e unavailableError) Unwrap() []error { return []error{object.ErrUnavailable, e.err} }
