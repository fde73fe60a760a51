package bench

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/cairnfs/cairn/internal/nfs/nfsclient"
	"github.com/cairnfs/cairn/internal/nfs/proto"
)

// NFSOptions say where an NFSv3 server is.
type NFSOptions struct {
	// Addr is the host:port of the NFS program.
	Addr string
	// MountAddr is the host:port of the MOUNT program (default Addr:
	// Cairn serves both on one port; Ganesha and knfsd do not).
	MountAddr string
	// Export is the path given to MNT (default "/").
	Export string
	// Window is how many READ or WRITE calls a sequential workload keeps
	// in flight, pipelined on its one connection, as a kernel client's
	// read-ahead and write-behind would (default 1: one call at a time).
	Window int
}

// ParseNFSAddr splits "HOST:PORT[/export]" into the address and the
// export path (default "/").
func ParseNFSAddr(s string) (addr, export string) {
	if i := strings.IndexByte(s, '/'); i >= 0 {
		return s[:i], s[i:]
	}
	return s, "/"
}

// NFSTarget is an NFSv3 server driven through nfsclient.
type NFSTarget struct {
	o    NFSOptions
	root []byte
}

// DialNFS mounts the export (MNT) and returns the target.
func DialNFS(o NFSOptions) (*NFSTarget, error) {
	if o.MountAddr == "" {
		o.MountAddr = o.Addr
	}
	if o.Export == "" {
		o.Export = "/"
	}
	if o.Window < 1 {
		o.Window = 1
	}
	root, err := nfsclient.MountAt(o.MountAddr, o.Export)
	if err != nil {
		return nil, fmt.Errorf("mount %s:%s: %w", o.MountAddr, o.Export, err)
	}
	return &NFSTarget{o: o, root: root}, nil
}

func (t *NFSTarget) Describe() string {
	s := fmt.Sprintf("nfs %s%s", t.o.Addr, t.o.Export)
	if t.o.MountAddr != t.o.Addr {
		s += " (mount " + t.o.MountAddr + ")"
	}
	if t.o.Window > 1 {
		s += fmt.Sprintf(", %d calls in flight on one connection", t.o.Window)
	}
	return s
}

func (t *NFSTarget) Close() error { return nil }

func (t *NFSTarget) Conn() (Conn, error) {
	c, err := nfsclient.Dial(t.o.Addr)
	if err != nil {
		return nil, err
	}
	return &nfsConn{t: t, c: c, dirs: map[string][]byte{"": t.root}}, nil
}

// nfsConn keeps the handles of the directories it has looked up.
type nfsConn struct {
	t    *NFSTarget
	c    *nfsclient.Client
	dirs map[string][]byte
}

func (c *nfsConn) Close() error { return c.c.Close() }

// parent returns the handle of path's directory and path's last name.
func (c *nfsConn) parent(path string) ([]byte, string, error) {
	dir, name := "", path
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		dir, name = path[:i], path[i+1:]
	}
	fh, err := c.dir(dir)
	return fh, name, err
}

func (c *nfsConn) dir(path string) ([]byte, error) {
	if fh, ok := c.dirs[path]; ok {
		return fh, nil
	}
	pfh, name, err := c.parent(path)
	if err != nil {
		return nil, err
	}
	fh, _, err := c.c.Lookup(pfh, name)
	if err != nil {
		return nil, fmt.Errorf("lookup %s: %w", path, err)
	}
	c.dirs[path] = fh
	return fh, nil
}

func (c *nfsConn) Mkdir(path string) error {
	pfh, name, err := c.parent(path)
	if err != nil {
		return err
	}
	fh, err := c.c.Mkdir(pfh, name, 0o755)
	if err == nil {
		c.dirs[path] = fh
	}
	return err
}

func (c *nfsConn) Rmdir(path string) error {
	pfh, name, err := c.parent(path)
	if err != nil {
		return err
	}
	delete(c.dirs, path)
	return c.c.Rmdir(pfh, name)
}

var fileMode = uint32(0o644)

func (c *nfsConn) Create(path string) error {
	pfh, name, err := c.parent(path)
	if err != nil {
		return err
	}
	_, err = c.c.Create(pfh, name, proto.CreateGuarded, proto.Sattr3{Mode: &fileMode}, [8]byte{})
	return err
}

// Stat is one LOOKUP (which answers the attributes), as a kernel client's
// stat of a name it has not cached; GETATTR only if LOOKUP gave none.
func (c *nfsConn) Stat(path string) (int64, error) {
	pfh, name, err := c.parent(path)
	if err != nil {
		return 0, err
	}
	fh, a, err := c.c.Lookup(pfh, name)
	if err != nil {
		return 0, err
	}
	if a.Type == 0 {
		if a, err = c.c.GetAttr(fh); err != nil {
			return 0, err
		}
	}
	return int64(a.Size), nil
}

func (c *nfsConn) Remove(path string) error {
	pfh, name, err := c.parent(path)
	if err != nil {
		return err
	}
	return c.c.Remove(pfh, name)
}

