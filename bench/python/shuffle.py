"""Python shuffle throughput (a benchmark, not a test; docs/python.md).

Every rank makes --records 16-byte records (key, value) and shuffles them by
key across the job, two ways: Flow.exchange (one call; the received records
are copied into one array) and a source pushed from a thread in runs of
--batch records while the main thread consumes zero-copy views of the ring;
either way the receiver reads every record once (a sum of its values), as
sluice-shuffle-demo's receivers do (they check every tuple).
Rank 0 prints one JSON line per way: records per second of the whole job
(wall, from a barrier to the last rank's end) and per CPU-second (every
rank's process time summed), to compare with its C++ twin
(bench/python/shuffle_baseline.cc: the same work through the C++ API, the
same JSON lines) run back to back:

  PYTHONPATH=build/python build/bin/sluice run -n 2 -- .venv/bin/python \\
      bench/python/shuffle.py --records 10000000 --segment-bytes 65536
  cmake --build build --target sluice-bench-python-baseline
  build/bin/sluice run -n 2 -- build/bin/sluice-bench-python-baseline \\
      --records 10000000 --segment-bytes 65536
"""

import argparse
import json
import threading
import time

import numpy as np

import sluice

RECORD = np.dtype([("key", "<u8"), ("value", "<u8")])


def timed(cluster, fn):
    cluster.barrier()
    w0, c0 = time.perf_counter(), time.process_time()
    got = fn()
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    facts = cluster.allgather((wall, cpu, got))
    return max(f[0] for f in facts), sum(f[1] for f in facts), sum(f[2] for f in facts)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--records", type=int, default=10_000_000, help="records per rank")
    p.add_argument("--batch", type=int, default=65536, help="records per push (ends)")
    p.add_argument("--segment-bytes", type=int, default=0, help="segment payload (0: 8 KiB)")
    args = p.parse_args()
    with sluice.Cluster.from_env() as cluster:
        me, world = cluster.rank, cluster.world_size
        made = np.zeros(args.records, RECORD)
        made["key"] = np.arange(args.records, dtype=np.uint64) * np.uint64(world) + np.uint64(me)
        made["value"] = 1
        results = {}

        def exchange():
            with cluster.shuffle("bench-exchange", RECORD, key="key", segment_bytes=args.segment_bytes) as flow:
                got = flow.exchange(made)
                int(got["value"].sum())  # each record read once, as a consumer would
                return len(got)

        def ends():
            with cluster.shuffle("bench-ends", RECORD, key="key", segment_bytes=args.segment_bytes) as flow:
                src, tgt = flow.source(), flow.target()

                def push():
                    with src:
                        for i in range(0, len(made), args.batch):
                            src.push(made[i:i + args.batch])

                t = threading.Thread(target=push)
                t.start()
                n, total = 0, 0
                for batch in tgt:  # each record read once, as a consumer would
                    n += len(batch)
                    total += int(batch["value"].sum())
                t.join()
                return n

        for name, fn in (("exchange", exchange), ("ends", ends)):
            wall, cpu, got = timed(cluster, fn)
            results[name] = (wall, cpu, got)
        if me == 0:
            for name, (wall, cpu, got) in results.items():
                print(json.dumps({
                    "way": name, "ranks": world, "segment_bytes": args.segment_bytes or 8192, "records": got, "record_bytes": 16,
                    "seconds": round(wall, 3), "records_per_s": round(got / wall),
                    "cpu_seconds": round(cpu, 3), "records_per_cpu_s": round(got / cpu),
                }), flush=True)


if __name__ == "__main__":
    main()
