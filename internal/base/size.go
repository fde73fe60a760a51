package base

import "fmt"

// IBytes formats a byte count for a message, in binary units with one
// decimal: "1023 B", "1.0 KiB", "64.0 MiB".
func IBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
