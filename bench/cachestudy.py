#!/usr/bin/env python3
"""Tables and chart of bench/cache-study.sh (Python 3 stdlib only).

  cachestudy.py line DIR JSONLINE   -> one summary line for the log
  cachestudy.py table DIR           -> markdown tables of every point
  cachestudy.py svg DIR             -> SVG: IOPS and read p99 vs outstanding I/Os

DIR holds points.jsonl (one JSON object per point: set, ws, mix, jobs,
seconds, cairn_cpu_ticks and the names of its fio JSON and of the mount's
/stats JSON before and after) and those files.
"""
import json
import math
import os
import sys

COLORS = {"memory": "#1b9e77", "disk": "#d95f02", "neither": "#7570b3"}
SET_LABEL = {
    "memory": "fits the memory tier",
    "disk": "fits the disk tier only",
    "neither": "fits neither",
}
MIX_LABEL = {"rw": "8K random, 67% read / 33% write", "read": "8K random read (control)"}


def load(d, name):
    with open(os.path.join(d, name)) as f:
        text = f.read()
    return json.loads(text[text.index("{"):])  # fio may print warnings first


def measure(d, pt):
    """The figures of one point, from its fio output and /stats deltas."""
    job = load(d, pt["fio"])["jobs"][0]
    a, b = load(d, pt["before"]), load(d, pt["after"])
    r, w = job["read"], job["write"]

    def lat(x, key):
        if not x["total_ios"]:
            return None
        if key == "mean":
            return x["lat_ns"]["mean"] / 1e6
        return x["lat_ns"]["percentile"]["99.000000"] / 1e6

    def delta(path):
        x, y = b, a
        for k in path:
            x, y = x.get(k, {}), y.get(k, {})
        return (x or 0) - (y or 0)

    ios = r["total_ios"] + w["total_ios"]
    mh, mm = delta(["chunk", "read_memory_hits"]), delta(["chunk", "read_memory_misses"])
    dh, dm = delta(["chunk", "read_disk_hits"]), delta(["chunk", "read_disk_misses"])
    obj = {k: b["object"][k]["requests"] - a["object"][k]["requests"] for k in b["object"]}
    gets = obj.get("get", 0) + obj.get("range_get", 0)
    lat_n = sum(b["object"][k]["latency"]["count"] - a["object"][k]["latency"]["count"] for k in b["object"])
    lat_s = sum(b["object"][k]["latency"]["sum_ns"] - a["object"][k]["latency"]["sum_ns"] for k in b["object"])
    looked = mh + mm
    return {
        "set": pt["set"], "ws": pt["ws"], "mix": pt["mix"], "jobs": pt["jobs"],
        "iops": r["iops"] + w["iops"],
        "r_mean": lat(r, "mean"), "r_p99": lat(r, "p99"),
        "w_mean": lat(w, "mean"), "w_p99": lat(w, "p99"),
        # of the blocks reads touched: served by memory, by disk (of all
        # reads, not of memory misses), by the object store
        "mem_hit": mh / looked if looked else None,
        "disk_hit": dh / (dh + dm) if dh + dm else None,
        "from_mem": mh / looked if looked else None,
        "from_disk": dh / looked if looked else None,
        "from_obj": dm / looked if looked else None,
        "gets_per_io": gets / ios if ios else 0,
        "puts_per_io": obj.get("put", 0) / ios if ios else 0,
        "deletes_per_io": obj.get("delete", 0) / ios if ios else 0,
        "fills": delta(["chunk", "disk_fills"]),
        "obj_lat": lat_s / lat_n / 1e6 if lat_n else None,
        "cpu": pt["cairn_cpu_ticks"] / os.sysconf("SC_CLK_TCK") / pt["seconds"] * 100,
    }


def points(d):
    with open(os.path.join(d, "points.jsonl")) as f:
        return [measure(d, json.loads(line)) for line in f if line.strip()]


def fmt(v, spec, none="—"):
    return none if v is None else format(v, spec)


