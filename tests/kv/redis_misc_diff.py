"""LMPOP, HRANDFIELD and the blocking commands of a sluice-kv RESP gateway
against redis-server 7.0, reply for reply (as redis_zset_diff.py does for
sorted sets, whose Conn and RedisServer it uses).

Usage: redis_misc_diff.py PORT REDIS_SERVER [COMMANDS [SEED]]

Starts REDIS_SERVER on a free loopback port without persistence, in a
temporary directory, then sends the same commands to it and to the gateway
at PORT: first the deterministic cases (each also checked against the
reply it must be, RESP3 and MULTI/EXEC among them; the blocking commands'
where nothing is left to chance; transactions with errors Redis finds as
it queues a command and errors it finds only as it runs it, with WATCH),
then COMMANDS (default 2000) seeded random list and hash commands (SEED,
default 17), pipelined in batches, some of them in transactions with
such errors (MULTI ... EXEC or DISCARD, now and then a WATCH first), and
a quarter as many again over RESP3 (HELLO 3): LMPOP with
its errors, pushes, LRANGE, LLEN, HSET, HDEL, HLEN, HGETALL, HKEYS,
HRANDFIELD (no count, counts below, at and past the hash's size, negative
counts, WITHVALUES, bad counts), wrong types, wrong argument counts and
the keyspace commands. Replies compare byte for byte, but for what Redis
leaves to chance or to its hash table's order: HGETALL and HKEYS compare
sorted (sluice-kv answers in field order), and an HRANDFIELD reply is
checked against the HGETALL this script sends right after it (every field
and value the hash's, distinct for a count >= 0, as many as the count and
the size say, RESP3 pairs nested) and compared by that shape. Every
difference is printed with the command; the last line says how many
replies were compared and how many differed, and the exit status is 0
only if none did. Its keys start with "md:".
"""
import random
import re
import sys

from redis_zset_diff import Conn, RedisServer


def parse(buf, at=0):
    """One RESP2/RESP3 reply from buf[at:]: (value, end). Errors and simple
    strings as ("-", text) and ("+", text), nulls as None, aggregates as
    lists (a map's as a list of pairs)."""
    end = buf.index(b"\r\n", at)
    kind, head, at = buf[at:at + 1], buf[at + 1:end], end + 2
    if kind in (b"+", b"-"):
        return (kind.decode(), head), at
    if kind == b":":
        return int(head), at
    if kind == b"_":
        return None, at
    if kind == b"$":
        n = int(head)
        return (None, at) if n < 0 else (buf[at:at + n], at + n + 2)
    if kind in (b"*", b"~", b"%"):
        n = int(head)
        if n < 0:
            return None, at
        out = []
        for _ in range(n * (2 if kind == b"%" else 1)):
            v, at = parse(buf, at)
            out.append(v)
        if kind == b"%":
            out = [[out[i], out[i + 1]] for i in range(0, len(out), 2)]
        return out, at
    return (kind.decode(), head), at


def hash_of(reply):
    """HGETALL's reply as a dict (RESP2 flat, RESP3 a map), or None."""
    v, _ = parse(reply)
    if not isinstance(v, list):
        return None
    if v and isinstance(v[0], list):
        return {f: x for f, x in v}
    return {v[i]: v[i + 1] for i in range(0, len(v), 2)}


def hrandfield_shape(cmd, reply, hgetall):
    """What of an HRANDFIELD reply does not depend on chance: the reply
    itself where nothing is random (errors, nulls, empty arrays), else its
    shape once checked against the hash HGETALL then answered."""
    v, _ = parse(reply)
    if not isinstance(v, (list, bytes)) or v == []:
        return reply
    h = hash_of(hgetall) or {}
    if len(cmd) == 2:
        return b"a field" if v in h else b"NOT A FIELD: " + reply
    count, with_values = int(cmd[2]), len(cmd) == 4
    nested = bool(v) and isinstance(v[0], list)
    if nested:
        pairs = [tuple(p) for p in v]
    elif with_values:
        pairs = [(v[i], v[i + 1]) for i in range(0, len(v), 2)]
    else:
        pairs = [(f, h.get(f)) for f in v]
    bad = [p for p in pairs if p[0] not in h or p[1] != h[p[0]]]
    want = min(count, len(h)) if count >= 0 else -count
    distinct = len({f for f, _ in pairs}) == len(pairs)
    if bad or len(pairs) != want or (count >= 0 and not distinct):
        return b"WRONG (%d pairs, %d not the hash's, distinct %r): " % (
            len(pairs), len(bad), distinct) + reply
    # (All of the hash, or one field repeated: the same whatever the chance.)
    whole = sorted(pairs) if count >= len(h) or len(h) == 1 else None
    return repr(("hrandfield", nested, with_values, len(pairs), whole)).encode()


def sorted_reply(reply):
    """HGETALL's or HKEYS's reply in an order that does not depend on the
    server's hash table."""
    v, _ = parse(reply)
    if not isinstance(v, list):
        return reply
    if v and isinstance(v[0], list):
        return repr(sorted(tuple(p) for p in v)).encode()
    return repr(sorted(v)).encode()


LISTS = ["md:l1", "md:l2", "md:l3"]
HASHES = ["md:h1", "md:h2"]
OTHER = ["md:str", "md:set", "md:zset"]
ELEMENTS = ["a", "b", "c", "", "x" * 30, "b\x00", "\xff", "1", "-1"]
FIELDS = ["f", "g", "h", "", "f1", "f2", "long-field-" + "y" * 20, "\x00"]
VALUES = ["v", "1", "", "w" * 15, "-0"]
COUNTS = ["0", "1", "2", "3", "5", "100", "-1", "-2", "-5", "-12"]
BAD_INTS = ["x", "1.5", "", " 1", "99999999999999999999", "+1", "01"]


def pick(rng, good, bad, p_bad=0.05):
    return rng.choice(bad) if rng.random() < p_bad else rng.choice(good)


def any_key(rng):
    r = rng.random()
    return rng.choice(OTHER) if r < 0.06 else rng.choice(LISTS + HASHES + ["md:none"])


