"""Replay flows: a shuffle flow of numpy records that outlives a member's
death with nothing lost and nothing twice (the C++ API's
``sluice::ReplayFlow``, docs/guide.md). Every record a source rank pushes
to a target rank has a position per pair over every membership view; each
source keeps what its targets have not acknowledged (``capacity`` records
per target: a full buffer makes ``push`` wait), a target acknowledges what
it consumed with ``commit()`` once its state is saved, and ``open(view)``
declares the flow among the view's members and sends each target again
what it misses. A restarted rank ``restore()``s the positions its saved
state holds. The loop::

    flow = cluster.replay_flow("orders", dtype)
    if restarted:
        flow.restore(state["received"], state["resume_at"])
    view = cluster.view
    while True:
        try:
            flow.open(view)
            ...  # push(records, target_ranks), consume(), save state, commit()
            flow.close(); flow.finish()
            break
        except (sluice.ViewChanged, sluice.PeerLost):
            view = cluster.await_view(max(view.epoch, flow.epoch))

Records of 1 to 128 bytes travel; ``consume()`` returns a copy.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

import numpy as np

from ._sluice import InvalidArgument


class ReplayFlow:
    """A declared replay flow (``Cluster.replay_flow``)."""

    def __init__(self, cluster: Any, name: str, dtype: np.dtype, sources: Optional[Sequence[int]],
                 targets: Optional[Sequence[int]], capacity: int, replay: bool,
                 segment_bytes: int, ring_segments: int):
        if dtype.hasobject:
            raise InvalidArgument(f"replay flow {name!r}: dtype {dtype} holds Python objects")
        ranks = list(range(cluster.world_size))
        self.name = name
        self.dtype = dtype
        self.cluster = cluster
        tag = "numpy:" + str(dtype.descr) + ":itemsize=" + str(dtype.itemsize)
        self._r = cluster._c.replay_flow(name, dtype.itemsize, tag,
                                         list(sources if sources is not None else ranks),
                                         list(targets if targets is not None else ranks),
                                         capacity, replay, segment_bytes, ring_segments)

    def restore(self, received: Sequence[int], resume_at: Sequence[int]) -> None:
        """A restarted process's positions from the state it saved (one per
        rank of the job each): ``received[s]``, records of source rank s its
        state holds; ``resume_at[t]``, where its input makes target rank t's
        records from again (``acknowledged(t)`` when it saved is safe).
        Before the first ``open``."""
        self._r.restore([int(x) for x in received], [int(x) for x in resume_at])

    def open(self, view: Any, timeout: Optional[float] = None) -> None:
        """Declares the flow among the members of ``view`` and works out what
        each member target misses (sent first by the calls that follow).
        ``ViewChanged``: open the newer view; ``PeerLost``: a member was lost
        meanwhile; ``InvalidArgument``: a target holds fewer records than it
        acknowledged."""
        self._r.open(view._tuple(), timeout)

    def push(self, records: np.ndarray, target_ranks: Any,
             timeout: Optional[float] = None) -> int:
        """Pushes ``records[i]`` to rank ``target_ranks[i]``, in order, and
        keeps each until that target acknowledges it; returns how many went
        (fewer than all when a target's buffer stayed full until
        ``timeout``: push the rest again). ``ViewChanged`` / ``PeerLost``
        (open the next view) carry ``.pushed``, how many went before."""
        records = np.ascontiguousarray(records)
        if records.dtype != self.dtype or records.ndim != 1:
            raise InvalidArgument(f"replay flow {self.name!r} carries a 1-D array of "
                                  f"{self.dtype}, not {records.ndim}-D {records.dtype}")
        ranks = np.ascontiguousarray(np.broadcast_to(np.asarray(target_ranks, np.uint32),
                                                     records.shape))
        return self._r.push(records.view(np.uint8), ranks, timeout)

    def flush(self, timeout: Optional[float] = None) -> None:
        """Publishes what push() wrote and reads the acknowledgements that came."""
        self._r.flush(timeout)

    def close(self, timeout: Optional[float] = None) -> None:
        """This rank's records are all pushed: the flow's end, in this view
        and every later one."""
        self._r.close(timeout)

    def consume(self, timeout: Optional[float] = None) -> Optional[Tuple[int, np.ndarray]]:
        """The next batch, each record once over every view, as (source rank,
        records), or None once every source member closed. ``Timeout`` if
        none came by ``timeout``."""
        got = self._r.consume(timeout)
        if got is None:
            return None
        source, raw = got
        return source, raw.view(self.dtype)

    def commit(self) -> None:
        """Acknowledges every record consumed so far: call once the state
        they made is saved for good. Never waits."""
        self._r.commit()

    def finish(self, timeout: Optional[float] = None) -> None:
        """After close(), consume()'s end and a last commit(): waits until
        every target acknowledged every record of this rank and every
        member got this far."""
        self._r.finish(timeout)

    def received(self, source: int) -> int:
        """Records of source rank ``source`` consumed here, over every view."""
        return self._r.received(source)

    def sent(self, target: int) -> int:
        """Records pushed to target rank ``target``, over every view."""
        return self._r.sent(target)

    def acknowledged(self, target: int) -> int:
        """Records target rank ``target`` acknowledged, as far as this rank heard."""
        return self._r.acknowledged(target)

    def buffered(self, target: int) -> int:
        """Records kept for target rank ``target`` (sent, not acknowledged)."""
        return self._r.buffered(target)

    @property
    def epoch(self) -> int:
        """The epoch of the view ``open`` last opened the flow in."""
        return self._r.epoch

    def destroy(self) -> None:
        """Ends the flow on this rank. Never waits."""
        self._r.destroy()

    def __enter__(self) -> "ReplayFlow":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.destroy()
