package proto

// Program numbers and versions.
const (
	ProgNFS    = 100003
	ProgMount  = 100005
	NFSVersion = 3
	MountVers3 = 3
)

// MOUNTv3 procedures and statuses (RFC 1813 appendix I).
const (
	MountProcNull    = 0
	MountProcMnt     = 1
	MountProcDump    = 2
	MountProcUmnt    = 3
	MountProcUmntAll = 4
	MountProcExport  = 5

	MntOK          = 0
	MntErrPerm     = 1
	MntErrNoEnt    = 2
	MntErrIO       = 5
	MntErrAccess   = 13
	MntErrNotDir   = 20
	MntErrInval    = 22
	MntErrNameLong = 63
	MntErrNotSupp  = 10004
	MntErrServer   = 10006

	MaxMountPath = 1024
	MaxMountName = 255
)

// NFSv3 procedures.
const (
	NFSProcNull        = 0
	NFSProcGetAttr     = 1
	NFSProcSetAttr     = 2
	NFSProcLookup      = 3
	NFSProcAccess      = 4
	NFSProcReadlink    = 5
	NFSProcRead        = 6
	NFSProcWrite       = 7
	NFSProcCreate      = 8
	NFSProcMkdir       = 9
	NFSProcSymlink     = 10
	NFSProcMknod       = 11
	NFSProcRemove      = 12
	NFSProcRmdir       = 13
	NFSProcRename      = 14
	NFSProcLink        = 15
	NFSProcReadDir     = 16
	NFSProcReadDirPlus = 17
	NFSProcFSStat      = 18
	NFSProcFSInfo      = 19
	NFSProcPathConf    = 20
	NFSProcCommit      = 21
)

// nfsstat3 values.
const (
	NFS3OK             = 0
	NFS3ErrPerm        = 1
	NFS3ErrNoEnt       = 2
	NFS3ErrIO          = 5
	NFS3ErrNXIO        = 6
	NFS3ErrAccess      = 13
	NFS3ErrExist       = 17
	NFS3ErrXDev        = 18
	NFS3ErrNoDev       = 19
	NFS3ErrNotDir      = 20
	NFS3ErrIsDir       = 21
	NFS3ErrInval       = 22
	NFS3ErrFBig        = 27
	NFS3ErrNoSpc       = 28
	NFS3ErrROFS        = 30
	NFS3ErrMLink       = 31
	NFS3ErrNameTooLong = 63
	NFS3ErrNotEmpty    = 66
	NFS3ErrDQuot       = 69
	NFS3ErrStale       = 70
	NFS3ErrBadHandle   = 10001
	NFS3ErrNotSync     = 10002
	NFS3ErrBadCookie   = 10003
	NFS3ErrNotSupp     = 10004
	NFS3ErrTooSmall    = 10005
	NFS3ErrServerFault = 10006
	NFS3ErrBadType     = 10007
	NFS3ErrJukebox     = 10008
)

// ftype3 values.
const (
	NF3Reg  = 1
	NF3Dir  = 2
	NF3Blk  = 3
	NF3Chr  = 4
	NF3Lnk  = 5
	NF3Sock = 6
	NF3FIFO = 7
)

// stable_how values.
const (
	Unstable = 0
	DataSync = 1
	FileSync = 2
)

// createmode3 values.
const (
	CreateUnchecked = 0
	CreateGuarded   = 1
	CreateExclusive = 2
)

// ACCESS bits.
const (
	AccessRead    = 0x01
	AccessLookup  = 0x02
	AccessModify  = 0x04
	AccessExtend  = 0x08
	AccessDelete  = 0x10
	AccessExecute = 0x20
)

// Limits.
const (
	MaxFHSize  = 64
	MaxName    = 255
	MaxPath    = 4096
	VerfSize   = 8
	CookieSize = 8
)

// time_how values of sattr3.
const (
	DontChange      = 0
	SetToServerTime = 1
	SetToClientTime = 2
)

// Time is an nfstime3.
type Time struct{ Sec, Nsec uint32 }

// Fattr3 is the attributes of a file.
type Fattr3 struct {
	Type                uint32
	Mode, Nlink         uint32
	Uid, Gid            uint32
	Size, Used          uint64
	Major, Minor        uint32
	Fsid, Fileid        uint64
	Atime, Mtime, Ctime Time
}

