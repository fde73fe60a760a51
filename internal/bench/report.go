package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// TableHeader is the header row of WriteTable, in order.
var TableHeader = []string{"workload", "ops", "ops/s", "MB/s", "mean µs", "p99 µs",
	"client µs/op", "server µs/op", "meta tx/op", "obj req/op"}

// Row formats f as the cells of a table row, "n/a" for what was not
// measured.
func Row(f Figures) []string {
	return []string{
		f.Workload,
		fmt.Sprint(f.Ops),
		fmt.Sprintf("%.0f", f.OpsPerSec),
		optional(f.MBPerSec, "%.1f", "—"),
		fmt.Sprintf("%.1f", f.MeanLatencyUs),
		fmt.Sprintf("%.1f", f.P99LatencyUs),
		fmt.Sprintf("%.1f", f.ClientUsPerOp),
		optional(f.ServerUsPerOp, "%.1f", "n/a"),
		optional(f.MetaTxPerOp, "%.2f", "n/a"),
		optional(f.ObjReqPerOp, "%.3f", "n/a"),
	}
}

func optional(v *float64, format, none string) string {
	if v == nil {
		return none
	}
	return fmt.Sprintf(format, *v)
}

// WriteTable writes the report as a markdown table, after a line naming
// the target and the sizes.
func WriteTable(w io.Writer, r *Report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "target: %s; file %d MiB, %d files, %d workers", r.Target, r.FileSize>>20, r.Files, r.Procs)
	if r.ServerPID != 0 {
		fmt.Fprintf(&b, "; server pid %d", r.ServerPID)
	}
	if r.Metrics != "" {
		fmt.Fprintf(&b, "; metrics %s", r.Metrics)
	}
	b.WriteString("\n\n")
	writeRow(&b, TableHeader)
	sep := make([]string, len(TableHeader))
	for i := range sep {
		sep[i] = "---"
		if i > 0 {
			sep[i] = "---:"
		}
	}
	writeRow(&b, sep)
	for _, f := range r.Results {
		writeRow(&b, Row(f))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeRow(b *strings.Builder, cells []string) {
	b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
}

// WriteJSON writes the report as indented JSON.
func WriteJSON(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
