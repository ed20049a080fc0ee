"""Simulated hosts for benchmarks: Linux network namespaces on one machine,
each with its own address, joined by a bridge, and sluice jobs run across them
the way a cluster manager starts them (a standalone `sluice registry`, then
every rank by hand with the bootstrap environment).

Topology, for K hosts (names carry the creating process's pid):

  namespace sluice-kv-<pid>-hub   bridge br0 (no address), ports h0 .. h<K-1>
  namespace sluice-kv-<pid>-h<i>  eth0 (veth peer of the hub's h<i>),
                                  198.18.210.<i+1>/24; lo up

Nothing is created in the root namespace: each veth pair is made with one end
in the hub and the other in its host, so no bridge netfilter or firewall of
the machine sees the traffic (bridge-nf-call-* is also turned off in the hub,
best effort). Addresses come only from 198.18.0.0/15 (RFC 2544, reserved for
benchmarking). Every `ip` command has a time limit, and `Hosts.create()`
checks that every host completes a TCP handshake with the last one before
returning.

Cleanup: `Hosts` is a context manager; leaving it (normally, on an
exception, or on SIGINT, SIGTERM or SIGHUP once `exit_on_signals()` made
them raise) kills every process still inside the
namespaces and deletes them, which deletes their links. Every process it
starts also gets SIGKILL if the starting process dies (PR_SET_PDEATHSIG),
and a later `Hosts` removes the namespaces (and kills the processes) left by
a run that was killed outright, once that run's pid is gone.

Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) and iproute2; `unavailable()` says
why not, for a clear "skipped" message.

  import netns
  with netns.Hosts(4) as hosts:
      job = netns.run_job(hosts, [0, 1, 2, 3, 3], argv, env, registry_host=3, timeout=600,
                          sluice=".../bin/sluice")
      job.ok(), job.ranks[0].stdout, job.cpu_seconds(), job.describe()
"""
import ctypes
import os
import re
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

PREFIX = "sluice-kv-"
SUBNET = "198.18.210"  # inside 198.18.0.0/15; never any other range
IP_TIMEOUT = 20  # seconds for each `ip` command
REGISTRY_START_LIMIT = 15  # seconds for `sluice registry` to print its address


class Unavailable(Exception):
    """Network namespaces cannot be made here (not root, no `ip`, or refused)."""


class JobFailed(Exception):
    pass


def unavailable():
    """Why simulated hosts cannot be made here, or None if they (probably) can."""
    if os.geteuid() != 0:
        return "needs root (network namespaces and veth links)"
    if shutil.which("ip") is None:
        return "no `ip` program (iproute2)"
    return None


class Interrupted(SystemExit):
    """Raised by the handlers exit_on_signals() installs."""


def exit_on_signals():
    """Make SIGINT, SIGTERM and SIGHUP raise Interrupted (a SystemExit with
    status 128 + the signal), so that `with Hosts(...)` blocks and `finally`
    clauses run. SIGINT too, because a shell starts background commands with
    it ignored, and Python then raises no KeyboardInterrupt."""
    def handler(signum, _frame):
        raise Interrupted(128 + signum)
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, handler)


def _ip(*args, check=True, timeout=IP_TIMEOUT):
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {(r.stderr or r.stdout).strip()}")
    return r


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_inside(ns):
    """SIGKILL every process in namespace `ns`; True if there were any."""
    r = _ip("netns", "pids", ns, check=False)
    pids = [int(p) for p in r.stdout.split() if p.isdigit()]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return bool(pids)


def _delete_namespaces(names):
    for ns in names:
        _kill_inside(ns)
    for ns in names:
        for _ in range(50):  # a killed process can take a moment to leave
            if not _kill_inside(ns):
                break
            time.sleep(0.1)
        _ip("netns", "delete", ns, check=False)


def _namespaces():
    r = _ip("netns", "list", check=False)
    return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]


def remove_stale():
    """Deletes the namespaces (and kills the processes in them) of earlier
    runs whose creating process is gone."""
    stale = []
    for ns in _namespaces():
        m = re.match(re.escape(PREFIX) + r"(\d+)-", ns)
        if m and int(m.group(1)) != os.getpid() and not _pid_alive(int(m.group(1))):
            stale.append(ns)
    if stale:
        print(f"netns: removing namespaces left by a killed run: {' '.join(stale)}", file=sys.stderr)
        _delete_namespaces(stale)


