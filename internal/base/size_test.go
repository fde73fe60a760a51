package base

import "testing"

func TestIBytes(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 64 << 20: "64.0 MiB", 3 << 40: "3.0 TiB", 1<<64 - 1: "16.0 EiB"} {
		if got := IBytes(n); got != want {
			t.Errorf("IBytes(%d) = %q; want %q", n, got, want)
		}
	}
}
