package daemon

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/meta"
)

// TestTrashPurgeDue: the background purge takes only what the retention
// lets go, with the clock it is given, and one claim per interval: a
// second try in the same interval (another client's) does nothing.
func TestTrashPurgeDue(t *testing.T) {
	ctx := context.Background()
	v, _ := newVolume(t, "trash")
	root := &base.Caller{}
	if _, _, err := v.purgeTrashDue(ctx, time.Now(), time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Meta.ChangeSettings(ctx, func(s *meta.Settings) error { s.TrashDays = 2; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, _, err := v.Meta.Mknod(ctx, root, base.RootIno, "f", base.TypeFile, 0o644, 0, 0, ""); err != nil {
		t.Fatal(err)
	}
	if err := v.Meta.Unlink(ctx, root, base.RootIno, "f"); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	interval := time.Hour
	for _, c := range []struct {
		at      time.Time
		claimed bool
		purged  int
	}{
		{removed.Add(24 * time.Hour), true, 0},                           // within the retention
		{removed.Add(24*time.Hour + time.Minute), false, 0},              // the same interval: claimed already
		{removed.Add(48*time.Hour + 2*time.Hour), true, 1},               // past it (the bucket's hour ended too)
		{removed.Add(48*time.Hour + 3*time.Hour + time.Minute), true, 0}, // nothing left
	} {
		st, claimed, err := v.purgeTrashDue(ctx, c.at, interval)
		if err != nil {
			t.Fatal(err)
		}
		if claimed != c.claimed || st.Entries != c.purged {
			t.Fatalf("at %s: claimed %v, purged %+v; want %v and %d entries", c.at.Sub(removed), claimed, st, c.claimed, c.purged)
		}
	}
	var out bytes.Buffer
	if err := RunAdmin(ctx, v, Request{Verb: "status"}, &out); err != nil || !strings.Contains(out.String(), "2 days; holds 0 B in 0 inodes") {
		t.Fatalf("status: %v\n%s", err, out.String())
	}
	out.Reset()
	if err := RunAdmin(ctx, v, Request{Verb: "config", Flags: map[string]string{"trash-days": "0", "inline-max": "4096"}}, &out); err != nil ||
		!strings.Contains(out.String(), "no trash") || !strings.Contains(out.String(), "inline-max  4.0 KiB (for new files)") {
		t.Fatalf("config: %v\n%s", err, out.String())
	}
	out.Reset()
	if err := RunAdmin(ctx, v, Request{Verb: "config", Flags: map[string]string{"inline-max": "65537"}}, &out); err == nil {
		t.Fatalf("config --inline-max past 64K: %s", out.String())
	}
}
