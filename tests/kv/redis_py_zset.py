"""redis-py against a sluice-kv RESP gateway: the sorted-set commands as a
Redis user calls them.

Usage: redis_py_zset.py PORT

redis-py's own methods (its argument building and its reply parsing,
scores as floats): zadd with a mapping and NX, XX, GT, CH and INCR,
zincrby, zscore, zmscore, zrange with withscores, desc, byscore and
bylex, offset and num, zrangebyscore, zrevrange, zrank, zcount,
zlexcount, zpopmin, zpopmax, zmpop, zrandmember, zunionstore with
weights and aggregate, zinter, zdiff, zintercard, zrangestore,
zremrangebyscore, zscan_iter; RESP3 (protocol=3) scores as doubles; a
sorted set's expiry, RENAME, TYPE and SCAN with a type; sorted sets in a
pipeline transaction and under WATCH, where another client's ZADD makes
EXEC fail. (tests/kv/redis_zset_diff.py compares the raw replies with
redis-server's.) Every check that fails is printed; the last line says
how many checks there were and how many failed, and the exit status is 0
only if none failed. Its keys start with "zp:".
"""
import math
import sys

import redis
from redis_py_checks import Checks

WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"


def main(port):
    checks = Checks()
    check, error_of = checks.check, Checks.error_of
    r, other = (redis.Redis(host="127.0.0.1", port=port, socket_timeout=30) for _ in range(2))
    keys = ["zp:a", "zp:b", "zp:c", "zp:s", "zp:set", "zp:moved"]
    r.delete(*keys)

    check("zadd", r.zadd("zp:a", {"x": 1, "y": 2.5, "z": 2.5}), 3)
    check("zadd nx", r.zadd("zp:a", {"x": 9, "w": 0}, nx=True), 1)
    check("zadd xx gt ch", r.zadd("zp:a", {"x": 5, "y": 1}, xx=True, gt=True, ch=True), 1)
    check("zadd incr", r.zadd("zp:a", {"w": 0.5}, incr=True), 0.5)
    check("zincrby", r.zincrby("zp:a", 0.1, "w"), 0.6)
    r.zincrby("zp:a", "inf", "z")
    check("zincrby's NaN", error_of(lambda: r.zincrby("zp:a", "-inf", "z")),
          "resulting score is not a number (NaN)")
    r.zadd("zp:a", {"z": 2.5})
    check("zscore", (r.zscore("zp:a", "y"), r.zscore("zp:a", "nope")), (2.5, None))
    check("zmscore", r.zmscore("zp:a", ["x", "nope", "w"]), [5.0, None, 0.6])
    check("zrange withscores", r.zrange("zp:a", 0, -1, withscores=True),
          [(b"w", 0.6), (b"y", 2.5), (b"z", 2.5), (b"x", 5.0)])
    check("zrange desc", r.zrange("zp:a", 0, 1, desc=True), [b"x", b"z"])
    check("zrange byscore with a limit",
          r.zrange("zp:a", "(1", "+inf", byscore=True, offset=1, num=2), [b"z", b"x"])
    check("zrangebyscore", r.zrangebyscore("zp:a", 2, 5, withscores=True),
          [(b"y", 2.5), (b"z", 2.5), (b"x", 5.0)])
    check("zrevrange", r.zrevrange("zp:a", 0, 0, withscores=True), [(b"x", 5.0)])
    check("zrank and zrevrank", (r.zrank("zp:a", "y"), r.zrevrank("zp:a", "y"),
                                 r.zrank("zp:a", "nope")), (1, 2, None))
    check("zcount", r.zcount("zp:a", "(0.6", "inf"), 3)
    r.zadd("zp:b", {m: 0 for m in "abcde"})
    check("zrange bylex", r.zrange("zp:b", "[b", "(e", bylex=True), [b"b", b"c", b"d"])
    check("zlexcount", r.zlexcount("zp:b", "-", "[c"), 3)
    check("zrangestore", (r.zrangestore("zp:c", "zp:b", 0, 1), r.zrange("zp:c", 0, -1)),
          (2, [b"a", b"b"]))
    check("zpopmin and zpopmax", (r.zpopmin("zp:b"), r.zpopmax("zp:b", 2)),
          ([(b"a", 0.0)], [(b"e", 0.0), (b"d", 0.0)]))
    check("zmpop", r.zmpop(2, ["zp:none", "zp:b"], min=True, count=5),
          [b"zp:b", [[b"b", b"0"], [b"c", b"0"]]])
    check("the last member's pop removes the key", r.exists("zp:b"), 0)
    check("zrandmember past the set", r.zrandmember("zp:c", 5, withscores=True),
          [b"b", b"0", b"a", b"0"])
    check("zrandmember", r.zrandmember("zp:c") in (b"a", b"b"), True)

    # Across keys, sets among the sources.
    r.sadd("zp:set", "y", "q")
    check("zunionstore", (r.zunionstore("zp:c", {"zp:a": 2, "zp:set": 1}, aggregate="MAX"),
                          r.zrange("zp:c", 0, -1, withscores=True)),
          (5, [(b"q", 1.0), (b"w", 1.2), (b"y", 5.0), (b"z", 5.0), (b"x", 10.0)]))
    check("zinter", r.zinter(["zp:a", "zp:set"], withscores=True), [(b"y", 3.5)])
    check("zdiff", r.zdiff(["zp:a", "zp:set"]), [b"w", b"z", b"x"])
    check("zintercard", r.zintercard(2, ["zp:a", "zp:c"], limit=2), 2)
    check("zremrangebyscore", r.zremrangebyscore("zp:c", "-inf", "(5"), 2)
    r.zadd("zp:c", {f"m{i}": i for i in range(40)})
    check("zscan_iter", sorted(r.zscan_iter("zp:c", match="m1*", count=4)),
          sorted([(b"m1", 1.0)] + [(f"m1{i}".encode(), float(10 + i)) for i in range(10)]))

    # Errors and WRONGTYPE both ways.
    r.set("zp:s", "v")
    check("WRONGTYPE: zadd of a string", error_of(lambda: r.zadd("zp:s", {"a": 1})), WRONGTYPE)
    check("WRONGTYPE: get of a sorted set", error_of(lambda: r.get("zp:a")), WRONGTYPE)
    check("WRONGTYPE: zunion with a string", error_of(lambda: r.zunion(["zp:a", "zp:s"])),
          WRONGTYPE)
    check("a bad float", error_of(lambda: r.zadd("zp:a", {"a": "nan"})),
          "value is not a valid float")
    check("a bad range", error_of(lambda: r.zcount("zp:a", "x", 1)),
          "min or max is not a float")

    # RESP3: scores as doubles.
    r3 = redis.Redis(host="127.0.0.1", port=port, socket_timeout=30, protocol=3)
    check("resp3 zscore", r3.zscore("zp:a", "x"), 5.0)
    check("resp3 zrange withscores", r3.zrange("zp:a", -1, -1, withscores=True), [[b"x", 5.0]])
    check("resp3 inf", (r3.zadd("zp:inf", {"i": "inf"}), r3.zscore("zp:inf", "i")), (1, math.inf))
    r3.delete("zp:inf")
    r3.close()

    # Expiry, RENAME, TYPE and SCAN's type.
    check("expire a sorted set", (r.expire("zp:a", 100), r.ttl("zp:a")), (True, 100))
    check("rename a sorted set", (r.rename("zp:a", "zp:moved"), r.ttl("zp:moved"),
                                  r.zcard("zp:moved")), (True, 100, 4))
    check("type", r.type("zp:moved"), b"zset")
    check("scan with a type", sorted(r.scan_iter(match="zp:*", _type="zset", count=100)),
          [b"zp:c", b"zp:moved"])

    # A transaction of sorted-set commands, and WATCH of a sorted set.
    p = r.pipeline()
    p.zadd("zp:moved", {"v": 7}).zscore("zp:moved", "v").get("zp:moved").zcard("zp:moved")
    results = p.execute(raise_on_error=False)
    check("a transaction's replies", (results[:2], str(results[2]), results[3]),
          ([1, 7.0], WRONGTYPE, 5))
    with r.pipeline() as pipe:
        pipe.watch("zp:moved")
        other.zadd("zp:moved", {"theirs": 1})
        pipe.multi()
        pipe.zadd("zp:moved", {"mine": 1})
        check("a WatchError after another client's zadd", error_of(pipe.execute),
              "Watched variable changed.")
    check("the aborted zadd did nothing", r.zscore("zp:moved", "mine"), None)
    check("delete", r.delete(*keys), 4)
    r.close()
    other.close()
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
