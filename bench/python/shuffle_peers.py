"""The shuffle of bench/python/shuffle.py done by sluice's peers (a benchmark,
not a test; docs/python.md): mpi4py's Alltoallv with numpy buffers,
mpi4py's alltoall of pickled arrays, Dask's DataFrame shuffle (p2p, on
the distributed scheduler's local cluster) and Ray Data's repartition by
key (hash shuffle, on a local Ray cluster of --ranks CPUs).

The work is shuffle.py's: every rank (MPI process, Dask worker) makes
--records 16-byte records (key, value; key = i * ranks + rank, value 1)
beforehand, sends each to the rank a hash of its key names, and reads every
record it receives once (a sum of its keys, checked against the sum of every
key made: exactly once, order-independent). Timed from a barrier after the
records are made to the last rank's end; CPU-seconds are every process's
(the MPI ranks'; Dask's workers', scheduler's and client's; every process of
the local Ray cluster, read from /proc). One JSON line
per run, as shuffle.py prints, so the two compare line by line:

  bench/python/install.sh     # Open MPI (Debian), mpi4py and dask (PyPI) in .venv
  mpirun --allow-run-as-root --oversubscribe -np 2 .venv/bin/python \\
      bench/python/shuffle_peers.py mpi-buffers --records 33554432
  mpirun --allow-run-as-root --oversubscribe -np 2 .venv/bin/python \\
      bench/python/shuffle_peers.py mpi-pickle --records 33554432
  .venv/bin/python bench/python/shuffle_peers.py dask --ranks 2 --records 33554432
  .venv/bin/python bench/python/shuffle_peers.py ray --ranks 2 --records 33554432
  PYTHONPATH=build/python build/bin/sluice run -n 2 -- .venv/bin/python \\
      bench/python/shuffle.py --records 33554432 --segment-bytes 65536

33554432 records per rank on 2 ranks is 1 GiB in all (16 MiB of records
per rank per 1 M records).
"""

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from proc_cpu import cpu_seconds, descendants  # noqa: E402  (Ray's processes' CPU)

RECORD = np.dtype([("key", "<u8"), ("value", "<u8")])


def make(records, rank, ranks):
    made = np.zeros(records, RECORD)
    made["key"] = np.arange(records, dtype=np.uint64) * np.uint64(ranks) + np.uint64(rank)
    made["value"] = 1
    return made


def destination(keys, ranks):
    # A multiplicative hash's high 32 bits, reduced to the ranks by a
    # multiply and shift (no division), in place: every rank sends about
    # 1/ranks of its records to each.
    with np.errstate(over="ignore"):
        h = keys * np.uint64(0x9E3779B97F4A7C15)
    h >>= np.uint64(32)
    h *= np.uint64(ranks)
    h >>= np.uint64(32)
    return h.astype(np.uint8)


def counts_of(dest, ranks):
    # One vectorised comparison per rank (np.bincount widens to int64 first).
    return np.array([np.count_nonzero(dest == r) for r in range(ranks)], np.int64)


def expected_key_sum(records, ranks):
    n = records * ranks  # keys 0 .. n-1, each once
    return n * (n - 1) // 2


def report(way, ranks, records, wall, cpu, received, key_sum):
    ok = received == records * ranks and key_sum == expected_key_sum(records, ranks)
    line = {
        "way": way,
        "ranks": ranks,
        "records": records * ranks,
        "bytes": records * ranks * RECORD.itemsize,
        "wall_s": round(wall, 4),
        "cpu_s": round(cpu, 4),
        "records_per_s": round(records * ranks / wall),
        "records_per_cpu_s": round(records * ranks / cpu),
        "exactly_once": ok,
    }
    print(json.dumps(line), flush=True)
    if not ok:
        raise SystemExit(f"{way}: received {received} records with key sum {key_sum}, expected "
                         f"{records * ranks} and {expected_key_sum(records, ranks)}")


