package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/testenv/pgtest"
)

// The tests that stop PostgreSQL while a mount writes run the writer in a
// process of their own (the test binary again, with writerEnv set): a
// process that holds files open on the mount cannot start the PostgreSQL
// server the mount waits for. The exec of the server closes those files
// in the new process, and each close waits for the mount's FLUSH, which
// waits for PostgreSQL (measured: pg.Start took the mount's whole store
// timeout).

const writerEnv = "CAIRN_TEST_WRITER"

// writerConfig is what the writer process does: files Dir/fNNNN of Size +
// i×Step bytes (writerData), fsynced every SyncEvery-th (0: never), and
// every RemoveEvery-th file (0: never) the file RemoveBack before it
// removed; a Pause between files. It prints "ok I SYNCED" after each
// file, "rm I" after each removal, "err I MSG" and exits 1 at the first
// error, and stops when its standard input closes.
type writerConfig struct {
	Dir                     string
	Size, Step              int
	SyncEvery               int
	RemoveEvery, RemoveBack int
	Pause                   time.Duration
}

// writerData is the content of file i, n bytes long.
func writerData(i, n int) []byte {
	b := make([]byte, n)
	for j := range b {
		b[j] = byte(i*131 + j*7 + j>>9)
	}
	return b
}

func testWriter(cfg string) int {
	var c writerConfig
	if err := json.Unmarshal([]byte(cfg), &c); err != nil {
		fmt.Println("err -1", err)
		return 2
	}
	stop := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(stop) }()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return 0
		default:
		}
		name := filepath.Join(c.Dir, fmt.Sprintf("f%04d", i))
		sync := c.SyncEvery > 0 && i%c.SyncEvery == 0
		f, err := os.Create(name)
		if err == nil {
			_, err = f.Write(writerData(i, c.Size+i*c.Step))
		}
		if err == nil && sync {
			err = f.Sync()
		}
		if f != nil {
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			fmt.Printf("err %d %s\n", i, strings.ReplaceAll(err.Error(), "\n", " "))
			return 1
		}
		fmt.Printf("ok %d %t\n", i, sync)
		if c.RemoveEvery > 0 && i%c.RemoveEvery == c.RemoveEvery-1 && i >= c.RemoveBack {
			old := filepath.Join(c.Dir, fmt.Sprintf("f%04d", i-c.RemoveBack))
			if err := os.Remove(old); err != nil && !os.IsNotExist(err) {
				fmt.Printf("err %d remove: %s\n", i, err)
				return 1
			}
			fmt.Printf("rm %d\n", i-c.RemoveBack)
		}
		time.Sleep(c.Pause)
	}
}

// writerRun is a running writer process.
type writerRun struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	done   chan struct{}
	Synced map[int]bool // files whose fsync succeeded and that were not removed
	Files  int          // files written
	Err    string       // the writer's error line, if any
}

// startWriter starts a writer process with c.
func startWriter(t *testing.T, c writerConfig) *writerRun {
	t.Helper()
	js, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), writerEnv+"="+string(js))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	w := &writerRun{cmd: cmd, done: make(chan struct{}), Synced: map[int]bool{}}
	if w.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(w.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var i int
			var word string
			line := sc.Text()
			if _, err := fmt.Sscanf(line, "%s %d", &word, &i); err != nil {
				continue
			}
			switch word {
			case "ok":
				w.Files++
				if strings.HasSuffix(line, " true") {
					w.Synced[i] = true
				}
			case "rm":
				delete(w.Synced, i)
			case "err":
				w.Err = line
			}
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(func() { w.Stop() })
	return w
}

// Stop ends the writer and waits for it; afterwards its fields are final.
func (w *writerRun) Stop() {
	_ = w.stdin.Close()
	<-w.done
}

// outageQuotaVolume is the set-up of the tests that stop PostgreSQL under
// a writer: the shared server (started again when t ends), a shared
// volume with the trash on, mount "a" of it, and a quota (quotaFlags) on
// its directory /q. The mount waits up to 2 minutes for a store: a loaded
// machine may take longer than the default 30 s to stop and start
// PostgreSQL, and these tests show that every call waits the outage out.
func outageQuotaVolume(t *testing.T, quotaFlags ...string) (*pgtest.Server, *sharedVolume, *sharedMount) {
	t.Helper()
	if testing.Short() {
		t.Skip("stops the shared PostgreSQL server")
	}
	pg := pgtest.Shared(t)
	t.Cleanup(func() { _ = pg.Start() })
	v := newSharedVolume(t)
	if out, err := v.cairn(t, "config", "--trash-days", "1", v.meta); err != nil {
		t.Fatalf("config: %v\n%s", err, out)
	}
	a := v.mount(t, "a", "--store-timeout", "2m")
	if err := os.Mkdir(a.path("q"), 0o777); err != nil {
		t.Fatal(err)
	}
	if out, err := v.cairn(t, append([]string{"quota", "set", v.meta, "/q"}, quotaFlags...)...); err != nil {
		t.Fatalf("quota set: %v\n%s", err, out)
	}
	return pg, v, a
}
