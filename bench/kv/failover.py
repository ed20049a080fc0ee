#!/usr/bin/env python3
"""How long a sluice-kv job stops acknowledging writes when its leader
fails: a job of 3 replicas and one RESP gateway rank (sluice run
--keep-going, shm), one client writing SETs in a closed loop over a raw
socket; after --warmup seconds the leader (rank 0; the NOPaxos sequencer
is on the gateway's rank) is sent SIGKILL, or SIGSTOP (the registry declares it lost only
after its heartbeat timeout; the replicas' own election acts first), from
outside. The stall is the time from the fault to the first SET acknowledged
after it; the client writes on for --after seconds (0.5 by default) and
reports the longest pause between two acknowledgements in that time too
(a second stall: say --after 8 to see past the registry's 5 s heartbeat
timeout, when the stopped leader is declared lost and the job's ranks
change). Each run also checks that no acknowledged write was lost: every
key's last acknowledged value must be what a GET returns at the end.

With --netns (root), each rank runs in a simulated host of its own
(bench/kv/netns.py: network namespaces joined by veth), the flows go over
ofi (tcp), and a third fault is possible: PARTITION takes the leader's host
off the network (its link goes down).

  bench/kv/failover.py [--build build] [--protocol multipaxos|nopaxos]
                       [--signal KILL|STOP|PARTITION] [--netns] [--repeats 10]
                       [--warmup 1.5] [--after 0.5]
                       [--kv-args '--election-timeout-ms 400']

With --victim sequencer (NOPaxos), the job has two gateway ranks (3 and
4) and the fault hits rank 3, the first client rank, whose memory holds
the ordered flow's sequence counter, while the client writes through rank
4's gateway: the stall its clients see when another gateway holding the
sequencer stops or is cut off.

Prints each run's stall and the median and the largest (with 10 runs, the
largest is the p90; give --repeats 100 for a p99).
"""
import argparse
import os
import re
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
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


def drive(port, fault, warmup, after):
    """Writes SETs in a closed loop to the gateway on 127.0.0.1:port; after
    `warmup` seconds calls fault(), then writes on until `after` seconds
    after the first write acknowledged after it. Returns (stall, writes,
    lost keys, signalled, pause): the lost ones are keys whose last
    acknowledged value a GET no longer returns; pause is the longest time
    between two acknowledgements after the first one after the fault. Ends
    the job with SHUTDOWN."""
    client = Resp(port)
    acked = {}
    start = time.monotonic()
    signalled = None
    first_after = None
    last_ack = None
    pause = 0.0
    i = 0
    while first_after is None or time.monotonic() - first_after < after:
        key, value = "k%d" % (i % 64), str(i)
        i += 1
        if client.call("SET", key, value) == b"+OK":
            now = time.monotonic()
            acked[key] = value
            if signalled is not None and first_after is None:
                first_after = now
            elif first_after is not None:
                pause = max(pause, now - last_ack)
            last_ack = now
        if signalled is None and time.monotonic() - start >= warmup:
            fault()
            signalled = time.monotonic()
        if time.monotonic() - start > warmup + after + 60:
            sys.exit("failover: no write was acknowledged within 60 s of the fault")
    lost = [k for k, v in acked.items() if client.call("GET", k) != v.encode()]
    try:
        client.call("SHUTDOWN")
    except (ConnectionError, OSError):
        pass  # the job ends: the gateway may close without a reply
    return first_after - signalled, i, lost, signalled, pause


def job_argv(bin_dir, protocol, kv_args):
    return [os.path.join(bin_dir, "sluice-kv"), "run", "--resp-port", "0", "--protocol", protocol,
            "--enable-shutdown", "local", *kv_args]


# The job's ranks and the roles of the victim and the client's gateway:
# --victim leader: 3 replicas and a gateway (rank 3), rank 0 the victim;
# --victim sequencer: 3 replicas and gateways 3 and 4, rank 3 the victim.
def layout(victim):
    return (4, 0, 3) if victim == "leader" else (5, 3, 4)  # world, victim, gateway


