package s3

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Defaults and limits of Options.
const (
	DefaultOutageTimeout = 30 * time.Second
	DefaultMaxRetries    = 100
	DefaultPartSize      = 16 << 20
	// MinPartSize and MaxPartSize are S3's limits on a multipart part.
	MinPartSize = 5 << 20
	MaxPartSize = 5 << 30
	// DefaultMaxConns is the default number of idle connections kept per
	// endpoint.
	DefaultMaxConns = 128
)

// Back-off between retries: doubling from minBackoff up to maxBackoff, each
// wait drawn at random from [d/2, d).
const (
	minBackoff = 50 * time.Millisecond
	maxBackoff = time.Second
)

// Options configure a Store. The zero value uses the defaults.
type Options struct {
	// AccessKey and SecretKey authenticate to the endpoint; SessionToken
	// goes with temporary credentials. When AccessKey is empty, they come
	// from the first of these that has a key pair, as the AWS tools look
	// for them: the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY
	// and AWS_SESSION_TOKEN, else MINIO_ROOT_USER and MINIO_ROOT_PASSWORD);
	// the shared credentials and config files (CredentialsFile, else
	// AWS_SHARED_CREDENTIALS_FILE and AWS_CONFIG_FILE or ~/.aws/credentials
	// and ~/.aws/config; profile Profile, else AWS_PROFILE or "default");
	// and, for AWS's own endpoint or where the environment names one
	// (AWS_WEB_IDENTITY_TOKEN_FILE, AWS_CONTAINER_CREDENTIALS_*), a web
	// identity, container or instance role, renewed before it expires.
	// Open fails, naming what it tried, when none gives a key pair. The
	// secret is never logged or put into an error.
	AccessKey, SecretKey, SessionToken string
	// CredentialsFile and Profile choose the shared credentials file and
	// its profile (see AccessKey). A CredentialsFile that cannot be read,
	// or lacks the profile, fails Open.
	CredentialsFile, Profile string

	// Create makes Open create the bucket when it does not exist;
	// otherwise a missing bucket fails Open.
	Create bool

	// Logger receives outage warnings and recoveries. Default: discard.
	Logger *slog.Logger

	// OutageTimeout bounds how long one operation keeps retrying while
	// the endpoint cannot be reached or fails with a transient error
	// (5xx, throttling), counted from the operation's first failure; it
	// then fails. Default DefaultOutageTimeout; negative: fail at the
	// first error without retrying. The clock is the store's: an operation
	// that starts when the endpoint has been failing for OutageTimeout
	// tries once and fails, rather than waiting a whole timeout again.
	OutageTimeout time.Duration
	// WaitForever retries through an outage of any length (as an NFS hard
	// mount does); only the operation's context ends the wait. It
	// overrides OutageTimeout and MaxRetries for transient failures.
	WaitForever bool
	// MaxRetries bounds the number of retries of one operation within
	// OutageTimeout. Default DefaultMaxRetries, which the back-off (at
	// most a second between tries) makes larger than the default
	// OutageTimeout needs; negative: no retries.
	MaxRetries int

	// PartSize is the part size of multipart uploads. Objects up to
	// PartSize bytes are written with one plain PUT (every object Cairn
	// writes is), larger ones in parts of PartSize bytes uploaded in
	// parallel. Default DefaultPartSize; at least MinPartSize and at most
	// MaxPartSize.
	PartSize int64

	// MaxConns is the number of idle connections kept open to the
	// endpoint for reuse (clients do many parallel range GETs). Default
	// DefaultMaxConns; at least 1.
	MaxConns int

	// Transport replaces the tuned HTTP transport Open builds; tests use
	// it to inject faults. MaxConns does not apply to it.
	Transport http.RoundTripper
}

