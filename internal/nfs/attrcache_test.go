package nfs

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/kv"
	"github.com/cairnfs/cairn/internal/nfs/proto"
)

// viewCounter counts a store's read-only views. It declares no ability
// of the store it wraps, so the metadata layer runs no latest-version
// cache over it: every attribute read is a view, as on a shared engine.
type viewCounter struct {
	kv.Store
	views atomic.Int64
}

func (s *viewCounter) View(ctx context.Context, fn func(r kv.Reader) error) error {
	s.views.Add(1)
	return s.Store.View(ctx, fn)
}

// newCountedEnv is a gateway with o over a store whose views are
// counted.
func newCountedEnv(t *testing.T, o Options) (*env, *viewCounter) {
	t.Helper()
	vc := &viewCounter{}
	v, m, cs := newVFSOver(t, func(s kv.Store) kv.Store { vc.Store = s; return vc })
	e := &env{v: v, m: m, cs: cs}
	e.start(t, o)
	return e, vc
}

// A stream of WRITEs, or of another user's READs, reads the file's
// attributes from the store at most once with Options.AttrCache, once
// per call without it, and answers the same attributes either way.
func TestAttrCacheWrites(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ttl      time.Duration
		maxViews int64
		minViews int64
	}{{"cached", time.Hour, 2, 0}, {"uncached", 0, 1 << 30, 20}} {
		t.Run(tc.name, func(t *testing.T) {
			e, vc := newCountedEnv(t, Options{AttrCache: tc.ttl})
			c, root := e.client(t)
			fh := createFile(t, c, root, "f", 0o644)
			data := randBytes(20*10000, 1)
			v0 := vc.views.Load()
			var last proto.Fattr3
			for i := 0; i < 20; i++ {
				time.Sleep(time.Millisecond) // distinct modification times
				res, err := c.Write(fh, uint64(i*10000), data[i*10000:(i+1)*10000], proto.Unstable)
				if err != nil {
					t.Fatal(err)
				}
				if !res.AfterOK || res.After.Size != uint64((i+1)*10000) {
					t.Fatalf("write %d: post-op attributes %v, size %d", i, res.AfterOK, res.After.Size)
				}
				if i > 0 && !timeBefore(last.Mtime, res.After.Mtime) {
					t.Fatalf("write %d: mtime %v not after the last write's %v", i, res.After.Mtime, last.Mtime)
				}
				last = res.After
			}
			views := vc.views.Load() - v0
			t.Logf("%d views for 20 WRITEs", views)
			if views > tc.maxViews || views < tc.minViews {
				t.Fatalf("%d views of the store for 20 WRITEs; want %d to %d", views, tc.minViews, tc.maxViews)
			}
			a, err := c.GetAttr(fh)
			if err != nil {
				t.Fatal(err)
			}
			if a.Size != last.Size || a.Mtime != last.Mtime || a.Ctime != last.Ctime || a.Mode != last.Mode {
				t.Fatalf("last WRITE answered size %d mtime %v ctime %v mode %o, GETATTR %d %v %v %o",
					last.Size, last.Mtime, last.Ctime, last.Mode, a.Size, a.Mtime, a.Ctime, a.Mode)
			}
			if got, _, err := c.Read(fh, 0, uint32(len(data))); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("read back %d bytes, %v", len(got), err)
			}
			// A FILE_SYNC WRITE extends the file: a READ through the
			// same gateway right after it reads to the new end.
			tail := randBytes(5000, 2)
			if _, err := c.Write(fh, uint64(len(data)), tail, proto.FileSync); err != nil {
				t.Fatal(err)
			}
			got, eof, err := c.Read(fh, uint64(len(data)), 10000)
			if err != nil || !bytes.Equal(got, tail) || !eof {
				t.Fatalf("read after a FILE_SYNC write that extended the file: %d bytes, eof %v, %v", len(got), eof, err)
			}
			data = append(data, tail...)

			// Another user's READs: their permission check too.
			user, _ := e.client(t)
			user.SetUser(1000, 1000)
			v0 = vc.views.Load()
			for i := 0; i < 20; i++ {
				got, _, err := user.Read(fh, uint64(i*10000), 10000)
				if err != nil || !bytes.Equal(got, data[i*10000:(i+1)*10000]) {
					t.Fatalf("another user's read %d: %d bytes, %v", i, len(got), err)
				}
			}
			views = vc.views.Load() - v0
			t.Logf("%d views for another user's 20 READs", views)
			if views > tc.maxViews || views < tc.minViews {
				t.Fatalf("%d views of the store for another user's 20 READs; want %d to %d", views, tc.minViews, tc.maxViews)
			}
		})
	}
}

