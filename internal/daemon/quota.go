package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/cairnfs/cairn/internal/base"
	"github.com/cairnfs/cairn/internal/meta"
)

// quotaRequest runs the quota verbs: quota-set (Args: path; Flags: bytes,
// inodes, each a count or "unlimited", absent: unchanged), quota-get
// (path), quota-list, quota-delete (path) and quota-check (Flags: repair).
func quotaRequest(ctx context.Context, v *Volume, req Request, w io.Writer) error {
	asJSON := req.Flags["json"] == "true"
	dir := func() (base.Ino, string, error) {
		if len(req.Args) != 1 {
			return 0, "", fmt.Errorf("%s: want one path in the volume", req.Verb)
		}
		p := req.Args[0]
		if len(p) == 0 || p[0] != '/' {
			return 0, "", fmt.Errorf("%s: %q: want an absolute path in the volume (e.g. /projects/a)", req.Verb, p)
		}
		ino, a, err := v.Meta.ResolvePath(ctx, base.RootCaller, nil, p)
		if err != nil {
			return 0, "", fmt.Errorf("%s: %s: %w", req.Verb, p, err)
		}
		if a.Type != base.TypeDir {
			return 0, "", fmt.Errorf("%s: %s: quotas are set on directories: %w", req.Verb, p, base.ErrNotDir)
		}
		return ino, p, nil
	}
	switch req.Verb {
	case "quota-set":
		ino, p, err := dir()
		if err != nil {
			return err
		}
		var lim meta.QuotaLimits
		if old, err := v.Meta.GetQuota(ctx, ino); err == nil {
			lim = old.Limits
		} else if !errors.Is(err, base.ErrNotFound) {
			return err
		}
		for _, k := range []string{"bytes", "inodes"} {
			val, ok := req.Flags[k]
			if !ok {
				continue
			}
			n := uint64(0)
			if val != "unlimited" {
				if n, err = strconv.ParseUint(val, 10, 64); err != nil || n == 0 {
					return fmt.Errorf("quota set: %s %q: want a positive number or unlimited: %w", k, val, base.ErrInvalid)
				}
			}
			if k == "bytes" {
				lim.Bytes = n
			} else {
				lim.Inodes = n
			}
		}
		q, err := v.Meta.SetQuota(ctx, ino, lim, nil)
		if err != nil {
			return fmt.Errorf("quota set: %s: %w", p, err)
		}
		q.Path = p
		return printQuotas(w, []meta.Quota{q}, asJSON)
	case "quota-get":
		ino, p, err := dir()
		if err != nil {
			return err
		}
		q, err := v.Meta.GetQuota(ctx, ino)
		if err != nil {
			return fmt.Errorf("quota get: %s: %w", p, err)
		}
		q.Path = p
		return printQuotas(w, []meta.Quota{q}, asJSON)
	case "quota-list":
		qs, err := v.Meta.Quotas(ctx)
		if err != nil {
			return err
		}
		inos := make([]base.Ino, len(qs))
		for i, q := range qs {
			inos[i] = q.Dir
		}
		paths, err := v.Meta.Paths(ctx, inos)
		if err != nil {
			return err
		}
		for i := range qs {
			qs[i].Path = paths[qs[i].Dir]
		}
		return printQuotas(w, qs, asJSON)
	case "quota-delete":
		ino, p, err := dir()
		if err != nil {
			return err
		}
		if err := v.Meta.DeleteQuota(ctx, ino, nil); err != nil {
			return fmt.Errorf("quota delete: %s: %w", p, err)
		}
		if asJSON {
			return writeJSON(w, map[string]string{"deleted": p}, nil)
		}
		fmt.Fprintf(w, "deleted the quota on %s\n", p)
		return nil
	case "quota-check":
		repair := req.Flags["repair"] == "true"
		probs, err := v.Meta.CheckQuotas(ctx, repair)
		if err != nil {
			return err
		}
		if asJSON {
			var perr error
			if len(probs) > 0 && !repair {
				perr = ErrProblems
			}
			return writeJSON(w, map[string]any{"problems": probs, "repaired": repair && len(probs) > 0}, perr)
		}
		for _, p := range probs {
			fmt.Fprintf(w, "%s: inode %d %s: %s\n", p.Kind, p.Ino, orDash(p.Path), p.Detail)
		}
		switch {
		case len(probs) == 0:
			fmt.Fprintln(w, "quotas: no problems")
		case repair:
			fmt.Fprintf(w, "quotas: %d problems repaired\n", len(probs))
		default:
			fmt.Fprintf(w, "quotas: %d problems (quota check --repair fixes them)\n", len(probs))
			return ErrProblems
		}
		return nil
	}
	return fmt.Errorf("unknown admin verb %q", req.Verb)
}

func printQuotas(w io.Writer, qs []meta.Quota, asJSON bool) error {
	if asJSON {
		if qs == nil {
			qs = []meta.Quota{}
		}
		return writeJSON(w, qs, nil)
	}
	if len(qs) == 0 {
		fmt.Fprintln(w, "no quotas")
		return nil
	}
	limit := func(used, lim uint64, f func(uint64) string) string {
		if lim == 0 {
			return f(used) + " (no limit)"
		}
		return fmt.Sprintf("%s of %s (%.0f%%)", f(used), f(lim), 100*float64(used)/float64(lim))
	}
	count := func(n uint64) string { return strconv.FormatUint(n, 10) }
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PATH\tBYTES\tINODES\tSTATE")
	for _, q := range qs {
		state := "active"
		if q.State != "" {
			state = q.State + " (interrupted: run quota " + map[string]string{"counting": "set", "deleting": "delete"}[q.State] + " again)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", orDash(q.Path), limit(q.UsedBytes, q.Limits.Bytes, base.IBytes),
			limit(q.UsedInodes, q.Limits.Inodes, count), state)
	}
	return tw.Flush()
}
