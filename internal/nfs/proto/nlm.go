package proto

// The Network Lock Manager, version 4 (program 100021), and the Network
// Status Monitor, version 1 (program 100024), as the Open Group's XNFS
// specification and RFC 1813's appendix II define them: the numbers, and
// the argument and result types with their encoders and strict decoders.

// NLM program, version and procedures.
const (
	ProgNLM    = 100021
	NLMVersion = 4

	NLMProcNull      = 0
	NLMProcTest      = 1
	NLMProcLock      = 2
	NLMProcCancel    = 3
	NLMProcUnlock    = 4
	NLMProcGranted   = 5
	NLMProcShare     = 20
	NLMProcUnshare   = 21
	NLMProcNMLock    = 22
	NLMProcFreeAll   = 23
	nlmProcLastAsync = 15 // TEST_MSG (6) to GRANTED_RES (15)
)

// nlm4_stats.
const (
	NLM4Granted           = 0
	NLM4Denied            = 1
	NLM4DeniedNoLocks     = 2
	NLM4Blocked           = 3
	NLM4DeniedGracePeriod = 4
	NLM4Deadlock          = 5
	NLM4ROFS              = 6
	NLM4StaleFH           = 7
	NLM4FBig              = 8
	NLM4Failed            = 9
)

// Limits of NLM's strings and netobjs (LM_MAXSTRLEN, MAXNETOBJ_SZ).
const (
	NLMMaxStr    = 1024
	NLMMaxNetobj = 1024
)

// NSM program, version and procedures.
const (
	ProgNSM    = 100024
	NSMVersion = 1

	NSMProcNull      = 0
	NSMProcStat      = 1
	NSMProcMon       = 2
	NSMProcUnmon     = 3
	NSMProcUnmonAll  = 4
	NSMProcSimuCrash = 5
	NSMProcNotify    = 6

	NSMStatSucc = 0 // res of sm_stat_res
	NSMStatFail = 1

	// NSMMaxStr is SM_MAXSTRLEN.
	NSMMaxStr = 1024
)

// IsNLMAsync reports whether proc is one of the asynchronous _MSG and
// _RES procedures (6 to 15).
func IsNLMAsync(proc uint32) bool { return proc > NLMProcGranted && proc <= nlmProcLastAsync }

// NLM4Lock is an nlm4_lock: who asks for which range of which file. Byte
// slices alias the message they were decoded from.
type NLM4Lock struct {
	CallerName string
	FH         []byte
	OH         []byte // the owner handle the client gives
	Svid       int32  // the client's process (or owner) id
	Offset     uint64
	Len        uint64 // 0: to the end of the file and beyond
}

// Decode reads an nlm4_lock.
func (l *NLM4Lock) Decode(r *Reader) {
	l.CallerName = r.String(NLMMaxStr)
	l.FH = r.Opaque(NLMMaxNetobj)
	l.OH = r.Opaque(NLMMaxNetobj)
	l.Svid = int32(r.Uint32())
	l.Offset = r.Uint64()
	l.Len = r.Uint64()
}

// Encode appends an nlm4_lock.
func (l *NLM4Lock) Encode(w *Writer) {
	w.String(l.CallerName)
	w.Opaque(l.FH)
	w.Opaque(l.OH)
	w.Uint32(uint32(l.Svid))
	w.Uint64(l.Offset)
	w.Uint64(l.Len)
}

// NLM4TestArgs are the arguments of TEST.
type NLM4TestArgs struct {
	Cookie    []byte
	Exclusive bool
	Lock      NLM4Lock
}

// Decode reads nlm4_testargs.
func (a *NLM4TestArgs) Decode(r *Reader) {
	a.Cookie = r.Opaque(NLMMaxNetobj)
	a.Exclusive = r.Bool()
	a.Lock.Decode(r)
}

// Encode appends nlm4_testargs.
func (a *NLM4TestArgs) Encode(w *Writer) {
	w.Opaque(a.Cookie)
	w.Bool(a.Exclusive)
	a.Lock.Encode(w)
}

// NLM4LockArgs are the arguments of LOCK and NM_LOCK.
type NLM4LockArgs struct {
	Cookie    []byte
	Block     bool
	Exclusive bool
	Lock      NLM4Lock
	Reclaim   bool
	State     int32 // the client's NSM state number
}

// Decode reads nlm4_lockargs.
func (a *NLM4LockArgs) Decode(r *Reader) {
	a.Cookie = r.Opaque(NLMMaxNetobj)
	a.Block = r.Bool()
	a.Exclusive = r.Bool()
	a.Lock.Decode(r)
	a.Reclaim = r.Bool()
	a.State = int32(r.Uint32())
}

// Encode appends nlm4_lockargs.
func (a *NLM4LockArgs) Encode(w *Writer) {
	w.Opaque(a.Cookie)
	w.Bool(a.Block)
	w.Bool(a.Exclusive)
	a.Lock.Encode(w)
	w.Bool(a.Reclaim)
	w.Uint32(uint32(a.State))
}

// NLM4CancArgs are the arguments of CANCEL.
type NLM4CancArgs struct {
	Cookie    []byte
	Block     bool
	Exclusive bool
	Lock      NLM4Lock
}

// Decode reads nlm4_cancargs.
func (a *NLM4CancArgs) Decode(r *Reader) {
	a.Cookie = r.Opaque(NLMMaxNetobj)
	a.Block = r.Bool()
	a.Exclusive = r.Bool()
	a.Lock.Decode(r)
}

