"""TPC-H queries across the ranks of a job: DuckDB's generator splits the data
(each rank makes its own part), sluice.dataframe moves rows by key, and
DuckDB runs SQL on each rank's partition.

    sluice run -n 2 -- python python/examples/tpch.py --sf 0.1 --verify

Three plans, each by hand as shuffles plus SQL per partition:
  q1    TPC-H Q1, a distributed GROUP BY: partial sums per rank, the
        partials repartitioned by (returnflag, linestatus), final sums there.
  join  lineitem joined with orders on the order key, both repartitioned by
        it, then a GROUP BY of the joined rows by order priority.
  q3    TPC-H Q3: customers and orders repartitioned by the customer key
        and joined, the result and lineitem repartitioned by the order key
        and joined, each rank's top 10 gathered to rank 0.
With --verify, rank 0 generates the whole data and runs the same queries
(DuckDB's own TPC-H text for q1 and q3, ``PRAGMA tpch(N)``) in one DuckDB
with as many threads as the job's ranks have together, and compares: every
row and column equal, the averages to the last bit.
"""

import argparse
import atexit
import os
import resource
import shutil
import sys
import time

import duckdb
import pyarrow as pa

import sluice
from sluice import dataframe as sdf

Q1_WHERE = "l_shipdate <= DATE '1998-12-01' - INTERVAL 90 DAY"

JOIN_SQL = """
SELECT o_orderpriority, count(*) AS lines, sum(l_extendedprice) AS value,
       min(l_shipdate) AS first_ship, max(l_receiptdate) AS last_receipt
FROM lineitem JOIN orders ON l_orderkey = o_orderkey
GROUP BY o_orderpriority ORDER BY o_orderpriority"""


def q1(cluster, con):
    partial = con.sql(f"""
        SELECT l_returnflag, l_linestatus, sum(l_quantity) AS sq, sum(l_extendedprice) AS sp,
               sum(l_extendedprice * (1 - l_discount)) AS sdp,
               sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)) AS sc,
               sum(l_discount) AS sd, count(*) AS n
        FROM lineitem WHERE {Q1_WHERE} GROUP BY l_returnflag, l_linestatus""").arrow()
    groups = sdf.repartition(cluster, partial, by=["l_returnflag", "l_linestatus"])
    sums = sdf.sql("""
        SELECT l_returnflag, l_linestatus, sum(sq) AS sum_qty, sum(sp) AS sum_base_price,
               sum(sdp) AS sum_disc_price, sum(sc) AS sum_charge, sum(sd) AS sum_disc,
               CAST(sum(n) AS BIGINT) AS count_order
        FROM groups GROUP BY l_returnflag, l_linestatus""", con, groups=groups)
    # The averages from the exact sums, as DuckDB's avg divides (bit-equal).
    n = sums["count_order"]
    final = pa.table({
        **{c: sums[c] for c in ["l_returnflag", "l_linestatus", "sum_qty", "sum_base_price",
                                "sum_disc_price", "sum_charge"]},
        "avg_qty": sdf.exact_mean(sums["sum_qty"], n),
        "avg_price": sdf.exact_mean(sums["sum_base_price"], n),
        "avg_disc": sdf.exact_mean(sums["sum_disc"], n),
        "count_order": n,
    })
    everything = sdf.gather(cluster, final)
    if everything is None:
        return None, partial.num_rows
    return sdf.sql("SELECT * FROM t ORDER BY l_returnflag, l_linestatus", con, t=everything), \
        partial.num_rows


def join(cluster, con):
    lineitem = sdf.repartition(
        cluster, con.sql("SELECT l_orderkey, l_extendedprice, l_shipdate, l_receiptdate "
                         "FROM lineitem"), by="l_orderkey")
    orders = sdf.repartition(cluster, con.sql("SELECT o_orderkey, o_orderpriority FROM orders"),
                             by="o_orderkey")
    partial = sdf.sql(JOIN_SQL, con, lineitem=lineitem, orders=orders)
    everything = sdf.gather(cluster, partial)
    if everything is None:
        return None, lineitem.num_rows + orders.num_rows
    final = sdf.sql("""
        SELECT o_orderpriority, CAST(sum(lines) AS BIGINT) AS lines, sum(value) AS value,
               min(first_ship) AS first_ship, max(last_receipt) AS last_receipt
        FROM t GROUP BY o_orderpriority ORDER BY o_orderpriority""", con, t=everything)
    return final, lineitem.num_rows + orders.num_rows


def q3(cluster, con):
    customers = sdf.repartition(
        cluster, con.sql("SELECT c_custkey FROM customer WHERE c_mktsegment = 'BUILDING'"),
        by="c_custkey")
    orders = sdf.repartition(
        cluster, con.sql("SELECT o_orderkey, o_custkey, o_orderdate, o_shippriority FROM orders "
                         "WHERE o_orderdate < DATE '1995-03-15'"), by="o_custkey")
    theirs = sdf.sql("""
        SELECT o_orderkey, o_orderdate, o_shippriority
        FROM orders JOIN customers ON c_custkey = o_custkey""", con, orders=orders,
                     customers=customers)
    theirs = sdf.repartition(cluster, theirs, by="o_orderkey")
    lineitem = sdf.repartition(
        cluster, con.sql("SELECT l_orderkey, l_extendedprice, l_discount FROM lineitem "
                         "WHERE l_shipdate > DATE '1995-03-15'"), by="l_orderkey")
    top = sdf.sql("""
        SELECT l_orderkey, sum(l_extendedprice * (1 - l_discount)) AS revenue, o_orderdate,
               o_shippriority
        FROM lineitem JOIN theirs ON l_orderkey = o_orderkey
        GROUP BY l_orderkey, o_orderdate, o_shippriority
        ORDER BY revenue DESC, o_orderdate LIMIT 10""", con, lineitem=lineitem, theirs=theirs)
    everything = sdf.gather(cluster, top)
    moved = customers.num_rows + orders.num_rows + theirs.num_rows + lineitem.num_rows
    if everything is None:
        return None, moved
    return sdf.sql("SELECT * FROM t ORDER BY revenue DESC, o_orderdate LIMIT 10", con,
                   t=everything), moved


