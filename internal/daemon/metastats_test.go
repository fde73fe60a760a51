package daemon

import (
	"bytes"
	"context"
	"strings"
	"syscall"
	"testing"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/nfs"
	"github.com/cairnfs/cairn/internal/nfs/nfsclient"
	"github.com/cairnfs/cairn/internal/nfs/proto"
	"github.com/cairnfs/cairn/internal/vfs"
)

// TestMetaAndNFSStats checks that a volume counts its metadata
// transactions (a create commits updates) and, once it serves NFS, the
// gateway's calls per procedure; and that both reach the Prometheus text.
func TestMetaAndNFSStats(t *testing.T) {
	ctx := context.Background()
	vol, _ := newVolume(t, "ms")
	v := vfs.New(vol.Meta, vol.Chunks, vfs.Options{})
	defer v.Close(ctx)

	before := vol.Stats()
	if before.Meta.Total().Transactions == 0 {
		t.Error("opening a volume ran no counted transaction")
	}
	if before.NFS != nil {
		t.Errorf("NFS stats without a gateway: %+v", before.NFS)
	}
	_, _, fh, errno := v.Create(ctx, &base.Caller{}, base.RootIno, "f", 0o644, 0, syscall.O_RDWR)
	if errno != 0 {
		t.Fatal(errno)
	}
	v.Release(ctx, fh)
	after := vol.Stats()
	b, a := before.Meta.Kinds["update"], after.Meta.Kinds["update"]
	if a.Outcomes["ok"] <= b.Outcomes["ok"] || a.Latency.Count <= b.Latency.Count {
		t.Errorf("a create committed no update: before %+v, after %+v", b, a)
	}

	g, err := startNFS(v, vol, "127.0.0.1:0", "", false, nfs.Options{}, vol.Log)
	if err != nil {
		t.Fatal(err)
	}
	defer g.stop(vol.Log)
	c, err := nfsclient.Dial(g.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	root, err := c.Mount("/")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create(root, "g", proto.CreateUnchecked, proto.Sattr3{}, [8]byte{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Lookup(root, "g"); err != nil {
		t.Fatal(err)
	}
	// The create cached g's records: a lookup opens no view of the store.
	views := func() int64 {
		k := vol.Stats().Meta.Kinds["view"]
		return k.Latency.Count
	}
	v0 := views()
	if _, _, err := c.Lookup(root, "g"); err != nil {
		t.Fatal(err)
	}
	if n := views() - v0; n != 0 {
		t.Errorf("a lookup of cached records opened %d views of the store", n)
	}
	// A create asking for length 0 and the owner it gets anyway (as an
	// O_TRUNC create from Linux does) commits one update, not two.
	updates := func() int64 { return vol.Stats().Meta.Kinds["update"].Outcomes["ok"] }
	u0 := updates()
	zero, uid := uint64(0), uint32(0)
	if _, err := c.Create(root, "h", proto.CreateUnchecked, proto.Sattr3{Size: &zero, Uid: &uid}, [8]byte{}); err != nil {
		t.Fatal(err)
	}
	if n := updates() - u0; n != 1 {
		t.Errorf("a create with size 0 committed %d updates; want 1", n)
	}
	calls := map[string]int64{}
	for _, p := range vol.Stats().NFS {
		calls[p.Prog+"."+p.Proc] = p.Latency.Count
	}
	if calls["mount.mnt"] != 1 || calls["nfs.create"] != 2 || calls["nfs.lookup"] != 2 || calls["nfs.write"] != 0 {
		t.Errorf("NFS calls: %v", calls)
	}

	// The embedded engine keeps attributes and entries in memory: the
	// second lookup of g read no store.
	if lc := vol.Stats().Latest; lc == nil || lc.Hits == 0 || lc.Entries == 0 {
		t.Errorf("metadata cache stats: %+v", lc)
	}

	var out bytes.Buffer
	if err := WritePrometheus(&out, vol.Stats()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"# TYPE cairn_meta_transactions_total counter",
		`cairn_meta_transactions_total{kind="update",outcome="ok"} `,
		`cairn_meta_transactions_total{kind="view",outcome="aborted"} `,
		`cairn_meta_retries_total{kind="update"} 0`,
		`cairn_meta_transaction_seconds_bucket{kind="update",le="+Inf"} `,
		`cairn_meta_sync_seconds_count `,
		`cairn_nfs_calls_total{proc="lookup",prog="nfs"} 2`,
		`cairn_nfs_calls_total{proc="mnt",prog="mount"} 1`,
		`cairn_nfs_call_seconds_count{proc="create",prog="nfs"} 2`,
		`cairn_meta_cache_reads_total{result="hit"} `,
		`cairn_meta_cache_entries `,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if strings.Contains(out.String(), `proc="write"`) {
		t.Error("metrics list a procedure never called")
	}
}
