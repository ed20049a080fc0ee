"""sluice for Python: the job, its collectives, and flows of numpy records.

A program started by a launcher (``sluice run -n 4 -- python prog.py``, or
Slurm, Open MPI or torchrun variables with a registry) joins its job with
``Cluster.from_env()``, then declares flows whose records are a numpy
structured dtype and pushes and consumes them as numpy arrays::

    import numpy as np
    import sluice

    order = np.dtype([("key", "<u8"), ("amount", "<u8")])
    with sluice.Cluster.from_env() as cluster:
        mine = np.zeros(1000, order)
        mine["key"] = np.arange(1000) * cluster.world_size + cluster.rank
        with cluster.shuffle("orders", order, key="key") as flow:
            got = flow.exchange(mine)   # every record of every rank, routed by key
        total = cluster.allreduce(int(got["amount"].sum()))

Every call that can wait releases the GIL. Failures raise ``sluice.Error``
or a subclass: ``PeerLost`` (``.rank`` names the lost rank), ``SpecMismatch``,
``Timeout``, ``InvalidArgument``, ``BootstrapError``, ``Closed``,
``ViewChanged``.

A job that must survive a lost rank works in membership views
(``cluster.view``): flows declared with ``view=`` re-form among the view's
members, collectives with ``view=`` raise ``ViewChanged`` on every member
alike when the membership changes, and ``KeyGroups`` says who owns a lost
rank's keys. Run such a job with ``sluice run --keep-going`` (the survivors
go on), ``--restarts K`` or ``--spares K`` (the rank comes back).
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import pickle
from typing import Any, Callable, Iterator, Optional, Sequence, Tuple

import numpy as np

from . import _sluice
from ._ends import SourceEnd
from ._sluice import (
    BootstrapError,
    copied_bytes,
    Closed,
    Error,
    InvalidArgument,
    PeerLost,
    SpecMismatch,
    Timeout,
    ViewChanged,
)
from .batches import BatchFlow, BatchSource, BatchTarget
from .combiner import CombinerFlow, CombinerSource, CombinerTarget
from .regions import Region, RemoteRegion
from .replay import ReplayFlow
from .worker import Worker

__all__ = [
    "Cluster",
    "View",
    "Gathered",
    "KeyGroups",
    "Flow",
    "Source",
    "Target",
    "BatchFlow",
    "BatchSource",
    "BatchTarget",
    "CombinerFlow",
    "CombinerSource",
    "CombinerTarget",
    "Region",
    "RemoteRegion",
    "ReplayFlow",
    "Worker",
    "Error",
    "PeerLost",
    "SpecMismatch",
    "Timeout",
    "InvalidArgument",
    "BootstrapError",
    "Closed",
    "ViewChanged",
]

Endpoint = Tuple[int, int]  # (rank, slot)


@dataclasses.dataclass(frozen=True)
class View:
    """A membership view: its ``epoch`` (0 for the job as launched, one more
    at every loss, departure or rejoin), its ``members`` (increasing ranks)
    and every rank's ``incarnations`` (how often it came back after dying)."""

    epoch: int
    members: Tuple[int, ...]
    incarnations: Tuple[int, ...]

    def __contains__(self, rank: int) -> bool:
        return rank in self.members

    def _tuple(self) -> tuple:
        return (self.epoch, list(self.members), list(self.incarnations))


def _view(t: tuple) -> View:
    return View(t[0], tuple(t[1]), tuple(t[2]))


@dataclasses.dataclass(frozen=True)
class Gathered:
    """One value from every member of one view (``epoch``): ``values[i]``
    is what ``ranks[i]`` contributed; the same on every member."""

    epoch: int
    ranks: Tuple[int, ...]
    values: Tuple[Any, ...]

    def by_rank(self) -> dict:
        return dict(zip(self.ranks, self.values))


def _gathered(t: tuple) -> Gathered:
    return Gathered(t[0], tuple(t[1]), tuple(pickle.loads(v) for v in t[2]))


class KeyGroups:
    """``groups`` key groups, each with a home among ``owners`` (group g:
    ``owners[g % len(owners)]``). ``assign(view)`` gives every group an owner
    that is a member of the view: its home while the home is a member, else
    another member, chosen so that only a lost owner's groups move, spread
    about evenly, and go home once it is back. Every rank computes the same
    map from the same view (the C++ ``sluice::KeyGroups``)."""

    def __init__(self, groups: int, owners: Sequence[int]):
        self._k = _sluice.KeyGroups(groups, list(owners))

    @property
    def size(self) -> int:
        return self._k.size

    def home(self, group: int) -> int:
        return self._k.home(group)

    def assign(self, view: View) -> np.ndarray:
        """Each group's owner in ``view``: an array of ``size`` ranks."""
        return np.asarray(self._k.assign(view._tuple()), dtype=np.uint32)


