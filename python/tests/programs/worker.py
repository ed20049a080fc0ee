"""sluice.Worker, for the tests (3 ranks): one thread per rank consumes
three flows, numpy records (A, pushed by a thread), Arrow batches (B, pushed
by a thread) and numpy records (C) that A's handler makes from each record
it receives and pushes through the worker into C, whose rings are tiny (2
segments of 1 KiB): every rank's C source waits for rings that only the
workers empty, so the pushes must deliver the worker's inputs while they
wait, or every rank stops. A's end closes C's source (on_end, through the
worker). Exactly once: counts and order-independent checksums of what each
rank's handlers saw against what every rank made, and C's records at the
rank their key routes to. Then a handler's exception ends run() with it,
and run() with a timeout over an input that never ends raises Timeout.
Rank 0 prints `OK ...` lines, or a rank exits 1."""

import sys
import threading

import numpy as np
import pyarrow as pa

import sluice
from report import exit_if_any

RECORD = np.dtype([("key", "<u8"), ("value", "<u8")])
SCHEMA = pa.schema([("key", pa.int64()), ("name", pa.string())])


def checksum(keys, values):
    per = np.asarray(keys, np.uint64) * np.uint64(0x9E3779B97F4A7C15) ^ np.asarray(values,
                                                                                   np.uint64)
    return int(per.sum(dtype=np.uint64))


def made(rank, n):
    rec = np.zeros(n, RECORD)
    rec["key"] = np.arange(n, dtype=np.uint64) * np.uint64(7) + np.uint64(rank * 1_000_003)
    rec["value"] = rec["key"] * np.uint64(3) + np.uint64(1)
    return rec


def batch_of(rank, i):
    keys = np.arange(50, dtype=np.int64) + rank * 100_000 + i * 50
    return pa.record_batch([pa.array(keys), pa.array([f"r{rank}-{k}" for k in keys])],
                           schema=SCHEMA)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    batches = 40
    errors = []
    with sluice.Cluster.from_env() as cluster:
        me, world = cluster.rank, cluster.world_size
        fa = cluster.shuffle("w-a", RECORD, key="key")
        fb = cluster.batches("w-b", SCHEMA)
        fc = cluster.shuffle("w-c", RECORD, key="key", segment_bytes=1024, ring_segments=2)
        a_src, b_src, c_src = fa.source(), fb.source(), fc.source()
        w = sluice.Worker()
        seen = {"a": [], "b": [], "c": []}

        def on_a(batch):
            seen["a"].append(batch.copy())
            derived = batch.copy()
            derived["key"] += np.uint64(1)
            derived["value"] *= np.uint64(2)
            w.push(c_src, derived)

        def on_b(batch):
            seen["b"].append(batch.column("key").to_numpy().copy())

        def on_c(batch):
            seen["c"].append(batch.copy())

        w.add(fa.target(), on_a, on_end=lambda: w.close(c_src))
        w.add(fb.target(), on_b)
        w.add(fc.target(), on_c)

        def feed():
            with a_src:
                mine = made(me, n)
                for i in range(0, n, 1000):
                    a_src.push(mine[i:i + 1000])
            with b_src:
                for i in range(batches):
                    for t in range(world):
                        b_src.push(batch_of(me, i), to=t)

        feeder = threading.Thread(target=feed)
        feeder.start()
        w.run(timeout=120)
        feeder.join()

        everything = np.concatenate([made(r, n) for r in range(world)])
        got_a = np.concatenate(seen["a"]) if seen["a"] else np.empty(0, RECORD)
        want_a = everything[fa.target_of(everything) == fa.targets.index((me, 0))]
        derived = everything.copy()
        derived["key"] += np.uint64(1)
        derived["value"] *= np.uint64(2)
        got_c = np.concatenate(seen["c"]) if seen["c"] else np.empty(0, RECORD)
        want_c = derived[fc.target_of(derived) == fc.targets.index((me, 0))]
        got_b = np.sort(np.concatenate(seen["b"]))
        want_b = np.sort(np.concatenate([batch_of(r, i).column("key").to_numpy()
                                         for r in range(world) for i in range(batches)]))
        for name, got, want in (("A", got_a, want_a), ("C", got_c, want_c)):
            if len(got) != len(want) or checksum(got["key"], got["value"]) != checksum(
                    want["key"], want["value"]):
                errors.append(f"{name}: {len(got)} records, expected {len(want)}")
        if not np.array_equal(got_b, want_b):
            errors.append(f"B: {len(got_b)} keys, expected {len(want_b)}")
        counts = cluster.allgather((len(got_a), len(got_b), len(got_c)))
        if me == 0 and not errors:
            print(f"OK worker a={sum(c[0] for c in counts)} b={sum(c[1] for c in counts)} "
                  f"c={sum(c[2] for c in counts)}", flush=True)
        for f in (fa, fb, fc):
            f.destroy()

        # A handler's exception ends run() with it; run()'s timeout.
        fd = cluster.shuffle("w-d", RECORD, key="key")
        d_src, d_tgt = fd.source(), fd.target()
        w2 = sluice.Worker()

        def boom(batch):
            raise KeyError("handler failed")

        w2.add(d_tgt, boom)
        d_src.push(made(me, 300))
        d_src.flush()
        try:
            w2.run(timeout=30)
            errors.append("a handler's exception did not end run()")
        except KeyError:
            pass
        try:
            w2.run(timeout=0.3)  # the sources never close: the input never ends
            errors.append("run(timeout) returned with an input open")
        except sluice.Timeout:
            pass
        except KeyError:
            pass  # (a batch still queued reached the handler first: run again)
        cluster.barrier()
        d_src.abort()
        fd.destroy()
        if me == 0 and not errors:
            print("OK worker errors", flush=True)
        failed = cluster.allgather(errors)
    exit_if_any(failed)


if __name__ == "__main__":
    main()