def lmpop(rng):
    keys = [rng.choice(LISTS + ["md:none"] + (OTHER + HASHES if rng.random() < 0.1 else []))
            for _ in range(rng.randint(1, 3))]
    numkeys = str(len(keys)) if rng.random() < 0.94 else rng.choice(["0", "-1", "9", "x", "4"])
    cmd = ["LMPOP", numkeys] + keys + [pick(rng, ["LEFT", "RIGHT", "left", "Right"], ["MID"])]
    if rng.random() < 0.5:
        cmd += ["COUNT", pick(rng, ["1", "2", "3", "10"], ["0", "-1", "x"], 0.1)]
    if rng.random() < 0.03:
        cmd.append(rng.choice(["COUNT", "junk"]))
    return cmd


def hrandfield(rng):
    k = rng.choice(HASHES) if rng.random() < 0.9 else any_key(rng)
    r = rng.random()
    if r < 0.2:
        return ["HRANDFIELD", k]
    cmd = ["HRANDFIELD", k, pick(rng, COUNTS, BAD_INTS, 0.06)]
    if rng.random() < 0.5:
        cmd.append("WITHVALUES" if rng.random() < 0.9 else "withvalues")
    if rng.random() < 0.02:
        cmd.append("junk")
    return cmd


# Commands Redis 7.0 refuses only as it runs them (a syntax error, a bad
# option or number, a count of arguments its arity allows but the command
# does not): inside MULTI each is queued and answers its error in EXEC's
# array. (Not SCAN, which sluice-kv does not queue.) GETEX's bad times
# are among them: an error only for a key that holds a string.
RUN_TIME_ERRORS = [
    ["SET", "md:str", "v", "XX", "NX"], ["SET", "md:str", "v", "EX", "0"],
    ["SET", "md:str", "v", "EX", "x"], ["SET", "md:str", "v", "KEEPTTL", "PX", "5"],
    ["ZADD", "md:zset", "NX", "GT", "1", "m"], ["ZADD", "md:zset", "1", "m", "2"],
    ["ZADD", "md:zset", "x", "m"], ["LPOS", "md:l1", "a", "RANK", "0"],
    ["LPOS", "md:l1", "a", "COUNT", "-1"], ["LPOS", "md:l1", "a", "junk"],
    ["HSET", "md:h1", "f", "v", "g"], ["EXPIRE", "md:str", "10", "NX", "XX"],
    ["EXPIRE", "md:str", "x"], ["INCRBY", "md:str", "x"], ["LRANGE", "md:l1", "0", "x"],
    ["GETEX", "md:str", "PERSIST", "EX", "1"], ["GETEX", "md:str", "EX", "0"],
    ["GETEX", "md:none", "PX", "-1"], ["GETEX", "md:l1", "EXAT", "x"],
    ["LPOP", "md:l1", "-1"], ["HINCRBYFLOAT", "md:h1", "f", "x"], ["SINTERCARD", "0", "md:set"],
    ["LMPOP", "2", "md:l1", "LEFT"], ["LINSERT", "md:l1", "MIDDLE", "a", "b"],
    ["HINCRBY", "md:h1", "f", "x"], ["MSET", "md:a", "1", "md:b"],
]


def transaction(rng):
    """MULTI, a few random commands (errors of both kinds among them; no
    HRANDFIELD, HGETALL or HKEYS, whose replies inside EXEC's array would
    differ by chance or by Redis's hash table's order), and EXEC, or now
    and then DISCARD or a WATCH of one of its keys first."""
    cmds = []
    while len(cmds) < rng.randint(1, 5):
        c = rng.choice(RUN_TIME_ERRORS) if rng.random() < 0.3 else random_command(rng)
        if c[0] not in ("HRANDFIELD", "HGETALL", "HKEYS"):
            cmds.append(c)
    head = [["WATCH", rng.choice(LISTS + HASHES)]] if rng.random() < 0.2 else []
    return head + [["MULTI"]] + cmds + [["DISCARD"] if rng.random() < 0.1 else ["EXEC"]]


def random_command(rng):
    c = rng.random()
    if c < 0.22:
        return lmpop(rng)
    if c < 0.36:
        return hrandfield(rng)
    if c < 0.52:
        k = rng.choice(LISTS) if rng.random() < 0.95 else any_key(rng)
        return [rng.choice(["RPUSH", "LPUSH"]), k] + [rng.choice(ELEMENTS)
                                                       for _ in range(rng.randint(1, 4))]
    if c < 0.58:
        k = rng.choice(LISTS) if rng.random() < 0.9 else any_key(rng)
        return rng.choice([["LRANGE", k, "0", "-1"], ["LLEN", k], ["LPOP", k], ["RPOP", k, "2"]])
    if c < 0.74:
        k = rng.choice(HASHES) if rng.random() < 0.95 else any_key(rng)
        pairs = []
        for _ in range(rng.randint(1, 3)):
            pairs += [rng.choice(FIELDS), rng.choice(VALUES)]
        return ["HSET", k] + pairs
    if c < 0.80:
        k = rng.choice(HASHES) if rng.random() < 0.95 else any_key(rng)
        return ["HDEL", k] + rng.sample(FIELDS, rng.randint(1, 3))
    if c < 0.87:
        k = rng.choice(HASHES) if rng.random() < 0.9 else any_key(rng)
        return rng.choice([["HLEN", k], ["HGETALL", k], ["HKEYS", k]])
    if c < 0.95:
        k = any_key(rng)
        return rng.choice([["TYPE", k], ["EXISTS", k], ["TTL", k], ["EXPIRE", k, "1000"],
                           ["DEL", rng.choice(LISTS + HASHES)],
                           ["RENAME", k, rng.choice(LISTS + HASHES)]])
    # A wrong argument count: a command cut short.
    cmd = rng.choice([lmpop, hrandfield])(rng)
    return cmd[:rng.randint(1, 3)] if cmd[0] == "LMPOP" else cmd[:1]


WRONGTYPE = b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"

