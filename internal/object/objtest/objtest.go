// Package objtest is the conformance suite every object.Store backend must
// pass: Run(t, newStore) checks the contract written on object.Store. It is
// imported only by tests.
package objtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cairnfs/cairn/internal/object"
)

// Run runs the suite. newStore must return a new, empty store for each
// subtest; it should register its own cleanup with t.Cleanup.
func Run(t *testing.T, newStore func(t *testing.T) object.Store) {
	tests := []struct {
		name string
		fn   func(*testing.T, object.Store)
	}{
		{"PutGet", testPutGet},
		{"Ranges", testRanges},
		{"Overwrite", testOverwrite},
		{"Head", testHead},
		{"NotFound", testNotFound},
		{"Delete", testDelete},
		{"List", testList},
		{"ListStop", testListStop},
		{"InvalidKeys", testInvalidKeys},
		{"Nesting", testNesting},
		{"Ownership", testOwnership},
		{"Empty", testEmpty},
		{"Large", testLarge},
		{"Concurrent", testConcurrent},
		{"AtomicReplace", testAtomicReplace},
		{"Sync", testSync},
		{"DeleteMany", testDeleteMany},
		{"PutStream", testPutStream},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newStore(t)) })
	}
}

// pattern returns n deterministic bytes that differ per seed.
func pattern(seed, n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(uint64(seed), uint64(n)))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func put(t *testing.T, s object.Store, key string, data []byte) {
	t.Helper()
	if err := s.Put(t.Context(), key, data); err != nil {
		t.Fatalf("Put(%q, %d bytes): %v", key, len(data), err)
	}
}

func get(t *testing.T, s object.Store, key string, off, length int64) []byte {
	t.Helper()
	b, err := s.Get(t.Context(), key, off, length)
	if err != nil {
		t.Fatalf("Get(%q, %d, %d): %v", key, off, length, err)
	}
	return b
}

func list(t *testing.T, s object.Store, prefix string) []object.Info {
	t.Helper()
	var got []object.Info
	if err := s.List(t.Context(), prefix, func(i object.Info) bool {
		got = append(got, i)
		return true
	}); err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	return got
}

func testPutGet(t *testing.T, s object.Store) {
	data := pattern(1, 1000)
	put(t, s, "a/b/c", data)
	if got := get(t, s, "a/b/c", 0, -1); !bytes.Equal(got, data) {
		t.Fatalf("Get whole: got %d bytes, want the %d put", len(got), len(data))
	}
	got, err := object.ReadAll(t.Context(), s, "a/b/c")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("ReadAll: %d bytes, %v", len(got), err)
	}
	put(t, s, "top", []byte("x"))
	if got := get(t, s, "top", 0, -1); string(got) != "x" {
		t.Fatalf("Get(top) = %q, want x", got)
	}
}

func testRanges(t *testing.T, s object.Store) {
	data := pattern(2, 100)
	put(t, s, "r", data)
	for _, tc := range []struct {
		off, length int64
		want        []byte
	}{
		{0, -1, data},
		{0, 100, data},
		{0, 10, data[:10]},
		{10, 20, data[10:30]},
		{90, -1, data[90:]},
		{90, 50, data[90:]}, // runs past the end: short
		{99, 1, data[99:]},  // last byte
		{100, 10, nil},      // at the end: empty
		{100, -1, nil},      // at the end, to the end: empty
		{1000, 10, nil},     // far past the end: empty
		{5, 0, nil},         // zero length
		{0, 1 << 40, data},  // huge length must not allocate it
		{50, 1 << 62, data[50:]},
	} {
		got, err := s.Get(t.Context(), "r", tc.off, tc.length)
		if err != nil {
			t.Errorf("Get(r, %d, %d): %v", tc.off, tc.length, err)
			continue
		}
		if !bytes.Equal(got, tc.want) {
			t.Errorf("Get(r, %d, %d) = %d bytes, want %d", tc.off, tc.length, len(got), len(tc.want))
		}
	}
	if _, err := s.Get(t.Context(), "r", -1, 10); err == nil {
		t.Errorf("Get with negative offset succeeded")
	}
}

