// Package dumpfile reads and writes the container of a metadata dump
// (cairn dump, cairn load): a header, frames of compressed records, and a
// trailer. It knows nothing of what the records mean; package meta fills
// them. The layout is described in docs/dump-format.md; this file is its
// reference.
//
//	file    = magic version:u16 header frame* trailer
//	magic   = "CAIRNDMP"
//	header  = len:u32 json crc:u32          (crc of json)
//	frame   = 'F' kind:u8 seq:u32 records:u32 rawlen:u32 complen:u32 crc:u32 zstd
//	trailer = 'E' len:u32 json crc:u32
//	record  = uvarint(len key) key uvarint(len value) value   (in a frame's raw bytes)
//
// Integers are big-endian. A frame's crc is CRC-32C of its header (up to
// the crc) followed by its compressed bytes; seq numbers run 0, 1, 2, … in file order, so a lost or repeated
// frame is found; the trailer counts the frames and the records of every
// kind, so a file cut at a frame boundary is found too.
package dumpfile

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// Magic opens every dump file.
const Magic = "CAIRNDMP"

// Version is the container version this package writes and reads.
const Version = 1

// Limits: a reader refuses anything larger (a damaged length would
// otherwise ask for gigabytes).
const (
	MaxFrameRaw  = 64 << 20
	MaxJSON      = 16 << 20
	frameHdrLen  = 22
	trailerFrame = 'E'
	dataFrame    = 'F'
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrFormat is wrapped by every error about the file's bytes: not a dump,
// damaged, truncated.
var ErrFormat = errors.New("not a valid dump")

// Header is the dump's first record: what it holds, written before any
// frame.
type Header struct {
	// Format is always "cairn-dump".
	Format string `json:"format"`
	// ID identifies this dump: a load that stopped can only be finished
	// with the same file.
	ID string `json:"id"`
	// Meta is the metadata layout version of the records (package meta's).
	Meta int `json:"meta_version"`
	// Settings is the volume's settings record, as stored.
	Settings json.RawMessage `json:"settings"`
	// Source names the store dumped; Snapshot the snapshot read (empty
	// when the dump took its own), Epoch its epoch.
	Source   string `json:"source"`
	Snapshot string `json:"snapshot,omitempty"`
	Epoch    uint64 `json:"epoch"`
	// Snapshots: the dump holds the volume's snapshots, and its per-inode
	// records are physical versions (see docs/dump-format.md).
	Snapshots bool   `json:"snapshots,omitempty"`
	Created   string `json:"created"`
	Tool      string `json:"tool,omitempty"`
}

// Trailer is the dump's last record, written once every frame is.
type Trailer struct {
	Frames  uint64            `json:"frames"`
	Records map[string]uint64 `json:"records"` // per kind, the kind as a one-letter string
	// Extra holds the totals the writer's user wants checked on load
	// (counters, usage).
	Extra map[string]uint64 `json:"extra,omitempty"`
}

// Frame is one frame as read: its kind, records and raw (decompressed)
// bytes. Offset is where it starts in the file.
type Frame struct {
	Kind    byte
	Seq     uint32
	Records uint32
	Offset  int64
	Raw     []byte
}

// Each calls fn for each record of the frame, in order. It fails,
// wrapping ErrFormat, if the frame's bytes do not hold exactly Records
// well-formed records.
func (f *Frame) Each(fn func(key, value []byte) error) error {
	p := f.Raw
	n := uint32(0)
	for len(p) > 0 {
		k, rest, err := field(p)
		if err != nil {
			return f.bad(n, "key: %v", err)
		}
		v, rest, err := field(rest)
		if err != nil {
			return f.bad(n, "value: %v", err)
		}
		if n == f.Records {
			return f.bad(n, "more records than the %d its header counts", f.Records)
		}
		if err := fn(k, v); err != nil {
			return err
		}
		n++
		p = rest
	}
	if n != f.Records {
		return f.bad(n, "%d records, its header counts %d", n, f.Records)
	}
	return nil
}

func (f *Frame) bad(i uint32, format string, args ...any) error {
	return fmt.Errorf("frame %d (kind %q) at offset %d, record %d: %s: %w",
		f.Seq, f.Kind, f.Offset, i, fmt.Sprintf(format, args...), ErrFormat)
}

func field(p []byte) (b, rest []byte, err error) {
	n, k := binary.Uvarint(p)
	if k <= 0 {
		return nil, nil, errors.New("bad length")
	}
	if n > uint64(len(p)-k) {
		return nil, nil, fmt.Errorf("length %d past the frame's end", n)
	}
	return p[k : k+int(n)], p[k+int(n):], nil
}

// Batch collects the records of one frame.
type Batch struct {
	Kind    byte
	Records uint32
	Raw     []byte
}

// Add appends one record.
func (b *Batch) Add(key, value []byte) {
	b.Raw = binary.AppendUvarint(b.Raw, uint64(len(key)))
	b.Raw = append(b.Raw, key...)
	b.Raw = binary.AppendUvarint(b.Raw, uint64(len(value)))
	b.Raw = append(b.Raw, value...)
	b.Records++
}

// Sealed is a compressed frame, ready to be written: made by Seal, which
// may run in any goroutine.
type Sealed struct {
	kind    byte
	records uint32
	raw     int
	comp    []byte
}

var encoders = sync.Pool{New: func() any {
	e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	if err != nil {
		panic(err) // only bad options fail
	}
	return e
}}

// Seal compresses the batch.
func (b *Batch) Seal() Sealed {
	e := encoders.Get().(*zstd.Encoder)
	comp := e.EncodeAll(b.Raw, make([]byte, 0, len(b.Raw)/3+64))
	encoders.Put(e)
	return Sealed{kind: b.Kind, records: b.Records, raw: len(b.Raw), comp: comp}
}

// Writer writes a dump. Its methods are not safe for concurrent use: seal
// frames in parallel, write them from one goroutine.
type Writer struct {
	w       *bufio.Writer
	seq     uint32
	records map[string]uint64
	bytes   int64
}

// NewWriter writes the magic and the header.
func NewWriter(w io.Writer, h Header) (*Writer, error) {
	h.Format = "cairn-dump"
	js, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	dw := &Writer{w: bufio.NewWriterSize(w, 1<<20), records: map[string]uint64{}}
	b := append([]byte(Magic), 0, Version)
	b = binary.BigEndian.AppendUint32(b, uint32(len(js)))
	b = append(b, js...)
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(js, castagnoli))
	return dw, dw.write(b)
}