# (command, the exact reply Redis 7.0 gives; None: only compared).
FIXED = [
    (["RPUSH", "md:f", "a", "b", "c", "d", "e"], b":5\r\n"),
    (["LMPOP", "2", "md:none", "md:f", "LEFT"], b"*2\r\n$4\r\nmd:f\r\n*1\r\n$1\r\na\r\n"),
    (["LMPOP", "2", "md:f", "md:none", "RIGHT", "COUNT", "2"],
     b"*2\r\n$4\r\nmd:f\r\n*2\r\n$1\r\ne\r\n$1\r\nd\r\n"),
    (["LMPOP", "1", "md:f", "left", "count", "10"],
     b"*2\r\n$4\r\nmd:f\r\n*2\r\n$1\r\nb\r\n$1\r\nc\r\n"),
    (["EXISTS", "md:f"], b":0\r\n"),
    (["LMPOP", "1", "md:f", "LEFT"], b"*-1\r\n"),
    (["LMPOP", "0", "md:f", "LEFT"], b"-ERR numkeys should be greater than 0\r\n"),
    (["LMPOP", "-1", "md:f", "LEFT"], b"-ERR numkeys should be greater than 0\r\n"),
    (["LMPOP", "x", "md:f", "LEFT"], b"-ERR numkeys should be greater than 0\r\n"),
    (["LMPOP", "2", "md:f", "LEFT"], b"-ERR syntax error\r\n"),
    (["LMPOP", "1", "md:f", "MIDDLE"], b"-ERR syntax error\r\n"),
    (["LMPOP", "1", "md:f", "LEFT", "COUNT", "0"], b"-ERR count should be greater than 0\r\n"),
    (["LMPOP", "1", "md:f", "LEFT", "COUNT", "x"], b"-ERR count should be greater than 0\r\n"),
    (["LMPOP", "1", "md:f", "LEFT", "COUNT", "1", "COUNT", "2"], b"-ERR syntax error\r\n"),
    (["LMPOP", "1", "md:f", "LEFT", "COUNT"], b"-ERR syntax error\r\n"),
    (["LMPOP", "1", "md:f", "LEFT", "junk"], b"-ERR syntax error\r\n"),
    (["LMPOP", "1", "md:f"], b"-ERR wrong number of arguments for 'lmpop' command\r\n"),
    (["SET", "md:str", "x"], b"+OK\r\n"),
    (["LMPOP", "2", "md:none", "md:str", "LEFT"], WRONGTYPE),
    (["RPUSH", "md:g", "x"], b":1\r\n"),
    (["LMPOP", "2", "md:str", "md:g", "LEFT"], WRONGTYPE),
    (["LMPOP", "2", "md:g", "md:str", "LEFT"], b"*2\r\n$4\r\nmd:g\r\n*1\r\n$1\r\nx\r\n"),
    (["HSET", "md:h1", "f", "v"], b":1\r\n"),
    (["HRANDFIELD", "md:h1"], b"$1\r\nf\r\n"),
    (["HRANDFIELD", "md:h1", "-3"], b"*3\r\n$1\r\nf\r\n$1\r\nf\r\n$1\r\nf\r\n"),
    (["HRANDFIELD", "md:h1", "-2", "WITHVALUES"], b"*4\r\n$1\r\nf\r\n$1\r\nv\r\n$1\r\nf\r\n$1\r\nv\r\n"),
    (["HRANDFIELD", "md:h1", "5", "withvalues"], b"*2\r\n$1\r\nf\r\n$1\r\nv\r\n"),
    (["HRANDFIELD", "md:h1", "1"], b"*1\r\n$1\r\nf\r\n"),
    (["HRANDFIELD", "md:h1", "0"], b"*0\r\n"),
    (["HRANDFIELD", "md:none"], b"$-1\r\n"),
    (["HRANDFIELD", "md:none", "3"], b"*0\r\n"),
    (["HRANDFIELD", "md:none", "-3", "WITHVALUES"], b"*0\r\n"),
    (["HRANDFIELD", "md:str"], WRONGTYPE),
    (["HRANDFIELD", "md:str", "0"], WRONGTYPE),
    (["HRANDFIELD", "md:h1", "1.5"], b"-ERR value is not an integer or out of range\r\n"),
    (["HRANDFIELD", "md:h1", "x", "WITHVALUES"],
     b"-ERR value is not an integer or out of range\r\n"),
    (["HRANDFIELD", "md:h1", "1", "junk"], b"-ERR syntax error\r\n"),
    (["HRANDFIELD", "md:h1", "1", "WITHVALUES", "x"], b"-ERR syntax error\r\n"),
    (["HRANDFIELD", "md:h1", "-9223372036854775808"],
     b"-ERR value is out of range, value must between -9223372036854775807 and "
     b"9223372036854775807\r\n"),
    (["HRANDFIELD", "md:h1", "9223372036854775807", "WITHVALUES"],
     b"-ERR value is out of range\r\n"),
    (["HRANDFIELD"], b"-ERR wrong number of arguments for 'hrandfield' command\r\n"),
    # In a transaction: each answers as it would alone.
    (["MULTI"], b"+OK\r\n"),
    (["RPUSH", "md:m", "a", "b", "c"], b"+QUEUED\r\n"),
    (["LMPOP", "1", "md:m", "RIGHT", "COUNT", "2"], b"+QUEUED\r\n"),
    (["HRANDFIELD", "md:h1", "-2"], b"+QUEUED\r\n"),
    (["LMPOP", "2", "md:none", "md:str", "LEFT"], b"+QUEUED\r\n"),
    (["HRANDFIELD", "md:str", "1"], b"+QUEUED\r\n"),
    (["LMPOP", "1", "md:none", "LEFT"], b"+QUEUED\r\n"),
    (["EXEC"], b"*6\r\n:3\r\n*2\r\n$4\r\nmd:m\r\n*2\r\n$1\r\nc\r\n$1\r\nb\r\n"
     b"*2\r\n$1\r\nf\r\n$1\r\nf\r\n" + WRONGTYPE + WRONGTYPE + b"*-1\r\n"),
    (["LRANGE", "md:m", "0", "-1"], b"*1\r\n$1\r\na\r\n"),
    # A wrong argument count while queued: answered at once, EXEC aborts.
    (["MULTI"], b"+OK\r\n"),
    (["LMPOP", "1"], b"-ERR wrong number of arguments for 'lmpop' command\r\n"),
    (["HRANDFIELD"], b"-ERR wrong number of arguments for 'hrandfield' command\r\n"),
    (["EXEC"], b"-EXECABORT Transaction discarded because of previous errors.\r\n"),
    (["DEL", "md:g", "md:m", "md:str", "md:h1"], b":3\r\n"),
]

