"""redis-py against a sluice-kv RESP gateway: the set commands.

Usage: redis_py_set.py PORT

SADD, SREM, SCARD, SISMEMBER, SMISMEMBER, SMEMBERS, SPOP and SRANDMEMBER
(with and without a count, a negative one repeating), SMOVE, SINTER,
SUNION, SDIFF, their STORE forms, SINTERCARD with LIMIT and SSCAN (MATCH,
COUNT; sscan_iter), with Redis 7's
answers and errors; WRONGTYPE both ways; RESP3 (protocol=3) answering
SMEMBERS and the others as sets; a set's expiry, RENAME, TYPE, DEL, SCAN
with a type; sets in a pipeline transaction and under WATCH, where another
client's SADD makes EXEC fail. Every check that fails is printed; the last
line says how many checks there were and how many failed, and the exit
status is 0 only if none failed. Its keys start with "sp:".
"""
import sys

import redis
from redis_py_checks import Checks

WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"


def main(port):
    checks = Checks()
    check, error_of = checks.check, Checks.error_of
    # Two connections: the second writes while the first watches.
    r, other = (redis.Redis(host="127.0.0.1", port=port, socket_timeout=30) for _ in range(2))
    r.delete("sp:a", "sp:b", "sp:c", "sp:d", "sp:s", "sp:moved", "sp:one")

    # The commands on one set.
    check("sadd", r.sadd("sp:a", "x", "y", "z", "x"), 3)
    check("sadd of members it holds", r.sadd("sp:a", "x", "w"), 1)
    check("smembers", r.smembers("sp:a"), {b"w", b"x", b"y", b"z"})
    check("scard", (r.scard("sp:a"), r.scard("sp:none")), (4, 0))
    check("sismember", (r.sismember("sp:a", "x"), r.sismember("sp:a", "q")), (1, 0))
    check("smismember", r.smismember("sp:a", ["x", "q", "z"]), [1, 0, 1])
    r.sadd("sp:scan", *[f"m{i}" for i in range(40)])
    check("sscan_iter", sorted(r.sscan_iter("sp:scan", count=3)),
          sorted(f"m{i}".encode() for i in range(40)))
    check("sscan with match", sorted(r.sscan_iter("sp:scan", match="m3*", count=5)),
          sorted([b"m3"] + [f"m3{i}".encode() for i in range(10)]))
    check("sscan of an absent key", r.sscan("sp:none"), (0, []))
    check("sscan with a negative count", error_of(lambda: r.sscan("sp:a", 0, count=-1)), "syntax error")
    r.delete("sp:scan")
    check("srem", (r.srem("sp:a", "w", "q"), r.srem("sp:none", "w")), (1, 0))
    check("srandmember", r.srandmember("sp:a") in {b"x", b"y", b"z"}, True)
    some = r.srandmember("sp:a", 2)
    check("srandmember with a count", (len(some), len(set(some)), set(some) <= {b"x", b"y", b"z"}),
          (2, 2, True))
    many = r.srandmember("sp:a", -7)
    check("srandmember with a negative count",
          (len(many), set(many) <= {b"x", b"y", b"z"}), (7, True))
    check("srandmember of an absent key", (r.srandmember("sp:none"), r.srandmember("sp:none", 3)),
          (None, []))
    popped = r.spop("sp:a")
    check("spop", (popped in {b"x", b"y", b"z"}, r.sismember("sp:a", popped), r.scard("sp:a")),
          (True, 0, 2))
    check("spop with a count past the set", sorted(r.spop("sp:a", 5)),
          sorted({b"x", b"y", b"z"} - {popped}))
    check("the last member's pop removes the key", r.exists("sp:a"), 0)
    check("spop of an absent key", (r.spop("sp:none"), r.spop("sp:none", 2)), (None, []))
    check("spop with a negative count", error_of(lambda: r.spop("sp:a", -1)),
          "value is out of range, must be positive")
    check("srandmember with a bad count", error_of(lambda: r.srandmember("sp:a", "x")),
          "value is not an integer or out of range")
    check("sadd of nothing", "wrong number of arguments for 'sadd' command" in
          (error_of(lambda: r.execute_command("SADD", "sp:a")) or ""), True)

    # The commands on several sets.
    r.sadd("sp:a", "a", "b", "c", "d")
    r.sadd("sp:b", "c", "d", "e")
    check("sinter", r.sinter("sp:a", "sp:b"), {b"c", b"d"})
    check("sunion", r.sunion("sp:a", "sp:b", "sp:none"), {b"a", b"b", b"c", b"d", b"e"})
    check("sdiff", r.sdiff("sp:a", "sp:b"), {b"a", b"b"})
    check("sintercard", (r.sintercard(2, ["sp:a", "sp:b"]), r.sintercard(2, ["sp:a", "sp:b"], 1)),
          (2, 1))
    check("sintercard errors",
          (error_of(lambda: r.execute_command("SINTERCARD", 0, "sp:a")),
           error_of(lambda: r.execute_command("SINTERCARD", 3, "sp:a")),
           error_of(lambda: r.execute_command("SINTERCARD", 1, "sp:a", "LIMIT", -1))),
          ("numkeys should be greater than 0", "Number of keys can't be greater than number of args",
           "LIMIT can't be negative"))
    r.set("sp:c", "a string")
    check("sunionstore replaces a string", (r.sunionstore("sp:c", ["sp:a", "sp:b"]),
                                            r.type("sp:c")), (5, b"set"))
    check("sinterstore", (r.sinterstore("sp:d", ["sp:a", "sp:b"]), r.smembers("sp:d")),
          (2, {b"c", b"d"}))
    check("sdiffstore of nothing removes the destination",
          (r.sdiffstore("sp:d", ["sp:d", "sp:a"]), r.exists("sp:d")), (0, 0))
    check("smove", (r.smove("sp:a", "sp:d", "a"), r.smove("sp:a", "sp:d", "a"),
                    r.smembers("sp:d")), (True, False, {b"a"}))

    # WRONGTYPE both ways; SET replaces a set.
    r.set("sp:s", "v")
    for what, call in [("get", lambda: r.get("sp:a")), ("lpush", lambda: r.lpush("sp:a", "v")),
                       ("hget", lambda: r.hget("sp:a", "f")),
                       ("sadd of a string", lambda: r.sadd("sp:s", "v")),
                       ("smembers of a string", lambda: r.smembers("sp:s")),
                       ("sinter with a string", lambda: r.sinter("sp:a", "sp:s")),
                       ("smove into a string", lambda: r.smove("sp:a", "sp:s", "b"))]:
        check(f"WRONGTYPE: {what}", error_of(call), WRONGTYPE)
    check("set replaces a set", (r.sadd("sp:one", "v"), r.set("sp:one", "now"),
                                 r.get("sp:one")), (1, True, b"now"))

    # RESP3: SMEMBERS and the commands on several sets answer as sets.
    r3 = redis.Redis(host="127.0.0.1", port=port, socket_timeout=30, protocol=3)
    check("resp3 smembers", r3.execute_command("SMEMBERS", "sp:b"), {b"c", b"d", b"e"})
    check("resp3 sinter", r3.execute_command("SINTER", "sp:a", "sp:b"), {b"c", b"d"})
    check("resp3 srandmember with a count is an array",
          (type(r3.execute_command("SRANDMEMBER", "sp:b", -2)),
           type(r3.execute_command("SRANDMEMBER", "sp:b", 2))), (list, list))
    r3.close()

    # Expiry, RENAME, DEL, EXISTS and SCAN's type on sets.
    check("expire a set", (r.expire("sp:b", 100), r.ttl("sp:b")), (True, 100))
    check("rename a set", (r.rename("sp:b", "sp:moved"), r.ttl("sp:moved"),
                           r.smembers("sp:moved")), (True, 100, {b"c", b"d", b"e"}))
    check("persist a set", (r.persist("sp:moved"), r.ttl("sp:moved")), (True, -1))
    check("type", r.type("sp:moved"), b"set")
    check("scan with a type", sorted(r.scan_iter(match="sp:*", _type="set", count=100)),
          [b"sp:a", b"sp:c", b"sp:d", b"sp:moved"])

    # A transaction of set commands, and WATCH of a set.
    p = r.pipeline()
    p.sadd("sp:moved", "f").smembers("sp:moved").get("sp:moved").smove("sp:moved", "sp:d", "f")
    p.scard("sp:moved")
    results = p.execute(raise_on_error=False)
    check("a transaction's set replies", (results[:2], str(results[2]), results[3:]),
          ([1, {b"c", b"d", b"e", b"f"}], WRONGTYPE, [True, 3]))
    with r.pipeline() as pipe:
        pipe.watch("sp:moved")
        other.sadd("sp:moved", "theirs")
        pipe.multi()
        pipe.sadd("sp:moved", "mine")
        check("a WatchError after another client's sadd", error_of(pipe.execute),
              "Watched variable changed.")
    check("the aborted sadd did nothing", r.sismember("sp:moved", "mine"), 0)
    with r.pipeline() as pipe:
        pipe.watch("sp:moved")
        pipe.multi()
        pipe.sadd("sp:moved", "mine")
        check("exec of an unchanged watched set", pipe.execute(), [1])
    check("delete", r.delete("sp:a", "sp:c", "sp:d", "sp:s", "sp:moved", "sp:one"), 6)
    r.close()
    other.close()

    return checks.finish()


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
