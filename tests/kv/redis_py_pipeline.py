"""redis-py's big pipelines through a sluice-kv RESP gateway and through
redis-server 7.0, side by side.

Usage: redis_py_pipeline.py PORT REDIS_SERVER

Starts REDIS_SERVER on a free loopback port (as redis_zset_diff.py does),
then sends each pipeline (transaction=False: written whole before any
reply is read) to both: 4,097 RPUSHes (one past the gateway's 4,096
unanswered requests, where it stops reading until the log answers some),
10,000 SETs and GETs, 100,000 RPUSHes, SETs and GETs, and 30,000 SETs and
GETs of 1,000-byte values (about 15 MB of replies, more than the socket
buffers hold while the client is still writing). Every reply is checked
against the one it must be and against redis-server's. Then a client that
writes 1,000,000 GETs of a 100-byte value and never reads: both servers
(redis-server with the gateway's default client-output-buffer-limit,
32 MiB) close it, the gateway counting it in evicted_clients, and both
still answer another client. Every check that fails is printed; the last
line says how many checks there were and how many failed, and the exit
status is 0 only if none failed. Its keys start with "pp:".
"""
import socket
import sys
import time

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis_py_checks import Checks
from redis_zset_diff import RedisServer

OUTPUT_LIMIT = 32 << 20  # the gateway's default --client-output-buffer-limit


def rpushes(n):
    """n RPUSHes over 64 lists: the commands and the replies they must get."""
    cmds, want, lengths = [], [], {}
    for i in range(n):
        key = f"pp:l{i % 64}"
        lengths[key] = lengths.get(key, 0) + 1
        cmds.append(("RPUSH", key, str(i)))
        want.append(lengths[key])
    return cmds, want


def sets_and_gets(n, size=0):
    """n SET and GET pairs over 500 keys (values `size` bytes at least)."""
    cmds, want = [], []
    for i in range(n):
        key, value = f"pp:k{i % 500}", str(i).rjust(size, "v")
        cmds += [("SET", key, value), ("GET", key)]
        want += [True, value.encode()]
    return cmds, want


def mixed(n):
    """n commands: RPUSH, SET, and GET of a key set earlier in the pipeline
    or never (None)."""
    cmds, want, lengths, values = [], [], {}, {}
    for i in range(n):
        if i % 3 == 0:
            key = f"pp:m{i % 256}"
            lengths[key] = lengths.get(key, 0) + 1
            cmds.append(("RPUSH", key, str(i)))
            want.append(lengths[key])
        elif i % 3 == 1:
            key = f"pp:s{i % 1000}"
            values[key] = str(i).encode()
            cmds.append(("SET", key, str(i)))
            want.append(True)
        else:
            key = f"pp:s{(i * 7) % 1000}"
            cmds.append(("GET", key))
            want.append(values.get(key))
    return cmds, want


def clear(r):
    keys = list(r.scan_iter(match="pp:*", count=1000))
    for i in range(0, len(keys), 100):
        r.delete(*keys[i:i + 100])


def run(r, cmds):
    p = r.pipeline(transaction=False)
    for c in cmds:
        p.execute_command(*c)
    return p.execute(raise_on_error=False)


def flood(port, count, other):
    """Writes `count` GETs of pp:big and never reads a reply. True once the
    server has closed the connection: `other` (a client of the same server)
    no longer counts it among its connected clients."""
    one = b"*2\r\n$3\r\nGET\r\n$6\r\npp:big\r\n"
    chunk = one * 10000
    before = info_field(other, "clients", "connected_clients")
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(30)
    try:
        for _ in range(count // 10000):
            s.sendall(chunk)
    except (BrokenPipeError, ConnectionResetError, socket.timeout):
        pass  # (closed already, or no longer read from: either way, see below)
    # (A deadline, not a measure: the close is expected within seconds.)
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if info_field(other, "clients", "connected_clients") <= before:
                return True
            time.sleep(0.1)
        return False
    finally:
        s.close()


def info_field(r, section, field):
    return int(r.info(section).get(field, 0))


def main(port, server):
    checks = Checks()
    check = checks.check
    ref_server = RedisServer(server)
    try:
        # (No retries: a pipeline that stalls fails after 30 s, once.)
        kv, ref = (redis.Redis(host="127.0.0.1", port=p, socket_timeout=30,
                               retry=Retry(NoBackoff(), 0)) for p in (port, ref_server.port))
        cases = [("4,097 RPUSHes", rpushes(4097)),
                 ("10,000 SETs and GETs", sets_and_gets(5000)),
                 ("100,000 RPUSHes, SETs and GETs", mixed(100000)),
                 ("30,000 SETs and GETs of 1,000 bytes", sets_and_gets(15000, 1000))]
        for what, (cmds, want) in cases:
            clear(kv)
            clear(ref)
            try:
                got = run(kv, cmds)
            except redis.RedisError as e:
                check(f"{what}: sluice-kv's replies", repr(e), "every reply")
                return checks.finish()
            ref_got = run(ref, cmds)
            check(f"{what}: replies", len(got), len(cmds))
            bad = [i for i in range(len(cmds)) if got[i] != want[i]]
            check(f"{what}: replies not as they must be (first {bad[:3]})", len(bad), 0)
            differ = [i for i in range(len(cmds)) if got[i] != ref_got[i]]
            check(f"{what}: replies unlike redis-server's (first {differ[:3]})", len(differ), 0)
            check(f"{what}: redis-server's replies", ref_got == want, True)
        clear(kv)
        clear(ref)

        # A client that never reads its replies.
        ref.config_set("client-output-buffer-limit", f"normal {OUTPUT_LIMIT} {OUTPUT_LIMIT} 0")
        evicted = info_field(kv, "stats", "evicted_clients")
        for name, r, p in (("sluice-kv", kv, port), ("redis-server", ref, ref_server.port)):
            r.set("pp:big", "b" * 100)
            check(f"{name}: a client that never reads is closed", flood(p, 1000000, r), True)
            check(f"{name}: another client after it", r.ping(), True)
            r.delete("pp:big")
        check("sluice-kv: evicted_clients", info_field(kv, "stats", "evicted_clients"),
              evicted + 1)
        check("sluice-kv: its buffers released",
              info_field(kv, "memory", "mem_clients_normal") < OUTPUT_LIMIT, True)
    finally:
        ref_server.stop()
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), sys.argv[2]))