EXECABORT = b"-EXECABORT Transaction discarded because of previous errors.\r\n"

# Transactions with errors: one Redis 7.0 finds only as it runs the command
# (a syntax error, a bad option) is queued and answered in EXEC's array,
# the others running; an unknown command, a wrong number of arguments by
# the command's arity, an unknown subcommand of CLIENT, CONFIG or COMMAND
# or one with a wrong number of arguments by its own arity, and SHUTDOWN
# are refused as queued and EXEC aborts;
# an EXEC with arguments discards the transaction at once. WATCH with them.
FIXED_MULTI = [
    (["DEL", "md:t", "md:tl", "md:tz", "md:th", "md:w"], None),
    (["RPUSH", "md:tl", "a", "b", "c"], b":3\r\n"),
    (["MULTI"], b"+OK\r\n"),
    (["SET", "md:t", "v", "XX", "NX"], b"+QUEUED\r\n"),
    (["ZADD", "md:tz", "NX", "GT", "1", "m"], b"+QUEUED\r\n"),
    (["LPOS", "md:tl", "x", "RANK", "0"], b"+QUEUED\r\n"),
    (["HSET", "md:th", "f", "v", "g"], b"+QUEUED\r\n"),
    (["SET", "md:t", "1"], b"+QUEUED\r\n"),
    (["INCR", "md:t"], b"+QUEUED\r\n"),
    (["EXPIRE", "md:t", "10", "NX", "XX"], b"+QUEUED\r\n"),
    (["LRANGE", "md:tl", "0", "x"], b"+QUEUED\r\n"),
    (["EXEC"], b"*8\r\n-ERR syntax error\r\n"
     b"-ERR GT, LT, and/or NX options at the same time are not compatible\r\n"
     b"-ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... "
     b"or use negative to start from the end of the list\r\n"
     b"-ERR wrong number of arguments for 'hset' command\r\n+OK\r\n:2\r\n"
     b"-ERR NX and XX, GT or LT options at the same time are not compatible\r\n"
     b"-ERR value is not an integer or out of range\r\n"),
    (["GET", "md:t"], b"$1\r\n2\r\n"),
    (["EXISTS", "md:tz", "md:th"], b":0\r\n"),
    # Refused as queued: EXEC aborts, nothing runs.
    (["MULTI"], b"+OK\r\n"),
    (["SET", "md:t", "v", "XX", "NX"], b"+QUEUED\r\n"),
    (["SET", "md:t", "3"], b"+QUEUED\r\n"),
    (["NOSUCHCOMMAND", "md:t"], b"-ERR unknown command 'NOSUCHCOMMAND', with args beginning "
     b"with: 'md:t' \r\n"),
    (["ZADD", "md:tz", "1"], b"-ERR wrong number of arguments for 'zadd' command\r\n"),
    (["SHUTDOWN"], b"-ERR Command not allowed inside a transaction\r\n"),
    (["EXEC"], EXECABORT),
    (["GET", "md:t"], b"$1\r\n2\r\n"),
    # A subcommand of CLIENT, CONFIG or COMMAND that Redis lacks, or with a
    # wrong number of arguments by its own arity, is refused as queued too.
    (["MULTI"], b"+OK\r\n"),
    (["SET", "md:t", "5"], b"+QUEUED\r\n"),
    (["CLIENT", "FOO"], b"-ERR unknown subcommand 'FOO'. Try CLIENT HELP.\r\n"),
    (["config", "nosuch", "x"], b"-ERR unknown subcommand 'nosuch'. Try CONFIG HELP.\r\n"),
    (["COMMAND", "Foo"], b"-ERR unknown subcommand 'Foo'. Try COMMAND HELP.\r\n"),
    (["CLIENT", "SETNAME"], b"-ERR wrong number of arguments for 'client|setname' command\r\n"),
    (["client", "id", "x"], b"-ERR wrong number of arguments for 'client|id' command\r\n"),
    (["CONFIG", "GET"], b"-ERR wrong number of arguments for 'config|get' command\r\n"),
    (["CONFIG", "SET", "maxmemory"],
     b"-ERR wrong number of arguments for 'config|set' command\r\n"),
    (["COMMAND", "COUNT", "x"], b"-ERR wrong number of arguments for 'command|count' command\r\n"),
    (["CLIENT"], b"-ERR wrong number of arguments for 'client' command\r\n"),
    (["EXEC"], EXECABORT),
    (["GET", "md:t"], b"$1\r\n2\r\n"),
    # (Outside MULTI: the same errors.)
    (["CLIENT", "FOO"], b"-ERR unknown subcommand 'FOO'. Try CLIENT HELP.\r\n"),
    (["CONFIG", "GET"], b"-ERR wrong number of arguments for 'config|get' command\r\n"),
    # Those it has, with their arities, are queued and run.
    (["MULTI"], b"+OK\r\n"),
    (["CLIENT", "SETNAME", "md-diff"], b"+QUEUED\r\n"),
    (["CLIENT", "GETNAME"], b"+QUEUED\r\n"),
    (["CONFIG", "GET", "maxmemory-policy"], b"+QUEUED\r\n"),
    (["EXEC"], b"*3\r\n+OK\r\n$7\r\nmd-diff\r\n*2\r\n$16\r\nmaxmemory-policy\r\n"
     b"$10\r\nnoeviction\r\n"),
    # EXEC with an argument: the transaction goes at once, saying why.
    (["MULTI"], b"+OK\r\n"),
    (["SET", "md:t", "4"], b"+QUEUED\r\n"),
    (["EXEC", "now"], b"-EXECABORT Transaction discarded because of: wrong number of "
     b"arguments for 'exec' command\r\n"),
    (["EXEC"], b"-ERR EXEC without MULTI\r\n"),
    (["GET", "md:t"], b"$1\r\n2\r\n"),
    # MULTI and WATCH inside MULTI: answered, the transaction goes on.
    (["MULTI"], b"+OK\r\n"),
    (["MULTI"], b"-ERR MULTI calls can not be nested\r\n"),
    (["WATCH", "md:t"], b"-ERR WATCH inside MULTI is not allowed\r\n"),
    (["LPOS", "md:tl", "c", "RANK", "-1"], b"+QUEUED\r\n"),
    (["EXEC"], b"*1\r\n:2\r\n"),
    # WATCH, a run-time error queued, EXEC runs; the watched key written
    # (by this connection) before EXEC: nothing runs.
    (["WATCH", "md:w"], b"+OK\r\n"),
    (["MULTI"], b"+OK\r\n"),
    (["SET", "md:w", "1", "EX", "-5"], b"+QUEUED\r\n"),
    (["SET", "md:w", "1"], b"+QUEUED\r\n"),
    (["EXEC"], b"*2\r\n-ERR invalid expire time in 'set' command\r\n+OK\r\n"),
    (["WATCH", "md:w"], b"+OK\r\n"),
    (["SET", "md:w", "2"], b"+OK\r\n"),
    (["MULTI"], b"+OK\r\n"),
    (["SET", "md:w", "3", "NX", "XX"], b"+QUEUED\r\n"),
    (["SET", "md:w", "4"], b"+QUEUED\r\n"),
    (["EXEC"], b"*-1\r\n"),
    (["GET", "md:w"], b"$1\r\n2\r\n"),
    (["WATCH", "md:w"], b"+OK\r\n"),
    (["MULTI"], b"+OK\r\n"),
    (["GET"], b"-ERR wrong number of arguments for 'get' command\r\n"),
    (["EXEC"], EXECABORT),
    (["DEL", "md:t", "md:tl", "md:tz", "md:th", "md:w"], b":3\r\n"),
]

