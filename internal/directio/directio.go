// Package directio writes file data past the page cache (O_DIRECT) where
// the file system allows it: the kernel moves the data from the buffer to
// the device instead of copying it into the page cache, and no writeback
// copies it out again. It is for data that is not read back soon.
package directio

import (
	"os"
	"sync/atomic"
	"unsafe"
)

const (
	// Align is the alignment of the buffers, file offsets and lengths of
	// direct writes: the largest logical block size of common devices.
	Align = 4096
	// Min is the smallest write done with direct I/O: below it the copy
	// saved is small and the write waits for the device.
	Min = 1 << 20
)

// Aligned reports whether p starts on an Align boundary.
func Aligned(p []byte) bool {
	return len(p) > 0 && uintptr(unsafe.Pointer(&p[0]))%Align == 0
}

// A Writer writes with direct I/O until the file system first refuses it.
// The zero value is ready to use, and safe for concurrent use.
type Writer struct{ refused atomic.Bool }

// WriteAt writes all of p at offset off of f. The whole Align-sized pages
// of p go with direct I/O when p has at least Min bytes, starts on an
// Align boundary, off is a multiple of Align and w has not been refused;
// the rest, or all of p otherwise, the usual way. It reports whether
// direct I/O was used. A refusal (not supported, or a stricter alignment)
// is not an error: p is written the usual way and w stops trying.
func (w *Writer) WriteAt(f *os.File, p []byte, off int64) (bool, error) {
	done := 0
	if n := len(p) &^ (Align - 1); n >= Min && off%Align == 0 && Aligned(p) && !w.refused.Load() {
		var err error
		if done, err = writeDirect(f, p[:n], off); err != nil {
			return false, err
		}
		if done == 0 {
			w.refused.Store(true)
		}
	}
	if _, err := f.WriteAt(p[done:], off+int64(done)); err != nil {
		return false, err
	}
	return done > 0, nil
}

// Refused reports whether the file system refused direct I/O to w.
func (w *Writer) Refused() bool { return w.refused.Load() }