class Cluster:
    """This process's membership of its job (``Cluster.from_env()``).

    Collectives (``barrier``, ``allgather``, ``bcast``, ``allreduce``) go
    through the job's registry, as mpi4py's lowercase ones go through MPI:
    every rank calls them in the same order. They carry pickled Python
    objects, at most 1 MiB for all ranks together; move bulk data in flows.
    Leave the job with ``leave()`` or by ending a ``with`` block.
    """

    def __init__(self, impl: _sluice.Cluster):
        self._c = impl
        self._alltoallv_calls = 0  # names each call's flow in a view, the same on every rank

    @classmethod
    def from_env(cls) -> "Cluster":
        """Joins the job the launcher's variables name (SLUICE_RANK, ...)."""
        return cls(_sluice.Cluster.join())

    @property
    def rank(self) -> int:
        """This process's rank, 0 .. world_size - 1."""
        return self._c.rank

    @property
    def world_size(self) -> int:
        """How many ranks the job has."""
        return self._c.world_size

    @property
    def epoch(self) -> int:
        """The job's membership view number (it changes when a rank is lost or rejoins)."""
        return self._c.epoch

    def live_ranks(self) -> list:
        """The ranks not known to be lost or gone."""
        return self._c.live_ranks()

    @property
    def view(self) -> View:
        """The current membership view (no registry round trip)."""
        return _view(self._c.view())

    def incarnation(self, rank: Optional[int] = None) -> int:
        """How many times ``rank`` (default: this one) came back after it
        died: 0 for the process the job started with. A restarted process
        (``sluice run --restarts``) or a spare sees 1 or more for itself."""
        return self._c.incarnation(self.rank if rank is None else rank)

    def await_view(self, after: Optional[int] = None, timeout: Optional[float] = None) -> View:
        """Waits for a view later than epoch ``after`` (default: the current
        one) and returns it; ``Timeout`` if none comes in time."""
        return _view(self._c.await_view(self.epoch if after is None else after, timeout))

    def barrier(self, timeout: Optional[float] = None, view: Optional[View] = None) -> None:
        """Returns once every rank called it. With ``view``: once every
        member of the view did; ``ViewChanged`` on every member alike if the
        membership changes first."""
        if view is None:
            self._c.barrier("sluice.py.barrier", timeout)
        else:
            self._c.allgather_in(view._tuple(), "sluice.py.barrier.view", b"", timeout)

    def allgather(self, obj: Any, timeout: Optional[float] = None, view: Optional[View] = None):
        """Every rank's ``obj``, indexed by rank, on every rank. With ``view``:
        a ``Gathered`` of every member's ``obj``, the same on every member,
        or ``ViewChanged`` on every member alike if the membership changes
        before all called (nothing was gathered; go on in ``cluster.view``)."""
        if view is not None:
            return _gathered(self._c.allgather_in(view._tuple(), "sluice.py.allgather.view",
                                                  pickle.dumps(obj), timeout))
        values = self._c.allgather("sluice.py.allgather", pickle.dumps(obj), timeout)
        return [pickle.loads(v) for v in values]

    def agree(self, obj: Any, timeout: Optional[float] = None) -> Gathered:
        """The survivors agree (MPI ULFM's agree): every live rank contributes
        ``obj``; every rank not lost meanwhile gets the same ``Gathered``, from
        the first view in which all its members contributed."""
        return _gathered(self._c.agree("sluice.py.agree", pickle.dumps(obj), timeout))

    def bcast(self, obj: Any = None, root: int = 0, timeout: Optional[float] = None) -> Any:
        """Rank ``root``'s ``obj`` on every rank."""
        mine = pickle.dumps(obj) if self.rank == root else b""
        values = self._c.allgather("sluice.py.bcast", mine, timeout)
        return pickle.loads(values[root])

    def allreduce(
        self,
        obj: Any,
        op: Callable[[Any, Any], Any] = operator.add,
        timeout: Optional[float] = None,
    ) -> Any:
        """``op`` folded over every rank's ``obj`` in rank order (numbers, numpy arrays, ...)."""
        return functools.reduce(op, self.allgather(obj, timeout))

    def alltoallv(self, buffers: Sequence[Any], timeout: Optional[float] = None,
                  view: Optional[View] = None, segment_bytes: int = 1 << 16) -> list:
        """Sends ``buffers[i]`` (any bytes-like object or contiguous numpy
        array, of any size) to rank i and returns what each rank sent this
        one, as uint8 numpy arrays indexed by rank (MPI's Alltoallv). With
        ``view``: among the view's members, ``buffers`` and the result
        indexed by their position in ``view.members``; ``ViewChanged`` as for
        ``shuffle``. The bytes travel through a flow (not the registry), so
        any size goes; each received buffer is one copy out of the rings.
        Among the job's ranks every call goes over one flow, declared at the
        first call and ended when the job is left (a call that fails ends
        it); in a view, each call declares its own. Every rank makes the
        same calls in the same order."""
        sends = [np.frombuffer(memoryview(b).cast("B"), np.uint8) if not isinstance(b, np.ndarray)
                 else np.ascontiguousarray(b).reshape(-1).view(np.uint8) for b in buffers]
        self._alltoallv_calls += 1
        name = f"sluice.py.alltoallv.{self._alltoallv_calls}"
        return _sluice.alltoallv(self._c, name, sends, None if view is None else view._tuple(),
                                 segment_bytes, timeout)

    def all_ranks(self, slots: int = 1) -> list:
        """Endpoints (rank, slot) for every rank and slot 0 .. slots - 1."""
        return [(r, s) for r in range(self.world_size) for s in range(slots)]

    def shuffle(
        self,
        name: str,
        dtype: Any,
        key: Optional[str] = None,
        sources: Optional[Sequence[Endpoint]] = None,
        targets: Optional[Sequence[Endpoint]] = None,
        segment_bytes: int = 0,
        ring_segments: int = 0,
        view: Optional[View] = None,
    ) -> "Flow":
        """Declares a shuffle flow of ``dtype`` records: each goes to one target,
        chosen by a hash of field ``key`` (else of the whole record), the hash a
        C++ flow declared with ``.key()`` uses, or named per record by ``push``.
        Every rank among ``sources`` and ``targets`` (default: every rank, slot
        0) must declare it with the same arguments. With ``view``, the flow is
        among the view's members only (``Flow.targets`` says which), re-formed
        in each view it is declared in; ``ViewChanged`` if the view is not the
        current one or changes before every member declared."""
        return Flow(self, name, np.dtype(dtype), False, key, sources, targets, segment_bytes,
                    ring_segments, view)

    def replicate(
        self,
        name: str,
        dtype: Any,
        sources: Optional[Sequence[Endpoint]] = None,
        targets: Optional[Sequence[Endpoint]] = None,
        segment_bytes: int = 0,
        ring_segments: int = 0,
        view: Optional[View] = None,
    ) -> "Flow":
        """Declares a replicate flow: every record goes to every target
        (``view``: as for ``shuffle``)."""
        return Flow(self, name, np.dtype(dtype), True, None, sources, targets, segment_bytes,
                    ring_segments, view)

    def replay_flow(
        self,
        name: str,
        dtype: Any,
        sources: Optional[Sequence[int]] = None,
        targets: Optional[Sequence[int]] = None,
        capacity: int = 1 << 20,
        replay: bool = True,
        segment_bytes: int = 0,
        ring_segments: int = 0,
    ) -> ReplayFlow:
        """A shuffle flow of ``dtype`` records (1 to 128 bytes) between the
        ranks ``sources`` and ``targets`` (default: every rank) that outlives
        a member's death with nothing lost and nothing twice (see
        ``sluice.replay``): every push names its target rank, each source
        keeps up to ``capacity`` records per target until acknowledged.
        ``replay=False`` sends nothing again after a view change (for tests
        that show what the buffer is for). Declared by ``open(view)``."""
        return ReplayFlow(self, name, np.dtype(dtype), sources, targets, capacity, replay,
                          segment_bytes, ring_segments)

    def batches(
        self,
        name: str,
        schema: Any,
        replicate: bool = False,
        sources: Optional[Sequence[Endpoint]] = None,
        targets: Optional[Sequence[Endpoint]] = None,
        segment_bytes: int = 0,
        ring_segments: int = 0,
        view: Optional[View] = None,
    ) -> BatchFlow:
        """Declares a flow of Arrow record batches of ``schema`` (a
        ``pyarrow.Schema``; see ``sluice.batches``): a shuffle flow (each
        batch to the target its push names) or with ``replicate`` every
        batch to every target. A batch travels as one record of a segment
        (``segment_bytes``, default 256 KiB; larger batches are sliced), and
        is received without a copy. Every rank among ``sources`` and
        ``targets`` (default: every rank, slot 0) declares it with an equal
        schema (else ``SpecMismatch``); ``view`` as for ``shuffle``."""
        return BatchFlow(self, name, schema, replicate, sources, targets, segment_bytes,
                         ring_segments, view)

    def combiner(
        self,
        name: str,
        dtype: Any,
        key: str,
        sum: Sequence[str] = (),  # noqa: A002 (the aggregate's name)
        min: Sequence[str] = (),  # noqa: A002
        max: Sequence[str] = (),  # noqa: A002
        avg: Sequence[str] = (),
        sources: Optional[Sequence[Endpoint]] = None,
        targets: Optional[Sequence[Endpoint]] = None,
        local_groups: int = 0,
        segment_bytes: int = 0,
        ring_segments: int = 0,
        view: Optional[View] = None,
    ) -> CombinerFlow:
        """Declares a combiner flow of ``dtype`` records grouped by the integer
        field ``key``: SUM, MIN, MAX and AVG of the fields named, and the
        COUNT, each group on the one target its key's hash names (see
        ``sluice.combiner``). ``local_groups``: groups a source holds before
        it pushes its partials (0: 16384). Every rank among ``sources`` and
        ``targets`` (default: every rank, slot 0) declares it alike."""
        return CombinerFlow(self, name, np.dtype(dtype), key,
                            {"sum": sum, "min": min, "max": max, "avg": avg}, sources, targets,
                            local_groups, segment_bytes, ring_segments, view)

    def expose(self, name: str, size: int) -> Region:
        """Exposes ``size`` bytes of this process's memory as region ``name``
        (zeroed): any rank opens it with ``open_region(name, owner=this rank)``.
        ``InvalidArgument`` on a bad name or one this rank exposes already."""
        return Region(self._c.expose(name, size))

    def open_region(self, name: str, owner: int, timeout: Optional[float] = None) -> RemoteRegion:
        """Opens region ``name`` of rank ``owner``, waiting until the owner
        exposed it (``Timeout`` at the timeout)."""
        return RemoteRegion(self._c.open_region(name, owner, timeout))

    def leave(self, timeout: Optional[float] = None) -> None:
        """Leaves the job cleanly (peers see "left", not "died"). Idempotent."""
        self._c.leave(timeout)

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.leave()


