package fstest

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/posixtest"
)

// Checks are POSIX behaviours every Cairn front end must keep, each run
// in a fresh subdirectory of the mount point given to Run.
var Checks = map[string]func(t *testing.T, dir string){
	"RandomWritesModel":    RandomWritesModel,
	"LargeSequential":      LargeSequential,
	"SparseAndTruncate":    SparseAndTruncate,
	"UnlinkedOpenFile":     UnlinkedOpenFile,
	"ManyEntries":          ManyEntries,
	"RenameMatrix":         RenameMatrix,
	"HardLinks":            HardLinks,
	"ConcurrentWriters":    ConcurrentWriters,
	"AppendMode":           AppendMode,
	"MmapReadWrite":        MmapReadWrite,
	"ReadYourWrites":       ReadYourWrites,
	"ExchangeAndNoReplace": ExchangeAndNoReplace,
}

// Run runs every check against mountpoint, but for those skips names
// (check name to reason; nil for none).
func Run(t *testing.T, mountpoint string, skips map[string]string) {
	names := make([]string, 0, len(Checks))
	for n := range Checks {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t.Run(n, func(t *testing.T) {
			if why, ok := skips[n]; ok {
				t.Skip(why)
			}
			dir := filepath.Join(mountpoint, "check-"+n)
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			Checks[n](t, dir)
		})
	}
}

// RunPosix runs go-fuse's posixtest suite against mountpoint, each case
// in a fresh subdirectory, but for PosixSkips and those skips names
// (case name to reason; nil for none).
func RunPosix(t *testing.T, mountpoint string, skips map[string]string) {
	names := make([]string, 0, len(posixtest.All))
	for n := range posixtest.All {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			if why, ok := PosixSkips[name]; ok {
				t.Skip(why)
			}
			if why, ok := skips[name]; ok {
				t.Skip(why)
			}
			posixtest.All[name](t, mkdir(t, filepath.Join(mountpoint, name)))
		})
	}
}

// PosixSkips are posixtest cases whose expectation differs from Linux's
// own file systems; each is documented in docs/posix.md.
var PosixSkips = map[string]string{
	"FcntlFlockLocksFile": "expects a second fcntl lock by the same process to conflict; POSIX (and ext4) let a process re-lock its own range",
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// RandomWritesModel writes random ranges through one descriptor and
// compares the file with an in-memory model after every few operations,
// also after reopening.
func RandomWritesModel(t *testing.T, dir string) {
	r := rand.New(rand.NewPCG(1, 2))
	p := filepath.Join(dir, "f")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o644)
	must(t, err)
	defer f.Close()
	var model []byte
	for i := 0; i < 300; i++ {
		switch r.IntN(10) {
		case 0:
			n := r.IntN(len(model) + 1 + 100000)
			must(t, f.Truncate(int64(n)))
			if n <= len(model) {
				model = model[:n]
			} else {
				model = append(model, make([]byte, n-len(model))...)
			}
		default:
			off := r.IntN(len(model) + 200000)
			n := 1 + r.IntN(70000)
			buf := make([]byte, n)
			for j := range buf {
				buf[j] = byte(r.Uint32())
			}
			_, err := f.WriteAt(buf, int64(off))
			must(t, err)
			if off+n > len(model) {
				model = append(model, make([]byte, off+n-len(model))...)
			}
			copy(model[off:], buf)
		}
		if i%25 == 24 {
			got, err := os.ReadFile(p)
			must(t, err)
			if !bytes.Equal(got, model) {
				t.Fatalf("op %d: content differs from model (len %d vs %d)", i, len(got), len(model))
			}
		}
	}
	must(t, f.Sync())
	fi, err := f.Stat()
	must(t, err)
	if fi.Size() != int64(len(model)) {
		t.Fatalf("size %d, want %d", fi.Size(), len(model))
	}
}

// LargeSequential writes 200 MiB crossing chunk boundaries and reads it
// back by checksum.
func LargeSequential(t *testing.T, dir string) {
	p := filepath.Join(dir, "big")
	f, err := os.Create(p)
	must(t, err)
	h := sha256.New()
	buf := make([]byte, 1<<20)
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 200; i++ {
		for j := 0; j < len(buf); j += 8 {
			v := r.Uint64()
			for k := 0; k < 8; k++ {
				buf[j+k] = byte(v >> (8 * k))
			}
		}
		h.Write(buf)
		_, err := f.Write(buf)
		must(t, err)
	}
	must(t, f.Close())
	want := h.Sum(nil)
	f, err = os.Open(p)
	must(t, err)
	defer f.Close()
	h2 := sha256.New()
	_, err = io.Copy(h2, f)
	must(t, err)
	if !bytes.Equal(h2.Sum(nil), want) {
		t.Fatal("checksum mismatch reading back 200 MiB")
	}
}

