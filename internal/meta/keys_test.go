package meta

import (
	"bytes"
	"encoding/hex"
	"errors"
	"sort"
	"testing"

	"github.com/cairnfs/cairn/internal/base"
)

func TestKeyLayout(t *testing.T) {
	for _, tc := range []struct {
		name string
		key  []byte
		hex  string
		info KeyInfo
	}{
		{"settings", settingsKey(), "53", KeyInfo{Kind: "settings"}},
		{"epoch", epochKey(), "45", KeyInfo{Kind: "epoch"}},
		{"frozen", frozenKey(), "46", KeyInfo{Kind: "frozen"}},
		{"counter", counterKey(counterNextInode), "4369", KeyInfo{Kind: "counter", Counter: 'i'}},
		{"counter shard", counterShardKey(counterUsedBytes, 3), "436203", KeyInfo{Kind: "counter", Counter: 'b', Shard: 4}},
		{"reserved", reservedKey(2, 1024), "5200000000000000020000000000000400", KeyInfo{Kind: "reserved", ID: 2, Start: 1024}},
		{"lock", lockKey(5, lockPosix, 2, 9), "57" + "0000000000000005" + "70" + "0000000000000002" + "0000000000000009", KeyInfo{Kind: "lock", Ino: 5, Counter: 'p', ID: 2, Owner: 9}},
		{"grant", grantKey(3, counterUsedInodes), "67" + "0000000000000003" + "6e", KeyInfo{Kind: "grant", ID: 3, Counter: 'n'}},
		{"expired", expiredKey(3), "470000000000000003", KeyInfo{Kind: "expired", ID: 3}},
		{"lock guard", lockGuardKey(5), "57000000000000000567", KeyInfo{Kind: "lock-guard", Ino: 5}},
		{"session", sessionKey(7), "4e0000000000000007", KeyInfo{Kind: "session", ID: 7}},
		{"hold", holdKey(2, 3), "4800000000000000020000000000000003", KeyInfo{Kind: "hold", Ino: 2, ID: 3}},
		{"pending", pendingKey(9), "500000000000000009", KeyInfo{Kind: "pending", ID: 9}},
		{"orphan", orphanKey(5), "510000000000000005", KeyInfo{Kind: "orphan", Ino: 5}},
		{"attr", versionKey(attrKey(1), 1), "410000000000000001fffffffffffffffe", KeyInfo{Kind: "attr", Ino: 1, Epoch: 1}},
		{"symlink", versionKey(symlinkKey(4), 2), "4c0000000000000004fffffffffffffffd", KeyInfo{Kind: "symlink", Ino: 4, Epoch: 2}},
		{"dentry", versionKey(dentryKey(1, "ab"), 1), "4400000000000000016162" + "00" + "fffffffffffffffe",
			KeyInfo{Kind: "dentry", Parent: 1, Name: "ab", Epoch: 1}},
		{"xattr", versionKey(xattrKey(3, "user.x"), 1), "580000000000000003757365722e78" + "00" + "fffffffffffffffe",
			KeyInfo{Kind: "xattr", Ino: 3, Name: "user.x", Epoch: 1}},
		{"snapshot", snapshotKey("s1"), "54" + "7331" + "00", KeyInfo{Kind: "snapshot", Name: "s1"}},
		{"change", changeKey(2, attrKey(5)), "56" + "0000000000000002" + "41" + "0000000000000005",
			KeyInfo{Kind: "change", Epoch: 2, Logical: string(attrKey(5))}},
		{"snapshot job", snapJobKey(3), "590000000000000003", KeyInfo{Kind: "snapshot-job", Epoch: 3}},
		{"fence", fenceKey(7), "5a07", KeyInfo{Kind: "fence", Shard: 8}},
		{"shared", sharedKey(9), "4f0000000000000009", KeyInfo{Kind: "shared", ID: 9}},
		{"chunk", versionKey(chunkKey(3, 258), 1), "58"[0:0] + "4b000000000000000300000102fffffffffffffffe",
			KeyInfo{Kind: "chunk", Ino: 3, Index: 258, Epoch: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := hex.EncodeToString(tc.key); got != tc.hex {
				t.Errorf("key %s, want %s", got, tc.hex)
			}
			info, err := DecodeKey(tc.key)
			if err != nil {
				t.Fatal(err)
			}
			if info != tc.info {
				t.Errorf("decoded %+v, want %+v", info, tc.info)
			}
		})
	}
}

