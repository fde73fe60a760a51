package nfs

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/nfs/proto"
	"github.com/cairnfs/cairn/internal/vfs"
)

// Options configures a Server.
type Options struct {
	// VolumeUUID identifies the volume in file handles; required. Every
	// gateway of a volume must use its UUID so handles work on all.
	VolumeUUID string
	// Logger receives connection and I/O errors. Default: discard.
	Logger *slog.Logger
	// MaxIO is the largest READ or WRITE payload (default and maximum
	// 1 MiB; at least 4 KiB). Records larger than MaxIO plus 64 KiB of
	// headers close the connection.
	MaxIO int
	// MaxInFlight bounds the requests of one connection being served at
	// once; further records wait to be read (default 16).
	MaxInFlight int
	// MaxConns bounds open connections; more are closed at accept
	// (default 512).
	MaxConns int
	// IdleTimeout closes a connection that sends nothing for so long
	// (default 15 minutes).
	IdleTimeout time.Duration
	// WriteTimeout closes a connection whose client does not take a
	// reply within it (default 1 minute).
	WriteTimeout time.Duration
	// FileIdle is how long an open file stays cached after its last READ
	// or WRITE; it is then closed, which commits its buffered writes
	// (default 5 s).
	FileIdle time.Duration
	// MaxOpenFiles bounds the open files cached (default 1024).
	MaxOpenFiles int
	// AttrCache is how long READ and WRITE may use a file's attributes
	// read before, kept with its open file (with this gateway's writes
	// applied), instead of reading them from the store for their
	// permission check and reply: what the kernel's attribute cache is
	// to a mount. A GETATTR reads the store and refreshes them, so a
	// client that revalidates at open (close-to-open) reads and writes
	// with attributes at least as new; a procedure of this gateway that
	// may change attributes (any but READ, WRITE, COMMIT and the ones
	// that only read) makes every kept one stale. 0: read them every time.
	AttrCache time.Duration
	// CloseToOpen: other clients change the volume (a shared one). A
	// GETATTR that finds a file's length or times changed since this
	// gateway last read them drops what it cached of the file's content
	// (vfs.Revalidate), as a mount's open does, since it keeps files open
	// across its clients' opens.
	CloseToOpen bool
	// Export says what is served to whom: read-only, allowed client
	// networks, squashing (default: read-write, every client, no
	// squashing).
	Export Export
	// OnCall, if set, is called after every call of an NFS, MOUNT, NLM
	// or NSM procedure the server has (refused ones included) with how
	// long serving it took, for counters; it must be quick and safe for
	// concurrent use.
	OnCall func(prog, proc uint32, d time.Duration)
	// PortmapPort, if set, makes the server a portmapper too (portmap.go):
	// it answers PMAP calls, giving this port for NFS 3, MOUNT 3, NLM 4
	// and NSM 1 over TCP (the port the clients are to use, that of the
	// main listener).
	PortmapPort uint16
	// LockWait bounds how long a blocking NLM LOCK waits in the gateway
	// for a conflicting lock to go before it is answered BLOCKED (nlm.go;
	// default 8 s: a Linux client's NLM call times out after 10 s and is
	// sent again, and the answer should come before that).
	LockWait time.Duration
}

func (o *Options) setDefaults() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MaxIO == 0 {
		o.MaxIO = 1 << 20
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = 16
	}
	if o.MaxConns == 0 {
		o.MaxConns = 512
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = 15 * time.Minute
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = time.Minute
	}
	if o.FileIdle == 0 {
		o.FileIdle = 5 * time.Second
	}
	if o.MaxOpenFiles == 0 {
		o.MaxOpenFiles = 1024
	}
	if o.LockWait == 0 {
		o.LockWait = 8 * time.Second
	}
	o.Export.setDefaults()
}

// Validate reports the first invalid option (after defaults are applied).
func (o Options) Validate() error {
	o.setDefaults()
	switch {
	case o.VolumeUUID == "":
		return errors.New("nfs: VolumeUUID is required (file handles are derived from it)")
	case o.MaxIO < 4096 || o.MaxIO > 1<<20:
		return fmt.Errorf("nfs: MaxIO %d: want 4 KiB to 1 MiB", o.MaxIO)
	case o.MaxInFlight < 1:
		return fmt.Errorf("nfs: MaxInFlight %d: want at least 1", o.MaxInFlight)
	case o.MaxConns < 1:
		return fmt.Errorf("nfs: MaxConns %d: want at least 1", o.MaxConns)
	case o.IdleTimeout < 0 || o.WriteTimeout < 0 || o.FileIdle < 0 || o.LockWait < 0:
		return errors.New("nfs: timeouts must not be negative")
	case o.MaxOpenFiles < 1:
		return fmt.Errorf("nfs: MaxOpenFiles %d: want at least 1", o.MaxOpenFiles)
	}
	return o.Export.Validate()
}

