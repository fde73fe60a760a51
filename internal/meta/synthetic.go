package meta

// Synthetic dumps: a volume of many files described by a few numbers,
// written straight as a dump. Loading one is the quick way to a volume of
// millions of files for the metadata benchmarks (creating them through a
// mount would take hours); a dump of the loaded volume is then a real one.

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/dumpfile"
)

// SyntheticVolume describes a synthetic dump.
type SyntheticVolume struct {
	Settings Settings // of the volume the dump will load as (its data store must hold its marker)
	Files    int      // regular files
	PerDir   int      // files per directory (default 1000); directories hang off the root
	Size     int      // bytes per file: 0 for empty files, else one inline block (at most Settings.InlineMax)
	// Block returns the object key and the object (as the chunk layer
	// stores it: chunk.BlockKey, chunk.EncodeBlock) of the one block of
	// slice id holding data; needed when Size > 0. data is the caller's to
	// keep: Block must not write into it.
	Block func(id uint64, data []byte) (key string, obj []byte)
}

// WriteSyntheticDump writes the dump of v to w.
func WriteSyntheticDump(w io.Writer, v SyntheticVolume) error {
	if v.PerDir <= 0 {
		v.PerDir = 1000
	}
	if v.Size < 0 || v.Size > 0 && (v.Size > v.Settings.InlineMax || v.Block == nil) {
		return fmt.Errorf("synthetic dump: file size %d must fit the inline limit %d: %w", v.Size, v.Settings.InlineMax, base.ErrInvalid)
	}
	js, err := json.Marshal(v.Settings)
	if err != nil {
		return err
	}
	dw, err := dumpfile.NewWriter(w, dumpfile.Header{ID: fmt.Sprintf("synthetic-%d-%d-%d", v.Files, v.PerDir, v.Size),
		Meta: DumpLayout, Settings: js, Source: "synthetic", Epoch: 1, Created: v.Settings.Created.Format("2006-01-02T15:04:05Z"), Tool: "cairn"})
	if err != nil {
		return err
	}
	dirs := (v.Files + v.PerDir - 1) / v.PerDir
	now := v.Settings.Created.UnixNano()
	batches := map[byte]*dumpfile.Batch{}
	add := func(k, val []byte) error {
		b := batches[k[0]]
		if b == nil {
			b = &dumpfile.Batch{Kind: k[0]}
			batches[k[0]] = b
		}
		b.Add(k, val)
		if len(b.Raw) < dumpFrame {
			return nil
		}
		delete(batches, k[0])
		return dw.Write(b.Seal())
	}
	attrOf := func(typ base.FileType, mode uint32, nlink uint32, length uint64, parent base.Ino) []byte {
		return encodeAttr(&base.Attr{Type: typ, Mode: mode, Nlink: nlink, Length: length, Parent: parent,
			Atime: now, Mtime: now, Ctime: now, Btime: now})
	}
	if err := add(attrKey(base.RootIno), attrOf(base.TypeDir, 0o755, uint32(2+dirs), 0, base.RootIno)); err != nil {
		return err
	}
	ino, slice := base.RootIno+1, uint64(1)
	var blob []byte
	if v.Size > 0 {
		blob = make([]byte, v.Size)
		for i := range blob {
			blob[i] = byte(i*131 + i>>8)
		}
	}
	var used uint64
	for d := range dirs {
		dir := ino
		ino++
		n := min(v.PerDir, v.Files-d*v.PerDir)
		if err := add(dentryKey(base.RootIno, fmt.Sprintf("d%07d", d)), encodeDentry(dir, base.TypeDir)); err != nil {
			return err
		}
		if err := add(attrKey(dir), attrOf(base.TypeDir, 0o755, 2, 0, base.RootIno)); err != nil {
			return err
		}
		for f := range n {
			if err := add(dentryKey(dir, fmt.Sprintf("f%07d", f)), encodeDentry(ino, base.TypeFile)); err != nil {
				return err
			}
			if err := add(attrKey(ino), attrOf(base.TypeFile, 0o644, 1, uint64(v.Size), dir)); err != nil {
				return err
			}
			if v.Size > 0 {
				id := slice | base.InlineBit
				s := base.Slice{ID: id, Size: uint32(v.Size), Len: uint32(v.Size)}
				if err := add(chunkKey(ino, 0), encodeSlices([]base.Slice{s})); err != nil {
					return err
				}
				key, obj := v.Block(id, blob)
				if err := add(blobKey(key), obj); err != nil {
					return err
				}
				used += uint64(v.Size+4095) &^ 4095
				slice++
			}
			ino++
		}
	}
	for _, k := range inodeKinds {
		if b := batches[k]; b != nil {
			if err := dw.Write(b.Seal()); err != nil {
				return err
			}
		}
	}
	if b := batches[pBlob]; b != nil {
		if err := dw.Write(b.Seal()); err != nil {
			return err
		}
	}
	return dw.Close(map[string]uint64{extraNextInode: uint64(ino), extraNextSlice: slice,
		extraUsedInodes: uint64(ino) - 1, extraUsedBytes: used})
}