# The blocking commands where nothing is left to chance: what they find at
# once, their errors in Redis 7.0's order (a timeout that is not a float,
# negative, or past 64 bits of ms, which 7.0 calls negative), a short
# timeout (a null array), and in MULTI their non-blocking forms.
FIXED_BLOCKING = [
    (["DEL", "md:b0", "md:b1", "md:b2", "md:b3", "md:bz", "md:bs"], None),
    (['RPUSH', 'md:b1', 'a', 'b', 'c'], b':3\r\n'),
    (['BLPOP', 'md:b0', 'md:b1', '0'], b'*2\r\n$5\r\nmd:b1\r\n$1\r\na\r\n'),
    (['BRPOP', 'md:b0', 'md:b1', '1'], b'*2\r\n$5\r\nmd:b1\r\n$1\r\nc\r\n'),
    (['BLPOP', 'md:b1', 'x'], b'-ERR timeout is not a float or out of range\r\n'),
    (['BLMOVE', 'md:b1', 'md:b2', 'LEFT', 'RIGHT', '0'], b'$1\r\nb\r\n'),
    (['BRPOPLPUSH', 'md:b2', 'md:b3', '0'], b'$1\r\nb\r\n'),
    (['RPUSH', 'md:b3', 'x', 'y', 'z'], b':4\r\n'),
    (['BLMPOP', '0', '1', 'md:b3', 'LEFT'], b'*2\r\n$5\r\nmd:b3\r\n*1\r\n$1\r\nb\r\n'),
    (['BLMPOP', '0', '1', 'md:b3', 'LEFT', 'COUNT', '5'], b'*2\r\n$5\r\nmd:b3\r\n*3\r\n$1\r\nx\r\n$1\r\ny\r\n$1\r\nz\r\n'),
    (['ZADD', 'md:bz', '1', 'a', '2', 'b', '3', 'c', '4', 'd'], b':4\r\n'),
    (['BZPOPMIN', 'md:bz', '0'], b'*3\r\n$5\r\nmd:bz\r\n$1\r\na\r\n$1\r\n1\r\n'),
    (['BZPOPMAX', 'md:b0', 'md:bz', '0'], b'*3\r\n$5\r\nmd:bz\r\n$1\r\nd\r\n$1\r\n4\r\n'),
    (['BZMPOP', '0', '1', 'md:bz', 'MIN', 'COUNT', '3'], b'*2\r\n$5\r\nmd:bz\r\n*2\r\n*2\r\n$1\r\nb\r\n$1\r\n2\r\n*2\r\n$1\r\nc\r\n$1\r\n3\r\n'),
    (['SET', 'md:bs', 'x'], b'+OK\r\n'),
    (['BLPOP', 'md:bs', '0'], b'-WRONGTYPE Operation against a key holding the wrong kind of value\r\n'),
    (['BLPOP', 'md:b0', 'md:bs', '0'], b'-WRONGTYPE Operation against a key holding the wrong kind of value\r\n'),
    (['BZPOPMIN', 'md:bs', '0'], b'-WRONGTYPE Operation against a key holding the wrong kind of value\r\n'),
    (['BLMOVE', 'md:bs', 'md:b1', 'LEFT', 'LEFT', '0'], b'-WRONGTYPE Operation against a key holding the wrong kind of value\r\n'),
    (['BLPOP', 'md:b0', '0.01'], b'*-1\r\n'),
    (['BLMOVE', 'md:b0', 'md:b1', 'LEFT', 'LEFT', '0.01'], b'*-1\r\n'),
    (['BZMPOP', '0.01', '1', 'md:b0', 'MAX'], b'*-1\r\n'),
    (['BLPOP', 'md:b1', '-1'], b'-ERR timeout is negative\r\n'),
    (['BLPOP', 'md:b1', 'inf'], b'-ERR timeout is negative\r\n'),
    (['BLPOP', 'md:b1', '-inf'], b'-ERR timeout is negative\r\n'),
    (['BLPOP', 'md:b1', 'nan'], b'-ERR timeout is not a float or out of range\r\n'),
    (['BLPOP', 'md:b1', '1e400'], b'-ERR timeout is negative\r\n'),
    (['BLPOP', 'md:b1'], b"-ERR wrong number of arguments for 'blpop' command\r\n"),
    (['BLMOVE', 'md:b1', 'md:b2', 'UP', 'RIGHT', 'x'], b'-ERR syntax error\r\n'),
    (['BLMOVE', 'md:b1', 'md:b2', 'LEFT', 'RIGHT', 'x'], b'-ERR timeout is not a float or out of range\r\n'),
    (['BRPOPLPUSH', 'md:b2', 'md:b3'], b"-ERR wrong number of arguments for 'brpoplpush' command\r\n"),
    (['BLMPOP', 'x', '1', 'md:b3', 'LEFT'], b'-ERR timeout is not a float or out of range\r\n'),
    (['BLMPOP', '0', '0', 'md:b3', 'LEFT'], b'-ERR numkeys should be greater than 0\r\n'),
    (['BLMPOP', '0', '2', 'md:b3', 'LEFT'], b'-ERR syntax error\r\n'),
    (['BLMPOP', '0', '1', 'md:b3', 'LEFT', 'COUNT', '0'], b'-ERR count should be greater than 0\r\n'),
    (['BLMPOP', '0', '1', 'md:b3'], b"-ERR wrong number of arguments for 'blmpop' command\r\n"),
    (['BZPOPMIN', 'md:bz', 'x'], b'-ERR timeout is not a float or out of range\r\n'),
    (['BZMPOP', '0', '1', 'md:bz', 'MID'], b'-ERR syntax error\r\n'),
    (['BZMPOP', '-1', '1', 'md:bz', 'MIN'], b'-ERR timeout is negative\r\n'),
    (['BLPOP', 'md:b0', ' 1'], b'-ERR timeout is not a float or out of range\r\n'),
    (['MULTI'], b'+OK\r\n'),
    (['BLPOP', 'md:b0', '0'], b'+QUEUED\r\n'),
    (['BLMOVE', 'md:b0', 'md:b1', 'LEFT', 'LEFT', '0'], b'+QUEUED\r\n'),
    (['BRPOPLPUSH', 'md:b0', 'md:b1', '0'], b'+QUEUED\r\n'),
    (['BZPOPMAX', 'md:b0', '0'], b'+QUEUED\r\n'),
    (['BLMPOP', '0', '1', 'md:b0', 'LEFT'], b'+QUEUED\r\n'),
    (['BZMPOP', '0', '1', 'md:b0', 'MIN'], b'+QUEUED\r\n'),
    (['EXEC'], b'*6\r\n*-1\r\n$-1\r\n$-1\r\n*-1\r\n*-1\r\n*-1\r\n'),
    (["DEL", "md:b0", "md:b1", "md:b2", "md:b3", "md:bz", "md:bs"], None),
]

