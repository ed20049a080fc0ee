"""Collectives for the tests: allgather, bcast and allreduce of Python
objects and numpy arrays, alltoallv of buffers, and a barrier. Rank 0
prints `OK` or exits 1."""

import sys

import numpy as np

import sluice

with sluice.Cluster.from_env() as cluster:
    me, world = cluster.rank, cluster.world_size
    errors = []
    got = cluster.allgather({"rank": me, "name": f"r{me}"})
    if got != [{"rank": r, "name": f"r{r}"} for r in range(world)]:
        errors.append(f"allgather: {got}")
    root = world - 1
    b = cluster.bcast({"from": me} if me == root else None, root=root)
    if b != {"from": root}:
        errors.append(f"bcast: {b}")
    total = cluster.allreduce(me + 1)
    if total != world * (world + 1) // 2:
        errors.append(f"allreduce: {total}")
    arr = cluster.allreduce(np.full(4, me, dtype=np.int64))
    if not np.array_equal(arr, np.full(4, sum(range(world)), dtype=np.int64)):
        errors.append(f"allreduce of arrays: {arr}")
    biggest = cluster.allreduce(me, op=max)
    if biggest != world - 1:
        errors.append(f"allreduce max: {biggest}")
    # alltoallv: buffers of every size (none, a few bytes, many segments)
    # from every rank to every rank, each arriving whole and once.
    def made(src, dst):
        n = 0 if (src + dst) % 3 == 0 else 7 * (src + 1) + 100_003 * dst * (src % 2)
        return np.random.default_rng(src * 100 + dst).integers(0, 256, n, dtype=np.uint8)
    got = cluster.alltoallv([made(me, t) for t in range(world)])
    if len(got) != world:
        errors.append(f"alltoallv: {len(got)} buffers")
    for src, g in enumerate(got):
        if not np.array_equal(g, made(src, me)):
            errors.append(f"alltoallv: from rank {src}: {len(g)} bytes, made {len(made(src, me))}")
    # Many calls in a row over the one flow the cluster keeps for them, the
    # ranks out of step: before each call one rank dawdles, so the others
    # finish the call before it and send it the next call's buffers while
    # it still receives this one's (kept for the next call, in order).
    import time

    def nth(call, src, dst):
        n = [0, 1, 8, 5000, 200_000][(call + src + 2 * dst) % 5]
        return np.random.default_rng(call * 10_000 + src * 100 + dst).integers(0, 256, n,
                                                                               dtype=np.uint8)
    for call in range(40):
        if call % world == me:
            time.sleep(0.02)
        got = cluster.alltoallv([nth(call, me, t) for t in range(world)])
        for src, g in enumerate(got):
            if not np.array_equal(g, nth(call, src, me)):
                errors.append(f"alltoallv call {call}: from rank {src}: {len(g)} bytes, made "
                              f"{len(nth(call, src, me))}")
    try:
        cluster.alltoallv([b"x"] * (world + 1))
        errors.append("alltoallv of too many buffers was not refused")
    except sluice.InvalidArgument as e:
        if f"one for each of the {world} ranks" not in str(e):
            errors.append(f"alltoallv's count error: {e}")
    # (before the barrier: no rank can have left before every rank reached it)
    if cluster.live_ranks() != list(range(world)):
        errors.append(f"live_ranks: {cluster.live_ranks()}")
    cluster.barrier()
    for e in errors:
        print(f"rank {me}: {e}", flush=True)
    if me == 0 and not errors:
        print(f"OK collectives world={world}", flush=True)
    sys.exit(1 if errors else 0)
