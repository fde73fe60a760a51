package pebble

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2"

	"github.com/cairnfs/cairn/internal/kv"
)

// The redo log makes NoSync commits survive a crash of the process (see the
// package doc). It is a file in the Pebble directory holding, in commit
// order, one record per Update committed since the last Sync:
//
//	record  = length uint32 | crc uint32 | payload       (little-endian)
//	payload = seq uint64 | Pebble batch representation
//
// length is len(payload) and crc its CRC-32C. seq numbers the Updates
// (1, 2, …); each Update also stores its seq under appliedSeqKey, so the
// database itself says which records it already holds.
const redoLogName = "cairn-redo.log"

const (
	redoHeaderLen = 8 // length + crc
	redoSeqLen    = 8
)

// maxRedoLogSize bounds the redo log between Syncs: an Update that takes it
// past this size syncs the WAL and empties it. The daemon syncs every
// second, so this only matters for writers that never call Sync, where it
// bounds both the file and the replay time at Open.
var maxRedoLogSize = 64 << 20 // a variable for tests

// reservedPrefix starts every key this package keeps in the database for
// itself. User keys with this prefix are hidden from Get and Scan and
// cannot be written (ErrReservedKey).
const reservedPrefix = "\xff\xffcairn/"

// appliedSeqKey holds, as a big-endian uint64, the seq of the last Update
// committed to the database.
var appliedSeqKey = []byte(reservedPrefix + "applied-seq")

// ErrReservedKey is returned by Update when its transaction wrote or
// deleted a key starting with 0xff 0xff "cairn/", which the store reserves
// for itself.
var ErrReservedKey = errors.New("pebble: key is reserved for the store's own use")

// reservedEnd is the first key after those with reservedPrefix.
var reservedEnd = string(kv.PrefixEnd([]byte(reservedPrefix)))

func isReserved(key []byte) bool { return bytes.HasPrefix(key, []byte(reservedPrefix)) }

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// appendRedoRecord appends the record of batch repr with number seq to buf.
func appendRedoRecord(buf []byte, seq uint64, repr []byte) []byte {
	start := len(buf)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(redoSeqLen+len(repr)))
	buf = binary.LittleEndian.AppendUint32(buf, 0) // crc, below
	buf = binary.LittleEndian.AppendUint64(buf, seq)
	buf = append(buf, repr...)
	crc := crc32.Checksum(buf[start+redoHeaderLen:], crcTable)
	binary.LittleEndian.PutUint32(buf[start+4:], crc)
	return buf
}

// redoRecord is one decoded record; repr aliases the log's contents.
type redoRecord struct {
	seq  uint64
	repr []byte
}

// parseRedoLog decodes data, the contents of a redo log, and returns the
// records the database does not hold yet: those numbered applied+1,
// applied+2, … without a gap. It stops at the first record that is short or
// fails its CRC (a write cut off by the crash, never acknowledged), at a seq
// lower than its predecessor's (stale bytes from before a truncation that a
// machine crash undid) and at a gap in the numbering; reason says why it
// stopped early, or is empty if it decoded all of data.
func parseRedoLog(data []byte, applied uint64) (recs []redoRecord, reason string) {
	var prev uint64
	for off := 0; off < len(data); {
		rest := data[off:]
		if len(rest) < redoHeaderLen {
			return recs, fmt.Sprintf("torn record header at offset %d", off)
		}
		n := binary.LittleEndian.Uint32(rest)
		if n < redoSeqLen || uint64(n) > uint64(len(rest)-redoHeaderLen) {
			return recs, fmt.Sprintf("torn record at offset %d (length %d, %d bytes left)", off, n, len(rest)-redoHeaderLen)
		}
		payload := rest[redoHeaderLen : redoHeaderLen+int(n)]
		if crc32.Checksum(payload, crcTable) != binary.LittleEndian.Uint32(rest[4:]) {
			return recs, fmt.Sprintf("record at offset %d fails its checksum", off)
		}
		seq := binary.LittleEndian.Uint64(payload)
		if seq <= prev {
			return recs, fmt.Sprintf("record at offset %d has seq %d after %d", off, seq, prev)
		}
		prev = seq
		if seq > applied {
			if want := applied + 1 + uint64(len(recs)); seq != want {
				return recs, fmt.Sprintf("record at offset %d has seq %d; want %d", off, seq, want)
			}
			recs = append(recs, redoRecord{seq: seq, repr: payload[redoSeqLen:]})
		}
		off += redoHeaderLen + int(n)
	}
	return recs, ""
}

