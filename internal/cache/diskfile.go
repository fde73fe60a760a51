package cache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/cairnfs/cairn/internal/directio"
)

// The format of one disk cache file (all integers big-endian):
//
//	offset  size
//	0       4    "CRNC"
//	4       1    version (3)
//	5       1    segment shift s: data is checked in segments of 1<<s bytes
//	6       2    zero
//	8       2    key length
//	10      2    zero
//	12      4    data length
//	16      4    CRC-32C of bytes 0..15, the key and the segment table
//	20           key
//	             segment table: the CRC-32C of each segment, 4 bytes each
//	             version 3 with at least 1 MiB of data: zeros, up to the
//	             next multiple of 4096
//	             data
//
// The per-segment CRCs let a read of a few KiB of a cached block read and
// verify only the segments holding them (Disk.ReadRange); Get reads and
// verifies all of them. The data of a large block starts on a 4096-byte
// boundary, so that the writer can write it with direct I/O
// (Disk.PutSums, cold); small blocks are not padded, which would double the
// size of a 4 KiB one. Version 2 files (never padded) are read as they
// are. Version 1 files (one CRC over key and data) are not read: the scan
// removes them, and a Get that meets one misses.
const (
	diskSegShift = 16 // 64 KiB: the segment size of partial reads in chunk
	minSegShift  = 9
	maxSegShift  = 26
)

// fileHead is the parsed fixed header of a cache file.
type fileHead struct {
	shift uint
	klen  int
	dlen  int
	pad   bool // the data starts on a directio.Align boundary
}

// padded reports whether a file of the current version holding dlen data
// bytes pads its data to a directio.Align boundary.
func padded(dlen int) bool { return dlen >= directio.Min }

func (h fileHead) nseg() int     { return (h.dlen + 1<<h.shift - 1) >> h.shift }
func (h fileHead) tableOff() int { return diskHeaderLen + h.klen }
func (h fileHead) tableEnd() int { return h.tableOff() + 4*h.nseg() }
func (h fileHead) dataOff() int {
	if !h.pad {
		return h.tableEnd()
	}
	return (h.tableEnd() + directio.Align - 1) &^ (directio.Align - 1)
}
func (h fileHead) size() int64      { return int64(h.dataOff()) + int64(h.dlen) }
func (h fileHead) segLen(i int) int { return min(1<<h.shift, h.dlen-i<<h.shift) }

var (
	errCorrupt   = errors.New("corrupt cache file")
	errOldFormat = errors.New("cache file of an older format")
)

// fileSize is the size of the file holding n data bytes under key.
func fileSize(key string, n int) int64 {
	return fileHead{shift: diskSegShift, klen: len(key), dlen: n, pad: padded(n)}.size()
}

// parseHead checks and parses the fixed header at the start of b.
func parseHead(b []byte) (fileHead, error) {
	if len(b) < diskHeaderLen || string(b[:4]) != diskMagic {
		return fileHead{}, fmt.Errorf("bad header: %w", errCorrupt)
	}
	if b[4] == 1 {
		return fileHead{}, errOldFormat
	}
	if b[4] != diskVersion && b[4] != 2 {
		return fileHead{}, fmt.Errorf("unknown version %d: %w", b[4], errCorrupt)
	}
	h := fileHead{
		shift: uint(b[5]),
		klen:  int(binary.BigEndian.Uint16(b[8:])),
		dlen:  int(binary.BigEndian.Uint32(b[12:])),
	}
	h.pad = b[4] == diskVersion && padded(h.dlen)
	if h.shift < minSegShift || h.shift > maxSegShift || b[6]|b[7]|b[10]|b[11] != 0 {
		return fileHead{}, fmt.Errorf("bad header fields: %w", errCorrupt)
	}
	return h, nil
}

// checkMeta verifies the header CRC over b, which holds the file from its
// start through the segment table, and that the file is key's. It
// returns the segment table.
func checkMeta(b []byte, h fileHead, key string) ([]byte, error) {
	if len(b) < h.dataOff() {
		return nil, fmt.Errorf("short header: %w", errCorrupt)
	}
	crc := crc32.Update(crc32.Checksum(b[:16], castagnoli), castagnoli, b[diskHeaderLen:h.tableEnd()])
	if want := binary.BigEndian.Uint32(b[16:]); crc != want {
		return nil, fmt.Errorf("header crc %08x, stored %08x: %w", crc, want, errCorrupt)
	}
	for _, c := range b[h.tableEnd():h.dataOff()] {
		if c != 0 {
			return nil, fmt.Errorf("padding not zero: %w", errCorrupt)
		}
	}
	if string(b[diskHeaderLen:h.tableOff()]) != key {
		// A sound file of another key with the same hash: not ours.
		return nil, errOtherKey
	}
	return b[h.tableOff():h.tableEnd()], nil
}

var errOtherKey = errors.New("holds another key")

// checkSegs verifies data, segments first.. of a file whose segment table
// is table.
func checkSegs(h fileHead, table []byte, first int, data []byte) error {
	for i := first; len(data) > 0; i++ {
		n := min(len(data), h.segLen(i))
		if got, want := crc32.Checksum(data[:n], castagnoli), binary.BigEndian.Uint32(table[4*i:]); got != want {
			return fmt.Errorf("segment %d: crc %08x, stored %08x: %w", i, got, want, errCorrupt)
		}
		data = data[n:]
	}
	return nil
}

// decodeFile verifies a whole cache file of key and returns its data.
func decodeFile(b []byte, key string) ([]byte, error) {
	h, err := parseHead(b)
	if err != nil {
		return nil, err
	}
	if int64(len(b)) != h.size() {
		return nil, fmt.Errorf("%d bytes, header says %d: %w", len(b), h.size(), errCorrupt)
	}
	table, err := checkMeta(b, h, key)
	if err != nil {
		return nil, err
	}
	data := b[h.dataOff():]
	if err := checkSegs(h, table, 0, data); err != nil {
		return nil, err
	}
	return data, nil
}

// encodeHead returns the header, key and segment table of a file holding
// data under key. sums, if it has one CRC-32C per segment, is the table;
// otherwise the table is computed.
func encodeHead(key string, data, sums []byte) []byte {
	h := fileHead{shift: diskSegShift, klen: len(key), dlen: len(data), pad: padded(len(data))}
	b := make([]byte, h.dataOff())
	copy(b, diskMagic)
	b[4] = diskVersion
	b[5] = byte(h.shift)
	binary.BigEndian.PutUint16(b[8:], uint16(len(key)))
	binary.BigEndian.PutUint32(b[12:], uint32(len(data)))
	copy(b[diskHeaderLen:], key)
	if len(sums) == 4*h.nseg() {
		copy(b[h.tableOff():], sums)
	} else {
		for i := range h.nseg() {
			seg := data[i<<h.shift:][:h.segLen(i)]
			binary.BigEndian.PutUint32(b[h.tableOff()+4*i:], crc32.Checksum(seg, castagnoli))
		}
	}
	crc := crc32.Update(crc32.Checksum(b[:16], castagnoli), castagnoli, b[diskHeaderLen:h.tableEnd()])
	binary.BigEndian.PutUint32(b[16:], crc)
	return b
}