def _type_tag(dtype: np.dtype, key: Optional[str]) -> str:
    tag = "numpy:" + str(dtype.descr) + ":itemsize=" + str(dtype.itemsize)
    if key is not None:
        tag += ":key=" + key
    return tag


class Flow:
    """A declared flow of numpy records (``Cluster.shuffle`` / ``Cluster.replicate``).

    Its ends on this rank: ``source(slot)`` and ``target(slot)``, each opened
    once, or ``exchange(records)``, which pushes this rank's records and
    returns what it received, as one call. ``destroy()`` (or the end of a
    ``with`` block) gives the flow up on this rank.
    """

    def __init__(self, cluster: Cluster, name: str, dtype: np.dtype, replicate: bool,
                 key: Optional[str], sources: Optional[Sequence[Endpoint]],
                 targets: Optional[Sequence[Endpoint]], segment_bytes: int, ring_segments: int,
                 view: Optional[View] = None):
        if dtype.hasobject:
            raise InvalidArgument(f"flow {name!r}: dtype {dtype} holds Python objects, "
                                  "which cannot travel as bytes")
        key_offset, key_size = None, 0
        if key is not None:
            if dtype.names is None or key not in dtype.names:
                raise InvalidArgument(f"flow {name!r}: key {key!r} is not a field of {dtype}")
            field, offset = dtype.fields[key][:2]
            key_offset, key_size = offset, field.itemsize
        self.name = name
        self.dtype = dtype
        self.replicate = replicate
        self.cluster = cluster
        all_ranks = cluster.all_ranks()
        self.view = view
        self.sources = [tuple(e) for e in (sources if sources is not None else all_ranks)]
        targets = [tuple(e) for e in (targets if targets is not None else all_ranks)]
        self._f = _sluice.Flow(cluster._c, name, replicate, dtype.itemsize,
                               _type_tag(dtype, key), self.sources, targets, key_offset,
                               key_size, segment_bytes, ring_segments,
                               None if view is None else view._tuple())
        # The flow's targets (in a view: the members'), which push()'s
        # target indexes and target_of() count.
        self.targets = [tuple(e) for e in self._f.targets]
        if view is not None:
            self.sources = [e for e in self.sources if e[0] in view]

    def _bytes(self, records: np.ndarray) -> np.ndarray:
        records = np.asarray(records)
        if records.dtype != self.dtype:
            raise InvalidArgument(f"flow {self.name!r} carries {self.dtype}, not {records.dtype}")
        if records.ndim != 1:
            raise InvalidArgument(f"flow {self.name!r}: records must be a 1-D array, "
                                  f"not {records.ndim}-D")
        if not records.flags.c_contiguous:
            raise InvalidArgument(f"flow {self.name!r}: records must be contiguous "
                                  "(numpy.ascontiguousarray makes a copy that is)")
        return records.view(np.uint8)

    def _records(self, raw: np.ndarray) -> np.ndarray:
        return raw.view(self.dtype)

    def target_of(self, records: np.ndarray) -> np.ndarray:
        """The target index (into ``targets``) each record goes to: a uint32 array."""
        return self._f.route(self._bytes(records))

    def source(self, slot: int = 0) -> "Source":
        """This rank's source of endpoint (rank, slot)."""
        self._f.open_source(slot)
        return Source(self)

    def target(self, slot: int = 0) -> "Target":
        """This rank's target of endpoint (rank, slot)."""
        self._f.open_target(slot)
        return Target(self)

    def exchange(self, records: np.ndarray, targets: Optional[np.ndarray] = None,
                 slot: int = 0, timeout: Optional[float] = None) -> np.ndarray:
        """Pushes ``records`` (to ``targets[i]`` each, else routed) from this
        rank's source and returns every record its target received, once every
        source closed: an all-to-all. This rank must be both a source and a
        target (endpoint slot ``slot``)."""
        to = None if targets is None else np.ascontiguousarray(targets, dtype=np.uint32)
        return self._records(self._f.exchange(self._bytes(records), to, slot, timeout))

    def destroy(self) -> None:
        """Gives the flow up on this rank (its ends with it). Never waits."""
        self._f.destroy()

    def __enter__(self) -> "Flow":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.destroy()


