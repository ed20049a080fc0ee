"""Flows of Arrow record batches: a source pushes ``pyarrow.RecordBatch``es
(any schema of fixed-width, string, binary, list, struct, map and
dictionary columns, nulls included) and a target receives them as
record batches whose buffers lie in the flow's ring itself: no copy on
receipt, one on sending (into the ring)::

    schema = pa.schema([("key", pa.int64()), ("name", pa.string())])
    with cluster.batches("rows", schema) as flow:
        with flow.source() as src:            # (a thread of its own, or after
            src.push(batch, to=2)             #  the pushes fit the rings)
        for got in flow.target():             # pyarrow.RecordBatch, zero-copy
            ...

A received batch keeps its segment of the ring for as long as it, or any
array, slice or buffer taken from it, is alive; then the segment goes back
to its source. Keeping a whole ring's worth from one source stops that
source, and ``consume()`` raises ``InvalidArgument`` saying so: copy what
you keep for long (``consume(copy=True)``), or declare more
``ring_segments``.
"""

from __future__ import annotations

import collections
import hashlib
from typing import Any, Deque, Iterator, Optional, Sequence, Union

import numpy as np

from . import _sluice
from ._ends import SourceEnd
from ._sluice import InvalidArgument

class _Pyarrow:
    """pyarrow, imported at its first use: importing it takes about 0.4 s
    of CPU, which a program that moves no Arrow batches (every rank of a
    job of numpy flows) does not pay. pyarrow is an optional dependency of
    the package: without it, a batch flow's error names it."""

    _module: Any = None

    def __getattr__(self, name: str) -> Any:
        if _Pyarrow._module is None:
            import pyarrow
            _Pyarrow._module = pyarrow
        return getattr(_Pyarrow._module, name)


pa: Any = _Pyarrow()


def _require_pyarrow() -> None:
    try:
        pa.Schema
    except ImportError:
        raise InvalidArgument("batch flows need pyarrow (pip install pyarrow, or "
                              "pip install sluice[dataframe])") from None


def _type_tag(schema: "pa.Schema") -> str:
    digest = hashlib.sha256(schema.remove_metadata().serialize().to_pybytes()).hexdigest()
    return "arrow:" + digest[:32]


def copy_batch(batch: "pa.RecordBatch") -> "pa.RecordBatch":
    """A copy of ``batch`` in memory of its own (Arrow IPC into a new buffer):
    what to keep of a received batch beyond the next few consumes."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return pa.ipc.open_stream(sink.getvalue()).read_next_batch()


def _fixed_key(t: "pa.DataType") -> bool:
    return (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_temporal(t) or
            pa.types.is_decimal(t) or pa.types.is_fixed_size_binary(t))


def _variable_key(t: "pa.DataType") -> bool:
    return (pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t) or
            pa.types.is_large_binary(t))


def key_type_ok(t: "pa.DataType") -> bool:
    """Whether a column of type ``t`` can be a key (``key_targets`` hashes
    it): fixed-width values, booleans, strings and binaries, or a
    dictionary of those."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    return pa.types.is_boolean(t) or _fixed_key(t) or _variable_key(t)


def _key_column(batch: "pa.RecordBatch", name: str) -> tuple:
    """Column ``name`` as ``_sluice.route_columns`` reads it: its values'
    bytes where Arrow holds them (no copy but for booleans and dictionary
    columns, whose values are taken), offsets for strings and binaries, and
    the validity bitmap where it holds nulls."""
    if name not in batch.schema.names:
        raise InvalidArgument(f"key {name!r} is not a column of the batch "
                              f"({', '.join(batch.schema.names)})")
    col = batch.column(name)
    if pa.types.is_dictionary(col.type):
        col = col.dictionary_decode()
    t = col.type
    n = len(col)
    bufs = col.buffers()

    def u8(buf: Any) -> np.ndarray:
        return np.frombuffer(buf, dtype=np.uint8) if buf is not None else np.empty(0, np.uint8)

    validity = u8(bufs[0]) if col.null_count and bufs[0] is not None else None
    if pa.types.is_boolean(t):  # one byte a row, 0 or 1 (its bitmap is bits)
        values = np.ascontiguousarray(col.fill_null(False).to_numpy(zero_copy_only=False),
                                      dtype=np.uint8)
        return (values, 1, None, 0, validity, col.offset)
    if _fixed_key(t):
        width = t.bit_width // 8
        values = u8(bufs[1])[col.offset * width:(col.offset + n) * width]
        return (values, width, None, 0, validity, col.offset)
    if _variable_key(t):
        wide = 8 if pa.types.is_large_string(t) or pa.types.is_large_binary(t) else 4
        offsets = u8(bufs[1])[col.offset * wide:(col.offset + n + 1) * wide]
        return (u8(bufs[2]), 0, offsets, wide, validity, col.offset)
    raise InvalidArgument(f"key column {name!r} is {t}: route by integers, floats, booleans, "
                          "decimals, dates, times, timestamps, fixed-size binaries, strings or "
                          "binaries (dictionary-encoded or not), or give a target per row")


