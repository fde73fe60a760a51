// Package s3test runs a real S3 server (versitygw with its posix backend) for
// tests: one server per test binary, started on first use on a private
// loopback port with its data in a private temporary directory, and stopped
// when the binary ends. Tests get a fresh bucket each from NewBucket.
//
// A package that uses it must call Main from its TestMain:
//
//	func TestMain(m *testing.M) { s3test.Main(m) }
//
// The server binary is $CAIRN_VERSITYGW, else $GOPATH/bin/versitygw (GOPATH
// defaulting to ~/go), else versitygw on $PATH. When it is missing, tests
// that ask for the server are skipped, unless CAIRN_REQUIRE_SHARED=1: then
// they fail. A server that is present but does not start always fails the
// test.
//
// Several test binaries may run at once (go test ./... runs packages
// concurrently): each has its own server, port and directories. On Linux
// the server dies with the test binary even when Main does not get to stop
// it (a test timeout).
//
// Fault tests take the server away with Server.Stop, which kills it as a
// crash would, and bring it back with Server.Start, on the same port with
// the same data. Such a test must not run in parallel with other tests of
// its binary.
//
// The package only runs the server and hands out buckets; it knows nothing of
// Cairn's object store, and nothing in Cairn may import it outside tests.
package s3test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/cairnfs/cairn/internal/testenv"
)

// Environment variables read by the package.
const (
	// EnvBinary names the versitygw binary to run.
	EnvBinary = "CAIRN_VERSITYGW"
	// EnvRequire, when "1", turns a missing server binary from a skip into
	// a test failure (for CI, where the server must be there).
	EnvRequire = testenv.EnvRequire
)

// startTimeout bounds how long a start waits for the server to answer.
const startTimeout = 30 * time.Second

var shared = testenv.Server[*Server]{Name: "s3test", Hint: "install versitygw (scripts/install-test-deps.sh) or set " + EnvBinary, Find: binary, Start: start, Stop: (*Server).shutdown}

// Main runs the tests of a package that uses the server, then stops the
// server (if a test started it) and removes its data. Call it from TestMain;
// when TestMain returns, the test binary exits with the result of the tests.
func Main(m *testing.M) { Wrap(func() { m.Run() }) }

// Wrap runs run (which runs the tests) and then stops the server, like
// Main; it lets a TestMain nest the servers of several packages:
// pgtest.Wrap(func() { s3test.Main(m) }).
func Wrap(run func()) { shared.Wrap(run) }

// Shared returns the test binary's server, starting it on the first call. It
// skips tb when the server binary is missing (fails it instead when
// CAIRN_REQUIRE_SHARED=1) and fails tb when the server does not start or the
// package's TestMain does not call Main.
func Shared(tb testing.TB) *Server {
	tb.Helper()
	return shared.Get(tb)
}

// NewBucket is Shared(tb).NewBucket(tb).
func NewBucket(tb testing.TB) Bucket {
	tb.Helper()
	return Shared(tb).NewBucket(tb)
}

// binary finds the server binary, or says why there is none.
func binary() (path, why string) {
	if p := os.Getenv(EnvBinary); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Sprintf("%s=%s: %v", EnvBinary, p, err)
		}
		return p, ""
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		if home, err := os.UserHomeDir(); err == nil {
			gopath = filepath.Join(home, "go")
		}
	}
	var tried []string
	for dir := range strings.SplitSeq(gopath, string(os.PathListSeparator)) {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, "bin", "versitygw")
		if _, err := os.Stat(p); err == nil {
			return p, ""
		}
		tried = append(tried, p)
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, ""
	}
	tried = append(tried, "versitygw on $PATH")
	return "", fmt.Sprintf("S3 server versitygw not found (tried %s)", strings.Join(tried, ", "))
}

// Server is a running versitygw. Its exported fields do not change after
// start. Stop and Start take it away and bring it back; the other methods
// are safe for concurrent use, but a test that stops the server must not run
// in parallel with other tests of its binary.
type Server struct {
	// Endpoint is the server's URL, "http://127.0.0.1:PORT".
	Endpoint string
	// AccessKey and SecretKey are the root credentials, random per server.
	AccessKey, SecretKey string

	bin      string
	dir      string // private temporary directory holding everything below
	dataDir  string // posix backend root: one directory per bucket
	metaDir  string // sidecar metadata
	logPath  string // server output
	lastWait string // why the last readiness probe failed (for the log of a slow start)
	addr     string // 127.0.0.1:PORT

	admin   *minio.Client // for making buckets and checking readiness
	buckets atomic.Int64

	mu   sync.Mutex
	proc *exec.Cmd     // nil while stopped
	done chan struct{} // closed when proc has exited
}

