#!/usr/bin/env python3
"""Whether a loaded sluice-kv job elects leaders it does not need: a job of
3 replicas and one RESP gateway rank (sluice run, shm, the default timeouts
unless --kv-args says otherwise) driven by redis-benchmark (SET and GET,
pipelined) back to back for --minutes, then ended with SHUTDOWN. Nothing is
killed or stopped, so every leader change is spurious: the script counts
the "leads view" lines the replicas print when one takes the lead and the
views the replicas end in (0: no election ever ran), and exits non-zero if
there was any, or if the job's own end-of-run checks fail.

  bench/kv/steady.py [--build build] [--protocol multipaxos|nopaxos]
                     [--minutes 10] [--clients 32] [--pipeline 16]
                     [--kv-args '--election-timeout-ms 400']

Run it beside other load to make it harder (two at once, one per protocol,
put 8 processes on this machine's 2 cores).
"""
import argparse
import os
import re
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import failover  # noqa: E402  (start_job: the same job as its failover runs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--protocol", default="multipaxos", choices=["multipaxos", "nopaxos"])
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--pipeline", type=int, default=16)
    ap.add_argument("--kv-args", default="", help="more sluice-kv run arguments")
    a = ap.parse_args()
    job, port, lines, t0, reader = failover.start_job(
        a.build, a.protocol, a.kv_args.split(), ["--timeout", str(int(a.minutes * 60 + 300))],
        "steady")
    requests = 0
    rounds = 0
    end = t0 + a.minutes * 60
    while time.monotonic() < end:
        n = 200000
        subprocess.run(["redis-benchmark", "-p", str(port), "-t", "set,get", "-n", str(n), "-c",
                        str(a.clients), "-P", str(a.pipeline), "-r", "1000", "-q"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
        requests += 2 * n
        rounds += 1
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"*1\r\n$8\r\nSHUTDOWN\r\n")
        try:
            s.recv(100)
        except OSError:
            pass
    rc = job.wait(300)
    reader.join(10)
    text = "".join(lines)
    leads = [line.strip() for line in lines if "leads view" in line]
    # (NOPaxos: a replica whose kv-order ring stayed full for a quarter of
    # the election timeout misses requests, as lost ones; not a failure.)
    skips = sum(1 for line in lines if "misses segments" in line)
    views = re.findall(r"replica (\d+): applied \d+ entries, digest \w+, view (\d+)", text)
    ok = rc == 0 and "replicas agree: yes" in text
    print(f"{a.protocol}: {a.minutes:g} min loaded, {rounds} redis-benchmark rounds, "
          f"{requests} requests; job {'passed its checks' if ok else 'FAILED (rc %d)' % rc}; "
          f"leader changes: {len(leads)}; replicas skipped by kv-order: {skips} times; "
          f"final views: "
          f"{', '.join(f'replica {r} view {v}' for r, v in views) or 'none reported'}")
    for line in leads:
        print("  " + line)
    if not ok:
        sys.stdout.write(text[-4000:])
    if not ok or leads or not views or any(v != "0" for _, v in views):
        sys.exit(1)


if __name__ == "__main__":
    main()
