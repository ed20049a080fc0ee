"""Arrow record batches from one process to another (a benchmark, not a
test; docs/python.md, "Flows of Arrow record batches").

One sender pushes --mib MiB of record batches (an int64 key, a float64
and a string column; --rows rows each) to one receiver, which reads every
batch (sums its key column); two ways, alternating --repeats times in one
run:

  sluice   a batch flow (cluster.batches) between rank 0 and rank 1 of a
           2-rank job: received as views of the ring
  flight   Apache Arrow Flight (pyarrow.flight, Arrow's own RPC for record
           batches): a do_put to a Flight server in the receiving process,
           over gRPC on loopback TCP

Rank 0 prints one JSON line per way and repeat: MiB/s (wall, from a
barrier to the receiver's last batch) and MiB per CPU-second (both
processes' process time). Run it over shm, and over ofi (libfabric's tcp
provider: TCP over loopback, as Flight's):

  PYTHONPATH=build/python build/bin/sluice run -n 2 -- .venv/bin/python \\
      bench/python/arrow_batches.py --mib 2048 --rows 4096
  SLUICE_TRANSPORT=ofi PYTHONPATH=build/python build/bin/sluice run -n 2 -- \\
      .venv/bin/python bench/python/arrow_batches.py --mib 2048 --rows 4096
"""

import argparse
import json
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as flight

import sluice

SCHEMA = pa.schema([("key", pa.int64()), ("value", pa.float64()), ("name", pa.string())])


def make_batch(rows):
    k = np.arange(rows, dtype=np.int64)
    return pa.record_batch([pa.array(k), pa.array(k * 0.5),
                            pa.array([f"name-{i % 1000:04d}" for i in range(rows)])],
                           schema=SCHEMA)


def cpu_seconds(cluster, since):
    return sum(cluster.allgather(time.process_time() - since))


def via_sluice(cluster, batch, count, segment_bytes, tag):
    me = cluster.rank
    flow = cluster.batches(f"bench-{tag}", SCHEMA, sources=[(0, 0)], targets=[(1, 0)],
                           segment_bytes=segment_bytes)
    src = flow.source() if me == 0 else None
    tgt = flow.target() if me == 1 else None
    cluster.barrier()
    w0, c0 = time.perf_counter(), time.process_time()
    total = 0
    if me == 0:
        with src:
            for _ in range(count):
                src.push(batch, to=0)
    else:
        for got in tgt:
            total += pc.sum(got.column(0)).as_py()
    wall = max(cluster.allgather(time.perf_counter() - w0))
    cpu = cpu_seconds(cluster, c0)
    flow.destroy()
    return wall, cpu, cluster.allgather(total)[1]


class Sink(flight.FlightServerBase):
    def __init__(self):
        super().__init__("grpc://127.0.0.1:0")
        self.total = 0
        self.done = threading.Event()

    def do_put(self, context, descriptor, reader, writer):
        total = 0
        for chunk in reader:
            total += pc.sum(chunk.data.column(0)).as_py()
        self.total = total
        self.done.set()


def via_flight(cluster, batch, count, sink):
    me = cluster.rank
    port = cluster.allgather(sink.port if sink else 0)[1]
    if me == 0:
        client = flight.connect(f"grpc://127.0.0.1:{port}")
    cluster.barrier()
    w0, c0 = time.perf_counter(), time.process_time()
    total = 0
    if me == 0:
        writer, _ = client.do_put(flight.FlightDescriptor.for_path("bench"), SCHEMA)
        for _ in range(count):
            writer.write_batch(batch)
        writer.close()
        client.close()
    else:
        sink.done.wait()
        sink.done.clear()
        total = sink.total
    wall = max(cluster.allgather(time.perf_counter() - w0))
    cpu = cpu_seconds(cluster, c0)
    return wall, cpu, cluster.allgather(total)[1]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mib", type=int, default=2048, help="MiB of batches sent in each run")
    p.add_argument("--rows", type=int, default=4096, help="rows per batch")
    p.add_argument("--segment-bytes", type=int, default=0,
                   help="the batch flow's segment payload (0: room for one batch)")
    p.add_argument("--repeats", type=int, default=3, help="alternations of the two ways")
    args = p.parse_args()
    batch = make_batch(args.rows)
    count = max(1, args.mib * 2**20 // batch.nbytes)
    expected = count * int(np.arange(args.rows).sum())
    with sluice.Cluster.from_env() as cluster:
        if cluster.world_size != 2:
            raise SystemExit("arrow_batches.py runs on 2 ranks (sluice run -n 2)")
        sink = Sink() if cluster.rank == 1 else None
        if sink:
            threading.Thread(target=sink.serve, daemon=True).start()
        seg = args.segment_bytes or ((batch.nbytes + 4096 + 4) // 8 * 8 + 8)
        for r in range(args.repeats):
            for way in ("sluice", "flight"):
                if way == "sluice":
                    wall, cpu, total = via_sluice(cluster, batch, count, seg, f"{r}")
                else:
                    wall, cpu, total = via_flight(cluster, batch, count, sink)
                if total != expected:
                    raise SystemExit(f"{way}: the receiver summed {total}, not {expected}")
                mib = count * batch.nbytes / 2**20
                if cluster.rank == 0:
                    print(json.dumps({
                        "way": way, "repeat": r, "batch_bytes": batch.nbytes, "batches": count,
                        "mib": round(mib), "seconds": round(wall, 3),
                        "mib_per_s": round(mib / wall), "cpu_seconds": round(cpu, 3),
                        "mib_per_cpu_s": round(mib / cpu)}), flush=True)
        if sink:
            sink.shutdown()


if __name__ == "__main__":
    main()
