"""A shuffle job for the tests: every rank makes `--records` records with
keys of its own, exchanges them by key (Flow.exchange) and, again, through
a source and a target opened apart (a pushing thread beside a consuming
one), then checks that every record arrived exactly once at the rank its key
routes to: counts and order-independent checksums against what every rank
made, gathered with allgather. Rank 0 prints `OK ...` or exits 1."""

import argparse
import sys
import threading

import numpy as np

import sluice

RECORD = np.dtype([("key", "<u8"), ("value", "<u8"), ("rank", "<u4"), ("pad", "<u4")])
SMALL = np.dtype([("key", "<u2"), ("tag", "u1")])  # itemsize 3: one-byte words
# 16 and 32 bytes travel as one element per record, routed by the flow itself:
# check() proves that routing agrees with Flow.target_of.
PAIR = np.dtype([("value", "<u8"), ("key", "<u8")])
WIDE = np.dtype([("key", "<u4"), ("rank", "<u4"), ("value", "<u8"), ("a", "<u8"), ("b", "<u8")])


def make(rank, world, n, dtype):
    r = np.zeros(n, dtype)
    r["key"] = (np.arange(n, dtype=np.uint64) * world + rank).astype(r["key"].dtype)
    if "value" in dtype.names:
        r["value"] = r["key"].astype(np.uint64) * np.uint64(2654435761) + np.uint64(rank)
        if "rank" in dtype.names:
            r["rank"] = rank
    else:
        r["tag"] = rank
    return r


def checksum(records):
    """Order-independent: the sum of a hash of each record's bytes."""
    words = records.view(np.uint8).reshape(len(records), records.dtype.itemsize)
    weights = (np.arange(records.dtype.itemsize, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
               | np.uint64(1))
    per = (words.astype(np.uint64) * weights).sum(axis=1, dtype=np.uint64)
    return int(per.sum(dtype=np.uint64))


def check(cluster, flow, name, made, got):
    me = cluster.rank
    routed = flow.target_of(got)
    misrouted = int(np.count_nonzero(routed != me))
    mine = [int(np.count_nonzero(flow.target_of(m) == me)) for m in [made]]
    facts = cluster.allgather({
        "made": len(made), "made_sum": checksum(made), "got": len(got),
        "got_sum": checksum(got), "misrouted": misrouted, "expected_here": mine[0],
    })
    ok = True
    if cluster.rank == 0:
        made_n = sum(f["made"] for f in facts)
        got_n = sum(f["got"] for f in facts)
        made_sum = sum(f["made_sum"] for f in facts) % 2**64
        got_sum = sum(f["got_sum"] for f in facts) % 2**64
        bad = sum(f["misrouted"] for f in facts)
        if made_n != got_n or made_sum != got_sum or bad:
            print(f"MISMATCH {name}: made {made_n} (checksum {made_sum}), got {got_n} "
                  f"(checksum {got_sum}), misrouted {bad}", flush=True)
            ok = False
        else:
            print(f"OK {name} records={got_n} checksum={got_sum}", flush=True)
    return cluster.bcast(ok)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--records", type=int, default=100000)
    args = p.parse_args()
    ok = True
    with sluice.Cluster.from_env() as cluster:
        world, me = cluster.world_size, cluster.rank
        # 1. exchange, routed by key
        made = make(me, world, args.records, RECORD)
        with cluster.shuffle("py-exchange", RECORD, key="key") as flow:
            got = flow.exchange(made)
            ok &= check(cluster, flow, "exchange", made, got)
        # 2. a source and a target opened apart: a thread pushes in runs while
        # this one consumes.
        with cluster.shuffle("py-ends", RECORD, key="key") as flow:
            src, tgt = flow.source(), flow.target()
            failure = []

            def pusher():
                try:
                    with src:
                        for start in range(0, len(made), 1000):
                            src.push(made[start:start + 1000])
                except Exception as e:  # reported below
                    failure.append(e)

            t = threading.Thread(target=pusher)
            t.start()
            got = tgt.collect()
            t.join()
            if failure:
                raise failure[0]
            ok &= check(cluster, flow, "ends", made, got)
        # 3. a record size no word divides (3 bytes), explicit targets
        small = make(me, world, args.records // 10, SMALL)
        with cluster.shuffle("py-small", SMALL) as flow:
            to = (small["key"].astype(np.uint32) % world).astype(np.uint32)
            bad = to.copy()
            bad[len(bad) // 2] = world  # one past the last target: refused, nothing sent
            try:
                flow.exchange(small, targets=bad)
                print(f"rank {me}: a target out of range was not refused", flush=True)
                ok = False
            except sluice.InvalidArgument as e:
                if f"targets[{len(bad) // 2}] = {world}" not in str(e):
                    print(f"rank {me}: unclear error: {e}", flush=True)
                    ok = False
            got = flow.exchange(small, targets=to)
            wrong = int(np.count_nonzero(got["key"].astype(np.uint32) % world != me))
            sizes = cluster.allgather((len(small), len(got), checksum(small), checksum(got), wrong))
            if me == 0:
                a = [sum(s[i] for s in sizes) for i in range(5)]
                if a[0] != a[1] or a[2] % 2**64 != a[3] % 2**64 or a[4]:
                    print(f"MISMATCH small: {a}", flush=True)
                    ok = False
                else:
                    print(f"OK small records={a[1]}", flush=True)
            ok = cluster.bcast(ok)
        # 4. records of one element (16 and 32 bytes), keyed at offset 8 and 0
        for name, dtype in (("pair", PAIR), ("wide", WIDE)):
            recs = make(me, world, args.records // 2, dtype)
            with cluster.shuffle("py-" + name, dtype, key="key") as flow:
                ok &= check(cluster, flow, name, recs, flow.exchange(recs))
        # 5. replicate: every rank gets every record
        with cluster.replicate("py-replicate", RECORD) as flow:
            got = flow.exchange(made[:1000])
            counts = cluster.allgather(len(got))
            if me == 0:
                if counts != [1000 * world] * world:
                    print(f"MISMATCH replicate: {counts}", flush=True)
                    ok = False
                else:
                    print(f"OK replicate records={sum(counts)}", flush=True)
            ok = cluster.bcast(ok)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
