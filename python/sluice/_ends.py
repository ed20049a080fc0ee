"""What every source end of the package shares: flush, close and abort of
its extension object, and a ``with`` block that closes it (or aborts it
when the block raised)."""

from __future__ import annotations

from typing import Any, Optional


class ClosingEnd:
    """A sending end that a ``with`` block closes, or aborts when it raised."""

    def close(self, timeout: Optional[float] = None) -> None:
        raise NotImplementedError

    def abort(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Any:
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


class SourceEnd(ClosingEnd):
    """A flow's sending end; ``_ends`` returns its extension object."""

    def _ends(self) -> Any:
        return self.flow._f  # type: ignore[attr-defined]

    def flush(self, timeout: Optional[float] = None) -> None:
        """Publishes every partly filled segment now."""
        self._ends().flush(timeout)

    def close(self, timeout: Optional[float] = None) -> None:
        """Publishes what is left, marks the end on every target and waits
        until all of it was delivered: over ofi, until every target
        confirmed it, which a target does as it consumes. So a rank that
        also consumes from the flow closes from another thread than the
        one consuming (or uses ``exchange()``)."""
        self._ends().close(timeout)

    def abort(self) -> None:
        """Ends the source without the flow's guarantee: targets see PeerLost."""
        self._ends().abort()