func TestKeyOrder(t *testing.T) {
	// Versions of one logical key are contiguous and newest first; names
	// sort as strings; a name and its extension do not interleave.
	keys := [][]byte{
		versionKey(dentryKey(1, "a"), 1),
		versionKey(dentryKey(1, "ab"), 5),
		versionKey(dentryKey(1, "a"), 3),
		versionKey(dentryKey(1, "ab"), 2),
		versionKey(dentryKey(1, "b"), 1),
		versionKey(dentryKey(2, ""+"a"), 1),
	}
	sort.Slice(keys, func(i, j int) bool { return bytes.Compare(keys[i], keys[j]) < 0 })
	var got []string
	for _, k := range keys {
		ki, err := DecodeKey(k)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(rune('0'+ki.Parent))+ki.Name+string(rune('0'+ki.Epoch)))
	}
	want := []string{"1a3", "1a1", "1ab5", "1ab2", "1b1", "2a1"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("order %v, want %v", got, want)
		}
	}
	// chunk indexes sort numerically
	if bytes.Compare(chunkKey(1, 255), chunkKey(1, 256)) >= 0 {
		t.Error("chunk indexes do not sort numerically")
	}
}

func TestDecodeKeyErrors(t *testing.T) {
	for _, k := range [][]byte{
		nil, {'Z'}, {pSettings, 0}, {pCounter}, {pSession, 1}, {pHold, 1, 2},
		{pAttr, 1, 2, 3}, append(attrKey(1), 1),
		grantPrefix(3), append(grantPrefix(3), 'x'), append(grantKey(3, 'b'), 0),
		versionKey(append(dentryPrefix(1), 'a'), 1),            // no terminator
		versionKey(append(dentryPrefix(1), 0), 1),              // empty name
		versionKey(append(dentryPrefix(1), 'a', 0, 'b', 0), 1), // NUL in name
		versionKey(append(chunkPrefix(1), 0, 1), 1),
	} {
		if _, err := DecodeKey(k); !errors.Is(err, base.ErrIO) {
			t.Errorf("DecodeKey(%x) = %v, want ErrIO", k, err)
		}
	}
}

func TestAttrCodec(t *testing.T) {
	a := base.Attr{Type: base.TypeFile, Mode: 0o4755, Uid: 1, Gid: 2, Nlink: 3, Rdev: 4, Length: 1 << 40,
		Atime: -5, Mtime: 6, Ctime: 7, Btime: 8, Parent: 9, Flags: 10}
	b := encodeAttr(&a)
	if len(b) != attrLen {
		t.Fatalf("len %d", len(b))
	}
	got, err := decodeAttr(b)
	if err != nil || got != a {
		t.Fatalf("roundtrip %+v %v", got, err)
	}
	for _, bad := range [][]byte{nil, b[:attrLen-1], append(b, 0), {2}} {
		if _, err := decodeAttr(bad); !errors.Is(err, base.ErrIO) {
			t.Errorf("decodeAttr(%x) = %v", bad, err)
		}
	}
	bt := append([]byte(nil), b...)
	bt[1] = 99
	if _, err := decodeAttr(bt); err == nil {
		t.Error("bad type accepted")
	}
}