def start_job(build, protocol, kv_args, launcher_args, what, world=4, gateway=3):
    """`sluice run -n WORLD LAUNCHER_ARGS -- sluice-kv run --resp-port 0 ...`
    (3 replicas, the other ranks gateways) over shm; waits for rank
    `gateway`'s port. Returns (job, port, lines, t0, reader): its output
    goes on into `lines`, each stamped with the seconds since t0, by the
    thread `reader`."""
    bin_dir = os.path.join(build, "bin")
    job = subprocess.Popen(
        [os.path.join(bin_dir, "sluice"), "run", "-n", str(world), *launcher_args,
         "--", *job_argv(bin_dir, protocol, kv_args)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    port = None
    while port is None:
        line = job.stdout.readline()
        if not line:
            sys.exit(f"{what}: the job ended before its gateway served:\n" + "".join(lines))
        lines.append(line)
        m = re.search(r"rank (\d+) serves RESP on 127\.0\.0\.1 port (\d+)", line)
        if m and int(m.group(1)) == gateway:
            port = int(m.group(2))
    t0 = time.monotonic()

    def drain():
        for line in job.stdout:
            lines.append(f"{time.monotonic() - t0:8.3f} {line}")

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    return job, port, lines, t0, reader


def one_run(build, protocol, fault, warmup, after, kv_args, victim="leader"):
    world, target, gateway = layout(victim)
    job, port, lines, t0, _ = start_job(build, protocol, kv_args,
                                     ["--keep-going", "--timeout", "120"], "failover", world,
                                     gateway)

    def signal_victim():
        pid = rank_pid(target)
        if pid is None:
            sys.exit(f"failover: rank {target}'s process was not found")
        os.kill(pid, signal.SIGKILL if fault == "KILL" else signal.SIGSTOP)

    stall, writes, lost, signalled, pause = drive(port, signal_victim, warmup, after)
    try:
        job.wait(60)
    except subprocess.TimeoutExpired:
        job.kill()
    if fault == "STOP":
        pid = rank_pid(target)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
    if lost:
        sys.exit(f"failover: {len(lost)} acknowledged writes lost, e.g. {lost[0]}")
    if os.environ.get("FAILOVER_SHOW_OVER") and stall > float(os.environ["FAILOVER_SHOW_OVER"]):
        sys.stdout.write(f"signal at {signalled - t0:.3f}, first write after it at "
                         f"{signalled + stall - t0:.3f}\n" + "".join(lines))
    return stall, writes, pause


def netns_run(build, protocol, fault, warmup, after, kv_args, victim="leader"):
    """The same job with each rank in a simulated host of its own (network
    namespaces, bench/kv/netns.py), flows over ofi (tcp), a standalone
    registry in the gateway's host; the driver runs in that host too. The
    fault: KILL or STOP rank 0's process, or PARTITION (its host's link to
    the others goes down: the registry then declares it lost after the
    heartbeat timeout, and it stops). With victim "sequencer", rank 3 (the
    first gateway) instead, the client on rank 4's."""
    import netns
    world, target, gateway = layout(victim)
    bin_dir = os.path.join(build, "bin")
    env = dict(os.environ, SLUICE_TRANSPORT="ofi")
    env.setdefault("SLUICE_OFI_PROVIDER", "tcp")
    if "SLUICE_SPIN" not in env:
        env["SLUICE_SPIN"] = "0"  # 4 ranks on 2 cores
    with netns.Hosts(world) as hosts:
        tmp = tempfile.mkdtemp(prefix="sluice-kv-failover-")
        secret = secrets.token_hex(16)
        reg = hosts.spawn(gateway, [os.path.join(bin_dir, "sluice"), "registry", "--bind",
                                    f"{hosts.ip(gateway)}:0", "--world", str(world)],
                          dict(env, SLUICE_SECRET=secret), subprocess.PIPE, subprocess.DEVNULL)
        address = None
        for line in reg.stdout:
            m = re.search(r"SLUICE_REGISTRY=(\S+)", line.decode())
            if m:
                address = m.group(1)
                break
        if address is None:
            sys.exit("failover: the registry printed no address")
        ranks = []
        for r in range(world):
            e = dict(env, SLUICE_RANK=str(r), SLUICE_WORLD_SIZE=str(world), SLUICE_REGISTRY=address,
                     SLUICE_SECRET=secret)
            with open(os.path.join(tmp, f"{r}.err"), "w") as err, \
                    open(os.path.join(tmp, f"{r}.out"), "w") as out:
                ranks.append(hosts.spawn(r, job_argv(bin_dir, protocol, kv_args), e, out, err))
        port = None
        deadline = time.monotonic() + 60
        while port is None and time.monotonic() < deadline:
            with open(os.path.join(tmp, f"{gateway}.err")) as f:
                m = re.search(r"serves RESP on 127\.0\.0\.1 port (\d+)", f.read())
            if m:
                port = int(m.group(1))
            else:
                time.sleep(0.05)
        if port is None:
            sys.exit("failover: the gateway did not serve within 60 s:\n" +
                     open(os.path.join(tmp, f"{gateway}.err")).read())
        driver = hosts.spawn(gateway, [sys.executable, os.path.abspath(__file__), "--drive",
                                       str(port), "--fault", fault, "--victim-pid",
                                       str(ranks[target].pid), "--victim-link", f"h{target}",
                                       "--hub", hosts.hub, "--warmup", str(warmup), "--after",
                                       str(after)],
                             dict(os.environ), subprocess.PIPE, subprocess.STDOUT)
        out = driver.communicate(timeout=180)[0].decode()
        m = re.search(r"RESULT (\S+) (\d+) (\d+) (\S+)", out)
        if not m:
            logs = "".join(f"--- rank {r}\n" + open(os.path.join(tmp, f"{r}.err")).read()[-3000:]
                           for r in range(world))
            sys.exit("failover: the driver failed:\n" + out + logs)
        if int(m.group(3)) != 0:
            sys.exit(f"failover: {m.group(3)} acknowledged writes lost")
        survivors = [r for r in range(world) if r != target]
        for r in survivors:
            try:
                ranks[r].wait(60)
            except subprocess.TimeoutExpired:
                pass
        # The survivors' end-of-job checks (exactly once, replicas identical).
        verdict = "".join(open(os.path.join(tmp, f"{r}.out")).read() for r in survivors)
        if "replicas agree: yes" not in verdict or any(ranks[r].returncode != 0
                                                       for r in survivors):
            logs = "".join(f"--- rank {r}\n" + open(os.path.join(tmp, f"{r}.out")).read()[-2000:] +
                           open(os.path.join(tmp, f"{r}.err")).read()[-2000:] for r in range(world))
            sys.exit("failover: the job's survivors did not pass their checks:\n" + logs)
        shutil.rmtree(tmp, ignore_errors=True)
        return float(m.group(1)), int(m.group(2)), float(m.group(4))


def drive_main(a):
    def fault():
        if a.fault == "KILL":
            os.kill(a.victim_pid, signal.SIGKILL)
        elif a.fault == "STOP":
            os.kill(a.victim_pid, signal.SIGSTOP)
        else:
            subprocess.run(["ip", "-n", a.hub, "link", "set", a.victim_link, "down"], check=True)

    stall, writes, lost, _, pause = drive(a.drive, fault, a.warmup, a.after)
    print(f"RESULT {stall:.6f} {writes} {len(lost)} {pause:.6f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--protocol", default="multipaxos", choices=["multipaxos", "nopaxos"])
    ap.add_argument("--signal", default="KILL", choices=["KILL", "STOP", "PARTITION"],
                    help="the fault (PARTITION: --netns only)")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--warmup", type=float, default=1.5)
    ap.add_argument("--after", type=float, default=0.5,
                    help="seconds to write on after the first write acknowledged after the "
                         "fault (the longest pause in them is reported)")
    ap.add_argument("--netns", action="store_true",
                    help="a rank per network namespace, over ofi (needs root)")
    ap.add_argument("--victim", default="leader", choices=["leader", "sequencer"],
                    help="the rank the fault hits: the leader (rank 0), or the first of two "
                         "gateways, which holds NOPaxos's sequencer (the client writes through "
                         "the other)")
    ap.add_argument("--kv-args", default="",
                    help="more options for sluice-kv run, as one string (e.g. "
                         "'--election-timeout-ms 500 --retry-ms 500')")
    # The driver inside a namespace (netns_run starts it).
    ap.add_argument("--drive", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--fault", help=argparse.SUPPRESS)
    ap.add_argument("--victim-pid", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--victim-link", default="h0", help=argparse.SUPPRESS)
    ap.add_argument("--hub", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.drive:
        return drive_main(a)
    if a.signal == "PARTITION" and not a.netns:
        sys.exit("failover: --signal PARTITION needs --netns")
    if a.victim == "sequencer" and a.protocol != "nopaxos":
        sys.exit("failover: --victim sequencer needs --protocol nopaxos (Multi-Paxos has none)")
    if a.netns:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import netns
        why = netns.unavailable()
        if why:
            sys.exit(f"failover: skipped: network namespaces cannot be made here: {why}")
    run = netns_run if a.netns else one_run
    stalls, pauses = [], []
    for r in range(a.repeats):
        stall, writes, pause = run(a.build, a.protocol, a.signal, a.warmup, a.after,
                                   a.kv_args.split(), a.victim)
        stalls.append(stall)
        pauses.append(pause)
        print(f"run {r + 1}: stall {stall * 1000:.0f} ms, then the longest pause "
              f"{pause * 1000:.0f} ms in {a.after:g} s ({writes} writes, none lost)", flush=True)
    where = "across network namespaces over ofi" if a.netns else "over shm"
    what = "a partition of" if a.signal == "PARTITION" else f"SIG{a.signal} of"
    who = "the leader" if a.victim == "leader" else "the sequencer's gateway"
    print(f"{a.protocol}, {what} {who} {where}, {a.repeats} runs: stall median "
          f"{statistics.median(stalls) * 1000:.0f} ms, largest {max(stalls) * 1000:.0f} ms; "
          f"the longest pause after it {max(pauses) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