// SparseAndTruncate checks holes read as zeros, and that shrinking then
// growing a file does not resurrect old bytes.
func SparseAndTruncate(t *testing.T, dir string) {
	p := filepath.Join(dir, "sparse")
	f, err := os.Create(p)
	must(t, err)
	defer f.Close()
	_, err = f.WriteAt([]byte("end"), 100<<20)
	must(t, err)
	_, err = f.WriteAt(bytes.Repeat([]byte{7}, 10000), 0)
	must(t, err)
	must(t, f.Truncate(5000))
	must(t, f.Truncate(20000))
	got := make([]byte, 20000)
	_, err = f.ReadAt(got, 0)
	must(t, err)
	want := append(bytes.Repeat([]byte{7}, 5000), make([]byte, 15000)...)
	if !bytes.Equal(got, want) {
		t.Fatal("bytes past a truncation came back after extending")
	}
	fi, _ := f.Stat()
	if fi.Size() != 20000 {
		t.Fatalf("size %d", fi.Size())
	}
}

// UnlinkedOpenFile keeps an unlinked file readable and writable through
// open descriptors.
func UnlinkedOpenFile(t *testing.T, dir string) {
	p := filepath.Join(dir, "gone")
	must(t, os.WriteFile(p, []byte("still here"), 0o644))
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	must(t, err)
	defer f.Close()
	must(t, os.Remove(p))
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stat after unlink: %v", err)
	}
	_, err = f.WriteAt([]byte("!"), 10)
	must(t, err)
	got := make([]byte, 11)
	_, err = f.ReadAt(got, 0)
	must(t, err)
	if string(got) != "still here!" {
		t.Fatalf("got %q", got)
	}
}

// ManyEntries lists a directory of 3000 entries and removes them.
func ManyEntries(t *testing.T, dir string) {
	const n = 3000
	for i := 0; i < n; i++ {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("e%05d", i)))
		must(t, err)
		f.Close()
	}
	ents, err := os.ReadDir(dir)
	must(t, err)
	if len(ents) != n {
		t.Fatalf("listed %d entries, want %d", len(ents), n)
	}
	for i, e := range ents {
		if e.Name() != fmt.Sprintf("e%05d", i) {
			t.Fatalf("entry %d is %s", i, e.Name())
		}
	}
	for i := 0; i < n; i++ {
		must(t, os.Remove(filepath.Join(dir, fmt.Sprintf("e%05d", i))))
	}
	ents, err = os.ReadDir(dir)
	must(t, err)
	if len(ents) != 0 {
		t.Fatalf("%d entries left", len(ents))
	}
}

// RenameMatrix checks the error cases of rename(2).
func RenameMatrix(t *testing.T, dir string) {
	j := func(s string) string { return filepath.Join(dir, s) }
	must(t, os.Mkdir(j("d1"), 0o755))
	must(t, os.Mkdir(j("d2"), 0o755))
	must(t, os.WriteFile(j("d2/x"), nil, 0o644))
	must(t, os.WriteFile(j("f"), []byte("f"), 0o644))
	cases := []struct {
		from, to string
		want     error
	}{
		{"d1", "d2", syscall.ENOTEMPTY},
		{"d1", "f", syscall.ENOTDIR},
		{"f", "d1", syscall.EISDIR},
		{"d1", "d1/sub", syscall.EINVAL},
		{"missing", "x", syscall.ENOENT},
	}
	// syscall.Rename: os.Rename refuses an existing directory target itself.
	for _, c := range cases {
		err := syscall.Rename(j(c.from), j(c.to))
		if !errors.Is(err, c.want) {
			t.Errorf("rename %s -> %s: %v, want %v", c.from, c.to, err, c.want)
		}
	}
	must(t, os.Mkdir(j("d3"), 0o755))
	must(t, syscall.Rename(j("d1"), j("d3")))
	must(t, os.Rename(j("f"), j("d3/g")))
	b, err := os.ReadFile(j("d3/g"))
	must(t, err)
	if string(b) != "f" {
		t.Fatalf("content after rename %q", b)
	}
}

