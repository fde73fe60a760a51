// Package pgtest runs a real PostgreSQL server for tests: one server per test
// binary, started on first use with its data directory and socket in a
// private temporary directory, and stopped when the binary ends. Tests get a
// fresh database each from NewDatabase.
//
// A package that uses it must call Main from its TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// The server listens only on a Unix socket in its directory
// (listen_addresses is empty), so it needs no free TCP port and several test
// binaries can run at once (go test ./... runs packages concurrently): each
// has its own directory, socket and port number; the port number only names
// the socket and keys System V shared memory, and is derived from the
// process id so that concurrent binaries do not probe each other's keys. It
// runs with fsync and synchronous_commit on, as in production.
//
// The binaries (initdb, postgres) are taken from $CAIRN_PG_BIN, else the
// newest /usr/lib/postgresql/*/bin (Debian's layout), else $PATH. When they
// are missing, tests that ask for the server are skipped, unless
// CAIRN_REQUIRE_SHARED=1: then they fail. A server that is present but does
// not start always fails the test, with the output of initdb or postgres.
//
// PostgreSQL refuses to run as root. When the tests run as root the server
// runs as the "postgres" system user (the process credentials are set
// directly, as runuser would), which then owns the temporary directory.
// The server dies with the test binary, even one killed by a test timeout
// (the kernel sends it SIGQUIT, PostgreSQL's immediate shutdown); only the
// temporary directory then remains.
//
// Stop, Kill and Start take the server away and bring it back on the same
// socket with the same data, for fault tests.
//
// The package only runs the server and hands out databases; it knows nothing
// of Cairn's key-value store, and nothing in Cairn may import it outside
// tests.
package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cairnfs/cairn/internal/testenv"
)

// Environment variables read by the package.
const (
	// EnvBin names the directory holding initdb and postgres.
	EnvBin = "CAIRN_PG_BIN"
	// EnvRequire, when "1", turns missing PostgreSQL binaries from a skip
	// into a test failure (for CI, where the server must be there).
	EnvRequire = testenv.EnvRequire
)

// User is the server's superuser, which NewDatabase's URLs connect as
// (trust authentication: no password).
const User = "postgres"

// startTimeout bounds how long a start waits for the server to accept
// connections (crash recovery after Kill included).
const startTimeout = 60 * time.Second

var shared = testenv.Server[*Server]{Name: "pgtest", Hint: "install PostgreSQL or set " + EnvBin, Find: binaries, Start: start, Stop: (*Server).shutdown}

// Main runs the tests of a package that uses the server, then stops the
// server (if a test started it) and removes its directory. Call it from
// TestMain; when TestMain returns, the test binary exits with the result of
// the tests.
func Main(m *testing.M) { Wrap(func() { m.Run() }) }

// Wrap runs run (which runs the tests) and then stops the server, like
// Main; it lets a TestMain nest the servers of several packages:
// pgtest.Wrap(func() { s3test.Main(m) }).
func Wrap(run func()) { shared.Wrap(run) }

// Shared returns the test binary's server, starting it on the first call. It
// skips tb when the PostgreSQL binaries are missing (fails it instead when
// CAIRN_REQUIRE_SHARED=1) and fails tb when the server does not start or the
// package's TestMain does not call Main.
func Shared(tb testing.TB) *Server {
	tb.Helper()
	return shared.Get(tb)
}

// NewDatabase is Shared(tb).NewDatabase(tb).
func NewDatabase(tb testing.TB) string {
	tb.Helper()
	return Shared(tb).NewDatabase(tb)
}

