package meta

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// Block size limits and default.
const (
	MinBlockSize     = 64 << 10
	MaxBlockSize     = 16 << 20
	DefaultBlockSize = 4 << 20
	// MaxInlineMax bounds Settings.InlineMax: blobs are meant for small
	// files, and the smallest block size is larger still.
	MaxInlineMax = 64 << 10
)

// Validate checks the settings; it fills nothing in. Errors wrap
// base.ErrInvalid.
func (s *Settings) Validate() error {
	if s.Name == "" {
		return fmt.Errorf("volume name is empty: %w", base.ErrInvalid)
	}
	bs := s.BlockSize
	if bs < MinBlockSize || bs > MaxBlockSize || bs&(bs-1) != 0 {
		return fmt.Errorf("block size %d must be a power of two between %d and %d: %w",
			bs, MinBlockSize, MaxBlockSize, base.ErrInvalid)
	}
	if s.ChunkSize != base.ChunkSize {
		return fmt.Errorf("chunk size %d: only %d is supported: %w", s.ChunkSize, base.ChunkSize, base.ErrInvalid)
	}
	if s.FormatVersion < 1 {
		return fmt.Errorf("format version %d: %w", s.FormatVersion, base.ErrInvalid)
	}
	if s.InlineMax < 0 || s.InlineMax > MaxInlineMax || s.InlineMax >= bs {
		return fmt.Errorf("inline limit %d must be between 0 and %d bytes and below the block size: %w", s.InlineMax, MaxInlineMax, base.ErrInvalid)
	}
	if s.TrashDays < 0 || s.TrashDays > MaxTrashDays {
		return fmt.Errorf("trash days %d must be between 0 (no trash) and %d: %w", s.TrashDays, MaxTrashDays, base.ErrInvalid)
	}
	if s.InlineMax > 0 && s.FormatVersion < 2 {
		return fmt.Errorf("inline limit %d needs format version 2, not %d: %w", s.InlineMax, s.FormatVersion, base.ErrInvalid)
	}
	return nil
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// Format writes a new volume's settings and root directory. It refuses
// (base.ErrExist, wrapped) if a volume exists unless force is set, in which
// case every key of the store is removed first. Zero fields of s get
// defaults: UUID (random), FormatVersion (current), BlockSize (4 MiB),
// ChunkSize (base.ChunkSize), Created (now).
func Format(ctx context.Context, store kv.Store, s Settings, force bool) error {
	if s.UUID == "" {
		s.UUID = newUUID()
	}
	if s.FormatVersion == 0 {
		s.FormatVersion = CurrentFormatVersion
	}
	if s.BlockSize == 0 {
		s.BlockSize = DefaultBlockSize
	}
	if s.ChunkSize == 0 {
		s.ChunkSize = base.ChunkSize
	}
	if s.Created.IsZero() {
		s.Created = time.Now().UTC()
	}
	if err := s.Validate(); err != nil {
		return err
	}
	js, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("encoding settings: %w", err)
	}
	old, err := LoadSettings(ctx, store)
	switch {
	case err == nil && !force:
		return fmt.Errorf("volume %s already formatted here; use --force: %w", old.Name, base.ErrExist)
	case err != nil && !errors.Is(err, base.ErrNotFound) && !force:
		return fmt.Errorf("store holds unreadable settings (use --force to overwrite): %w", err)
	}
	if force {
		if err := wipe(ctx, store); err != nil {
			return fmt.Errorf("wiping old volume: %w", err)
		}
	}
	now := s.Created.UnixNano()
	root := base.Attr{Type: base.TypeDir, Mode: 0o755, Nlink: 2, Parent: base.RootIno,
		Atime: now, Mtime: now, Ctime: now, Btime: now}
	return store.Update(ctx, func(tx kv.Txn) error {
		if !force {
			v, err := tx.Get(settingsKey())
			if err != nil {
				return err
			}
			if v != nil {
				return fmt.Errorf("a volume was formatted here concurrently; use --force: %w", base.ErrExist)
			}
		}
		tx.Set(settingsKey(), js)
		tx.Set(epochKey(), u64(nil, 1))
		tx.Set(frozenKey(), nil)
		tx.Set(counterKey(counterNextInode), u64(nil, uint64(base.RootIno)+1))
		tx.Set(counterKey(counterNextSlice), u64(nil, 1))
		tx.Set(counterKey(counterUsedBytes), u64(nil, 0))
		tx.Set(counterKey(counterUsedInodes), u64(nil, 1))
		tx.Set(counterKey(counterNextSess), u64(nil, 1))
		t := &wtx{Txn: tx}
		return t.vset(attrKey(base.RootIno), encodeAttr(&root))
	})
}

// wipe deletes every key of the store, in batches.
func wipe(ctx context.Context, store kv.Store) error {
	for {
		n := 0
		err := store.Update(ctx, func(tx kv.Txn) error {
			var keys [][]byte
			n = 0
			if err := tx.Scan(nil, nil, false, func(k, _ []byte) bool {
				keys = append(keys, append([]byte(nil), k...))
				return len(keys) < 10000
			}); err != nil {
				return err
			}
			for _, k := range keys {
				tx.Delete(k)
			}
			n = len(keys)
			return nil
		})
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
	}
}

// LoadSettings reads the settings record; base.ErrNotFound if not formatted.
func LoadSettings(ctx context.Context, store kv.Store) (Settings, error) {
	var s Settings
	err := store.View(ctx, func(r kv.Reader) error {
		v, err := r.Get(settingsKey())
		if err != nil {
			return err
		}
		if v == nil {
			if err := unfinishedLoad(r, store.Name()); err != nil {
				return err
			}
			return fmt.Errorf("no volume formatted in %s: %w", store.Name(), base.ErrNotFound)
		}
		s, err = decodeSettings(v)
		return err
	})
	return s, err
}

// decodeSettings decodes the settings record's value.
func decodeSettings(v []byte) (Settings, error) {
	var s Settings
	if err := json.Unmarshal(v, &s); err != nil {
		return Settings{}, fmt.Errorf("decoding settings: %v: %w", err, base.ErrIO)
	}
	return s, nil
}
