package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/big"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/cairnfs/cairn/internal/chunk"
	"github.com/cairnfs/cairn/internal/daemon"
	"github.com/cairnfs/cairn/internal/kv"
)

// parseSize parses sizes like 4096, 64K, 4M, 1.5G, 2TiB: a decimal
// number with an optional binary unit (K, M, G, T, P, E; "iB" or "B" may
// follow), rounded down to whole bytes. A size past 2^64-1 bytes is
// refused, not wrapped around.
func parseSize(in string) (uint64, error) {
	s := strings.TrimSpace(strings.ToUpper(in))
	s = strings.TrimSuffix(strings.TrimSuffix(s, "B"), "I")
	shift := uint(0)
	if s != "" {
		if i := strings.IndexByte("KMGTPE", s[len(s)-1]); i >= 0 {
			shift = 10 * uint(i+1)
			s = s[:len(s)-1]
		}
	}
	bad := fmt.Errorf("bad size %q: want a number with an optional K/M/G/T/P/E suffix, like 64K or 1.5G", in)
	whole, frac, hasFrac := strings.Cut(s, ".")
	if whole == "" && (!hasFrac || frac == "") || strings.ContainsAny(s, "+-") {
		return 0, bad
	}
	// The number as an exact fraction n/10^len(frac), times 2^shift.
	n, ok := new(big.Int).SetString(whole+frac, 10)
	if !ok {
		return 0, bad
	}
	n.Lsh(n, shift)
	n.Quo(n, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(len(frac))), nil))
	if !n.IsUint64() {
		return 0, fmt.Errorf("size %q: more than %d bytes", in, uint64(math.MaxUint64))
	}
	return n.Uint64(), nil
}

// runAdmin runs an admin verb on the volume at metaURL: directly when the
// metadata engine can be opened here, else through the control socket of
// the mount process that holds it.
func runAdmin(ctx context.Context, metaURL string, req daemon.Request, w io.Writer) error {
	loc, err := daemon.ParseMetaURL(metaURL)
	if err != nil {
		return err
	}
	vol, err := daemon.OpenVolume(ctx, daemon.VolumeOptions{MetaURL: metaURL, Logger: stderrLogger(slog.LevelWarn)})
	if errors.Is(err, kv.ErrLocked) {
		return daemon.CallControl(loc, req, w)
	}
	if err != nil {
		return err
	}
	defer vol.Close()
	return daemon.RunAdmin(ctx, vol, req, w)
}

// openLogFile opens a log file for appending, creating it readable by its
// owner only: a log names volumes, paths and hosts that are not everyone's
// business.
func openLogFile(file string) (*os.File, error) {
	return os.OpenFile(file, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
}

// logFlags are the logging flags of the serving commands (mount,
// gateway nfs).
type logFlags struct {
	file, level, format string
	debug               bool
	// stderrToo: stderr is the log file too (a mount process started by
	// -d), and follows it when it is reopened.
	stderrToo bool
}

func (l *logFlags) register(f *pflag.FlagSet, logDefault, debugWhat string) {
	f.StringVar(&l.file, "log", "", "log file, created readable by its owner only; reopened on SIGHUP, for log rotation (default: "+logDefault+")")
	f.StringVar(&l.level, "log-level", "info", "least severe messages logged: debug, info, warn or error")
	f.StringVar(&l.format, "log-format", "text", "text (key=value) or json (one object a line)")
	f.BoolVar(&l.debug, "debug", false, debugWhat+" (implies --log-level debug)")
}

// check validates the flags without opening anything.
func (l *logFlags) check() (slog.Level, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(l.level)); err != nil {
		return 0, fmt.Errorf("--log-level %q: want debug, info, warn or error", l.level)
	}
	if l.debug {
		level = slog.LevelDebug
	}
	if l.format != "text" && l.format != "json" {
		return 0, fmt.Errorf("--log-format %q: want text or json", l.format)
	}
	return level, nil
}

// open returns the logger of a serving command: appending to the log
// file, reopened when the process gets SIGHUP (the file renamed by
// logrotate: a new one is made), or to stderr when there is none. Call
// closeLog when done.
func (l *logFlags) open() (log *slog.Logger, closeLog func(), err error) {
	level, err := l.check()
	if err != nil {
		return nil, nil, err
	}
	var w io.Writer = os.Stderr
	closeLog = func() {}
	if l.file != "" {
		rw, err := openReopenable(l.file, l.stderrToo)
		if err != nil {
			return nil, nil, fmt.Errorf("--log: %w", err)
		}
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		done := make(chan struct{})
		go func() {
			for {
				select {
				case <-hup:
					if err := rw.reopen(); err != nil {
						fmt.Fprintf(os.Stderr, "cairn: reopening the log on SIGHUP: %v\n", err)
					}
				case <-done:
					return
				}
			}
		}()
		w = rw
		closeLog = func() {
			signal.Stop(hup)
			close(done)
			rw.close()
		}
	}
	opts := &slog.HandlerOptions{Level: level}
	if l.format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts)), closeLog, nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), closeLog, nil
}