func TestSliceCodec(t *testing.T) {
	ss := []base.Slice{{Pos: 1, ID: 2, Size: 10, Off: 3, Len: 4}, {Pos: 100, ID: 0, Len: 50}}
	b := encodeSlices(ss)
	if len(b) != 48 {
		t.Fatalf("len %d", len(b))
	}
	got, err := decodeSlices(b)
	if err != nil || len(got) != 2 || got[0] != ss[0] || got[1] != ss[1] {
		t.Fatalf("roundtrip %+v %v", got, err)
	}
	if _, err := decodeSlices(b[:47]); !errors.Is(err, base.ErrIO) {
		t.Error("short list accepted")
	}
	if _, err := decodeSlices(encodeSlices([]base.Slice{{ID: 1, Size: 1, Off: 1, Len: 1}})); err == nil {
		t.Error("range beyond slice size accepted")
	}
	if _, err := decodeSlices(encodeSlices([]base.Slice{{Pos: base.ChunkSize, Len: 1}})); err == nil {
		t.Error("slice beyond chunk accepted")
	}
	ino, typ, err := decodeDentry(encodeDentry(5, base.TypeDir))
	if err != nil || ino != 5 || typ != base.TypeDir {
		t.Fatal("dentry roundtrip")
	}
	if _, _, err := decodeDentry([]byte{1}); err == nil {
		t.Error("short dentry accepted")
	}
}

func FuzzDecodeAttr(f *testing.F) {
	f.Add(encodeAttr(&base.Attr{Type: base.TypeDir, Mode: 0o755, Nlink: 2}))
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := decodeAttr(b)
		if err != nil {
			return
		}
		if !bytes.Equal(encodeAttr(&a), b) {
			t.Fatalf("re-encoding differs")
		}
	})
}

func FuzzDecodeSlices(f *testing.F) {
	f.Add(encodeSlices([]base.Slice{{Pos: 1, ID: 2, Size: 10, Off: 3, Len: 4}}))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		ss, err := decodeSlices(b)
		if err != nil {
			return
		}
		if !bytes.Equal(encodeSlices(ss), b) {
			t.Fatalf("re-encoding differs")
		}
	})
}

func FuzzDecodeDentry(f *testing.F) {
	f.Add(encodeDentry(3, base.TypeFile))
	f.Fuzz(func(t *testing.T, b []byte) {
		ino, typ, err := decodeDentry(b)
		if err == nil && !bytes.Equal(encodeDentry(ino, typ), b) {
			t.Fatalf("re-encoding differs")
		}
	})
}

func FuzzDecodeKey(f *testing.F) {
	for _, k := range [][]byte{settingsKey(), counterKey('i'), holdKey(1, 2), versionKey(dentryKey(1, "x"), 1),
		versionKey(chunkKey(1, 2), 3), versionKey(xattrKey(1, "user.a"), 1), versionKey(attrKey(1), 1),
		lockKey(1, lockPosix, 2, 3), reservedKey(4, 5), expiredKey(6), counterShardKey('b', 7),
		snapshotKey("s"), changeKey(3, dentryKey(1, "x")), snapJobKey(4), fenceKey(5), sharedKey(6),
		dentryKey(1, "x"), xattrKey(2, "user.a"), chunkKey(3, 4), attrKey(5), symlinkKey(6), sessionKey(7),
		pendingKey(8), orphanKey(9), recallKey(1, 2), blobKey("chunks/1_0_3"), leaseKey(3), grantKey(4, 'b')} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, k []byte) {
		checkTypedDecoders(t, k)
		ki, err := DecodeKey(k)
		if err != nil {
			return
		}
		var re []byte
		switch ki.Kind {
		case "dentry":
			re = versionKey(dentryKey(ki.Parent, ki.Name), ki.Epoch)
		case "xattr":
			re = versionKey(xattrKey(ki.Ino, ki.Name), ki.Epoch)
		case "chunk":
			re = versionKey(chunkKey(ki.Ino, ki.Index), ki.Epoch)
		case "attr":
			re = versionKey(attrKey(ki.Ino), ki.Epoch)
		case "lock":
			re = lockKey(ki.Ino, ki.Counter, ki.ID, ki.Owner)
		case "reserved":
			re = reservedKey(ki.ID, ki.Start)
		case "grant":
			re = grantKey(ki.ID, ki.Counter)
		case "lock-guard":
			re = lockGuardKey(ki.Ino)
		case "expired":
			re = expiredKey(ki.ID)
		case "snapshot":
			re = snapshotKey(ki.Name)
		case "change":
			re = changeKey(ki.Epoch, []byte(ki.Logical))
		case "snapshot-job":
			re = snapJobKey(ki.Epoch)
		case "fence":
			re = fenceKey(byte(ki.Shard - 1))
		case "shared":
			re = sharedKey(ki.ID)
		case "counter":
			re = counterKey(ki.Counter)
			if ki.Shard > 0 {
				re = counterShardKey(ki.Counter, byte(ki.Shard-1))
			}
		default:
			return
		}
		if !bytes.Equal(re, k) {
			t.Fatalf("re-encoding %x differs from %x", re, k)
		}
	})
}

