#!/usr/bin/env python3
"""Helpers for bench/run.sh (stdlib only).

  benchlib.py fio JSONFILE rw|read|write|mixed     -> prints "MBps IOPS"
  benchlib.py meta DIR FILES PROCS                  -> prints "create N\nstat N\nunlink N" (ops/s)
  benchlib.py table RESULTS.tsv [--skip-empty] TARGETS...
                                                    -> prints a markdown table
                                                       (--skip-empty: leave out rows with no value)

RESULTS.tsv lines: target<TAB>workload<TAB>value<TAB>unit
"""
import json
import multiprocessing as mp
import os
import sys
import time


def fio(path, kind):
    with open(path) as f:
        text = f.read()
    # fio may print warnings before the JSON document
    data = json.loads(text[text.index("{"):])
    job = data["jobs"][0]
    if job.get("error"):
        sys.exit(f"fio job error {job['error']}")
    if kind == "mixed":
        bw = job["read"]["bw_bytes"] + job["write"]["bw_bytes"]
        iops = job["read"]["iops"] + job["write"]["iops"]
    else:
        bw = job[kind]["bw_bytes"]
        iops = job[kind]["iops"]
    print(f"{bw / 1e6:.1f} {iops:.0f}")


def _meta_worker(args):
    phase, d, n, start_at = args
    # crude barrier: all workers begin at the same wall-clock instant
    while time.time() < start_at:
        time.sleep(0.0005)
    t0 = time.perf_counter()
    if phase == "create":
        os.makedirs(d, exist_ok=True)
        for i in range(n):
            fd = os.open(os.path.join(d, f"f{i}"), os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)
            os.close(fd)
    elif phase == "stat":
        for i in range(n):
            os.stat(os.path.join(d, f"f{i}"))
    elif phase == "unlink":
        for i in range(n):
            os.unlink(os.path.join(d, f"f{i}"))
        os.rmdir(d)
    return time.perf_counter() - t0


def meta(root, files, procs):
    files, procs = int(files), int(procs)
    per = files // procs
    dirs = [os.path.join(root, f"meta.{p}") for p in range(procs)]
    ctx = mp.get_context("fork")
    with ctx.Pool(procs) as pool:
        for phase in ("create", "stat", "unlink"):
            start_at = time.time() + 0.2
            t0 = time.time()
            times = pool.map(_meta_worker, [(phase, d, per, start_at) for d in dirs])
            wall = max(times) if times else time.time() - t0
            print(f"{phase} {per * procs / wall:.0f}")


ROWS = [
    ("seq-write-8k", "seq write 8K", "MB/s"),
    ("seq-read-8k", "seq read 8K (cold)", "MB/s"),
    ("seq-write-32k", "seq write 32K", "MB/s"),
    ("seq-read-32k", "seq read 32K (cold)", "MB/s"),
    ("seq-write-128k", "seq write 128K", "MB/s"),
    ("seq-read-128k", "seq read 128K (cold)", "MB/s"),
    ("randread-4k", "rand read 4K", "IOPS"),
    ("randwrite-4k", "rand write 4K", "IOPS"),
    ("randrw-8k", "rand 8K 67% read / 33% write", "IOPS"),
    ("meta-create", "meta: create", "ops/s"),
    ("meta-stat", "meta: stat", "ops/s"),
    ("meta-unlink", "meta: unlink", "ops/s"),
]
NAMES = {"local": "local dir", "cairn": "Cairn", "juicefs": "JuiceFS"}


def table(path, *targets):
    vals, notes = {}, {}
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) >= 3 and parts[1] != "note":
                vals[(parts[0], parts[1])] = float(parts[2])
            elif len(parts) >= 3:
                notes.setdefault(parts[0], []).append(parts[2])
    targets = list(targets)
    skip_empty = "--skip-empty" in targets
    targets = [t for t in targets if t != "--skip-empty"] or ["local", "cairn", "juicefs"]
    hdr = ["workload", "unit"] + [NAMES.get(t, t) for t in targets] + ["Cairn/JuiceFS"]
    out = ["| " + " | ".join(hdr) + " |", "|" + "|".join(["---"] * 2 + ["---:"] * (len(hdr) - 2)) + "|"]
    for key, label, unit in ROWS:
        if skip_empty and all((t, key) not in vals for t in targets):
            continue
        row = [label, unit]
        for t in targets:
            v = vals.get((t, key))
            row.append("—" if v is None else (f"{v:,.1f}" if unit == "MB/s" else f"{v:,.0f}"))
        c, j = vals.get(("cairn", key)), vals.get(("juicefs", key))
        row.append(f"{c / j:.2f}" if c is not None and j else "—")
        out.append("| " + " | ".join(row) + " |")
    for t in targets:
        for n in notes.get(t, []):
            out.append(f"\n- {NAMES.get(t, t)}: {n}")
    print("\n".join(out))


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"fio": fio, "meta": meta, "table": table}[cmd](*args)
