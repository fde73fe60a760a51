package chunk

import (
	"context"
	"slices"

	"github.com/cairnfs/cairn/internal/base"
)

// HoldCommits runs fn while no commit of this Writer is in progress, and
// holds new commits off until fn returns: what fn reads of the committed
// metadata (chunk maps, length) and of the Writer's pending data (Len,
// Overlay) agree — every slice is in one or the other (or, after a commit
// that failed ambiguously, in both, with the same content), never in
// neither. Writes go on meanwhile; only commits wait. fn must be short
// and must not Flush this Writer (it would wait for itself).
func (w *Writer) HoldCommits(fn func() error) error {
	w.commitMu.RLock()
	defer w.commitMu.RUnlock()
	return fn()
}

// An Overlay is the uncommitted data of one Writer in one range of one
// chunk, as Writer.Overlay found it: what a read of the range must see
// over the chunk's committed content (read-your-writes without committing
// first). It is immutable and independent of later writes.
type Overlay struct {
	s     *Store
	pos   uint32 // chunk position of the range
	parts []overlayPart
}

// overlayPart is a run of chunk positions [pos, end) within one block of
// one pending slice: bytes copied from the buffer, or, when data is nil,
// the part of the slice already uploaded (its buffer is released) that
// ref names.
type overlayPart struct {
	pos, end uint32
	data     []byte
	ref      base.Slice
}

// Overlay returns the uncommitted data of chunk idx in chunk positions
// [pos, pos+n), oldest slice first, or nil when there is none. Bytes still
// buffered are copied; blocks already uploaded are read from the Store by
// Apply. Take it before the committed chunk map, or together with it
// inside HoldCommits, so that a commit cannot move a slice out of both
// views: the Committer must make the new map visible (and drop any copy
// the caller caches) before the commit takes the slices off the pending
// list, which it does last.
//
// Uploaded blocks stay readable: until the slice is committed nothing
// deletes them (gc reclaims only old uncommitted objects), and once it is
// committed and later replaced the caller's deletion delay covers reads
// that resolved it just before (as for any chunk map).
func (w *Writer) Overlay(idx uint32, pos uint32, n int) *Overlay {
	w.mu.Lock()
	defer w.mu.Unlock()
	a, b := int(pos), int(pos)+n
	bs := w.s.opts.BlockSize
	var o *Overlay
	for _, ws := range w.pending {
		if ws.chunk != idx {
			continue
		}
		start := int(ws.pos)
		lo, hi := max(a, start), min(b, start+ws.length)
		if lo >= hi {
			continue
		}
		if o == nil {
			o = &Overlay{s: w.s, pos: pos}
		}
		for x := lo; x < hi; {
			rel := x - start
			i := (rel + ws.skew) / bs
			y := min(hi, start+(i+1)*bs-ws.skew)
			part := overlayPart{pos: uint32(x), end: uint32(y)}
			// Writes within a slice are contiguous from its start: block
			// i's buffer holds slice bytes [i*bs-skew, i*bs-skew+len) for
			// every state but uploaded (where the skew is 0) (frozen blocks are never written again,
			// and an upload only appends its checksums past the data).
			if blk := ws.blocks[i]; blk.state == uploaded {
				ref := ws.ref()
				part.ref = base.Slice{Pos: uint32(x), ID: ref.ID, Size: ref.Size, Off: ref.Off + uint32(rel), Len: uint32(y - x)}
			} else {
				boff := rel + ws.skew - i*bs
				part.data = slices.Clone(blk.buf[boff : boff+y-x])
			}
			o.parts = append(o.parts, part)
			x = y
		}
	}
	return o
}

// Apply writes the overlay over p, which holds the chunk's committed
// content for the overlay's range (p[0] is position pos of Overlay; p may
// be shorter than the range, the rest is ignored). Newer slices are
// applied after older ones, so the newest write wins. A nil Overlay does
// nothing. Errors are those of Store.ReadChunk for uploaded parts.
func (o *Overlay) Apply(ctx context.Context, p []byte) error {
	if o == nil {
		return nil
	}
	for _, part := range o.parts {
		lo, hi := int(part.pos-o.pos), int(part.end-o.pos)
		if lo >= len(p) {
			continue
		}
		hi = min(hi, len(p))
		dst := p[lo:hi]
		if part.data != nil {
			copy(dst, part.data)
			continue
		}
		if _, err := o.s.ReadChunk(ctx, []base.Slice{part.ref}, part.pos, dst); err != nil {
			return err
		}
	}
	return nil
}