func start(bin string) (*Server, error) {
	dir, err := os.MkdirTemp("", "cairn-s3test-")
	if err != nil {
		return nil, err
	}
	s := &Server{
		AccessKey: "cairn" + randHex(1),
		SecretKey: randHex(2),
		bin:       bin,
		dir:       dir,
		dataDir:   filepath.Join(dir, "data"),
		metaDir:   filepath.Join(dir, "meta"),
		logPath:   filepath.Join(dir, "server.log"),
	}
	for _, d := range []string{s.dataDir, s.metaDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	// Another process can take a free port between our probe and the
	// server's bind: try a few.
	for range 10 {
		var port int
		if port, err = freePort(); err != nil {
			break
		}
		s.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		s.Endpoint = "http://" + s.addr
		s.admin, err = minio.New(s.addr, &minio.Options{
			Creds:      credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
			Region:     "us-east-1",
			MaxRetries: 1,
		})
		if err != nil {
			break
		}
		if err = s.Start(); err == nil {
			return s, nil
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	os.RemoveAll(dir)
	return nil, err
}

// freePort returns a loopback port that is free now. It picks below the
// kernel's ephemeral range, so that outgoing connections of other tests
// cannot take it while the server is stopped.
func freePort() (int, error) {
	lo, hi := 20000, 32000
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 11000 {
				hi = n
				lo = min(lo, hi-1000)
			}
		}
	}
	var err error
	for range 100 {
		port := lo + rand.IntN(hi-lo)
		var l net.Listener
		if l, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
			l.Close()
			return port, nil
		}
	}
	return 0, err
}

// randHex returns 16*n random hex digits. The keys only keep tests honest,
// so they need not be cryptographically random.
func randHex(n int) string {
	var b strings.Builder
	for range n {
		fmt.Fprintf(&b, "%016x", rand.Uint64())
	}
	return b.String()
}

// Start starts the server, on the same port and with the same data as
// before, and waits until it answers. Starting a running server does
// nothing.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return nil
	}
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "--- s3test: starting on %s\n", s.addr)
	start, _ := logf.Seek(0, 1)
	args := []string{
		"--access", s.AccessKey, "--secret", s.SecretKey,
		"--port", s.addr, "--keep-alive", "--quiet",
		"posix",
	}
	if !xattrs(s.dataDir) {
		// The posix backend keeps metadata in extended attributes,
		// else in files of a sidecar directory (slower).
		args = append(args, "--sidecar", s.metaDir)
	}
	cmd := exec.Command(s.bin, append(args, s.dataDir)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// The server must not outlive the test binary, even one killed by
	// a test timeout.
	cmd.SysProcAttr = dieWithParent()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t0 := time.Now()
	if err := s.waitReady(done); err != nil {
		cmd.Process.Kill()
		<-done
		out, _ := os.ReadFile(s.logPath)
		if int64(len(out)) >= start {
			out = out[start:]
		}
		return fmt.Errorf("versitygw on %s: %w; its output:\n%s", s.addr, err, bytes.TrimSpace(out))
	}
	s.proc, s.done = cmd, done
	if took := time.Since(t0); took > 2*time.Second {
		if f, err := os.OpenFile(s.logPath, os.O_WRONLY|os.O_APPEND, 0o600); err == nil {
			fmt.Fprintf(f, "--- s3test: ready after %v (slow: %s)\n", took, s.lastWait)
			f.Close()
		}
	}
	return nil
}

