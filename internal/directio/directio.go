// Package directio writes file data past the page cache (O_DIRECT) where
// the file system allows it: the kernel moves the data from the buffer to
// the device instead of copying it into the page cache, and no writeback
// copies it out again. Callers use it for data that is not read back soon
// and fall back to ordinary writes when it reports that it wrote nothing.
package directio

import "unsafe"

// Align is the alignment of the buffers, file offsets and lengths of
// direct writes: the largest logical block size of common devices.
const Align = 4096

// Aligned reports whether p starts on an Align boundary.
func Aligned(p []byte) bool {
	return len(p) > 0 && uintptr(unsafe.Pointer(&p[0]))%Align == 0
}
