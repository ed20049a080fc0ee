"""Combiner flows for the tests: every rank pushes its records (a
deterministic function of its rank, so every rank can make everyone's), the
groups end up on the ranks the keys hash to, and rank 0 checks every group
against numpy's own grouping of all the records: each key once, on the
target target_of() names, with the exact count, integer sum, min and max,
and (the prices being multiples of 1/16 small enough that every sum is
exact in a double) the exact float sum and average. Then a count-only
combiner of signed keys, through source() and target() opened by hand.
Rank 0 prints `OK ...` lines, or a rank exits 1."""

import sys
import threading

import numpy as np

import sluice

SALE = np.dtype([("region", "<u8"), ("qty", "<i4"), ("discount", "<f4"), ("price", "<f8")])


def sales_of(rank, n, keys):
    rng = np.random.default_rng(1000 + rank)
    s = np.zeros(n, SALE)
    s["region"] = rng.integers(0, keys, n, dtype=np.uint64) * np.uint64(2**40 + 7)
    s["qty"] = rng.integers(-500, 500, n, dtype=np.int32)
    s["discount"] = rng.integers(0, 64, n).astype(np.float32) / np.float32(8)
    s["price"] = rng.integers(0, 10**6, n).astype(np.float64) / 16
    return s


def reference(records):
    """The groups of `records` by numpy: sorted keys and per-group aggregates."""
    order = np.argsort(records["region"], kind="stable")
    r = records[order]
    keys, starts, counts = np.unique(r["region"], return_index=True, return_counts=True)
    return {
        "region": keys,
        "count": counts.astype(np.uint64),
        "qty_sum": np.add.reduceat(r["qty"].astype(np.int64), starts),
        "discount_min": np.minimum.reduceat(r["discount"], starts),
        "price_max": np.maximum.reduceat(r["price"], starts),
        "price_sum": np.add.reduceat(r["price"], starts),
        "price_avg": np.add.reduceat(r["price"], starts) / counts,
    }


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    keys = int(sys.argv[2]) if len(sys.argv) > 2 else 5_000
    errors = []
    with sluice.Cluster.from_env() as cluster:
        me, world = cluster.rank, cluster.world_size
        mine = sales_of(me, n, keys)
        # 1. reduce(): sums, min, max, avg; a small local table, so that
        # sources push partials many times before the end.
        with cluster.combiner("sales", SALE, key="region", sum=["qty", "price"],
                              min=["discount"], max=["price"], avg=["price"],
                              local_groups=512) as flow:
            groups = flow.reduce(mine)
            misplaced = sum(flow.targets[flow.target_of(k)][0] != me for k in groups["region"])
            if misplaced:
                errors.append(f"{misplaced} groups on a rank target_of() does not name")
            if list(groups.dtype.names) != ["region", "count", "qty_sum", "price_sum",
                                            "discount_min", "price_max", "price_avg"]:
                errors.append(f"columns {groups.dtype.names}")
            if groups["discount_min"].dtype != np.float32 or groups["qty_sum"].dtype != np.int64:
                errors.append(f"column types {groups.dtype}")
        everyone = cluster.allgather(groups)
        if me == 0:
            got = np.concatenate(everyone)
            got = got[np.argsort(got["region"], kind="stable")]
            want = reference(np.concatenate([sales_of(r, n, keys) for r in range(world)]))
            if len(got) != len(want["region"]):
                errors.append(f"{len(got)} groups, want {len(want['region'])}")
            else:
                for col in want:
                    if not np.array_equal(got[col], want[col]):
                        bad = np.flatnonzero(got[col] != want[col])[:3]
                        errors.append(f"{col} differs at groups {bad}: {got[col][bad]} "
                                      f"!= {want[col][bad]}")
            if not errors:
                print(f"OK reduce groups={len(got)} records={int(got['count'].sum())}",
                      flush=True)

        # 2. count only, signed keys, the ends opened by hand
        ev = np.dtype([("user", "<i8"), ("pad", "<u4")])
        events = np.zeros(1000, ev)
        events["user"] = (np.arange(1000) % 37) - 18  # keys -18 .. 18
        with cluster.combiner("events", ev, key="user") as flow:
            src, tgt = flow.source(), flow.target()

            def push():
                with src:
                    src.push(events[:400])
                    src.push(events[400:])

            t = threading.Thread(target=push)
            t.start()
            g = tgt.consume()
            t.join()
            if tgt.consume() is not None:
                errors.append("a second consume() returned groups")
        allg = np.concatenate(cluster.allgather(g))
        if me == 0:
            allg = allg[np.argsort(allg["user"])]
            k, c = np.unique(np.concatenate([events["user"]] * world), return_counts=True)
            if not (np.array_equal(allg["user"], k) and np.array_equal(allg["count"], c)):
                errors.append(f"count-only groups {allg[:5]} want keys {k[:5]} counts {c[:5]}")
            else:
                print(f"OK count groups={len(allg)}", flush=True)

        # 3. bad arguments are named
        for kwargs, needle in [({"key": "price"}, "must be an integer field"),
                               ({"key": "region", "sum": ["nope"]}, "'nope' is not a field"),
                               ({"key": "region", "max": ["region2"]}, "is not a field")]:
            try:
                cluster.combiner("bad", SALE, **kwargs)
                errors.append(f"{kwargs}: no error")
            except sluice.InvalidArgument as e:
                if needle not in str(e):
                    errors.append(f"{kwargs}: {e}")
    for e in errors:
        print(f"rank {me}: {e}", flush=True)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
