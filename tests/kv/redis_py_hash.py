"""redis-py against a sluice-kv RESP gateway: the hash commands.

Usage: redis_py_hash.py PORT

HSET (with a mapping), HMSET, HSETNX, HGET, HMGET, HDEL, HEXISTS, HLEN,
HSTRLEN, HGETALL (a dict; its fields in byte order), HKEYS, HVALS, HINCRBY,
HINCRBYFLOAT, HSCAN (MATCH, COUNT, NOVALUES; hscan_iter), HRANDFIELD, with Redis 7's
answers and errors; WRONGTYPE both ways; a
hash's expiry, RENAME, TYPE, DEL, SCAN with a type; hashes in a pipeline
transaction and under WATCH, where another client's HSET makes EXEC fail.
Every check that fails is printed; the last line says how many checks
there were and how many failed, and the exit status is 0 only if none
failed. Its keys start with "hp:".
"""
import sys
import warnings

import redis
from redis_py_checks import Checks

WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"


def main(port):
    checks = Checks()
    check, error_of = checks.check, Checks.error_of
    # Two connections: the second writes while the first watches.
    r, other = (redis.Redis(host="127.0.0.1", port=port, socket_timeout=30) for _ in range(2))
    r.delete("hp:h", "hp:s", "hp:moved", "hp:w")

    # The commands on one hash.
    check("hset of a mapping", r.hset("hp:h", mapping={"b": "2", "a": "1"}), 2)
    check("hset of one field", r.hset("hp:h", "c", "3"), 1)
    check("hset of a present field", r.hset("hp:h", "a", "one"), 0)
    with warnings.catch_warnings():  # (deprecated in redis-py as in Redis, still answered)
        warnings.simplefilter("ignore", DeprecationWarning)
        check("hmset", r.hmset("hp:h", {"d": "4"}), True)
    check("hget", r.hget("hp:h", "a"), b"one")
    check("hget of an absent field", r.hget("hp:h", "zz"), None)
    check("hget of an absent key", r.hget("hp:none", "a"), None)
    check("hmget", r.hmget("hp:h", ["a", "zz", "d"]), [b"one", None, b"4"])
    check("hgetall in field order", list(r.hgetall("hp:h").items()),
          [(b"a", b"one"), (b"b", b"2"), (b"c", b"3"), (b"d", b"4")])
    check("hgetall of an absent key", r.hgetall("hp:none"), {})
    check("hkeys", r.hkeys("hp:h"), [b"a", b"b", b"c", b"d"])
    check("hvals", r.hvals("hp:h"), [b"one", b"2", b"3", b"4"])
    check("hlen", (r.hlen("hp:h"), r.hlen("hp:none")), (4, 0))
    check("hrandfield", (r.hrandfield("hp:h") in (b"a", b"b", b"c", b"d"),
                         r.hrandfield("hp:h", 10, withvalues=True), len(r.hrandfield("hp:h", -9)),
                         r.hrandfield("hp:none"), r.hrandfield("hp:none", 2)),
          (True, [b"a", b"one", b"b", b"2", b"c", b"3", b"d", b"4"], 9, None, []))
    check("hexists", (r.hexists("hp:h", "a"), r.hexists("hp:h", "zz")), (True, False))
    check("hstrlen", (r.hstrlen("hp:h", "a"), r.hstrlen("hp:h", "zz")), (3, 0))
    check("hsetnx", (r.hsetnx("hp:h", "a", "x"), r.hsetnx("hp:h", "e", "5")), (False, True))
    check("hincrby", (r.hincrby("hp:h", "b", 40), r.hincrby("hp:h", "n", -3)), (42, -3))
    check("hincrbyfloat", (r.hincrbyfloat("hp:h", "f", 10.5), r.hincrbyfloat("hp:h", "f", 0.1)),
          (10.5, 10.6))
    check("hincrby of a non-integer", error_of(lambda: r.hincrby("hp:h", "a", 1)),
          "hash value is not an integer")
    check("hincrby past 64 bits", error_of(lambda: (r.hset("hp:h", "max", 2**63 - 1),
                                                    r.hincrby("hp:h", "max", 1))),
          "increment or decrement would overflow")
    check("hincrbyfloat of a non-number", error_of(lambda: r.hincrbyfloat("hp:h", "a", 1)),
          "hash value is not a float")
    check("hincrby with a bad increment",
          error_of(lambda: r.execute_command("HINCRBY", "hp:h", "b", "x")),
          "value is not an integer or out of range")
    check("hdel", r.hdel("hp:h", "a", "zz", "b"), 2)
    check("hset of no pair", "wrong number of arguments for 'hset' command" in
          (error_of(lambda: r.execute_command("HSET", "hp:h", "f")) or ""), True)
    check("type", r.type("hp:h"), b"hash")

    # HSCAN: every field once over pages of COUNT 3, MATCH and NOVALUES.
    r.hset("hp:scan", mapping={f"f{i}": f"v{i}" for i in range(40)})
    check("hscan_iter", dict(r.hscan_iter("hp:scan", count=3)),
          {f"f{i}".encode(): f"v{i}".encode() for i in range(40)})
    check("hscan with match", sorted(r.hscan_iter("hp:scan", match="f1?", count=5)),
          sorted((f"f1{i}".encode(), f"v1{i}".encode()) for i in range(10)))
    check("hscan novalues", sorted(r.hscan_iter("hp:scan", count=1000, no_values=True)),
          sorted(f"f{i}".encode() for i in range(40)))
    check("hscan of an absent key", r.hscan("hp:none"), (0, {}))
    check("hscan with a bad cursor", error_of(lambda: r.hscan("hp:scan", "x")), "invalid cursor")
    check("hscan with count 0", error_of(lambda: r.hscan("hp:scan", 0, count=0)), "syntax error")
    r.delete("hp:scan")

    # WRONGTYPE both ways; SET replaces a hash.
    r.set("hp:s", "v")
    for what, call in [("get", lambda: r.get("hp:h")), ("incr", lambda: r.incr("hp:h")),
                       ("append", lambda: r.append("hp:h", "x")),
                       ("hget of a string", lambda: r.hget("hp:s", "f")),
                       ("hset of a string", lambda: r.hset("hp:s", "f", "v")),
                       ("hgetall of a string", lambda: r.hgetall("hp:s"))]:
        check(f"WRONGTYPE: {what}", error_of(call), WRONGTYPE)
    check("mget of a hash", r.mget("hp:h", "hp:s"), [None, b"v"])
    check("set replaces a hash", (r.set("hp:s2", "x"), r.hset("hp:s3", "f", "v"),
                                  r.set("hp:s3", "now"), r.get("hp:s3")), (True, 1, True, b"now"))

    # Expiry, RENAME, DEL, EXISTS and SCAN's type on hashes.
    check("expire a hash", (r.expire("hp:h", 100), r.ttl("hp:h")), (True, 100))
    check("rename a hash", (r.rename("hp:h", "hp:moved"), r.ttl("hp:moved"),
                            r.hget("hp:moved", "c")), (True, 100, b"3"))
    check("persist a hash", (r.persist("hp:moved"), r.ttl("hp:moved")), (True, -1))
    check("exists", r.exists("hp:moved", "hp:h"), 1)
    check("scan with a type", sorted(r.scan_iter(match="hp:*", _type="hash", count=100)),
          [b"hp:moved"])
    check("the last field's hdel removes the key",
          (r.hset("hp:one", "f", "v"), r.hdel("hp:one", "f"), r.exists("hp:one")), (1, 1, 0))

    # A transaction of hash commands, and WATCH of a hash.
    p = r.pipeline()
    p.hset("hp:moved", "x", "y").hincrby("hp:moved", "n", 5).hmget("hp:moved", "x", "n")
    p.get("hp:moved").hlen("hp:moved")
    results = p.execute(raise_on_error=False)
    check("a transaction's hash replies", (results[:3], str(results[3]), results[4]),
          ([1, 2, [b"y", b"2"]], WRONGTYPE, 7))
    with r.pipeline() as pipe:
        pipe.watch("hp:moved")
        other.hset("hp:moved", "theirs", "1")
        pipe.multi()
        pipe.hset("hp:moved", "mine", "1")
        check("a WatchError after another client's hset", error_of(pipe.execute),
              "Watched variable changed.")
    check("the aborted hset did nothing", r.hexists("hp:moved", "mine"), False)
    with r.pipeline() as pipe:
        pipe.watch("hp:moved")
        pipe.multi()
        pipe.hset("hp:moved", "mine", "1")
        check("exec of an unchanged watched hash", pipe.execute(), [1])
    check("delete", r.delete("hp:moved", "hp:s", "hp:s2", "hp:s3"), 4)
    r.close()
    other.close()

    return checks.finish()


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