def run_mpi(way, records):
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, ranks = comm.Get_rank(), comm.Get_size()
    made = make(records, rank, ranks)
    comm.Barrier()
    w0, c0 = time.perf_counter(), time.process_time()
    dest = destination(made["key"], ranks)
    order = np.argsort(dest, kind="stable")  # a radix sort of the uint8 destinations
    # The gather as two uint64 columns: numpy's fancy indexing of a
    # structured dtype is about 6x slower for the same bytes.
    ordered = made.view(np.uint64).reshape(-1, 2)[order].view(RECORD).reshape(-1)
    counts = counts_of(dest, ranks)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    if way == "mpi-buffers":
        recv_counts = np.empty(ranks, np.int64)
        comm.Alltoall(counts.astype(np.int64), recv_counts)
        got = np.empty(int(recv_counts.sum()), RECORD)
        recv_starts = np.concatenate(([0], np.cumsum(recv_counts)[:-1]))
        size = RECORD.itemsize
        comm.Alltoallv([ordered.view(np.uint8), (counts * size, starts * size), MPI.BYTE],
                       [got.view(np.uint8), (recv_counts * size, recv_starts * size), MPI.BYTE])
        parts = [got]
    else:
        parts = comm.alltoall([ordered[s:s + c] for s, c in zip(starts, counts)])
    received = sum(len(p) for p in parts)
    key_sum = sum(int(p["key"].sum(dtype=np.uint64)) for p in parts)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    facts = comm.gather((wall, cpu, received, key_sum), root=0)
    if rank == 0:
        report(way, ranks, records, max(f[0] for f in facts), sum(f[1] for f in facts),
               sum(f[2] for f in facts), sum(f[3] for f in facts) % 2**64)


def dask_part(i, records, ranks):
    import pandas as pd

    made = make(records, i, ranks)
    return pd.DataFrame({"key": made["key"], "value": made["value"]})


def dask_sums(df):
    import pandas as pd

    return pd.DataFrame({"n": [len(df)], "key_sum": [int(df["key"].sum()) % 2**64]})


def run_dask(records, ranks):
    import dask
    import dask.dataframe as dd
    from distributed import Client, LocalCluster, wait

    dask.config.set({"dataframe.shuffle.method": "p2p"})
    with LocalCluster(n_workers=ranks, threads_per_worker=1, processes=True,
                      dashboard_address=None, memory_limit=0) as cluster, Client(cluster) as client:
        made = dd.from_map(dask_part, range(ranks), records=records, ranks=ranks)
        made = made.persist()
        wait(made)

        def cpu_now():
            return (sum(client.run(time.process_time).values()) +
                    client.run_on_scheduler(time.process_time) + time.process_time())

        c0, w0 = cpu_now(), time.perf_counter()
        shuffled = made.shuffle("key", npartitions=ranks, shuffle_method="p2p")
        sums = shuffled.map_partitions(dask_sums, meta={"n": "i8", "key_sum": "u8"}).compute()
        wall = time.perf_counter() - w0
        cpu = cpu_now() - c0
    report("dask-p2p", ranks, records, wall, cpu, int(sums["n"].sum()),
           sum(int(k) for k in sums["key_sum"]) % 2**64)


def ray_block(batch, records, ranks):
    import pyarrow as pa

    made = make(records, batch.column("id")[0].as_py(), ranks)
    return pa.table({"key": made["key"], "value": made["value"]})


def ray_sums(table):
    import pyarrow as pa
    import pyarrow.compute as pc

    key_sum = int(pc.sum(table.column("key")).as_py() or 0) % 2**64
    return pa.table({"n": [table.num_rows], "key_sum": pa.array([key_sum], pa.uint64())})


def run_ray(records, ranks):
    import ray
    from ray.data.context import ShuffleStrategy

    ray.init(num_cpus=ranks, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    ctx = ray.data.DataContext.get_current()
    ctx.shuffle_strategy = ShuffleStrategy.HASH_SHUFFLE
    ctx.enable_progress_bars = False
    made = ray.data.range(ranks, override_num_blocks=ranks).map_batches(
        ray_block, batch_size=1, batch_format="pyarrow",
        fn_kwargs={"records": records, "ranks": ranks}).materialize()
    c0, w0 = cpu_seconds(descendants(os.getpid())), time.perf_counter()
    sums = made.repartition(ranks, keys=["key"]).map_batches(
        ray_sums, batch_size=None, batch_format="pyarrow").take_all()
    wall = time.perf_counter() - w0
    cpu = cpu_seconds(descendants(os.getpid())) - c0
    ray.shutdown()
    report("ray-data-hash", ranks, records, wall, cpu, sum(int(r["n"]) for r in sums),
           sum(int(r["key_sum"]) for r in sums) % 2**64)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("way", choices=["mpi-buffers", "mpi-pickle", "dask", "ray"])
    p.add_argument("--records", type=int, default=10_000_000, help="records per rank")
    p.add_argument("--ranks", type=int, default=2,
                   help="dask: worker processes, ray: CPUs (MPI: -np)")
    args = p.parse_args()
    if args.way == "dask":
        run_dask(args.records, args.ranks)
    elif args.way == "ray":
        run_ray(args.records, args.ranks)
    else:
        run_mpi(args.way, args.records)


if __name__ == "__main__":
    main()
