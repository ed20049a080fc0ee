#!/usr/bin/env python3
"""The figures of docs/nam.md, each point the median of --repeats `sluice run`
jobs whose reporting rank checked the invariants (sluice-nam) or verified
every algorithm against its reference (sluice-nam-olap):

  rsi    the client sweep: 1 memory server, one compute rank with C client
         threads (C in --clients, default 1 2 4 8 16), checkout on
         --products products of 1 KiB with --browse-percent read-only
         browsing (begin_read_only), 2 versions per record, --seconds each:
         RSI without an overflow area, RSI with one (--overflow-entries),
         and the 2PC baseline; throughput, abort rate, median and p99
         latency. `rsi-hot` does the same on --hot 16 hot products
         (contention).
  join   sluice-nam-olap join (rrj, ghj, ghj-bloom and the flow radix join
         of apps/join, all in one job) at the paper's selectivities,
         |R| = |S| = --join-rows, 1 memory server, 2 compute ranks x 2 threads
  agg    sluice-nam-olap agg (rdma, hierarchical) over --agg-rows rows and
         each of --groups distinct keys asked

  bench/nam/sweep.py rsi [rsi-hot] [join] [agg] [--repeats 3] [--build build]
      [--transport shm]

It prints one markdown table per figure and the load average before and
after. Run it on an idle machine (docs/nam.md: under `flock -x
/tmp/sluice-cpu.lock` on the shared development machine).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def job(args, ranks, program, prog_args, reporter):
    argv = [os.path.join(args.build, "bin", "sluice"), "run", "-n", str(ranks), "--",
            os.path.join(args.build, "bin", program)] + prog_args + ["--json"]
    env = dict(os.environ, SLUICE_TRANSPORT=args.transport)
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900)
    lines = [json.loads(m.group(1))
             for m in re.finditer(r"^\[%d\] (\{.*\})$" % reporter, p.stdout, re.M)]
    if p.returncode != 0 or not lines:
        sys.exit(f"sweep: the job failed (exit {p.returncode}):\n{' '.join(argv)}\n"
                 f"{p.stdout}{p.stderr}")
    return lines


def median(values):
    return statistics.median(values)


def rsi(args, hot):
    configs = [("RSI", ["--protocol", "rsi"]),
               ("RSI + overflow", ["--protocol", "rsi", "--overflow-entries",
                                   str(args.overflow_entries)]),
               ("2PC", ["--protocol", "2pc"])]
    common = ["--products", str(args.products), "--record-bytes", "1024", "--versions", "2",
              "--browse-percent", str(args.browse_percent), "--txns", "0", "--seconds",
              str(args.seconds), "--max-orders", str(args.max_orders)]
    if hot:
        common += ["--hot-products", str(args.hot)]
    print(f"\n### {'contention: %d hot products' % args.hot if hot else 'uniform'}: "
          f"{args.products} products, {args.browse_percent}% browsing, {args.seconds} s a run, "
          f"median of {args.repeats} ({args.transport})\n")
    print("| clients | protocol | txn/s | abort rate | p50 us | p99 us | moved to overflow |")
    print("|---|---|---|---|---|---|---|")
    for c in args.clients:
        for name, extra in configs:
            runs = [job(args, 2, "sluice-nam", common + extra + ["--clients", str(c)], 1)[0]
                    for _ in range(args.repeats)]
            for r in runs:
                if r["invariants"] != "OK":
                    sys.exit(f"sweep: invariants failed: {r}")
            tps = median([r["txn_per_s"] for r in runs])
            print(f"| {c} | {name} | {tps:,.0f} | "
                  f"{100 * median([r['abort_rate'] for r in runs]):.2f}% | "
                  f"{median([r['latency_p50_us'] for r in runs]):.1f} | "
                  f"{median([r['latency_p99_us'] for r in runs]):.1f} | "
                  f"{median([r['overflow_moved'] for r in runs]):,.0f} |", flush=True)


def join(args):
    algos = ["rrj", "ghj", "ghj-bloom", "flow-radix"]
    print(f"\n### join: |R| = |S| = {args.join_rows}, 1 memory server, 2 compute ranks x 2 "
          f"threads, ms, median of {args.repeats} ({args.transport})\n")
    print("| selectivity | " + " | ".join(algos) + " |")
    print("|---|" + "---|" * len(algos))
    for sel in args.selectivities:
        runs = [job(args, 3, "sluice-nam-olap",
                    ["join", "--threads", "2", "--r", str(args.join_rows), "--selectivity",
                     str(sel)], 1)[0] for _ in range(args.repeats)]
        cells = []
        for a in algos:
            k = a.replace("-", "_")
            for r in runs:
                if r[k + "_verify"] != "OK":
                    sys.exit(f"sweep: {a} did not verify: {r}")
            cells.append(f"{1000 * median([r[k + '_seconds'] for r in runs]):.0f}")
        print(f"| {sel} | " + " | ".join(cells) + " |", flush=True)


def agg(args):
    print(f"\n### aggregation: {args.agg_rows} rows, 1 memory server, 2 compute ranks x "
          f"{args.agg_threads} threads, ms, median of {args.repeats} ({args.transport})\n")
    algos = args.agg_algorithms
    hier = "hierarchical" in algos
    print("| keys asked (found) | " + " | ".join(algos) + " |" +
          (" groups the hierarchical one shuffled |" if hier else ""))
    print("|---|" + "---|" * (len(algos) + hier))
    for g in args.groups:
        runs = [job(args, 3, "sluice-nam-olap",
                    ["agg", "--threads", str(args.agg_threads), "--rows", str(args.agg_rows),
                     "--groups", str(g), "--algorithms", ",".join(algos)], 1)[0]
                for _ in range(args.repeats)]
        for r in runs:
            for a in algos:
                if r[a + "_verify"] != "OK":
                    sys.exit(f"sweep: {a} did not verify: {r}")
        cells = [f"{1000 * median([r[a + '_seconds'] for r in runs]):.0f}" for a in algos]
        if hier:
            cells.append(f"{runs[0]['hierarchical_flow_records']:,}")
        print(f"| {g:,} ({runs[0]['reference_groups']:,}) | " + " | ".join(cells) + " |",
              flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("figures", nargs="+", choices=["rsi", "rsi-hot", "join", "agg"])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--transport", default="shm")
    p.add_argument("--clients", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    p.add_argument("--products", type=int, default=100000)
    p.add_argument("--browse-percent", type=int, default=20)
    p.add_argument("--hot", type=int, default=16)
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--max-orders", type=int, default=1000000)
    p.add_argument("--overflow-entries", type=int, default=65536)
    p.add_argument("--join-rows", type=int, default=1000000)
    p.add_argument("--selectivities", type=float, nargs="+", default=[0.25, 0.5, 0.75, 1.0])
    p.add_argument("--agg-rows", type=int, default=4000000)
    p.add_argument("--agg-threads", type=int, default=2)
    p.add_argument("--agg-algorithms", nargs="+", default=["rdma", "hierarchical"],
                   choices=["rdma", "hierarchical"])
    p.add_argument("--groups", type=int, nargs="+", default=[1, 1000, 100000, 1000000, 4000000])
    args = p.parse_args()
    print(f"load average before: {loadavg()}")
    for f in args.figures:
        if f in ("rsi", "rsi-hot"):
            rsi(args, f == "rsi-hot")
        elif f == "join":
            join(args)
        else:
            agg(args)
    print(f"\nload average after: {loadavg()}")


if __name__ == "__main__":
    main()
