"""One-sided memory regions: a rank exposes some of its memory under a name
(``Cluster.expose``), and any rank opens it (``Cluster.open_region``) to
read, write and update 64-bit words atomically without the owner's threads
taking part (the NAM style; the C++ API's ``sluice/memory.h``)::

    with cluster.expose("counters", 4096) as region:       # on rank 0
        words = region.array(np.uint64)   # the region's own memory, no copy
        cluster.barrier()                 # the others open it now
        ...
    with cluster.open_region("counters", owner=0) as r:    # on any rank
        before = r.fetch_add(0, 1)        # the word's value before
        r.write(64, b"hello")
        data = r.read(64, 5)

Over shared memory (every rank on one host) peers map the owner's memory;
otherwise every rank goes through libfabric (the provider's RMA and atomics
where it has them, else the owner's service thread): ``path`` says which.
Errors: ``InvalidArgument`` for an access out of bounds or a misaligned
atomic (nothing done), ``Closed`` once the owner revoked or closed the
region, ``PeerLost`` (``.rank``: the owner) if the owner is gone,
``Timeout`` at the timeout (the operation may have been applied: read the
word before retrying on a new handle).
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from . import _sluice


class Region:
    """The owner's side of an exposed region (``Cluster.expose``)."""

    def __init__(self, impl: _sluice.Region):
        self._r = impl

    @property
    def name(self) -> str:
        """The name it is exposed under."""
        return self._r.name

    @property
    def size(self) -> int:
        """The region's size in bytes."""
        return self._r.size

    @property
    def path(self) -> str:
        """``shm`` or ``ofi``: how every rank reaches it."""
        return self._r.path

    def array(self, dtype: Any = np.uint8) -> np.ndarray:
        """The region's memory as a writable numpy array of ``dtype`` (no
        copy; zeroed when exposed). The array keeps the memory mapped while it
        lives, after ``close()`` too. Words that peers update atomically are
        read here as they are; update them through ``open_region`` too."""
        raw = self._r.array()
        dtype = np.dtype(dtype)
        if raw.nbytes % dtype.itemsize != 0:
            raise ValueError(f"region {self.name!r} of {raw.nbytes} bytes is no whole number "
                             f"of {dtype} items ({dtype.itemsize} bytes)")
        return raw.view(dtype)

    def revoke(self) -> None:
        """Stops all further access by peers: their operations raise
        ``Closed`` from now on. Idempotent."""
        self._r.revoke()

    def close(self) -> None:
        """Revokes the region and gives up this handle; the name may then be
        exposed again. Arrays over it stay readable (the memory stays mapped
        until the last is collected). Idempotent."""
        self._r.close()

    def __enter__(self) -> "Region":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class RemoteRegion:
    """A peer's handle to a region (``Cluster.open_region``), for one thread
    at a time: a second thread calling into it gets ``InvalidArgument`` (open
    one per thread). Every operation waits until it completed at the owner,
    with the GIL released, so a handle's operations take effect in order."""

    def __init__(self, impl: _sluice.RemoteRegion):
        self._r = impl

    @property
    def size(self) -> int:
        """The region's size in bytes."""
        return self._r.size

    @property
    def owner(self) -> int:
        """The rank that exposed it."""
        return self._r.owner

    @property
    def path(self) -> str:
        """How operations travel: ``shm``, ``ofi`` (the provider's RMA and
        atomics), ``ofi (emulated atomics)`` or ``ofi (emulated)``."""
        return self._r.path

    def read(self, offset: int, size: int, timeout: Optional[float] = None) -> bytes:
        """``size`` bytes of the region from ``offset``."""
        return self._r.read(offset, size, timeout)

    def read_into(self, offset: int, out: Any, timeout: Optional[float] = None) -> None:
        """Fills ``out`` (a writable, contiguous buffer: a numpy array,
        bytearray, memoryview) with the region's bytes from ``offset``, without
        an intermediate copy."""
        self._r.read_into(offset, _bytes_of(out, writable=True), timeout)

    def write(self, offset: int, data: Any, timeout: Optional[float] = None) -> None:
        """Writes ``data`` (bytes or any contiguous buffer) at ``offset``."""
        self._r.write(offset, _bytes_of(data), timeout)

    def compare_and_swap(self, offset: int, expected: int, desired: int,
                         timeout: Optional[float] = None) -> int:
        """Atomically: if the 64-bit word at ``offset`` (a multiple of 8)
        equals ``expected``, it becomes ``desired``. Returns the word before
        (it swapped exactly when that equals ``expected``)."""
        return self._r.compare_and_swap(offset, expected, desired, timeout)

    def fetch_add(self, offset: int, delta: int, timeout: Optional[float] = None) -> int:
        """Atomically adds ``delta`` (wrapping) to the 64-bit word at
        ``offset`` (a multiple of 8); returns the word before."""
        return self._r.fetch_add(offset, delta, timeout)

    def close(self) -> None:
        """Gives up the handle. Idempotent."""
        self._r.close()

    def __enter__(self) -> "RemoteRegion":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _bytes_of(data: Any, writable: bool = False) -> np.ndarray:
    # Any contiguous buffer as a flat uint8 array over the same memory.
    view = memoryview(data)
    if not view.c_contiguous:
        raise ValueError("the buffer must be contiguous")
    if writable and view.readonly:
        raise ValueError("read_into needs a writable buffer")
    return np.frombuffer(view.cast("B"), np.uint8)  # writable where the buffer is
