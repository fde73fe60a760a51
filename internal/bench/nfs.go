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
	// read-ahead and write-behind would (default 1: one call at a time;
	// `cairn bench` uses DefaultNFSWindow).
	Window int
	// Transfer is the size of the READ and WRITE calls of sequential
	// workloads. 0 (the default) does what the Linux client does at
	// mount: the server's preferred sizes from FSINFO (rtpref, wtpref),
	// at most its maxima and 1 MiB; the application's reads and writes
	// are then gathered into calls of that size (write-behind, flushed
	// by fsync/COMMIT and close) and served from calls of that size
	// (read-ahead). A positive value asks that size instead (still at
	// most the server's maxima). PerCall sends one call per application
	// read or write, of the application's size.
	Transfer int
	// Timeout bounds each call from its send to its reply, as a soft
	// mount's timeo x retrans would (0: nfsclient's default of 30 s;
	// negative: no bound, as a hard mount). Many clients behind one
	// gateway's link queue calls for longer than 30 s: 16 clients with
	// 15 WRITEs of 1 MiB in flight each, on a 2.5 MB/s link, ask for
	// 96 s of it.
	Timeout time.Duration
}

// PerCall as NFSOptions.Transfer: one READ or WRITE per application call.
const PerCall = -1

// DefaultNFSWindow is the window `cairn bench --nfs` keeps by default:
// 15 calls of rsize, the read-ahead of a Linux client whose read_ahead_kb
// is 15 x rsize. That was the kernel's NFS default (NFS_MAX_READAHEAD,
// RPC_DEF_SLOT_TABLE - 1) until Linux 5.4, so it is what RHEL 7 to 8.2,
// SLES 12/15 and Debian up to 10 do; from 5.4 on the default is the VM's
// 128 KiB whatever rsize, and vendors of NFS servers (Azure NetApp Files,
// Google NetApp Volumes, AWS efs-utils at mount) set it back to 15 x
// rsize. With 1 MiB READs the kernel then sends a 15 MiB window of 15
// READs at once (the TCP slot table grows past 16 on demand), within the
// gateway's MaxInFlight of 16. A Linux client's write-behind is no
// shallower: its writeback stops only at nfs_congestion_kb (tens to
// hundreds of MiB), so the same window serves writes.
//
// Measured on the 2-core test machine, 256 MiB file, 1 MiB READs, page
// cache dropped, interleaved rounds at load 0-6, medians in MB/s at 8K /
// 32K / 128K (2026-11-24; the machine is shared, rows move by tens of
// percent between rounds):
//
//	4 rounds  FUSE 1,012 / 1,225 / 1,349
//	          window 1    451 /   546 /   554
//	          window 4    457 /   661 /   593
//	          window 8    485 /   840 /   895
//	          window 16   505 /   752 /   836
//	          128 KiB READs, window 2 (stock 5.4+ client) 343 / 373 / 341
//	4 rounds  FUSE 1,365 / 1,591 / 1,581
//	          window 4    751 /   970 /   935
//	          window 15   731 / 1,401 / 1,333
//	          window 4, replies read into released buffers   839 / 1,096 / 1,218
//	          window 15, replies read into released buffers  929 / 1,688 / 1,817
//
// Depth pays from 8 calls on at 32K and 128K; the 8K rows are bound by
// CPU (client and gateway share the 2 cores), not depth. The stock 5.4+
// client is far slower, against a FUSE mount whose read-ahead Cairn
// itself raises to 1 MiB: what an NFS server cannot do for its clients.
const DefaultNFSWindow = 15

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
	o            NFSOptions
	root         []byte
	rsize, wsize int // 0: per call
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
	t := &NFSTarget{o: o, root: root}
	if o.Transfer != PerCall {
		if o.Transfer < 0 {
			return nil, fmt.Errorf("nfs transfer size %d: want a size, 0 (the server's) or PerCall", o.Transfer)
		}
		if err := t.negotiate(); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// maxTransfer is the largest call the client sends, as the Linux client.
const maxTransfer = 1 << 20

// negotiate sets the transfer sizes from the server's FSINFO.
func (t *NFSTarget) negotiate() error {
	c, err := nfsclient.Dial(t.o.Addr)
	if err != nil {
		return err
	}
	defer c.Close()
	fi, err := c.FSInfo(t.root)
	if err != nil {
		return fmt.Errorf("fsinfo %s: %w", t.o.Addr, err)
	}
	size := func(pref, max uint32) int {
		n := int(pref)
		if t.o.Transfer > 0 {
			n = t.o.Transfer
		}
		if max > 0 {
			n = min(n, int(max))
		}
		return min(n, maxTransfer)
	}
	t.rsize, t.wsize = size(fi.RTPref, fi.RTMax), size(fi.WTPref, fi.WTMax)
	if t.rsize < 512 || t.wsize < 512 {
		return fmt.Errorf("fsinfo %s: transfer sizes read %d, write %d are too small", t.o.Addr, t.rsize, t.wsize)
	}
	return nil
}

func (t *NFSTarget) Describe() string {
	s := fmt.Sprintf("nfs %s%s", t.o.Addr, t.o.Export)
	if t.o.MountAddr != t.o.Addr {
		s += " (mount " + t.o.MountAddr + ")"
	}
	if t.o.Window > 1 {
		s += fmt.Sprintf(", %d calls in flight on one connection", t.o.Window)
	}
	if t.rsize > 0 {
		s += fmt.Sprintf(", rsize %d wsize %d", t.rsize, t.wsize)
	} else {
		s += ", one call per read or write"
	}
	return s
}

func (t *NFSTarget) Close() error { return nil }

func (t *NFSTarget) Conn() (Conn, error) {
	c, err := nfsclient.Dial(t.o.Addr)
	if err != nil {
		return nil, err
	}
	if t.o.Timeout != 0 {
		c.Timeout = max(t.o.Timeout, 0)
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
	w := &nfsWriter{c: c.c, fh: fh, window: c.t.o.Window}
	if c.t.wsize > 0 {
		w.buf = make([]byte, 0, c.t.wsize)
	}
	return w, nil
}

// OpenAppend looks path up (creating it if missing) and writes from its
// end, as a kernel client writes a file opened with O_APPEND.
func (c *nfsConn) OpenAppend(path string) (Writer, error) {
	fh, size, err := c.open(path, false)
	if isNotExist(err) {
		fh, size, err = c.open(path, true)
	}
	if err != nil {
		return nil, err
	}
	w := &nfsWriter{c: c.c, fh: fh, window: c.t.o.Window, off: size}
	if c.t.wsize > 0 {
		w.buf = make([]byte, 0, c.t.wsize)
	}
	return w, nil
}

var _ appendOpener = (*nfsConn)(nil)

// nfsWriter sends UNSTABLE WRITEs in offset order on the conn's one
// connection, up to window of them unanswered, as a kernel client's
// write-behind pipelines them. With a transfer size (buf not nil) it
// gathers the application's writes into WRITEs of that size.
type nfsWriter struct {
	c        *nfsclient.Client
	fh       []byte
	window   int
	buf      []byte      // gathered, not yet sent (nil: one WRITE per Write)
	off      uint64      // of the next WRITE
	inflight []sentWrite // in send order
	calls    int         // WRITEs sent
	err      error
	lats     []time.Duration
}

func (w *nfsWriter) Write(p []byte) error {
	if w.buf == nil {
		return w.send(p)
	}
	for len(p) > 0 && w.err == nil {
		n := copy(w.buf[len(w.buf):cap(w.buf)], p)
		w.buf, p = w.buf[:len(w.buf)+n], p[n:]
		if len(w.buf) == cap(w.buf) {
			w.flush()
		}
	}
	return w.err
}

// flush sends what is gathered.
func (w *nfsWriter) flush() {
	if len(w.buf) > 0 && w.err == nil {
		_ = w.send(w.buf) // SendWrite does not keep the data
		w.buf = w.buf[:0]
	}
}

// send sends one WRITE of p at the next offset.
func (w *nfsWriter) send(p []byte) error {
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
	w.calls++
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

// drain sends what is gathered and waits for every WRITE in flight.
func (w *nfsWriter) drain() error {
	w.flush()
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
// waited for room in the window), when each Write is one WRITE; when
// writes are gathered, none (the runner times each Write, as it times a
// write(2) the kernel's page cache absorbs).
func (w *nfsWriter) Latencies() []time.Duration {
	if w.buf != nil {
		return nil
	}
	return w.lats
}

func (c *nfsConn) OpenRead(path string) (Reader, error) {
	fh, size, err := c.open(path, false)
	if err != nil {
		return nil, err
	}
	return &nfsReader{c: c.c, fh: fh, size: size, window: c.t.o.Window, rsize: c.t.rsize}, nil
}

// nfsReader keeps up to window READs in flight ahead of the reader on the
// conn's one connection, sent in offset order, never past the size the
// file had when opened (the first READ is always sent, so a file that
// grew still ends with an eof). READs are of rsize bytes, or of the
// application's read size when rsize is 0; the application's reads are
// served from the data of the oldest.
type nfsReader struct {
	c      *nfsclient.Client
	fh     []byte
	size   uint64
	window int
	rsize  int
	next   uint64 // offset of the next READ to send
	queue  []*nfsclient.ReadCall
	calls  int                 // READs sent
	taken  *nfsclient.ReadCall // the last READ taken: cur aliases its reply
	cur    []byte              // data of the last READ taken, not yet read
	last   bool                // cur ends the file
	eof    bool
	lats   []time.Duration
}

func (r *nfsReader) Read(p []byte) (int, error) {
	if len(r.cur) == 0 {
		if r.eof || r.last {
			r.eof = true
			return 0, io.EOF
		}
		if err := r.take(len(p)); err != nil {
			return 0, err
		}
		if len(r.cur) == 0 {
			r.eof = true
			return 0, io.EOF
		}
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

// take fills the window and waits for the oldest READ.
func (r *nfsReader) take(want int) error {
	size := r.rsize
	if size == 0 {
		size = want
	}
	for len(r.queue) < r.window && (r.next < r.size || len(r.queue) == 0) {
		k, err := r.c.SendRead(r.fh, r.next, uint32(size))
		if err != nil {
			return err
		}
		r.next += uint64(size)
		r.calls++
		r.queue = append(r.queue, k)
	}
	if r.taken != nil {
		r.taken.Release() // read out: its buffer takes a later reply
		r.taken = nil
	}
	k := r.queue[0]
	r.queue = r.queue[1:]
	r.taken = k
	data, eof, err := k.Wait()
	r.lats = append(r.lats, k.RoundTrip())
	if err != nil {
		return err
	}
	r.cur, r.last = data, eof && len(r.queue) == 0
	return nil
}

func (r *nfsReader) Close() error {
	for _, k := range r.queue {
		_, _, _ = k.Wait()
		k.Release()
	}
	if r.taken != nil {
		r.taken.Release()
	}
	r.queue, r.taken, r.cur = nil, nil, nil
	return nil
}

// Latencies are the READ round trips when each Read is one READ; none
// when READs are of rsize (the runner then times each Read).
func (r *nfsReader) Latencies() []time.Duration {
	if r.rsize > 0 {
		return nil
	}
	return r.lats
}

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
