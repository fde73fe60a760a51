package chunk

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"github.com/cairnfs/cairn/internal/object"
)

// TestStreamBlocks: a stream's full blocks are put as cold objects and
// their buffers, once uploaded, serve the next blocks; its short last
// block is neither. What is read back is what was written.
func TestStreamBlocks(t *testing.T) {
	obj := memStore()
	var mu sync.Mutex
	buffers := map[*byte]int{} // full blocks put from each buffer
	cold := map[int]int{}      // cold puts by object size
	puts := map[int]int{}
	obj.putHook = func(ctx context.Context, key string, data []byte) {
		mu.Lock()
		defer mu.Unlock()
		puts[len(data)]++
		if object.Cold(ctx) {
			cold[len(data)]++
		}
		buffers[&data[0]]++
	}
	s := newTestStore(t, obj, newMapCache(), Options{})
	bs := s.opts.BlockSize
	c := newCommitter()
	w := s.NewWriter(c)
	defer w.Close()
	const blocks = 12
	model := make([]byte, blocks*bs+1000)
	for i := range model {
		model[i] = byte(i*7 + i>>20)
	}
	ctx := context.Background()
	for off := 0; off < len(model); off += 1 << 20 {
		if err := w.Write(ctx, int64(off), model[off:min(off+1<<20, len(model))]); err != nil {
			t.Fatal(err)
		}
		if (off+1<<20)%(2*bs) == 0 {
			// Let the uploads end, so that their buffers come back.
			if err := w.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	full, short := EncodedLen(bs), EncodedLen(1000)
	if puts[full] != blocks || cold[full] != blocks {
		t.Errorf("%d full blocks put, %d of them cold; want %d, all", puts[full], cold[full], blocks)
	}
	if puts[short] != 1 || cold[short] != 0 {
		t.Errorf("%d short blocks put, %d of them cold; want 1, none", puts[short], cold[short])
	}
	if len(buffers) >= blocks+1 {
		t.Errorf("%d puts from %d buffers: no buffer was used twice", blocks+1, len(buffers))
	}
	if got := readFile(t, s, c, 0, len(model)); !bytes.Equal(got, model) {
		t.Fatal("content read back differs from what was written")
	}
}
