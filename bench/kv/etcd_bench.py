#!/usr/bin/env python3
"""sluice-kv against etcd on the same cores in the same run: YCSB workload A
(or --workload) with 2, 4, ... closed-loop clients, 3 replicas each.

  sluice-kv   `sluice run` jobs of Multi-Paxos (and NOPaxos) with 3 replicas,
              as bench/kv/curve.py runs them (each job checks itself);
  etcd        3 etcd members (Debian's etcd-server) on 127.0.0.1, loaded by
              bench/kv/etcd-loader (ours, Go: one connection per client,
              etcd's linearizable reads, the same key choice and value size).

etcd keeps its data directory on tmpfs (/dev/shm), so that its fsyncs do not
wait for a disk: sluice-kv keeps its log in memory, and the comparison is of
replication, not of storage. Each point prints throughput, get and put p50
and p99 (us) and the operations per CPU-second of every process involved
(the job's ranks; etcd's three members and the loader).

  bench/kv/install.sh                 # etcd-server and the loader
  bench/kv/etcd_bench.py [--clients 2,4,8,16,32,64] [--ops-total 20000]
                         [--workload a] [--protocols multipaxos,nopaxos]
                         [--transport ofi --netns]

With --netns (as root; needs --transport ofi), both run across simulated
hosts (bench/kv/netns.py): replica or member i in network namespace i, the
clients (sluice-kv's 2 client ranks and its registry; the etcd loader) in a
fourth, all joined by a bridge, so every replication message crosses a veth
pair and the kernel's TCP, as between machines.

Run it on an idle machine; it prints the load average before and after.
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import curve  # noqa: E402  sluice-kv's points, as bench/kv/curve.py runs them
import netns  # noqa: E402  simulated hosts for --netns

LOADER = os.path.join(HERE, "etcd-loader", "etcd-loader")
MEMBERS = 3


def proc_cpu(pid):
    """CPU seconds of a live process (utime + stime from /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def reachable(host, port, hosts=None):
    """Whether a TCP connection to host:port succeeds (from the clients'
    namespace with `hosts`)."""
    if hosts is None:
        try:
            socket.create_connection((host, port), timeout=1).close()
            return True
        except OSError:
            return False
    probe = f"import socket; socket.create_connection(('{host}', {port}), timeout=1).close()"
    r = subprocess.run(["ip", "netns", "exec", hosts.name(hosts.count - 1), sys.executable, "-c", probe],
                       capture_output=True, timeout=10)
    return r.returncode == 0


class Etcd:
    """Three members, on 127.0.0.1 or member i in host i of `hosts`; the
    data directories on tmpfs."""

    def __init__(self, base_port, hosts=None):
        self.dir = tempfile.mkdtemp(prefix="etcd-bench-", dir="/dev/shm")
        self.hosts = hosts
        ip = [hosts.ip(i) if hosts else "127.0.0.1" for i in range(MEMBERS)]
        self.addr = [(ip[i], base_port + i) for i in range(MEMBERS)]
        self.clients = [f"http://{ip[i]}:{base_port + i}" for i in range(MEMBERS)]
        peers = [f"http://{ip[i]}:{base_port + 10 + i}" for i in range(MEMBERS)]
        cluster = ",".join(f"m{i}={peers[i]}" for i in range(MEMBERS))
        self.procs = []
        for i in range(MEMBERS):
            argv = ["etcd", "--name", f"m{i}", "--data-dir", os.path.join(self.dir, f"m{i}"),
                    "--listen-client-urls", self.clients[i], "--advertise-client-urls",
                    self.clients[i], "--listen-peer-urls", peers[i],
                    "--initial-advertise-peer-urls", peers[i], "--initial-cluster", cluster,
                    "--initial-cluster-state", "new", "--log-level", "error", "--logger", "zap"]
            log = open(os.path.join(self.dir, f"m{i}.log"), "w")
            if hosts:
                self.procs.append(hosts.spawn(i, argv, dict(os.environ), subprocess.DEVNULL, log,
                                              resident=True))
            else:
                self.procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log))
        deadline = time.time() + 30
        for i in range(MEMBERS):
            while not reachable(*self.addr[i], hosts):
                if time.time() > deadline or self.procs[i].poll() is not None:
                    self.stop()
                    sys.exit(f"etcd_bench: etcd member {i} did not start")
                time.sleep(0.1)

    def cpu(self):
        return sum(proc_cpu(p.pid) for p in self.procs)

    def stop(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def etcd_point(args, etcd, clients):
    argv = [LOADER, "--endpoints", ",".join(etcd.clients), "--clients", str(clients),
            "--ops-total", str(args.ops_total), "--keys", "1000", "--workload", args.workload,
            "--distribution", "zipf"]
    cpu0 = etcd.cpu() + curve.children_cpu()
    if etcd.hosts:
        # In the clients' host; its CPU is counted once it is reaped.
        p = etcd.hosts.spawn(etcd.hosts.count - 1, argv, dict(os.environ), subprocess.PIPE,
                             subprocess.PIPE)
        try:
            stdout, stderr = p.communicate(timeout=900)
        except subprocess.TimeoutExpired:
            p.kill()
            stdout, stderr = p.communicate()
        out = subprocess.CompletedProcess(argv, p.returncode, stdout.decode(), stderr.decode())
    else:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    cpu = etcd.cpu() + curve.children_cpu() - cpu0
    if out.returncode != 0:
        sys.exit(f"etcd_bench: the loader failed:\n{' '.join(argv)}\n{out.stdout}{out.stderr}")
    j = json.loads(out.stdout.strip().splitlines()[-1])
    # The loader writes every key once before its timed part; count only the timed operations.
    return j["ops_per_s"], {"get": (j["get_p50_us"], j["get_p99_us"]),
                            "put": (j["put_p50_us"], j["put_p99_us"])}, cpu, j["ops"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--transport", default="shm", choices=["shm", "ofi"])
    ap.add_argument("--clients", default="2,4,8,16,32,64")
    ap.add_argument("--ops-total", type=int, default=20000)
    ap.add_argument("--workload", default="a", choices=["a", "b", "c"])
    ap.add_argument("--protocols", default="multipaxos,nopaxos",
                    help="comma-separated; NAME:N passes sluice-kv --batch N (curve.py)")
    ap.add_argument("--etcd-port", type=int, default=23790)
    ap.add_argument("--netns", action="store_true",
                    help="replicas and members on simulated hosts (network namespaces; root, --transport ofi)")
    args = ap.parse_args()
    if not os.path.exists(LOADER) or shutil.which("etcd") is None:
        sys.exit("etcd_bench: etcd or the loader is missing: run bench/kv/install.sh")
    if args.netns and args.transport != "ofi":
        ap.error("--netns runs the ranks on separate (simulated) hosts: it needs --transport ofi")
    hosts = None
    if args.netns:
        why = netns.unavailable()
        if why:
            sys.exit(f"etcd_bench: --netns: {why}")
        netns.exit_on_signals()
        hosts = netns.Hosts(MEMBERS + 1)
        try:
            hosts.__enter__()
        except netns.Unavailable as e:
            sys.exit(f"etcd_bench: --netns: {e}")
    load = os.getloadavg()
    where = (f"across {MEMBERS + 1} network namespaces (replica and member i in {netns.SUBNET}.(i+1), "
             f"the clients in {netns.SUBNET}.{MEMBERS + 1})" if hosts else "on one host")
    print(f"YCSB {args.workload.upper()} (zipf 0.99, 1000 keys, 64 B values), {args.ops_total} "
          f"operations per point, 3 replicas {where}; sluice-kv over {args.transport}; load average "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"{'system':11} {'clients':>7} {'ops/s':>8} {'get p50':>8} {'get p99':>8} "
          f"{'put p50':>8} {'put p99':>8} {'ops/cpu-s':>10}")
    try:
        etcd = Etcd(args.etcd_port, hosts)
    except BaseException:
        if hosts:
            hosts.__exit__(None, None, None)
        raise
    try:
        for clients in [int(c) for c in args.clients.split(",")]:
            if clients < 2 or clients % 2:
                sys.exit("etcd_bench: client counts are even (sluice-kv's clients run on 2 ranks)")
            rows = []
            for protocol in args.protocols.split(","):
                curve_args = argparse.Namespace(build=args.build, transport=args.transport,
                                                ops_total=args.ops_total, workload=args.workload)
                rows.append((protocol,) + curve.point(curve_args, protocol, 3, clients, hosts))
            rows.append(("etcd",) + etcd_point(args, etcd, clients))
            for name, tput, lat, cpu, total in rows:
                g, p = lat.get("get", (0, 0)), lat.get("put", (0, 0))
                print(f"{name:11} {clients:7} {tput:8.0f} {g[0]:8} {g[1]:8} {p[0]:8} {p[1]:8} "
                      f"{total / cpu if cpu else 0:10.0f}", flush=True)
            best = max(r[1] for r in rows[:-1])
            print(f"{'':11} {clients:7} sluice-kv / etcd: {best / rows[-1][1]:.1f}x throughput",
                  flush=True)
    finally:
        etcd.stop()
        if hosts:
            hosts.__exit__(None, None, None)
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
