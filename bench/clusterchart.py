#!/usr/bin/env python3
"""Chart of bench/cluster.sh results: scaling with clients.

  clusterchart.py OUT.svg WORKLOAD LABEL=DIR [LABEL=DIR ...]

For one workload (e.g. append-1M) of one or more result directories
(clustertable.py reads them the same way), two panels against the number
of clients N: the aggregate (MB/s or ops/s; each run a dot, the median a
line, and the ideal N x 1 client dotted) and the efficiency (aggregate /
(N x the 1-client aggregate), each run a dot, the medians a line, issue
37's 95% target dashed). One line per mode and directory (the first
solid with filled dots, the others dashed with rings); LABEL names the
directory in the legend (for example the size each client wrote).
"""
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clustertable  # noqa: E402  (the same points as the tables)

COLORS = {"direct": "#3b6ea8", "gateway": "#888888", "gateway-each": "#d9822b"}
DASHES = ["", "6,3", "2,3"]  # one per directory


def series(d, workload):
    """mode -> n -> list of run aggregates, and the unit."""
    points, _, _ = clustertable.load(d)
    out, unit = {}, ""
    for (w, mode, n), runs in points.items():
        if w != workload:
            continue
        out.setdefault(mode, {})[n] = [runs[r][0] for r in sorted(runs)]
        unit = next(iter(runs.values()))[2]
    return out, unit


def main():
    out, workload, specs = sys.argv[1], sys.argv[2], sys.argv[3:]
    if not specs:
        sys.exit(__doc__)
    data = []
    unit = ""
    for spec in specs:
        label, _, d = spec.partition("=")
        s, u = series(d, workload)
        if not s:
            sys.exit(f"{d}: no {workload} results")
        unit = unit or u
        data.append((label, s))
    ns = sorted({n for _, s in data for m in s for n in s[m]})
    W, H, top, left, pw, ph, gap = 900, 420, 50, 70, 340, 280, 110
    xs = lambda n, x0: x0 + pw * (math.log2(n) / max(math.log2(ns[-1]), 1))
    amax = max(v for _, s in data for m in s for n in s[m] for v in s[m][n])
    ones = [statistics.median(s[m][1]) for _, s in data for m in s if 1 in s[m]]
    amax = max(amax, ns[-1] * max(ones, default=0)) * 1.08
    ya = lambda v: top + ph - ph * v / amax
    elo = 75.0
    ye = lambda e: top + ph - ph * (min(max(e, elo), 102) - elo) / (102 - elo)
    b = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="11">',
         '<rect width="100%" height="100%" fill="white"/>',
         f'<text x="{left}" y="20" font-size="13" font-weight="bold">{workload}: scaling with clients (bench/cluster.sh)</text>']
    x1, x2 = left, left + pw + gap
    b.append(f'<text x="{x1}" y="{top - 10}" font-size="12">aggregate, {unit}; dotted: N × 1 client</text>')
    b.append(f'<text x="{x2}" y="{top - 10}" font-size="12">efficiency = aggregate / (N × 1 client); dashed: 95% target</text>')
    for x0 in (x1, x2):
        b.append(f'<line x1="{x0}" x2="{x0 + pw}" y1="{top + ph}" y2="{top + ph}" stroke="#444"/>')
        for n in ns:
            b.append(f'<line x1="{xs(n, x0):.1f}" x2="{xs(n, x0):.1f}" y1="{top}" y2="{top + ph}" stroke="#eee"/>')
            b.append(f'<text x="{xs(n, x0):.1f}" y="{top + ph + 14}" text-anchor="middle">{n}</text>')
        b.append(f'<text x="{x0 + pw / 2}" y="{top + ph + 30}" text-anchor="middle">clients (N)</text>')
    step = 10 ** math.floor(math.log10(amax / 4))
    step *= 2 if amax / step > 8 else 1
    v = 0.0
    while v <= amax:
        b.append(f'<line x1="{x1}" x2="{x1 + pw}" y1="{ya(v):.1f}" y2="{ya(v):.1f}" stroke="#eee"/>')
        b.append(f'<text x="{x1 - 6}" y="{ya(v) + 4:.1f}" text-anchor="end">{v:g}</text>')
        v += step
    for e in range(75, 101, 5):
        b.append(f'<line x1="{x2}" x2="{x2 + pw}" y1="{ye(e):.1f}" y2="{ye(e):.1f}" stroke="#eee"/>')
        b.append(f'<text x="{x2 - 6}" y="{ye(e) + 4:.1f}" text-anchor="end">{e}%</text>')
    b.append(f'<line x1="{x2}" x2="{x2 + pw}" y1="{ye(95):.1f}" y2="{ye(95):.1f}" stroke="#c00" stroke-dasharray="5,4"/>')
    legend = []
    for di, (label, s) in enumerate(data):
        dash = DASHES[di % len(DASHES)]
        for mode in clustertable.MODES:
            if mode not in s or 1 not in s[mode]:
                continue
            pts = s[mode]
            one = statistics.median(pts[1])
            color = COLORS[mode]
            dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
            if di == 0 or mode == "direct":
                ideal = " ".join(f"{xs(n, x1):.1f},{ya(n * one):.1f}" for n in ns)
                b.append(f'<polyline points="{ideal}" fill="none" stroke="{color}" stroke-opacity="0.4" stroke-dasharray="1,3"/>')
            agg = " ".join(f"{xs(n, x1):.1f},{ya(statistics.median(pts[n])):.1f}" for n in sorted(pts))
            eff = " ".join(f"{xs(n, x2):.1f},{ye(100 * statistics.median(pts[n]) / (n * one)):.1f}" for n in sorted(pts))
            b.append(f'<polyline points="{agg}" fill="none" stroke="{color}" stroke-width="2"{dash_attr}/>')
            b.append(f'<polyline points="{eff}" fill="none" stroke="{color}" stroke-width="2"{dash_attr}/>')
            # the first directory's runs filled dots, the others' rings
            dot = f'fill="{color}"' if di == 0 else f'fill="white" stroke="{color}"'
            for n in sorted(pts):
                for v in pts[n]:
                    e = 100 * v / (n * one)
                    b.append(f'<circle cx="{xs(n, x1):.1f}" cy="{ya(v):.1f}" r="2.5" {dot}><title>{label} {mode} N={n}: {v:.2f} {unit}</title></circle>')
                    b.append(f'<circle cx="{xs(n, x2):.1f}" cy="{ye(e):.1f}" r="2.5" {dot}><title>{label} {mode} N={n}: {e:.1f}%</title></circle>')
            legend.append((f"{clustertable.MODE_NAMES[mode]}{', ' + label if label else ''}", color, dash))
    for i, (name, color, dash) in enumerate(legend):
        x, y = left + (i % 2) * 420, H - 42 + (i // 2) * 16
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        b.append(f'<line x1="{x}" x2="{x + 26}" y1="{y - 4}" y2="{y - 4}" stroke="{color}" stroke-width="2"{dash_attr}/>')
        b.append(f'<text x="{x + 32}" y="{y}">{name}</text>')
    b.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(b) + "\n")


if __name__ == "__main__":
    main()
