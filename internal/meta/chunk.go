package meta

// File content maps: chunks, slices, truncation and compaction. The queue
// of slices waiting to be deleted from the object store is in deletes.go.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/kv"
)

// ReadChunk returns the slice list of chunk index of file ino at the live
// epoch (nil for a hole). Later slices win where they overlap.
func (m *Meta) ReadChunk(ctx context.Context, ino base.Ino, index uint32) ([]base.Slice, error) {
	var out []base.Slice
	read := func(r kv.Reader) (err error) {
		out, err = readChunkAt(r, ino, index, latestEpoch)
		return err
	}
	if done, err := m.wbView(ctx, []base.Ino{ino}, read); done {
		return out, err
	}
	err := m.singleView(ctx, read)
	return out, err
}

func readChunkAt(r kv.Reader, ino base.Ino, index uint32, epoch uint64) ([]base.Slice, error) {
	v, ok, err := vget(r, chunkKey(ino, index), epoch)
	if err != nil {
		return nil, err
	}
	if !ok {
		// Distinguish a hole from a missing inode.
		_, err := getAttrAt(r, ino, epoch)
		return nil, err
	}
	out, err := decodeSlices(v)
	if err != nil {
		return nil, fmt.Errorf("chunk %d of inode %d: %w", index, ino, err)
	}
	return out, nil
}

func (o *op) chunk(ino base.Ino, index uint32) ([]base.Slice, error) {
	v, ok, err := vget(o, chunkKey(ino, index), latestEpoch)
	if err != nil || !ok {
		return nil, err
	}
	ss, err := decodeSlices(v)
	if err != nil {
		return nil, fmt.Errorf("chunk %d of inode %d: %w", index, ino, err)
	}
	return ss, nil
}

func fileAttr(a *base.Attr) error {
	switch a.Type {
	case base.TypeFile:
		return nil
	case base.TypeDir:
		return base.ErrIsDir
	}
	return fmt.Errorf("%s is not a regular file: %w", a.Type, base.ErrInvalid)
}

// WriteSlice appends s to chunk index of file ino, sets mtime and ctime to
// mtime and grows the length to cover the slice. The write goes to a new
// version of the chunk if the current one belongs to a snapshot. It returns
// compact=true when the chunk has more than CompactThreshold slices.
// Errors: ErrNotFound, ErrIsDir/ErrInvalid (not a file), ErrInvalid (bad
// slice), ErrNoSpace (capacity).
func (m *Meta) WriteSlice(ctx context.Context, ino base.Ino, index uint32, s base.Slice, mtime int64) (compact bool, err error) {
	due, err := m.WriteSlices(ctx, ino, []SliceWrite{{Index: index, Slice: s}}, mtime)
	return len(due) > 0, err
}

// SliceWrite is one slice appended by WriteSlices.
type SliceWrite struct {
	Index uint32
	Slice base.Slice
	// Blob, if set, is stored with the slice, in the same transaction, as
	// the blob under BlobKey (see PutBlob): the block of an inline slice
	// (base.InlineBit), which then costs no transaction of its own.
	BlobKey string
	Blob    []byte
	// Append places the slice at the file's end as of the commit (after
	// the slices before it in the batch), whatever Index and Slice.Pos
	// say: they are the writer's guess, made before other clients'
	// appends committed. A slice the end puts across a chunk boundary is
	// referenced from both chunks, with an extra owner recorded (keys.go
	// "O"), as restored copies are.
	Append bool
	// Retry marks a write whose earlier commit failed and may have taken
	// effect (an unknown outcome): an Append slice the file already
	// references (same id and offset in its object) is not placed again.
	Retry bool
}

