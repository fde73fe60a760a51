#!/usr/bin/env python3
"""Combine `cairn bench --json` reports into the NFS comparison tables (stdlib only).

  nfstable.py NAME=REPORT.json ...   -> prints two markdown tables:
     1. a row per workload, a column per target (MB/s for sequential rows,
        ops/s for metadata rows), and the ratios
        Cairn NFS / Cairn FUSE (sequential rows, target >= 0.8) and
        Cairn NFS / Ganesha (metadata rows, target >= 1.0);
     2. the five figures of every workload on every target.

Names with a special meaning for the ratios: fuse, cairn-nfs, ganesha.
"""
import json
import sys

TITLES = {"fuse": "Cairn FUSE", "cairn-nfs": "Cairn NFS", "cairn-nfs-1": "Cairn NFS, 1 in flight",
          "cairn-nfs-call": "Cairn NFS, 1 call per I/O",
          "ganesha": "Ganesha NFS"}


def fmt(v, spec):
    return "n/a" if v is None else format(v, spec)


def main(args):
    reports = {}
    order = []
    for a in args:
        name, path = a.split("=", 1)
        with open(path) as f:
            reports[name] = {r["workload"]: r for r in json.load(f)["results"]}
        order.append(name)
    workloads = []
    for n in order:
        for w in reports[n]:
            if w not in workloads:
                workloads.append(w)

    def value(n, w):
        r = reports.get(n, {}).get(w)
        if r is None:
            return None
        return r.get("mb_per_sec") if w.startswith("seq-") else r["ops_per_sec"]

    def ratio(a, b, w):
        x, y = value(a, w), value(b, w)
        if a not in reports or b not in reports or x is None or not y:
            return "—"
        return f"{x / y:.2f}"

    head = ["workload", "unit"] + [TITLES.get(n, n) for n in order] + \
        ["NFS/FUSE (seq, ≥ 0.8)", "Cairn NFS/Ganesha (meta, ≥ 1.0)"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * 2 + "---:|" * (len(head) - 2)]
    for w in workloads:
        seq = w.startswith("seq-")
        row = [w, "MB/s" if seq else "ops/s"]
        row += [fmt(value(n, w), ".1f" if seq else ".0f") for n in order]
        row.append(ratio("cairn-nfs", "fuse", w) if seq else "—")
        row.append("—" if seq else ratio("cairn-nfs", "ganesha", w))
        out.append("| " + " | ".join(row) + " |")
    out.append("")
    head = ["workload", "target", "ops/s", "MB/s", "mean µs", "p99 µs", "client µs/op",
            "server µs/op", "meta tx/op", "obj req/op"]
    out += ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * (len(head) - 2)]
    for w in workloads:
        for n in order:
            r = reports[n].get(w)
            if r is None:
                continue
            out.append("| " + " | ".join([
                w, TITLES.get(n, n), f"{r['ops_per_sec']:.0f}", fmt(r.get("mb_per_sec"), ".1f"),
                f"{r['mean_latency_us']:.1f}", f"{r['p99_latency_us']:.1f}",
                f"{r['client_us_per_op']:.1f}", fmt(r.get("server_us_per_op"), ".1f"),
                fmt(r.get("meta_tx_per_op"), ".2f"), fmt(r.get("object_requests_per_op"), ".3f"),
            ]) + " |")
    print("\n".join(out))


if __name__ == "__main__":
    main(sys.argv[1:])