// Encode appends nlm4_cancargs.
func (a *NLM4CancArgs) Encode(w *Writer) {
	w.Opaque(a.Cookie)
	w.Bool(a.Block)
	w.Bool(a.Exclusive)
	a.Lock.Encode(w)
}

// NLM4UnlockArgs are the arguments of UNLOCK.
type NLM4UnlockArgs struct {
	Cookie []byte
	Lock   NLM4Lock
}

// Decode reads nlm4_unlockargs.
func (a *NLM4UnlockArgs) Decode(r *Reader) {
	a.Cookie = r.Opaque(NLMMaxNetobj)
	a.Lock.Decode(r)
}

// Encode appends nlm4_unlockargs.
func (a *NLM4UnlockArgs) Encode(w *Writer) {
	w.Opaque(a.Cookie)
	a.Lock.Encode(w)
}

// NLM4ShareArgs are the arguments of SHARE and UNSHARE (a DOS share
// reservation: nlm4_share and reclaim).
type NLM4ShareArgs struct {
	Cookie     []byte
	CallerName string
	FH         []byte
	OH         []byte
	Mode       uint32 // fsh4_mode
	Access     uint32 // fsh4_access
	Reclaim    bool
}

// Decode reads nlm4_shareargs.
func (a *NLM4ShareArgs) Decode(r *Reader) {
	a.Cookie = r.Opaque(NLMMaxNetobj)
	a.CallerName = r.String(NLMMaxStr)
	a.FH = r.Opaque(NLMMaxNetobj)
	a.OH = r.Opaque(NLMMaxNetobj)
	a.Mode = r.Uint32()
	a.Access = r.Uint32()
	a.Reclaim = r.Bool()
}

// Encode appends nlm4_shareargs.
func (a *NLM4ShareArgs) Encode(w *Writer) {
	w.Opaque(a.Cookie)
	w.String(a.CallerName)
	w.Opaque(a.FH)
	w.Opaque(a.OH)
	w.Uint32(a.Mode)
	w.Uint32(a.Access)
	w.Bool(a.Reclaim)
}

// NLM4Notify are the arguments of FREE_ALL: a client host and its new
// NSM state.
type NLM4Notify struct {
	Name  string
	State int32
}

// Decode reads nlm4_notify.
func (a *NLM4Notify) Decode(r *Reader) {
	a.Name = r.String(NLMMaxStr)
	a.State = int32(r.Uint32())
}

// Encode appends nlm4_notify.
func (a *NLM4Notify) Encode(w *Writer) {
	w.String(a.Name)
	w.Uint32(uint32(a.State))
}

// NLM4Holder is an nlm4_holder: the lock that keeps a TEST from being
// granted.
type NLM4Holder struct {
	Exclusive bool
	Svid      int32
	OH        []byte
	Offset    uint64
	Len       uint64
}

// Decode reads an nlm4_holder.
func (h *NLM4Holder) Decode(r *Reader) {
	h.Exclusive = r.Bool()
	h.Svid = int32(r.Uint32())
	h.OH = r.Opaque(NLMMaxNetobj)
	h.Offset = r.Uint64()
	h.Len = r.Uint64()
}

// Encode appends an nlm4_holder.
func (h *NLM4Holder) Encode(w *Writer) {
	w.Bool(h.Exclusive)
	w.Uint32(uint32(h.Svid))
	w.Opaque(h.OH)
	w.Uint64(h.Offset)
	w.Uint64(h.Len)
}

// NSMMon are the arguments of MON: the host to monitor, whom to call back
// (my_id) and 16 private bytes for the callback.
type NSMMon struct {
	MonName string
	MyID    NSMMyID
	Priv    [16]byte
}

// NSMMyID is a my_id: the host and RPC procedure to call when the
// monitored host's state changes.
type NSMMyID struct {
	MyName                 string
	MyProg, MyVers, MyProc uint32
}

// Decode reads a my_id.
func (m *NSMMyID) Decode(r *Reader) {
	m.MyName = r.String(NSMMaxStr)
	m.MyProg = r.Uint32()
	m.MyVers = r.Uint32()
	m.MyProc = r.Uint32()
}

// Encode appends a my_id.
func (m *NSMMyID) Encode(w *Writer) {
	w.String(m.MyName)
	w.Uint32(m.MyProg)
	w.Uint32(m.MyVers)
	w.Uint32(m.MyProc)
}

// Decode reads a mon.
func (m *NSMMon) Decode(r *Reader) {
	m.MonName = r.String(NSMMaxStr)
	m.MyID.Decode(r)
	copy(m.Priv[:], r.Fixed(16))
}

// Encode appends a mon.
func (m *NSMMon) Encode(w *Writer) {
	w.String(m.MonName)
	m.MyID.Encode(w)
	w.Fixed(m.Priv[:])
}

// NSMStatChge are the arguments of NOTIFY: a host that rebooted and its
// new state number.
type NSMStatChge struct {
	MonName string
	State   int32
}

// Decode reads a stat_chge.
func (s *NSMStatChge) Decode(r *Reader) {
	s.MonName = r.String(NSMMaxStr)
	s.State = int32(r.Uint32())
}

// Encode appends a stat_chge.
func (s *NSMStatChge) Encode(w *Writer) {
	w.String(s.MonName)
	w.Uint32(uint32(s.State))
}