// Encode appends the fattr3.
func (a *Fattr3) Encode(w *Writer) {
	w.Uint32(a.Type)
	w.Uint32(a.Mode)
	w.Uint32(a.Nlink)
	w.Uint32(a.Uid)
	w.Uint32(a.Gid)
	w.Uint64(a.Size)
	w.Uint64(a.Used)
	w.Uint32(a.Major)
	w.Uint32(a.Minor)
	w.Uint64(a.Fsid)
	w.Uint64(a.Fileid)
	for _, t := range []Time{a.Atime, a.Mtime, a.Ctime} {
		w.Uint32(t.Sec)
		w.Uint32(t.Nsec)
	}
}

// DecodeFattr3 reads a fattr3.
func DecodeFattr3(r *Reader) Fattr3 {
	var a Fattr3
	a.Type = r.Uint32()
	a.Mode = r.Uint32()
	a.Nlink = r.Uint32()
	a.Uid = r.Uint32()
	a.Gid = r.Uint32()
	a.Size = r.Uint64()
	a.Used = r.Uint64()
	a.Major = r.Uint32()
	a.Minor = r.Uint32()
	a.Fsid = r.Uint64()
	a.Fileid = r.Uint64()
	for _, t := range []*Time{&a.Atime, &a.Mtime, &a.Ctime} {
		t.Sec = r.Uint32()
		t.Nsec = r.Uint32()
	}
	return a
}

// DecodePostOpAttr reads a post_op_attr.
func DecodePostOpAttr(r *Reader) (Fattr3, bool) {
	if !r.Bool() {
		return Fattr3{}, false
	}
	return DecodeFattr3(r), true
}

// DecodeWcc reads a wcc_data and returns its post-operation attributes,
// if present (ok); the pre-operation ones are skipped.
func DecodeWcc(r *Reader) (after Fattr3, ok bool) {
	if r.Bool() { // pre_op_attr: size, mtime, ctime
		r.Uint64()
		r.Uint64()
		r.Uint64()
	}
	return DecodePostOpAttr(r)
}

// Sattr3 is the settable attributes of a file; nil fields are not set.
type Sattr3 struct {
	Mode, Uid, Gid *uint32
	Size           *uint64
	// AtimeHow and MtimeHow are DontChange, SetToServerTime or
	// SetToClientTime (with Atime/Mtime).
	AtimeHow, MtimeHow uint32
	Atime, Mtime       Time
}

// Encode appends the sattr3.
func (s *Sattr3) Encode(w *Writer) {
	for _, p := range []*uint32{s.Mode, s.Uid, s.Gid} {
		w.Bool(p != nil)
		if p != nil {
			w.Uint32(*p)
		}
	}
	w.Bool(s.Size != nil)
	if s.Size != nil {
		w.Uint64(*s.Size)
	}
	for _, t := range []struct {
		how uint32
		t   Time
	}{{s.AtimeHow, s.Atime}, {s.MtimeHow, s.Mtime}} {
		w.Uint32(t.how)
		if t.how == SetToClientTime {
			w.Uint32(t.t.Sec)
			w.Uint32(t.t.Nsec)
		}
	}
}

// DecodeSattr3 reads a sattr3; an unknown time_how is an error.
func DecodeSattr3(r *Reader) Sattr3 {
	var s Sattr3
	for _, p := range []**uint32{&s.Mode, &s.Uid, &s.Gid} {
		if r.Bool() {
			v := r.Uint32()
			*p = &v
		}
	}
	if r.Bool() {
		v := r.Uint64()
		s.Size = &v
	}
	for _, t := range []struct {
		how *uint32
		t   *Time
	}{{&s.AtimeHow, &s.Atime}, {&s.MtimeHow, &s.Mtime}} {
		*t.how = r.Uint32()
		switch *t.how {
		case DontChange, SetToServerTime:
		case SetToClientTime:
			t.t.Sec = r.Uint32()
			t.t.Nsec = r.Uint32()
		default:
			r.fail(errBadTimeHow)
		}
	}
	return s
}

var errBadTimeHow = errorString("xdr: bad time_how")

type errorString string

func (e errorString) Error() string { return string(e) }