func (w *Writer) write(b []byte) error {
	n, err := w.w.Write(b)
	w.bytes += int64(n)
	return err
}

// Bytes is how many bytes were written so far.
func (w *Writer) Bytes() int64 { return w.bytes }

// Write writes one sealed frame.
func (w *Writer) Write(s Sealed) error {
	if s.records == 0 {
		return nil
	}
	h := make([]byte, 0, frameHdrLen)
	h = append(h, dataFrame, s.kind)
	h = binary.BigEndian.AppendUint32(h, w.seq)
	h = binary.BigEndian.AppendUint32(h, s.records)
	h = binary.BigEndian.AppendUint32(h, uint32(s.raw))
	h = binary.BigEndian.AppendUint32(h, uint32(len(s.comp)))
	h = binary.BigEndian.AppendUint32(h, crc32.Update(crc32.Checksum(h, castagnoli), castagnoli, s.comp))
	if err := w.write(h); err != nil {
		return err
	}
	if err := w.write(s.comp); err != nil {
		return err
	}
	w.seq++
	w.records[string(s.kind)] += uint64(s.records)
	return nil
}

// Close writes the trailer (the frame and record counts, and extra) and
// flushes. It does not close the underlying writer.
func (w *Writer) Close(extra map[string]uint64) error {
	js, err := json.Marshal(Trailer{Frames: uint64(w.seq), Records: w.records, Extra: extra})
	if err != nil {
		return err
	}
	b := binary.BigEndian.AppendUint32([]byte{trailerFrame}, uint32(len(js)))
	b = append(b, js...)
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(js, castagnoli))
	if err := w.write(b); err != nil {
		return err
	}
	return w.w.Flush()
}

