#!/usr/bin/env python3
"""Throughput-latency curves of sluice-kv: YCSB workload A (or --workload)
with 1, 2, 4, ... closed-loop clients (--clients-per-rank on 2 client ranks),
for Multi-Paxos and NOPaxos with 3 (and --replicas) replicas, over one
transport. Each point is one job whose rank 0 checks it; the script prints,
per point, the throughput and the p50/p99 latency of gets and puts, as rank 0
measured them, and the job's CPU seconds (all ranks), so that points can be
compared per CPU-second as well as per wall second.

  bench/kv/curve.py [--build build] [--transport shm|ofi] [--netns] [--replicas 3,5]
                    [--clients 2,4,8,16,32,64] [--ops-total 20000] [--workload a]
                    [--timeout 900]

By default each point is one `sluice run` job on this host (its CPU seconds
include the launcher and its registry). With --netns (needs --transport ofi
and root; without root or `ip` it prints "skipped: ..." and exits 0) every
replica runs in a network namespace of its own and both client ranks in
another, as separate hosts joined by a bridge (bench/kv/netns.py, addresses
198.18.210.0/24); a `sluice registry` runs in the clients' host, and the
script starts every rank itself with the bootstrap environment
(SLUICE_RANK, SLUICE_WORLD_SIZE, SLUICE_REGISTRY, SLUICE_SECRET) plus
SLUICE_TRANSPORT=ofi and SLUICE_OFI_PROVIDER=tcp (unless set). Its CPU
seconds are the rank processes' alone. The namespaces share this machine's
CPUs, so unless SLUICE_SPIN is set the ranks get SLUICE_SPIN=0 when the job
has more ranks than the machine has CPUs, as on one host (each namespace
alone would count one rank and spin). Namespaces, links and processes are
removed on exit, failure, Ctrl-C or SIGTERM; every job is bounded by
--timeout seconds.
"""
import argparse
import os
import re
import resource
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import netns  # noqa: E402  bench/kv/netns.py: simulated hosts for --netns

# The last line rank 0 prints when the job's own checks pass.
JOB_OK = "job: every operation completed exactly once; replicas identical; history linearizable"


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def kv_argv(args, protocol, replicas, per_rank, ops):
    """`protocol` is multipaxos or nopaxos, or either with ":N" for sluice-kv's
    --batch N (nopaxos:1 numbers every request on its own, as before batches)."""
    name, _, batch = protocol.partition(":")
    argv = [os.path.join(os.path.abspath(args.build), "bin", "sluice-kv"), "run", "--protocol", name,
            "--replicas", str(replicas), "--clients-per-rank", str(per_rank), "--ops", str(ops),
            "--keys", "1000", "--workload", args.workload, "--distribution", "zipf"]
    return argv + (["--batch", batch] if batch else [])


def rank0_summary(text, prefixed):
    """Rank 0's stdout lines: under `sluice run` those prefixed "[0] " (the
    prefix removed), else all of `text`."""
    lines = text.splitlines()
    if prefixed:
        lines = [line[4:] for line in lines if line.startswith("[0] ")]
    return [line.rstrip() for line in lines]


def parse(lines, failure):
    if JOB_OK not in lines:
        sys.exit(f"curve: the job's checks did not pass:\n{failure()}")
    text = "\n".join(lines)
    m = re.search(r"throughput: \d+ operations in [0-9.]+ s = (\d+) ops/s", text)
    if not m:
        sys.exit(f"curve: rank 0 printed no throughput:\n{failure()}")
    lat = {m2.group(1): (int(m2.group(2)), int(m2.group(3)))
           for m2 in re.finditer(r"latency (\w+): \d+ operations, p50 (\d+) us, p99 (\d+) us", text)}
    return float(m.group(1)), lat


def netns_env(world):
    env = dict(os.environ, SLUICE_TRANSPORT="ofi")
    env.setdefault("SLUICE_OFI_PROVIDER", "tcp")
    if "SLUICE_SPIN" not in env and world > (os.cpu_count() or 1):
        env["SLUICE_SPIN"] = "0"
    return env


