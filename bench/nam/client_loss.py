#!/usr/bin/env python3
"""sluice-nam's throughput before, during and after a compute rank's loss.

Runs `sluice run -n 4 --keep-going --kill 3@T -- sluice-nam --timeline ...`
(RSI: memory server 0, compute ranks 1-3 with --clients each; or --protocol
2pc) several times. The launcher kills rank 3 unannounced; the survivors'
clients recover its clients and go on. From the reporter's timeline (the
surviving clients' commits per 100 ms) and the launcher's injection time it
prints, per run and as medians:

  before     the survivors' txn/s from 0.5 s into the run until the kill
  stalled    how long after the kill the survivors stayed under half of
             `before` (the time to recover: the recovery timeout, finding
             the dead clients' locks and timestamps, rolling them back or
             forward)
  after      the survivors' txn/s from then on (its last 0.3 s left out)
  lost       acknowledged transactions lost: the invariant check ties every
             survivor's committed checkouts to the orders in the tables, so a
             run whose invariants hold (and no record is locked) lost none

With --restart the launcher starts rank 3 again (`--restarts 1`) and
sluice-nam gets `--spare-clients` (one rank's clients): the new process runs
spare clients for the rest of the run, whose commits the timeline includes
from when they started. It then also prints `replaced`, how long after the
kill the spare clients started, and their commits.

    python3 bench/nam/client_loss.py --build build --runs 5
    python3 bench/nam/client_loss.py --build build --protocol 2pc --transport ofi
    python3 bench/nam/client_loss.py --build build --runs 5 --restart
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys


def one_run(a):
    env = dict(os.environ, SLUICE_TRANSPORT=a.transport)
    mem = ["--memory-servers", "2"] if a.protocol == "2pc" else []
    ranks = 5 if a.protocol == "2pc" else 4
    victim = ranks - 1
    restart = ["--restarts", "1"] if a.restart else []
    spares = ["--spare-clients", str(a.clients)] if a.restart else []
    cmd = [os.path.join(a.build, "bin", "sluice"), "run", "-n", str(ranks), "--keep-going",
           *restart, "--timeout", "120", "--grace", "30", "--kill", "%d@%g" % (victim, a.kill_at),
           "--", os.path.join(a.build, "bin", "sluice-nam"), "--protocol", a.protocol, *mem, *spares,
           "--clients", str(a.clients), "--products", "1000", "--record-bytes", "32",
           "--txns", "0", "--seconds", str(a.seconds), "--think-us", str(a.think_us),
           "--recovery-timeout-ms", str(a.recovery_timeout_ms), "--json", "--timeline"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=180)
    out = p.stdout + p.stderr
    inj = re.search(r"injecting --kill \S+: SIGKILL to rank \d+ \(pid \d+, at ([0-9.]+)\)", out)
    tl = re.search(r"timeline: (\{.*\})", out)
    if p.returncode != 0 or not inj or not tl:
        sys.exit("a run failed (exit %d):\n%s" % (p.returncode, out[-3000:]))
    t = json.loads(tl.group(1))
    step = t["interval_ms"] / 1000.0
    rate = [c / step for c in t["commits"]]
    kill = float(inj.group(1)) - t["start_unix"]  # seconds into the run
    k = int(kill / step)
    before = statistics.median(rate[int(0.5 / step):k]) if k > int(0.5 / step) else 0
    # From the first interval wholly after the kill (the one it lands in
    # holds commits from before it).
    i = k + 1
    while i < len(rate) and rate[i] < before / 2:
        i += 1
    stalled = max(0.0, i * step - kill)
    tail = rate[i:max(i + 1, len(rate) - int(0.3 / step))]
    after = statistics.median(tail) if tail else 0
    ok = "invariants: OK" in out and re.search(r'"locked":0\b', out) is not None
    r = {"before": before, "stalled": stalled, "after": after, "kill": kill, "ok": ok}
    if a.restart:
        res = json.loads(re.search(r"(\{\"protocol\".*\})", out).group(1))
        started = res["replacement_start_unix"]
        r["replaced"] = started - t["start_unix"] - kill if started > 0 else float("nan")
        r["spare_commits"] = res["replacement_commits"]
        r["ok"] = ok and res["spare_clients_run"] == a.clients
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--protocol", choices=["rsi", "2pc"], default="rsi")
    ap.add_argument("--transport", choices=["shm", "ofi"], default="shm")
    ap.add_argument("--clients", type=int, default=2, help="client threads per compute rank")
    ap.add_argument("--seconds", type=float, default=6)
    ap.add_argument("--kill-at", type=float, default=2.5,
                    help="seconds after every rank joined (the launcher's clock)")
    ap.add_argument("--think-us", type=int, default=200)
    ap.add_argument("--recovery-timeout-ms", type=int, default=500)
    ap.add_argument("--restart", action="store_true",
                    help="start the killed rank again with spare client slots (RSI)")
    a = ap.parse_args()
    if a.restart and a.protocol != "rsi":
        ap.error("--restart needs --protocol rsi (spare client slots)")
    rows = []
    for n in range(a.runs):
        r = one_run(a)
        rows.append(r)
        print("run %d: killed at %.2f s into the run; before %.0f txn/s, stalled %.2f s, after "
              "%.0f txn/s; invariants %s" % (n, r["kill"], r["before"], r["stalled"], r["after"],
                                             "OK, lost 0" if r["ok"] else "FAILED") +
              ("; replaced %.2f s after the kill, %d spare commits" % (r["replaced"], r["spare_commits"])
               if a.restart else ""), flush=True)
    med = lambda k: statistics.median(x[k] for x in rows)
    print("median of %d (%s, %s, %d compute ranks x %d clients, recovery timeout %d ms): "
          "before %.0f txn/s, stalled %.2f s, after %.0f txn/s (%.2fx before); runs with "
          "invariants OK: %d of %d; load average %.2f" % (
              a.runs, a.protocol, a.transport, 3, a.clients, a.recovery_timeout_ms, med("before"),
              med("stalled"), med("after"), med("after") / med("before") if med("before") else 0,
              sum(x["ok"] for x in rows), a.runs, os.getloadavg()[0]) +
          ("; replaced %.2f s after the kill" % med("replaced") if a.restart else ""))
    return 0 if all(x["ok"] for x in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
