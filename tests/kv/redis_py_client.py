"""redis-py, a client we did not write, against a sluice-kv RESP gateway.

Usage: redis_py_client.py PORT [PASSWORD]

Connects as any redis-py program does (redis-py sends CLIENT SETINFO on
connect, and AUTH first when given a password), then uses the commands
sluice-kv serves: PING, ECHO, SET/GET (binary-safe), EXISTS and DEL of
several keys, the string commands (INCR, INCRBY, DECR, DECRBY, APPEND,
STRLEN, SETNX, GETSET, GETDEL, MGET, SET with NX, XX and GET, TYPE,
GETRANGE, UNLINK, INCRBYFLOAT, SETRANGE) with Redis's answers and errors, expiry (SET's EX, PX,
EXAT, KEEPTTL, SETEX, PSETEX, EXPIRE and its kin with NX/XX/GT/LT, TTL,
PTTL, EXPIRETIME, PERSIST, GETEX; which commands clear a deadline and
which keep it; a key set with px=200 gone half a second later), a
pipeline whose commands take effect in order, CLIENT SETNAME/GETNAME/ID/INFO,
INFO sections and CONFIG GET. Every check that
fails is printed; the last line says how many checks there were and how
many failed, and the exit status is 0 only if none failed.
"""
import sys
import time

import redis
from redis_py_checks import Checks