def key_targets(batch: "pa.RecordBatch", by: Sequence[str], targets: int) -> np.ndarray:
    """Each row's target index among ``targets`` by the hash of its key
    columns' bytes, concatenated in the order given: a fixed-width value's
    bytes, a string's or binary's own bytes (no length), nothing for a null
    (so rows whose keys are null go to one target). Hashed as
    ``sluice::hash_bytes`` then ``reduce_hash``: fixed-width keys without
    nulls route as a numpy flow keyed by a field of the same bytes, and a
    string key as a C++ flow routing ``hash_bytes`` of the string."""
    columns = [_key_column(batch, name) for name in by]
    if not columns:
        raise InvalidArgument("key_targets: name at least one key column")
    if batch.num_rows == 0:
        return np.empty(0, np.uint32)
    return _sluice.route_columns(columns, batch.num_rows, targets)


class BatchFlow:
    """A declared flow of Arrow record batches (``Cluster.batches``). Its
    ends on this rank: ``source(slot)`` and ``target(slot)``, each opened
    once. ``destroy()`` (or the end of a ``with`` block) gives the flow up on
    this rank; batches received from it stay readable."""

    def __init__(self, cluster: Any, name: str, schema: "pa.Schema", replicate: bool,
                 sources: Optional[Sequence], targets: Optional[Sequence], segment_bytes: int,
                 ring_segments: int, view: Optional[Any]):
        _require_pyarrow()
        if not isinstance(schema, pa.Schema):
            raise InvalidArgument(f"flow {name!r}: schema must be a pyarrow.Schema, "
                                  f"not {type(schema).__name__}")
        all_ranks = cluster.all_ranks()
        self.name = name
        self.schema = schema
        self.replicate = replicate
        self.cluster = cluster
        self.view = view
        srcs = [tuple(e) for e in (sources if sources is not None else all_ranks)]
        dsts = [tuple(e) for e in (targets if targets is not None else all_ranks)]
        self._f = cluster._c.batch_flow(name, replicate, schema, _type_tag(schema), srcs, dsts,
                                        segment_bytes, ring_segments,
                                        None if view is None else view._tuple())
        #: The flow's targets (in a view, the members'): what ``to`` counts.
        self.targets = [tuple(e) for e in self._f.targets]
        #: The largest encoded batch one record holds; larger ones are sliced.
        self.max_record_bytes = self._f.max_record_bytes

    def source(self, slot: int = 0) -> "BatchSource":
        """This rank's source of endpoint (rank, slot)."""
        self._f.open_source(slot)
        return BatchSource(self)

    def target(self, slot: int = 0) -> "BatchTarget":
        """This rank's target of endpoint (rank, slot)."""
        self._f.open_target(slot)
        return BatchTarget(self)

    def destroy(self) -> None:
        """Gives the flow up on this rank (its ends with it). Never waits."""
        self._f.destroy()

    def __enter__(self) -> "BatchFlow":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.destroy()


