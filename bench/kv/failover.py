#!/usr/bin/env python3
"""How long a sluice-kv job stops acknowledging writes when its leader's
process dies: a job of 3 replicas and one RESP gateway rank (sluice run
--keep-going, shm), one client writing SETs in a closed loop over a raw
socket; after --warmup seconds the leader (rank 0; for NOPaxos also the
sequencer) is sent SIGKILL, or SIGSTOP (then the launcher's registry
declares it lost after its heartbeat timeout), from outside. The stall is
the time from the signal to the first SET acknowledged after it. Each run
also checks that no acknowledged write was lost: every key's last
acknowledged value must be what a GET returns at the end.

  bench/kv/failover.py [--build build] [--protocol multipaxos|nopaxos]
                       [--signal KILL|STOP] [--repeats 10] [--warmup 1.5]
                       [--kv-args '--election-timeout-ms 500 --retry-ms 500']

Prints each run's stall and the median and the largest (with 10 runs, the
largest is the p90; give --repeats 100 for a p99).
"""
import argparse
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Resp:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.buf = b""

    def call(self, *args):
        msg = b"*%d\r\n" % len(args)
        for a in args:
            a = a.encode() if isinstance(a, str) else a
            msg += b"$%d\r\n%s\r\n" % (len(a), a)
        self.sock.sendall(msg)
        return self.reply()

    def line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the gateway closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def reply(self):
        line = self.line()
        if line[:1] == b"$":
            n = int(line[1:])
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self.buf += self.sock.recv(65536)
            data, self.buf = self.buf[:n], self.buf[n + 2:]
            return data
        return line


def rank_pid(rank):
    """The pid of the sluice-kv process of `rank` (its SLUICE_RANK)."""
    out = subprocess.run(["pgrep", "-f", "sluice-kv run"], capture_output=True, text=True).stdout
    for pid in out.split():
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if f"SLUICE_RANK={rank}".encode() in env:
            return int(pid)
    return None


def one_run(build, protocol, sig, warmup, kv_args):
    bin_dir = os.path.join(build, "bin")
    job = subprocess.Popen(
        [os.path.join(bin_dir, "sluice"), "run", "-n", "4", "--keep-going", "--timeout", "120",
         "--", os.path.join(bin_dir, "sluice-kv"), "run", "--resp-port", "0", "--protocol",
         protocol, "--enable-shutdown", "local", *kv_args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    port = None
    while port is None:
        line = job.stdout.readline()
        if not line:
            sys.exit("failover: the job ended before its gateway served:\n" + "".join(lines))
        lines.append(line)
        m = re.search(r"serves RESP on 127\.0\.0\.1 port (\d+)", line)
        if m:
            port = int(m.group(1))
    t0 = time.monotonic()

    def drain():
        for line in job.stdout:
            lines.append(f"{time.monotonic() - t0:8.3f} {line}")

    threading.Thread(target=drain, daemon=True).start()
    client = Resp(port)
    acked = {}
    start = time.monotonic()
    signalled = None
    first_after = None
    i = 0
    while first_after is None or time.monotonic() - first_after < 0.5:
        key, value = "k%d" % (i % 64), str(i)
        i += 1
        if client.call("SET", key, value) == b"+OK":
            now = time.monotonic()
            acked[key] = value
            if signalled is not None and first_after is None:
                first_after = now
        if signalled is None and time.monotonic() - start >= warmup:
            pid = rank_pid(0)
            if pid is None:
                sys.exit("failover: rank 0's process was not found")
            os.kill(pid, signal.SIGKILL if sig == "KILL" else signal.SIGSTOP)
            signalled = time.monotonic()
        if time.monotonic() - start > warmup + 60:
            sys.exit("failover: no write was acknowledged within 60 s of the signal")
    lost = [k for k, v in acked.items() if client.call("GET", k) != v.encode()]
    try:
        client.call("SHUTDOWN")
    except (ConnectionError, OSError):
        pass  # the job ends: the gateway may close without a reply
    try:
        job.wait(60)
    except subprocess.TimeoutExpired:
        job.kill()
    if sig == "STOP":
        pid = rank_pid(0)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
    if lost:
        sys.exit(f"failover: {len(lost)} acknowledged writes lost, e.g. {lost[0]}")
    if os.environ.get("FAILOVER_SHOW_OVER") and \
            first_after - signalled > float(os.environ["FAILOVER_SHOW_OVER"]):
        sys.stdout.write(f"signal at {signalled - t0:.3f}, first write after it at "
                         f"{first_after - t0:.3f}\n" + "".join(lines))
    return first_after - signalled, i


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--protocol", default="multipaxos", choices=["multipaxos", "nopaxos"])
    ap.add_argument("--signal", default="KILL", choices=["KILL", "STOP"])
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--warmup", type=float, default=1.5)
    ap.add_argument("--kv-args", default="",
                    help="more options for sluice-kv run, as one string (e.g. "
                         "'--election-timeout-ms 500 --retry-ms 500')")
    a = ap.parse_args()
    stalls = []
    for r in range(a.repeats):
        stall, writes = one_run(a.build, a.protocol, a.signal, a.warmup, a.kv_args.split())
        stalls.append(stall)
        print(f"run {r + 1}: stall {stall * 1000:.0f} ms ({writes} writes, none lost)", flush=True)
    print(f"{a.protocol}, SIG{a.signal} of the leader, {a.repeats} runs: stall median "
          f"{statistics.median(stalls) * 1000:.0f} ms, largest {max(stalls) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
