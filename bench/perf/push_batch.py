#!/usr/bin/env python3
"""Single pushes against runs (Source::push(span)) for tiny records, paired in time.

On this machine the shm ring bound itself swings by 5x between runs (vCPU
placement), so comparing two separate `sluice perf` sweeps says little. This
program alternates one-repeat runs of `sluice perf --push-batch 1` and
`--push-batch N` and reports, per shape and record size:
  - the median records/s of each,
  - the median of batch/single over adjacent pairs (same minute, same placement
    luck as far as the machine allows),
  - each one's median paired ratio to the shm ring bound of its own run (the
    issue's goals: 2x2 >= 0.5 of the ring, 1x1 >= 1x).
Exactly-once is checked by sluice perf in every run (counts and key
checksums); a failed run fails this program.

Usage: bench/perf/push_batch.py [--sluice build/bin/sluice] [--pairs 7]
       [--sizes 8,16,64] [--shapes 1x1,2x2,4x4] [--batch 256] [--mbytes 256]
       [--json out.json]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run_once(args, batch, out):
    cmd = [args.sluice, "perf", "--modes", "bandwidth", "--sizes", args.sizes, "--shapes", args.shapes,
           "--repeats", "1", "--mbytes", str(args.mbytes), "--push-batch", str(batch), "--json", out]
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit("push_batch.py: run failed: " + " ".join(cmd) + "\n" + r.stderr[-2000:])
    with open(out) as f:
        report = json.load(f)
    points = {}
    for row in report["results"]:
        flow = row["flow"]["records_per_s"]["median"]
        ring = next(p for p in row["peers"] if p["name"] == "shm_ring")["metrics"]["records_per_s"]["median"]
        points[(row["shape"], row["record_bytes"])] = (flow, ring)
    return " ".join(cmd), points


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sluice", default="build/bin/sluice")
    ap.add_argument("--pairs", type=int, default=7)
    ap.add_argument("--sizes", default="8,16,64")
    ap.add_argument("--shapes", default="1x1,2x2,4x4")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--mbytes", type=float, default=256)
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.pairs < 1 or args.batch < 2:
        sys.exit("push_batch.py: --pairs must be at least 1 and --batch at least 2")

    samples = {}  # (shape, bytes) -> list of (single, single_ring, batch, batch_ring)
    commands = []
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "run.json")
        for i in range(args.pairs):
            # Alternate which goes first, so neither always gets the warmer machine.
            order = [1, args.batch] if i % 2 == 0 else [args.batch, 1]
            got = {}
            for b in order:
                cmd, got[b] = run_once(args, b, out)
                if i == 0:
                    commands.append(cmd.replace(out, "RUN.json"))
            for key in got[1]:
                samples.setdefault(key, []).append(got[1][key] + got[args.batch][key])
            print(f"push_batch.py: pair {i + 1}/{args.pairs} done", file=sys.stderr)

    med = statistics.median
    rows = []
    print(f"single pushes against runs of {args.batch} (push(span)), {args.pairs} pairs, medians")
    print("shape  B  single Mrec/s  run Mrec/s  run/single (paired)  single/ring  run/ring")
    for (shape, size), s in sorted(samples.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        single = med([x[0] for x in s])
        batch = med([x[2] for x in s])
        gain = med([x[2] / x[0] for x in s])
        single_ring = med([x[0] / x[1] for x in s])
        batch_ring = med([x[2] / x[3] for x in s])
        rows.append({"shape": shape, "record_bytes": size, "single_records_per_s": single,
                     "run_records_per_s": batch, "run_over_single_paired": gain,
                     "single_over_ring_paired": single_ring, "run_over_ring_paired": batch_ring,
                     "pairs": len(s)})
        print(f"{shape:5} {size:3} {single / 1e6:14.1f} {batch / 1e6:11.1f} {gain:20.2f} {single_ring:12.2f}"
              f" {batch_ring:9.2f}")
    print("commands:")
    for c in commands:
        print("  " + c)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"batch": args.batch, "pairs": args.pairs, "commands": commands, "rows": rows,
                       "loadavg": open("/proc/loadavg").read().split()[:3]}, f, indent=2)


if __name__ == "__main__":
    main()
