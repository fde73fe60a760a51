package chunk

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/internal/object/mem"
)

// BenchmarkSequential measures streaming a 32 MiB file through a Writer in
// 128 KiB writes (upload included) and reading it back through a Reader in
// 128 KiB reads, cold cache, to object/mem.
func BenchmarkSequential(b *testing.B) {
	const size, io = 32 << 20, 128 << 10
	ctx := context.Background()
	buf := fill(io)
	b.Run("write", func(b *testing.B) {
		s := newTestStore(b, mem.New(), nil, Options{})
		b.SetBytes(size)
		for b.Loop() {
			w := s.NewWriter(newCommitter())
			for off := 0; off < size; off += io {
				if err := w.Write(ctx, int64(off), buf); err != nil {
					b.Fatal(err)
				}
			}
			if err := w.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			w.Close()
		}
	})
	b.Run("read", func(b *testing.B) {
		obj := mem.New()
		s := newTestStore(b, obj, nil, Options{})
		c := newCommitter()
		w := s.NewWriter(c)
		for off := 0; off < size; off += io {
			if err := w.Write(ctx, int64(off), buf); err != nil {
				b.Fatal(err)
			}
		}
		if err := w.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		w.Close()
		slices := c.chunk(0)
		p := make([]byte, io)
		b.SetBytes(size)
		for b.Loop() {
			s := newTestStore(b, obj, newMapCache(), Options{}) // cold cache
			r := s.NewReader()
			for off := 0; off < size; off += io {
				if _, err := r.ReadChunk(ctx, 0, slices, uint32(off), p); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

// TestDependencies keeps chunk below vfs and meta (DESIGN.md).
func TestDependencies(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/cairnfs/cairn/internal/") {
			switch strings.TrimPrefix(dep, "github.com/cairnfs/cairn/internal/") {
			case "base", "object", "chunk":
			default:
				t.Errorf("chunk depends on %s", dep)
			}
		}
	}
}
