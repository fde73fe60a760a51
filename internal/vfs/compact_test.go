package vfs

import (
	"testing"

	"github.com/cairnfs/cairn/internal/base"
)

// TestPickWindow: a window is rewritten when its rewrite writes few enough
// bytes per slice it removes; sparse windows wait until the chunk holds
// too many slices, and then the fullest goes first.
func TestPickWindow(t *testing.T) {
	const win = 1 << 20
	var ss []base.Slice
	id := uint64(1)
	add := func(pos, n uint32) {
		ss = append(ss, base.Slice{Pos: pos, ID: id, Size: n, Len: n})
		id++
	}
	// Window 0: three 8 KiB writes spread over 1 MiB (share 3/128).
	add(0, 8192)
	add(500_000, 8192)
	add(win-8192, 8192)
	// Window 1: two 8 KiB writes over 32 KiB (share 1/2).
	add(win+4096, 8192)
	add(win+32768, 8192)

	drop, lo, hi, some := pickWindow(ss, win, false)
	if drop == nil || !drop[3] || !drop[4] || drop[0] || lo != win+4096 || hi != win+40960 || !some {
		t.Fatalf("dense window not picked: drop=%v [%d,%d) some=%v", drop, lo, hi, some)
	}
	drop, _, _, some = pickWindow(ss[:3], win, false)
	if drop != nil || !some {
		t.Fatalf("sparse window picked without force (amplification %d): drop=%v some=%v", win/(3*8192), drop, some)
	}
	drop, lo, hi, _ = pickWindow(ss, win, true)
	if drop == nil || !drop[0] || !drop[1] || !drop[2] || drop[3] || lo != 0 || hi != win {
		t.Fatalf("forced: the fullest window not picked: drop=%v [%d,%d)", drop, lo, hi)
	}
	// Window 2 holds what an earlier rewrite made (all of it) and two new
	// 8 KiB writes: rewriting 1 MiB to remove two slices waits, though
	// the slices' bytes are more than the range they span.
	add(2*win, win)
	add(2*win+8192, 8192)
	add(2*win+500_000, 8192)
	drop, lo, hi, _ = pickWindow(ss, win, false)
	if drop == nil || drop[5] || lo != win+4096 || hi != win+40960 {
		t.Fatalf("window 2 picked, or window 1 not: drop=%v [%d,%d)", drop, lo, hi)
	}
	drop, _, _, _ = pickWindow(ss[5:], win, false)
	if drop != nil {
		t.Fatalf("a rewritten window with two new slices picked: drop=%v", drop)
	}
	// More new writes there: 16 slices over 1 MiB, 64 KiB a removed slice.
	for i := uint32(2); i < 16; i++ {
		add(2*win+i*60_000, 8192)
	}
	drop, lo, hi, _ = pickWindow(ss[5:], win, false)
	if drop == nil || !drop[0] || lo != 2*win || hi != 3*win {
		t.Fatalf("a rewritten window with 15 new slices not picked: drop=%v [%d,%d)", drop, lo, hi)
	}
	// Slices crossing window boundaries: none to pick.
	drop, _, _, some = pickWindow([]base.Slice{{Pos: win - 10, ID: 9, Size: 20, Len: 20}, {Pos: 2*win - 10, ID: 10, Size: 20, Len: 20}}, win, true)
	if drop != nil || some {
		t.Fatalf("crossing slices: drop=%v some=%v", drop, some)
	}
}
