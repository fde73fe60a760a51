package s3_test

import (
	"fmt"
	"testing"

	"github.com/cairnfs/cairn/internal/object/s3"
	"github.com/cairnfs/cairn/internal/testenv/s3test"
)

// The benchmarks measure the store against the test server on loopback:
// they show the client's overhead and the local server's speed, not a
// cloud's.

const blockSize = 4 << 20

func benchStore(b *testing.B) *s3.Store {
	bk := s3test.NewBucket(b)
	return open(b, bk, bk.URL, s3.Options{})
}

func block(seed int) []byte {
	data := make([]byte, blockSize)
	for i := range data {
		data[i] = byte(i*seed + i>>8)
	}
	return data
}

func BenchmarkPut4MiB(b *testing.B) {
	s := benchStore(b)
	data := block(1)
	b.SetBytes(blockSize)
	i := 0
	for b.Loop() {
		if err := s.Put(b.Context(), fmt.Sprintf("blocks/%d", i%16), data); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkGet4MiB(b *testing.B) {
	s := benchStore(b)
	if err := s.Put(b.Context(), "block", block(2)); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(blockSize)
	for b.Loop() {
		if got, err := s.Get(b.Context(), "block", 0, -1); err != nil || len(got) != blockSize {
			b.Fatalf("Get: %d bytes, %v", len(got), err)
		}
	}
}

func BenchmarkGetRange64KiB(b *testing.B) {
	s := benchStore(b)
	if err := s.Put(b.Context(), "block", block(3)); err != nil {
		b.Fatal(err)
	}
	const n = 64 << 10
	b.SetBytes(n)
	b.Run("serial", func(b *testing.B) {
		b.SetBytes(n)
		i := 0
		for b.Loop() {
			off := int64(i%(blockSize/n)) * n
			if got, err := s.Get(b.Context(), "block", off, n); err != nil || len(got) != n {
				b.Fatalf("Get: %d bytes, %v", len(got), err)
			}
			i++
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.SetBytes(n)
		b.SetParallelism(8) // 8 per core: clients read ahead in parallel
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				off := int64(i%(blockSize/n)) * n
				if got, err := s.Get(b.Context(), "block", off, n); err != nil || len(got) != n {
					b.Errorf("Get: %d bytes, %v", len(got), err)
					return
				}
				i++
			}
		})
	})
}