// checkTypedDecoders runs every typed key decoder of keys.go on k: none
// may panic, and what one accepts re-encodes to k.
func checkTypedDecoders(t *testing.T, k []byte) {
	t.Helper()
	same := func(what string, re []byte) {
		t.Helper()
		if !bytes.Equal(re, k) {
			t.Fatalf("%s: re-encoding %x differs from %x", what, re, k)
		}
	}
	if v, err := decodeSessionKey(k); err == nil {
		same("session", sessionKey(v))
	}
	if v, err := decodePendingKey(k); err == nil {
		same("pending", pendingKey(v))
	}
	if v, err := decodeSharedKey(k); err == nil {
		same("shared", sharedKey(v))
	}
	if v, owner, err := decodeDropKey(k); err == nil {
		same("drop", dropKey(v, owner))
	}
	if v, err := decodeSnapJobKey(k); err == nil {
		same("snapshot job", snapJobKey(v))
	}
	if v, err := decodeOrphanKey(k); err == nil {
		same("orphan", orphanKey(v))
	}
	if ino, sid, err := decodeHoldKey(k); err == nil {
		same("hold", holdKey(ino, sid))
	}
	if sid, kind, err := decodeGrantKey(k); err == nil {
		same("grant", grantKey(sid, kind))
	}
	if sid, start, err := decodeReservedKey(k); err == nil {
		same("reserved", reservedKey(sid, start))
	}
	if sid, dir, err := decodeRecallKey(k); err == nil {
		same("recall", recallKey(sid, dir))
	}
	if ino, kind, sid, owner, err := decodeLockKey(k); err == nil {
		same("lock", lockKey(ino, kind, sid, owner))
	}
	if v, err := decodeBlobKey(k); err == nil {
		same("blob", blobKey(string(v)))
	}
	if epoch, logical, err := decodeChangeKey(k); err == nil {
		same("change", changeKey(epoch, logical))
	}
	if v, err := decodeAttrKey(k); err == nil {
		same("attr", attrKey(v))
	}
	if v, err := decodeSymlinkKey(k); err == nil {
		same("symlink", symlinkKey(v))
	}
	if ino, name, err := decodeDentryKey(k); err == nil {
		same("dentry", dentryKey(ino, string(name)))
	}
	if ino, name, err := decodeXattrKey(k); err == nil {
		same("xattr", xattrKey(ino, string(name)))
	}
	if ino, index, err := decodeChunkKey(k); err == nil {
		same("chunk", chunkKey(ino, index))
	}
	if sid, ok := keySession(k); ok {
		switch ki, err := DecodeKey(k); {
		case err != nil:
			t.Fatalf("keySession accepted %x, DecodeKey: %v", k, err)
		case err == nil && ki.ID != sid:
			t.Fatalf("keySession(%x) = %d, DecodeKey: %+v", k, sid, ki)
		}
	}
	if ino, ok := keyIno(k); ok && !bytes.Equal(u64([]byte{k[0]}, uint64(ino)), k[:9]) {
		t.Fatalf("keyIno(%x) = %d", k, ino)
	}
	if logical, ok := versionLogical(k); ok {
		if l, _, err := splitVersion(k); err != nil || !bytes.Equal(l, logical) {
			t.Fatalf("versionLogical(%x) = %x, splitVersion: %x %v", k, logical, l, err)
		}
	}
	if a := keyAfter(k); len(a) != len(k)+1 || bytes.Compare(a, k) <= 0 {
		t.Fatalf("keyAfter(%x) = %x", k, a)
	}
}

