package meta

import "github.com/cairnfs/cairn/internal/base"

// The request vocabulary is base's (base/request.go), shared with the
// front ends, which do not import meta. These aliases keep meta's own
// code and its callers' unchanged; new code outside meta uses base's
// names.
type (
	Caller         = base.Caller
	SetAttrRequest = base.SetAttrRequest
	StatFS         = base.StatFS
	LockType       = base.LockType
	Lock           = base.Lock
)

// RootCaller is base.RootCaller.
var RootCaller = base.RootCaller

// Access masks, setattr flags, rename and xattr flags, lock types: base's.
const (
	MayExec  = base.MayExec
	MayWrite = base.MayWrite
	MayRead  = base.MayRead

	SetMode        = base.SetMode
	SetUid         = base.SetUid
	SetGid         = base.SetGid
	SetSize        = base.SetSize
	SetAtime       = base.SetAtime
	SetMtime       = base.SetMtime
	SetAtimeNow    = base.SetAtimeNow
	SetMtimeNow    = base.SetMtimeNow
	SetCtime       = base.SetCtime
	SetKillSuidgid = base.SetKillSuidgid

	RenameNoReplace = base.RenameNoReplace
	RenameExchange  = base.RenameExchange

	XattrCreate  = base.XattrCreate
	XattrReplace = base.XattrReplace

	Unlock    = base.Unlock
	ReadLock  = base.ReadLock
	WriteLock = base.WriteLock
	LockEOF   = base.LockEOF
)