class BatchSource(SourceEnd):
    """The sending end of a batch flow on this rank (``BatchFlow.source()``)."""

    def __init__(self, flow: BatchFlow):
        self.flow = flow

    def push(self, data: Union["pa.RecordBatch", "pa.Table"],
             to: Union[None, int, str, np.ndarray, Sequence[Any]] = None,
             timeout: Optional[float] = None, _send: Any = None) -> None:
        """Pushes a record batch (or each batch of a table) of the flow's
        schema. A shuffle flow needs ``to``: a target index for the whole
        batch, one per row, or the name (names) of key columns whose hash
        routes each row (``key_targets``); rows split by target are a copy
        made before sending. A replicate flow sends it to every target. A batch whose encoding
        is larger than one record is sent as slices. Waits while a target's
        ring is full (``Timeout`` at ``timeout``)."""
        if isinstance(data, pa.Table):
            if not (to is None or isinstance(to, (int, np.integer, str)) or
                    (isinstance(to, (list, tuple)) and all(isinstance(c, str) for c in to))):
                raise InvalidArgument("push(): a table takes one target index or key columns, "
                                      "not a target per row")
            for batch in data.to_batches():
                self.push(batch, to, timeout, _send)
            return
        if not isinstance(data, pa.RecordBatch):
            raise InvalidArgument(f"flow {self.flow.name!r}: push() takes a pyarrow.RecordBatch "
                                  f"or Table, not {type(data).__name__}")
        if not data.schema.equals(self.flow.schema, check_metadata=False):
            raise InvalidArgument(f"flow {self.flow.name!r} carries batches of schema "
                                  f"{self.flow.schema.to_string(show_schema_metadata=False)!r}, "
                                  f"not {data.schema.to_string(show_schema_metadata=False)!r}")
        if to is None or isinstance(to, (int, np.integer)):
            self._push_sliced(data, None if to is None else int(to), timeout, _send)
            return
        if isinstance(to, str) or (isinstance(to, (list, tuple)) and to and
                                   all(isinstance(c, str) for c in to)):
            to = key_targets(data, [to] if isinstance(to, str) else list(to),
                             len(self.flow.targets))
        rows = np.ascontiguousarray(to, dtype=np.int64)
        if rows.shape != (data.num_rows,):
            raise InvalidArgument(f"push(): {rows.size} target indexes for {data.num_rows} rows "
                                  "(one per row)")
        n = len(self.flow.targets)
        if rows.size and (rows.min() < 0 or rows.max() >= n):
            raise InvalidArgument(f"push(): a target index outside 0..{n - 1}")
        order = np.argsort(rows, kind="stable")
        starts = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n))])
        ordered = data.take(pa.array(order))
        for t in range(n):
            if starts[t + 1] > starts[t]:
                part = ordered.slice(int(starts[t]), int(starts[t + 1] - starts[t]))
                self._push_sliced(part, t, timeout, _send)

    def _push_sliced(self, batch: "pa.RecordBatch", to: Optional[int],
                     timeout: Optional[float], send: Any) -> None:
        f = self.flow._f
        if batch.num_rows > 1 and f.measure(batch) > self.flow.max_record_bytes:
            half = batch.num_rows // 2
            self._push_sliced(batch.slice(0, half), to, timeout, send)
            self._push_sliced(batch.slice(half), to, timeout, send)
            return
        if send is None:
            f.push(batch, to, timeout)
        else:
            send(f, batch, to, timeout)


class BatchTarget:
    """The receiving end of a batch flow on this rank (``BatchFlow.target()``).

    ``consume()`` returns the next record batch, its buffers in the ring (no
    copy), or None once every source closed and everything was consumed;
    iterating yields the batches. Batches from one source arrive in the
    order it pushed them."""

    def __init__(self, flow: BatchFlow):
        self.flow = flow
        self._pending: Deque["pa.RecordBatch"] = collections.deque()

    def consume(self, timeout: Optional[float] = None,
                copy: bool = False) -> Optional["pa.RecordBatch"]:
        """The next batch (None at the end of the flow): over the ring, or
        with ``copy`` in memory of its own."""
        while not self._pending:
            shells = self.flow._f.consume(timeout)
            if shells is None:
                return None
            self._pending.extend(
                pa.RecordBatch._import_from_c(a, self.flow.schema) for a in shells)
        batch = self._pending.popleft()
        return copy_batch(batch) if copy else batch

    def __iter__(self) -> Iterator["pa.RecordBatch"]:
        while True:
            batch = self.consume()
            if batch is None:
                return
            yield batch

    def read_all(self) -> "pa.Table":
        """Every remaining batch as one table (copies: nothing stays held)."""
        batches = []
        while (batch := self.consume(copy=True)) is not None:
            batches.append(batch)
        return pa.Table.from_batches(batches, schema=self.flow.schema)