func testOverwrite(t *testing.T, s object.Store) {
	put(t, s, "k", pattern(3, 500))
	put(t, s, "k", []byte("short"))
	if got := get(t, s, "k", 0, -1); string(got) != "short" {
		t.Fatalf("after overwrite Get = %q, want %q", got, "short")
	}
	if got := list(t, s, ""); len(got) != 1 || got[0] != (object.Info{Key: "k", Size: 5}) {
		t.Fatalf("after overwrite List = %v, want [{k 5}]", got)
	}
}

func testHead(t *testing.T, s object.Store) {
	for i, n := range []int{0, 1, 4096, 100000} {
		key := fmt.Sprintf("h/%d", i)
		put(t, s, key, pattern(i, n))
		info, err := s.Head(t.Context(), key)
		if err != nil {
			t.Fatalf("Head(%q): %v", key, err)
		}
		if info != (object.Info{Key: key, Size: int64(n)}) {
			t.Errorf("Head(%q) = %+v, want size %d", key, info, n)
		}
	}
}

func testNotFound(t *testing.T, s object.Store) {
	ctx := t.Context()
	put(t, s, "exists/obj", []byte("x"))
	for _, key := range []string{"missing", "exists/missing", "exists", "exists/obj/below", "nodir/x"} {
		if _, err := s.Get(ctx, key, 0, -1); !errors.Is(err, object.ErrNotFound) {
			t.Errorf("Get(%q): err = %v, want ErrNotFound", key, err)
		}
		if _, err := s.Get(ctx, key, 0, 0); !errors.Is(err, object.ErrNotFound) {
			t.Errorf("Get(%q, 0, 0): err = %v, want ErrNotFound", key, err)
		}
		if _, err := s.Head(ctx, key); !errors.Is(err, object.ErrNotFound) {
			t.Errorf("Head(%q): err = %v, want ErrNotFound", key, err)
		}
	}
}

