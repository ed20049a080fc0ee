"""Runs sluice's Python shuffle (bench/python/shuffle.py) and its peers
(bench/python/shuffle_peers.py: mpi4py with buffers and pickled, Dask's p2p
shuffle, Ray Data's hash repartition) on the same 1 GiB of 16-byte records, alternating, and prints the
medians as a table (a benchmark, not a test; docs/python.md has the results):

  bench/python/install.sh
  cmake --build build --target sluice_tool _sluice
  .venv/bin/python bench/python/compare.py --ranks 2,4 --repeats 3

Each run prints one JSON line; all of them go to --out (JSON lines) too.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PY = str(ROOT / ".venv" / "bin" / "python")
RECORD_BYTES = 16


def commands(ranks, records, segment_bytes):
    sluice = [str(ROOT / "build" / "bin" / "sluice"), "run", "-n", str(ranks), "--", PY,
              str(ROOT / "bench" / "python" / "shuffle.py"), "--records", str(records),
              "--segment-bytes", str(segment_bytes)]
    mpirun = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks), PY,
              str(ROOT / "bench" / "python" / "shuffle_peers.py")]
    return {
        "sluice": sluice,
        "mpi-buffers": mpirun + ["mpi-buffers", "--records", str(records)],
        "mpi-pickle": mpirun + ["mpi-pickle", "--records", str(records)],
        "dask": [PY, str(ROOT / "bench" / "python" / "shuffle_peers.py"), "dask", "--ranks",
                 str(ranks), "--records", str(records)],
        "ray": [PY, str(ROOT / "bench" / "python" / "shuffle_peers.py"), "ray", "--ranks",
                str(ranks), "--records", str(records)],
    }


def run(cmd):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "build" / "python"))
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        sys.exit(f"compare: {' '.join(cmd)} exited {out.returncode}:\n{out.stdout}\n{out.stderr}")
    lines = []
    for line in out.stdout.splitlines():
        line = line.split("] ", 1)[1] if line.startswith("[") else line
        if line.startswith("{"):
            lines.append(json.loads(line))
    return lines


def normalised(line):
    # shuffle.py's and shuffle_peers.py's field names differ a little.
    return {
        "way": line["way"],
        "ranks": line["ranks"],
        "records_per_s": line["records_per_s"],
        "records_per_cpu_s": line["records_per_cpu_s"],
        "seconds": line.get("wall_s", line.get("seconds")),
        "cpu_seconds": line.get("cpu_s", line.get("cpu_seconds")),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", default="2,4", help="process counts, a comma list")
    p.add_argument("--repeats", type=int, default=3, help="alternations of every way")
    p.add_argument("--segment-bytes", type=int, default=65536, help="sluice's segment payload")
    p.add_argument("--ways", default="sluice,mpi-buffers,mpi-pickle,dask")
    p.add_argument("--total-mib", type=int, default=1024, help="records in all, in MiB")
    p.add_argument("--out", default="build/python_peers.jsonl")
    args = p.parse_args()
    results = []
    with open(args.out, "w") as out:
        for ranks in [int(r) for r in args.ranks.split(",")]:
            records = args.total_mib * (1 << 20) // RECORD_BYTES // ranks
            cmds = commands(ranks, records, args.segment_bytes)
            for rep in range(args.repeats):
                for way in args.ways.split(","):
                    for line in run(cmds[way]):
                        n = normalised(line)
                        n["repeat"] = rep
                        print(json.dumps(n), flush=True)
                        out.write(json.dumps(n) + "\n")
                        results.append(n)
    print("\n| ranks | way | M records/s (median, min-max) | M records per CPU-s | seconds |")
    print("|---|---|---|---|---|")
    keys = sorted({(r["ranks"], r["way"]) for r in results}, key=lambda k: (k[0], k[1]))
    for ranks, way in keys:
        rs = [r for r in results if r["ranks"] == ranks and r["way"] == way]
        rate = [r["records_per_s"] / 1e6 for r in rs]
        cpu = [r["records_per_cpu_s"] / 1e6 for r in rs]
        secs = [r["seconds"] for r in rs]
        print(f"| {ranks} | {way} | {statistics.median(rate):.1f} ({min(rate):.1f}-{max(rate):.1f}) "
              f"| {statistics.median(cpu):.1f} | {statistics.median(secs):.3f} |")


if __name__ == "__main__":
    main()