// binaries finds the directory holding initdb and postgres, or says why
// there is none.
func binaries() (dir, why string) {
	has := func(d string) bool {
		for _, name := range []string{"initdb", "postgres"} {
			if fi, err := os.Stat(filepath.Join(d, name)); err != nil || fi.IsDir() {
				return false
			}
		}
		return true
	}
	if d := os.Getenv(EnvBin); d != "" {
		if !has(d) {
			return "", fmt.Sprintf("%s=%s does not hold initdb and postgres", EnvBin, d)
		}
		return d, ""
	}
	// Debian: /usr/lib/postgresql/VERSION/bin; take the newest version.
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	version := func(d string) int {
		v := filepath.Base(filepath.Dir(d))
		n, _ := strconv.Atoi(strings.SplitN(v, ".", 2)[0])
		return n
	}
	slices.SortFunc(dirs, func(a, b string) int { return version(b) - version(a) })
	for _, d := range dirs {
		if has(d) {
			return d, ""
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil && has(filepath.Dir(p)) {
		return filepath.Dir(p), ""
	}
	return "", "PostgreSQL server binaries not found (tried $" + EnvBin + ", /usr/lib/postgresql/*/bin, initdb on $PATH)"
}

// Server is a running PostgreSQL. Its exported fields do not change after
// start. Stop, Kill and Start take it away and bring it back; the other
// methods are safe for concurrent use, but a test that stops the server must
// not run in parallel with other tests of its binary.
type Server struct {
	// SocketDir is the directory of the server's Unix socket, the host
	// part of a connection URL.
	SocketDir string
	// Port is the server's port number; with SocketDir it names the socket
	// SocketDir/.s.PGSQL.Port.
	Port int

	bin     string
	dir     string // private temporary directory: data/, the socket, the log
	dataDir string
	logPath string
	cred    *syscall.Credential // the postgres user's, when we run as root

	databases atomic.Int64

	mu   sync.Mutex
	proc *exec.Cmd     // the postmaster; nil while stopped
	done chan struct{} // closed when proc has exited
}

// maxSocketPath is the longest path a Unix socket may have (sun_path less
// its terminating NUL), on Linux.
const maxSocketPath = 107

func start(bin string) (*Server, error) {
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	s := &Server{
		// The port only names the socket in our own directory: any
		// number works. One per process keeps concurrent binaries from
		// probing each other's System V shared memory keys (port*1000).
		Port: 10000 + os.Getpid()%50000,
		bin:  bin,
		cred: cred,
	}
	tmp := ""
	if probe := filepath.Join(os.TempDir(), "cairn-pgtest-0123456789", ".s.PGSQL.65535"); len(probe) > maxSocketPath {
		tmp = "/tmp" // $TMPDIR is too deep for a socket path
	}
	if s.dir, err = os.MkdirTemp(tmp, "cairn-pgtest-"); err != nil {
		return nil, err
	}
	s.SocketDir = s.dir
	s.dataDir = filepath.Join(s.dir, "data")
	s.logPath = filepath.Join(s.dir, "postgres.log")
	if cred != nil {
		if err := os.Chown(s.dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(s.dir)
			return nil, err
		}
	}
	if err := s.initdb(); err != nil {
		os.RemoveAll(s.dir)
		return nil, err
	}
	if err := s.Start(); err != nil {
		os.RemoveAll(s.dir)
		return nil, err
	}
	return s, nil
}

// serverCredential returns the credential to run the server with: nil to
// run as ourselves, the postgres user's when we are root.
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, and PostgreSQL refuses root: need a postgres user to run it as: %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("user postgres: %w", err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

// command returns a command running one of the PostgreSQL binaries as the
// server's user, in a clean environment.
func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C", "TZ=UTC", "HOME=" + s.dir}
	// Setpgid keeps a ^C at the terminal from reaching the server
	// directly: it ends with the test binary instead (Pdeathsig).
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Setpgid: true}
	return cmd
}

// initdb creates the database cluster. The server's own commits are
// fsynced (see Start); initdb's final flush of the new cluster is skipped,
// since a test cluster need not survive a machine crash before its first
// checkpoint.
func (s *Server) initdb() error {
	cmd := s.command("initdb", "--pgdata="+s.dataDir, "--username="+User,
		"--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("initdb in %s: %w; its output:\n%s", s.dataDir, err, bytes.TrimSpace(out))
	}
	return nil
}

// Start starts the server, on the same socket and with the same data as
// before, and waits until it accepts connections (after crash recovery if
// it was killed). Starting a running server does nothing.
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
	fmt.Fprintf(logf, "--- pgtest: starting on %s/.s.PGSQL.%d\n", s.SocketDir, s.Port)
	logStart, _ := logf.Seek(0, 1)
	cmd := s.command("postgres", "-D", s.dataDir, "-p", strconv.Itoa(s.Port),
		"-c", "listen_addresses=",
		"-c", "unix_socket_directories="+s.SocketDir,
		"-c", "fsync=on",
		"-c", "synchronous_commit=on",
		"-c", "full_page_writes=on",
		"-c", "max_connections=200",
		"-c", "shared_buffers=32MB",
		"-c", "logging_collector=off")
	cmd.Stdout, cmd.Stderr = logf, logf
	// The server must not outlive the test binary, even one killed by a
	// test timeout: SIGQUIT is PostgreSQL's immediate shutdown, which also
	// ends its backends.
	cmd.SysProcAttr.Pdeathsig = syscall.SIGQUIT
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	if err := s.waitReady(done); err != nil {
		cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		out, _ := os.ReadFile(s.logPath)
		if int64(len(out)) >= logStart {
			out = out[logStart:]
		}
		return fmt.Errorf("postgres in %s: %w; its output:\n%s", s.dataDir, err, bytes.TrimSpace(out))
	}
	s.proc, s.done = cmd, done
	return nil
}

