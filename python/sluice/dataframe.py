"""sluice.dataframe: tables repartitioned by key across the ranks of a job,
and DuckDB SQL on each rank's partition.

Each rank holds a part of a table (an Arrow table, a pandas DataFrame or a
DuckDB relation); ``repartition(cluster, table, by=...)`` moves every row to
the rank that owns its key (a hash of the key columns, the flows' own), so
that rows with equal keys meet on one rank and a GROUP BY or a join on the
key runs there alone::

    import duckdb
    import sluice
    from sluice import dataframe as sdf

    with sluice.Cluster.from_env() as cluster:
        con = duckdb.connect()
        con.execute(f"CALL dbgen(sf=1, children={cluster.world_size}, step={cluster.rank})")
        lineitem = sdf.repartition(cluster, con.sql("SELECT * FROM lineitem"), by="l_orderkey")
        orders = sdf.repartition(cluster, con.sql("SELECT * FROM orders"), by="o_orderkey")
        part = sdf.sql("SELECT count(*) AS n FROM lineitem JOIN orders ON l_orderkey = o_orderkey",
                       lineitem=lineitem, orders=orders)
        everything = sdf.gather(cluster, part)     # rank 0: every rank's rows; others: None

Rows travel as Arrow IPC streams, one from every rank to every rank
(``Cluster.alltoallv``, through a flow of byte records, not the registry),
so any Arrow type goes (lists, structs, dictionaries, nulls); a received
table's buffers are views of the bytes that arrived (one copy out of the
flow's rings, none after). A row's owner is the hash of its key columns'
bytes, as batch flows route (``sluice.batches.key_targets``): integers,
floats, booleans, dates, times, timestamps, durations, decimals, strings
and binaries can be keys, nulls included, and tables to be joined on a key
must give it the same type on both sides. Every rank calls each function in the
same order (they are collectives), with tables of the same schema;
``InvalidArgument`` names a rank whose schema differs and a key column of a
type that cannot be hashed.

Needs pyarrow (and duckdb for ``sql``): ``pip install sluice[dataframe]``.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Union

import numpy as np

from . import Cluster, InvalidArgument, View
from .batches import key_targets, key_type_ok

try:
    import pyarrow as pa
except ImportError as e:  # pragma: no cover - the module's one hard need
    raise ImportError("sluice.dataframe needs pyarrow: pip install pyarrow") from e

__all__ = ["repartition", "broadcast", "gather", "sql", "to_table", "exact_mean"]


def to_table(data: Any) -> "pa.Table":
    """``data`` as an Arrow table: an Arrow table or record batch, a DuckDB
    relation (``.arrow()``) or a pandas DataFrame (its index dropped)."""
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if hasattr(data, "arrow") and callable(data.arrow):  # a DuckDB relation
        t = data.arrow()
        return t if isinstance(t, pa.Table) else t.read_all()
    if type(data).__module__.startswith("pandas"):
        return pa.Table.from_pandas(data, preserve_index=False)
    raise InvalidArgument(f"sluice.dataframe takes an Arrow table or record batch, a DuckDB "
                          f"relation or a pandas DataFrame, not {type(data).__name__}")


def _check_key(name: str, t: "pa.DataType") -> None:
    """Raises InvalidArgument if a key column of type ``t`` cannot be hashed."""
    if key_type_ok(t):
        return
    raise InvalidArgument(f"sluice.dataframe: key column {name!r} is of type {t}, which cannot "
                          "be hashed (keys of fixed-width values, decimals, booleans, strings "
                          "and binaries can)")


def _agree(cluster: Cluster, table: "pa.Table", view: Optional[View]) -> None:
    """Raises InvalidArgument on every rank if any rank's table has another
    schema (compared without metadata: pandas' differs from rank to rank)."""
    mine = table.schema.remove_metadata().serialize().to_pybytes()
    got = cluster.allgather(mine, view=view)
    parts = list(got.values) if view is not None else got
    ranks = list(got.ranks) if view is not None else list(range(len(parts)))
    for rank, theirs in zip(ranks, parts):
        if theirs != mine:
            other = pa.ipc.read_schema(pa.py_buffer(theirs))
            raise InvalidArgument(f"sluice.dataframe: rank {rank}'s table has another schema "
                                  f"({other.to_string(show_schema_metadata=False)!r}) than "
                                  f"rank {cluster.rank}'s "
                                  f"({table.schema.to_string(show_schema_metadata=False)!r})")


def _owners(table: "pa.Table", by: Sequence[str], n: int) -> np.ndarray:
    """Each row's owner among ``n`` ranks: the hash of its key columns'
    values (batch flows' key routing, ``sluice.batches.key_targets``)."""
    keys = pa.record_batch([table.column(k).combine_chunks() for k in by], names=list(by))
    return key_targets(keys, list(by), n)


def _ipc(table: "pa.Table") -> Any:
    if table.num_rows == 0:
        return b""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def _exchange(cluster: Cluster, table: "pa.Table", by: Sequence[str], root: Optional[int],
              view: Optional[View], everyone: bool = False) -> "pa.Table":
    """This rank's rows after an exchange: by the key columns ``by``, all of
    them to ``root``, or (``everyone``) every rank's rows to every rank. The
    rows a rank keeps do not travel: only the others' are serialized and
    moved."""
    _agree(cluster, table, view)
    ranks = list(view.members) if view is not None else list(range(cluster.world_size))
    n = len(ranks)
    me = ranks.index(cluster.rank) if cluster.rank in ranks else -1
    empty = table.slice(0, 0)
    if everyone:
        parts = [table] * n
    elif root is not None:
        parts = [empty] * n
        parts[ranks.index(root)] = table
    else:
        # Owners as the narrowest unsigned type: numpy's stable sort of 8-
        # and 16-bit integers is a radix sort, twice as fast as of 32-bit.
        targets = _owners(table, by, n)
        targets = targets.astype(np.uint16 if n <= 1 << 16 else np.uint32, copy=False)
        order = np.argsort(targets, kind="stable")
        starts = np.concatenate([[0], np.cumsum(np.bincount(targets, minlength=n))])
        ordered = table.take(pa.array(order)) if table.num_rows else table
        parts = [ordered.slice(starts[i], starts[i + 1] - starts[i]) for i in range(n)]
    kept = parts[me] if me >= 0 else empty
    streams = {}  # the same part (a broadcast) serialized once
    sends = []
    for i, part in enumerate(parts):
        if i == me or part.num_rows == 0:
            sends.append(b"")
            continue
        if id(part) not in streams:
            streams[id(part)] = _ipc(part)
        sends.append(streams[id(part)])
    got = cluster.alltoallv(sends, view=view)
    # Each stream is read where it landed: the tables' buffers are views of
    # the received bytes.
    tables = [pa.ipc.open_stream(pa.py_buffer(b)).read_all().replace_schema_metadata(
        table.schema.metadata) for b in got if len(b)]
    if kept.num_rows:
        tables.append(kept)
    return pa.concat_tables([empty] + tables) if tables else empty


def repartition(cluster: Cluster, data: Any, by: Union[str, Sequence[str]],
                view: Optional[View] = None) -> "pa.Table":
    """This rank's partition of the job's table by the key columns ``by``:
    every rank passes its part of the table (same schema everywhere) and
    gets back the rows whose key it owns (a hash of the key columns'
    values, so equal keys meet on one rank), as an Arrow table. A
    collective: every rank calls it (with ``view``: every member of the
    view, the exchange among them; ``ViewChanged`` as for
    ``Cluster.alltoallv``)."""
    table = to_table(data)
    by = [by] if isinstance(by, str) else list(by)
    if not by:
        raise InvalidArgument("sluice.dataframe.repartition: by names no column")
    for k in by:
        if k not in table.schema.names:
            raise InvalidArgument(f"sluice.dataframe.repartition: by names {k!r}, which is not "
                                  f"a column of the table ({', '.join(table.schema.names)})")
        _check_key(k, table.schema.field(k).type)
    return _exchange(cluster, table, by, None, view)


def gather(cluster: Cluster, data: Any, root: int = 0,
           view: Optional[View] = None) -> Optional["pa.Table"]:
    """Every rank's rows on rank ``root`` (in no promised order), as an
    Arrow table; None on the other ranks. A collective, as ``repartition``."""
    table = to_table(data)
    got = _exchange(cluster, table, [], root, view)
    return got if cluster.rank == root else None


def broadcast(cluster: Cluster, data: Any, view: Optional[View] = None) -> "pa.Table":
    """Every rank's rows on every rank (in no promised order), as an Arrow
    table: the small side of a *broadcast join*, which lets the big side
    stay where it is (a join of a rank's own rows with every row of the
    small table needs no other exchange). Each rank's rows are serialized
    once and sent to each other rank, so a rank receives the whole table:
    worth it while the table is small beside what a repartition would move.
    A collective, as ``repartition``."""
    return _exchange(cluster, to_table(data), [], None, view, everyone=True)


def exact_mean(sums: Any, counts: Any) -> "pa.Array":
    """The means of exact sums (``sums``: decimals or integers, e.g. the sum
    of per-rank partial sums) over ``counts``, as DuckDB's ``avg`` computes
    them: the sum's unscaled integer divided once by count x 10^scale in
    long double and rounded to double, so that a mean recombined from
    partials equals DuckDB's ``avg`` over the whole data bit for bit (where
    the sums' unscaled values stay within 64 bits). A float64 Arrow array."""
    sums = pa.chunked_array([sums]).combine_chunks() if not isinstance(sums, pa.ChunkedArray) \
        else sums.combine_chunks()
    counts = np.asarray(counts.to_numpy() if hasattr(counts, "to_numpy") else counts)
    n = len(sums)
    if pa.types.is_decimal(sums.type):
        if sums.type.byte_width != 16:
            raise InvalidArgument(f"sluice.dataframe.exact_mean: {sums.type} (decimal128 only)")
        words = np.frombuffer(sums.buffers()[1], np.int64, count=2 * n, offset=sums.offset * 16)
        lo, hi = words[0::2], words[1::2]
        # Within 64 bits the high word is the low word's sign: the low word
        # alone is the value, exactly representable in long double.
        unscaled = lo.astype(np.longdouble)
        wide = hi != (lo >> 63)
        if wide.any():
            unscaled[wide] = hi[wide].astype(np.longdouble) * np.longdouble(2.0**64) + \
                lo[wide].view(np.uint64).astype(np.longdouble)
        scale = np.longdouble(float(10**sums.type.scale))
    elif pa.types.is_integer(sums.type):
        unscaled = sums.to_numpy(zero_copy_only=False).astype(np.longdouble)
        scale = np.longdouble(1.0)
    else:
        raise InvalidArgument(f"sluice.dataframe.exact_mean: sums of {sums.type} (decimals or "
                              "integers; a float sum has no exact mean)")
    divisor = counts.astype(np.longdouble) * scale
    means = (unscaled / divisor).astype(np.float64)
    validity = sums.buffers()[0]
    return pa.Array.from_buffers(pa.float64(), n, [validity, pa.py_buffer(means)])


def sql(query: str, con: Any = None, **tables: Any) -> "pa.Table":
    """Runs ``query`` with DuckDB on this rank alone, over the tables passed
    by name (``sql("SELECT ... FROM t", t=table)``), and returns the result
    as an Arrow table. ``con``: the DuckDB connection to run it on (its
    threads, memory_limit and spill directory apply; the tables are
    registered on it for the query and unregistered after); default: a new
    connection with DuckDB's defaults (as many threads as the machine has
    cores, whatever else runs on it)."""
    import duckdb

    own = con is None
    if own:
        con = duckdb.connect()
    try:
        for table_name, data in tables.items():
            con.register(table_name, to_table(data))
        return to_table(con.sql(query))
    finally:
        if own:
            con.close()
        else:
            for table_name in tables:
                con.unregister(table_name)
