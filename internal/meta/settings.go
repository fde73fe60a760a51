package meta

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// Settings that change after format: the volume's name, its limits
// (capacity, inode limit), the trash's retention and the inline limit of
// new slices. The others (UUID, format, block and chunk size, data store)
// are fixed: every block and every client depends on them. The inline
// limit only decides where blocks written from now on go (a block's
// place is in its slice id, base.InlineBit), so it may change on a
// volume whose format has blobs at all (version 2 and later).

// ChangeSettings applies change to the volume's settings record in one
// transaction and returns the new settings. change may alter Name,
// Capacity, Inodes, TrashDays and InlineMax (within Validate's bounds);
// a change of any other field is refused (ErrInvalid), and nothing is
// written. Turning the trash on is refused (ErrExist) while the root has
// an entry .trash that is not the trash. This client uses the new settings
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
		fixed.TrashDays, fixed.InlineMax = after.TrashDays, after.InlineMax
		if fixed != after {
			return fmt.Errorf("only the name, capacity, inode limit, trash days and inline limit change after format: %w", base.ErrInvalid)
		}
		if after.Name == "" {
			return fmt.Errorf("a volume needs a name: %w", base.ErrInvalid)
		}
		if after.InlineMax != before.InlineMax || after.TrashDays != before.TrashDays {
			if err := after.Validate(); err != nil {
				return err
			}
		}
		if after.TrashDays > 0 && before.TrashDays == 0 {
			if err := trashNameFree(tx); err != nil {
				return err
			}
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
	m.storeSettings(&out)
	return out, nil
}

// storeSettings makes s the settings this client applies; the grants of
// the volume's limits go if the limits changed (grant.go).
func (m *Meta) storeSettings(s *Settings) {
	m.noteLimits(m.settings.Swap(s), s)
}

// refreshSettings reads the settings record again, for the changes other
// clients made, as the heartbeat does in its own transaction (tests).
func (m *Meta) refreshSettings(ctx context.Context) error {
	s, err := LoadSettings(ctx, m.store)
	if err != nil {
		return err
	}
	m.storeSettings(&s)
	return nil
}

// trashNameFree fails (ErrExist) if the root's entry TrashName exists and
// is not the trash: a directory a user made before the trash existed.
func trashNameFree(tx kv.Txn) error {
	r := &wtx{Txn: tx}
	t, _, ok, err := getDentry(r, base.RootIno, TrashName)
	if err != nil || !ok {
		return err
	}
	a, err := getAttr(r, t)
	if err != nil {
		return err
	}
	if !isTrashDir(&a) {
		return fmt.Errorf("the root holds a %s that is not the trash; rename it first: %w", TrashName, base.ErrExist)
	}
	return nil
}
