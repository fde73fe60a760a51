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

Each phase also accounts for the whole machine's CPU, in µs per
operation summed over the cores: the processes doing the operations
(their user and system time: a system call, and the kernel's side of its
FUSE requests, is theirs), the daemon (user; system: its read(2) of
requests and writev(2) of replies, and its own files), the rest of the
machine (other processes, kernel threads, interrupts; /proc/stat less
the two, never below zero: /proc/stat is sampled at the clock tick),
and the cores' idle time over the phase's wall time (what is left).
The time the daemon spent in metadata transactions (wall, waiting for the
store's writer slot included) is from the same counters. On a mount
other than Cairn's (bench/fusefloor) only the CPU accounting is printed.
"""
import json
import multiprocessing as mp
import os
import resource
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

CAIRN = os.environ.get("CAIRN", "./bin/cairn")
TICK = os.sysconf("SC_CLK_TCK")


def totals(mnt):
    """FUSE requests by kind (count, ns), metadata transactions and their
    summed ns; None on a mount that is not Cairn's."""
    r = subprocess.run([CAIRN, "stats", "--json", "--count", "1", "--interval", "100ms", mnt],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None
    t = json.loads(r.stdout.splitlines()[0])["totals"]
    fuse = {x["op"]: (x["latency"]["count"], x["latency"]["sum_ns"]) for x in t["fuse"]}
    kinds = t["meta"]["kinds"].values()
    return fuse, sum(k["transactions"] for k in kinds), sum(k["latency"]["sum_ns"] for k in kinds)


def machine():
    """The machine's CPU seconds so far, summed over cores: busy, idle."""
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    idle = f[3] + f[4]  # idle, iowait
    busy = sum(f[:8]) - idle  # user nice system idle iowait irq softirq steal
    return busy / TICK, idle / TICK


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
    """User and system CPU seconds of pid."""
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(f[11]) / TICK, int(f[12]) / TICK


def children():
    """User and system CPU seconds of this process's waited-for children."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime, r.ru_stime


def sub(a, b):
    return tuple(x - y for x, y in zip(a, b))


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

    workers = []  # the pool's process ids

    def worker_cpu():
        u = s = 0.0
        for w in workers:
            a, b = cpu(w)
            u, s = u + a, s + b
        cu, cs = children()
        return u + cu, s + cs

    def measure(name, ops, run):
        t0 = totals(mnt)
        c0, w0, m0 = cpu(pid), worker_cpu(), machine()
        wall = run()
        c1, w1, m1 = cpu(pid), worker_cpu(), machine()
        t1 = totals(mnt)
        reqs, tx = {}, None
        if t0 and t1:
            for op, (n, ns) in t1[0].items():
                dn, dns = n - t0[0].get(op, (0, 0))[0], ns - t0[0].get(op, (0, 0))[1]
                if dn > 0:
                    reqs[op] = (dn, dns)
            tx = (t1[1] - t0[1], t1[2] - t0[2])
        rows.append((name, ops, wall, sub(c1, c0), sub(w1, w0), sub(m1, m0), tx, reqs))

    with mp.get_context("fork").Pool(procs) as pool:
        workers.extend(p.pid for p in pool._pool)
        measure("create", per * procs, lambda: benchlib.meta_phase(pool, "create", dirs, per))
        benchlib.drop_caches()
        measure("stat", per * procs, lambda: benchlib.meta_phase(pool, "stat", dirs, per))
        measure("unlink", per * procs, lambda: benchlib.meta_phase(pool, "unlink", dirs, per))
    workers.clear()
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

    cores = os.cpu_count()
    print(f"{cores} cores; CPU in µs per operation, summed over the cores")
    print("| phase | ops/s | wall µs | processes user | processes system | daemon user | daemon system "
          "| rest of the machine | idle | metadata transactions: per op, wall µs |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for name, ops, wall, (du, ds), (wu, ws), (mb, _), tx, _ in rows:
        us = 1e6 / ops
        # Processes' times and /proc/stat's are counted apart (the latter
        # at the clock tick): the rest is never below zero, and idle is
        # what is left of the cores' time.
        known = du + ds + wu + ws
        rest = max(0.0, mb - known)
        idle = max(0.0, wall * cores - known - rest)
        txs = f"{tx[0] / ops:.2f}, {tx[1] / 1e3 / ops:.1f}" if tx else "-"
        print(f"| {name} | {ops / wall:,.0f} | {wall * us:.1f} | {wu * us:.1f} | {ws * us:.1f} | {du * us:.1f} "
              f"| {ds * us:.1f} | {rest * us:.1f} | {idle * us:.1f} | {txs} |")
    for name, ops, wall, (du, ds), _, _, tx, reqs in rows:
        if tx is None:
            continue
        n = sum(c for c, _ in reqs.values())
        svc = sum(ns for _, ns in reqs.values()) / 1e9
        print(f"\n{name}: {ops} operations in {wall:.2f} s, {ops / wall:,.0f}/s; "
              f"{wall / ops * 1e6:.1f} µs wall per operation")
        print(f"  FUSE requests: {n / ops:.2f} per operation, served in {svc / ops * 1e6:.1f} µs "
              f"(daemon's service time, summed over kinds)")
        print(f"  daemon CPU: {(du + ds) / ops * 1e6:.1f} µs per operation; "
              f"metadata transactions: {tx[0] / ops:.2f} per operation")
        print("  | request | per operation | µs each | µs per operation |")
        print("  |---|---:|---:|---:|")
        for op, (c, ns) in sorted(reqs.items(), key=lambda x: -x[1][1]):
            if c / ops >= 0.01:
                print(f"  | {op} | {c / ops:.2f} | {ns / c / 1e3:.1f} | {ns / ops / 1e3:.1f} |")


if __name__ == "__main__":
    main()
