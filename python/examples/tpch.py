"""TPC-H queries across the ranks of a job: DuckDB's generator splits the data
(each rank makes its own part), sluice.dataframe moves rows by key, and
DuckDB runs SQL on each rank's partition.

    sluice run -n 2 -- python python/examples/tpch.py --sf 0.1 --verify

Plans, each by hand as exchanges plus SQL per partition. DuckDB's generator
gives each rank a range of order keys with their orders and all their
lines, so lineitem and orders are partitioned alike by the order key (the
co-located plans use that; customers and the other tables are split
without regard to it):
  q1              TPC-H Q1, a distributed GROUP BY: partial sums per rank,
                  the partials repartitioned by (returnflag, linestatus),
                  final sums there.
  join            lineitem joined with orders on the order key, co-located:
                  each rank joins its own parts, then a GROUP BY of the
                  joined rows by order priority, partial per rank and
                  recombined on rank 0.
  join-broadcast  the same join as a broadcast join (every rank gets all
                  orders; lineitem stays), for tables not partitioned alike.
  join-shuffle    the same join with both tables repartitioned by the order
                  key.
  q3              TPC-H Q3: the segment's customers broadcast and joined
                  with each rank's orders and their lines (co-located), each
                  rank's top 10 of whole orders gathered to rank 0.
  q3-broadcast    Q3 without the co-location: those orders broadcast too and
                  joined with each rank's lineitem rows, the per-order
                  partial revenues repartitioned by the order key and summed.
The broadcast and shuffle plans run with --queries (not in the default set).
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
import statistics
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


def _join_result(cluster, con, partial, moved):
    everything = sdf.gather(cluster, partial)
    if everything is None:
        return None, moved
    final = sdf.sql("""
        SELECT o_orderpriority, CAST(sum(lines) AS BIGINT) AS lines, sum(value) AS value,
               min(first_ship) AS first_ship, max(last_receipt) AS last_receipt
        FROM t GROUP BY o_orderpriority ORDER BY o_orderpriority""", con, t=everything)
    return final, moved


def join(cluster, con):
    # A co-located join: DuckDB's generator gives each step (rank) a range
    # of order keys with their orders and all their lines, so lineitem and
    # orders are partitioned alike by the order key and each rank joins its
    # own parts; only the partial groups (count, sum, min and max
    # recombine) move, to rank 0. (--verify would find a row joined
    # wrongly: its result would differ from one DuckDB's over the whole.)
    partial = sdf.sql(JOIN_SQL, con)
    return _join_result(cluster, con, partial, 0)


def join_broadcast(cluster, con):
    # A broadcast join: every rank gets every order (key and priority) and
    # joins its own lineitem rows, which do not move; each rank's groups
    # are partial (count, sum, min and max recombine), summed on rank 0.
    orders = sdf.broadcast(cluster, con.sql("SELECT o_orderkey, o_orderpriority FROM orders"))
    partial = sdf.sql(JOIN_SQL.replace("JOIN orders", "JOIN all_orders"), con,
                      all_orders=orders)
    return _join_result(cluster, con, partial, orders.num_rows)


def join_shuffle(cluster, con):
    # The same join with both sides repartitioned by the order key (the
    # plan for two tables too big to send everywhere).
    lineitem = sdf.repartition(
        cluster, con.sql("SELECT l_orderkey, l_extendedprice, l_shipdate, l_receiptdate "
                         "FROM lineitem"), by="l_orderkey")
    orders = sdf.repartition(cluster, con.sql("SELECT o_orderkey, o_orderpriority FROM orders"),
                             by="o_orderkey")
    partial = sdf.sql(JOIN_SQL, con, lineitem=lineitem, orders=orders)
    return _join_result(cluster, con, partial, lineitem.num_rows + orders.num_rows)


def q3(cluster, con):
    # Orders and lineitem are partitioned alike by the order key (see join):
    # only the segment's customers, which any rank's orders may name, are
    # broadcast (about 30,000 rows at scale factor 1, each rank's half); a
    # rank's orders then hold every line of theirs, so each rank sums whole
    # orders, and its top 10 go to rank 0.
    customers = sdf.broadcast(
        cluster, con.sql("SELECT c_custkey FROM customer WHERE c_mktsegment = 'BUILDING'"))
    # (A semi-join on the received keys: about 15% faster here than the
    # same join with the Arrow table as one side, whose size DuckDB's join
    # order does not know.)
    top = sdf.sql("""
        SELECT l_orderkey, sum(l_extendedprice * (1 - l_discount)) AS revenue, o_orderdate,
               o_shippriority
        FROM orders JOIN lineitem ON l_orderkey = o_orderkey
        WHERE o_custkey IN (SELECT c_custkey FROM customers)
              AND o_orderdate < DATE '1995-03-15' AND l_shipdate > DATE '1995-03-15'
        GROUP BY l_orderkey, o_orderdate, o_shippriority
        ORDER BY revenue DESC, o_orderdate LIMIT 10""", con, customers=customers)
    return _top10(cluster, con, top, customers.num_rows)


def _top10(cluster, con, top, moved):
    everything = sdf.gather(cluster, top)
    if everything is None:
        return None, moved
    # Tens of rows: Arrow sorts them in microseconds, where a DuckDB query
    # costs milliseconds.
    return everything.sort_by([("revenue", "descending"), ("o_orderdate", "ascending")]) \
        .slice(0, 10), moved


def q3_broadcast(cluster, con):
    # Broadcast joins: the customers of the segment and then their open
    # orders are small (about 30,000 and 150,000 rows at scale factor 1), so
    # every rank gets all of them and joins its own lineitem rows where they
    # are; only per-order partial revenues are repartitioned (an order's
    # lines may lie on more than one rank) and summed there.
    customers = sdf.broadcast(
        cluster, con.sql("SELECT c_custkey FROM customer WHERE c_mktsegment = 'BUILDING'"))
    theirs = sdf.broadcast(cluster, sdf.sql("""
        SELECT o_orderkey, o_orderdate, o_shippriority
        FROM orders JOIN customers ON c_custkey = o_custkey
        WHERE o_orderdate < DATE '1995-03-15'""", con, customers=customers))
    partial = sdf.repartition(cluster, sdf.sql("""
        SELECT l_orderkey, sum(l_extendedprice * (1 - l_discount)) AS revenue, o_orderdate,
               o_shippriority
        FROM lineitem JOIN theirs ON l_orderkey = o_orderkey
        WHERE l_shipdate > DATE '1995-03-15'
        GROUP BY l_orderkey, o_orderdate, o_shippriority""", con, theirs=theirs), by="l_orderkey")
    top = sdf.sql("""
        SELECT l_orderkey, sum(revenue) AS revenue, o_orderdate, o_shippriority
        FROM partial GROUP BY l_orderkey, o_orderdate, o_shippriority
        ORDER BY revenue DESC, o_orderdate LIMIT 10""", con, partial=partial)
    return _top10(cluster, con, top, customers.num_rows + theirs.num_rows + partial.num_rows)


PLANS = {"q1": q1, "join": join, "join-broadcast": join_broadcast, "join-shuffle": join_shuffle,
         "q3": q3, "q3-broadcast": q3_broadcast}
REFERENCE = {"q1": "PRAGMA tpch(1)", "join": JOIN_SQL, "join-broadcast": JOIN_SQL,
             "join-shuffle": JOIN_SQL, "q3": "PRAGMA tpch(3)", "q3-broadcast": "PRAGMA tpch(3)"}


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
    ap.add_argument("--repeat", type=int, default=1,
                    help="run each plan (and --verify's reference) this many times and report "
                         "the medians, and the first run's time apart (default 1)")
    ap.add_argument("--temp-dir", default="/tmp/sluice-tpch",
                    help="where DuckDB spills (a directory per process under it)")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    queries = args.queries.split(",")
    for q in queries:
        if q not in PLANS:
            ap.error(f"--queries: no plan {q!r} (there are {', '.join(PLANS)})")

    # DuckDB's register() and pyarrow's take() import pandas on their first
    # call (0.3-0.4 s here), and DuckDB's first scan of an Arrow table
    # imports pyarrow.dataset (20 ms): import them with the rest, so that
    # the first plan's time is the plan's.
    try:
        import pandas  # noqa: F401
    except ImportError:
        pass
    import pyarrow.dataset  # noqa: F401

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
            # Ours and the reference's runs alternate, so that whatever else
            # changes on the machine meanwhile falls on both alike.
            runs, one = [], []  # ours (the slowest rank's seconds), the reference's
            theirs = None
            for _ in range(args.repeat):
                cluster.barrier()
                t0 = time.perf_counter()
                result, moved = PLANS[q](cluster, con)
                runs.append(max(cluster.allgather(time.perf_counter() - t0)))
                if reference is not None:
                    t0 = time.perf_counter()
                    theirs = sdf.to_table(reference.sql(REFERENCE[q]))
                    one.append(time.perf_counter() - t0)
            rows_moved = cluster.allreduce(moved)
            if cluster.rank != 0:
                continue
            ours = statistics.median(runs)
            times = f"{ours:.3f} s" if args.repeat == 1 else \
                f"{ours:.3f} s (median of {args.repeat} runs; the first {runs[0]:.3f} s)"
            print(f"{q}: {result.num_rows} rows in {times} on "
                  f"{cluster.world_size} ranks (sf {args.sf}, generated in {gen:.2f} s; "
                  f"{rows_moved} rows exchanged)")
            for row in result.to_pylist():
                print("  " + ", ".join(f"{k}={v}" for k, v in row.items()))
            if reference is not None:
                why = same(result, theirs)
                first = "" if args.repeat == 1 else \
                    f"; the first runs: {runs[0] / one[0]:.2f}x"
                if why:
                    ok = False
                    print(f"verify: MISMATCH in {q}: {why}")
                else:
                    print(f"verify: OK ({q}: {result.num_rows} rows equal to one DuckDB's over "
                          f"the whole data, which took {statistics.median(one):.3f} s with "
                          f"{args.threads * cluster.world_size} threads: "
                          f"{ours / statistics.median(one):.2f}x its time{first})")
        # Each process's peak resident memory (DuckDB's and the Arrow
        # tables' the plans hold alike; rank 0's includes the reference).
        peaks = cluster.allgather(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
        if cluster.rank == 0:
            print("peak resident memory per rank (MiB): " + ", ".join(str(p) for p in peaks))
        ok = cluster.allreduce(ok, lambda a, b: a and b)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
