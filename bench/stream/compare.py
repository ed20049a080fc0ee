#!/usr/bin/env python3
"""sluice-stream against Timely Dataflow and Apache Flink on YSB or NB7, on
the same processes x workers and the same generated records (the peers port
apps/stream's generators bit for bit). Five engines per shape:

  slash        sluice-stream --strategy slash (eager partial state, epoch deltas)
  uppar        sluice-stream --strategy uppar (records shuffled by key)
  timely       timely-peer --strategy repartition (records exchanged by key)
  timely-pre   timely-peer --strategy preagg (local pre-aggregation per window)
  flink        flink-peer: Flink's MiniCluster, T task slots in one JVM (1 x T shapes only)

Every run's result rows and checksum must be equal across the four (the
script stops otherwise). Each figure is the median of --repeats runs:
records/s (input records over the slowest worker's timed part) and records
per CPU-second (over the CPU seconds of every process of the job, input
generation excluded for both).

  bench/stream/install.sh                      # builds timely-peer (cargo, crates.io)
  bench/stream/compare.py [--query ysb|nb7] [--shapes 1x1,1x2,2x1,2x2]
                          [--records 20000000] [--keys K] [--window-ms W]
                          [--repeats 5] [--build build]
                          [--engines slash,uppar,timely,timely-pre,flink]

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
TIMELY = os.path.join(ROOT, "bench", "stream", "timely-peer", "target", "release", "timely-peer")
FLINK = os.path.join(ROOT, "bench", "stream", "flink-peer", "target")


def common(args):
    """The data flags every engine takes (the query's defaults where not given)."""
    out = []
    if args.keys:
        out += ["--keys", str(args.keys)]
    if args.window_ms:
        out += ["--window-ms", str(args.window_ms)]
    return out


def sluice_run(args, strategy, p, t):
    argv = [os.path.join(args.build, "bin", "sluice"), "run", "-n", str(p), "--",
            os.path.join(args.build, "bin", "sluice-stream"), "--query", args.query, "--strategy",
            strategy, "--workers", str(t), "--records", str(args.records)] + common(args) + [
            "--json"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    m = re.search(r"^\[0\] (\{.*\})$", out.stdout, re.M)
    if out.returncode != 0 or not m:
        sys.exit(f"compare: sluice-stream failed:\n{' '.join(argv)}\n{out.stdout}{out.stderr}")
    j = json.loads(m.group(1))
    return j["seconds"], j["cpu_seconds"], (j["rows"], j["checksum"])


def timely_run(args, strategy, p, t):
    base = [TIMELY, "--query", args.query, "--strategy", strategy, "--records",
            str(args.records)] + common(args) + ["--"]
    procs = [subprocess.Popen(base + ["-w", str(t), "-n", str(p), "-p", str(i)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(p)]
    outs = [pr.communicate(timeout=900) for pr in procs]
    if any(pr.returncode != 0 for pr in procs):
        sys.exit(f"compare: timely-peer failed:\n" + "\n".join(o + e for o, e in outs))
    lines = [json.loads(line) for o, _ in outs for line in o.splitlines() if line.startswith("{")]
    seconds = max(x["seconds"] for x in lines if "seconds" in x)
    cpu = sum(x["process_cpu_seconds"] for x in lines if "process_cpu_seconds" in x)
    result = [x for x in lines if "checksum" in x][0]
    return seconds, cpu, (result["rows"], result["checksum"])


def flink_run(args, p, t):
    if p != 1:
        return None  # a MiniCluster is one process
    argv = ["java", "-cp", f"{FLINK}/flink-peer-0.1.0.jar:{FLINK}/lib/*", "sluice.bench.FlinkPeer",
            "--query", args.query, "--parallelism", str(t), "--records", str(args.records)] + common(args)
    out = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    m = re.search(r"^(\{.*\})$", out.stdout, re.M)
    if out.returncode != 0 or not m:
        sys.exit(f"compare: flink-peer failed:\n{' '.join(argv)}\n{out.stdout}{out.stderr}")
    j = json.loads(m.group(1))
    return j["seconds"], j["cpu_seconds"], (j["rows"], j["checksum"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--shapes", default="1x1,1x2,2x1,2x2")
    ap.add_argument("--records", type=int, default=20000000)
    ap.add_argument("--query", default="ysb", choices=["ysb", "nb7"])
    ap.add_argument("--keys", type=int, default=0, help="default: the query's (ysb 100, nb7 10000)")
    ap.add_argument("--window-ms", type=int, default=0,
                    help="default: the query's (ysb 1000, nb7 60000)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--engines", default="slash,uppar,timely,timely-pre,flink",
                    help="the engines to run, comma-separated (slash must be one)")
    args = ap.parse_args()
    known = [("slash", lambda p, t: sluice_run(args, "slash", p, t)),
             ("uppar", lambda p, t: sluice_run(args, "uppar", p, t)),
             ("timely", lambda p, t: timely_run(args, "repartition", p, t)),
             ("timely-pre", lambda p, t: timely_run(args, "preagg", p, t)),
             ("flink", lambda p, t: flink_run(args, p, t))]
    chosen = args.engines.split(",")
    unknown = [e for e in chosen if e not in dict(known)]
    if unknown or "slash" not in chosen:
        others = ", ".join(n for n, _ in known[1:])
        bad = f" (not {', '.join(unknown)})" if unknown else ""
        sys.exit(f"compare: --engines {args.engines}: choose slash and any of {others}{bad}")
    engines = [(n, run) for n, run in known if n in chosen]
    if any(n.startswith("timely") for n in chosen) and not os.path.exists(TIMELY):
        sys.exit(f"compare: the Timely peer is missing ({TIMELY}): run bench/stream/install.sh")
    if "flink" in chosen and not os.path.exists(f"{FLINK}/flink-peer-0.1.0.jar"):
        sys.exit(f"compare: the Flink peer is missing ({FLINK}): run bench/stream/install.sh")
    load = os.getloadavg()
    print(f"{args.query.upper()}, {args.records} records, keys {args.keys or 'default'}, windows "
          f"{args.window_ms or 'default'} ms; median of "
          f"{args.repeats}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"{'P x T':6} " + " ".join(f"{n + ' M rec/s':>18} {'per CPU-s':>10}" for n, _ in engines)
          + f" {'slash/timely':>13} {'per CPU-s':>10} {'slash/flink':>12} {'per CPU-s':>10}")
    for shape in args.shapes.split(","):
        p, t = (int(x) for x in shape.split("x"))
        med = {}
        result = None
        for name, run in engines:
            secs, cpus = [], []
            for _ in range(args.repeats):
                got = run(p, t)
                if got is None:
                    break
                s, c, r = got
                if result is None:
                    result = r
                elif r != result:
                    sys.exit(f"compare: {name} at {shape} gave {r}, the others {result}")
                secs.append(s)
                cpus.append(c)
            if not secs:
                med[name] = None
                continue
            med[name] = (args.records / statistics.median(secs) / 1e6,
                         args.records / max(statistics.median(cpus), 1e-9) / 1e6)
        timelys = [med[n] for n in ("timely", "timely-pre") if med.get(n)]
        cell = lambda n: (f"{med[n][0]:18.1f} {med[n][1]:10.1f}" if med[n] else f"{'-':>18} {'-':>10}")
        ratio = lambda peer: (f" {med['slash'][0] / peer[0]:11.2f}x {med['slash'][1] / peer[1]:9.2f}x"
                              if peer else f" {'-':>12} {'-':>10}")
        best_timely = ((max(x[0] for x in timelys), max(x[1] for x in timelys))
                       if timelys else None)
        print(f"{shape:6} " + " ".join(cell(n) for n, _ in engines) + ratio(best_timely)
              + ratio(med.get("flink")), flush=True)
    print(f"rows and checksum equal for every engine: {result}")
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
