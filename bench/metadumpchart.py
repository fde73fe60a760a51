#!/usr/bin/env python3
"""Chart of bench/metadump.sh tables: files/s of load, dump and find.

  metadumpchart.py OUT.svg TABLE.md [TABLE.md ...]

Three panels (load, dump, find), a group of bars per volume (files, file
size) and a bar per engine, on a log scale, with the issue's targets drawn
as dashed lines (load: 150k/s on Pebble, 50k/s on PostgreSQL; dump: 300k/s;
find: 1M entries/s).
"""
import math
import sys

ENGINES = ["pebble-disk", "pebble-tmpfs", "postgres"]
COLORS = {"pebble-disk": "#3b6ea8", "pebble-tmpfs": "#7fb2e5", "postgres": "#d9822b"}
STEPS = [("load", 4, [(150e3, "Pebble"), (50e3, "PostgreSQL")]),
         ("dump", 7, [(300e3, "target")]),
         ("find", 11, [(1e6, "target")])]


def rows(paths):
    out = {}
    for p in paths:
        for line in open(p):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) < 13 or not cells[0].isdigit():
                continue
            out[(int(cells[0]), int(cells[1]), cells[2])] = cells
    return out


def label(n, size):
    files = f"{n // 1_000_000}M" if n >= 1_000_000 else f"{n // 1000}k"
    return f"{files} {'empty' if size == 0 else f'{size} B'}"


def main():
    out, paths = sys.argv[1], sys.argv[2:]
    data = rows(paths)
    vols = sorted({(n, s) for n, s, _ in data}, key=lambda v: (v[1], v[0]))
    W, H, top, left, panel_h, gap = 860, 800, 40, 70, 200, 60
    lo, hi = 1e4, 3e7
    y = lambda v: top + panel_h - panel_h * (math.log10(max(v, lo)) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))
    body = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="11">',
            '<rect width="100%" height="100%" fill="white"/>']
    gw = (W - left - 20) / max(len(vols), 1)
    bw = gw * 0.8 / len(ENGINES)
    for pi, (step, col, targets) in enumerate(STEPS):
        off = pi * (panel_h + gap)
        yy = lambda v: y(v) + off
        tnames = ", ".join(f"{v:,.0f} ({name})" if name != "target" else f"{v:,.0f}" for v, name in targets)
        body.append(f'<text x="{left}" y="{top + off - 8}" font-size="13"><tspan font-weight="bold">{step}</tspan> files/s, log scale; dashed: target {tnames}</text>')
        for e in range(4, 8):
            v = 10 ** e
            body.append(f'<line x1="{left}" x2="{W - 20}" y1="{yy(v):.1f}" y2="{yy(v):.1f}" stroke="#ddd"/>')
            body.append(f'<text x="{left - 6}" y="{yy(v) + 4:.1f}" text-anchor="end">{v:,.0f}</text>')
        for v, name in targets:
            body.append(f'<line x1="{left}" x2="{W - 20}" y1="{yy(v):.1f}" y2="{yy(v):.1f}" stroke="#c00" stroke-dasharray="5,4"/>')
        for vi, (n, s) in enumerate(vols):
            x0 = left + vi * gw + gw * 0.1
            for ei, eng in enumerate(ENGINES):
                r = data.get((n, s, eng))
                if not r or not r[col].replace(".", "").isdigit():
                    continue
                v = float(r[col])
                x = x0 + ei * bw
                body.append(f'<rect x="{x:.1f}" y="{yy(v):.1f}" width="{bw - 2:.1f}" height="{top + off + panel_h - yy(v):.1f}" fill="{COLORS[eng]}"><title>{eng}: {v:,.0f}/s</title></rect>')
            body.append(f'<text x="{x0 + gw * 0.4:.1f}" y="{top + off + panel_h + 14}" text-anchor="middle">{label(n, s)}</text>')
    for ei, eng in enumerate(ENGINES):
        body.append(f'<rect x="{left + ei * 150}" y="{H - 18}" width="12" height="12" fill="{COLORS[eng]}"/>')
        body.append(f'<text x="{left + ei * 150 + 16}" y="{H - 8}">{eng}</text>')
    body.append("</svg>")
    open(out, "w").write("\n".join(body) + "\n")


if __name__ == "__main__":
    main()