// waitReady polls the server with connections until one succeeds.
func (s *Server) waitReady(done <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for {
		select {
		case <-done:
			return errors.New("exited during start")
		default:
		}
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		c, err := pgconn.Connect(cctx, s.URL("postgres"))
		ccancel()
		if err == nil {
			c.Close(ctx)
			return nil
		}
		select {
		case <-done:
			return errors.New("exited during start")
		case <-ctx.Done():
			return fmt.Errorf("not accepting connections after %v: %w", startTimeout, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Stop shuts the server down cleanly ("fast" shutdown: connections are
// ended, a checkpoint is written) and waits until it is gone, with its
// socket; the data stays. Stopping a stopped server does nothing.
func (s *Server) Stop() error { return s.signal(syscall.SIGINT) }

// Kill shuts the server down as a crash would ("immediate" shutdown: no
// checkpoint; Start then replays the WAL) and waits until it is gone. Only
// committed transactions survive. Killing a stopped server does nothing.
func (s *Server) Kill() error { return s.signal(syscall.SIGQUIT) }

// signal sends sig to the postmaster and waits for it to exit, escalating
// to an immediate shutdown and then SIGKILL if it takes too long.
func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return nil
	}
	var err error
	for _, next := range []syscall.Signal{sig, syscall.SIGQUIT, syscall.SIGKILL} {
		if serr := s.proc.Process.Signal(next); serr != nil && !errors.Is(serr, os.ErrProcessDone) {
			return serr
		}
		select {
		case <-s.done:
			s.proc, s.done = nil, nil
			return err
		case <-time.After(30 * time.Second):
			err = fmt.Errorf("postgres in %s did not exit on signal %v", s.dataDir, next)
		}
	}
	<-s.done
	s.proc, s.done = nil, nil
	return err
}

// shutdown stops the server and removes its directory.
func (s *Server) shutdown() {
	if err := s.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
	}
	os.RemoveAll(s.dir)
}

// URL returns a connection URL for database db, as the superuser, over the
// server's socket: "postgres://postgres@/DB?host=SOCKETDIR&port=PORT".
func (s *Server) URL(db string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(User),
		Path:     "/" + db,
		RawQuery: url.Values{"host": {s.SocketDir}, "port": {strconv.Itoa(s.Port)}}.Encode(),
	}
	return u.String()
}

// NewDatabase creates a new, uniquely named, empty database and returns a
// URL to connect to it (see URL). The database is dropped when tb ends,
// after ending the connections that still use it; a server that is down
// by then keeps it until the binary ends.
func (s *Server) NewDatabase(tb testing.TB) string {
	tb.Helper()
	name := fmt.Sprintf("cairn_test_%d", s.databases.Add(1))
	if err := s.admin("CREATE DATABASE " + name); err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	tb.Cleanup(func() {
		if err := s.admin("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)"); err != nil {
			tb.Logf("pgtest: %v", err)
		}
	})
	return s.URL(name)
}

// admin runs one statement in the postgres database.
func (s *Server) admin(sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	c, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s: %w", sql, err)
	}
	return nil
}
