#!/usr/bin/env python3
"""The RESP path of sluice-kv against a single unreplicated redis-server, in
one run on the same cores, both driven by redis-benchmark (Debian's
redis-tools). The servers are:

  redis-server                    (no persistence; the speed ceiling of one
                                   node without replication)
  sluice-kv multipaxos (3 replicas + 1 gateway rank with --gateway-clients
                       closed-loop clients, sluice run, shm)
  sluice-kv nopaxos    (the same, NOPaxos)

For each, `redis-benchmark -t set,get -n N -c C -P P -q` runs --repeats
times. The script prints the median requests/s per operation, the CPU
seconds the server's processes used (all ranks for sluice-kv), the requests
per server CPU-second, and the ratio to redis-server. sluice-kv's jobs end
with SHUTDOWN, and their own checks must pass.

  bench/kv/resp_bench.py [--build build] [--requests 50000] [--clients 4]
                         [--pipeline 16] [--repeats 3] [--gateway-clients 4]

Installs redis-server and redis-tools with scripts/install-deps.sh first.
"""
import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from proc_cpu import cpu_seconds, descendants  # noqa: E402


def wait_port(port, seconds=30):
    end = time.time() + seconds
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            time.sleep(0.1)
    return False


def benchmark(port, args):
    """{'SET': rps, 'GET': rps} of one redis-benchmark run."""
    out = subprocess.run(
        ["redis-benchmark", "-p", str(port), "-t", "set,get", "-n", str(args.requests), "-c",
         str(args.clients), "-P", str(args.pipeline), "-q"],
        capture_output=True, text=True, timeout=600, check=True).stdout
    rps = {}
    for m in re.finditer(r"(SET|GET): ([0-9.]+) requests per second", out.replace("\r", "\n")):
        rps[m.group(1)] = float(m.group(2))
    return rps


def run_server(name, argv, port, pids_of, stop, args):
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        if not wait_port(port):
            raise RuntimeError(f"{name} did not listen on port {port}")
        pids = pids_of(proc.pid)
        cpu0 = cpu_seconds(pids)
        runs = [benchmark(port, args) for _ in range(args.repeats)]
        cpu = cpu_seconds(pids_of(proc.pid)) - cpu0
        stop(port)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    result = {op: statistics.median(r[op] for r in runs) for op in ("SET", "GET")}
    result["cpu"] = cpu
    result["requests"] = 2 * args.requests * args.repeats
    result["output"] = out
    return result


def redis_cli(port, *words):
    subprocess.run(["redis-cli", "-p", str(port), *words], capture_output=True, timeout=60)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--requests", type=int, default=50000)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--pipeline", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--transport", default="shm", choices=["shm", "ofi"])
    ap.add_argument("--gateway-clients", type=int, default=4,
                    help="closed-loop clients behind the gateway (--clients-per-rank)")
    args = ap.parse_args()
    subprocess.run([os.path.join(ROOT, "scripts", "install-deps.sh"), "redis-server",
                    "redis-tools"], check=True, stdout=subprocess.DEVNULL)
    sluice = os.path.join(args.build, "bin", "sluice")
    kv = os.path.join(args.build, "bin", "sluice-kv")
    for path in (sluice, kv):
        if not os.access(path, os.X_OK):
            sys.exit(f"resp_bench: {path} is missing: build first (make build)")

    results = {}
    results["redis-server"] = run_server(
        "redis-server", ["redis-server", "--port", "6391", "--save", "", "--appendonly", "no"],
        6391, lambda pid: [pid], lambda port: redis_cli(port, "shutdown", "nosave"), args)
    env = dict(os.environ, SLUICE_TRANSPORT=args.transport)
    os.environ.update(env)
    for protocol, port in (("multipaxos", 6392), ("nopaxos", 6393)):
        results[f"sluice-kv {protocol}"] = run_server(
            f"sluice-kv {protocol}",
            [sluice, "run", "-n", "4", "--", kv, "run", "--protocol", protocol, "--resp-port",
             str(port), "--clients-per-rank", str(args.gateway_clients), "--enable-shutdown",
             "local"], port, descendants,
            lambda p: redis_cli(p, "shutdown"), args)

    load = os.getloadavg()
    print(f"redis-benchmark -t set,get -n {args.requests} -c {args.clients} -P {args.pipeline} "
          f"-q, median of {args.repeats}; sluice-kv over {args.transport} with "
          f"{args.gateway_clients} gateway clients; "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    base = results["redis-server"]
    print(f"{'server':24} {'SET/s':>10} {'GET/s':>10} {'cpu s':>7} {'req/cpu-s':>10} "
          f"{'SET vs redis':>13}")
    failed = False
    for name, r in results.items():
        per_cpu = r["requests"] / r["cpu"] if r["cpu"] > 0 else 0
        print(f"{name:24} {r['SET']:10.0f} {r['GET']:10.0f} {r['cpu']:7.2f} {per_cpu:10.0f} "
              f"{r['SET'] / base['SET']:12.3f}x")
        if name.startswith("sluice-kv") and "history linearizable" not in r["output"]:
            print(f"{name}: the job's checks did not pass:\n{r['output']}")
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