INVALID_GETEX = b"-ERR invalid expire time in 'getex' command\r\n"
NOT_AN_INTEGER = b"-ERR value is not an integer or out of range\r\n"
BAD_TIMES = [("EX", "0"), ("PX", "0"), ("EXAT", "0"), ("PXAT", "0"), ("EX", "-1"), ("PX", "-5"),
             ("EXAT", "-1"), ("PXAT", "-9223372036854775808"), ("EX", "99999999999999999"),
             ("EX", "9223372036854775807"), ("PX", "9223372036854775807"),
             ("EXAT", "9223372036854775807"), ("EX", "9223372036854774")]

# GETEX with a time Redis 7.0 refuses: it checks the time only once it has
# found the key and seen a string, so an absent key answers null whatever
# the time (a number or not), another type WRONGTYPE, a string the time's
# error (and keeps its value and deadline); a missing time or a second
# option is a syntax error before the key is looked up.
FIXED_GETEX = (
    [(["DEL", "md:gx", "md:gl"], None)]
    + [(["GETEX", "md:gx", o, t], b"$-1\r\n") for o, t in BAD_TIMES + [("EX", "x")]]
    + [(["GETEX", "md:gx", "EX"], b"-ERR syntax error\r\n"),
       (["GETEX", "md:gx", "PERSIST", "EX", "1"], b"-ERR syntax error\r\n"),
       (["SET", "md:gx", "v"], b"+OK\r\n")]
    + [(["GETEX", "md:gx", o, t], INVALID_GETEX) for o, t in BAD_TIMES]
    + [(["GETEX", "md:gx", "EX", "x"], NOT_AN_INTEGER),
       (["GETEX", "md:gx", "PXAT", "1.5"], NOT_AN_INTEGER),
       (["GETEX", "md:gx", "EX", "100"], b"$1\r\nv\r\n"),
       (["GETEX", "md:gx", "EX", "0"], INVALID_GETEX),
       (["TTL", "md:gx"], b":100\r\n"),
       (["GETEX", "md:gx", "PXAT", "9223372036854775807"], b"$1\r\nv\r\n"),
       (["GETEX", "md:gx", "PERSIST"], b"$1\r\nv\r\n"),
       (["TTL", "md:gx"], b":-1\r\n"),
       (["RPUSH", "md:gl", "a"], b":1\r\n"),
       (["GETEX", "md:gl", "EX", "0"], WRONGTYPE),
       (["GETEX", "md:gl", "PX", "x"], WRONGTYPE),
       (["MULTI"], b"+OK\r\n"),
       (["GETEX", "md:gx", "EX", "0"], b"+QUEUED\r\n"),
       (["GETEX", "md:none", "EX", "0"], b"+QUEUED\r\n"),
       (["GETEX", "md:gl", "EX", "x"], b"+QUEUED\r\n"),
       (["GETEX", "md:gx", "PX", "x"], b"+QUEUED\r\n"),
       (["EXEC"], b"*4\r\n" + INVALID_GETEX + b"$-1\r\n" + WRONGTYPE + NOT_AN_INTEGER),
       (["DEL", "md:gx", "md:gl"], b":2\r\n")])