// reopenable is a log file that can be opened again under its name.
type reopenable struct {
	path   string
	stderr bool // make fd 2 the new file too on reopen
	mu     sync.Mutex
	f      *os.File
}

func openReopenable(path string, stderr bool) (*reopenable, error) {
	f, err := openLogFile(path)
	if err != nil {
		return nil, err
	}
	return &reopenable{path: path, stderr: stderr, f: f}, nil
}

func (r *reopenable) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.f.Write(p)
}

// reopen opens the path anew and writes there from now on; the old file
// is closed.
func (r *reopenable) reopen() error {
	f, err := openLogFile(r.path)
	if err != nil {
		return err
	}
	if r.stderr {
		// What the runtime writes on a crash goes there too.
		if err := syscall.Dup3(int(f.Fd()), 2, 0); err != nil {
			f.Close()
			return fmt.Errorf("stderr to the reopened log: %w", err)
		}
	}
	r.mu.Lock()
	old := r.f
	r.f = f
	r.mu.Unlock()
	return old.Close()
}

func (r *reopenable) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.f.Close()
}

// metricsFlag registers --metrics of a command that serves a volume
// (cairn mount, cairn gateway nfs).
func metricsFlag(f *pflag.FlagSet, addr *string) {
	f.StringVar(addr, "metrics", "", "serve statistics on this address: /metrics (Prometheus text format) and /stats (JSON), e.g. 127.0.0.1:9567")
}

// memFlags are the memory bounds of a command that serves a volume
// (cairn mount, cairn gateway nfs).
type memFlags struct {
	cacheMem, bufferSize string
	readAhead            int
}

func (m *memFlags) register(f *pflag.FlagSet) {
	f.StringVar(&m.cacheMem, "cache-mem", "256M", "memory block cache size")
	f.StringVar(&m.bufferSize, "buffer-size", "256M", "write buffer bound; writers wait when it is full")
	f.IntVar(&m.readAhead, "read-ahead", -1, fmt.Sprintf("blocks fetched ahead of a sequential reader, into the memory cache (0: none; default %d on a local directory, %d on S3)", chunk.DefaultReadAhead, daemon.RemoteReadAhead))
}

// storeTimeoutFlag is --store-timeout of a command that serves a volume.
type storeTimeoutFlag struct{ d time.Duration }

func (s *storeTimeoutFlag) register(f *pflag.FlagSet) {
	f.DurationVar(&s.d, "store-timeout", daemon.DefaultStoreTimeout, "on a shared volume, how long operations wait for PostgreSQL or the S3 endpoint when they cannot be reached, counted from the start of the outage, before they fail with EIO; 0 waits for as long as it takes (as an NFS hard mount does; a signal still interrupts a waiting call)")
}

// apply sets o.StoreWait from the flag.
func (s *storeTimeoutFlag) apply(o *daemon.VolumeOptions) error {
	switch {
	case s.d < 0:
		return fmt.Errorf("--store-timeout %v: want a positive duration, or 0 to wait forever", s.d)
	case s.d == 0:
		o.StoreWait.Forever = true
	default:
		o.StoreWait.Timeout = s.d
	}
	return nil
}

// maxReadAheadBlocks bounds --read-ahead: 64 blocks of 4 MiB is a whole
// chunk ahead, beyond what the memory cache keeps by default.
const maxReadAheadBlocks = 64

// apply sets o.CacheMem and o.BufferLimit from the flags.
func (m *memFlags) apply(o *daemon.VolumeOptions) error {
	cm, err := parseSize(m.cacheMem)
	if err != nil {
		return fmt.Errorf("--cache-mem: %w", err)
	}
	bs, err := parseSize(m.bufferSize)
	if err != nil {
		return fmt.Errorf("--buffer-size: %w", err)
	}
	o.CacheMem, o.BufferLimit = int64(cm), int64(bs)
	switch {
	case m.readAhead == -1:
		// the data store's default
	case m.readAhead < 0 || m.readAhead > maxReadAheadBlocks:
		return fmt.Errorf("--read-ahead %d: want 0 to %d blocks", m.readAhead, maxReadAheadBlocks)
	case m.readAhead == 0:
		o.ReadAhead = -1
	default:
		o.ReadAhead = m.readAhead
	}
	return nil
}

func stderrLogger(level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

func absPath(p string) (string, error) {
	if strings.HasPrefix(p, "/") {
		return strings.TrimSuffix(p, "/"), nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(wd+"/"+p, "/"), nil
}