// TestKeyDecodersAllocate nothing on well-formed keys: they sit in the
// loops of lookups, listings and chunk scans.
func TestKeyDecodersAllocate(t *testing.T) {
	hold, lock, dentry, chunk := holdKey(1, 2), lockKey(3, lockPosix, 4, 5), dentryKey(6, "name"), chunkKey(7, 8)
	change, session, logical := changeKey(9, dentry), sessionKey(10), versionKey(dentry, 11)
	var sink uint64
	allocs := testing.AllocsPerRun(100, func() {
		ino, sid, _ := decodeHoldKey(hold)
		_, _, lsid, owner, _ := decodeLockKey(lock)
		parent, name, _ := decodeDentryKey(dentry)
		cino, index, _ := decodeChunkKey(chunk)
		epoch, _, _ := decodeChangeKey(change)
		s, _ := decodeSessionKey(session)
		ks, _ := keySession(lock)
		ki, _ := keyIno(dentry)
		l, _ := versionLogical(logical)
		sink += uint64(ino) + sid + lsid + owner + uint64(parent) + uint64(len(name)) + uint64(cino) +
			uint64(index) + epoch + s + ks + uint64(ki) + uint64(len(l))
	})
	if allocs != 0 {
		t.Errorf("decoders allocate %v times per run", allocs)
	}
	_ = sink
}

func FuzzDecodeLocks(f *testing.F) {
	f.Add(byte(lockPosix), encodeLocks(lockPosix, []Lock{{Type: ReadLock, Start: 1, End: 9, Pid: 4}, {Type: WriteLock, Start: 20, End: LockEOF}}))
	f.Add(byte(lockFlock), encodeLocks(lockFlock, []Lock{{Type: WriteLock, End: LockEOF, Pid: 7}}))
	f.Fuzz(func(t *testing.T, kind byte, b []byte) {
		if kind != lockFlock {
			kind = lockPosix
		}
		ls, err := decodeLocks(kind, b)
		if err != nil {
			return
		}
		if kind == lockFlock && len(ls) != 1 {
			t.Fatalf("flock record decoded to %d locks", len(ls))
		}
		if !bytes.Equal(encodeLocks(kind, ls), b) {
			t.Fatalf("re-encoding differs")
		}
	})
}

// FuzzDecodeSmallRecords covers the decoders of the records not fuzzed
// above: versions' tags, id lists, counters, snapshot records. None may
// panic; what decodes re-encodes to the same bytes where an encoder exists.
func FuzzDecodeSmallRecords(f *testing.F) {
	f.Add([]byte{tagLive, 1, 2})
	f.Add([]byte{tagTombstone})
	f.Add(encodeU64s([]uint64{1, 1 << 40}))
	f.Add([]byte(`{"name":"s","epoch":3}`))
	f.Add([]byte(`{"epoch":0}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		payload, live, err := decodeVersion([]byte("k"), b)
		switch {
		case err != nil:
		case live:
			if !bytes.Equal(append([]byte{tagLive}, payload...), b) {
				t.Fatalf("version %x: payload %x", b, payload)
			}
		case len(b) != 1 || b[0] != tagTombstone:
			t.Fatalf("version %x: decoded as a tombstone", b)
		}
		if vs, err := decodeU64s(b); err == nil && !bytes.Equal(encodeU64s(vs), b) && len(b) != 0 {
			t.Fatalf("u64 list %x: re-encoding differs", b)
		}
		if v, err := decodeU64(b); err == nil && b != nil && !bytes.Equal(u64(nil, v), b) {
			t.Fatalf("u64 %x: re-encoding differs", b)
		}
		if _, err := decodeU32(b); err == nil && len(b) != 4 {
			t.Fatalf("u32 from %d bytes", len(b))
		}
		if s, err := decodeSnapshot([]byte("T"), b); err == nil && s.Epoch == 0 {
			t.Fatalf("snapshot %q decoded with epoch 0", b)
		}
	})
}
