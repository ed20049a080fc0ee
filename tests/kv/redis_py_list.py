"""redis-py against a sluice-kv RESP gateway: the list commands.

Usage: redis_py_list.py PORT

LPUSH, RPUSH, LPUSHX, RPUSHX, LPOP and RPOP (with and without a count),
LLEN, LRANGE, LINDEX, LSET, LREM, LTRIM, LINSERT, LPOS (RANK, COUNT,
MAXLEN), LMOVE, RPOPLPUSH and LMPOP, with Redis 7's answers and errors; WRONGTYPE both ways; a list's expiry, RENAME, TYPE, DEL, SCAN with
a type; lists in a pipeline transaction and under WATCH, where another
client's RPUSH makes EXEC fail; BLMOVE of a list that holds something
(the blocking commands at length: redis_py_blocking.py). Every check that
fails is printed; the last line says how many checks there were and how
many failed, and the exit status is 0 only if none failed. Its keys start
with "lp:".
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
    r.delete("lp:l", "lp:s", "lp:h", "lp:moved", "lp:one", "lp:p", "lp:q")

    # The commands on one list.
    check("lpush", r.lpush("lp:l", "a", "b", "c"), 3)
    check("rpush", r.rpush("lp:l", "x", ""), 5)
    check("lrange whole", r.lrange("lp:l", 0, -1), [b"c", b"b", b"a", b"x", b""])
    check("lrange from the tail", r.lrange("lp:l", -2, 100), [b"x", b""])
    check("lrange empty", (r.lrange("lp:l", 3, 1), r.lrange("lp:none", 0, -1)), ([], []))
    check("llen", (r.llen("lp:l"), r.llen("lp:none")), (5, 0))
    check("lindex", (r.lindex("lp:l", 0), r.lindex("lp:l", -2), r.lindex("lp:l", 9)),
          (b"c", b"x", None))
    check("lset", r.lset("lp:l", 1, "B"), True)
    check("lset out of range", error_of(lambda: r.lset("lp:l", 9, "v")), "index out of range")
    check("lset of an absent key", error_of(lambda: r.lset("lp:none", 0, "v")), "no such key")
    check("lpushx, rpushx", (r.lpushx("lp:none", "v"), r.rpushx("lp:l", "a", "a")), (0, 7))
    check("lrem from the tail", r.lrem("lp:l", -2, "a"), 2)
    check("lrem of none", r.lrem("lp:l", 0, "zz"), 0)
    check("lpop", r.lpop("lp:l"), b"c")
    check("rpop with a count", r.rpop("lp:l", 2), [b"", b"x"])
    check("lpop of an absent key", (r.lpop("lp:none"), r.lpop("lp:none", 2)), (None, None))
    check("lpop with a negative count", error_of(lambda: r.lpop("lp:l", -1)),
          "value is out of range, must be positive")
    check("ltrim", (r.ltrim("lp:l", 1, -1), r.lrange("lp:l", 0, -1)), (True, [b"a"]))
    check("lrange with a bad index", error_of(lambda: r.lrange("lp:l", "a", 1)),
          "value is not an integer or out of range")
    check("lpush of nothing", "wrong number of arguments for 'lpush' command" in
          (error_of(lambda: r.execute_command("LPUSH", "lp:l")) or ""), True)
    head = r.lindex("lp:l", 0)
    check("blmove of what is there (a rotation)", r.blmove("lp:l", "lp:l", 1, "LEFT", "LEFT"), head)
    check("type", r.type("lp:l"), b"list")

    # LINSERT, LPOS, LMOVE and RPOPLPUSH.
    r.rpush("lp:p", "a", "b", "c", "1", "2", "3", "c", "c")
    check("lpos", (r.lpos("lp:p", "c"), r.lpos("lp:p", "c", rank=-1), r.lpos("lp:p", "zz")),
          (2, 7, None))
    check("lpos with a count", (r.lpos("lp:p", "c", count=2), r.lpos("lp:p", "c", rank=-1, count=0),
                                r.lpos("lp:p", "c", count=0, maxlen=7), r.lpos("lp:none", "c", count=1)),
          ([2, 6], [7, 6, 2], [2, 6], []))
    check("lpos rank 0", (error_of(lambda: r.lpos("lp:p", "c", rank=0)) or "").startswith(
        "RANK can't be zero: use 1 to start from the first match"), True)
    check("lpos negative count, maxlen", (error_of(lambda: r.lpos("lp:p", "c", count=-1)),
                                          error_of(lambda: r.lpos("lp:p", "c", maxlen=-1))),
          ("COUNT can't be negative", "MAXLEN can't be negative"))
    check("lpos syntax", error_of(lambda: r.execute_command("LPOS", "lp:p", "c", "RANK")),
          "syntax error")
    check("linsert", (r.linsert("lp:p", "before", "b", "x"), r.linsert("lp:p", "AFTER", "3", "y"),
                      r.linsert("lp:p", "before", "zz", "v"), r.linsert("lp:none", "after", "a", "v")),
          (9, 10, -1, 0))
    check("linsert syntax", error_of(lambda: r.execute_command("LINSERT", "lp:p", "in", "a", "v")),
          "syntax error")
    check("rpoplpush", (r.rpoplpush("lp:p", "lp:q"), r.rpoplpush("lp:none", "lp:q")), (b"c", None))
    check("lmove", (r.lmove("lp:p", "lp:q", "LEFT", "RIGHT"), r.lmove("lp:q", "lp:q", "LEFT", "RIGHT"),
                    r.lrange("lp:q", 0, -1)), (b"a", b"c", [b"a", b"c"]))
    check("lmove syntax", error_of(lambda: r.execute_command("LMOVE", "lp:p", "lp:q", "UP", "LEFT")),
          "syntax error")
    r.set("lp:s", "v")
    check("lmove of a string", (error_of(lambda: r.lmove("lp:p", "lp:s", "LEFT", "LEFT")),
                                r.llen("lp:p")), (WRONGTYPE, 8))
    check("lmpop", (r.lmpop(2, "lp:none", "lp:p", direction="LEFT", count=2),
                    r.lmpop(1, "lp:p", direction="RIGHT"), r.lmpop(1, "lp:none", direction="LEFT")),
          ([b"lp:p", [b"x", b"b"]], [b"lp:p", [b"c"]], None))
    check("lmpop of a string", error_of(lambda: r.lmpop(2, "lp:s", "lp:p", direction="LEFT")),
          WRONGTYPE)
    r.delete("lp:p", "lp:q")

    # WRONGTYPE both ways; SET replaces a list.
    r.set("lp:s", "v")
    r.hset("lp:h", "f", "v")
    for what, call in [("get", lambda: r.get("lp:l")), ("incr", lambda: r.incr("lp:l")),
                       ("hget", lambda: r.hget("lp:l", "f")),
                       ("lpush of a string", lambda: r.lpush("lp:s", "v")),
                       ("lrange of a string", lambda: r.lrange("lp:s", 0, -1)),
                       ("rpop of a hash", lambda: r.rpop("lp:h")),
                       ("llen of a hash", lambda: r.llen("lp:h"))]:
        check(f"WRONGTYPE: {what}", error_of(call), WRONGTYPE)
    check("mget of a list", r.mget("lp:l", "lp:s"), [None, b"v"])
    check("set replaces a list", (r.rpush("lp:one", "v"), r.set("lp:one", "now"),
                                  r.get("lp:one")), (1, True, b"now"))

    # Expiry, RENAME, DEL, EXISTS and SCAN's type on lists.
    check("expire a list", (r.expire("lp:l", 100), r.ttl("lp:l")), (True, 100))
    check("rename a list", (r.rename("lp:l", "lp:moved"), r.ttl("lp:moved"),
                            r.lrange("lp:moved", 0, -1)), (True, 100, [b"a"]))
    check("persist a list", (r.persist("lp:moved"), r.ttl("lp:moved")), (True, -1))
    check("exists", r.exists("lp:moved", "lp:l"), 1)
    check("scan with a type", sorted(r.scan_iter(match="lp:*", _type="list", count=100)),
          [b"lp:moved"])
    check("the last element's pop removes the key",
          (r.rpush("lp:two", "v"), r.rpop("lp:two"), r.exists("lp:two")), (1, b"v", 0))

    # A transaction of list commands, and WATCH of a list.
    p = r.pipeline()
    p.rpush("lp:moved", "y", "z").lrange("lp:moved", 0, -1).get("lp:moved").lpop("lp:moved", 2)
    p.llen("lp:moved")
    results = p.execute(raise_on_error=False)
    check("a transaction's list replies", (results[:2], str(results[2]), results[3:]),
          ([3, [b"a", b"y", b"z"]], WRONGTYPE, [[b"a", b"y"], 1]))
    with r.pipeline() as pipe:
        pipe.watch("lp:moved")
        other.rpush("lp:moved", "theirs")
        pipe.multi()
        pipe.rpush("lp:moved", "mine")
        check("a WatchError after another client's rpush", error_of(pipe.execute),
              "Watched variable changed.")
    check("the aborted rpush did nothing", r.lrange("lp:moved", 0, -1), [b"z", b"theirs"])
    with r.pipeline() as pipe:
        pipe.watch("lp:moved")
        pipe.multi()
        pipe.rpush("lp:moved", "mine")
        check("exec of an unchanged watched list", pipe.execute(), [3])
    check("delete", r.delete("lp:moved", "lp:s", "lp:h", "lp:one"), 4)
    r.close()
    other.close()

    return checks.finish()


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
