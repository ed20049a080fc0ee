#!/usr/bin/env python3
"""The paper's figures for sluice-query, each point the median of --repeats
`sluice run` jobs whose rank 0 verified the result:

  fig3    the synthetic two-shuffle benchmark over processes x workers, the
          sluice exchange over shm and over ofi against the sockets exchange
  fig4    the batching threshold (--batch-bytes) at 4 processes x 2 workers
  fig5    the TPC-C queries q1-q3 over processes x workers, both exchanges
  duckdb  the TPC-C queries on one process against DuckDB on the same tables
          and the same number of threads (DuckDB loads the CSV that
          `sluice-query tpcc-export` writes into memory first; its time is the
          query alone, as sluice-query's is the query without generation)

Times are what rank 0 reports (the slowest worker's loop, without start-up
or table generation). `cpu` is the CPU seconds of the whole job (every
process, start-up and generation included), for per-CPU-second comparisons.

  bench/query/sweep.py [fig3] [fig4] [fig5] [duckdb] [--repeats 5]
      [--rows 5000000] [--warehouses 15] [--build build]

Run it on an idle machine; it prints the load average before and after.
"""
import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "query"))
import tpcc_duckdb  # noqa: E402  the paper's SQL, as the tests run it
SHAPES = [(1, 1), (1, 2), (2, 1), (2, 2), (4, 1), (4, 2)]


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def job(args, processes, query_args, transport="shm"):
    """Runs one sluice-query job; returns its JSON lines and the job's CPU seconds."""
    argv = [os.path.join(args.build, "bin", "sluice"), "run", "-n", str(processes), "--",
            os.path.join(args.build, "bin", "sluice-query")] + query_args + ["--json"]
    env = dict(os.environ, SLUICE_TRANSPORT=transport)
    cpu0 = children_cpu()
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    cpu = children_cpu() - cpu0
    lines = [json.loads(m.group(1)) for m in re.finditer(r"^\[0\] (\{.*\})$", p.stdout, re.M)]
    if p.returncode != 0 or not lines:
        sys.exit(f"sweep: the job failed (exit {p.returncode}):\n{' '.join(argv)}\n"
                 f"{p.stdout}{p.stderr}")
    for line in lines:
        if line.get("verify", "OK") != "OK":
            sys.exit(f"sweep: verify failed:\n{' '.join(argv)}\n{p.stdout}")
    return lines, cpu


def median_of(args, processes, query_args, transport="shm"):
    secs, cpus, last = [], [], None
    for _ in range(args.repeats):
        lines, cpu = job(args, processes, query_args, transport)
        secs.append(lines[0]["seconds"])
        cpus.append(cpu)
        last = lines[0]
    return statistics.median(secs), statistics.median(cpus), last


def variants():
    return [("sluice/shm", "shm", ["--exchange", "sluice"]),
            ("sluice/ofi", "ofi", ["--exchange", "sluice"]),
            ("sockets", "shm", ["--exchange", "sockets"])]


def less(a, b):
    """a's time against b's, as a cut ("75% less") or a rise ("20% more")."""
    cut = 100 * (1 - a / b)
    return f"{cut:.0f}% less" if cut >= 0 else f"{-cut:.0f}% more"


def fig3(args):
    print(f"\nfig3: synthetic, {args.rows} rows per process, shuffled twice; median of "
          f"{args.repeats}, seconds (job CPU seconds). 'none' runs the same operators with no "
          f"exchange (compute only); communication time is a time less that")
    print(f"{'P x T':6} {'none':>7} {'sluice/shm':>18} {'sluice/ofi':>18} {'sockets':>18} "
          f"{'shm vs sockets':>15} {'ofi vs sockets':>15} {'comm. shm/ofi vs sockets':>25}")
    best = {}
    for p, t in SHAPES:
        row = {}
        base = ["synthetic", "--rows", str(args.rows), "--threads", str(t)]
        none, _, _ = median_of(args, p, base + ["--exchange", "none"])
        for name, transport, extra in variants():
            s, c, _ = median_of(args, p, base + extra, transport)
            row[name] = (s, c)
            best[name] = min(best.get(name, s), s)
        comm = {n: row[n][0] - none for n in row}
        print(f"{p}x{t:<4} {none:7.3f} " +
              " ".join(f"{row[n][0]:8.3f} ({row[n][1]:5.2f})".rjust(18) for n, _, _ in variants()) +
              f" {less(row['sluice/shm'][0], row['sockets'][0]):>15}"
              f" {less(row['sluice/ofi'][0], row['sockets'][0]):>15}"
              f" {less(comm['sluice/shm'], comm['sockets']) + ' / ' + less(comm['sluice/ofi'], comm['sockets']):>25}",
              flush=True)
    for n in ("sluice/shm", "sluice/ofi"):
        print(f"fastest {n} {best[n]:.3f} s against fastest sockets {best['sockets']:.3f} s: "
              f"{less(best[n], best['sockets'])} time")


