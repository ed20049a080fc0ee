#!/usr/bin/env python3
"""How fast a killed (or stopped) rank becomes a new membership view on the survivors.

Starts `sluice run -n N --keep-going -- sluice-test-membership-program --watch`
again and again; after a random delay, SIGKILLs one random rank's process from
here (no rank knows which or when), noting CLOCK_REALTIME just before the
kill, and reads the moment each survivor printed the next epoch. Prints the
p50, p99 and max of (survivor saw the view) - (kill), over every survivor of
every run, and the load average. With --signal stop it sends SIGSTOP
instead: the rank goes silent, and the registry declares it dead after the
peer timeout (--peer-timeout-ms, SLUICE_PEER_TIMEOUT_MS of the job); the
result is also given as a multiple of that timeout.

    python3 bench/membership/view_latency.py --runs 30 --build build
    python3 bench/membership/view_latency.py --runs 20 --signal stop --peer-timeout-ms 1000
"""
import argparse
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import threading
import time


def one_run(build, ranks, transport, rng, sig, peer_timeout_ms):
    env = dict(os.environ, SLUICE_TRANSPORT=transport, SLUICE_PEER_TIMEOUT_MS=str(peer_timeout_ms))
    cmd = [f"{build}/bin/sluice", "run", "-n", str(ranks), "--keep-going", "--timeout", "60", "--",
           f"{build}/bin/sluice-test-membership-program", "--watch", "--rounds", "100",
           "--interval-ms", "20"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines = []
    pids = {}
    got_pids = threading.Event()

    def reader():
        for line in p.stdout:
            lines.append(line)
            m = re.search(r"PID rank (\d+) pid (\d+)", line)
            if m:
                pids[int(m.group(1))] = int(m.group(2))
                if len(pids) == ranks:
                    got_pids.set()

    t = threading.Thread(target=reader)
    t.start()
    if not got_pids.wait(30):
        p.kill()
        t.join()
        raise SystemExit("the ranks did not start:\n" + "".join(lines))
    time.sleep(rng.uniform(0.2, 1.2))
    victim = rng.randrange(ranks)
    killed_us = time.time_ns() // 1000
    os.kill(pids[victim], sig)
    p.wait()
    t.join()
    out = "".join(lines)
    lat = []
    for r in range(ranks):
        if r == victim:
            continue
        m = re.search(rf"EPOCH rank {r} epoch 1 at_us (\d+)", out)
        if not m:
            raise SystemExit(f"rank {r} never saw view 1:\n{out}")
        lat.append((int(m.group(1)) - killed_us) / 1000.0)
    return lat


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--build", default="build")
    ap.add_argument("--transport", default="shm", choices=["shm", "ofi"])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--signal", default="kill", choices=["kill", "stop"])
    ap.add_argument("--peer-timeout-ms", type=int, default=5000)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    sig = signal.SIGKILL if a.signal == "kill" else signal.SIGSTOP
    lat = []
    for _ in range(a.runs):
        lat += one_run(a.build, a.ranks, a.transport, rng, sig, a.peer_timeout_ms)
    lat.sort()
    p99 = lat[min(len(lat) - 1, int(round(0.99 * (len(lat) - 1))))]
    t = a.peer_timeout_ms
    print(f"{a.signal} -> survivor's new view, {a.transport}, {a.runs} runs of {a.ranks} ranks, "
          f"{len(lat)} survivors: p50 {statistics.median(lat):.2f} ms, p99 {p99:.2f} ms, "
          f"max {lat[-1]:.2f} ms; p99 = {p99 / t:.2f} x the peer timeout of {t} ms "
          f"(load average {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    sys.exit(main())