func (c *nfsConn) open(path string, create bool) ([]byte, uint64, error) {
	pfh, name, err := c.parent(path)
	if err != nil {
		return nil, 0, err
	}
	if create {
		zero := uint64(0)
		fh, err := c.c.Create(pfh, name, proto.CreateUnchecked, proto.Sattr3{Mode: &fileMode, Size: &zero}, [8]byte{})
		return fh, 0, err
	}
	fh, a, err := c.c.Lookup(pfh, name)
	if err != nil {
		return nil, 0, err
	}
	if a.Type == 0 {
		if a, err = c.c.GetAttr(fh); err != nil {
			return nil, 0, err
		}
	}
	return fh, a.Size, nil
}

func (c *nfsConn) OpenWrite(path string) (Writer, error) {
	fh, _, err := c.open(path, true)
	if err != nil {
		return nil, err
	}
	return &nfsWriter{c: c.c, fh: fh, window: c.t.o.Window}, nil
}

// nfsWriter sends UNSTABLE WRITEs in offset order on the conn's one
// connection, up to window of them unanswered, as a kernel client's
// write-behind pipelines them.
type nfsWriter struct {
	c        *nfsclient.Client
	fh       []byte
	window   int
	off      uint64
	inflight []sentWrite // in send order
	err      error
	lats     []time.Duration
}

func (w *nfsWriter) Write(p []byte) error {
	for w.err == nil && len(w.inflight) >= w.window {
		w.reap()
	}
	if w.err != nil {
		return w.err
	}
	k, err := w.c.SendWrite(w.fh, w.off, p, proto.Unstable)
	if err != nil {
		w.err = err
		return err
	}
	w.off += uint64(len(p))
	w.inflight = append(w.inflight, sentWrite{k, uint32(len(p))})
	return nil
}

// reap takes the replies that have arrived, whatever their order, or
// waits for the oldest if none has.
func (w *nfsWriter) reap() {
	keep := w.inflight[:0]
	for _, k := range w.inflight {
		select {
		case <-k.Done():
			w.take(k)
		default:
			keep = append(keep, k)
		}
	}
	if len(keep) == len(w.inflight) && len(keep) > 0 {
		w.take(keep[0])
		keep = keep[1:]
	}
	w.inflight = keep
}

// sentWrite is a WRITE in flight and its length.
type sentWrite struct {
	*nfsclient.WriteCall
	n uint32
}

func (w *nfsWriter) take(k sentWrite) {
	res, err := k.Wait()
	w.lats = append(w.lats, k.RoundTrip())
	if err == nil && res.Count != k.n {
		err = fmt.Errorf("short write: %d of %d bytes", res.Count, k.n)
	}
	if err != nil && w.err == nil {
		w.err = err
	}
}

// drain waits for every WRITE in flight.
func (w *nfsWriter) drain() error {
	for len(w.inflight) > 0 {
		w.reap()
	}
	return w.err
}

// Sync waits for the WRITEs in flight and sends COMMIT.
func (w *nfsWriter) Sync() error {
	if err := w.drain(); err != nil {
		return err
	}
	_, err := w.c.Commit(w.fh)
	return err
}

func (w *nfsWriter) Close() error { return w.drain() }

// Latencies are the WRITE round trips, send to reply (not the time Write
// waited for room in the window).
func (w *nfsWriter) Latencies() []time.Duration { return w.lats }

func (c *nfsConn) OpenRead(path string) (Reader, error) {
	fh, size, err := c.open(path, false)
	if err != nil {
		return nil, err
	}
	return &nfsReader{c: c.c, fh: fh, size: size, window: c.t.o.Window}, nil
}

// nfsReader keeps up to window READs in flight ahead of the reader on the
// conn's one connection, sent in offset order, never past the size the
// file had when opened (the first READ is always sent, so a file that
// grew still ends with an eof).
type nfsReader struct {
	c      *nfsclient.Client
	fh     []byte
	size   uint64
	window int
	next   uint64 // offset of the next READ to send
	queue  []*nfsclient.ReadCall
	eof    bool
	lats   []time.Duration
}

func (r *nfsReader) Read(p []byte) (int, error) {
	if r.eof {
		return 0, io.EOF
	}
	for len(r.queue) < r.window && (r.next < r.size || len(r.queue) == 0) {
		k, err := r.c.SendRead(r.fh, r.next, uint32(len(p)))
		if err != nil {
			return 0, err
		}
		r.next += uint64(len(p))
		r.queue = append(r.queue, k)
	}
	k := r.queue[0]
	r.queue = r.queue[1:]
	data, eof, err := k.Wait()
	r.lats = append(r.lats, k.RoundTrip())
	if err != nil {
		return 0, err
	}
	if len(data) == 0 || (eof && len(r.queue) == 0) {
		r.eof = true
	}
	if len(data) == 0 {
		return 0, io.EOF
	}
	return copy(p, data), nil
}

func (r *nfsReader) Close() error {
	for _, k := range r.queue {
		_, _, _ = k.Wait()
	}
	r.queue = nil
	return nil
}

func (r *nfsReader) Latencies() []time.Duration { return r.lats }

// latencyReporter is a Writer or Reader that times its own calls (those
// that keep several in flight); the runner then uses these latencies
// instead of timing Write and Read.
type latencyReporter interface {
	Latencies() []time.Duration
}

var (
	_ Target          = (*NFSTarget)(nil)
	_ Conn            = (*nfsConn)(nil)
	_ latencyReporter = (*nfsWriter)(nil)
	_ latencyReporter = (*nfsReader)(nil)
)
