package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// manyClients is how many mounts TestSharedManyClients runs at once: the
// 16 nodes of the classic cluster scaling study (issue 37).
const manyClients = 16

// TestSharedManyClients mounts 16 clients of one shared volume and runs a
// short mixed load on all of them at once: each writes files of several
// sizes (inline, one block, several blocks), reads each back, renames it
// and unlinks some, in a directory of its own and in one directory all
// share, and appends records to one shared log (O_APPEND). Afterwards one
// client checks the whole tree (names, sizes and contents, the log's
// records), and fsck checks the metadata with every mount stopped. It
// also samples the connections the mounts hold on PostgreSQL, against the
// server's max_connections.
func TestSharedManyClients(t *testing.T) {
	if testing.Short() {
		t.Skip("16 mounts")
	}
	v := newSharedVolume(t)
	start := time.Now()
	mounts := make([]*sharedMount, manyClients)
	for i := range mounts {
		mounts[i] = v.mount(t, fmt.Sprintf("c%02d", i))
	}
	t.Logf("%d mounts up in %v", manyClients, time.Since(start).Round(time.Millisecond))
	if err := os.Mkdir(mounts[0].path("shared"), 0o755); err != nil {
		t.Fatal(err)
	}

	ctx, stopSampling := context.WithCancel(context.Background())
	peak := make(chan [2]int, 1)
	go func() { peak <- samplePGConns(ctx, t, v.meta) }()

	const (
		rounds  = 6
		records = 3 * rounds // appended to the shared log by each client
		recSize = 100
	)
	sizes := []int{3 << 10, 200 << 10, 4<<20 + 12345} // inline, one block, two blocks
	type file struct {
		path string
		data []byte
	}
	kept := make([][]file, manyClients)
	errs := make([]error, manyClients)
	var wg sync.WaitGroup
	loadStart := time.Now()
	for i, m := range mounts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = func() error {
				own := fmt.Sprintf("own%02d", i)
				if err := os.Mkdir(m.path(own), 0o755); err != nil {
					return err
				}
				logf, err := os.OpenFile(m.path("shared/log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
				if err != nil {
					return err
				}
				defer logf.Close()
				for k := 0; k < rounds; k++ {
					for _, dir := range []string{own, "shared"} {
						data := randomBytes(sizes[(i+k)%len(sizes)])
						tmp := fmt.Sprintf("%s/tmp-%02d-%d", dir, i, k)
						final := fmt.Sprintf("%s/f-%02d-%d", dir, i, k)
						if err := os.WriteFile(m.path(tmp), data, 0o644); err != nil {
							return err
						}
						got, err := os.ReadFile(m.path(tmp))
						if err != nil {
							return err
						}
						if !bytes.Equal(got, data) {
							return fmt.Errorf("%s: read back %d bytes, not the %d written", tmp, len(got), len(data))
						}
						if err := os.Rename(m.path(tmp), m.path(final)); err != nil {
							return err
						}
						if k%3 == 1 { // every third file goes again
							if err := os.Remove(m.path(final)); err != nil {
								return err
							}
							continue
						}
						kept[i] = append(kept[i], file{final, data})
					}
					for r := 0; r < records/rounds; r++ {
						rec := bytes.Repeat([]byte{byte('a' + i)}, recSize)
						if _, err := logf.Write(rec); err != nil {
							return err
						}
					}
				}
				return logf.Sync()
			}()
		}()
	}
	wg.Wait()
	loadTime := time.Since(loadStart)
	stopSampling()
	pk := <-peak
	t.Logf("mixed load on %d clients: %v; PostgreSQL connections of the volume's database at most %d (server max_connections %d)",
		manyClients, loadTime.Round(time.Millisecond), pk[0], pk[1])
	for i, err := range errs {
		if err != nil {
			t.Errorf("client %d: %v", i, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// One client checks everything, after the others' names and
	// attributes have had time to leave its caches (1 s by default).
	time.Sleep(1500 * time.Millisecond)
	check := mounts[manyClients-1]
	want := map[string][]byte{}
	for _, fs := range kept {
		for _, f := range fs {
			want[f.path] = f.data
		}
	}
	var got []string
	for _, dir := range append([]string{"shared"}, ownDirs()...) {
		ents, err := os.ReadDir(check.path(dir))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			got = append(got, dir+"/"+e.Name())
		}
	}
	var wantNames []string
	for p := range want {
		wantNames = append(wantNames, p)
	}
	wantNames = append(wantNames, "shared/log")
	sort.Strings(got)
	sort.Strings(wantNames)
	if fmt.Sprint(got) != fmt.Sprint(wantNames) {
		t.Fatalf("client %d lists\n%v\nwant\n%v", manyClients-1, got, wantNames)
	}
	for p, data := range want {
		b, err := os.ReadFile(check.path(p))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, data) {
			t.Errorf("%s: %d bytes, not the %d its writer wrote", p, len(b), len(data))
		}
	}
	log, err := os.ReadFile(check.path("shared/log"))
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != manyClients*records*recSize {
		t.Fatalf("shared log: %d bytes, want %d records of %d from each of %d clients", len(log), records, recSize, manyClients)
	}
	counts := map[byte]int{}
	for off := 0; off < len(log); off += recSize {
		rec := log[off : off+recSize]
		if !bytes.Equal(rec, bytes.Repeat(rec[:1], recSize)) {
			t.Fatalf("shared log: record at %d is torn: %q", off, rec)
		}
		counts[rec[0]]++
	}
	for i := 0; i < manyClients; i++ {
		if counts[byte('a'+i)] != records {
			t.Errorf("shared log: %d records of client %d, want %d", counts[byte('a'+i)], i, records)
		}
	}

	for _, m := range mounts {
		m.stop(t)
	}
	if out, err := v.cairn(t, "fsck", v.meta); err != nil {
		t.Fatalf("fsck: %v\n%s", err, out)
	}
	t.Logf("total %v", time.Since(start).Round(time.Millisecond))
}

func ownDirs() []string {
	var d []string
	for i := 0; i < manyClients; i++ {
		d = append(d, fmt.Sprintf("own%02d", i))
	}
	return d
}

// samplePGConns counts, every 100 ms until ctx ends, the server's
// connections to the database of url, and returns the largest count and
// the server's max_connections.
func samplePGConns(ctx context.Context, t *testing.T, url string) [2]int {
	c, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Errorf("sampling connections: %v", err)
		return [2]int{}
	}
	defer c.Close(context.Background())
	var maxConns, peak int
	if err := c.QueryRow(context.Background(), "SELECT current_setting('max_connections')::int").Scan(&maxConns); err != nil {
		t.Errorf("sampling connections: %v", err)
	}
	for {
		var n int
		// Not counting this connection.
		err := c.QueryRow(context.Background(),
			"SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()").Scan(&n)
		if err == nil && n > peak {
			peak = n
		}
		select {
		case <-ctx.Done():
			return [2]int{peak, maxConns}
		case <-time.After(100 * time.Millisecond):
		}
	}
}