def fig4(args):
    sizes = "1024,2048,4096,8192,16384,32768,65536"
    print(f"\nfig4: synthetic at 4 x 2, {args.rows} rows per process, by --batch-bytes; median of "
          f"{args.repeats}, seconds")
    table = {}
    for name, transport, extra in variants():
        runs = []
        for _ in range(args.repeats):
            lines, _ = job(args, 4, ["synthetic", "--rows", str(args.rows), "--threads", "2",
                                     "--batch-bytes", sizes] + extra, transport)
            runs.append({line["batch_bytes"]: line["seconds"] for line in lines})
        table[name] = {b: statistics.median(r[b] for r in runs) for b in runs[0]}
    print(f"{'batch':>7} " + " ".join(f"{n:>11}" for n, _, _ in variants()))
    for b in sorted(table["sockets"]):
        print(f"{b:7} " + " ".join(f"{table[n][b]:11.3f}" for n, _, _ in variants()))


def fig5(args):
    print(f"\nfig5: TPC-C at {args.warehouses} warehouses; median of {args.repeats}, seconds "
          f"(job CPU seconds, generation included)")
    print(f"{'query':5} {'P x T':6} {'sluice/shm':>18} {'sluice/ofi':>18} {'sockets':>18}")
    for q in ("q1", "q2", "q3"):
        for p, t in SHAPES:
            cells, rows = [], set()
            for name, transport, extra in variants():
                s, c, last = median_of(args, p, ["tpcc", q, "--warehouses", str(args.warehouses),
                                                 "--threads", str(t)] + extra, transport)
                cells.append(f"{s:8.3f} ({c:5.2f})".rjust(18))
                rows.add(last["result_rows"])
            if len(rows) != 1:
                sys.exit(f"sweep: {q} at {p}x{t} gave different row counts: {rows}")
            print(f"{q:5} {p}x{t:<4} " + " ".join(cells), flush=True)


def duckdb_compare(args):
    try:
        import duckdb
    except ImportError:
        sys.exit("sweep: duckdb needs the project's interpreter: .venv/bin/python "
                 "bench/query/sweep.py duckdb (scripts/install-deps.sh makes it)")
    with tempfile.TemporaryDirectory(prefix="sweep_tpcc_") as d:
        subprocess.run([os.path.join(args.build, "bin", "sluice-query"), "tpcc-export",
                        "--warehouses", str(args.warehouses), "--dir", d], check=True,
                       capture_output=True)
        con = duckdb.connect()
        tpcc_duckdb.load(con, d)
    print(f"\nduckdb {duckdb.__version__}: TPC-C at {args.warehouses} warehouses on one process, "
          f"median of {args.repeats}, seconds (tables in memory for both)")
    print(f"{'query':5} {'threads':>7} {'duckdb':>8} {'sluice-query':>12} {'ratio':>6}")
    for q in ("q1", "q2", "q3"):
        for t in (1, 2):
            con.execute(f"SET threads = {t}")
            secs, rows = [], None
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                rows = con.execute(tpcc_duckdb.SQL[q]).fetchall()
                secs.append(time.perf_counter() - t0)
            s, _, last = median_of(args, 1, ["tpcc", q, "--warehouses", str(args.warehouses),
                                             "--threads", str(t)])
            if last["result_rows"] != len(rows):
                sys.exit(f"sweep: {q}: sluice-query gave {last['result_rows']} rows, "
                         f"DuckDB {len(rows)}")
            d_s = statistics.median(secs)
            print(f"{q:5} {t:7} {d_s:8.3f} {s:12.3f} {s / d_s:5.2f}x", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("figures", nargs="*", default=["fig3", "fig4", "fig5", "duckdb"])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rows", type=int, default=5000000)
    ap.add_argument("--warehouses", type=int, default=15)
    args = ap.parse_args()
    for f in args.figures:
        if f not in ("fig3", "fig4", "fig5", "duckdb"):
            sys.exit(f"sweep: unknown figure '{f}' (fig3, fig4, fig5, duckdb)")
    load = os.getloadavg()
    print(f"sluice-query sweep on {os.cpu_count()} CPUs; load average "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    for f in args.figures:
        {"fig3": fig3, "fig4": fig4, "fig5": fig5, "duckdb": duckdb_compare}[f](args)
    load = os.getloadavg()
    print(f"\nload average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
