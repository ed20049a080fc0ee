#!/usr/bin/env python3
"""Throughput-latency curves of sluice-kv: YCSB workload A (or --workload)
with 1, 2, 4, ... closed-loop clients (--clients-per-rank on 2 client ranks),
for Multi-Paxos and NOPaxos with 3 (and --replicas) replicas, over one
transport. Each point is one `sluice run` job whose rank 0 checks it; the
script prints, per point, the throughput and the p50/p99 latency of gets and
puts, as rank 0 measured them, and the job's CPU seconds (all ranks), so that
points can be compared per CPU-second as well as per wall second.

  bench/kv/curve.py [--build build] [--transport shm|ofi] [--replicas 3,5]
                    [--clients 2,4,8,16,32,64] [--ops-total 20000] [--workload a]
"""
import argparse
import os
import re
import resource
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def point(args, protocol, replicas, clients):
    per_rank = max(1, clients // 2)
    ops = max(1, args.ops_total // (2 * per_rank))
    argv = [os.path.join(args.build, "bin", "sluice"), "run", "-n", str(replicas + 2), "--",
            os.path.join(args.build, "bin", "sluice-kv"), "run", "--protocol", protocol,
            "--replicas", str(replicas), "--clients-per-rank", str(per_rank), "--ops", str(ops),
            "--keys", "1000", "--workload", args.workload, "--distribution", "zipf"]
    env = dict(os.environ, SLUICE_TRANSPORT=args.transport)
    cpu0 = children_cpu()
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900).stdout
    cpu = children_cpu() - cpu0
    if "history linearizable" not in out or "job: every operation" not in out:
        sys.exit(f"curve: the job's checks did not pass:\n{' '.join(argv)}\n{out}")
    tput = float(re.search(r"throughput: \d+ operations in [0-9.]+ s = (\d+) ops/s", out).group(1))
    lat = {m.group(1): (int(m.group(2)), int(m.group(3)))
           for m in re.finditer(r"latency (\w+): \d+ operations, p50 (\d+) us, p99 (\d+) us", out)}
    total = 2 * per_rank * ops
    return tput, lat, cpu, total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--transport", default="shm", choices=["shm", "ofi"])
    ap.add_argument("--replicas", default="3")
    ap.add_argument("--clients", default="2,4,8,16,32,64")
    ap.add_argument("--ops-total", type=int, default=20000)
    ap.add_argument("--workload", default="a", choices=["a", "b", "c", "mixed"])
    args = ap.parse_args()
    load = os.getloadavg()
    print(f"sluice-kv YCSB {args.workload.upper()} (zipf, 1000 keys), {args.ops_total} operations "
          f"per point, over {args.transport}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"{'protocol':11} {'repl':>4} {'clients':>7} {'ops/s':>8} {'get p50':>8} {'get p99':>8} "
          f"{'put p50':>8} {'put p99':>8} {'cpu s':>7} {'ops/cpu-s':>10}")
    for replicas in [int(r) for r in args.replicas.split(",")]:
        for protocol in ("multipaxos", "nopaxos"):
            for clients in [int(c) for c in args.clients.split(",")]:
                tput, lat, cpu, total = point(args, protocol, replicas, clients)
                g, p = lat.get("get", (0, 0)), lat.get("put", (0, 0))
                print(f"{protocol:11} {replicas:4} {clients:7} {tput:8.0f} {g[0]:8} {g[1]:8} "
                      f"{p[0]:8} {p[1]:8} {cpu:7.2f} {total / cpu if cpu else 0:10.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
