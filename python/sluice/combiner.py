"""Combiner flows: every rank pushes numpy records, and each group (the
records with one key) ends up, aggregated, on exactly one target: SUM, MIN,
MAX and AVG of value fields and the COUNT, pre-aggregated where the records
are and merged where the groups live (the C++ API's ``sluice/combiner.h``;
the same flow as a C++ ``CombinerSpec<T>`` of the same layout)::

    sale = np.dtype([("region", "<u8"), ("qty", "<i4"), ("price", "<f8")])
    with cluster.combiner("sales", sale, key="region", sum=["qty"],
                          min=["price"], max=["price"], avg=["price"]) as flow:
        groups = flow.reduce(my_sales)   # this rank's groups, sorted by key
    groups["region"], groups["count"], groups["qty_sum"], groups["price_avg"]

``reduce`` pushes this rank's records and returns the groups this rank
owns; or open the ends yourself (``source()`` and ``target()``, each from
its own thread). The groups are a structured array sorted by key: the key
field, ``count`` (uint64), and ``<field>_<aggregate>`` for each aggregate
asked for: a SUM in int64, uint64 or float64 by the field's kind (integer
sums wrap modulo 2**64), MIN and MAX in the field's own dtype (exact), AVG
in float64. Floating sums depend on the order partials meet within the
tolerance docs/python.md gives. Keys are integer fields; values integers of
1, 2, 4 or 8 bytes, or float32/float64, in native byte order.
"""

from __future__ import annotations

import threading
from typing import Any, Optional, Sequence

import numpy as np

from . import _sluice
from ._ends import ClosingEnd
from ._sluice import InvalidArgument

_AGGREGATES = ("sum", "min", "max", "avg")


def _field(dtype: np.dtype, name: str, flow: str, what: str) -> tuple:
    """(offset, kind, bytes) of field ``name``: kind 0 signed, 1 unsigned, 2 float."""
    if dtype.names is None or name not in dtype.names:
        raise InvalidArgument(f"combiner {flow!r}: {what} {name!r} is not a field of {dtype}")
    field, offset = dtype.fields[name][:2]
    if field.kind not in "iuf" or field.shape != () or not field.isnative:
        raise InvalidArgument(
            f"combiner {flow!r}: {what} {name!r} is {field}; combiners take integers of 1, 2, 4 "
            "or 8 bytes and float32/float64 fields, in native byte order")
    return (offset, "iuf".index(field.kind), field.itemsize)


