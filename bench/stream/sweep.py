#!/usr/bin/env python3
"""sluice-stream's own sweeps, slash against uppar on the same input (the
peers are in compare.py). Each point is the median of --repeats jobs,
million records per second and per CPU-second, and the bytes moved through
flows:

  skew       YSB over 10,000 campaigns, Zipf 0.2 .. 2.0 (--shape, 2x2 by default)
  crossover  RO over 100 M keys in one global window: where eager state no
             longer reduces data; and CM (mean CPU per job, 10 K jobs)
  weak       YSB, 100 campaigns, --per-worker records per worker, 1, 2 and 4
             processes x 1 worker: records/s, and per usable core
             (min(workers, CPUs))

  bench/stream/sweep.py skew crossover weak [--repeats 3] [--records 20000000]

Run it on an idle machine; it prints the load average before and after.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(args, ranks, threads, extra):
    argv = [os.path.join(args.build, "bin", "sluice"), "run", "-n", str(ranks), "--",
            os.path.join(args.build, "bin", "sluice-stream"), "--workers", str(threads),
            "--json"] + extra
    out = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    m = re.search(r"^\[0\] (\{.*\})$", out.stdout, re.M)
    if out.returncode != 0 or not m:
        sys.exit(f"sweep: the job failed:\n{' '.join(argv)}\n{out.stdout}{out.stderr}")
    return json.loads(m.group(1))


def point(args, ranks, threads, extra):
    """Medians over --repeats: (M rec/s, M rec per CPU-s, MB moved, rows, checksum)."""
    js = [run(args, ranks, threads, extra) for _ in range(args.repeats)]
    results = {(j["rows"], j["checksum"]) for j in js}
    if len(results) != 1:
        sys.exit(f"sweep: repeats of {extra} gave different results: {results}")
    return (statistics.median(j["records_per_s"] for j in js) / 1e6,
            statistics.median(j["records_per_cpu_s"] for j in js) / 1e6,
            js[0]["bytes_moved"] / 1e6, js[0]["rows"], js[0]["checksum"])


def both(args, ranks, threads, extra):
    s = point(args, ranks, threads, extra + ["--strategy", "slash"])
    u = point(args, ranks, threads, extra + ["--strategy", "uppar"])
    if s[3:] != u[3:]:
        sys.exit(f"sweep: slash and uppar disagree on {extra}: {s[3:]} against {u[3:]}")
    return s, u


def row(label, s, u):
    print(f"{label:24} {s[0]:8.1f} {s[1]:8.1f} {s[2]:9.1f}   {u[0]:8.1f} {u[1]:8.1f} {u[2]:9.1f}"
          f"   {s[0] / u[0]:6.2f}x", flush=True)


def header(title):
    print(f"\n{title}")
    print(f"{'':24} {'slash':>8} {'/CPU-s':>8} {'MB moved':>9}   {'uppar':>8} {'/CPU-s':>8} "
          f"{'MB moved':>9}   {'ratio':>7}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sweeps", nargs="*", default=["skew", "crossover", "weak"])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--records", type=int, default=20000000)
    ap.add_argument("--shape", default="2x2")
    ap.add_argument("--per-worker", type=int, default=10000000)
    args = ap.parse_args()
    p, t = (int(x) for x in args.shape.split("x"))
    load = os.getloadavg()
    print(f"sluice-stream sweeps on {os.cpu_count()} CPUs, median of {args.repeats}, M records/s; "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    if "skew" in args.sweeps:
        header(f"skew: YSB, 10,000 campaigns, {args.records} records, {args.shape}")
        for z in ("0.2", "0.6", "1.0", "1.5", "2.0"):
            s, u = both(args, p, t, ["--query", "ysb", "--keys", "10000", "--zipf", z,
                                     "--records", str(args.records)])
            row(f"zipf {z}", s, u)
    if "crossover" in args.sweeps:
        header(f"crossover: {args.records} records, {args.shape}")
        s, u = both(args, p, t, ["--query", "ro", "--keys", "100000000", "--records",
                                 str(args.records)])
        row("ro, 100 M keys", s, u)
        s, u = both(args, p, t, ["--query", "ysb", "--keys", "1000000", "--records",
                                 str(args.records)])
        row("ysb, 1 M campaigns", s, u)
        s, u = both(args, p, t, ["--query", "cm", "--records", str(args.records)])
        row("cm, 10 K jobs", s, u)
    if "weak" in args.sweeps:
        cpus = os.cpu_count() or 1
        header(f"weak scaling: YSB, 100 campaigns, {args.per_worker} records per worker, "
               f"P x 1 (per usable core in brackets)")
        for procs in (1, 2, 4):
            s, u = both(args, procs, 1, ["--query", "ysb", "--records",
                                         str(args.per_worker * procs)])
            usable = min(procs, cpus)
            row(f"{procs} x 1 ({usable} cores: {s[0] / usable:.1f} / {u[0] / usable:.1f})", s, u)
    load = os.getloadavg()
    print(f"\nload average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
