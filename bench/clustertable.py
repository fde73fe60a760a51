#!/usr/bin/env python3
"""Tables of bench/cluster.sh: aggregate throughput and scaling efficiency.

    bench/clustertable.py DIR        # DIR holds points.tsv and the clients' JSON

points.tsv has one line per phase of a point: run, mode, clients, phase,
CPU busy % of the machine during the phase, and the JSON files of the
clients (`cairn bench --json`), comma separated. For every workload of a
phase it computes, per run:

- aggregate: the bytes (or operations) of all clients over the span from
  the first client's start to the last client's end (the runs begin
  together: cairn bench --start-at);
- sum of rates: each client's own rate, added up (a client that ends
  early does not wait for the others).

The tables show the aggregate for the workloads that begin together
(append, seq-write, create) and the sum of rates for the ones that follow
another in the same run (seq-read, stat), whose clients begin when their
own previous workload ends;

then the median over runs, and the efficiency at N clients =
aggregate(N) / (N x aggregate(1)) of the same mode.
"""
import collections
import json
import os
import statistics
import sys

# workloads that follow another in the same cairn bench run: their
# clients do not begin together, so their figure is the sum of rates
FOLLOWERS = ("seq-read", "stat")
# ... unless their phase runs them alone, beginning together
ALONE = ("seqr",)

MODES = ["direct", "gateway", "gateway-each"]
MODE_NAMES = {
    "direct": "direct (Cairn client per host)",
    "gateway": "one NFS gateway",
    "gateway-each": "NFS gateway per host",
}


def load(d):
    # (workload, mode, n) -> run -> (aggregate, sum of rates, unit)
    points = collections.defaultdict(dict)
    cpu = collections.defaultdict(list)  # (phase, mode, n) -> CPU busy %
    errors = []
    with open(os.path.join(d, "points.tsv")) as f:
        for line in f:
            run, mode, n, phase, busy, files = line.rstrip("\n").split("\t")
            n = int(n)
            cpu[(phase, mode, n)].append(float(busy))
            per = collections.defaultdict(list)
            for name in files.split(","):
                try:
                    with open(os.path.join(d, name)) as jf:
                        rep = json.load(jf)
                except (OSError, ValueError) as e:
                    errors.append(f"{name}: {e}")
                    continue
                for r in rep.get("results") or []:
                    per[r["workload"]].append(r)
            for w, rs in per.items():
                if phase.startswith("meta"):
                    w = f"{w} ({'one shared directory' if phase == 'meta-shared' else 'a directory per client'})"
                if len(rs) != n:
                    errors.append(f"run {run} {mode} n={n} {w}: {len(rs)} of {n} clients reported")
                    continue
                span = max(r["end"] for r in rs) - min(r["start"] for r in rs)
                if rs[0].get("bytes"):
                    total, unit = sum(r["bytes"] for r in rs) / 1e6, "MB/s"
                    rates = sum(r.get("mb_per_sec") or 0 for r in rs)
                else:
                    total, unit = sum(r["ops"] for r in rs), "ops/s"
                    rates = sum(r["ops_per_sec"] for r in rs)
                agg = total / span if span > 0 else 0
                if phase in ALONE:
                    w += ", clients together"
                elif w.startswith(FOLLOWERS):
                    agg = rates
                points[(w, mode, n)][int(run)] = (agg, rates, unit)
    return points, cpu, errors


def fmt(x):
    if x is None:
        return ""
    if x >= 100:
        return f"{x:,.0f}"
    return f"{x:.2f}" if x < 10 else f"{x:.1f}"


def own_table(own, ns, modes, cell):
    """A table of phase × mode rows and one column per N, cell(v) for the
    runs v of each point that has any."""
    print("| phase | mode | " + " | ".join(f"N={n}" for n in ns) + " |")
    print("|---|---|" + "---:|" * len(ns))
    for phase in sorted({p for (p, _, _) in own}):
        for m in modes:
            cells = [cell(own[(phase, m, n)]) if own.get((phase, m, n)) else "" for n in ns]
            if any(cells):
                print(f"| {phase} | {m} | " + " | ".join(cells) + " |")


