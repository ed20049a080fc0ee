"""redis-py against a sluice-kv RESP gateway: the commands on several keys.

Usage: redis_py_multikey.py PORT

Transactions as redis-py makes them: a pipeline (MULTI ... EXEC, one log
entry, its replies in order, a command's own error among them), an EXEC
that Redis discards (EXECABORT), r.transaction() with WATCH, retried when
another client modifies the watched key first; MSET and MSETNX (all or
none), RENAME and RENAMENX (the deadline moves with the value), FLUSHALL
and FLUSHDB. The answers are Redis 7's. Every check that fails is printed;
the last line says how many checks there were and how many failed, and the
exit status is 0 only if none failed. It flushes the whole store.
"""
import sys

import redis
from redis_py_checks import Checks


def main():
    port = int(sys.argv[1])
    checks = Checks()
    check = checks.check
    error_of = Checks.error_of

    r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=30)
    other = redis.Redis(host="127.0.0.1", port=port, socket_timeout=30)

    # MSET and MSETNX.
    check("mset", r.mset({"mk:a": "1", "mk:b": "2", "mk:c": "3"}), True)
    check("mget after mset", r.mget("mk:a", "mk:b", "mk:c"), [b"1", b"2", b"3"])
    check("msetnx with one key present", r.msetnx({"mk:d": "4", "mk:a": "x"}), False)
    check("msetnx set nothing", (r.get("mk:d"), r.get("mk:a")), (None, b"1"))
    check("msetnx of absent keys", r.msetnx({"mk:d": "4", "mk:e": "5"}), True)
    check("mget after msetnx", r.mget("mk:d", "mk:e"), [b"4", b"5"])
    check("mset of an odd count", "wrong number of arguments" in
          (error_of(lambda: r.execute_command("MSET", "mk:a", "1", "mk:b")) or ""), True)
    check("mset clears deadlines", (r.set("mk:t", "v", ex=100), r.mset({"mk:t": "w"}),
                                    r.ttl("mk:t")), (True, True, -1))

    # RENAME and RENAMENX: the deadline moves with the value.
    r.set("mk:from", "v", ex=100)
    check("rename", r.rename("mk:from", "mk:to"), True)
    check("rename moved the value", (r.get("mk:from"), r.get("mk:to")), (None, b"v"))
    check("rename moved the deadline", r.ttl("mk:to"), 100)
    check("rename of a missing key", error_of(lambda: r.rename("mk:from", "mk:x")),
          "no such key")
    check("renamenx onto a present key", r.renamenx("mk:to", "mk:a"), False)
    check("renamenx left both", (r.get("mk:to"), r.get("mk:a")), (b"v", b"1"))
    check("renamenx onto an absent key", r.renamenx("mk:to", "mk:moved"), True)
    check("renamenx moved the deadline", r.ttl("mk:moved"), 100)
    check("rename onto a present key replaces it",
          (r.rename("mk:moved", "mk:a"), r.get("mk:a"), r.ttl("mk:a")), (True, b"v", 100))

    # A pipeline with transaction=True: MULTI ... EXEC, one log entry.
    p = r.pipeline()
    p.set("mk:n", "10").incr("mk:n").get("mk:n").incr("mk:b").mget("mk:n", "mk:none")
    p.delete("mk:b", "mk:none").exists("mk:b")
    check("a transaction's replies", p.execute(),
          [True, 11, b"11", 3, [b"11", None], 1, 0])
    # A command's own error is one of EXEC's replies; the others ran.
    r.set("mk:text", "abc")
    p = r.pipeline()
    p.incr("mk:text").set("mk:after", "ran")
    results = p.execute(raise_on_error=False)
    check("an error among EXEC's replies", (str(results[0]), results[1]),
          ("value is not an integer or out of range", True))
    check("the command after the error ran", r.get("mk:after"), b"ran")
    # A command refused as it is queued (wrong arity): EXEC discards all.
    p = r.pipeline()
    p.set("mk:aborted", "1").execute_command("GET")
    # (redis-py raises the queued command's own error in EXECABORT's place.)
    check("EXECABORT", "wrong number of arguments" in (error_of(p.execute) or ""), True)
    check("an aborted transaction ran nothing", r.get("mk:aborted"), None)

    # WATCH: r.transaction() reads, then writes in MULTI; another client's
    # write between its WATCH and its EXEC makes EXEC answer nil, and
    # redis-py runs the function again.
    r.set("mk:counter", "0")
    attempts = []

    def increment(pipe):
        value = int(pipe.get("mk:counter"))
        if not attempts:
            other.incrby("mk:counter", 100)  # a conflicting write, the first time only
        attempts.append(value)
        pipe.multi()
        pipe.set("mk:counter", value + 1)

    check("transaction() result", r.transaction(increment, "mk:counter"), [True])
    check("transaction() ran twice (a watch conflict, then success)", attempts, [0, 100])
    check("the counter", r.get("mk:counter"), b"101")
    # The same conflict by hand: a WatchError from EXEC.
    with r.pipeline() as pipe:
        pipe.watch("mk:counter")
        other.set("mk:counter", "x")
        pipe.multi()
        pipe.set("mk:counter", "mine")
        check("a WatchError", error_of(pipe.execute), "Watched variable changed.")
    check("the other client's write stays", r.get("mk:counter"), b"x")
    # No conflict: a watched key nobody writes; UNWATCH; DISCARD.
    with r.pipeline() as pipe:
        pipe.watch("mk:quiet", "mk:counter")
        other.set("mk:elsewhere", "1")
        other.get("mk:counter")
        pipe.multi()
        pipe.set("mk:quiet", "mine")
        check("exec with unchanged watched keys", pipe.execute(), [True])
    with r.pipeline() as pipe:
        pipe.watch("mk:quiet")
        other.set("mk:quiet", "theirs")
        pipe.unwatch()
        pipe.multi()
        pipe.set("mk:quiet", "after unwatch")
        check("exec after unwatch", pipe.execute(), [True])
    # (Sent one by one: redis-py's parser for SET takes +QUEUED for a failed SET.)
    check("discard", (r.execute_command("MULTI"), r.execute_command("ECHO", "queued"),
                      r.execute_command("SET", "mk:gone", "1") is not None,
                      r.execute_command("DISCARD"), r.get("mk:gone")),
          (b"OK", b"QUEUED", True, b"OK", None))
    check("exec without multi", error_of(lambda: r.execute_command("EXEC")),
          "EXEC without MULTI")

    # FLUSHALL and FLUSHDB (SYNC and ASYNC accepted).
    check("flushall", r.flushall(), True)
    check("nothing left", r.mget("mk:a", "mk:c", "mk:n"), [None, None, None])
    r.set("mk:a", "1")
    check("flushdb async", r.flushdb(asynchronous=True), True)
    check("flushdb removed it", r.exists("mk:a"), 0)
    check("flushall sync", r.execute_command("FLUSHALL", "SYNC"), True)
    # The keyspace reads: DBSIZE, KEYS, SCAN and scan_iter with MATCH and
    # COUNT (redis-py parses the cursor as an integer), TOUCH, EXISTS.
    r.mset({f"ks:{i}": str(i) for i in range(300)})
    r.set("other", "x")
    check("dbsize", r.dbsize(), 301)
    check("keys with a class", sorted(r.keys("ks:2[0-4]")),
          [b"ks:20", b"ks:21", b"ks:22", b"ks:23", b"ks:24"])
    check("keys with ?", sorted(r.keys("ks:?")), [f"ks:{i}".encode() for i in range(10)])
    check("keys of nothing", r.keys("none:*"), [])
    cursor, page = r.scan(0, count=20)
    check("scan's cursor is an integer", isinstance(cursor, int) and cursor != 0, True)
    check("a scan page about COUNT long", 0 < len(page) <= 40, True)
    check("scan_iter with match", sorted(r.scan_iter(match="ks:1*", count=25)),
          sorted(f"ks:{i}".encode() for i in range(300) if str(i).startswith("1")))
    check("scan_iter of every key", len(set(r.scan_iter(count=7))), 301)
    check("scan_iter with a type", len(set(r.scan_iter(_type="string", count=100))), 301)
    # Keys added and removed while iterating: every key present throughout
    # is returned at least once.
    seen = set()
    cursor, n = 0, 0
    while True:
        cursor, page = r.scan(cursor, match="ks:*", count=15)
        seen.update(page)
        other.set(f"ks:new:{n}", "1")
        other.delete(f"ks:{200 + n % 100}" if n % 3 == 0 else f"ks:new:{n - 1}")
        n += 1
        if cursor == 0:
            break
    stable = {f"ks:{i}".encode() for i in range(300) if not (200 <= i < 300)}
    check("scan under writes returns every stable key", stable - seen, set())
    check("touch", r.touch("ks:1", "ks:2", "nope"), 2)
    check("exists counts repeats", r.exists("ks:1", "ks:1", "nope"), 2)
    r.close()
    other.close()

    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
