package directio_test

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"unsafe"

	"github.com/cairnfs/cairn/internal/directio"
)

// TestWriteAt: every write lands whole at its offset; direct I/O is used
// exactly when the buffer, the offset and the size allow it (on Linux,
// where the test directory's file system takes it).
func TestWriteAt(t *testing.T) {
	raw := make([]byte, 3*directio.Min+2*directio.Align)
	buf := raw[directio.Align-int(uintptr(unsafe.Pointer(&raw[0]))%directio.Align):]
	for i := range buf {
		buf[i] = byte(i*7 + i>>12)
	}
	var w directio.Writer
	for _, c := range []struct {
		name   string
		p      []byte
		off    int64
		direct bool
	}{
		{"aligned, with a tail", buf[:2*directio.Min+100], 0, true},
		{"aligned, after a header", buf[:directio.Min], directio.Align, true},
		{"short", buf[:directio.Min-directio.Align], 0, false},
		{"misaligned buffer", buf[1 : directio.Min+1], 0, false},
		{"misaligned offset", buf[:directio.Min], 100, false},
	} {
		f, err := os.Create(filepath.Join(t.TempDir(), "f"))
		if err != nil {
			t.Fatal(err)
		}
		direct, err := w.WriteAt(f, c.p, c.off)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if runtime.GOOS == "linux" && !w.Refused() && direct != c.direct {
			t.Errorf("%s: direct I/O %v, want %v", c.name, direct, c.direct)
		}
		got, err := os.ReadFile(f.Name())
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(got)) != c.off+int64(len(c.p)) || !bytes.Equal(got[c.off:], c.p) {
			t.Errorf("%s: file of %d bytes does not hold the write", c.name, len(got))
		}
	}
}
