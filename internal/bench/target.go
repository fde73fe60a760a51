package bench

import (
	"errors"
	"io"
	"os"
	"path/filepath"
)

// Target is what the workloads run against.
type Target interface {
	// Describe names the target for reports, e.g. "path /mnt/cairn".
	Describe() string
	// Conn returns a connection for one worker. Connections are used by
	// one goroutine at a time; different connections run concurrently.
	Conn() (Conn, error)
	// Close releases the target (not its connections).
	Close() error
}

// Conn is one worker's view of the target. Paths are relative to the
// target's root, with "/" between names; parent directories exist.
type Conn interface {
	Mkdir(path string) error
	Rmdir(path string) error
	// Create makes an empty regular file (failing if it exists) and
	// closes it.
	Create(path string) error
	// Stat looks path up and returns its size.
	Stat(path string) (int64, error)
	Remove(path string) error
	// OpenWrite creates or truncates path for sequential writing.
	OpenWrite(path string) (Writer, error)
	// OpenRead opens path for sequential reading.
	OpenRead(path string) (Reader, error)
	Close() error
}

// appendOpener is a Conn that can open a file for appending: made if
// missing, every write at its end (O_APPEND).
type appendOpener interface {
	OpenAppend(path string) (Writer, error)
}

// Writer writes a file front to back.
type Writer interface {
	// Write writes p at the current offset; p may be reused once it
	// returns.
	Write(p []byte) error
	// Sync makes what was written durable (fsync, or NFS COMMIT).
	Sync() error
	Close() error
}

// Reader reads a file front to back.
type Reader interface {
	// Read reads up to len(p) bytes at the current offset; io.EOF at the
	// end.
	Read(p []byte) (int, error)
	Close() error
}

// PathTarget is a directory of any mounted file system, used through
// plain system calls.
type PathTarget struct{ Dir string }

func (t PathTarget) Describe() string    { return "path " + t.Dir }
func (t PathTarget) Close() error        { return nil }
func (t PathTarget) Conn() (Conn, error) { return pathConn{t.Dir}, nil }

type pathConn struct{ dir string }

func (c pathConn) p(path string) string { return filepath.Join(c.dir, filepath.FromSlash(path)) }

func (c pathConn) Mkdir(path string) error  { return os.Mkdir(c.p(path), 0o755) }
func (c pathConn) Rmdir(path string) error  { return os.Remove(c.p(path)) }
func (c pathConn) Remove(path string) error { return os.Remove(c.p(path)) }
func (c pathConn) Close() error             { return nil }

func (c pathConn) Create(path string) error {
	f, err := os.OpenFile(c.p(path), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

func (c pathConn) Stat(path string) (int64, error) {
	fi, err := os.Lstat(c.p(path))
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

func (c pathConn) OpenWrite(path string) (Writer, error) {
	f, err := os.OpenFile(c.p(path), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	return fileWriter{f}, nil
}

func (c pathConn) OpenAppend(path string) (Writer, error) {
	f, err := os.OpenFile(c.p(path), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	return fileWriter{f}, nil
}

func (c pathConn) OpenRead(path string) (Reader, error) {
	f, err := os.Open(c.p(path))
	if err != nil {
		return nil, err
	}
	return fileReader{f}, nil
}

type fileWriter struct{ f *os.File }

func (w fileWriter) Write(p []byte) error {
	_, err := w.f.Write(p)
	return err
}
func (w fileWriter) Sync() error  { return w.f.Sync() }
func (w fileWriter) Close() error { return w.f.Close() }

type fileReader struct{ f *os.File }

func (r fileReader) Read(p []byte) (int, error) {
	n, err := r.f.Read(p)
	if n > 0 && errors.Is(err, io.EOF) {
		err = nil
	}
	return n, err
}
func (r fileReader) Close() error { return r.f.Close() }

var (
	_ Target       = PathTarget{}
	_ Conn         = pathConn{}
	_ appendOpener = pathConn{}
)