PLANS = {"q1": q1, "join": join, "q3": q3}
REFERENCE = {"q1": "PRAGMA tpch(1)", "join": JOIN_SQL, "q3": "PRAGMA tpch(3)"}


def same(ours: pa.Table, theirs: pa.Table) -> str:
    """'' if equal in every row and column (names, types, values), else why not."""
    if ours.schema != theirs.schema:
        return f"schemas differ: ours {ours.schema} DuckDB's {theirs.schema}"
    if ours.num_rows != theirs.num_rows:
        return f"{ours.num_rows} rows, DuckDB {theirs.num_rows}"
    for i, (a, b) in enumerate(zip(ours.to_pylist(), theirs.to_pylist())):
        if a != b:
            return f"row {i}: ours {a}, DuckDB's {b}"
    return ""


def duckdb_config(args, threads: int, who: str) -> dict:
    """A DuckDB connection's settings: threads, and --memory-limit with a
    spill directory of its own."""
    config = {"threads": threads}
    if args.memory_limit:
        os.makedirs(args.temp_dir, exist_ok=True)
        spill = f"{args.temp_dir}/{who}-{os.getpid()}"
        atexit.register(shutil.rmtree, spill, ignore_errors=True)
        config["memory_limit"] = args.memory_limit
        config["temp_directory"] = spill
    return config


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sf", type=float, default=0.1, help="TPC-H scale factor (default 0.1)")
    ap.add_argument("--queries", default="q1,join,q3", help="which plans, comma-separated")
    ap.add_argument("--verify", action="store_true",
                    help="rank 0 compares each result with one DuckDB over the whole data")
    ap.add_argument("--threads", type=int, default=1, help="DuckDB threads per rank (default 1)")
    ap.add_argument("--memory-limit", default="",
                    help="DuckDB's memory_limit for every process, e.g. 500MB (each rank's and "
                         "the --verify reference's alike; beyond it DuckDB spills to "
                         "--temp-dir); default: DuckDB's own")
    ap.add_argument("--temp-dir", default="/tmp/sluice-tpch",
                    help="where DuckDB spills (a directory per process under it)")
    args = ap.parse_args()
    queries = args.queries.split(",")
    for q in queries:
        if q not in PLANS:
            ap.error(f"--queries: no plan {q!r} (there are {', '.join(PLANS)})")

    ok = True
    with sluice.Cluster.from_env() as cluster:
        con = duckdb.connect(config=duckdb_config(args, args.threads, f"rank{cluster.rank}"))
        t0 = time.perf_counter()
        con.execute(f"CALL dbgen(sf={args.sf}, children={cluster.world_size}, "
                    f"step={cluster.rank})")
        gen = time.perf_counter() - t0
        reference = None
        if args.verify and cluster.rank == 0:
            # One DuckDB on as many cores as the job's ranks use together.
            reference = duckdb.connect(
                config=duckdb_config(args, args.threads * cluster.world_size, "reference"))
            reference.execute(f"CALL dbgen(sf={args.sf})")
        for q in queries:
            cluster.barrier()
            t0 = time.perf_counter()
            result, moved = PLANS[q](cluster, con)
            seconds = cluster.allgather(time.perf_counter() - t0)
            rows_moved = cluster.allreduce(moved)
            if cluster.rank != 0:
                continue
            print(f"{q}: {result.num_rows} rows in {max(seconds):.3f} s on "
                  f"{cluster.world_size} ranks (sf {args.sf}, generated in {gen:.2f} s; "
                  f"{rows_moved} rows repartitioned)")
            for row in result.to_pylist():
                print("  " + ", ".join(f"{k}={v}" for k, v in row.items()))
            if reference is not None:
                t0 = time.perf_counter()
                theirs = sdf.to_table(reference.sql(REFERENCE[q]))
                one = time.perf_counter() - t0
                why = same(result, theirs)
                if why:
                    ok = False
                    print(f"verify: MISMATCH in {q}: {why}")
                else:
                    print(f"verify: OK ({q}: {result.num_rows} rows equal to one DuckDB's over "
                          f"the whole data, which took {one:.3f} s with "
                          f"{args.threads * cluster.world_size} threads: "
                          f"{max(seconds) / one:.2f}x its time)")
        # Each process's peak resident memory (DuckDB's and the Arrow
        # tables' the plans hold alike; rank 0's includes the reference).
        peaks = cluster.allgather(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
        if cluster.rank == 0:
            print("peak resident memory per rank (MiB): " + ", ".join(str(p) for p in peaks))
        ok = cluster.allreduce(ok, lambda a, b: a and b)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