// Reader reads a dump: the header at once, then frames one by one with
// Next, verified (checksum, sequence, length) but not yet decompressed:
// Open decompresses, in any goroutine.
type Reader struct {
	r       *bufio.Reader
	off     int64
	hdr     Header
	seq     uint32
	records map[string]uint64
	trailer *Trailer
}

// RawFrame is a frame read and checked but still compressed.
type RawFrame struct {
	Kind    byte
	Seq     uint32
	Records uint32
	Offset  int64
	rawLen  uint32
	comp    []byte
}

// NewReader reads and checks the magic and the header.
func NewReader(r io.Reader) (*Reader, error) {
	dr := &Reader{r: bufio.NewReaderSize(r, 1<<20), records: map[string]uint64{}}
	var m [len(Magic) + 2]byte
	if err := dr.full(m[:], "the file's start"); err != nil {
		return nil, err
	}
	if string(m[:len(Magic)]) != Magic {
		return nil, fmt.Errorf("not a Cairn dump (no %q at offset 0): %w", Magic, ErrFormat)
	}
	if v := binary.BigEndian.Uint16(m[len(Magic):]); v != Version {
		return nil, fmt.Errorf("dump container version %d: this build reads version %d: %w", v, Version, ErrFormat)
	}
	js, err := dr.json("header")
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(js, &dr.hdr); err != nil || dr.hdr.Format != "cairn-dump" {
		return nil, fmt.Errorf("header at offset %d: not a Cairn dump header: %w", len(m), ErrFormat)
	}
	return dr, nil
}

// Header returns the dump's header.
func (r *Reader) Header() Header { return r.hdr }

func (r *Reader) full(b []byte, what string) error {
	n, err := io.ReadFull(r.r, b)
	r.off += int64(n)
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return fmt.Errorf("truncated: the file ends at offset %d, inside %s: %w", r.off, what, ErrFormat)
	}
	return err
}

// json reads len json crc.
func (r *Reader) json(what string) ([]byte, error) {
	at := r.off
	var l [4]byte
	if err := r.full(l[:], what); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(l[:])
	if n > MaxJSON {
		return nil, fmt.Errorf("%s at offset %d: length %d is too large: %w", what, at, n, ErrFormat)
	}
	b := make([]byte, n+4)
	if err := r.full(b, what); err != nil {
		return nil, err
	}
	js := b[:n]
	if crc32.Checksum(js, castagnoli) != binary.BigEndian.Uint32(b[n:]) {
		return nil, fmt.Errorf("%s at offset %d: checksum mismatch: %w", what, at, ErrFormat)
	}
	return js, nil
}