// WriteSlices appends several slices, in order, to chunks of file ino in
// one transaction (the writes of one flush), with the effects of
// WriteSlice for each, except that an mtime of 0 leaves the times as they
// are (they were set after the writes were made). It returns the chunks
// that are due for compaction.
func (m *Meta) WriteSlices(ctx context.Context, ino base.Ino, ws []SliceWrite, mtime int64) (compact []uint32, err error) {
	for _, w := range ws {
		if w.Slice.Len == 0 {
			return nil, fmt.Errorf("write of slice %d with length 0: %w", w.Slice.ID, base.ErrInvalid)
		}
		if err := checkSlice(w.Slice); err != nil {
			return nil, fmt.Errorf("%v: %w", err, base.ErrInvalid)
		}
	}
	ids := make([]uint64, len(ws))
	for i, w := range ws {
		ids[i] = w.Slice.ID
	}
	guards := m.reservationKeys(ids)
	build := func(compact *[]uint32, replay bool) func(o *op) error {
		return func(o *op) error {
			*compact = (*compact)[:0]
			logicals := [][]byte{attrKey(ino)}
			seen := map[uint32]bool{}
			for _, w := range ws {
				if !seen[w.Index] {
					seen[w.Index] = true
					logicals = append(logicals, chunkKey(ino, w.Index))
				}
			}
			plains := [][]byte{epochKey(), frozenKey(), counterShardKey(counterUsedBytes, o.shard)}
			plains = append(plains, o.m.quotaHints.shardKeys(ino, o.shard)...)
			for _, g := range guards {
				if g.key != nil {
					plains = append(plains, g.key)
				}
			}
			pends := pendingKeys(ws)
			plains = append(plains, pends...)
			if err := o.prefetch(logicals, plains); err != nil {
				return err
			}
			if err := o.checkReserved(guards); err != nil {
				return err
			}
			if err := o.checkNotPending(pends); err != nil {
				return err
			}
			a, err := o.attr(ino)
			if replay && errors.Is(err, base.ErrNotFound) {
				return nil // destroyed after it (wbReplay)
			}
			if err != nil {
				return err
			}
			if err := fileAttr(a); err != nil {
				return fmt.Errorf("write to inode %d: %w", ino, err)
			}
			lists := map[uint32][]base.Slice{}
			var order []uint32
			add := func(index uint32, s base.Slice) error {
				ss, ok := lists[index]
				if !ok {
					if ss, err = o.chunk(ino, index); err != nil {
						return err
					}
					order = append(order, index)
				}
				lists[index] = append(ss, s)
				end := uint64(index)*base.ChunkSize + uint64(s.Pos) + uint64(s.Len)
				if end > a.Length {
					before := usageBytes(a)
					a.Length = end
					if err := o.chargeBytes(ino, a, usageBytes(a)-before); err != nil {
						return err
					}
				}
				return nil
			}
			done, err := o.appendsDone(ino, ws)
			if err != nil {
				return err
			}
			// Only appends can put one object into two chunk records (an
			// append cut at a chunk boundary, the parts of a pack placed
			// apart): the placements are kept for the owner count only then.
			appends := slices.ContainsFunc(ws, func(w SliceWrite) bool { return w.Append })
			var placed []placedSlice
			for _, w := range ws {
				if done[sliceRef{w.Slice.ID, w.Slice.Off}] {
					continue // a retried write whose earlier commit took effect
				}
				ps := []placedSlice{{w.Index, w.Slice}}
				if w.Append {
					ps = placeAt(a.Length, w.Slice)
				}
				for _, p := range ps {
					if appends {
						placed = append(placed, p)
					}
					if err := add(p.index, p.slice); err != nil {
						return err
					}
				}
			}
			if err := o.addChunkOwners(placed); err != nil {
				return err
			}
			for _, w := range ws {
				if w.BlobKey != "" {
					o.Set(blobKey(w.BlobKey), w.Blob)
				}
			}
			for _, idx := range order {
				ss := lists[idx]
				if err := o.vset(chunkKey(ino, idx), encodeSlices(ss)); err != nil {
					return err
				}
				if len(ss) > m.opts.CompactThreshold {
					*compact = append(*compact, idx)
				}
			}
			if mtime != 0 {
				a.Mtime, a.Ctime = mtime, mtime
			}
			o.put(ino, a)
			return nil
		}
	}
	forget := func() {
		for _, w := range ws {
			m.ForgetSlice(w.Slice.ID)
		}
	}
	// A fresh file's slices may be written back (writeback.go): their
	// ids stay in flight until the log commits.
	if dir, ok := m.freshDir(ino); ok {
		var absent []kv.Range
		for _, k := range pendingKeys(ws) {
			absent = append(absent, exactRange(k))
		}
		if done, err := m.writeBack(ctx, []base.Ino{dir}, absent, build(&compact, false), build(new([]uint32), true), forget); done {
			return compact, err
		}
	}
	err = m.mutate(ctx, build(&compact, false))
	if err == nil {
		forget()
	}
	return compact, err
}

// placedSlice is a slice written to chunk index.
type placedSlice struct {
	index uint32
	slice base.Slice
}

// sliceRef names the bytes of a slice in its object.
type sliceRef struct {
	id  uint64
	off uint32
}

