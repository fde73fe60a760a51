package bench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var osGetpid = os.Getpid

func TestRunPath(t *testing.T) {
	dir := t.TempDir()
	reads := 0
	o := Options{BlockSizes: []int{4096, 10000}, FileSize: 50000, Files: 9, Procs: 2,
		ServerPID: os.Getpid(), BeforeRead: func() error { reads++; return nil }}
	rep, err := Run(context.Background(), PathTarget{Dir: dir}, o)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range rep.Results {
		names = append(names, f.Workload)
		if f.ServerUsPerOp == nil || f.MetaTxPerOp != nil {
			t.Errorf("%s: server %v meta %v", f.Workload, f.ServerUsPerOp, f.MetaTxPerOp)
		}
	}
	if got := strings.Join(names, " "); got != "seq-write-4K seq-read-4K seq-write-10000 seq-read-10000 create stat unlink" {
		t.Fatalf("workloads %s", got)
	}
	// 50000/4096 rounds up to 13 calls, 50000/10000 is 5; 9 files over 2
	// workers is 4 each.
	for i, want := range []int64{13, 13, 5, 5, 8, 8, 8} {
		if rep.Results[i].Ops != want {
			t.Errorf("%s: %d ops, want %d", rep.Results[i].Workload, rep.Results[i].Ops, want)
		}
	}
	if reads != 2 {
		t.Errorf("BeforeRead ran %d times", reads)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("%d entries left behind", len(ents))
	}
	var b bytes.Buffer
	if err := WriteTable(&b, rep); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(b.String(), "\n| "); n != 1+1+7 {
		t.Errorf("%d table lines:\n%s", n, b.String())
	}
}

func TestRunOnlyRead(t *testing.T) {
	dir := t.TempDir()
	rep, err := Run(context.Background(), PathTarget{Dir: dir},
		Options{Workloads: []string{SeqRead, Unlink}, BlockSizes: []int{1000, 2000}, FileSize: 4000, Files: 3, Procs: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 3 || rep.Results[0].Ops != 4 || rep.Results[1].Ops != 2 || rep.Results[2].Workload != Unlink {
		t.Fatalf("%+v", rep.Results)
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, o := range []Options{
		{Workloads: []string{"seq-write", "mkfs"}},
		{BlockSizes: []int{0}},
		{BlockSizes: []int{2 << 20}},
		{Files: -1},
	} {
		if err := o.Validate(); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
	o := Options{Files: 2, Procs: 8}
	if err := o.Validate(); err != nil || o.Procs != 2 || o.FileSize != 256<<20 || len(o.Workloads) != 5 {
		t.Errorf("%+v %v", o, err)
	}
}

// TestAppendAndSharedDir runs the append workload and two runs' metadata
// workloads in one shared directory, at once, on a local directory and
// over NFS: the files of both runs land in the shared directory without
// clashing, the appended file has its size, and each run removes only
// what it made.
func TestAppendAndSharedDir(t *testing.T) {
	targets := map[string]func(t *testing.T) (Target, string){
		"path": func(t *testing.T) (Target, string) {
			dir := t.TempDir()
			return PathTarget{Dir: dir}, dir
		},
		"nfs": func(t *testing.T) (Target, string) {
			nt, err := DialNFS(NFSOptions{Addr: startGateway(t, 64<<10), Window: 4})
			if err != nil {
				t.Fatal(err)
			}
			return nt, ""
		},
	}
	for name, mk := range targets {
		t.Run(name, func(t *testing.T) {
			tg, dir := mk(t)
			o := Options{Workloads: []string{Append, Create, Stat}, AppendRecord: 100 << 10, FileSize: 1<<20 + 5,
				Files: 20, Procs: 2, SharedDir: "shared/d", StartAt: time.Now().Add(100 * time.Millisecond)}
			reps := make([]*Report, 2)
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for i := range reps {
				wg.Add(1)
				go func() {
					defer wg.Done()
					reps[i], errs[i] = Run(context.Background(), tg, o)
				}()
			}
			wg.Wait()
			for i, rep := range reps {
				if errs[i] != nil {
					t.Fatal(errs[i])
				}
				if len(rep.Results) != 3 || rep.Results[0].Workload != "append-100K" || rep.Results[0].Ops != 11 ||
					rep.Results[0].Bytes != 1<<20+5 || rep.Results[1].Ops != 20 || rep.Results[2].Ops != 20 {
					t.Fatalf("run %d: %+v", i, rep.Results)
				}
				if f := rep.Results[0]; f.Start < float64(o.StartAt.UnixNano())/1e9 || f.End <= f.Start {
					t.Errorf("run %d: append from %f to %f, start at %v", i, f.Start, f.End, o.StartAt)
				}
			}
			c, err := tg.Conn()
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Stat("shared/d"); err != nil {
				t.Fatalf("shared directory: %v", err)
			}
			if dir != "" {
				if ents, err := os.ReadDir(filepath.Join(dir, "shared/d")); err != nil || len(ents) != 0 {
					t.Errorf("shared directory after the runs: %v, %v", ents, err)
				}
			}
		})
	}
}

// TestSeqFileKept: with SeqFile, a run's seq-write leaves the file, and a
// later run's seq-read reads it back without writing it again.
func TestSeqFileKept(t *testing.T) {
	dir := t.TempDir()
	// The file's directory is made by the run (before its start).
	o := Options{Workloads: []string{SeqWrite}, BlockSizes: []int{4096}, FileSize: 40000, SeqFile: "keep/d/seq.dat"}
	if _, err := Run(context.Background(), PathTarget{Dir: dir}, o); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "keep/d/seq.dat"))
	if err != nil || fi.Size() != 40000 {
		t.Fatalf("kept file: %v, %v", fi, err)
	}
	o.Workloads = []string{SeqRead}
	rep, err := Run(context.Background(), PathTarget{Dir: dir}, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 1 || rep.Results[0].Workload != "seq-read-4K" || rep.Results[0].Bytes != 40000 {
		t.Fatalf("%+v", rep.Results)
	}
	if fi2, _ := os.Stat(filepath.Join(dir, "keep/d/seq.dat")); !fi2.ModTime().Equal(fi.ModTime()) {
		t.Error("the read-back run wrote the file again")
	}
}
