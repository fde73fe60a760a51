package daemon

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/internal/kv"
)

func TestParseMetaURL(t *testing.T) {
	for _, c := range []struct {
		in, path, err string
	}{
		{"pebble:///var/lib/cairn/meta", "/var/lib/cairn/meta", ""},
		{"pebble:///a/../b/", "/b", ""},
		{"pebble://host/x", "", "absolute"},
		{"pebble://rel", "", "absolute"},
		{"/plain/path", "", "no scheme"},
		{"mysql://x", "", "unknown scheme"},
		{"::", "", "missing protocol scheme"},
	} {
		loc, err := ParseMetaURL(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: err %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || loc.Path != c.path {
			t.Errorf("%q: %+v %v", c.in, loc, err)
		}
	}
	loc, _ := ParseMetaURL("pebble:///srv/c/meta")
	if loc.DefaultDataURL() != "file:///srv/c/data" || loc.SocketPath() != "/srv/c/meta/cairn.sock" {
		t.Errorf("derived paths: %s %s", loc.DefaultDataURL(), loc.SocketPath())
	}
}

func TestUnescapeMount(t *testing.T) {
	if got := unescapeMount(`/mnt/a\040b\011c`); got != "/mnt/a b\tc" {
		t.Errorf("got %q", got)
	}
}

// The control socket serves admin verbs for a volume held by this
// process, and a second open of the store names the holder.
func TestControlSocket(t *testing.T) {
	ctx := context.Background()
	vol, dir := newVolume(t, "ctl")
	url := "pebble://" + dir + "/meta"
	srv, err := ServeControl(vol, Holder{Pid: 4242, Host: "h", MountPoint: "/mnt/x"}, RunAdmin)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	var out strings.Builder
	if err := CallControl(vol.Loc, Request{Verb: "status"}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "ctl") {
		t.Fatalf("status over the socket:\n%s", out.String())
	}
	if err := CallControl(vol.Loc, Request{Verb: "nonsense"}, io.Discard); err == nil || !strings.Contains(err.Error(), "unknown admin verb") {
		t.Fatalf("unknown verb: %v", err)
	}
	_, err = OpenVolume(ctx, VolumeOptions{MetaURL: url})
	if !errors.Is(err, kv.ErrLocked) || !strings.Contains(err.Error(), "pid 4242") || !strings.Contains(err.Error(), "/mnt/x") {
		t.Fatalf("second open: %v", err)
	}
}

// TestControlSocketReplaced: a server that ends after another took over its
// socket path (a mount point unmounted and mounted again while the first
// process shuts down) leaves the new socket in place; one that ends alone
// removes its own.
func TestControlSocketReplaced(t *testing.T) {
	vol, dir := newVolume(t, "ctl")
	path := dir + "/m.sock"
	old, err := ServeControlAt(path, vol, Holder{Pid: 1}, RunAdmin)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := ServeControlAt(path, vol, Holder{Pid: 2}, RunAdmin)
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := CallSocket(path, Request{Verb: "status"}, &out); err != nil {
		t.Fatalf("the new server's socket after the old one closed: %v", err)
	}
	if err := cur.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left after its server closed: %v", err)
	}
}

// newVolume formats an embedded volume named name in a temporary
// directory and opens it (closed when the test ends); it returns the
// volume and the directory (metadata in dir/meta).
func newVolume(t *testing.T, name string) (*Volume, string) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	url := "pebble://" + dir + "/meta"
	if _, err := Format(ctx, FormatOptions{MetaURL: url, Name: name}); err != nil {
		t.Fatal(err)
	}
	vol, err := OpenVolume(ctx, VolumeOptions{MetaURL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vol.Close() })
	return vol, dir
}

// TestControlSocketBinary: output that is not UTF-8 (a dump, find
// -print0 of odd names) crosses the control socket byte for byte.
func TestControlSocketBinary(t *testing.T) {
	vol, dir := newVolume(t, "ctl")
	want := make([]byte, 0, 3<<16)
	for i := 0; i < cap(want); i++ {
		want = append(want, byte(i*7+i>>8))
	}
	run := func(ctx context.Context, v *Volume, req Request, w io.Writer) error {
		for p := want; len(p) > 0; p = p[min(len(p), 5000):] {
			if _, err := w.Write(p[:min(len(p), 5000)]); err != nil {
				return err
			}
		}
		_, err := io.WriteString(w, "text after\n")
		return err
	}
	srv, err := ServeControlAt(dir+"/b.sock", vol, Holder{Pid: 1}, run)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var out bytes.Buffer
	if err := CallSocket(dir+"/b.sock", Request{Verb: "x"}, &out); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), append(want, "text after\n"...)) {
		t.Fatalf("binary output changed on the way: %d bytes, want %d", out.Len(), len(want)+11)
	}
}