// placeAt returns s placed at file offset at: in one chunk, or cut in two
// at the chunk boundary it crosses (a slice is at most one chunk long).
func placeAt(at uint64, s base.Slice) []placedSlice {
	index, pos := uint32(at/base.ChunkSize), uint32(at%base.ChunkSize)
	s.Pos = pos
	if room := uint32(base.ChunkSize) - pos; s.Len > room {
		head, tail := s, s
		head.Len = room
		tail.Pos, tail.Off, tail.Len = 0, s.Off+room, s.Len-room
		return []placedSlice{{index, head}, {index + 1, tail}}
	}
	return []placedSlice{{index, s}}
}

// appendsDone returns the slices of a retried batch that file ino already
// references: their earlier commit took effect (its outcome was unknown),
// and placing them again would put an append twice, or a write back over
// what was written after it. It reads every chunk record of the file, but
// only for a retry.
func (o *op) appendsDone(ino base.Ino, ws []SliceWrite) (map[sliceRef]bool, error) {
	want := map[sliceRef]bool{}
	for _, w := range ws {
		if w.Retry {
			want[sliceRef{w.Slice.ID, w.Slice.Off}] = true
		}
	}
	if len(want) == 0 {
		return nil, nil
	}
	cs, err := o.chunks(ino)
	if err != nil {
		return nil, err
	}
	done := map[sliceRef]bool{}
	for _, c := range cs {
		for _, s := range c.slices {
			if r := (sliceRef{s.ID, s.Off}); want[r] {
				done[r] = true
			}
		}
	}
	return done, nil
}

// addChunkOwners records the extra owners of slices that one commit
// wrote into more than one chunk record: an append cut at a chunk
// boundary, or the parts of one pack placed in different chunks. Their
// ids are new to the file, so every chunk record past the first is an
// owner beyond the first (see the owner count of keys.go "O").
func (o *op) addChunkOwners(placed []placedSlice) error {
	chunksOf := map[uint64]map[uint32]bool{}
	for _, p := range placed {
		if p.slice.ID == 0 {
			continue
		}
		if chunksOf[p.slice.ID] == nil {
			chunksOf[p.slice.ID] = map[uint32]bool{}
		}
		chunksOf[p.slice.ID][p.index] = true
	}
	for id, cs := range chunksOf {
		if len(cs) < 2 {
			continue
		}
		v, err := o.Get(sharedKey(id))
		if err != nil {
			return err
		}
		n := uint32(0)
		if v != nil {
			if n, err = decodeU32(v); err != nil {
				return fmt.Errorf("slice %d owners: %w", id, err)
			}
		}
		o.Set(sharedKey(id), u32(nil, n+uint32(len(cs)-1)))
	}
	return nil
}

// pendingKeys returns the pending-delete records of the distinct slice
// ids of ws (zero slices, id 0, have no object and none).
func pendingKeys(ws []SliceWrite) [][]byte {
	seen := make(map[uint64]bool, len(ws))
	var out [][]byte
	for _, w := range ws {
		if w.Slice.ID != 0 && !seen[w.Slice.ID] {
			seen[w.Slice.ID] = true
			out = append(out, pendingKey(w.Slice.ID))
		}
	}
	return out
}

// checkNotPending fails a commit of a slice whose object is queued for
// deletion: the deleter would remove the data the commit refers to. A
// writer commits all parts of an object together (chunk.Writer), so this
// does not happen; the check makes a breach of that rule a failed write
// instead of a block missing later.
func (o *op) checkNotPending(keys [][]byte) error {
	for _, k := range keys {
		v, err := o.Get(k)
		if err != nil {
			return err
		}
		if v != nil {
			id, err := decodePendingKey(k)
			if err != nil {
				return err
			}
			return fmt.Errorf("slice %d is queued for deletion (its object was freed while parts of it were uncommitted); the write is lost: %w",
				id, base.ErrIO)
		}
	}
	return nil
}

