package meta

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"

	"github.com/cairnfs/cairn/internal/base"
)

// TestSharedOpenUnlinkRace: client b opens a file by inode while client a
// removes its only name, many times, five ways: unlink, rename over it,
// unlink of a file a itself has open followed by a's close (which
// destroys the orphan it finds unheld), and unlink while a snapshot keeps
// the file's attributes (as they are, or changed since). POSIX: an open that succeeds keeps
// the file (nlink 0) until its close.
//
// Under PostgreSQL's snapshot isolation the open (reads the inode, writes
// its hold) and the removal (reads the holds, destroys the inode) wrote no
// key in common, so both committed (141 of 150 rounds of unlink, 149 of
// 150 of rename) and the open held a destroyed inode. Now both write the
// versions of the inode's attributes (touchAttrVersions).
// Both ways an open is recorded run it: in one round trip (openBlind) and
// in a transaction (openTxn). CAIRN_OPENRACE_ROUNDS sets the rounds per
// way (default 150).
func TestSharedOpenUnlinkRace(t *testing.T) {
	rounds := 150
	if s := os.Getenv("CAIRN_OPENRACE_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		ok(t, err)
		rounds = n
	}
	for _, blind := range []bool{true, false} {
		t.Run(fmt.Sprint("blind-opens=", blind), func(t *testing.T) { openUnlinkRace(t, rounds, Options{NoBlindOpens: !blind}) })
	}
}

// openUnlinkRace is TestSharedOpenUnlinkRace's rounds on two clients with
// options opts.
func openUnlinkRace(t *testing.T, rounds int, opts Options) {
	ms := pgClientsWith(t, 2, opts)
	a, b := ms[0], ms[1]
	ways := []string{"unlink", "rename-over", "unlink-then-close", "unlink-in-snapshot", "unlink-in-snapshot-changed"}
	for _, way := range ways {
		t.Run(way, func(t *testing.T) {
			lost, opened := 0, 0
			for round := 0; round < rounds; round++ {
				name := fmt.Sprint(way, round)
				ino := create(t, a, root, base.RootIno, name)
				if way == "rename-over" {
					create(t, a, root, base.RootIno, name+".new")
				}
				switch way {
				case "unlink-then-close":
					must[base.Attr](t)(a.OpenFile(ctx, ino))
				case "unlink-in-snapshot", "unlink-in-snapshot-changed":
					// A snapshot keeps the attributes' version: the
					// unlink leaves it and writes a tombstone.
					must[Snapshot](t)(a.CreateSnapshot(ctx, name))
					if way == "unlink-in-snapshot-changed" {
						// And a newer version at the live epoch.
						must[base.Attr](t)(a.SetAttr(ctx, root, ino, SetAttrRequest{Valid: SetMode, Mode: 0o600}))
					}
				}
				var wg sync.WaitGroup
				var openErr, removeErr error
				wg.Add(2)
				go func() { defer wg.Done(); _, openErr = b.OpenFile(ctx, ino) }()
				go func() {
					defer wg.Done()
					switch way {
					case "rename-over":
						removeErr = a.Rename(ctx, root, base.RootIno, name+".new", base.RootIno, name, 0)
					default:
						removeErr = a.Unlink(ctx, root, base.RootIno, name)
						if removeErr == nil && way == "unlink-then-close" {
							removeErr = a.CloseFile(ctx, ino)
							if removeErr == nil {
								removeErr = a.FlushReleases(ctx)
							}
						}
					}
				}()
				wg.Wait()
				ok(t, removeErr)
				if openErr != nil {
					continue // the removal destroyed it first: the open failed, as it should
				}
				opened++
				if _, err := b.GetAttr(ctx, ino); err != nil {
					lost++
					t.Logf("round %d: open succeeded, then the inode is gone: %v (holds %d)", round, err, holdCount(t, a, ino))
				}
				ok(t, b.CloseFile(ctx, ino))
				ok(t, b.FlushReleases(ctx))
				if _, err := a.GetAttr(ctx, ino); err == nil {
					t.Errorf("round %d: inode %d outlives its last close", round, ino)
				}
			}
			t.Logf("%d of %d racing opens succeeded", opened, rounds)
			if lost > 0 {
				t.Errorf("%d of %d opens racing a removal succeeded on an inode the removal destroyed", lost, rounds)
			}
		})
	}
	for _, p := range must[[]Problem](t)(a.Check(ctx, false)) {
		t.Errorf("check problem: %s ino=%d: %s", p.Kind, p.Ino, p.Detail)
	}
}
