package meta

// STUB: the meta helper replaces this file with the real implementation,
// keeping every signature below (it may add more).

import (
	"context"
	"log/slog"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// Options configures a Meta client.
type Options struct {
	Logger *slog.Logger
	// ReadOnly refuses every modification with base.ErrReadOnly.
	ReadOnly bool
	// InodeBatch and SliceBatch: how many ids are reserved per allocation
	// transaction (defaults 1024 each).
	InodeBatch, SliceBatch uint64
	// CompactThreshold: WriteSlice reports compaction is due when a chunk
	// has more slices than this (default 64).
	CompactThreshold int
}

// Meta is a metadata client over one kv.Store. Safe for concurrent use.
type Meta struct{}

// Format writes a new volume's settings and root directory. It refuses
// (base.ErrExist, wrapped) if a volume exists unless force is set.
func Format(ctx context.Context, store kv.Store, s Settings, force bool) error { panic("stub") }

// LoadSettings reads the settings record; base.ErrNotFound if not formatted.
func LoadSettings(ctx context.Context, store kv.Store) (Settings, error) { panic("stub") }

// Open opens a Meta client of a formatted volume.
func Open(ctx context.Context, store kv.Store, opts Options) (*Meta, error) { panic("stub") }

func (m *Meta) Settings() Settings                                               { panic("stub") }
func (m *Meta) Store() kv.Store                                                  { panic("stub") }
func (m *Meta) Close() error                                                     { panic("stub") }
func (m *Meta) NewSession(ctx context.Context, info SessionInfo) (uint64, error) { panic("stub") }
func (m *Meta) Heartbeat(ctx context.Context) error                              { panic("stub") }
func (m *Meta) CloseSession(ctx context.Context) error                           { panic("stub") }
func (m *Meta) ListSessions(ctx context.Context) ([]SessionInfo, error)          { panic("stub") }

func (m *Meta) Lookup(ctx context.Context, c *Caller, parent base.Ino, name string) (base.Ino, base.Attr, error) {
	panic("stub")
}
func (m *Meta) GetAttr(ctx context.Context, ino base.Ino) (base.Attr, error) { panic("stub") }
func (m *Meta) SetAttr(ctx context.Context, c *Caller, ino base.Ino, req SetAttrRequest) (base.Attr, error) {
	panic("stub")
}
func (m *Meta) Access(ctx context.Context, c *Caller, ino base.Ino, mask uint32) error { panic("stub") }
func (m *Meta) Mknod(ctx context.Context, c *Caller, parent base.Ino, name string, typ base.FileType, mode, umask, rdev uint32, target string) (base.Ino, base.Attr, error) {
	panic("stub")
}
func (m *Meta) Link(ctx context.Context, c *Caller, ino, parent base.Ino, name string) (base.Attr, error) {
	panic("stub")
}
func (m *Meta) Unlink(ctx context.Context, c *Caller, parent base.Ino, name string) error {
	panic("stub")
}
func (m *Meta) Rmdir(ctx context.Context, c *Caller, parent base.Ino, name string) error {
	panic("stub")
}
func (m *Meta) Rename(ctx context.Context, c *Caller, sp base.Ino, sn string, dp base.Ino, dn string, flags uint32) error {
	panic("stub")
}
func (m *Meta) Readdir(ctx context.Context, c *Caller, dir base.Ino, after string, limit int, plus bool) ([]base.Entry, error) {
	panic("stub")
}
func (m *Meta) Readlink(ctx context.Context, ino base.Ino) (string, error) { panic("stub") }
func (m *Meta) GetXattr(ctx context.Context, c *Caller, ino base.Ino, name string) ([]byte, error) {
	panic("stub")
}
func (m *Meta) ListXattr(ctx context.Context, c *Caller, ino base.Ino) ([]string, error) {
	panic("stub")
}
func (m *Meta) SetXattr(ctx context.Context, c *Caller, ino base.Ino, name string, value []byte, flags int) error {
	panic("stub")
}
func (m *Meta) RemoveXattr(ctx context.Context, c *Caller, ino base.Ino, name string) error {
	panic("stub")
}
func (m *Meta) StatFS(ctx context.Context) (StatFS, error)        { panic("stub") }
func (m *Meta) Usage(ctx context.Context) (Usage, error)          { panic("stub") }
func (m *Meta) OpenFile(ino base.Ino)                             { panic("stub") }
func (m *Meta) CloseFile(ctx context.Context, ino base.Ino) error { panic("stub") }
func (m *Meta) ReadChunk(ctx context.Context, ino base.Ino, index uint32) ([]base.Slice, error) {
	panic("stub")
}
func (m *Meta) NewSliceID(ctx context.Context) (uint64, error) { panic("stub") }
func (m *Meta) WriteSlice(ctx context.Context, ino base.Ino, index uint32, s base.Slice, mtime int64) (compact bool, err error) {
	panic("stub")
}
func (m *Meta) CompactChunk(ctx context.Context, ino base.Ino, index uint32, old []base.Slice, s base.Slice) error {
	panic("stub")
}
func (m *Meta) Chunks(ctx context.Context, ino base.Ino) ([]ChunkInfo, error)   { panic("stub") }
func (m *Meta) ForEachSlice(ctx context.Context, fn func(SliceUse) error) error { panic("stub") }
func (m *Meta) PendingDeletes(ctx context.Context) ([]base.Slice, error)        { panic("stub") }
func (m *Meta) Check(ctx context.Context, repair bool) ([]Problem, error)       { panic("stub") }
func (m *Meta) Sync(ctx context.Context) error                                  { panic("stub") }
