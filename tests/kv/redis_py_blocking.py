"""redis-py against a sluice-kv RESP gateway: the blocking commands.

Usage: redis_py_blocking.py PORT [MAX_BLOCKED]

BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP, BZPOPMIN, BZPOPMAX and BZMPOP:
one client blocks on empty keys, another writes one of them (alone, or in
a transaction), and the first gets what was written; a timeout answers
None after about that long; in a transaction they answer at once; a
blocked connection's pipelined requests wait for it; a client that
disconnects while blocked takes nothing. With MAX_BLOCKED (the gateway's
--max-blocked-clients), that many connections block and one more gets an
error. Every check that fails is printed; the last line says how many
checks there were and how many failed, and the exit status is 0 only if
none failed. Its keys start with "bk:". (Without MAX_BLOCKED it passes
against redis-server 7.0 too.)
"""
import socket
import sys
import threading
import time

import redis
from redis_py_checks import Checks


def raw(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    return s


def request(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


def received(s, want, seconds=5.0):
    """What `s` receives until it holds `want` bytes' worth, or the time is up."""
    s.settimeout(0.1)
    data, deadline = b"", time.monotonic() + seconds
    while len(data) < len(want) and time.monotonic() < deadline:
        try:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        except socket.timeout:
            pass
    return data


def nothing_for(s, seconds):
    s.settimeout(seconds)
    try:
        return s.recv(4096)
    except socket.timeout:
        return b""


def blocked(r, n, seconds=10.0):
    """Whether INFO's blocked_clients reaches `n` within `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if r.info("clients").get("blocked_clients") == n:
            return True
        time.sleep(0.01)
    return False


def main(port, max_blocked):
    checks = Checks()
    check, error_of = checks.check, Checks.error_of
    r, other = (redis.Redis(host="127.0.0.1", port=port, socket_timeout=30) for _ in range(2))
    keys = ["bk:q1", "bk:q2", "bk:src", "bk:dst", "bk:z", "bk:gone", "bk:ord", "bk:full", "bk:tx"]
    r.delete(*keys)

    # A timeout answers None after about that long.
    t = time.monotonic()
    check("blpop times out", r.blpop(["bk:q1", "bk:q2"], 0.2), None)
    check("after about its timeout", 0.15 <= time.monotonic() - t < 3, True)
    check("bzpopmin times out", r.bzpopmin("bk:z", 0.1), None)

    # One client blocks, another writes: the first gets it.
    def woken(name, call, write, want):
        result = {}
        thread = threading.Thread(target=lambda: result.update(got=call()))
        t = time.monotonic()
        thread.start()
        check(name + ": blocked", (blocked(other, 1), thread.is_alive()), (True, True))
        write()
        thread.join(10)
        check(name + ": woken with what was written", result.get("got"), want)
        check(name + ": soon after the write", time.monotonic() - t < 5, True)

    woken("blpop forever", lambda: r.blpop(["bk:q1", "bk:q2"], 0),
          lambda: other.rpush("bk:q2", "hello"), (b"bk:q2", b"hello"))
    woken("brpop", lambda: r.brpop(["bk:q1"], 10), lambda: other.rpush("bk:q1", "a", "b"),
          (b"bk:q1", b"b"))
    check("brpop took one", other.lrange("bk:q1", 0, -1), [b"a"])
    other.delete("bk:q1")
    woken("blmove", lambda: r.blmove("bk:src", "bk:dst", 10, "LEFT", "RIGHT"),
          lambda: other.lpush("bk:src", "v"), b"v")
    check("blmove moved it", (other.exists("bk:src"), other.lrange("bk:dst", 0, -1)), (0, [b"v"]))
    woken("brpoplpush", lambda: r.brpoplpush("bk:src", "bk:dst", 10),
          lambda: other.rpush("bk:src", "w"), b"w")
    woken("blmpop", lambda: r.execute_command("BLMPOP", 10, 2, "bk:q1", "bk:q2", "LEFT", "COUNT", 5),
          lambda: other.rpush("bk:q2", "x", "y"), [b"bk:q2", [b"x", b"y"]])
    woken("bzpopmin", lambda: r.bzpopmin(["bk:z"], 10), lambda: other.zadd("bk:z", {"m": 2.5}),
          (b"bk:z", b"m", 2.5))
    woken("bzpopmax", lambda: r.bzpopmax(["bk:z"], 10),
          lambda: other.zadd("bk:z", {"lo": 1, "hi": 9}), (b"bk:z", b"hi", 9.0))
    other.delete("bk:z")
    woken("bzmpop", lambda: r.execute_command("BZMPOP", 10, 1, "bk:z", "MIN", "COUNT", 3),
          lambda: other.zadd("bk:z", {"a": 0, "b": 1}), [b"bk:z", [[b"a", b"0"], [b"b", b"1"]]])

    def in_transaction():
        with other.pipeline() as p:
            p.rpush("bk:tx", "t")
            p.incr("bk:n")
            p.execute()

    woken("blpop woken by a transaction", lambda: r.blpop(["bk:tx"], 10), in_transaction,
          (b"bk:tx", b"t"))
    other.delete("bk:n")

    # In a transaction: the non-blocking forms, at once.
    t = time.monotonic()
    with r.pipeline() as p:
        p.blpop(["bk:q1"], 0)
        p.blmove("bk:src", "bk:dst", 0, "LEFT", "LEFT")
        p.bzpopmax(["bk:z"], 0)
        check("blocking commands in a transaction", p.execute(), [None, None, None])
    check("answered at once", time.monotonic() - t < 1, True)
    r.set("bk:str", "v")
    check("blpop of a string", error_of(lambda: r.blpop(["bk:none", "bk:str"], 0)),
          "WRONGTYPE Operation against a key holding the wrong kind of value")
    check("a negative timeout", error_of(lambda: r.blpop(["bk:q1"], -1)), "timeout is negative")

    # A blocked connection's pipelined requests wait for it, as in Redis:
    # its own RPUSH behind its BLPOP does not feed it.
    a = raw(port)
    a.sendall(request("BLPOP", "bk:ord", 0) + request("RPUSH", "bk:ord", "mine"))
    check("the pipeline behind a blocked command waits",
          (blocked(other, 1), nothing_for(a, 0.1)), (True, b""))
    other.rpush("bk:ord", "theirs")
    want = b"*2\r\n$6\r\nbk:ord\r\n$6\r\ntheirs\r\n:1\r\n"
    check("then both answer in order", received(a, want), want)
    check("its rpush ran after", other.lrange("bk:ord", 0, -1), [b"mine"])
    a.close()

    # A client that disconnects while blocked takes nothing.
    g = raw(port)
    g.sendall(request("BLPOP", "bk:gone", 0))
    check("blocked before it leaves", blocked(other, 1), True)
    g.close()
    check("unblocked when it leaves", blocked(other, 0), True)
    other.rpush("bk:gone", "kept")
    time.sleep(0.2)
    check("a disconnected client took nothing", other.lrange("bk:gone", 0, -1), [b"kept"])

    if max_blocked > 0:
        # At most max_blocked connections block; one more gets an error.
        parked = [raw(port) for _ in range(max_blocked)]
        for s in parked:
            s.sendall(request("BLPOP", "bk:full", 0))
        check("all blocked", blocked(other, max_blocked), True)
        check("one more blocked client is refused",
              (error_of(lambda: r.blpop(["bk:full"], 5)) or "").startswith(
                  "sluice-kv parks at most %d blocked clients" % max_blocked), True)
        other.rpush("bk:full", *["e%d" % i for i in range(max_blocked)])
        got = sorted(received(s, b"*2\r\n$7\r\nbk:full\r\n$2\r\nex\r\n") for s in parked)
        check("the blocked ones are all served",
              got, sorted(b"*2\r\n$7\r\nbk:full\r\n$2\r\ne%d\r\n" % i for i in range(max_blocked)))
        for s in parked:
            s.close()

    check("delete", other.delete(*keys, "bk:str") >= 1, True)
    r.close()
    other.close()
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 0))