def big_collections():
    """Collections past what one reply may carry (the gateway's
    --max-value-bytes, 64 KiB by default): bounded, as in Redis, by
    maxmemory (none here), not by that. 9,000 RPUSHes of short elements to
    one list (sluice-kv used to refuse them from about the 7,000th), 1,500
    HSETs, SADDs and ZADDs of 60-byte fields and members, each answered as
    Redis does, then their lengths and some of their parts."""
    cases = [(["DEL", "md:bl", "md:bh", "md:bs", "md:bz"], None)]
    cases += [(["RPUSH", "md:bl", "e%d" % i], b":%d\r\n" % (i + 1)) for i in range(9000)]
    for i in range(1500):
        m = "m%d-" % i + "x" * 60
        cases += [(["HSET", "md:bh", m, "v"], b":1\r\n"), (["SADD", "md:bs", m], b":1\r\n"),
                  (["ZADD", "md:bz", str(i), m], b":1\r\n")]
    cases += [(["LLEN", "md:bl"], b":9000\r\n"), (["LINDEX", "md:bl", "-1"], b"$5\r\ne8999\r\n"),
              (["LRANGE", "md:bl", "4000", "4001"], b"*2\r\n$5\r\ne4000\r\n$5\r\ne4001\r\n"),
              (["LPOP", "md:bl", "2"], b"*2\r\n$2\r\ne0\r\n$2\r\ne1\r\n"),
              (["HLEN", "md:bh"], b":1500\r\n"), (["HGET", "md:bh", "m7-" + "x" * 60], b"$1\r\nv\r\n"),
              (["SCARD", "md:bs"], b":1500\r\n"), (["SISMEMBER", "md:bs", "m9-" + "x" * 60], b":1\r\n"),
              (["ZCARD", "md:bz"], b":1500\r\n"), (["ZSCORE", "md:bz", "m9-" + "x" * 60], b"$1\r\n9\r\n"),
              (["ZRANGE", "md:bz", "-1", "-1"], None),
              (["DEL", "md:bl", "md:bh", "md:bs", "md:bz"], b":4\r\n")]
    return cases


NO_PASSWORD = (b"-ERR AUTH <password> called without any password configured for the default "
               b"user. Are you sure your configuration is correct?\r\n")
WRONGPASS = b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"

# AUTH (without a password set on either server) and HELLO, alone and
# queued in MULTI, where Redis 7.0 runs them with EXEC, in order: the
# replies after a HELLO 3 in EXEC's array, and after EXEC, are RESP3. On a
# connection of their own (HELLO's map compares with its version and id
# masked).
FIXED_HELLO = [
    (["AUTH", "x"], NO_PASSWORD),
    (["AUTH", "default", "x"], b"+OK\r\n"),
    (["AUTH", "someone", "x"], WRONGPASS),
    (["AUTH", "a", "b", "c"], b"-ERR syntax error\r\n"),
    (["HELLO", "2", "AUTH", "someone", "x"], WRONGPASS),
    (["MULTI"], b"+OK\r\n"),
    (["AUTH", "x"], b"+QUEUED\r\n"),
    (["AUTH", "a", "b", "c"], b"+QUEUED\r\n"),
    (["HELLO", "4"], b"+QUEUED\r\n"),
    (["GET", "md:none"], b"+QUEUED\r\n"),
    (["HELLO", "3"], b"+QUEUED\r\n"),
    (["GET", "md:none"], b"+QUEUED\r\n"),
    (["HGETALL", "md:none"], b"+QUEUED\r\n"),
    (["EXEC"], b"*7\r\n" + NO_PASSWORD + b"-ERR syntax error\r\n"
     b"-NOPROTO unsupported protocol version\r\n$-1\r\n%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n"
     b"$7\r\nversion\r\n<version>\r\n$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:<id>\r\n"
     b"$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n"
     b"*0\r\n_\r\n%0\r\n"),
    (["GET", "md:none"], b"_\r\n"),
    # Queued, then discarded: never run (still RESP3).
    (["MULTI"], b"+OK\r\n"),
    (["HELLO", "2"], b"+QUEUED\r\n"),
    (["DISCARD"], b"+OK\r\n"),
    (["GET", "md:none"], b"_\r\n"),
    # Aborted by an error as queued: never run either.
    (["MULTI"], b"+OK\r\n"),
    (["HELLO", "2"], b"+QUEUED\r\n"),
    (["GET"], b"-ERR wrong number of arguments for 'get' command\r\n"),
    (["EXEC"], EXECABORT),
    (["GET", "md:none"], b"_\r\n"),
    (["MULTI"], b"+OK\r\n"),
    (["AUTH"], b"-ERR wrong number of arguments for 'auth' command\r\n"),
    (["HELLO", "2", "SETNAME", "md-hello"], b"+QUEUED\r\n"),
    (["EXEC"], EXECABORT),
    (["CLIENT", "GETNAME"], b"_\r\n"),
    # A watched key written before EXEC: nothing runs, the queued HELLO 2
    # neither (the failed EXEC's null and what follows are still RESP3).
    (["WATCH", "md:hw"], b"+OK\r\n"),
    (["SET", "md:hw", "1"], b"+OK\r\n"),
    (["MULTI"], b"+OK\r\n"),
    (["HELLO", "2"], b"+QUEUED\r\n"),
    (["EXEC"], b"_\r\n"),
    (["GET", "md:none"], b"_\r\n"),
    # The same without the write: it runs, and what follows is RESP2.
    (["WATCH", "md:hw"], b"+OK\r\n"),
    (["MULTI"], b"+OK\r\n"),
    (["HELLO", "2"], b"+QUEUED\r\n"),
    (["GET", "md:none"], b"+QUEUED\r\n"),
    (["EXEC"], b"*2\r\n*14\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n<version>\r\n"
     b"$5\r\nproto\r\n:2\r\n$2\r\nid\r\n:<id>\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n"
     b"$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n$-1\r\n"),
    (["GET", "md:none"], b"$-1\r\n"),
    (["DEL", "md:hw"], b":1\r\n"),
    # CLIENT runs with EXEC too: a SETNAME discarded names nothing, one
    # run names the connection for a GETNAME after it in the same EXEC.
    (["MULTI"], b"+OK\r\n"),
    (["CLIENT", "SETNAME", "md-discarded"], b"+QUEUED\r\n"),
    (["DISCARD"], b"+OK\r\n"),
    (["CLIENT", "GETNAME"], b"$-1\r\n"),
    (["MULTI"], b"+OK\r\n"),
    (["CLIENT", "GETNAME"], b"+QUEUED\r\n"),
    (["CLIENT", "SETNAME", "md-run"], b"+QUEUED\r\n"),
    (["CLIENT", "GETNAME"], b"+QUEUED\r\n"),
    (["EXEC"], b"*3\r\n$-1\r\n+OK\r\n$6\r\nmd-run\r\n"),
]


