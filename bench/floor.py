#!/usr/bin/env python3
"""The FUSE floor: issue 36's embedded metadata rows on several mounts side
by side, rounds interleaved, medians printed. Meant for a Cairn mount, a
fusefloor mount (bench/fusefloor: a FUSE file system that keeps everything
in memory and does nothing else, with an embedded Cairn mount's FUSE
settings) and a local directory, so the rows show what FUSE itself costs
on this machine and what Cairn adds to it.

  bench/floor.py ROUNDS TAR LABEL=DIR [LABEL=DIR ...]      (as root)

Each round, for each DIR in turn (the order rotates every round): META_PROCS
processes create META_FILES empty files, each process in a directory of its
own; the page cache and dentries are dropped (drop_caches); they stat every
file; they unlink them; one process unpacks TAR (tar -x) and removes the
tree (rm -rf). Prints one line per run and the medians: creates, stats and
unlinks per second, tar -x and rm -rf in seconds. Environment: META_FILES
(10000), META_PROCS (4).
"""
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

ROWS = ("create/s", "stat/s", "unlink/s", "tar -x s", "rm -rf s")


def timed(args):
    t0 = time.perf_counter()
    subprocess.run(args, check=True)
    return time.perf_counter() - t0


def run(pool, root, tar, files, procs):
    per = files // procs
    os.mkdir(root)
    dirs = [os.path.join(root, f"meta.{p}") for p in range(procs)]
    out = [per * procs / benchlib.meta_phase(pool, "create", dirs, per)]
    benchlib.drop_caches()
    out.append(per * procs / benchlib.meta_phase(pool, "stat", dirs, per))
    out.append(per * procs / benchlib.meta_phase(pool, "unlink", dirs, per))
    dest = os.path.join(root, "untar")
    os.mkdir(dest)
    out.append(timed(["tar", "-C", dest, "-xf", tar]))
    out.append(timed(["rm", "-rf", dest]))
    os.rmdir(root)
    return out


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    rounds, tar = int(sys.argv[1]), sys.argv[2]
    targets = [a.split("=", 1) for a in sys.argv[3:]]
    files = int(os.environ.get("META_FILES", "10000"))
    procs = int(os.environ.get("META_PROCS", "4"))
    results = {label: [] for label, _ in targets}
    with mp.get_context("fork").Pool(procs) as pool:
        for r in range(rounds):
            order = targets[r % len(targets):] + targets[:r % len(targets)]
            for label, d in order:
                root = os.path.join(d, f"floor.{os.getpid()}.{r}")
                v = run(pool, root, tar, files, procs)
                results[label].append(v)
                print(f"round {r + 1} {label}: " + ", ".join(f"{n} {x:,.2f}" for n, x in zip(ROWS, v)), flush=True)
    print("\nmedians of", rounds, "rounds")
    print("| row | " + " | ".join(label for label, _ in targets) + " |")
    print("|---|" + "---:|" * len(targets))
    for i, n in enumerate(ROWS):
        cells = []
        for label, _ in targets:
            m = statistics.median(v[i] for v in results[label])
            cells.append(f"{m:,.2f}" if n.endswith(" s") else f"{m:,.0f}")
        print(f"| {n} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