def main():
    port = int(sys.argv[1])
    password = sys.argv[2] if len(sys.argv) > 2 else None
    checks = Checks()
    check = checks.check

    r = redis.Redis(host="127.0.0.1", port=port, password=password, socket_timeout=30)
    check("ping", r.ping(), True)
    check("echo", r.echo("hello"), b"hello")
    odd = b"bin\x00ary\r\nvalue"
    check("set", r.set("py:key", odd), True)
    check("get", r.get("py:key"), odd)
    check("get of a missing key", r.get("py:missing"), None)
    check("exists", r.exists("py:key", "py:missing", "py:key"), 2)
    check("delete", r.delete("py:key", "py:missing"), 1)
    check("get after delete", r.get("py:key"), None)

    # The string commands, answered as Redis answers them.
    check("incr of a missing key", r.incr("py:n"), 1)
    check("incrby", r.incrby("py:n", 41), 42)
    check("decr", r.decr("py:n"), 41)
    check("decrby", r.decrby("py:n", 50), -9)
    check("the number as a value", r.get("py:n"), b"-9")
    r.set("py:text", "abc")
    for what, call in (("incr", lambda: r.incr("py:text")),
                       ("incrby of a non-integer", lambda: r.execute_command("INCRBY", "py:n", "1.5"))):
        try:
            call()
            check(what + " refused", "no error", "an error")
        except redis.ResponseError as e:
            check(what + " refused", str(e), "value is not an integer or out of range")
    r.set("py:max", str(2**63 - 1))
    try:
        r.incr("py:max")
        check("overflow refused", "no error", "an error")
    except redis.ResponseError as e:
        check("overflow refused", str(e), "increment or decrement would overflow")
    # INCRBYFLOAT (the store's doubles print as Redis prints these) and
    # SETRANGE.
    r.set("py:f", "10.50")
    check("incrbyfloat", r.incrbyfloat("py:f", 0.1), 10.6)
    check("incrbyfloat's value", r.get("py:f"), b"10.6")
    r.set("py:f", "5.0e3")
    check("incrbyfloat of an exponent", r.incrbyfloat("py:f", 2.0e2), 5200.0)
    check("incrbyfloat's value printed without one", r.get("py:f"), b"5200")
    check("incrbyfloat of a missing key", r.incrbyfloat("py:f2", -1.5), -1.5)
    try:
        r.incrbyfloat("py:text", 1)
        check("incrbyfloat of a non-number refused", "no error", "an error")
    except redis.ResponseError as e:
        check("incrbyfloat of a non-number refused", str(e), "value is not a valid float")
    r.set("py:sr", "Hello World")
    check("setrange", r.setrange("py:sr", 6, "Redis"), 11)
    check("setrange's value", r.get("py:sr"), b"Hello Redis")
    check("setrange of a missing key pads with zero bytes", (r.setrange("py:sr2", 3, "x"),
                                                             r.get("py:sr2")), (4, b"\x00\x00\x00x"))
    check("setrange of nothing makes no key", (r.setrange("py:sr3", 5, ""), r.exists("py:sr3")),
          (0, 0))
    check("append", r.append("py:text", "de"), 5)
    check("append to a missing key", r.append("py:new", "xy"), 2)
    check("strlen", r.strlen("py:text"), 5)
    check("strlen of a missing key", r.strlen("py:missing"), 0)
    check("setnx of a present key", r.setnx("py:text", "no"), False)
    check("setnx of a missing key", r.setnx("py:nx", "yes"), True)
    check("getset", r.getset("py:nx", "again"), b"yes")
    check("getset of a missing key", r.getset("py:gs", "first"), None)
    check("getdel", r.getdel("py:gs"), b"first")
    check("getdel of a missing key", r.getdel("py:gs"), None)
    # SET's options: NX, XX and GET (expiry below).
    check("set nx of a present key", r.set("py:text", "no", nx=True), None)
    check("set nx of a missing key", r.set("py:snx", "1", nx=True), True)
    check("set xx of a missing key", r.set("py:sxx", "1", xx=True), None)
    check("set xx of a present key", r.set("py:snx", "2", xx=True), True)
    check("set get", r.set("py:snx", "3", get=True), b"2")
    check("set nx get of a present key", r.set("py:snx", "4", nx=True, get=True), b"3")
    check("set nx get kept the value", r.get("py:snx"), b"3")
    check("set xx get of a missing key", r.set("py:sxx", "1", xx=True, get=True), None)
    check("set xx get did not set", r.get("py:sxx"), None)

    # Expiry, as Redis answers it (TTL rounds the time left to seconds).
    check("set ex", r.set("py:ttl", "1", ex=100), True)
    check("ttl", r.ttl("py:ttl"), 100)
    check("pttl within the last second", 99000 < r.pttl("py:ttl") <= 100000, True)
    check("expire", r.expire("py:ttl", 50), True)
    check("ttl after expire", r.ttl("py:ttl"), 50)
    check("expire of a missing key", r.expire("py:missing", 10), False)
    check("expire gt of a later deadline", r.expire("py:ttl", 10, gt=True), False)
    check("pexpire lt", r.pexpire("py:ttl", 10000, lt=True), True)
    check("ttl after pexpire lt", r.ttl("py:ttl"), 10)
    check("expire nx of a key with one", r.expire("py:ttl", 10, nx=True), False)
    check("set keepttl", r.set("py:ttl", "2", keepttl=True), True)
    check("ttl after keepttl", r.ttl("py:ttl"), 10)
    check("persist", r.persist("py:ttl"), True)
    check("persist again", r.persist("py:ttl"), False)
    check("ttl after persist", r.ttl("py:ttl"), -1)
    check("ttl of a missing key", r.ttl("py:missing"), -2)
    check("pttl of a missing key", r.pttl("py:missing"), -2)
    at = int(time.time()) + 1000
    check("expireat", r.expireat("py:ttl", at), True)
    check("expiretime", r.expiretime("py:ttl"), at)
    check("pexpiretime", r.pexpiretime("py:ttl"), at * 1000)
    check("ttl after expireat", 990 <= r.ttl("py:ttl") <= 1000, True)
    check("setex", r.execute_command("SETEX", "py:sx", 30, "v"), True)
    check("ttl after setex", r.ttl("py:sx"), 30)
    check("psetex", r.psetex("py:sx", 20000, "w"), True)
    check("ttl after psetex", r.ttl("py:sx"), 20)
    check("set exat", r.set("py:sx", "x", exat=at), True)
    check("expiretime after set exat", r.expiretime("py:sx"), at)
    check("getex px", r.getex("py:ttl", px=5000), b"2")
    check("pttl after getex px", 4000 < r.pttl("py:ttl") <= 5000, True)
    check("getex persist", r.getex("py:ttl", persist=True), b"2")
    check("ttl after getex persist", r.ttl("py:ttl"), -1)
    check("getex of a missing key", r.getex("py:missing", ex=10), None)
    check("set get ex", r.set("py:ttl", "3", get=True, ex=100), b"2")
    check("ttl after set get ex", r.ttl("py:ttl"), 100)
    check("set nx px of a missing key", r.set("py:nxpx", "1", nx=True, px=100000), True)
    check("pttl after set nx px", 99000 < r.pttl("py:nxpx") <= 100000, True)
    check("incr keeps the deadline", (r.incr("py:nxpx"), r.ttl("py:nxpx")), (2, 100))
    check("append keeps the deadline", (r.append("py:nxpx", "0"), r.ttl("py:nxpx")), (2, 100))
    check("set clears the deadline", (r.set("py:nxpx", "4"), r.ttl("py:nxpx")), (True, -1))
    r.set("py:ttl", "5", ex=100)
    check("getset clears the deadline", (r.getset("py:ttl", "6"), r.ttl("py:ttl")), (b"5", -1))
    r.set("py:ttl", "7", ex=100)
    check("delete takes the deadline with it",
          (r.delete("py:ttl"), r.set("py:ttl", "8"), r.ttl("py:ttl")), (1, True, -1))
    check("expire of a time passed deletes", (r.expire("py:ttl", -1), r.exists("py:ttl")), (True, 0))
    for what, call, want in (
            ("set ex=0", lambda: r.set("py:ttl", "1", ex=0), "invalid expire time in 'set' command"),
            ("setex 0", lambda: r.execute_command("SETEX", "py:ttl", 0, "1"), "invalid expire time in 'setex' command"),
            ("getex ex=0", lambda: r.getex("py:sx", ex=0), "invalid expire time in 'getex' command"),
            ("expire nx xx", lambda: r.expire("py:sx", 1, nx=True, xx=True),
             "NX and XX, GT or LT options at the same time are not compatible")):
        try:
            call()
            check(what + " refused", "no error", "an error")
        except redis.ResponseError as e:
            check(what + " refused", str(e), want)
    check("set px=200", r.set("py:short", "v", px=200), True)
    check("read before its deadline", r.get("py:short"), b"v")
    time.sleep(0.5)
    check("read half a second later: gone", r.get("py:short"), None)
    check("ttl half a second later", r.ttl("py:short"), -2)
    check("type of a string", r.type("py:text"), b"string")
    check("type of a missing key", r.type("py:missing"), b"none")
    r.set("py:range", "This is a string")
    for (start, end), want in (((0, 3), b"This"), ((-3, -1), b"ing"), ((0, -1), b"This is a string"),
                               ((10, 100), b"string"), ((5, 3), b""), ((-1, -5), b""),
                               ((-100, 1), b"Th")):
        check(f"getrange {start} {end}", r.getrange("py:range", start, end), want)
    check("getrange of a missing key", r.getrange("py:missing", 0, -1), b"")
    check("unlink", r.unlink("py:range", "py:missing"), 1)
    check("mget", r.mget("py:text", "py:missing", "py:nx", "py:n"), [b"abcde", None, b"again", b"-9"])
    # Increments from a pipeline: each takes effect once, in order.
    p = r.pipeline(transaction=False)
    for _ in range(20):
        p.incr("py:count")
    check("pipelined increments", p.execute(), list(range(1, 21)))

    # A pipeline (no MULTI): sent together, answered in order, taking effect
    # in the order sent (each GET reads the SET before it). A key per pair:
    # the whole pipeline is concurrent in the history, and porcupine checks
    # key by key.
    p = r.pipeline(transaction=False)
    for i in range(50):
        p.set(f"py:pipe:{i}", str(i))
        p.get(f"py:pipe:{i}")
    replies = p.execute()
    check("pipeline length", len(replies), 100)
    check("pipeline reads its own writes",
          [replies[2 * i + 1] for i in range(50)], [str(i).encode() for i in range(50)])

    check("client setname", r.client_setname("py-test"), True)
    name = r.client_getname()
    check("client getname", name.decode() if isinstance(name, bytes) else name, "py-test")
    check("client id is a number", isinstance(r.client_id(), int), True)
    info = r.client_info()
    check("client info names the library", info.get("lib-name"), "redis-py")
    check("client info names the client", info.get("name"), "py-test")
    server = r.info("server")
    check("info server", server.get("redis_mode"), "standalone")
    check("info stats has commands", "total_commands_processed" in r.info("stats"), True)
    check("config get", r.config_get("maxclients").get("maxclients", "").isdigit(), True)
    try:
        r.config_set("maxclients", "5")
        check("config set refused", "no error", "an error")
    except redis.ResponseError as e:
        check("config set refused", "CONFIG SET is not supported" in str(e), True)
    try:
        r.execute_command("XADD", "py:stream", "*", "f", "v")  # (no streams)
        check("unknown command refused", "no error", "an error")
    except redis.ResponseError as e:
        check("unknown command refused", "unknown command" in str(e), True)
    r.close()

    if password is not None:
        # Without the password: every command is refused.
        bare = redis.Redis(host="127.0.0.1", port=port, socket_timeout=30)
        try:
            bare.get("py:key")
            check("NOAUTH without a password", "no error", "an error")
        except redis.AuthenticationError:
            check("NOAUTH without a password", True, True)
        except redis.ResponseError as e:
            check("NOAUTH without a password", "NOAUTH" in str(e), True)
        bare.close()
        wrong = redis.Redis(host="127.0.0.1", port=port, password="not " + password,
                            socket_timeout=30)
        try:
            wrong.ping()
            check("a wrong password", "no error", "an error")
        except redis.AuthenticationError:
            check("a wrong password", True, True)
        wrong.close()

    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