def pct(v):
    return "—" if v is None else f"{100 * v:.1f}"


def line(d, raw):
    m = measure(d, json.loads(raw))
    print(f"   {m['set']:8} {m['mix']:4} {m['jobs']:2} jobs: {m['iops']:8.0f} IOPS, "
          f"read mean {fmt(m['r_mean'], '.2f')} p99 {fmt(m['r_p99'], '.2f')} ms, "
          f"write mean {fmt(m['w_mean'], '.2f')} p99 {fmt(m['w_p99'], '.2f')} ms, "
          f"memory {pct(m['mem_hit'])}% disk {pct(m['disk_hit'])}%, "
          f"obj gets/IO {m['gets_per_io']:.3f} puts/IO {m['puts_per_io']:.3f}, fills {m['fills']}, "
          f"cairn CPU {m['cpu']:.0f}%")


def table(d):
    pts = points(d)
    for mix in ("rw", "read"):
        rows = [p for p in pts if p["mix"] == mix]
        if not rows:
            continue
        print(f"### {MIX_LABEL[mix]}")
        print()
        print("| working set | outstanding I/Os | IOPS | read mean ms | read p99 ms | write mean ms | write p99 ms "
              "| memory hit % | disk hit % (of memory misses) | reads from object store % "
              "| object GETs / I/O | object PUTs / I/O | disk fills | cairn CPU % |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for p in rows:
            print(f"| {p['set']} ({p['ws']}) | {p['jobs']} | {p['iops']:,.0f} | {fmt(p['r_mean'], '.2f')} "
                  f"| {fmt(p['r_p99'], '.2f')} | {fmt(p['w_mean'], '.2f')} | {fmt(p['w_p99'], '.2f')} "
                  f"| {pct(p['mem_hit'])} | {pct(p['disk_hit'])} | {pct(p['from_obj'])} "
                  f"| {p['gets_per_io']:.3f} | {p['puts_per_io']:.3f} | {p['fills']} | {p['cpu']:.0f} |")
        print()
    lats = [p["obj_lat"] for p in pts if p["obj_lat"] is not None]
    if lats:
        print(f"Mean object request latency over the points: {min(lats):.1f}–{max(lats):.1f} ms.")


# --- SVG --------------------------------------------------------------------

def esc(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def log_ticks(lo, hi):
    """1-2-5 ticks covering [lo, hi]."""
    out = []
    e = math.floor(math.log10(lo))
    while 10 ** e <= hi * 10:
        for m in (1, 2, 5):
            v = m * 10 ** e
            if lo <= v <= hi:
                out.append(v)
        e += 1
    return out


def tick_label(v):
    if v >= 1000:
        return f"{v / 1000:g}k"
    return f"{v:g}"


def panel(x0, y0, w, h, title, ylabel, series, jobs):
    """series: list of (color, dashed, [(jobs, value)])."""
    vals = [v for _, _, pts in series for _, v in pts if v and v > 0]
    if not vals:
        return []
    lo = 10 ** math.floor(math.log10(min(vals)))
    hi = 10 ** math.ceil(math.log10(max(vals)))
    xs = {j: x0 + (math.log2(j) - math.log2(jobs[0])) / max(math.log2(jobs[-1]) - math.log2(jobs[0]), 1) * w for j in jobs}

    def y(v):
        return y0 + h - (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)) * h

    out = [f'<text x="{x0 + w / 2}" y="{y0 - 12}" text-anchor="middle" font-size="14" font-weight="bold">{esc(title)}</text>',
           f'<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#444"/>']
    for v in log_ticks(lo, hi):
        yy = y(v)
        out.append(f'<line x1="{x0}" y1="{yy:.1f}" x2="{x0 + w}" y2="{yy:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{x0 - 6}" y="{yy + 4:.1f}" text-anchor="end" font-size="11">{tick_label(v)}</text>')
    for j in jobs:
        out.append(f'<line x1="{xs[j]:.1f}" y1="{y0}" x2="{xs[j]:.1f}" y2="{y0 + h}" stroke="#eee"/>')
        out.append(f'<text x="{xs[j]:.1f}" y="{y0 + h + 16}" text-anchor="middle" font-size="11">{j}</text>')
    out.append(f'<text x="{x0 + w / 2}" y="{y0 + h + 34}" text-anchor="middle" font-size="12">outstanding I/Os (fio jobs)</text>')
    out.append(f'<text transform="translate({x0 - 44},{y0 + h / 2}) rotate(-90)" text-anchor="middle" font-size="12">{esc(ylabel)}</text>')
    for color, dashed, pts in series:
        pts = [(j, v) for j, v in pts if v and v > 0 and j in xs]
        if not pts:
            continue
        path = " ".join(f"{xs[j]:.1f},{y(v):.1f}" for j, v in pts)
        dash = ' stroke-dasharray="5,4"' if dashed else ""
        out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
        for j, v in pts:
            if dashed:
                out.append(f'<rect x="{xs[j] - 3:.1f}" y="{y(v) - 3:.1f}" width="6" height="6" fill="white" stroke="{color}" stroke-width="1.5"/>')
            else:
                out.append(f'<circle cx="{xs[j]:.1f}" cy="{y(v):.1f}" r="3.5" fill="{color}"/>')
    return out


def svg(d):
    pts = points(d)
    sets = [s for s in ("memory", "disk", "neither") if any(p["set"] == s for p in pts)]
    jobs = sorted({p["jobs"] for p in pts})
    ws = {p["set"]: p["ws"] for p in pts}

    def series(key):
        out = []
        for s in sets:
            for mix, dashed in (("rw", False), ("read", True)):
                sp = sorted((p["jobs"], p[key]) for p in pts if p["set"] == s and p["mix"] == mix)
                if sp:
                    out.append((COLORS[s], dashed, sp))
        return out

    W, H = 980, 500
    body = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif">',
            f'<rect width="{W}" height="{H}" fill="white"/>']
    try:
        cfg = load(d, "config.json")
        sub = (f"Cairn cache-level study: memory tier {cfg['cache_mem']}, disk tier {cfg['cache_disk']}, "
               f"object store +{cfg['latency']} per request; fio 8K O_DIRECT, {cfg['runtime']} s per point")
        body.append(f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="14">{esc(sub)}</text>')
    except (OSError, ValueError, KeyError):
        pass
    body += panel(80, 80, 380, 300, "IOPS", "IOPS (log scale)", series("iops"), jobs)
    body += panel(580, 80, 380, 300, "Read latency, 99th percentile", "ms (log scale)", series("r_p99"), jobs)
    ly = 440
    x = 80
    for s in sets:
        c = COLORS[s]
        body.append(f'<circle cx="{x + 8}" cy="{ly - 4}" r="4" fill="{c}"/>')
        body.append(f'<text x="{x + 18}" y="{ly}" font-size="12">{esc(f"{ws[s]} working set: {SET_LABEL[s]}")}</text>')
        x += 290
    body.append(f'<line x1="80" y1="{ly + 24}" x2="110" y2="{ly + 24}" stroke="#444" stroke-width="2"/>')
    body.append(f'<text x="118" y="{ly + 28}" font-size="12">{esc(MIX_LABEL["rw"])}</text>')
    body.append(f'<line x1="400" y1="{ly + 24}" x2="430" y2="{ly + 24}" stroke="#444" stroke-width="2" stroke-dasharray="5,4"/>')
    body.append(f'<text x="438" y="{ly + 28}" font-size="12">{esc(MIX_LABEL["read"])}</text>')
    body.append("</svg>")
    print("\n".join(body))


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    cmd, d = sys.argv[1], sys.argv[2]
    if cmd == "line" and len(sys.argv) == 4:
        line(d, sys.argv[3])
    elif cmd == "table":
        table(d)
    elif cmd == "svg":
        svg(d)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