// Next returns the next frame, or io.EOF after the trailer, once the
// trailer's counts matched what was read. Any damage is an error naming
// the frame and its offset, wrapping ErrFormat.
func (r *Reader) Next() (*RawFrame, error) {
	if r.trailer != nil {
		return nil, io.EOF
	}
	at := r.off
	var t [1]byte
	if err := r.full(t[:], fmt.Sprintf("frame %d (no trailer: the dump is incomplete)", r.seq)); err != nil {
		return nil, err
	}
	switch t[0] {
	case trailerFrame:
		return nil, r.readTrailer(at)
	case dataFrame:
	default:
		return nil, fmt.Errorf("offset %d: expected frame %d, found byte %#x: %w", at, r.seq, t[0], ErrFormat)
	}
	var h [frameHdrLen - 1]byte
	if err := r.full(h[:], fmt.Sprintf("frame %d's header", r.seq)); err != nil {
		return nil, err
	}
	be := binary.BigEndian
	f := &RawFrame{Kind: h[0], Seq: be.Uint32(h[1:]), Records: be.Uint32(h[5:]), Offset: at, rawLen: be.Uint32(h[9:])}
	compLen, crc := be.Uint32(h[13:]), be.Uint32(h[17:])
	switch {
	case f.Seq != r.seq:
		return nil, fmt.Errorf("offset %d: frame %d where frame %d belongs (frames lost or repeated): %w", at, f.Seq, r.seq, ErrFormat)
	case f.rawLen > MaxFrameRaw || compLen > MaxFrameRaw:
		return nil, fmt.Errorf("frame %d at offset %d: length %d/%d is too large: %w", f.Seq, at, f.rawLen, compLen, ErrFormat)
	case f.Records == 0 || !(f.Kind >= 'A' && f.Kind <= 'Z' || f.Kind >= 'a' && f.Kind <= 'z'):
		return nil, fmt.Errorf("frame %d at offset %d: bad kind %#x or no records: %w", f.Seq, at, f.Kind, ErrFormat)
	}
	f.comp = make([]byte, compLen)
	if err := r.full(f.comp, fmt.Sprintf("frame %d", f.Seq)); err != nil {
		return nil, err
	}
	sum := crc32.Checksum(append([]byte{dataFrame}, h[:frameHdrLen-5]...), castagnoli)
	if crc32.Update(sum, castagnoli, f.comp) != crc {
		return nil, fmt.Errorf("frame %d (kind %q) at offset %d: checksum mismatch: %w", f.Seq, f.Kind, at, ErrFormat)
	}
	r.seq++
	r.records[string(f.Kind)] += uint64(f.Records)
	return f, nil
}

func (r *Reader) readTrailer(at int64) error {
	js, err := r.json("trailer")
	if err != nil {
		return err
	}
	var t Trailer
	if err := json.Unmarshal(js, &t); err != nil {
		return fmt.Errorf("trailer at offset %d: %v: %w", at, err, ErrFormat)
	}
	if t.Frames != uint64(r.seq) {
		return fmt.Errorf("trailer at offset %d: %d frames written, %d read: %w", at, t.Frames, r.seq, ErrFormat)
	}
	for k, n := range t.Records {
		if r.records[k] != n {
			return fmt.Errorf("trailer at offset %d: %d records of kind %q written, %d read: %w", at, n, k, r.records[k], ErrFormat)
		}
	}
	for k, n := range r.records {
		if t.Records[k] != n {
			return fmt.Errorf("trailer at offset %d: %d records of kind %q read, %d written: %w", at, n, k, t.Records[k], ErrFormat)
		}
	}
	var extra [1]byte
	if n, _ := io.ReadFull(r.r, extra[:]); n != 0 {
		return fmt.Errorf("offset %d: bytes after the trailer: %w", r.off, ErrFormat)
	}
	r.trailer = &t
	return io.EOF
}

// Trailer returns the trailer once Next returned io.EOF, else nil.
func (r *Reader) Trailer() *Trailer { return r.trailer }

var decoders = sync.Pool{New: func() any {
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(MaxFrameRaw))
	if err != nil {
		panic(err) // only bad options fail
	}
	return d
}}

// Open decompresses the frame.
func (f *RawFrame) Open() (*Frame, error) {
	d := decoders.Get().(*zstd.Decoder)
	raw, err := d.DecodeAll(f.comp, make([]byte, 0, f.rawLen))
	decoders.Put(d)
	out := &Frame{Kind: f.Kind, Seq: f.Seq, Records: f.Records, Offset: f.Offset, Raw: raw}
	if err != nil {
		return nil, out.bad(0, "decompressing: %v", err)
	}
	if len(raw) != int(f.rawLen) {
		return nil, out.bad(0, "%d bytes decompressed, its header says %d", len(raw), f.rawLen)
	}
	return out, nil
}
