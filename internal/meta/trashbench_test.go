package meta

import (
	"fmt"
	"sync"
	"testing"

	"github.com/cairnfs/cairn/internal/base"
)

// BenchmarkUnlinkTrash is BenchmarkUnlink (empty files) with the trash
// off and on.
func BenchmarkUnlinkTrash(b *testing.B) {
	for _, days := range []int{0, 1} {
		b.Run(fmt.Sprintf("trash-days=%d", days), func(b *testing.B) {
			m := benchMeta(b)
			if _, err := m.ChangeSettings(ctx, func(s *Settings) error { s.TrashDays = days; return nil }); err != nil {
				b.Fatal(err)
			}
			dir, names := benchFiles(b, m, b.N, 0)
			b.ReportAllocs()
			b.ResetTimer()
			for _, name := range names {
				if err := m.Unlink(ctx, root, dir, name); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCreateTrash is BenchmarkCreate with the trash off and on.
func BenchmarkCreateTrash(b *testing.B) {
	for _, days := range []int{0, 1} {
		b.Run(fmt.Sprintf("trash-days=%d", days), func(b *testing.B) {
			m := benchMeta(b)
			if _, err := m.ChangeSettings(ctx, func(s *Settings) error { s.TrashDays = days; return nil }); err != nil {
				b.Fatal(err)
			}
			dir := mkdir(b, m, root, base.RootIno, "d")
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, _, err := m.Mknod(ctx, root, dir, fmt.Sprintf("f%d", i), base.TypeFile, 0o644, 0, 0, ""); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkUnlinkTrashParallel unlinks from 4 goroutines, each in its own
// directory, with the trash off and on.
func BenchmarkUnlinkTrashParallel(b *testing.B) {
	for _, days := range []int{0, 1} {
		b.Run(fmt.Sprintf("trash-days=%d", days), func(b *testing.B) {
			m := benchMeta(b)
			if _, err := m.ChangeSettings(ctx, func(s *Settings) error { s.TrashDays = days; return nil }); err != nil {
				b.Fatal(err)
			}
			const procs = 4
			per := b.N/procs + 1
			dirs := make([]base.Ino, procs)
			for p := range dirs {
				dirs[p] = mkdir(b, m, root, base.RootIno, fmt.Sprint("p", p))
				for i := range per {
					create(b, m, root, dirs[p], fmt.Sprint("f", i))
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			var wg sync.WaitGroup
			for p := range procs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range per {
						if err := m.Unlink(ctx, root, dirs[p], fmt.Sprint("f", i)); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
		})
	}
}

// BenchmarkCreateQuota is BenchmarkCreate without and with a directory
// quota (with limits) on the directory, and on it and the root (two
// quotas charged per create).
func BenchmarkCreateQuota(b *testing.B) {
	for _, quotas := range []int{0, 1, 2} {
		b.Run(fmt.Sprintf("quotas=%d", quotas), func(b *testing.B) {
			m := benchMeta(b)
			dir := mkdir(b, m, root, base.RootIno, "d")
			if quotas >= 1 {
				if _, err := m.SetQuota(ctx, dir, QuotaLimits{Bytes: 1 << 40, Inodes: 1 << 30}, nil); err != nil {
					b.Fatal(err)
				}
			}
			if quotas >= 2 {
				if _, err := m.SetQuota(ctx, base.RootIno, QuotaLimits{Inodes: 1 << 30}, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, _, err := m.Mknod(ctx, root, dir, fmt.Sprintf("f%d", i), base.TypeFile, 0o644, 0, 0, ""); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