_libc = None


def _die_with_parent():
    # Runs in the child between fork and exec (`ip netns exec` then execs the
    # program itself, which keeps the setting). PR_SET_PDEATHSIG = 1.
    if _libc is not None:
        _libc.prctl(1, signal.SIGKILL, 0, 0, 0)


class Hosts:
    def __init__(self, count):
        if count < 1 or count > 250:
            raise ValueError("netns.Hosts: 1..250 hosts")
        tag = f"{PREFIX}{os.getpid()}"
        self.count = count
        self.hub = f"{tag}-hub"
        self._names = [f"{tag}-h{i}" for i in range(count)]
        self._created = []
        self._children = []
        self._residents = set()  # pids of spawn(resident=True)

    def __enter__(self):
        try:
            self.create()
        except BaseException:
            self.destroy()
            raise
        return self

    def __exit__(self, *exc):
        self.destroy()
        return False

    def name(self, i):
        return self._names[i]

    def ip(self, i):
        return f"{SUBNET}.{i + 1}"

    def _add_ns(self, ns):
        r = _ip("netns", "add", ns, check=False)
        if r.returncode != 0:
            raise Unavailable(f"ip netns add {ns}: {(r.stderr or r.stdout).strip()}")
        self._created.append(ns)

    def create(self):
        global _libc
        why = unavailable()
        if why:
            raise Unavailable(why)
        try:
            _libc = ctypes.CDLL(None, use_errno=True)
        except OSError:
            _libc = None
        remove_stale()
        self._add_ns(self.hub)
        _ip("-n", self.hub, "link", "add", "br0", "type", "bridge", "stp_state", "0",
            "forward_delay", "0")
        _ip("-n", self.hub, "link", "set", "lo", "up")
        for i, ns in enumerate(self._names):
            self._add_ns(ns)
            _ip("-n", self.hub, "link", "add", f"h{i}", "type", "veth", "peer", "name", "eth0",
                "netns", ns)
            _ip("-n", self.hub, "link", "set", f"h{i}", "master", "br0")
            _ip("-n", ns, "addr", "add", f"{self.ip(i)}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "lo", "up")
        # Best effort: no netfilter on bridged frames, no IPv6 chatter.
        self._sysctl(self.hub, "net.bridge.bridge-nf-call-iptables=0",
                     "net.bridge.bridge-nf-call-ip6tables=0", "net.bridge.bridge-nf-call-arptables=0",
                     "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
        for ns in self._names:
            self._sysctl(ns, "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
        _ip("-n", self.hub, "link", "set", "br0", "up")
        for i, ns in enumerate(self._names):
            _ip("-n", self.hub, "link", "set", f"h{i}", "up")
            _ip("-n", ns, "link", "set", "eth0", "up")
        self._check()

    def _sysctl(self, ns, *settings):
        if shutil.which("sysctl") is None:
            return
        subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-q", "-w", *settings],
                       capture_output=True, timeout=IP_TIMEOUT)

    def _check(self, limit=10.0):
        """Every host completes a TCP handshake with the last host."""
        last = self.count - 1
        listener = subprocess.Popen(
            ["ip", "netns", "exec", self.name(last), sys.executable, "-c",
             "import socket,sys\n"
             "s=socket.socket(); s.bind((sys.argv[1],0)); s.listen(64)\n"
             "print(s.getsockname()[1], flush=True); s.settimeout(float(sys.argv[3]))\n"
             "for _ in range(int(sys.argv[2])): s.accept()[0].close()\n",
             self.ip(last), str(self.count), str(limit)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        connectors = []
        try:
            port = listener.stdout.readline().strip()
            if not port.isdigit():
                raise RuntimeError(f"netns: the probe listener in {self.name(last)} did not start: "
                                   f"{listener.stderr.read()}")
            for i in range(self.count):
                connectors.append(subprocess.Popen(
                    ["ip", "netns", "exec", self.name(i), sys.executable, "-c",
                     "import socket,sys,time\n"
                     "end=time.time()+float(sys.argv[3])\n"
                     "while True:\n"
                     "  try: socket.create_connection((sys.argv[1],int(sys.argv[2])),1).close(); break\n"
                     "  except OSError:\n"
                     "    if time.time()>end: raise\n"
                     "    time.sleep(0.05)\n",
                     self.ip(last), port, str(limit)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
            bad = []
            for i, c in enumerate(connectors):
                _, err = c.communicate(timeout=limit + 10)
                if c.returncode != 0:
                    bad.append(f"{self.name(i)} ({self.ip(i)}): {err.strip().splitlines()[-1:]}")
            if bad:
                raise RuntimeError(f"netns: hosts cannot reach {self.ip(last)} over the bridge: "
                                   + "; ".join(bad))
            listener.wait(timeout=limit + 10)
        finally:
            for p in [listener] + connectors:
                if p.poll() is None:
                    p.kill()
                    p.wait()

    def mtu(self):
        r = _ip("-n", self.name(0), "-o", "link", "show", "eth0", check=False)
        m = re.search(r"mtu (\d+)", r.stdout)
        return int(m.group(1)) if m else 0

    def spawn(self, i, argv, env, stdout, stderr, resident=False):
        """Starts argv in host i (`ip netns exec`, which execs the program in
        place: the pid is the program's), in its own session, killed if this
        process dies. A resident process (a server that outlives jobs, such
        as a peer system's member) is not one of leftovers()."""
        p = subprocess.Popen(["ip", "netns", "exec", self.name(i), *argv], env=env, stdin=subprocess.DEVNULL,
                             stdout=stdout, stderr=stderr, start_new_session=True,
                             preexec_fn=_die_with_parent)
        self._children.append(p)
        if resident:
            self._residents.add(p.pid)
        return p

    def kill_all(self):
        """SIGKILL every process in the hosts; reaps those this object started."""
        for ns in self._created:
            _kill_inside(ns)
        for p in self._children:
            if p.returncode is None:
                try:
                    p.kill()
                except ProcessLookupError:
                    pass
                try:
                    p.wait(timeout=5)
                except (subprocess.TimeoutExpired, ChildProcessError):
                    pass
        self._children = [p for p in self._children if p.returncode is None]

    def leftovers(self):
        """Pids still inside the hosts but the residents' (after a job they
        should be none)."""
        out = []
        for ns in self._created:
            r = _ip("netns", "pids", ns, check=False)
            out += [int(p) for p in r.stdout.split() if p.isdigit() and int(p) not in self._residents]
        return out

    def destroy(self):
        # Signals arriving now must not cut the cleanup short.
        old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        try:
            self.kill_all()
            _delete_namespaces(list(reversed(self._created)))
            self._created = []
        finally:
            for s, h in old.items():
                signal.signal(s, h)


class RankResult:
    def __init__(self, rank, host, exit_code, cpu, output, timed_out):
        self.rank, self.host, self.exit_code = rank, host, exit_code
        self.cpu, self.output, self.timed_out = cpu, output, timed_out


class Job:
    def __init__(self, ranks, registry_output, seconds):
        self.ranks, self.registry_output, self.seconds = ranks, registry_output, seconds

    def ok(self):
        return all(r.exit_code == 0 and not r.timed_out for r in self.ranks)

    def cpu_seconds(self):
        """User plus system CPU of every rank process (not the registry)."""
        return sum(r.cpu for r in self.ranks)

    def describe(self, tail=40):
        out = []
        for r in self.ranks:
            lines = r.output.splitlines()
            state = "TIMED OUT" if r.timed_out else f"exit {r.exit_code}"
            out.append(f"--- rank {r.rank} in host {r.host} ({state}, {r.cpu:.2f} cpu s; "
                       f"last {min(tail, len(lines))} of {len(lines)} lines)")
            out += lines[-tail:]
        out.append("--- registry")
        out += self.registry_output.splitlines()[-tail:]
        return "\n".join(out)


def _read(path):
    with open(path, errors="replace") as f:
        return f.read()


def _exit_code(status):
    return os.waitstatus_to_exitcode(status)


def run_job(hosts, placement, argv, env, registry_host, timeout, sluice):
    """One job across the hosts: `sluice registry` in host `registry_host`,
    bound to its address, then rank r (of len(placement)) in host
    placement[r] with SLUICE_RANK, SLUICE_WORLD_SIZE, SLUICE_REGISTRY and
    SLUICE_SECRET (a new secret, passed in the environment only) added to
    `env`. Waits for every rank, at most `timeout` seconds in all, then kills
    whatever is left (and the registry). Each rank's stdout and stderr are
    captured (stdout first, then stderr, in RankResult.output; rank_stdout()
    gives stdout alone) and its CPU seconds measured by wait4."""
    world = len(placement)
    secret = secrets.token_hex(16)
    base = {k: v for k, v in env.items()
            if k not in ("SLUICE_RANK", "SLUICE_WORLD_SIZE", "SLUICE_REGISTRY", "SLUICE_SECRET")}
    start = time.monotonic()
    deadline = start + timeout
    tmp = tempfile.mkdtemp(prefix="sluice-kv-netns-")
    registry = None
    procs = []
    try:
        reg_err = open(os.path.join(tmp, "registry.err"), "w")
        registry = hosts.spawn(registry_host,
                               [sluice, "registry", "--bind", f"{hosts.ip(registry_host)}:0",
                                "--world", str(world)],
                               dict(base, SLUICE_SECRET=secret), subprocess.PIPE, reg_err)
        reg_err.close()
        address = None
        reg_deadline = time.monotonic() + REGISTRY_START_LIMIT
        buf = b""
        while address is None and time.monotonic() < reg_deadline:
            ready, _, _ = select.select([registry.stdout], [], [], 0.1)
            if ready:
                chunk = os.read(registry.stdout.fileno(), 4096)
                if not chunk:
                    break
                buf += chunk
                m = re.search(rb"SLUICE_REGISTRY=(\S+)\n", buf)
                if m:
                    address = m.group(1).decode()
            elif registry.poll() is not None:
                break
        if address is None:
            raise JobFailed(f"sluice registry in {hosts.name(registry_host)} printed no address within "
                            f"{REGISTRY_START_LIMIT} s:\n{buf.decode(errors='replace')}"
                            f"{_read(os.path.join(tmp, 'registry.err'))}")
        for r, h in enumerate(placement):
            out = open(os.path.join(tmp, f"{r}.out"), "w")
            err = open(os.path.join(tmp, f"{r}.err"), "w")
            e = dict(base, SLUICE_RANK=str(r), SLUICE_WORLD_SIZE=str(world), SLUICE_REGISTRY=address,
                     SLUICE_SECRET=secret)
            procs.append(hosts.spawn(h, argv, e, out, err))
            out.close()
            err.close()
        results = [None] * world
        while any(x is None for x in results) and time.monotonic() < deadline:
            progressed = False
            for r, p in enumerate(procs):
                if results[r] is not None:
                    continue
                pid, status, usage = os.wait4(p.pid, os.WNOHANG)
                if pid == p.pid:
                    p.returncode = _exit_code(status)
                    results[r] = (p.returncode, usage.ru_utime + usage.ru_stime, False)
                    progressed = True
            if not progressed:
                time.sleep(0.02)
        for r, p in enumerate(procs):
            if results[r] is None:
                p.kill()
                _, status, usage = os.wait4(p.pid, 0)
                p.returncode = _exit_code(status)
                results[r] = (p.returncode, usage.ru_utime + usage.ru_stime, True)
        ranks = []
        for r, (code, cpu, timed_out) in enumerate(results):
            stdout = _read(os.path.join(tmp, f"{r}.out"))
            stderr = _read(os.path.join(tmp, f"{r}.err"))
            res = RankResult(r, placement[r], code, cpu, stdout + stderr, timed_out)
            res.stdout = stdout
            ranks.append(res)
    finally:
        if registry is not None and registry.poll() is None:
            registry.terminate()
            try:
                registry.wait(timeout=5)
            except subprocess.TimeoutExpired:
                registry.kill()
                registry.wait()
        for p in procs:
            if p.returncode is None:
                p.kill()
                p.wait()
        registry_output = ""
        if registry is not None:
            registry.stdout.close()
            registry_output = _read(os.path.join(tmp, "registry.err"))
        shutil.rmtree(tmp, ignore_errors=True)
    return Job(ranks, registry_output, time.monotonic() - start)
