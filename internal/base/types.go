package base

import "time"

// Ino is a 64-bit inode number. The root directory is RootIno; 0 is never a
// valid inode.
type Ino uint64

// RootIno is the inode number of the volume's root directory.
const RootIno Ino = 1

// FileType is the type of an inode, stored in attributes and dentries.
type FileType uint8

// The file types Cairn stores. The values are persisted; never renumber.
const (
	TypeFile    FileType = 1
	TypeDir     FileType = 2
	TypeSymlink FileType = 3
	TypeFIFO    FileType = 4
	TypeBlock   FileType = 5
	TypeChar    FileType = 6
	TypeSocket  FileType = 7
)

// String returns a short lower-case name of the type.
func (t FileType) String() string {
	switch t {
	case TypeFile:
		return "file"
	case TypeDir:
		return "dir"
	case TypeSymlink:
		return "symlink"
	case TypeFIFO:
		return "fifo"
	case TypeBlock:
		return "blockdev"
	case TypeChar:
		return "chardev"
	case TypeSocket:
		return "socket"
	}
	return "unknown"
}

// Mode bits for FileType as in S_IFMT.
const (
	sIFIFO  = 0o010000
	sIFCHR  = 0o020000
	sIFDIR  = 0o040000
	sIFBLK  = 0o060000
	sIFREG  = 0o100000
	sIFLNK  = 0o120000
	sIFSOCK = 0o140000
	sIFMT   = 0o170000
)

// ModeBits returns the S_IFMT bits of the type.
func (t FileType) ModeBits() uint32 {
	switch t {
	case TypeFile:
		return sIFREG
	case TypeDir:
		return sIFDIR
	case TypeSymlink:
		return sIFLNK
	case TypeFIFO:
		return sIFIFO
	case TypeBlock:
		return sIFBLK
	case TypeChar:
		return sIFCHR
	case TypeSocket:
		return sIFSOCK
	}
	return 0
}

// TypeFromMode extracts the file type from S_IFMT bits of a mode; 0 if none.
func TypeFromMode(mode uint32) FileType {
	switch mode & sIFMT {
	case sIFREG:
		return TypeFile
	case sIFDIR:
		return TypeDir
	case sIFLNK:
		return TypeSymlink
	case sIFIFO:
		return TypeFIFO
	case sIFBLK:
		return TypeBlock
	case sIFCHR:
		return TypeChar
	case sIFSOCK:
		return TypeSocket
	}
	return 0
}

// Attr is the attribute record of an inode. Times are nanoseconds since the
// Unix epoch. Mode holds only permission bits (07777); the type is in Type.
type Attr struct {
	Type   FileType
	Mode   uint32 // permission bits incl. setuid/setgid/sticky (07777)
	Uid    uint32
	Gid    uint32
	Nlink  uint32
	Rdev   uint32
	Length uint64 // bytes for files, target length for symlinks, 0 otherwise
	Atime  int64
	Mtime  int64
	Ctime  int64
	Btime  int64 // creation time
	Parent Ino   // for directories: the parent directory (root: itself)
	Flags  uint8 // attribute flags, see AttrFlag*
	// Quota is the directory whose quota counts this inode: the nearest
	// directory at or above it (itself, for a directory with a quota)
	// that has one; 0 if none does.
	Quota Ino
}

// Attribute flags (Attr.Flags).
const (
	// AttrFlagTrash marks a directory of the trash: /.trash itself, its
	// hour buckets, and every directory moved into it. Nothing may be
	// created in, removed from or renamed out of such a directory but by
	// the trash's own restore and purge (meta, trash.go).
	AttrFlagTrash uint8 = 1 << 0
	// AttrFlagTrashed marks an inode a link of which went into the trash
	// at least once: a later removal of one of its links looks for an
	// entry of the same name there first (meta's toTrash).
	AttrFlagTrashed uint8 = 1 << 1
)

// FullMode returns type bits | permission bits, as st_mode.
func (a *Attr) FullMode() uint32 { return a.Type.ModeBits() | a.Mode&0o7777 }

// Time helpers.
func NsToTime(ns int64) time.Time { return time.Unix(0, ns) }

// Entry is a directory entry as returned by directory reads.
type Entry struct {
	Name string
	Ino  Ino
	Type FileType
	Attr *Attr // filled only when requested (readdirplus)
}