def masked(reply):
    """A reply with HELLO's server version and connection id masked (the
    only parts of HELLO's map that differ between the two servers)."""
    reply = re.sub(rb"\$7\r\nversion\r\n\$\d+\r\n[^\r]*\r\n", b"$7\r\nversion\r\n<version>\r\n",
                   reply)
    return re.sub(rb"\$2\r\nid\r\n:\d+\r\n", b"$2\r\nid\r\n:<id>\r\n", reply)


# The same over RESP3 (after HELLO 3): nulls, and WITHVALUES's nested pairs.
FIXED3 = [
    (["HSET", "md:h1", "f", "v"], b":1\r\n"),
    (["HRANDFIELD", "md:h1", "-2", "WITHVALUES"],
     b"*2\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n"),
    (["HRANDFIELD", "md:h1", "3", "WITHVALUES"], b"*1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n"),
    (["HRANDFIELD", "md:h1", "-2"], b"*2\r\n$1\r\nf\r\n$1\r\nf\r\n"),
    (["HRANDFIELD", "md:none"], b"_\r\n"),
    (["HRANDFIELD", "md:none", "2", "WITHVALUES"], b"*0\r\n"),
    (["RPUSH", "md:f", "a", "b"], b":2\r\n"),
    (["LMPOP", "1", "md:f", "LEFT", "COUNT", "5"],
     b"*2\r\n$4\r\nmd:f\r\n*2\r\n$1\r\na\r\n$1\r\nb\r\n"),
    (["LMPOP", "1", "md:f", "LEFT"], b"_\r\n"),
    (["MULTI"], b"+OK\r\n"),
    (["LMPOP", "1", "md:none", "RIGHT"], b"+QUEUED\r\n"),
    (["HRANDFIELD", "md:h1", "1", "WITHVALUES"], b"+QUEUED\r\n"),
    (["EXEC"], b"*2\r\n_\r\n*1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n"),
    (["DEL", "md:h1"], b":1\r\n"),
    (['BLPOP', 'md:b0', '0.01'], b'_\r\n'),
    (['BZPOPMIN', 'md:b0', '0.01'], b'_\r\n'),
    (['ZADD', 'md:bz', '1.5', 'q'], b':1\r\n'),
    (['BZPOPMIN', 'md:bz', '0'], b'*3\r\n$5\r\nmd:bz\r\n$1\r\nq\r\n,1.5\r\n'),
    (["DEL", "md:bz"], None),
]


def main():
    port, server = int(sys.argv[1]), sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
    seed = int(sys.argv[4]) if len(sys.argv) > 4 else 17
    redis = RedisServer(server)
    compared = differed = 0
    try:
        kv, ref = Conn(port), Conn(redis.port)

        def differs(cmd, got, want, expected=None):
            nonlocal compared, differed
            compared += 1
            bad = got != want
            if expected is not None and want != expected:
                print(f"NOTE redis-server answered {want!r} to {cmd!r}, not the "
                      f"{expected!r} this test expects")
                bad = True
            if bad:
                differed += 1
                print(f"DIFFERS {cmd!r}: sluice-kv {got!r}, redis-server {want!r}")

        def fixed(cases, a, b):
            commands = [c for c, _ in cases]
            got, want = a.ask(commands), b.ask(commands)
            for i, (cmd, expected) in enumerate(cases):
                differs(cmd, masked(got[i]), masked(want[i]), expected)

        def batch(commands, a, b):
            # Each HRANDFIELD followed by an HGETALL of its key, to check it by.
            sent = []
            for cmd in commands:
                sent.append(cmd)
                if cmd[0] == "HRANDFIELD" and len(cmd) > 1:
                    sent.append(["HGETALL", cmd[1]])
            got, want = a.ask(sent), b.ask(sent)
            for i, cmd in enumerate(sent):
                if cmd[0] == "HRANDFIELD" and len(cmd) > 1:
                    differs(cmd, hrandfield_shape(cmd, got[i], got[i + 1]),
                            hrandfield_shape(cmd, want[i], want[i + 1]))
                elif cmd[0] in ("HGETALL", "HKEYS"):
                    differs(cmd, sorted_reply(got[i]), sorted_reply(want[i]))
                else:
                    differs(cmd, got[i], want[i])

        setup = [["DEL"] + LISTS + HASHES + OTHER + ["md:none", "md:f", "md:g", "md:m", "md:h1"],
                 ["SET", "md:str", "v"], ["SADD", "md:set", "m"], ["ZADD", "md:zset", "1", "m"]]
        batch(setup, kv, ref)
        fixed(FIXED, kv, ref)
        fixed(FIXED_BLOCKING, kv, ref)
        fixed(FIXED_MULTI, kv, ref)
        # (Before the random commands, which may leave md:none holding a list.)
        fixed(FIXED_GETEX, kv, ref)
        big = big_collections()
        for i in range(0, len(big), 1000):
            fixed(big[i:i + 1000], kv, ref)
        fixed(FIXED_HELLO, Conn(port), Conn(redis.port))
        rng = random.Random(seed)
        commands = []
        while len(commands) < n:
            if rng.random() < 0.03:
                commands += transaction(rng)
            else:
                commands.append(random_command(rng))
        for i in range(0, len(commands), 64):
            batch(commands[i:i + 64], kv, ref)
        # Over RESP3 (HELLO's own answer differs: not compared).
        kv3, ref3 = Conn(port), Conn(redis.port)
        kv3.ask([["HELLO", "3"]])
        ref3.ask([["HELLO", "3"]])
        batch(setup, kv3, ref3)
        fixed(FIXED3, kv3, ref3)
        commands = [random_command(rng) for _ in range(n // 4)]
        for i in range(0, len(commands), 64):
            batch(commands[i:i + 64], kv3, ref3)
        batch([["DEL"] + LISTS + HASHES + OTHER + ["md:none"]], kv, ref)
    finally:
        redis.stop()
    print(f"misc diff: {compared} replies compared, {differed} differed (seed {seed})")
    return 0 if differed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