// HardLinks checks link counts and shared content.
func HardLinks(t *testing.T, dir string) {
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	must(t, os.WriteFile(a, []byte("one"), 0o644))
	must(t, os.Link(a, b))
	must(t, os.WriteFile(b, []byte("two"), 0o644))
	got, err := os.ReadFile(a)
	must(t, err)
	if string(got) != "two" {
		t.Fatalf("link content %q", got)
	}
	var st syscall.Stat_t
	must(t, syscall.Stat(a, &st))
	if st.Nlink != 2 {
		t.Fatalf("nlink %d", st.Nlink)
	}
	must(t, os.Remove(a))
	must(t, syscall.Stat(b, &st))
	if st.Nlink != 1 {
		t.Fatalf("nlink after unlink %d", st.Nlink)
	}
}

// ConcurrentWriters writes 8 files in parallel and checks each.
func ConcurrentWriters(t *testing.T, dir string) {
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			data := bytes.Repeat([]byte{byte(i)}, 3<<20+i)
			p := filepath.Join(dir, fmt.Sprint(i))
			if err := os.WriteFile(p, data, 0o644); err != nil {
				errs <- err
				return
			}
			got, err := os.ReadFile(p)
			if err != nil {
				errs <- err
				return
			}
			if !bytes.Equal(got, data) {
				errs <- fmt.Errorf("file %d differs", i)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// AppendMode checks O_APPEND from two descriptors.
func AppendMode(t *testing.T, dir string) {
	p := filepath.Join(dir, "log")
	f1, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	must(t, err)
	f2, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0o644)
	must(t, err)
	for i := 0; i < 100; i++ {
		_, err := f1.Write([]byte("a"))
		must(t, err)
		_, err = f2.Write([]byte("b"))
		must(t, err)
	}
	f1.Close()
	f2.Close()
	b, err := os.ReadFile(p)
	must(t, err)
	if len(b) != 200 || bytes.Count(b, []byte("a")) != 100 {
		t.Fatalf("appended file has %d bytes: %q", len(b), b[:min(40, len(b))])
	}
}

// MmapReadWrite writes through a shared mapping and reads it back with
// read(2) after msync.
func MmapReadWrite(t *testing.T, dir string) {
	p := filepath.Join(dir, "m")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o644)
	must(t, err)
	defer f.Close()
	must(t, f.Truncate(1<<20))
	m, err := syscall.Mmap(int(f.Fd()), 0, 1<<20, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	must(t, err)
	// The pages are faulted in by the kernel, not by the loop below (see
	// populateWrite): this process may be the file system's server.
	must(t, populateWrite(m))
	for i := range m {
		m[i] = byte(i % 251)
	}
	must(t, msync(m))
	must(t, syscall.Munmap(m))
	got, err := os.ReadFile(p)
	must(t, err)
	for i := range got {
		if got[i] != byte(i%251) {
			t.Fatalf("byte %d is %d", i, got[i])
		}
	}
}

// ReadYourWrites reads data back through the same descriptor before close.
func ReadYourWrites(t *testing.T, dir string) {
	f, err := os.OpenFile(filepath.Join(dir, "ryw"), os.O_CREATE|os.O_RDWR, 0o644)
	must(t, err)
	defer f.Close()
	for i := 0; i < 50; i++ {
		msg := []byte(fmt.Sprintf("record %04d;", i))
		_, err := f.WriteAt(msg, int64(i*12))
		must(t, err)
		got := make([]byte, 12)
		_, err = f.ReadAt(got, int64(i*12))
		must(t, err)
		if !bytes.Equal(got, msg) {
			t.Fatalf("read %q after writing %q", got, msg)
		}
	}
}

// ExchangeAndNoReplace checks renameat2 flags.
func ExchangeAndNoReplace(t *testing.T, dir string) {
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	must(t, os.WriteFile(a, []byte("A"), 0o644))
	must(t, os.WriteFile(b, []byte("B"), 0o644))
	if err := renameat2(a, b, 1); !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("RENAME_NOREPLACE over existing: %v", err)
	}
	must(t, renameat2(a, b, 2))
	ga, _ := os.ReadFile(a)
	gb, _ := os.ReadFile(b)
	if string(ga) != "B" || string(gb) != "A" {
		t.Fatalf("after exchange a=%q b=%q", ga, gb)
	}
}

func mkdir(t *testing.T, dir string) string {
	must(t, os.Mkdir(dir, 0o755))
	return dir
}
