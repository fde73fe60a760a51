package meta

// The claim of automatic metadata backups: mounts of a shared volume each
// run a backup timer, and the one whose timer fires first in an interval
// takes that interval's backup. The claim is one counter record holding
// the time of the last claim; every claim writes it, so two mounts that
// claim at once conflict and only one commits (kv.Txn: the conflict is
// materialized by the write itself). The daemon (backup.go there) does
// the backup; meta only arbitrates.

import (
	"context"
	"time"

	"github.com/cairnfs/cairn/internal/kv"
)

// BackupClaim is a claim ClaimBackup made: the time it recorded, and the
// one it replaced (zero: none), which ReleaseBackupClaim puts back.
type BackupClaim struct {
	At, Previous time.Time
}

// ClaimBackup claims the automatic backup of the interval now falls in,
// for a backup taken every interval: it succeeds (ok) when no claim was
// made in that interval (now truncated to a multiple of interval, in
// Unix time) and the last claim is at least half an interval old. The
// second rule keeps mounts whose clocks differ by a little from both
// taking a backup on either side of an interval's boundary. Mounts with
// different intervals share the record: the shortest interval wins,
// roughly. It fails with base.ErrReadOnly on a read-only client.
func (m *Meta) ClaimBackup(ctx context.Context, now time.Time, interval time.Duration) (c BackupClaim, ok bool, err error) {
	if interval <= 0 {
		interval = time.Nanosecond
	}
	err = m.update(ctx, func(t *wtx) error {
		ok = false
		last, err := counter(t, counterBackupClaim)
		if err != nil {
			return err
		}
		prev := time.Time{}
		if last != 0 {
			prev = time.Unix(0, int64(last))
		}
		if last != 0 && (prev.Truncate(interval).Equal(now.Truncate(interval)) || now.Sub(prev) < interval/2) {
			return nil
		}
		t.Set(counterKey(counterBackupClaim), u64(nil, uint64(now.UnixNano())))
		c, ok = BackupClaim{At: now, Previous: prev}, true
		return nil
	})
	return c, ok && err == nil, err
}

// ReleaseBackupClaim takes back claim c, whose backup failed, so that
// another mount can take the interval's backup: the record gets the
// claim c replaced, unless another claim replaced c meanwhile.
func (m *Meta) ReleaseBackupClaim(ctx context.Context, c BackupClaim) error {
	return m.update(ctx, func(t *wtx) error {
		last, err := counter(t, counterBackupClaim)
		if err != nil || last != uint64(c.At.UnixNano()) {
			return err
		}
		if c.Previous.IsZero() {
			t.Delete(counterKey(counterBackupClaim))
		} else {
			t.Set(counterKey(counterBackupClaim), u64(nil, uint64(c.Previous.UnixNano())))
		}
		return nil
	})
}

// LastBackupClaim returns the time of the last claim (zero: none).
func (m *Meta) LastBackupClaim(ctx context.Context) (time.Time, error) {
	var at time.Time
	err := m.view(ctx, func(r kv.Reader) error {
		last, err := counter(r, counterBackupClaim)
		if last != 0 {
			at = time.Unix(0, int64(last))
		}
		return err
	})
	return at, err
}