class CombinerFlow:
    """A declared combiner flow of numpy records (``Cluster.combiner``)."""

    def __init__(self, cluster: Any, name: str, dtype: np.dtype, key: str,
                 aggregates: dict, sources: Optional[Sequence], targets: Optional[Sequence],
                 local_groups: int, segment_bytes: int, ring_segments: int,
                 view: Optional[Any]):
        if dtype.hasobject:
            raise InvalidArgument(f"combiner {name!r}: dtype {dtype} holds Python objects")
        key_field = _field(dtype, key, name, "key")
        if key_field[1] == 2:
            raise InvalidArgument(f"combiner {name!r}: the key {key!r} must be an integer field")
        self.name, self.dtype, self.key = name, dtype, key
        aggs, columns = [], [(key, dtype[key]), ("count", np.dtype(np.uint64))]
        for agg in _AGGREGATES:
            for field in aggregates.get(agg) or ():
                spec = _field(dtype, field, name, agg)
                aggs.append((spec, agg))
                held = (np.int64, np.uint64, np.float64)[spec[1]]
                col = np.dtype(np.float64) if agg == "avg" else (
                    np.dtype(held) if agg == "sum" else dtype[field])
                columns.append((f"{field}_{agg}", col))
        self.groups_dtype = np.dtype(columns)
        self._aggs = aggs
        all_ranks = cluster.all_ranks()
        self.sources = [tuple(e) for e in (sources if sources is not None else all_ranks)]
        self.targets = [tuple(e) for e in (targets if targets is not None else all_ranks)]
        self._c = cluster._c.combiner(name, dtype.itemsize, key_field, aggs, self.sources,
                                      self.targets, local_groups, segment_bytes, ring_segments,
                                      None if view is None else view._tuple())
        self._source_open = self._target_open = False

    def describe(self) -> str:
        """The layout every participant agrees on, e.g. "key u64@0; f0 i32@8 sum"."""
        return self._c.describe()

    def target_of(self, key: int) -> int:
        """The index into ``targets`` of the target that owns group ``key``."""
        return self._c.target_of(int(key) & (2**64 - 1))

    def source(self, slot: int = 0) -> "CombinerSource":
        """This rank's source of endpoint (rank, slot)."""
        self._c.open_source(slot)
        self._source_open = True
        return CombinerSource(self)

    def target(self, slot: int = 0) -> "CombinerTarget":
        """This rank's target of endpoint (rank, slot)."""
        self._c.open_target(slot)
        self._target_open = True
        return CombinerTarget(self)

    def reduce(self, records: np.ndarray, slot: int = 0,
               timeout: Optional[float] = None) -> np.ndarray:
        """Pushes ``records`` from this rank's source (from a thread of its
        own), closes it, and returns the groups this rank's target owns once
        every source closed. This rank must be a source and a target."""
        src, tgt = self.source(slot), self.target(slot)
        failure = []

        def push() -> None:
            try:
                src.push(records, timeout)
                src.close(timeout)
            except BaseException as e:  # noqa: BLE001 (raised below)
                failure.append(e)
                src.abort()

        t = threading.Thread(target=push)
        t.start()
        try:
            groups = tgt.consume(timeout)
        finally:
            t.join()
        if failure:
            raise failure[0]
        return groups

    def _groups(self, columns: tuple) -> np.ndarray:
        keys, counts, values = columns
        out = np.empty(len(keys), self.groups_dtype)
        key_dtype = self.groups_dtype[self.key]
        out[self.key] = keys.view(np.int64).astype(key_dtype) if key_dtype.kind == "i" else \
            keys.astype(key_dtype)
        out["count"] = counts
        for ((spec, agg), (kind, column)), name in zip(zip(self._aggs, values),
                                                      self.groups_dtype.names[2:]):
            if agg == "avg":
                out[name] = column
            else:
                held = column.view((np.int64, np.uint64, np.float64)[kind])
                out[name] = held.astype(self.groups_dtype[name])
        return out

    def destroy(self) -> None:
        """Gives the flow up on this rank (its ends with it). Never waits."""
        self._c.destroy()

    def __enter__(self) -> "CombinerFlow":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.destroy()


class CombinerSource(ClosingEnd):
    """The sending end of a combiner flow (``CombinerFlow.source()``)."""

    def __init__(self, flow: CombinerFlow):
        self.flow = flow

    def push(self, records: np.ndarray, timeout: Optional[float] = None) -> None:
        """Folds a 1-D contiguous array of the flow's dtype into its groups
        (pushing partials when the local table fills; waits for credit)."""
        records = np.asarray(records)
        if records.dtype != self.flow.dtype or records.ndim != 1:
            raise InvalidArgument(f"combiner {self.flow.name!r} takes a 1-D array of "
                                  f"{self.flow.dtype}, not {records.ndim}-D {records.dtype}")
        self.flow._c.push(np.ascontiguousarray(records).view(np.uint8), timeout)

    def close(self, timeout: Optional[float] = None) -> None:
        """Pushes the partials left; every record pushed is then in exactly
        one final group."""
        self.flow._c.close(timeout)

    def abort(self) -> None:
        """Ends the source without the guarantee: targets see PeerLost."""
        self.flow._c.abort()


class CombinerTarget:
    """The receiving end of a combiner flow (``CombinerFlow.target()``)."""

    def __init__(self, flow: CombinerFlow):
        self.flow = flow

    def consume(self, timeout: Optional[float] = None) -> Optional[np.ndarray]:
        """The groups this target owns, sorted by key, once every source
        closed (merging partials as they come meanwhile); None on later calls."""
        columns = self.flow._c.consume(timeout)
        return None if columns is None else self.flow._groups(columns)