// waitReady polls the server with an authenticated request until it answers.
func (s *Server) waitReady(done <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for {
		select {
		case <-done:
			return errors.New("exited during start")
		default:
		}
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		t0 := time.Now()
		_, err := s.admin.ListBuckets(rctx)
		rcancel()
		if err == nil {
			return nil
		}
		s.lastWait = fmt.Sprintf("last try failed after %v: %v", time.Since(t0), err)
		select {
		case <-done:
			return errors.New("exited during start")
		case <-ctx.Done():
			return fmt.Errorf("not answering after %v: %w", startTimeout, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Stop kills the server abruptly, as a crash would, and waits until it is
// gone; the data stays. Stopping a stopped server does nothing.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return nil
	}
	if err := s.proc.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	<-s.done
	s.proc, s.done = nil, nil
	return nil
}

// shutdown stops the server and removes its directory.
func (s *Server) shutdown() {
	s.Stop()
	os.RemoveAll(s.dir)
}

// Bucket is an empty bucket made for one test.
type Bucket struct {
	// Name is the bucket's name.
	Name string
	// URL is Cairn's data URL for the bucket:
	// "s3://NAME?endpoint=http://127.0.0.1:PORT". Append a path for a
	// prefix inside the bucket ("s3://NAME/PREFIX?endpoint=…").
	URL string
	// Endpoint is the server's URL, as in Server.
	Endpoint string
	// AccessKey and SecretKey are the credentials that may use the bucket
	// (the server's root credentials).
	AccessKey, SecretKey string
}

// NewBucket makes a new, uniquely named, empty bucket and removes it with
// everything in it when tb ends.
func (s *Server) NewBucket(tb testing.TB) Bucket {
	tb.Helper()
	b := s.MissingBucket(tb)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := s.admin.MakeBucket(ctx, b.Name, minio.MakeBucketOptions{}); err != nil {
		tb.Fatalf("s3test: make bucket %s: %v", b.Name, err)
	}
	return b
}

// MissingBucket returns a bucket with a new, unique name that does not
// exist, for tests of missing buckets and of bucket creation. If the test
// makes it, it is removed with everything in it when tb ends.
func (s *Server) MissingBucket(tb testing.TB) Bucket {
	tb.Helper()
	name := fmt.Sprintf("t%d-%s", s.buckets.Add(1), bucketSuffix(tb.Name()))
	tb.Cleanup(func() {
		// The server keeps nothing about a bucket outside these
		// directories, so removing them, even with the server
		// stopped, removes the bucket.
		for _, d := range []string{s.dataDir, s.metaDir} {
			if err := os.RemoveAll(filepath.Join(d, name)); err != nil {
				tb.Logf("s3test: remove bucket %s: %v", name, err)
			}
		}
	})
	return Bucket{
		Name:      name,
		URL:       "s3://" + name + "?endpoint=" + s.Endpoint,
		Endpoint:  s.Endpoint,
		AccessKey: s.AccessKey,
		SecretKey: s.SecretKey,
	}
}

// bucketSuffix turns a test name into characters a bucket name may hold,
// short enough that the name stays under S3's 63 bytes.
func bucketSuffix(testName string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(testName) {
		switch {
		case r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
			dash = false
		case !dash && b.Len() > 0:
			b.WriteByte('-')
			dash = true
		}
		if b.Len() >= 40 {
			break
		}
	}
	out := strings.TrimRight(b.String(), "-")
	if out == "" {
		out = "bucket"
	}
	return out
}

// Log returns what the server and s3test wrote to the server's log.
func (s *Server) Log() string {
	b, _ := os.ReadFile(s.logPath)
	return string(b)
}

// Twin starts a second server over the same data and with the same keys as
// s, on a port of its own: two S3 gateways over one store, as a cluster
// runs them. It is stopped when tb ends.
func (s *Server) Twin(tb testing.TB) *Server {
	tb.Helper()
	t := &Server{AccessKey: s.AccessKey, SecretKey: s.SecretKey, bin: s.bin, dir: s.dir,
		dataDir: s.dataDir, metaDir: s.metaDir, logPath: s.logPath + ".twin"}
	var err error
	for range 10 {
		var port int
		if port, err = freePort(); err != nil {
			break
		}
		t.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		t.Endpoint = "http://" + t.addr
		if t.admin, err = minio.New(t.addr, &minio.Options{
			Creds:      credentials.NewStaticV4(t.AccessKey, t.SecretKey, ""),
			Region:     "us-east-1",
			MaxRetries: 1,
		}); err != nil {
			break
		}
		if err = t.Start(); err == nil || !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	if err != nil {
		tb.Fatalf("s3test: a twin server: %v", err)
	}
	tb.Cleanup(func() { _ = t.Stop() })
	return t
}