class Source(SourceEnd):
    """The sending end of a flow on this rank (``Flow.source()``)."""

    def __init__(self, flow: Flow):
        self.flow = flow

    def push(self, records: np.ndarray, targets: Optional[np.ndarray] = None,
             timeout: Optional[float] = None) -> None:
        """Pushes a 1-D contiguous array of the flow's dtype, routed by the
        flow's key, or to ``targets[i]`` (an index into the flow's targets)
        each; waits while a target's ring is full."""
        to = None if targets is None else np.ascontiguousarray(targets, dtype=np.uint32)
        self.flow._f.push(self.flow._bytes(records), to, timeout)


class Target:
    """The receiving end of a flow on this rank (``Flow.target()``).

    ``consume()`` returns the next batch (one segment of one source) as a
    read-only numpy array of the flow's dtype over the ring itself (no copy),
    or None once every source closed and everything was consumed; iterating
    yields the batches. A batch stays valid as long as it (or any view of it)
    is alive, whatever is consumed meanwhile: it holds its segment of its
    source's ring, which goes back to the source once the batch is
    collected. So a program that keeps batches holds ring space: keeping a
    whole ring's worth from one source (``ring_segments``, 16 by default)
    stops that source, and ``consume()`` then raises InvalidArgument saying
    so. Copy what you keep (``batch.copy()``), or ``consume(copy=True)``.
    """

    def __init__(self, flow: Flow):
        self.flow = flow

    def consume(self, timeout: Optional[float] = None, copy: bool = False) -> Optional[np.ndarray]:
        """The next batch (None at the end of the flow): a view of the ring,
        or with ``copy`` an array of its own."""
        raw = self.flow._f.consume(timeout) if copy else self.flow._f.consume_view(timeout)
        return None if raw is None else self.flow._records(raw)

    def __iter__(self) -> Iterator[np.ndarray]:
        while True:
            batch = self.consume()
            if batch is None:
                return
            yield batch

    def collect(self) -> np.ndarray:
        """Every remaining batch, concatenated (copies: nothing stays held)."""
        parts = []
        while (batch := self.consume(copy=True)) is not None:
            parts.append(batch)
        return np.concatenate(parts) if parts else np.empty(0, self.flow.dtype)