// readAppliedSeq returns the seq of the last Update the database holds.
func readAppliedSeq(db *pebble.DB) (uint64, error) {
	v, closer, err := db.Get(appliedSeqKey)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer closer.Close()
	if len(v) != 8 {
		return 0, fmt.Errorf("applied seq is %d bytes; want 8", len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// recover brings the database up to date with the redo log, which then
// belongs to s. Read-only, it cannot write the records into the database,
// so it refuses to open a store whose log holds any.
func (s *Store) recover() error {
	applied, err := readAppliedSeq(s.db)
	if err != nil {
		return fmt.Errorf("%s: %w", s.Name(), err)
	}
	s.seq = applied
	name := filepath.Join(s.path, redoLogName)
	if s.opts.ReadOnly {
		data, err := os.ReadFile(name)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%s: %w", s.Name(), err)
		}
		if recs, _ := parseRedoLog(data, applied); len(recs) > 0 {
			return fmt.Errorf("%s was not closed cleanly: %d committed transactions are only in %s; open it read-write once to recover them",
				s.Name(), len(recs), redoLogName)
		}
		return nil
	}

	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("%s: %w", s.Name(), err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		_ = f.Close()
		return fmt.Errorf("%s: read %s: %w", s.Name(), redoLogName, err)
	}
	s.redo, s.redoSize = f, len(data)
	recs, reason := parseRedoLog(data, applied)
	for _, r := range recs {
		b := s.db.NewBatch()
		// The batch keeps the slice, and a pooled batch may later append
		// to it: give it its own copy.
		err := b.SetRepr(bytes.Clone(r.repr))
		if err == nil {
			err = s.db.Apply(b, pebble.NoSync)
		}
		_ = b.Close()
		if err != nil {
			return fmt.Errorf("%s: replay %s record %d: %w", s.Name(), redoLogName, r.seq, err)
		}
		s.seq = r.seq
	}
	if len(data) > 0 {
		s.opts.Logger.Info("replayed redo log", "store", s.Name(),
			"applied_seq", applied, "replayed", len(recs), "bytes", len(data), "stopped", reason)
	}
	// Make the replayed records durable in Pebble's WAL, then empty the log.
	if err := s.syncLocked(); err != nil {
		return fmt.Errorf("%s: after replaying %s: %w", s.Name(), redoLogName, err)
	}
	return nil
}

// commitLogged commits b with NoSync and appends it to the redo log before
// returning, which makes it survive a crash of the process. The caller holds
// the writer slot.
func (s *Store) commitLogged(b *pebble.Batch) error {
	if s.redo == nil || s.opts.noRedoLog {
		if err := b.Commit(pebble.NoSync); err != nil {
			return fmt.Errorf("commit: %w", err)
		}
		return nil
	}
	seq := s.seq + 1
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], seq)
	if err := b.Set(appliedSeqKey, v[:], nil); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	// Encode before committing: Pebble may keep a large batch's buffer.
	s.redoBuf = appendRedoRecord(s.redoBuf[:0], seq, b.Repr())
	if cap(s.redoBuf) > 1<<20 {
		defer func() { s.redoBuf = nil }() // do not pin a big batch's copy
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	s.seq = seq
	// The record follows the commit, so a record in the log means its
	// Update is in the database or in the WAL; Open re-applies those the
	// database lacks.
	if err := s.appendRedo(s.redoBuf); err != nil {
		// The transaction is committed and visible, but a crash would lose
		// it: make it durable the slow way.
		if serr := s.syncLocked(); serr != nil {
			return fmt.Errorf("transaction committed but not durable: %w; %w", err, serr)
		}
		s.opts.Logger.Warn("redo log append failed; synced instead", "store", s.Name(), "err", err)
		return nil
	}
	if s.redoSize >= maxRedoLogSize {
		// The Update is safe in the log; a failure here only delays the
		// truncation, so it is logged rather than returned.
		if err := s.syncLocked(); err != nil {
			s.opts.Logger.Error("sync of full redo log failed", "store", s.Name(), "err", err)
		}
	}
	return nil
}

// appendRedo writes the record of a committed Update with one write(2).
// The caller holds the writer slot.
func (s *Store) appendRedo(rec []byte) error {
	n, err := s.redo.Write(rec)
	s.redoSize += n
	if err != nil {
		s.redoBroken = true
		return fmt.Errorf("append to %s: %w", redoLogName, err)
	}
	return nil
}

// syncLocked makes every committed Update durable in Pebble's WAL and
// empties the redo log. The caller holds the writer slot (or is Open or
// Close, when nothing else runs).
func (s *Store) syncLocked() error {
	if s.redoSize == 0 && !s.redoBroken {
		// Every NoSync Update appends to the log, so none has committed
		// since the last sync.
		return nil
	}
	// An empty LogData record goes through the commit pipeline with a sync
	// request; the WAL writer syncs everything queued before it.
	if err := s.db.LogData(nil, pebble.Sync); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	// Everything in the log is now in the synced WAL. O_APPEND makes the
	// next record land at the new end.
	if err := s.redo.Truncate(0); err != nil {
		return fmt.Errorf("truncate %s: %w", redoLogName, err)
	}
	s.redoSize, s.redoBroken = 0, false
	return nil
}