func testDelete(t *testing.T, s object.Store) {
	ctx := t.Context()
	put(t, s, "d/a", []byte("a"))
	put(t, s, "d/b", []byte("b"))
	for range 2 {
		if err := s.Delete(ctx, "d/a"); err != nil {
			t.Fatalf("Delete(d/a): %v", err)
		}
	}
	if err := s.Delete(ctx, "never/was"); err != nil {
		t.Fatalf("Delete of a missing key: %v", err)
	}
	if err := s.Delete(ctx, "d"); err != nil {
		t.Fatalf("Delete of a key that is only a directory: %v", err)
	}
	if _, err := s.Get(ctx, "d/a", 0, -1); !errors.Is(err, object.ErrNotFound) {
		t.Fatalf("Get after Delete: err = %v, want ErrNotFound", err)
	}
	if _, err := s.Head(ctx, "d/a"); !errors.Is(err, object.ErrNotFound) {
		t.Fatalf("Head after Delete: err = %v, want ErrNotFound", err)
	}
	if got := get(t, s, "d/b", 0, -1); string(got) != "b" {
		t.Fatalf("sibling after Delete = %q", got)
	}
	if got := list(t, s, ""); len(got) != 1 || got[0].Key != "d/b" {
		t.Fatalf("List after Delete = %v", got)
	}
	// A key can come back, and once everything below "d" is gone, "d"
	// itself can become an object.
	put(t, s, "d/a", []byte("again"))
	if got := get(t, s, "d/a", 0, -1); string(got) != "again" {
		t.Fatalf("Get after re-Put = %q", got)
	}
	for _, k := range []string{"d/a", "d/b"} {
		if err := s.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	put(t, s, "d", []byte("file now"))
}

// listKeys are chosen so that byte order differs from a naive directory
// walk: '-' < '.' < '/' < '0'.
var listKeys = []string{"a-x", "a.c", "a/b", "a/c/d", "a/c/e", "a/ca", "a0", "ab", "b", "b b/z", "c/~"}

func testList(t *testing.T, s object.Store) {
	if got := list(t, s, ""); len(got) != 0 {
		t.Fatalf("List of empty store = %v", got)
	}
	// Put in reverse order so that insertion order cannot pass for sorting.
	size := map[string]int64{}
	for i, k := range slices.Backward(listKeys) {
		put(t, s, k, pattern(i, i))
		size[k] = int64(i)
	}
	for _, prefix := range []string{"", "a", "a/", "a/c", "a/c/", "a/c/d", "a.", "b", "b ", "c/", "zz", "a/c/d/", "/", "../", "a//"} {
		var want []object.Info
		for _, k := range listKeys {
			if len(k) >= len(prefix) && k[:len(prefix)] == prefix {
				want = append(want, object.Info{Key: k, Size: size[k]})
			}
		}
		if got := list(t, s, prefix); !slices.Equal(got, want) {
			t.Errorf("List(%q) =\n  %v\nwant\n  %v", prefix, got, want)
		}
	}
}

func testListStop(t *testing.T, s object.Store) {
	for _, k := range listKeys {
		put(t, s, k, nil)
	}
	for _, stop := range []int{1, 3, len(listKeys)} {
		var got []string
		err := s.List(t.Context(), "", func(i object.Info) bool {
			got = append(got, i.Key)
			return len(got) < stop
		})
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		if !slices.Equal(got, listKeys[:stop]) {
			t.Errorf("List stopping after %d = %v, want %v", stop, got, listKeys[:stop])
		}
	}
}

// InvalidKeys are keys every store must reject with object.ErrInvalidKey.
var InvalidKeys = []string{
	"", "/", "/a", "a/", "a//b", ".", "..", "a/..", "../a", "a/./b", "./a",
	"tab\there", "nl\n", "nul\x00", "del\x7f", "caf\xc3\xa9",
	string(make([]byte, object.MaxKeyLen+1)),
	"x/" + string(bytes.Repeat([]byte("s"), object.MaxSegmentLen+1)),
}

func testInvalidKeys(t *testing.T, s object.Store) {
	ctx := t.Context()
	for _, key := range InvalidKeys {
		if err := s.Put(ctx, key, []byte("x")); !errors.Is(err, object.ErrInvalidKey) {
			t.Errorf("Put(%q): err = %v, want ErrInvalidKey", key, err)
		}
		if _, err := s.Get(ctx, key, 0, -1); !errors.Is(err, object.ErrInvalidKey) {
			t.Errorf("Get(%q): err = %v, want ErrInvalidKey", key, err)
		}
		if _, err := s.Head(ctx, key); !errors.Is(err, object.ErrInvalidKey) {
			t.Errorf("Head(%q): err = %v, want ErrInvalidKey", key, err)
		}
		if err := s.Delete(ctx, key); !errors.Is(err, object.ErrInvalidKey) {
			t.Errorf("Delete(%q): err = %v, want ErrInvalidKey", key, err)
		}
	}
	if got := list(t, s, ""); len(got) != 0 {
		t.Errorf("invalid keys were stored: %v", got)
	}
	// Valid oddities.
	for _, key := range []string{"a b", "~", "...", ".hidden", "a/.b/c..", "x!#$%&'()*+,-:;<=>?@[\\]^_`{|}"} {
		put(t, s, key, []byte(key))
		if got := get(t, s, key, 0, -1); string(got) != key {
			t.Errorf("Get(%q) = %q", key, got)
		}
	}
}

func testNesting(t *testing.T, s object.Store) {
	if n, ok := s.(interface{ AllowsNesting() bool }); ok && n.AllowsNesting() {
		testNestingAllowed(t, s)
		return
	}
	ctx := t.Context()
	put(t, s, "n/a", []byte("x"))
	if err := s.Put(ctx, "n", []byte("y")); !errors.Is(err, object.ErrConflict) {
		t.Errorf(`Put("n") over "n/a": err = %v, want ErrConflict`, err)
	}
	if err := s.Put(ctx, "n/a/b", []byte("y")); !errors.Is(err, object.ErrConflict) {
		t.Errorf(`Put("n/a/b") below "n/a": err = %v, want ErrConflict`, err)
	}
	if got := list(t, s, ""); len(got) != 1 || got[0].Key != "n/a" {
		t.Errorf("List after conflicting puts = %v", got)
	}
	if got := get(t, s, "n/a", 0, -1); string(got) != "x" {
		t.Errorf("n/a after conflicting puts = %q", got)
	}
}

// testNestingAllowed checks the weaker promise of a store that allows
// nesting keys: a nesting Put succeeds or fails with ErrConflict, and leaves
// the existing object alone.
func testNestingAllowed(t *testing.T, s object.Store) {
	ctx := t.Context()
	put(t, s, "n/a", []byte("x"))
	want := []object.Info{{Key: "n/a", Size: 1}}
	for _, key := range []string{"n", "n/a/b"} {
		switch err := s.Put(ctx, key, []byte("yy")); {
		case err == nil:
			want = append(want, object.Info{Key: key, Size: 2})
		case !errors.Is(err, object.ErrConflict):
			t.Errorf("Put(%q) nesting with \"n/a\": err = %v, want nil or ErrConflict", key, err)
		}
	}
	slices.SortFunc(want, func(a, b object.Info) int { return strings.Compare(a.Key, b.Key) })
	if got := list(t, s, ""); !slices.Equal(got, want) {
		t.Errorf("List after nesting puts = %v, want %v", got, want)
	}
	if got := get(t, s, "n/a", 0, -1); string(got) != "x" {
		t.Errorf("n/a after nesting puts = %q", got)
	}
}

func testOwnership(t *testing.T, s object.Store) {
	data := []byte("original")
	put(t, s, "o", data)
	copy(data, "CLOBBER!")
	got := get(t, s, "o", 0, -1)
	if string(got) != "original" {
		t.Fatalf("store kept the caller's slice: %q", got)
	}
	copy(got, "CLOBBER!")
	if got := get(t, s, "o", 0, -1); string(got) != "original" {
		t.Fatalf("Get returned the store's own memory: %q", got)
	}
}

func testEmpty(t *testing.T, s object.Store) {
	put(t, s, "e", nil)
	put(t, s, "e2", []byte{})
	for _, k := range []string{"e", "e2"} {
		info, err := s.Head(t.Context(), k)
		if err != nil || info.Size != 0 {
			t.Fatalf("Head(%q) = %+v, %v", k, info, err)
		}
		if got := get(t, s, k, 0, -1); len(got) != 0 {
			t.Fatalf("Get(%q) = %d bytes", k, len(got))
		}
		if got := get(t, s, k, 5, 5); len(got) != 0 {
			t.Fatalf("Get(%q, 5, 5) = %d bytes", k, len(got))
		}
	}
	want := []object.Info{{Key: "e", Size: 0}, {Key: "e2", Size: 0}}
	if got := list(t, s, "e"); !slices.Equal(got, want) {
		t.Fatalf("List = %v, want %v", got, want)
	}
}

func testLarge(t *testing.T, s object.Store) {
	data := pattern(8, 8<<20)
	put(t, s, "big/obj", data)
	if got := get(t, s, "big/obj", 0, -1); !bytes.Equal(got, data) {
		t.Fatalf("Get whole 8 MiB: %d bytes, mismatch", len(got))
	}
	off := int64(3<<20 + 12345)
	if got := get(t, s, "big/obj", off, 1<<20); !bytes.Equal(got, data[off:off+1<<20]) {
		t.Fatalf("Get 1 MiB range mismatch")
	}
	if info, err := s.Head(t.Context(), "big/obj"); err != nil || info.Size != 8<<20 {
		t.Fatalf("Head = %+v, %v", info, err)
	}
}

func testConcurrent(t *testing.T, s object.Store) {
	const workers, keys = 8, 40
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			ctx := context.Background()
			for i := range keys {
				key := fmt.Sprintf("c/%d/%03d", w, i)
				data := pattern(w*1000+i, 1000+i*37)
				if err := s.Put(ctx, key, data); err != nil {
					errs <- err
					return
				}
				got, err := s.Get(ctx, key, 0, -1)
				if err != nil || !bytes.Equal(got, data) {
					errs <- fmt.Errorf("Get(%q) after Put: %d bytes, %v", key, len(got), err)
					return
				}
				// Read another worker's keys while they are being written.
				other := fmt.Sprintf("c/%d/%03d", (w+1)%workers, i)
				if _, err := s.Get(ctx, other, 0, -1); err != nil && !errors.Is(err, object.ErrNotFound) {
					errs <- fmt.Errorf("Get(%q): %v", other, err)
					return
				}
				if i%10 == 0 {
					if err := s.List(ctx, "c/", func(object.Info) bool { return true }); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := list(t, s, "c/"); len(got) != workers*keys {
		t.Fatalf("List after concurrent puts: %d objects, want %d", len(got), workers*keys)
	}
	for w := range workers {
		for i := range keys {
			key := fmt.Sprintf("c/%d/%03d", w, i)
			if got := get(t, s, key, 0, -1); !bytes.Equal(got, pattern(w*1000+i, 1000+i*37)) {
				t.Fatalf("Get(%q) mismatch", key)
			}
		}
	}
}

// testAtomicReplace overwrites one key while readers check that they always
// see one whole version, never a mix.
func testAtomicReplace(t *testing.T, s object.Store) {
	const size = 64 << 10
	version := func(v byte) []byte { return bytes.Repeat([]byte{v}, size) }
	put(t, s, "swap", version(0))
	ctx := t.Context()
	done := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 3 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				got, err := s.Get(ctx, "swap", 0, -1)
				if err != nil {
					errs <- err
					return
				}
				if len(got) != size || !bytes.Equal(got, version(got[0])) {
					errs <- fmt.Errorf("torn read: %d bytes, first %d", len(got), got[0])
					return
				}
			}
		})
	}
	for v := range 50 {
		if err := s.Put(ctx, "swap", version(byte(v))); err != nil {
			t.Error(err)
			break
		}
	}
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func testSync(t *testing.T, s object.Store) {
	sy, ok := s.(object.Syncer)
	if !ok {
		t.Skip("store does not implement object.Syncer")
	}
	put(t, s, "s/1", []byte("one"))
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if err := sy.Sync(t.Context()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if got := get(t, s, "s/1", 0, -1); string(got) != "one" {
		t.Fatalf("Get after Sync = %q", got)
	}
}

func testDeleteMany(t *testing.T, s object.Store) {
	bd, ok := s.(object.BatchDeleter)
	if !ok {
		t.Skip("store does not implement object.BatchDeleter")
	}
	ctx := t.Context()
	for i := range 6 {
		put(t, s, fmt.Sprintf("dm/%d", i), []byte{byte(i)})
	}
	if err := bd.DeleteMany(ctx, []string{"dm/0", "dm/2", "dm/4", "dm/missing"}); err != nil {
		t.Fatalf("DeleteMany: %v", err)
	}
	var left []string
	for _, info := range list(t, s, "dm/") {
		left = append(left, info.Key)
	}
	if want := []string{"dm/1", "dm/3", "dm/5"}; !slices.Equal(left, want) {
		t.Fatalf("after DeleteMany: %v, want %v", left, want)
	}
	if err := bd.DeleteMany(ctx, nil); err != nil {
		t.Fatalf("DeleteMany of nothing: %v", err)
	}
	if err := bd.DeleteMany(ctx, []string{"dm/1", "/bad"}); !errors.Is(err, object.ErrInvalidKey) {
		t.Fatalf("DeleteMany with an invalid key: %v, want ErrInvalidKey", err)
	}
}

// unevenReader hands out data in reads of varying sizes, then fails with
// err (io.EOF: ends) after limit bytes.
type unevenReader struct {
	data  []byte
	limit int
	err   error
	i     int
}

func (u *unevenReader) Read(p []byte) (int, error) {
	if len(u.data) == 0 || u.limit <= 0 {
		return 0, u.err
	}
	u.i++
	n := min(len(p), len(u.data), u.limit, 1+(u.i*7919)%(300<<10))
	copy(p, u.data[:n])
	u.data, u.limit = u.data[n:], u.limit-n
	return n, nil
}

var errBroken = errors.New("objtest: the stream broke")

// testPutStream: object.PutStream (the store's StreamPutter, or the
// fallback) stores a stream whole, and a stream that fails, or ends with
// io.ErrUnexpectedEOF, leaves the key as it was; object.Reader reads it
// back in ranges.
func testPutStream(t *testing.T, s object.Store) {
	ctx := t.Context()
	data := pattern(11, 9<<20+12345)
	if err := object.PutStream(ctx, s, "s/whole", &unevenReader{data: data, limit: len(data), err: io.EOF}); err != nil {
		t.Fatalf("PutStream: %v", err)
	}
	if got := get(t, s, "s/whole", 0, -1); !bytes.Equal(got, data) {
		t.Fatalf("Get after PutStream: %d bytes, want %d, or different", len(got), len(data))
	}
	r, err := object.NewReader(ctx, s, "s/whole")
	if err != nil || r.Size() != int64(len(data)) {
		t.Fatalf("NewReader: %v, size %d", err, r.Size())
	}
	if got, err := io.ReadAll(r); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Reader: %d bytes, %v", len(got), err)
	}
	if _, err := object.NewReader(ctx, s, "s/none"); !errors.Is(err, object.ErrNotFound) {
		t.Fatalf("NewReader of a missing object: %v", err)
	}
	if err := object.PutStream(ctx, s, "s/empty", strings.NewReader("")); err != nil {
		t.Fatalf("PutStream of nothing: %v", err)
	}
	if got := get(t, s, "s/empty", 0, -1); len(got) != 0 {
		t.Fatalf("empty stream stored %d bytes", len(got))
	}
	old := pattern(12, 1000)
	put(t, s, "s/kept", old)
	for _, c := range []struct {
		name string
		err  error
	}{{"failing", errBroken}, {"cut", io.ErrUnexpectedEOF}} {
		for _, key := range []string{"s/kept", "s/new-" + c.name} {
			err := object.PutStream(ctx, s, key, &unevenReader{data: data, limit: 6 << 20, err: c.err})
			if err == nil {
				t.Fatalf("%s stream into %s: no error", c.name, key)
			}
			if c.err == errBroken && !errors.Is(err, errBroken) {
				t.Errorf("%s stream into %s: %v, want it to wrap the reader's error", c.name, key, err)
			}
		}
		if got := get(t, s, "s/kept", 0, -1); !bytes.Equal(got, old) {
			t.Fatalf("a %s stream changed the object it would have replaced (%d bytes)", c.name, len(got))
		}
		if _, err := s.Head(ctx, "s/new-"+c.name); !errors.Is(err, object.ErrNotFound) {
			t.Fatalf("a %s stream left an object: %v", c.name, err)
		}
	}
	var keys []string
	for _, i := range list(t, s, "s/") {
		keys = append(keys, i.Key)
	}
	if want := []string{"s/empty", "s/kept", "s/whole"}; !slices.Equal(keys, want) {
		t.Fatalf("List after the streams: %v, want %v", keys, want)
	}
}