def main():
    d = sys.argv[1]
    points, cpu, errors = load(d)
    workloads = sorted({w for (w, _, _) in points})
    own = collections.defaultdict(list)
    path = os.path.join(d, "cpu.tsv")
    if os.path.exists(path):
        for line in open(path):
            f = line.split()
            run, mode, n, phase, mine, srv, secs = f[:7]
            tx = float(f[7]) if len(f) > 7 else 0
            own[(phase, mode, int(n))].append((float(mine), float(srv), float(secs), tx))
    ns = sorted({n for (_, _, n) in points} | {n for (_, _, n) in own})
    modes = [m for m in MODES if any(k[1] == m for k in list(points) + list(own))]
    med = {}
    for k, runs in points.items():
        med[k] = (statistics.median(v[0] for v in runs.values()),
                  statistics.median(v[1] for v in runs.values()),
                  next(iter(runs.values()))[2], [runs[r][0] for r in sorted(runs)])
    for w in workloads:
        unit = next(v[2] for k, v in med.items() if k[0] == w)
        how = "sum of the clients' rates" if w.startswith(FOLLOWERS) and "together" not in w else "aggregate"
        print(f"### {w}: {how}, {unit} (efficiency = figure / (N x 1 client))\n")
        head = "| N |"
        rule = "|---:|"
        for m in modes:
            head += f" {MODE_NAMES[m]} | eff. | each run |"
            rule += "---:|---:|---|"
        if "direct" in modes and "gateway" in modes:
            head += " direct / one gateway |"
            rule += "---:|"
        print(head)
        print(rule)
        for n in ns:
            row = f"| {n} |"
            for m in modes:
                v = med.get((w, m, n))
                one = med.get((w, m, 1))
                if v is None:
                    row += " | | |"
                    continue
                eff = v[0] / (n * one[0]) if one and one[0] else None
                row += f" {fmt(v[0])} | {'' if eff is None else f'{eff:.1%}'} | {' / '.join(fmt(x) for x in v[3])} |"
            if "direct" in modes and "gateway" in modes:
                a, b = med.get((w, "direct", n)), med.get((w, "gateway", n))
                row += f" {a[0] / b[0]:.2f} |" if a and b and b[0] else " |"
            print(row)
        print()
        if w.startswith(FOLLOWERS) and "together" not in w:
            continue
        print(f"Sum of each client's own rate ({unit}, medians):", "; ".join(
            f"{MODE_NAMES[m]}: " + ", ".join(f"N={n} {fmt(med[(w, m, n)][1])}" for n in ns if (w, m, n) in med)
            for m in modes))
        print()
    print("Machine CPU busy during each phase, all processes (other users' too), % of both cores, each run:\n")
    print("| phase | mode | " + " | ".join(f"N={n}" for n in ns) + " |")
    print("|---|---|" + "---:|" * len(ns))
    for phase in sorted({p for (p, _, _) in cpu}):
        for m in modes:
            cells = [" / ".join(f"{x:.0f}" for x in cpu.get((phase, m, n), [])) for n in ns]
            if any(cells):
                print(f"| {phase} | {m} | " + " | ".join(cells) + " |")
    if own:
        print("\nCPU of this run's processes during each phase: the mounts or gateways, and PostgreSQL with versitygw,"
              " as % of one core over the phase (medians; 200% = the machine):\n")
        def own_cpu(v):
            a = statistics.median(x[0] / max(x[2], 1) * 100 for x in v)
            b = statistics.median(x[1] / max(x[2], 1) * 100 for x in v)
            return f"{a:.0f} + {b:.0f}"

        own_table(own, ns, modes, own_cpu)
        print("\nPostgreSQL commits a second in the point's database during each phase (medians; background"
              " work of the mounts or gateways included):\n")
        own_table(own, ns, modes, lambda v: f"{statistics.median(x[3] / max(x[2], 1) for x in v):.1f}")
    leases = collections.defaultdict(list)
    path = os.path.join(d, "leases.tsv")
    if os.path.exists(path):
        for line in open(path):
            run, mode, n, phase, acq, rel, rec, secs = line.split()
            if mode == "direct":
                leases[(phase, int(n))].append((int(acq), int(rel), int(rec), float(secs)))
    if any(v[0][0] or v[0][2] for v in leases.values()):
        print("\nDirectory leases of the direct mounts during each phase, all mounts together"
              " (taken / given back / recalls sent, and recalls a second; first run):\n")
        print("| phase | " + " | ".join(f"N={n}" for n in ns) + " |")
        print("|---|" + "---:|" * len(ns))
        for phase in sorted({p for (p, _) in leases}):
            cells = []
            for n in ns:
                v = leases.get((phase, n))
                cells.append(f"{v[0][0]} / {v[0][1]} / {v[0][2]}, {v[0][2] / max(v[0][3], 1):.0f}/s" if v else "")
            print(f"| {phase} | " + " | ".join(cells) + " |")
    if errors:
        print("\nErrors:")
        for e in errors:
            print("-", e)


if __name__ == "__main__":
    main()