// Server serves NFSv3, MOUNTv3, NLMv4 and NSMv1 over one vfs. Safe for
// concurrent use; Serve may be called for several listeners.
type Server struct {
	v     *vfs.VFS
	opts  Options
	log   *slog.Logger
	fh    handles
	verf  [8]byte // write verifier: new at every start
	files *fileCache
	dirs  *dirCache
	mnt   *mountTable
	order writeOrder   // WRITEs in flight, served in offset order per file
	locks *lockManager // NLM and NSM
	// panics counts procedures that panicked (answered SYSTEM_ERR).
	panics atomic.Int64
	// attrEpoch moves before and after every procedure that may change
	// attributes: attributes kept under another epoch are stale
	// (Options.AttrCache).
	attrEpoch atomic.Uint64

	mu        sync.Mutex
	listeners map[net.Listener]bool
	conns     map[net.Conn]bool
	// packetConns are the datagram sockets of ServePortmapUDP; pmap the
	// portmapper's table (nil: not a portmapper).
	packetConns map[net.PacketConn]bool
	pmap        *portmap
	closed      bool
	wg          sync.WaitGroup
	stop        chan struct{}
}

// New returns a server over v. Close releases it (v stays open).
func New(v *vfs.VFS, opts Options) (*Server, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts.setDefaults()
	s := &Server{
		v:           v,
		opts:        opts,
		log:         opts.Logger,
		fh:          newHandles(opts.VolumeUUID),
		listeners:   map[net.Listener]bool{},
		conns:       map[net.Conn]bool{},
		packetConns: map[net.PacketConn]bool{},
		stop:        make(chan struct{}),
		mnt:         newMountTable(),
	}
	if opts.PortmapPort != 0 {
		s.pmap = newPortmap(opts.PortmapPort)
	}
	if _, err := rand.Read(s.verf[:]); err != nil {
		return nil, err
	}
	s.files = newFileCache(v, opts.FileIdle, opts.MaxOpenFiles, s.log)
	s.dirs = newDirCache(v, opts.FileIdle, s.log)
	s.locks = newLockManager(v, opts.LockWait, opts.MaxInFlight)
	s.wg.Add(1)
	go s.janitor()
	return s, nil
}

// Serve accepts connections on l until Close. It returns nil after Close.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errors.New("nfs: server closed")
	}
	s.listeners[l] = true
	s.mu.Unlock()
	var delay time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		s.mu.Lock()
		if s.closed || len(s.conns) >= s.opts.MaxConns {
			s.mu.Unlock()
			s.log.Warn("nfs: refusing connection", "remote", c.RemoteAddr().String(), "open", s.opts.MaxConns)
			c.Close()
			continue
		}
		s.conns[c] = true
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(c)
	}
}

// Close stops accepting, closes connections, waits for requests in
// progress, releases the locks NLM clients hold, and closes the cached
// open files (committing their writes).
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for l := range s.listeners {
		l.Close()
	}
	for pc := range s.packetConns {
		pc.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	close(s.stop)
	s.mu.Unlock()
	s.wg.Wait()
	s.locks.close(ctx)
	s.dirs.closeAll()
	return s.files.closeAll(ctx)
}

func (s *Server) janitor() {
	defer s.wg.Done()
	t := time.NewTicker(max(s.opts.FileIdle/4, 50*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.files.expire(context.Background(), time.Now())
			s.dirs.expire(time.Now())
			s.locks.expire(context.Background(), time.Now())
		}
	}
}

// maxRecord is the largest record accepted: the largest WRITE plus room
// for the headers.
func (s *Server) maxRecord() int { return s.opts.MaxIO + 64<<10 }

