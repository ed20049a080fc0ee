"""sluice's extension module; use the sluice package, which wraps it"""

from collections.abc import Sequence
from typing import Annotated

import numpy
from numpy.typing import NDArray


class Error(RuntimeError):
    """A sluice call failed; the message says what and why."""

class PeerLost(Error):
    """A peer this call depends on is gone; .rank names it."""

class SpecMismatch(Error):
    """Ranks declared the same flow differently."""

class Timeout(Error, TimeoutError):
    """A deadline passed first."""

class InvalidArgument(Error, ValueError):
    """A bad argument, spec or record; the message names it."""

class BootstrapError(Error):
    """The environment does not say how to join a job."""

class Closed(Error):
    """The handle was closed, left or destroyed."""

class ViewChanged(Error):
    """The job's membership changed during the call."""

def copied_bytes() -> int:
    """
    Bytes copied out of rings so far (consume(copy=True), exchange()); consume() copies none.
    """

def alltoallv(cluster: Cluster, name: str, sends: Sequence[Annotated[NDArray[numpy.uint8], dict(shape=(None,), order='C', device='cpu', writable=False)]], view: tuple[int, Sequence[int], Sequence[int]] | None, segment_bytes: int, timeout: float | None) -> list[Annotated[NDArray[numpy.uint8], dict(shape=(None,))]]:
    """One buffer to every rank taking part, one from each (MPI's Alltoallv)."""

def route_rows(records: Annotated[NDArray[numpy.uint8], dict(shape=(None,), order='C', device='cpu', writable=False)], itemsize: int, key_offset: int, key_size: int, targets: int) -> Annotated[NDArray[numpy.uint32], dict(shape=(None,))]:
    """Each record's target by the hash of its key bytes."""

class Cluster:
    @staticmethod
    def join() -> Cluster:
        """Joins the job the environment names."""

    @property
    def rank(self) -> int: ...

    @property
    def world_size(self) -> int: ...

    @property
    def epoch(self) -> int: ...

    def live_ranks(self) -> list[int]: ...

    def alive(self, rank: int) -> bool: ...

    def incarnation(self, rank: int) -> int: ...

    def view(self) -> tuple[int, list[int], list[int]]: ...

    def await_view(self, after_epoch: int, timeout: float | None = None) -> tuple[int, list[int], list[int]]: ...

    def allgather_in(self, view: tuple[int, Sequence[int], Sequence[int]], name: str, value: bytes, timeout: float | None = None) -> tuple[int, list[int], list[bytes]]: ...

    def agree(self, name: str, value: bytes, timeout: float | None = None) -> tuple[int, list[int], list[bytes]]: ...

    def barrier(self, name: str, timeout: float | None = None) -> None: ...

    def allgather(self, name: str, value: bytes, timeout: float | None = None) -> list[bytes]: ...

    def leave(self, timeout: float | None = None) -> None: ...

class KeyGroups:
    def __init__(self, groups: int, owners: Sequence[int]) -> None: ...

    @property
    def size(self) -> int: ...

    @property
    def owners(self) -> list[int]: ...

    def home(self, group: int) -> int: ...

    def assign(self, view: tuple[int, Sequence[int], Sequence[int]]) -> list[int]: ...

class Flow:
    def __init__(self, cluster: Cluster, name: str, replicate: bool, itemsize: int, type_tag: str, sources: Sequence[tuple[int, int]], targets: Sequence[tuple[int, int]], key_offset: int | None, key_size: int, segment_bytes: int, ring_segments: int, view: tuple[int, Sequence[int], Sequence[int]] | None) -> None: ...

    @property
    def num_targets(self) -> int: ...

    @property
    def targets(self) -> list[tuple[int, int]]: ...

    def route(self, records: Annotated[NDArray[numpy.uint8], dict(shape=(None,), order='C', device='cpu', writable=False)]) -> Annotated[NDArray[numpy.uint32], dict(shape=(None,))]: ...

    def open_source(self, slot: int) -> None: ...

    def open_target(self, slot: int) -> None: ...

    def push(self, records: Annotated[NDArray[numpy.uint8], dict(shape=(None,), order='C', device='cpu', writable=False)], targets: Annotated[NDArray[numpy.uint32], dict(shape=(None,), order='C', device='cpu', writable=False)] | None, timeout: float | None) -> None: ...

    def flush(self, timeout: float | None) -> None: ...

    def close(self, timeout: float | None) -> None: ...

    def abort(self) -> None: ...

    def consume(self, timeout: float | None) -> Annotated[NDArray[numpy.uint8], dict(shape=(None,))] | None: ...

    def consume_view(self, timeout: float | None) -> Annotated[NDArray[numpy.uint8], dict(shape=(None,), writable=False)] | None: ...

    def exchange(self, records: Annotated[NDArray[numpy.uint8], dict(shape=(None,), order='C', device='cpu', writable=False)], targets: Annotated[NDArray[numpy.uint32], dict(shape=(None,), order='C', device='cpu', writable=False)] | None, slot: int, timeout: float | None) -> Annotated[NDArray[numpy.uint8], dict(shape=(None,))]: ...

    def destroy(self) -> None: ...