// Kept attributes: a change through the same gateway is seen at once; a
// change through another (a second gateway process) once this one reads
// the file's attributes again, at a GETATTR (a client's open) or when
// they expire; a caller other than the owner is checked against the same
// attributes.
func TestAttrCacheChanges(t *testing.T) {
	for _, ttl := range []time.Duration{time.Hour, 0} {
		t.Run(ttl.String(), func(t *testing.T) { testAttrCacheChanges(t, Options{AttrCache: ttl, CloseToOpen: true}) })
	}
}

func testAttrCacheChanges(t *testing.T, o Options) {
	e := newEnvWith(t, o)
	other := e.sibling(t, o)
	c, root := e.client(t)
	user, _ := e.client(t)
	user.SetUser(1000, 1000)
	c2, _ := other.client(t)

	fh := createFile(t, c, root, "f", 0o666)
	if _, err := user.Write(fh, 0, []byte("hello"), proto.Unstable); err != nil {
		t.Fatal(err)
	}
	if err := c.SetAttr(fh, proto.Sattr3{Mode: u32(0o600)}); err != nil {
		t.Fatal(err)
	}
	if _, err := user.Write(fh, 5, []byte("x"), proto.Unstable); status(err) != proto.NFS3ErrAccess {
		t.Fatalf("WRITE after chmod 600 through this gateway: %v, want NFS3ERR_ACCES", err)
	}
	// chmod through the other gateway: with attributes kept, seen here
	// after a GETATTR (as a mount's kernel checks its attribute cache).
	if err := c2.SetAttr(fh, proto.Sattr3{Mode: u32(0o666)}); err != nil {
		t.Fatal(err)
	}
	_, err := user.Write(fh, 5, []byte("x"), proto.Unstable)
	if want := uint32(proto.NFS3OK); o.AttrCache > 0 && status(err) != proto.NFS3ErrAccess || o.AttrCache == 0 && status(err) != want {
		t.Fatalf("WRITE after chmod 666 through the other gateway, attributes kept for %v: %v", o.AttrCache, err)
	}
	if a, err := user.GetAttr(fh); err != nil || a.Mode&0o777 != 0o666 {
		t.Fatalf("GETATTR: mode %o, %v", a.Mode, err)
	}
	if _, err := user.Write(fh, 5, []byte(" world"), proto.Unstable); err != nil {
		t.Fatalf("WRITE after a GETATTR showed chmod 666 through the other gateway: %v", err)
	}
	if _, err := c.Commit(fh); err != nil {
		t.Fatal(err)
	}
	// A truncation through this gateway: the next READ ends at once.
	if got, _, err := c.Read(fh, 0, 100); err != nil || string(got) != "hello world" {
		t.Fatalf("read %q, %v", got, err)
	}
	if err := c.SetAttr(fh, proto.Sattr3{Size: u64(2)}); err != nil {
		t.Fatal(err)
	}
	if got, eof, err := c.Read(fh, 0, 100); err != nil || string(got) != "he" || !eof {
		t.Fatalf("read after truncating here: %q eof %v, %v", got, eof, err)
	}
	// Through the other gateway: seen here after a GETATTR.
	if err := c2.SetAttr(fh, proto.Sattr3{Size: u64(1)}); err != nil {
		t.Fatal(err)
	}
	if a, err := c.GetAttr(fh); err != nil || a.Size != 1 {
		t.Fatalf("GETATTR after the other gateway's truncation: size %d, %v", a.Size, err)
	}
	if got, eof, err := c.Read(fh, 0, 100); err != nil || string(got) != "h" || !eof {
		t.Fatalf("read after the other gateway's truncation and a GETATTR: %q eof %v, %v", got, eof, err)
	}

	// Another gateway extends the file: a READ here sees the new end
	// once a GETATTR read it (close-to-open), and a READ before that
	// answers from the attributes it had.
	g, err := c.Create(root, "g", proto.CreateGuarded, proto.Sattr3{Mode: u32(0o644)}, [8]byte{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(g, 0, []byte("abc"), proto.FileSync); err != nil {
		t.Fatal(err)
	}
	if got, eof, err := c.Read(g, 0, 100); err != nil || string(got) != "abc" || !eof {
		t.Fatalf("read %q eof %v, %v", got, eof, err)
	}
	more := randBytes(70000, 3)
	if _, err := c2.Write(g, 3, more, proto.FileSync); err != nil {
		t.Fatal(err)
	}
	if a, err := c.GetAttr(g); err != nil || a.Size != 70003 {
		t.Fatalf("GETATTR after the other gateway's write: size %d, %v", a.Size, err)
	}
	got, _, err := c.Read(g, 0, 80000)
	if err != nil || !bytes.Equal(got, append([]byte("abc"), more...)) {
		t.Fatalf("read after GETATTR: %d bytes, %v; want 70003", len(got), err)
	}

	// A removal through this gateway: a WRITE to the handle is stale at
	// once, not after the kept attributes expire.
	if err := c.Remove(root, "g"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(g, 0, []byte("z"), proto.Unstable); status(err) != proto.NFS3ErrStale {
		t.Fatalf("WRITE to a file removed through this gateway: %v, want NFS3ERR_STALE", err)
	}
}

func timeBefore(a, b proto.Time) bool { return a.Sec < b.Sec || a.Sec == b.Sec && a.Nsec < b.Nsec }

// A COMMIT makes the file's writes durable and leaves its handle open for
// the client's next WRITE: a client that commits as it streams a file
// does not open it again after each COMMIT. Its attributes stay kept,
// and it answers them (the attributes a GETATTR reads after it) without
// reading them again.
func TestCommitKeepsHandle(t *testing.T) {
	e, vc := newCountedEnv(t, Options{AttrCache: time.Hour})
	c, root := e.client(t)
	fh := createFile(t, c, root, "f", 0o644)
	data := randBytes(8*10000, 4)
	v0 := vc.views.Load()
	for i := 0; i < 8; i++ {
		if _, err := c.Write(fh, uint64(i*10000), data[i*10000:(i+1)*10000], proto.Unstable); err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			_, after, ok, err := c.CommitAttr(fh)
			if err != nil {
				t.Fatal(err)
			}
			// Its answer: the attributes a GETATTR then reads.
			if a, err := c.GetAttr(fh); err != nil || !ok || a.Size != after.Size || a.Mtime != after.Mtime ||
				a.Ctime != after.Ctime || a.Mode != after.Mode || a.Size != uint64((i+1)*10000) {
				t.Fatalf("COMMIT %d answered %v size %d mtime %v ctime %v mode %o; GETATTR %d %v %v %o, %v",
					i/2, ok, after.Size, after.Mtime, after.Ctime, after.Mode, a.Size, a.Mtime, a.Ctime, a.Mode, err)
			}
			ino, st := e.srv.inoOf(ctx, fh)
			if st != proto.NFS3OK {
				t.Fatalf("handle: status %d", st)
			}
			f := e.srv.files.peek(ino)
			if f == nil {
				t.Fatalf("COMMIT %d closed the file's handle", i/2)
			}
			e.srv.files.put(ctx, f)
		}
	}
	// The first WRITE reads the attributes and opens the file, and each
	// GETATTR reads them; nothing else.
	if views := vc.views.Load() - v0; views > 2+4 {
		t.Fatalf("%d views of the store for 8 WRITEs and 4 COMMITs", views)
	}
	if got, _, err := c.Read(fh, 0, uint32(len(data))); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes, %v", len(got), err)
	}
}