// serveConn reads records one after the other and serves up to
// MaxInFlight of them at once; replies go out in completion order (RPC
// matches them by xid).
func (s *Server) serveConn(c net.Conn) {
	defer s.wg.Done()
	remote := c.RemoteAddr().String()
	// Checked once: a TCP connection's source address does not change.
	allowed := s.opts.Export.allows(c.RemoteAddr())
	var wmu sync.Mutex
	var wdeadline time.Time // guarded by wmu
	sem := make(chan struct{}, s.opts.MaxInFlight)
	var reqs sync.WaitGroup
	// Calls are served by the connection's workers, started as needed
	// (at most MaxInFlight busy) and kept until the connection closes: a
	// worker's stack has grown to what serving needs, where a goroutine
	// per call grew (copied) its stack on nearly every call.
	work := make(chan func())
	serve := func(fn func()) {
		select {
		case work <- fn: // an idle worker
		default:
			go func() {
				fn()
				for fn := range work {
					fn()
				}
			}()
		}
	}
	defer func() {
		reqs.Wait()
		close(work)
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	// Buffered, a small call's record mark and body come in one read(2)
	// instead of two; large records bypass the buffer (bufio reads into
	// the caller's slice when it is empty and the read is bigger).
	br := bufio.NewReaderSize(c, 64<<10)
	var deadline time.Time
	for {
		if s.opts.IdleTimeout > 0 {
			// Moved only when it would move by more than a tenth of the
			// timeout (at most a second): a deadline change costs a timer
			// update per call, and closing that much early is no matter.
			if now := time.Now(); now.Add(s.opts.IdleTimeout).Sub(deadline) > min(time.Second, s.opts.IdleTimeout/10) {
				deadline = now.Add(s.opts.IdleTimeout)
				_ = c.SetReadDeadline(deadline)
			}
		}
		// A large record (a WRITE's) is read into a pooled buffer, given
		// back once its call is answered: a fresh 1 MiB per WRITE was
		// memory the collector had to clear and the host to map again.
		// A length over the bound is refused by ReadRecordTo before
		// anything is allocated for it.
		var buf []byte
		if n, ok := proto.PeekRecordSize(br); ok && n >= recordPoolMin && n <= s.maxRecord() {
			buf = proto.RecordBuffer(n)
		}
		rec, err := proto.ReadRecordTo(br, s.maxRecord(), buf)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				s.log.Debug("nfs: closing connection", "remote", remote, "err", err)
			}
			return
		}
		select {
		case sem <- struct{}{}:
		case <-s.stop:
			return
		}
		reqs.Add(1)
		call, perr := proto.ParseCall(rec)
		var t *turn
		if perr == nil {
			t = s.order.register(call) // in arrival order, before serving
		}
		serve(func() {
			defer func() { <-sem; reqs.Done() }()
			if t != nil {
				t.wait()
			}
			var reply []byte
			if perr == nil {
				reply = s.handleCall(remote, allowed, call)
			} else {
				s.log.Debug("nfs: undecodable record", "remote", remote, "err", perr)
			}
			if t != nil {
				t.done()
			}
			if reply == nil {
				c.Close() // nothing sensible to answer: drop the stream
				return
			}
			wmu.Lock()
			defer wmu.Unlock()
			if s.opts.WriteTimeout > 0 {
				// Moved only when it would move by more than a tenth of
				// the timeout, as the read deadline: a write still gets
				// at least nine tenths of it.
				if now := time.Now(); now.Add(s.opts.WriteTimeout).Sub(wdeadline) > s.opts.WriteTimeout/10 {
					wdeadline = now.Add(s.opts.WriteTimeout)
					_ = c.SetWriteDeadline(wdeadline)
				}
			}
			if _, err := c.Write(reply); err != nil {
				s.log.Debug("nfs: writing reply", "remote", remote, "err", err)
				c.Close()
			}
			proto.Recycle(reply)
			if buf != nil && t != nil {
				// A WRITE (t: its turn) keeps nothing of its record: vfs
				// copied the data, and the order's key is a copy. Other
				// calls' records are left to the collector (NLM keeps
				// owner handles that alias them).
				proto.Recycle(rec)
			}
		})
	}
}

// recordPoolMin is the smallest record read into a pooled buffer.
const recordPoolMin = 64 << 10

// request is one decoded call being served.
type request struct {
	remote  string
	allowed bool // the export serves the client (NLM and NSM check it)
	call    proto.Call
	caller  *base.Caller // after squashing
}

// handleRecord serves one record from a client at remote, which the
// export allows or not, and returns the framed reply, or nil when the
// record is not a call that can be answered.
func (s *Server) handleRecord(remote string, allowed bool, rec []byte) []byte {
	call, err := proto.ParseCall(rec)
	if err != nil {
		s.log.Debug("nfs: undecodable record", "remote", remote, "err", err)
		return nil
	}
	return s.handleCall(remote, allowed, call)
}

