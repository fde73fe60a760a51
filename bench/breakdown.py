#!/usr/bin/env python3
"""Where a metadata operation's time goes on a Cairn mount: FUSE requests
per operation by kind, the daemon's service time of each kind, the
daemon's CPU time and the metadata engine's transactions per operation,
next to the wall time, for each phase of:

  create   META_PROCS processes create META_FILES empty files, each in a
           directory of its own (open O_CREAT|O_EXCL, close)
  stat     the page cache and dentries dropped first (drop_caches), then
           the same processes stat every file
  unlink   and unlink them
  untar    tar -x of TAR (one process), if given
  rm -rf   of what it unpacked

  bench/breakdown.py MOUNTPOINT [TAR]      (as root: drop_caches)

The counts come from the mount's own counters (`cairn stats --json`,
totals before and after each phase); the daemon's CPU time from
/proc/PID/stat of the process serving MOUNTPOINT. Environment: CAIRN
(./bin/cairn), META_FILES (10000), META_PROCS (4).
"""
import json
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

CAIRN = os.environ.get("CAIRN", "./bin/cairn")
TICK = os.sysconf("SC_CLK_TCK")


def totals(mnt):
    out = subprocess.run([CAIRN, "stats", "--json", "--count", "1", "--interval", "100ms", mnt],
                         capture_output=True, text=True, check=True).stdout
    t = json.loads(out.splitlines()[0])["totals"]
    fuse = {x["op"]: (x["latency"]["count"], x["latency"]["sum_ns"]) for x in t["fuse"]}
    tx = sum(k["transactions"] for k in t["meta"]["kinds"].values())
    return fuse, tx


def daemon_pid(mnt):
    """The process whose command line names mnt and that holds /dev/fuse."""
    mnt = os.path.realpath(mnt)
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            argv = open(f"/proc/{p}/cmdline", "rb").read().split(b"\0")
            if mnt.encode() not in argv:
                continue
            if any(os.readlink(f"/proc/{p}/fd/{fd}") == "/dev/fuse" for fd in os.listdir(f"/proc/{p}/fd")):
                return int(p)
        except OSError:
            continue
    sys.exit(f"no process serving {mnt} found")


def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    mnt, tar = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else None)
    files = int(os.environ.get("META_FILES", "10000"))
    procs = int(os.environ.get("META_PROCS", "4"))
    per = files // procs
    pid = daemon_pid(mnt)
    root = os.path.join(mnt, f"breakdown.{os.getpid()}")
    os.mkdir(root)
    dirs = [os.path.join(root, f"meta.{p}") for p in range(procs)]
    rows = []

    def measure(name, ops, run):
        f0, tx0 = totals(mnt)
        c0 = cpu(pid)
        wall = run()
        c1 = cpu(pid)
        f1, tx1 = totals(mnt)
        reqs = {}
        for op, (n, ns) in f1.items():
            dn, dns = n - f0.get(op, (0, 0))[0], ns - f0.get(op, (0, 0))[1]
            if dn > 0:
                reqs[op] = (dn, dns)
        rows.append((name, ops, wall, c1 - c0, tx1 - tx0, reqs))

    with mp.get_context("fork").Pool(procs) as pool:
        measure("create", per * procs, lambda: benchlib.meta_phase(pool, "create", dirs, per))
        benchlib.drop_caches()
        measure("stat", per * procs, lambda: benchlib.meta_phase(pool, "stat", dirs, per))
        measure("unlink", per * procs, lambda: benchlib.meta_phase(pool, "unlink", dirs, per))
    if tar:
        names = subprocess.run(["tar", "-tf", tar], capture_output=True, text=True, check=True).stdout.split()
        dest = os.path.join(root, "untar")
        os.mkdir(dest)

        def untar():
            t0 = time.perf_counter()
            subprocess.run(["tar", "-C", dest, "-xf", tar], check=True)
            return time.perf_counter() - t0

        def rmrf():
            t0 = time.perf_counter()
            subprocess.run(["rm", "-rf", dest], check=True)
            return time.perf_counter() - t0

        measure("untar", len(names), untar)
        measure("rm -rf", len(names), rmrf)
    shutil.rmtree(root, ignore_errors=True)

    for name, ops, wall, dcpu, tx, reqs in rows:
        n = sum(c for c, _ in reqs.values())
        svc = sum(ns for _, ns in reqs.values()) / 1e9
        print(f"\n{name}: {ops} operations in {wall:.2f} s, {ops / wall:,.0f}/s; "
              f"{wall / ops * 1e6:.1f} µs wall per operation")
        print(f"  FUSE requests: {n / ops:.2f} per operation, served in {svc / ops * 1e6:.1f} µs "
              f"(daemon's service time, summed over kinds)")
        print(f"  daemon CPU: {dcpu / ops * 1e6:.1f} µs per operation; "
              f"metadata transactions: {tx / ops:.2f} per operation")
        print("  | request | per operation | µs each | µs per operation |")
        print("  |---|---:|---:|---:|")
        for op, (c, ns) in sorted(reqs.items(), key=lambda x: -x[1][1]):
            if c / ops >= 0.01:
                print(f"  | {op} | {c / ops:.2f} | {ns / c / 1e3:.1f} | {ns / ops / 1e3:.1f} |")


if __name__ == "__main__":
    main()