// CompactChunk replaces slices of the prefix old of chunk index's slice
// list by the single slice s, which the caller wrote with what the chunk
// resolved to over s's range. drop selects the slices of old that s
// replaces (nil: all of them); they must lie inside s's range. The new list
// is: the kept slices of old, then s, then whatever was appended after old
// meanwhile (newer, so it still wins over s). Dropped slices are queued for
// deletion. If the list no longer starts with exactly old, it returns
// ErrCompactionStale and changes nothing; base.ErrNotFound if the inode is
// gone.
func (m *Meta) CompactChunk(ctx context.Context, ino base.Ino, index uint32, old []base.Slice, drop []bool, s base.Slice) error {
	if len(old) == 0 {
		return fmt.Errorf("compact nothing: %w", base.ErrInvalid)
	}
	if drop != nil && len(drop) != len(old) {
		return fmt.Errorf("compact: %d drop flags for %d slices: %w", len(drop), len(old), base.ErrInvalid)
	}
	for i, os := range old {
		if (drop == nil || drop[i]) && os.Len > 0 && (os.Pos < s.Pos || os.Pos+os.Len > s.Pos+s.Len) {
			return fmt.Errorf("compact: dropped slice [%d,+%d) outside the new slice [%d,+%d): %w", os.Pos, os.Len, s.Pos, s.Len, base.ErrInvalid)
		}
	}
	if err := checkSlice(s); err != nil {
		return fmt.Errorf("%v: %w", err, base.ErrInvalid)
	}
	// Committed or not, the merged slice stops being in flight: on failure
	// the caller deletes it.
	defer m.ForgetSlice(s.ID)
	guards := m.reservationKeys([]uint64{s.ID})
	return m.mutate(ctx, func(o *op) error {
		if err := o.checkReserved(guards); err != nil {
			return err
		}
		a, err := o.attr(ino)
		if err != nil {
			return err
		}
		if err := fileAttr(a); err != nil {
			return err
		}
		cur, err := o.chunk(ino, index)
		if err != nil {
			return err
		}
		if len(cur) < len(old) || !slices.Equal(cur[:len(old)], old) {
			return fmt.Errorf("chunk %d of inode %d: %w", index, ino, ErrCompactionStale)
		}
		var ns, dropped []base.Slice
		for i, os := range old {
			if drop == nil || drop[i] {
				dropped = append(dropped, os)
			} else {
				ns = append(ns, os)
			}
		}
		ns = append(ns, s)
		ns = append(ns, cur[len(old):]...)
		if err := o.vset(chunkKey(ino, index), encodeSlices(ns)); err != nil {
			return err
		}
		return o.release(ino, index, dropped, ns)
	})
}

// release queues the slices of dropped for deletion unless still
// referenced by keep or by any version of the chunk left in the store.
func (o *op) release(ino base.Ino, index uint32, dropped, keep []base.Slice) error {
	// The live version is keep (the caller just wrote or deleted it); only
	// versions of older epochs, which snapshots retain, can still refer to
	// dropped slices. Reading just those avoids stepping over every
	// overwritten copy of the live record.
	if err := o.loadEpochs(); err != nil {
		return err
	}
	var vs []version
	if o.epoch > 1 {
		var err error
		if vs, err = versionsBelow(o, chunkKey(ino, index), o.epoch); err != nil {
			return err
		}
	}
	kept, err := sliceLists(chunkKey(ino, index), vs)
	if err != nil {
		return err
	}
	return o.freeSlices(chunkKey(ino, index), dropped, append(kept, keep)...)
}

type chunkRec struct {
	index  uint32
	slices []base.Slice
}

func (o *op) chunks(ino base.Ino) ([]chunkRec, error) {
	if o.isEmpty(chunkPrefix(ino)) {
		return nil, nil
	}
	if o.soleChunk[ino] {
		if p, ok := o.pre[string(chunkKey(ino, 0))]; ok && len(p.value) > 0 && p.value[0] == tagLive {
			ss, err := decodeSlices(p.value[1:])
			if err != nil {
				return nil, fmt.Errorf("chunk of inode %d: %w", ino, err)
			}
			return []chunkRec{{0, ss}}, nil
		}
	}
	var out []chunkRec
	var derr error
	err := vscanKeys(o, chunkPrefix(ino), nil, latestEpoch, func(k, key, v []byte) bool {
		_, index, err := decodeChunkKey(k)
		if err != nil {
			derr = err
			return false
		}
		ss, err := decodeSlices(v)
		if err != nil {
			derr = fmt.Errorf("chunk of inode %d: %w", ino, err)
			return false
		}
		out = append(out, chunkRec{index, ss})
		// The newest version, kept: a vdel or vset of this chunk
		// (dropChunks, truncate) need not seek it again.
		o.keepVersion(k, kv.Pair{Key: bytes.Clone(key), Value: append([]byte{tagLive}, v...)})
		return true
	})
	if err != nil {
		return nil, err
	}
	return out, derr
}

