package meta

// Destroy: a volume's metadata removed for good, in two steps. BeginDestroy
// checks that no client is mounted and turns the store into "a volume
// being destroyed" in one transaction (the settings go, a marker holding
// them comes), so no client opens it from then on; the caller deletes the
// data; FinishDestroy removes every key. A destroy that stops between the
// two is finished by running it again: BeginDestroy finds the marker.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// DestroyTarget is what BeginDestroy found.
type DestroyTarget struct {
	Settings Settings
	// Data is false when the store held an unfinished load: its data
	// store is the dumped volume's, which must not be touched.
	Data bool
	// Resumed: a destroy of this volume had begun already.
	Resumed bool
	// Stale lists the sessions of clients that stopped without closing
	// them (no heartbeat within their timeout): not counted as mounted.
	Stale []SessionInfo
}

// BeginDestroy refuses while any client of the volume is alive (a session
// whose heartbeat is younger than its timeout, or defaultTimeout when it
// gives none), and otherwise makes the store a volume being destroyed.
func BeginDestroy(ctx context.Context, store kv.Store, defaultTimeout time.Duration) (DestroyTarget, error) {
	var out DestroyTarget
	err := store.Update(ctx, func(tx kv.Txn) error {
		out = DestroyTarget{}
		v, err := tx.Get(settingsKey())
		if err != nil {
			return err
		}
		if v == nil {
			return resumeDestroy(tx, store.Name(), &out)
		}
		if out.Settings, err = decodeSettings(v); err != nil {
			return err
		}
		out.Data = true
		if out.Stale, err = noClients(tx, out.Settings.Name, defaultTimeout); err != nil {
			return err
		}
		// A client that registers its session concurrently writes this
		// counter too: one of the two transactions fails and runs again.
		n, err := counter(tx, counterNextSess)
		if err != nil {
			return err
		}
		tx.Set(counterKey(counterNextSess), u64(nil, n))
		js, err := json.Marshal(loadMarker{Destroy: true, Volume: out.Settings.Name, Started: time.Now().UTC(), Settings: v})
		if err != nil {
			return err
		}
		tx.Set(loadKey(), js)
		tx.Delete(settingsKey())
		return nil
	})
	return out, err
}

// CheckNoClients is BeginDestroy's check alone, changing nothing: it
// fails while a client of the volume in store is alive, and returns the
// stale sessions.
func CheckNoClients(ctx context.Context, store kv.Store, defaultTimeout time.Duration) (stale []SessionInfo, err error) {
	err = store.View(ctx, func(r kv.Reader) error {
		s, err := LoadSettings(ctx, store)
		if err != nil {
			return err
		}
		stale, err = noClients(r, s.Name, defaultTimeout)
		return err
	})
	return stale, err
}

// noClients fails (base.ErrBusy, naming them) if r holds sessions whose
// heartbeat is younger than their timeout (defaultTimeout when they give
// none); it returns the others.
func noClients(r kv.Reader, volume string, defaultTimeout time.Duration) (stale []SessionInfo, err error) {
	var live []string
	var derr error
	now := time.Now()
	err = r.Scan(prefixOnly(pSession), kv.PrefixEnd(prefixOnly(pSession)), false, func(k, v []byte) bool {
		var s SessionInfo
		if err := json.Unmarshal(v, &s); err != nil {
			derr = fmt.Errorf("session %x: %v: %w", k, err, base.ErrIO)
			return false
		}
		limit := s.Timeout
		if limit <= 0 {
			limit = defaultTimeout
		}
		if now.Sub(s.Heartbeat) <= limit {
			live = append(live, fmt.Sprintf("%s pid %d at %s", s.Host, s.Pid, s.MountPoint))
		} else {
			stale = append(stale, s)
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, derr
	}
	if len(live) > 0 {
		return nil, fmt.Errorf("volume %q is mounted (%s): unmount every client first: %w",
			volume, strings.Join(live, "; "), base.ErrBusy)
	}
	return stale, nil
}

// resumeDestroy fills out from the marker of a destroy or a load that did
// not finish.
func resumeDestroy(r kv.Reader, name string, out *DestroyTarget) error {
	v, err := r.Get(loadKey())
	if err != nil {
		return err
	}
	if v == nil {
		return fmt.Errorf("no volume in %s: %w", name, base.ErrNotFound)
	}
	var lm loadMarker
	if err := json.Unmarshal(v, &lm); err != nil {
		return fmt.Errorf("marker in %s: %v: %w", name, err, base.ErrIO)
	}
	if !lm.Destroy {
		out.Settings = Settings{Name: lm.Volume}
		return nil // an unfinished load: metadata only
	}
	s, err := decodeSettings(lm.Settings)
	if err != nil {
		return err
	}
	out.Settings, out.Data, out.Resumed = s, true, true
	return nil
}

// FinishDestroy removes every key of a store BeginDestroy prepared.
func FinishDestroy(ctx context.Context, store kv.Store) error {
	var marker []byte
	err := store.View(ctx, func(r kv.Reader) (err error) {
		if v, err := r.Get(settingsKey()); err != nil || v != nil {
			return fmt.Errorf("the store holds a volume: BeginDestroy first: %w", base.ErrInvalid)
		}
		marker, err = r.Get(loadKey())
		return err
	})
	if err != nil {
		return err
	}
	if marker == nil {
		return fmt.Errorf("no destroy marker in %s: BeginDestroy first: %w", store.Name(), base.ErrInvalid)
	}
	if err := wipe(ctx, store); err != nil {
		return err
	}
	return store.Sync(ctx)
}
