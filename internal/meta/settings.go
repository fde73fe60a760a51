package meta

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// Settings that change after format: the volume's name and its limits
// (capacity, inode limit). The others (UUID, format, block and chunk size,
// data store, inline limit) are fixed: every block and every client
// depends on them.

// ChangeSettings applies change to the volume's settings record in one
// transaction and returns the new settings. change may alter Name,
// Capacity and Inodes; a change of any other field is refused
// (ErrInvalid), and nothing is written. This client uses the new settings
// at once; the others at their next heartbeat.
func (m *Meta) ChangeSettings(ctx context.Context, change func(s *Settings) error) (Settings, error) {
	if m.opts.ReadOnly {
		return Settings{}, base.ErrReadOnly
	}
	var out Settings
	err := m.store.Update(ctx, func(tx kv.Txn) error {
		v, err := tx.Get(settingsKey())
		if err != nil {
			return err
		}
		if v == nil {
			return fmt.Errorf("no settings record: %w", base.ErrNotFound)
		}
		before, err := decodeSettings(v)
		if err != nil {
			return err
		}
		after := before
		if err := change(&after); err != nil {
			return err
		}
		fixed := before
		fixed.Name, fixed.Capacity, fixed.Inodes = after.Name, after.Capacity, after.Inodes
		if fixed != after {
			return fmt.Errorf("only the name, capacity and inode limit change after format: %w", base.ErrInvalid)
		}
		if after.Name == "" {
			return fmt.Errorf("a volume needs a name: %w", base.ErrInvalid)
		}
		js, err := json.Marshal(after)
		if err != nil {
			return err
		}
		tx.Set(settingsKey(), js)
		out = after
		return nil
	})
	if err != nil {
		return Settings{}, err
	}
	m.settings.Store(&out)
	return out, nil
}

// refreshSettings reads the settings record again, for the changes other
// clients made, as the heartbeat does in its own transaction (tests).
func (m *Meta) refreshSettings(ctx context.Context) error {
	s, err := LoadSettings(ctx, m.store)
	if err != nil {
		return err
	}
	m.settings.Store(&s)
	return nil
}
