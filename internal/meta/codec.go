package meta

// Value encodings of records. Decoders check lengths strictly and return
// errors wrapping base.ErrIO; they never panic on any input.

import (
	"encoding/binary"
	"fmt"

	"github.com/cairnfs/cairn/internal/base"
)

const (
	attrVersion  = 1
	attrLen      = 71 // version 1: see encodeAttr
	attrQuotaLen = attrLen + 8
	dentryLen    = 9
	sliceLen     = 24
	maxSliceList = base.ChunkSize // an absurd upper bound, for sanity
)

// encodeAttr: version u8, type u8, mode u32, uid u32, gid u32, nlink u32,
// rdev u32, length u64, atime i64, mtime i64, ctime i64, btime i64,
// parent u64, flags u8; then, only for an inode a directory quota counts,
// quota u64 (Attr.Quota): a volume without quotas keeps 71-byte records.
func encodeAttr(a *base.Attr) []byte {
	b := make([]byte, 0, attrQuotaLen)
	b = append(b, attrVersion, byte(a.Type))
	b = u32(b, a.Mode)
	b = u32(b, a.Uid)
	b = u32(b, a.Gid)
	b = u32(b, a.Nlink)
	b = u32(b, a.Rdev)
	b = u64(b, a.Length)
	b = u64(b, uint64(a.Atime))
	b = u64(b, uint64(a.Mtime))
	b = u64(b, uint64(a.Ctime))
	b = u64(b, uint64(a.Btime))
	b = u64(b, uint64(a.Parent))
	b = append(b, a.Flags)
	if a.Quota != 0 {
		b = u64(b, uint64(a.Quota))
	}
	return b
}

func decodeAttr(b []byte) (base.Attr, error) {
	var a base.Attr
	if len(b) == 0 || b[0] != attrVersion {
		return a, fmt.Errorf("attr: unknown encoding version: %w", base.ErrIO)
	}
	if len(b) != attrLen && len(b) != attrQuotaLen {
		return a, fmt.Errorf("attr: %d bytes, want %d or %d: %w", len(b), attrLen, attrQuotaLen, base.ErrIO)
	}
	be := binary.BigEndian
	a.Type = base.FileType(b[1])
	if a.Type < base.TypeFile || a.Type > base.TypeSocket {
		return a, fmt.Errorf("attr: bad type %d: %w", b[1], base.ErrIO)
	}
	a.Mode = be.Uint32(b[2:])
	a.Uid = be.Uint32(b[6:])
	a.Gid = be.Uint32(b[10:])
	a.Nlink = be.Uint32(b[14:])
	a.Rdev = be.Uint32(b[18:])
	a.Length = be.Uint64(b[22:])
	a.Atime = int64(be.Uint64(b[30:]))
	a.Mtime = int64(be.Uint64(b[38:]))
	a.Ctime = int64(be.Uint64(b[46:]))
	a.Btime = int64(be.Uint64(b[54:]))
	a.Parent = base.Ino(be.Uint64(b[62:]))
	a.Flags = b[70]
	if len(b) == attrQuotaLen {
		a.Quota = base.Ino(be.Uint64(b[71:]))
		if a.Quota == 0 {
			return a, fmt.Errorf("attr: quota directory 0 written out: %w", base.ErrIO)
		}
	}
	return a, nil
}

func encodeDentry(ino base.Ino, typ base.FileType) []byte {
	return append(u64(make([]byte, 0, dentryLen), uint64(ino)), byte(typ))
}

func decodeDentry(b []byte) (base.Ino, base.FileType, error) {
	if len(b) != dentryLen {
		return 0, 0, fmt.Errorf("dentry: %d bytes, want %d: %w", len(b), dentryLen, base.ErrIO)
	}
	ino := base.Ino(binary.BigEndian.Uint64(b))
	typ := base.FileType(b[8])
	if ino == 0 || typ < base.TypeFile || typ > base.TypeSocket {
		return 0, 0, fmt.Errorf("dentry: bad ino %d or type %d: %w", ino, typ, base.ErrIO)
	}
	return ino, typ, nil
}

// encodeSlices: per slice pos u32, id u64, size u32, off u32, len u32.
func encodeSlices(ss []base.Slice) []byte {
	b := make([]byte, 0, len(ss)*sliceLen)
	for _, s := range ss {
		b = u32(b, s.Pos)
		b = u64(b, s.ID)
		b = u32(b, s.Size)
		b = u32(b, s.Off)
		b = u32(b, s.Len)
	}
	return b
}

func decodeSlices(b []byte) ([]base.Slice, error) {
	if len(b)%sliceLen != 0 {
		return nil, fmt.Errorf("slice list: %d bytes is not a multiple of %d: %w", len(b), sliceLen, base.ErrIO)
	}
	be := binary.BigEndian
	ss := make([]base.Slice, len(b)/sliceLen)
	for i := range ss {
		p := b[i*sliceLen:]
		s := base.Slice{Pos: be.Uint32(p), ID: be.Uint64(p[4:]), Size: be.Uint32(p[12:]),
			Off: be.Uint32(p[16:]), Len: be.Uint32(p[20:])}
		if err := checkSlice(s); err != nil {
			return nil, fmt.Errorf("slice list entry %d: %w", i, err)
		}
		ss[i] = s
	}
	return ss, nil
}

// checkSlice validates one slice reference (ErrIO-wrapped for stored data;
// callers validating input rewrap as ErrInvalid).
func checkSlice(s base.Slice) error {
	if uint64(s.Pos)+uint64(s.Len) > base.ChunkSize {
		return fmt.Errorf("slice %d: [%d,+%d) beyond chunk: %w", s.ID, s.Pos, s.Len, base.ErrIO)
	}
	if s.ID != 0 && uint64(s.Off)+uint64(s.Len) > uint64(s.Size) {
		return fmt.Errorf("slice %d: range [%d,+%d) beyond size %d: %w", s.ID, s.Off, s.Len, s.Size, base.ErrIO)
	}
	return nil
}

func encodeU64s(vs []uint64) []byte {
	b := make([]byte, 0, 8*len(vs))
	for _, v := range vs {
		b = u64(b, v)
	}
	return b
}

func decodeU64s(b []byte) ([]uint64, error) {
	if len(b)%8 != 0 {
		return nil, fmt.Errorf("u64 list: %d bytes: %w", len(b), base.ErrIO)
	}
	vs := make([]uint64, len(b)/8)
	for i := range vs {
		vs[i] = binary.BigEndian.Uint64(b[i*8:])
	}
	return vs, nil
}

func decodeU64(b []byte) (uint64, error) {
	if b == nil {
		return 0, nil
	}
	if len(b) != 8 {
		return 0, fmt.Errorf("u64 value: %d bytes: %w", len(b), base.ErrIO)
	}
	return binary.BigEndian.Uint64(b), nil
}
