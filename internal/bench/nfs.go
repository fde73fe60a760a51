package bench

import (
	"fmt"
	"io"
	"strings"
	"sync"
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
	// in flight, each on a connection of its own, as a kernel client's
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
		s += fmt.Sprintf(", %d calls in flight", t.o.Window)
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

// slots are the connections a file's calls run on: this conn's own and
// Window-1 more, dialed per file.
func (c *nfsConn) slots() ([]*nfsclient.Client, error) {
	cs := []*nfsclient.Client{c.c}
	for len(cs) < c.t.o.Window {
		x, err := nfsclient.Dial(c.t.o.Addr)
		if err != nil {
			closeExtra(cs)
			return nil, err
		}
		cs = append(cs, x)
	}
	return cs, nil
}

func closeExtra(cs []*nfsclient.Client) {
	for _, x := range cs[1:] {
		x.Close()
	}
}

// call is one READ or WRITE in flight.
type call struct {
	c    *nfsclient.Client
	buf  []byte
	n    int
	eof  bool
	err  error
	lat  time.Duration
	done chan struct{}
}

func (c *nfsConn) OpenWrite(path string) (Writer, error) {
	fh, _, err := c.open(path, true)
	if err != nil {
		return nil, err
	}
	cs, err := c.slots()
	if err != nil {
		return nil, err
	}
	w := &nfsWriter{main: c.c, cs: cs, fh: fh, free: make(chan *call, len(cs))}
	for _, x := range cs {
		w.free <- &call{c: x, done: make(chan struct{})}
	}
	return w, nil
}

// nfsWriter sends UNSTABLE WRITEs, up to len(cs) at once.
type nfsWriter struct {
	main *nfsclient.Client
	cs   []*nfsclient.Client
	fh   []byte
	off  uint64
	free chan *call
	wg   sync.WaitGroup
	mu   sync.Mutex
	err  error
	lats []time.Duration
}

func (w *nfsWriter) Write(p []byte) error {
	k := <-w.free
	if err := w.failed(); err != nil {
		w.free <- k
		return err
	}
	k.buf = append(k.buf[:0], p...)
	off := w.off
	w.off += uint64(len(p))
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		t0 := time.Now()
		res, err := k.c.Write(w.fh, off, k.buf, proto.Unstable)
		lat := time.Since(t0)
		if err == nil && int(res.Count) != len(k.buf) {
			err = fmt.Errorf("short write: %d of %d bytes", res.Count, len(k.buf))
		}
		w.mu.Lock()
		w.lats = append(w.lats, lat)
		if err != nil && w.err == nil {
			w.err = err
		}
		w.mu.Unlock()
		w.free <- k
	}()
	return nil
}

func (w *nfsWriter) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Sync waits for the calls in flight and sends COMMIT.
func (w *nfsWriter) Sync() error {
	w.wg.Wait()
	if err := w.failed(); err != nil {
		return err
	}
	_, err := w.main.Commit(w.fh)
	return err
}

func (w *nfsWriter) Close() error {
	w.wg.Wait()
	closeExtra(w.cs)
	return w.failed()
}

// Latencies are the WRITE round trips (not the time Write waited for a
// free slot).
func (w *nfsWriter) Latencies() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lats
}

func (c *nfsConn) OpenRead(path string) (Reader, error) {
	fh, size, err := c.open(path, false)
	if err != nil {
		return nil, err
	}
	cs, err := c.slots()
	if err != nil {
		return nil, err
	}
	return &nfsReader{cs: cs, fh: fh, size: size}, nil
}

// nfsReader keeps up to len(cs) READs in flight ahead of the reader,
// never past the size the file had when opened.
type nfsReader struct {
	cs    []*nfsclient.Client
	fh    []byte
	size  uint64
	next  uint64 // offset of the next READ to send
	queue []*call
	eof   bool
	lats  []time.Duration
}

func (r *nfsReader) Read(p []byte) (int, error) {
	if len(r.cs) == 1 {
		if r.eof {
			return 0, io.EOF
		}
		t0 := time.Now()
		data, eof, err := r.cs[0].Read(r.fh, r.next, uint32(len(p)))
		r.lats = append(r.lats, time.Since(t0))
		if err != nil {
			return 0, err
		}
		r.next += uint64(len(data))
		r.eof = eof || len(data) == 0
		if len(data) == 0 {
			return 0, io.EOF
		}
		return copy(p, data), nil
	}
	// Keep the window full. Calls go round the connections in order, so
	// a connection's next call is sent only after its previous one was
	// taken off the queue below.
	for len(r.queue) < len(r.cs) && r.next < r.size {
		r.sendOn(len(p))
	}
	if len(r.queue) == 0 {
		return 0, io.EOF
	}
	k := r.queue[0]
	<-k.done
	r.queue = r.queue[1:]
	r.lats = append(r.lats, k.lat)
	if k.err != nil {
		return 0, k.err
	}
	if k.n == 0 {
		return 0, io.EOF
	}
	return copy(p, k.buf), nil
}

// sendOn sends the next READ on the connection no queued call uses.
func (r *nfsReader) sendOn(count int) {
	busy := make(map[*nfsclient.Client]bool, len(r.queue))
	for _, k := range r.queue {
		busy[k.c] = true
	}
	for _, c := range r.cs {
		if !busy[c] {
			k := &call{c: c, done: make(chan struct{})}
			off := r.next
			r.next += uint64(count)
			r.queue = append(r.queue, k)
			go func() {
				defer close(k.done)
				t0 := time.Now()
				data, eof, err := k.c.Read(r.fh, off, uint32(count))
				k.lat = time.Since(t0)
				k.buf, k.n, k.eof, k.err = data, len(data), eof, err
			}()
			return
		}
	}
}

func (r *nfsReader) Close() error {
	for _, k := range r.queue {
		<-k.done
	}
	r.queue = nil
	closeExtra(r.cs)
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
