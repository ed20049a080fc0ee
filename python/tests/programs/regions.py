"""One-sided regions from Python (run by test_regions.py on 3 ranks, over
shm and ofi). Rank 0 exposes a region; every rank, rank 0 too, opens it and
adds to a counter word with fetch_add, increments a second word with a
compare_and_swap loop, and writes its own slot; rank 0 then sees all of it
in its array over the region's memory (no copy), exactly: the counter is
ranks x ADDS, the CAS word ranks x CASES (every increment lands once). Bad
accesses raise InvalidArgument and do nothing; once rank 0 closes the region
the peers' operations raise Closed, and its array stays readable."""

import sys

import numpy as np

import sluice

ADDS, CASES = 2000, 300
SLOTS = 16  # words 8 .. 8 + SLOTS: one per rank


def main():
    kept = None
    with sluice.Cluster.from_env() as cluster:
        me, world = cluster.rank, cluster.world_size
        region = cluster.expose("py-region", 4096) if me == 0 else None
        words = region.array(np.uint64) if region else None
        if region:
            assert words.size == 512 and not words.any(), "a region starts zeroed"
            assert words.flags.writeable
        cluster.barrier()
        r = cluster.open_region("py-region", 0, timeout=30)
        assert r.size == 4096 and r.owner == 0
        for _ in range(ADDS):
            r.fetch_add(0, 1)
        for _ in range(CASES):
            while True:
                seen = int.from_bytes(r.read(8, 8), "little")
                if r.compare_and_swap(8, seen, seen + 1) == seen:
                    break
        mine = np.array([me + 1000, me * 7], np.uint64)
        r.write(64 + 16 * me, mine)
        back = np.zeros(2, np.uint64)
        r.read_into(64 + 16 * me, back)
        assert (back == mine).all(), (back, mine)
        assert r.read(64 + 16 * me, 16) == mine.tobytes()
        for bad, call in (("out of bounds", lambda: r.write(4090, b"12345678")),
                          ("misaligned", lambda: r.fetch_add(4, 1)),
                          ("past the end", lambda: r.read(4096, 1))):
            try:
                call()
            except sluice.InvalidArgument as e:
                assert "region of rank 0" in str(e), str(e)
            else:
                sys.exit(f"rank {me}: a {bad} access raised nothing")
        cluster.barrier()
        if me == 0:
            counter, cases = int(words[0]), int(words[1])
            slots = [(int(words[8 + 2 * k]), int(words[9 + 2 * k])) for k in range(world)]
            ok = (counter == ADDS * world and cases == CASES * world and
                  slots == [(k + 1000, k * 7) for k in range(world)] and
                  int(words[511]) == 0)
            print(f"{'OK' if ok else 'MISMATCH'} region path={region.path} remote={r.path} "
                  f"counter={counter} cases={cases} slots={slots}", flush=True)
            kept = words
            region.close()  # revoked: the peers' next operations raise Closed
            assert int(kept[0]) == counter, "an array outlives close()"
        cluster.barrier()
        if me != 0:
            try:
                r.fetch_add(0, 1, timeout=10)
            except sluice.Closed:
                print(f"OK closed rank={me}", flush=True)
            else:
                print(f"MISMATCH rank={me}: fetch_add after close succeeded", flush=True)
        r.close()
        r.close()  # idempotent
        try:
            r.read(0, 8)
        except sluice.Closed:
            pass
        else:
            sys.exit(f"rank {me}: a closed handle read")
        cluster.barrier()
    if kept is not None:  # the cluster left: the array still reads the memory
        assert int(kept[0]) == ADDS * world, int(kept[0])
        print("OK array outlives the cluster", flush=True)


if __name__ == "__main__":
    main()
