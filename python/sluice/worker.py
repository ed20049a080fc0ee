"""One thread that consumes several flows: ``Worker`` calls a handler for
each batch of each target added to it (numpy batches and Arrow record
batches, as ``consume()`` returns them: views of the ring, pinned), in the
order they arrive, until every input ended; its ``push`` and ``close``
deliver those inputs while a ring is full, so a handler may push into a
flow the same worker consumes without a deadlock (the C++ API's
``sluice::Worker``)::

    w = sluice.Worker()
    out = flow_b.source()
    w.add(flow_a.target(), lambda batch: w.push(out, transform(batch)),
          on_end=lambda: w.close(out))
    w.add(flow_b.target(), lambda batch: total.append(len(batch)))
    w.run()                                  # until both targets ended

Every wait is made without the GIL. A handler's exception ends ``run()``
with it; a failed input raises its error (``PeerLost`` naming the rank).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from . import _sluice
from ._sluice import InvalidArgument


class Worker:
    """Drives the targets added to it from the thread that calls ``run()``."""

    def __init__(self) -> None:
        self._w = _sluice.Worker()

    def add(self, target: Any, handler: Callable[[Any], None],
            on_end: Optional[Callable[[], None]] = None) -> None:
        """Adds an open target (``Flow.target()`` or ``BatchFlow.target()``):
        ``handler(batch)`` for each batch (a numpy array of the flow's dtype,
        or a ``pyarrow.RecordBatch``), ``on_end()`` once every source of it
        closed and everything was delivered. Add a target before consuming
        from it any other way."""
        from . import Target  # (the package imports this module first)
        from .batches import BatchTarget

        if isinstance(target, Target):
            flow = target.flow
            self._w.add_records(flow._f, lambda raw: handler(flow._records(raw)), on_end)
        elif isinstance(target, BatchTarget):
            if target._pending:
                raise InvalidArgument("Worker.add(): batches of this target were consumed "
                                      "already; add a target before consuming from it")
            import pyarrow as pa

            flow = target.flow

            def batches(shells: list) -> None:
                got = [pa.RecordBatch._import_from_c(a, flow.schema) for a in shells]
                for batch in got:
                    handler(batch)

            self._w.add_batches(flow._f, batches, on_end)
        else:
            raise InvalidArgument(f"Worker.add(): a Target or BatchTarget, not "
                                  f"{type(target).__name__}")

    def push(self, source: Any, data: Any, to: Any = None,
             timeout: Optional[float] = None) -> None:
        """``source.push(data, ...)`` (a numpy ``Source``: ``to`` is the
        per-record targets; a ``BatchSource``: as its ``push``), delivering
        this worker's inputs while a ring is full."""
        from . import Source
        from .batches import BatchSource

        if isinstance(source, Source):
            import numpy as np

            targets = None if to is None else np.ascontiguousarray(to, dtype=np.uint32)
            self._w.push_records(source.flow._f, source.flow._bytes(data), targets, timeout)
        elif isinstance(source, BatchSource):
            source.push(data, to, timeout,
                        _send=lambda f, b, t, d: self._w.push_batch(f, b, t, d))
        else:
            raise InvalidArgument(f"Worker.push(): a Source or BatchSource, not "
                                  f"{type(source).__name__}")

    def close(self, source: Any, timeout: Optional[float] = None) -> None:
        """``source.close()``, delivering this worker's inputs until every
        target confirmed the end."""
        from . import Source
        from .batches import BatchSource

        if isinstance(source, Source):
            self._w.close_records(source.flow._f, timeout)
        elif isinstance(source, BatchSource):
            self._w.close_batches(source.flow._f, timeout)
        else:
            raise InvalidArgument(f"Worker.close(): a Source or BatchSource, not "
                                  f"{type(source).__name__}")

    def run(self, timeout: Optional[float] = None) -> None:
        """Delivers every input to its handler until each has ended (its
        ``on_end`` called). Raises the first failure, a handler's
        exception, or ``Timeout``."""
        self._w.run(timeout)