// dropChunks deletes every chunk with index >= from.
func (o *op) dropChunks(ino base.Ino, from uint32) error {
	cs, err := o.chunks(ino)
	if err != nil {
		return err
	}
	for _, c := range cs {
		if c.index < from {
			continue
		}
		if err := o.vdel(chunkKey(ino, c.index)); err != nil {
			return err
		}
		if err := o.release(ino, c.index, c.slices, nil); err != nil {
			return err
		}
	}
	return nil
}

// truncate sets the length of file ino to size. Shrinking drops chunks
// wholly beyond the end and covers the tail of the chunk holding the new
// end with a zero slice, so that growing later reads zeros.
func (o *op) truncate(ino base.Ino, a *base.Attr, size uint64) error {
	before := usageBytes(a)
	if size < a.Length {
		first := size / base.ChunkSize // chunk holding the new end
		from := first
		if size%base.ChunkSize != 0 {
			from++
		}
		if from <= uint64(^uint32(0)) {
			if err := o.dropChunks(ino, uint32(from)); err != nil {
				return err
			}
		}
		if from != first {
			idx := uint32(first)
			ss, err := o.chunk(ino, idx)
			if err != nil {
				return err
			}
			if ss != nil {
				pos := uint32(size % base.ChunkSize)
				// Beyond the end of the last slice the chunk reads as
				// zeros anyway: cover only up to there.
				var end uint64
				for _, s := range ss {
					end = max(end, uint64(s.Pos)+uint64(s.Len))
				}
				if end > uint64(pos) {
					ss = append(ss, base.Slice{Pos: pos, Len: uint32(end) - pos})
					if err := o.vset(chunkKey(ino, idx), encodeSlices(ss)); err != nil {
						return err
					}
				}
			}
		}
	}
	a.Length = size
	return o.chargeBytes(ino, a, usageBytes(a)-before)
}

// Chunks lists every chunk of file ino with its slices (for cairn info).
func (m *Meta) Chunks(ctx context.Context, ino base.Ino) ([]ChunkInfo, error) {
	var out []ChunkInfo
	err := m.view(ctx, func(r kv.Reader) (err error) {
		out, err = chunksAt(r, ino, latestEpoch)
		return err
	})
	return out, err
}

func chunksAt(r kv.Reader, ino base.Ino, epoch uint64) ([]ChunkInfo, error) {
	var out []ChunkInfo
	if _, err := getAttrAt(r, ino, epoch); err != nil {
		return nil, err
	}
	var derr error
	err := vscan(r, chunkPrefix(ino), nil, epoch, func(k, v []byte) bool {
		_, index, err := decodeChunkKey(k)
		if err != nil {
			derr = err
			return false
		}
		ss, err := decodeSlices(v)
		if err != nil {
			derr = err
			return false
		}
		out = append(out, ChunkInfo{Index: index, Slices: ss})
		return true
	})
	if err != nil {
		return nil, err
	}
	return out, derr
}

// ForEachSlice calls fn for every slice referenced by any version of any
// chunk (so slices kept by snapshots are reported too), from one consistent
// view. Zero slices are skipped. An error from fn stops the walk and is
// returned.
func (m *Meta) ForEachSlice(ctx context.Context, fn func(SliceUse) error) error {
	var uses []SliceUse
	err := m.view(ctx, func(r kv.Reader) error {
		uses = uses[:0]
		var derr error
		err := r.Scan(prefixOnly(pChunk), kv.PrefixEnd(prefixOnly(pChunk)), false, func(k, v []byte) bool {
			ki, err := DecodeKey(k)
			if err != nil {
				derr = err
				return false
			}
			if len(v) == 0 || v[0] != tagLive {
				return true
			}
			ss, err := decodeSlices(v[1:])
			if err != nil {
				derr = fmt.Errorf("chunk %d of inode %d: %w", ki.Index, ki.Ino, err)
				return false
			}
			for _, s := range ss {
				if s.ID != 0 {
					uses = append(uses, SliceUse{Ino: ki.Ino, Chunk: ki.Index, ID: s.ID, Size: s.Size})
				}
			}
			return true
		})
		if err != nil {
			return err
		}
		return derr
	})
	if err != nil {
		return err
	}
	for _, u := range uses {
		if err := fn(u); err != nil {
			return err
		}
	}
	return nil
}

func decodeU32(b []byte) (uint32, error) {
	if len(b) != 4 {
		return 0, fmt.Errorf("%d bytes, want 4: %w", len(b), base.ErrIO)
	}
	return binary.BigEndian.Uint32(b), nil
}