def point(args, protocol, replicas, clients, hosts=None):
    """One job; returns (ops/s, {type: (p50 us, p99 us)}, CPU seconds, operations).
    With `hosts` (a netns.Hosts), across them, else under `sluice run`."""
    per_rank = max(1, clients // 2)
    ops = max(1, args.ops_total // (2 * per_rank))
    total = 2 * per_rank * ops
    timeout = getattr(args, "timeout", 900)
    kv = kv_argv(args, protocol, replicas, per_rank, ops)
    sluice = os.path.join(os.path.abspath(args.build), "bin", "sluice")
    if hosts is None:
        argv = [sluice, "run", "-n", str(replicas + 2), "--"] + kv
        env = dict(os.environ, SLUICE_TRANSPORT=args.transport)
        cpu0 = children_cpu()
        try:
            r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
        except subprocess.TimeoutExpired:
            sys.exit(f"curve: the job did not end within {timeout} s (--timeout):\n{' '.join(argv)}")
        cpu = children_cpu() - cpu0
        failure = lambda: f"{' '.join(argv)}\nexit {r.returncode}\n{r.stdout}{r.stderr}"  # noqa: E731
        if r.returncode != 0:
            sys.exit(f"curve: the job failed:\n{failure()}")
        tput, lat = parse(rank0_summary(r.stdout, prefixed=True), failure)
        return tput, lat, cpu, total
    clients_host = hosts.count - 1
    placement = list(range(replicas)) + [clients_host, clients_host]
    job = netns.run_job(hosts, placement, kv, netns_env(len(placement)), registry_host=clients_host,
                        timeout=timeout, sluice=sluice)
    left = hosts.leftovers()
    if left:
        hosts.kill_all()
    failure = lambda: f"{' '.join(kv)}\n{job.describe()}"  # noqa: E731
    if not job.ok():
        sys.exit(f"curve: the job failed or timed out (--timeout {timeout}):\n{failure()}")
    if left:
        sys.exit(f"curve: processes {left} were still running in the namespaces after the job")
    tput, lat = parse(rank0_summary(job.ranks[0].stdout, prefixed=False), failure)
    return tput, lat, job.cpu_seconds(), total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--transport", default="shm", choices=["shm", "ofi"])
    ap.add_argument("--netns", action="store_true",
                    help="each replica in a network namespace of its own, the clients in another "
                         "(needs --transport ofi and root)")
    ap.add_argument("--replicas", default="3")
    ap.add_argument("--clients", default="2,4,8,16,32,64")
    ap.add_argument("--ops-total", type=int, default=20000)
    ap.add_argument("--workload", default="a", choices=["a", "b", "c", "mixed"])
    ap.add_argument("--timeout", type=float, default=900, help="seconds per job (default 900)")
    ap.add_argument("--protocols", default="multipaxos,nopaxos",
                    help="comma-separated; NAME:N passes --batch N (e.g. nopaxos:1, one request "
                         "per sequence number)")
    args = ap.parse_args()
    replica_counts = [int(r) for r in args.replicas.split(",")]
    client_counts = [int(c) for c in args.clients.split(",")]
    if args.netns and args.transport != "ofi":
        ap.error("--netns runs the ranks on separate (simulated) hosts: it needs --transport ofi")
    if args.netns:
        why = netns.unavailable()
        if why:
            print(f"curve.py: skipped: {why}", file=sys.stderr)
            return 0
    for b in ("sluice", "sluice-kv"):
        if not os.access(os.path.join(args.build, "bin", b), os.X_OK):
            sys.exit(f"curve: no {b} in {os.path.join(args.build, 'bin')} (build the sluice_tool and "
                     f"sluice-kv targets, or pass --build)")
    hosts = None
    if args.netns:
        netns.exit_on_signals()
        hosts = netns.Hosts(max(replica_counts) + 1)
        try:
            hosts.__enter__()
        except netns.Unavailable as e:
            print(f"curve.py: skipped: cannot create network namespaces here: {e}", file=sys.stderr)
            return 0
        except RuntimeError as e:  # an `ip` command failed, or the hosts cannot reach each other
            sys.exit(f"curve.py: cannot set up the namespaces: {e}")
    try:
        load = os.getloadavg()
        where = f"over {args.transport}"
        if hosts is not None:
            spin = netns_env(max(replica_counts) + 2).get("SLUICE_SPIN", "auto")
            where = (f"over ofi ({os.environ.get('SLUICE_OFI_PROVIDER', 'tcp')}) across network "
                     f"namespaces: replica i in {netns.SUBNET}.(i+1), the 2 client ranks and the "
                     f"registry in {hosts.ip(hosts.count - 1)}, one bridge, MTU {hosts.mtu()}, "
                     f"SLUICE_SPIN {spin}")
        print(f"sluice-kv YCSB {args.workload.upper()} (zipf, 1000 keys), {args.ops_total} operations "
              f"per point, {where}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
        print(f"{'protocol':11} {'repl':>4} {'clients':>7} {'ops/s':>8} {'get p50':>8} {'get p99':>8} "
              f"{'put p50':>8} {'put p99':>8} {'cpu s':>7} {'ops/cpu-s':>10}", flush=True)
        for replicas in replica_counts:
            for protocol in args.protocols.split(","):
                for clients in client_counts:
                    tput, lat, cpu, total = point(args, protocol, replicas, clients, hosts)
                    g, p = lat.get("get", (0, 0)), lat.get("put", (0, 0))
                    print(f"{protocol:11} {replicas:4} {clients:7} {tput:8.0f} {g[0]:8} {g[1]:8} "
                          f"{p[0]:8} {p[1]:8} {cpu:7.2f} {total / cpu if cpu else 0:10.0f}", flush=True)
    except netns.Interrupted as e:
        print(f"curve.py: stopped by signal {e.code - 128}; removing the namespaces", file=sys.stderr)
        raise
    finally:
        if hosts is not None:
            hosts.__exit__(None, None, None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