// Validate checks the options and fills in defaults.
func (o *Options) Validate() error {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.OutageTimeout == 0 {
		o.OutageTimeout = DefaultOutageTimeout
	}
	if o.MaxRetries == 0 {
		o.MaxRetries = DefaultMaxRetries
	}
	if o.PartSize == 0 {
		o.PartSize = DefaultPartSize
	}
	if o.PartSize < MinPartSize || o.PartSize > MaxPartSize {
		return fmt.Errorf("object/s3: PartSize %d outside [%d, %d]", o.PartSize, MinPartSize, MaxPartSize)
	}
	if o.MaxConns == 0 {
		o.MaxConns = DefaultMaxConns
	}
	if o.MaxConns < 0 {
		return fmt.Errorf("object/s3: negative MaxConns %d", o.MaxConns)
	}
	if (o.AccessKey == "") != (o.SecretKey == "") {
		return errors.New("object/s3: AccessKey and SecretKey go together: set both or neither")
	}
	if o.AccessKey == "" && o.SessionToken != "" {
		return errors.New("object/s3: SessionToken without AccessKey and SecretKey")
	}
	return nil
}

// retries reports whether the options allow any retry.
func (o *Options) retries() bool {
	return o.WaitForever || o.OutageTimeout > 0 && o.MaxRetries > 0
}

// credentials returns the credentials to sign with, and where they came
// from: the options, else the first source of the chain (AccessKey) that
// has a key pair. aws: the endpoint is AWS's own, where an instance role
// may be asked for.
func (o *Options) credentials(aws bool) (*credentials.Credentials, string, error) {
	if o.AccessKey != "" {
		return credentials.NewStaticV4(o.AccessKey, o.SecretKey, o.SessionToken), "options", nil
	}
	file := &credentials.FileAWSCredentials{Filename: o.CredentialsFile, Profile: o.Profile}
	if o.CredentialsFile != "" {
		if _, err := os.Stat(o.CredentialsFile); err != nil {
			return nil, "", fmt.Errorf("object/s3: S3 credentials file: %w", err)
		}
		if v, err := file.Retrieve(); err != nil || v.AccessKeyID == "" {
			return nil, "", fmt.Errorf("object/s3: S3 credentials file %s has no key pair for profile %q (%v)", o.CredentialsFile, profileName(o.Profile), err)
		}
	}
	sources := []struct {
		name string
		p    credentials.Provider
	}{
		{"AWS_ACCESS_KEY_ID in the environment", &credentials.EnvAWS{}},
		{"MINIO_ROOT_USER in the environment", &credentials.EnvMinio{}},
		{"the shared credentials file, profile " + profileName(o.Profile), file},
	}
	role := aws
	for _, v := range []string{"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI"} {
		role = role || os.Getenv(v) != ""
	}
	if role {
		sources = append(sources, struct {
			name string
			p    credentials.Provider
		}{"a web identity, container or instance role", &credentials.IAM{Client: &http.Client{Timeout: 5 * time.Second}}})
	}
	var tried []string
	for _, s := range sources {
		if v, err := s.p.Retrieve(); err == nil && v.AccessKeyID != "" && v.SecretAccessKey != "" {
			return credentials.New(s.p), s.name, nil
		}
		tried = append(tried, s.name)
	}
	return nil, "", fmt.Errorf("object/s3: no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or MINIO_ROOT_USER and MINIO_ROOT_PASSWORD) in the environment, or give a shared credentials file; tried %s",
		strings.Join(tried, ", "))
}

// profileName is the profile the shared files are read for.
func profileName(p string) string {
	switch {
	case p != "":
		return p
	case os.Getenv("AWS_PROFILE") != "":
		return os.Getenv("AWS_PROFILE")
	}
	return "default"
}

// transport returns the HTTP transport for the endpoint: many idle
// connections per host for parallel range GETs, bounded dial and header
// waits so that a dead endpoint fails a request (which is then retried)
// instead of hanging it, and no transparent compression, which would break
// ranges.
func (o *Options) transport() http.RoundTripper {
	if o.Transport != nil {
		return o.Transport
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dialer.DialContext,
		MaxIdleConns:          o.MaxConns,
		MaxIdleConnsPerHost:   o.MaxConns,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		ResponseHeaderTimeout: time.Minute,
		DisableCompression:    true,
		TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS12},
	}
}