// handleCall serves one decoded call and returns the framed reply, or nil
// when it cannot be answered.
func (s *Server) handleCall(remote string, allowed bool, call proto.Call) (reply []byte) {
	defer func() {
		// A bug in a procedure must not take the gateway down: answer
		// SYSTEM_ERR and log it.
		if p := recover(); p != nil {
			s.panics.Add(1)
			s.log.Error("nfs: panic serving a call", "prog", call.Prog, "proc", call.Proc, "panic", p)
			reply = proto.AppendRecordMark(proto.NewReply(call.Xid, proto.SystemErr).B)
		}
	}()
	if !call.Valid {
		w := proto.NewDenied(call.Xid, proto.RPCMismatch)
		w.Uint32(proto.RPCVersion)
		w.Uint32(proto.RPCVersion)
		return proto.AppendRecordMark(w.B)
	}
	req := &request{remote: remote, allowed: allowed, call: call}
	switch call.Cred.Flavor {
	case proto.AuthSys:
		a, err := proto.ParseAuthSys(call.Cred.Body)
		if err != nil {
			w := proto.NewDenied(call.Xid, proto.AuthError)
			w.Uint32(proto.AuthBadCred)
			return proto.AppendRecordMark(w.B)
		}
		req.caller = s.opts.Export.caller(&a)
	case proto.AuthNone:
		req.caller = s.opts.Export.caller(nil)
	default:
		w := proto.NewDenied(call.Xid, proto.AuthError)
		w.Uint32(proto.AuthTooWeak)
		return proto.AppendRecordMark(w.B)
	}
	if call.Prog == ProgPortmap && s.pmap != nil {
		// Any client may ask where the services are (no export rules).
		return proto.AppendRecordMark(s.handlePortmap(remote, call))
	}
	var procs []procedure
	switch call.Prog {
	case proto.ProgNFS:
		if call.Vers != proto.NFSVersion {
			return mismatch(call.Xid, proto.NFSVersion)
		}
		procs = nfsProcs
	case proto.ProgMount:
		if call.Vers != proto.MountVers3 {
			return mismatch(call.Xid, proto.MountVers3)
		}
		procs = mountProcs
	case proto.ProgNLM:
		if call.Vers != proto.NLMVersion {
			return mismatch(call.Xid, proto.NLMVersion)
		}
		// The asynchronous _MSG and _RES procedures (6 to 15) and
		// GRANTED (a client's procedure) are not served: PROC_UNAVAIL.
		procs = nlmProcs
	case proto.ProgNSM:
		if call.Vers != proto.NSMVersion {
			return mismatch(call.Xid, proto.NSMVersion)
		}
		procs = nsmProcs
	default:
		return proto.AppendRecordMark(proto.NewReply(call.Xid, proto.ProgUnavail).B)
	}
	if call.Proc >= uint32(len(procs)) || procs[call.Proc] == nil {
		return proto.AppendRecordMark(proto.NewReply(call.Xid, proto.ProcUnavail).B)
	}
	s.log.Debug("nfs: call", "remote", remote, "prog", call.Prog, "proc", call.Proc, "uid", req.caller.Uid)
	if s.opts.OnCall != nil {
		start := time.Now()
		defer func() { s.opts.OnCall(call.Prog, call.Proc, time.Since(start)) }()
	}
	w := proto.NewReply(call.Xid, proto.Success)
	if st := s.opts.Export.refusal(allowed, call.Prog, call.Proc); st != proto.NFS3OK {
		if !allowed {
			s.log.Debug("nfs: client outside the allowed networks", "remote", remote, "prog", call.Prog, "proc", call.Proc)
		}
		refuse(w, call.Prog, call.Proc, st)
		return proto.AppendRecordMark(w.B)
	}
	args := proto.NewReader(call.Args)
	if call.Prog == proto.ProgNFS && changesAttrs(call.Proc) {
		s.attrEpoch.Add(1)
		defer s.attrEpoch.Add(1)
	}
	if !procs[call.Proc](s, context.Background(), req, args, w) {
		return proto.AppendRecordMark(proto.NewReply(call.Xid, proto.GarbageArgs).B)
	}
	return proto.AppendRecordMark(w.B)
}

// changesAttrs tells whether NFS procedure proc may change attributes
// that READ and WRITE use (Options.AttrCache). WRITE keeps its file's up
// to date itself.
func changesAttrs(proc uint32) bool {
	switch proc {
	case proto.NFSProcNull, proto.NFSProcGetAttr, proto.NFSProcLookup, proto.NFSProcAccess,
		proto.NFSProcReadlink, proto.NFSProcRead, proto.NFSProcWrite, proto.NFSProcReadDir,
		proto.NFSProcReadDirPlus, proto.NFSProcFSStat, proto.NFSProcFSInfo, proto.NFSProcPathConf,
		proto.NFSProcCommit: // it makes writes durable; WRITE applied them
		return false
	}
	return true
}

// procedure serves one call: it decodes args and appends its results to
// w. It returns false, having written nothing, when the arguments do not
// decode (GARBAGE_ARGS).
type procedure func(s *Server, ctx context.Context, req *request, args *proto.Reader, w *proto.Writer) bool

func mismatch(xid, vers uint32) []byte {
	w := proto.NewReply(xid, proto.ProgMismatch)
	w.Uint32(vers)
	w.Uint32(vers)
	return proto.AppendRecordMark(w.B)
}
