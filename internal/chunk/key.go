package chunk

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/cairnfs/cairn/internal/base"
)

// KeyPrefix is the prefix of every block object key.
const KeyPrefix = "chunks/"

// BlockKey returns the object key of block index (of length bytes) of slice
// id: chunks/<id/1000000>/<id/1000>/<id>_<index>_<length>.
func BlockKey(id uint64, index int, length int) string {
	b := make([]byte, 0, 64)
	b = append(b, KeyPrefix...)
	b = strconv.AppendUint(b, id/1_000_000, 10)
	b = append(b, '/')
	b = strconv.AppendUint(b, id/1_000, 10)
	b = append(b, '/')
	b = strconv.AppendUint(b, id, 10)
	b = append(b, '_')
	b = strconv.AppendInt(b, int64(index), 10)
	b = append(b, '_')
	b = strconv.AppendInt(b, int64(length), 10)
	return string(b)
}

// ParseBlockKey is the inverse of BlockKey. It accepts exactly the keys
// BlockKey produces for id > 0, index >= 0 and length > 0 (canonical
// decimal, matching directory parts); anything else is an error wrapping
// base.ErrInvalid.
func ParseBlockKey(key string) (id uint64, index, length int, err error) {
	bad := func(why string) (uint64, int, int, error) {
		return 0, 0, 0, fmt.Errorf("chunk: block key %q: %s: %w", key, why, base.ErrInvalid)
	}
	rest, ok := strings.CutPrefix(key, KeyPrefix)
	if !ok {
		return bad("no " + KeyPrefix + " prefix")
	}
	slash := strings.LastIndexByte(rest, '/')
	if slash < 0 {
		return bad("no directories")
	}
	parts := strings.Split(rest[slash+1:], "_")
	if len(parts) != 3 {
		return bad("name is not <id>_<index>_<length>")
	}
	id, err = strconv.ParseUint(parts[0], 10, 64)
	if err != nil || id == 0 {
		return bad("bad slice id")
	}
	idx, err := strconv.ParseUint(parts[1], 10, 31)
	if err != nil {
		return bad("bad block index")
	}
	n, err := strconv.ParseUint(parts[2], 10, 31)
	if err != nil || n == 0 || n > math.MaxInt32 {
		return bad("bad block length")
	}
	index, length = int(idx), int(n)
	// Canonical form only: leading zeros, signs and wrong directories are
	// all caught by comparing with the key we would have written.
	if BlockKey(id, index, length) != key {
		return bad("not canonical")
	}
	return id, index, length, nil
}

// SlicePrefix returns the key prefix that the block keys of slice id share
// with no other slice: chunks/<id/1000000>/<id/1000>/<id>_.
func SlicePrefix(id uint64) string {
	k := BlockKey(id, 0, 1)
	return k[:len(k)-len("0_1")]
}

// BlockLens returns the lengths of the blocks a slice of size bytes is
// stored in, for blocks of at most blockSize bytes: the keys of its objects
// are BlockKey(id, i, BlockLens(...)[i]).
func BlockLens(size uint32, blockSize int) []int {
	var out []int
	for rest := int(size); rest > 0; rest -= blockSize {
		out = append(out, min(rest, blockSize))
	}
	return out
}

// InlineBlock reports whether key is a block of an inline slice (one whose
// id has base.InlineBit, see Options.InlineMax): the blocks a volume with
// an inline limit keeps in its metadata engine. Other keys are false.
//
// It runs on every request of the volume's store, so it reads only the id
// (no allocation, no canonical-form check): keys come from BlockKey.
func InlineBlock(key string) bool {
	if !strings.HasPrefix(key, KeyPrefix) {
		return false
	}
	name := key[strings.LastIndexByte(key, '/')+1:]
	idStr, _, ok := strings.Cut(name, "_")
	if !ok {
		return false
	}
	id, err := strconv.ParseUint(idStr, 10, 64)
	return err == nil && id&base.InlineBit != 0
}
