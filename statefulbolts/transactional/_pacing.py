"""A transactional spout's coordinator, paced while its stream is quiet."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from statefulbolts.clock import Clock

__all__ = ["Pacing"]


class Pacing:
    """The user's coordinator, paced while quiet (docs/protocol/transactional.md).

    After a batch that emitted nothing committed, no new txid starts until every active one
    has committed and one checkpoint interval has passed; then one txid starts, alone, to see
    whether data came. A batch with data ends the quiet: pipelining resumes at once. Without
    this, an idle memory spout would commit empty txids as fast as Spark runs them.
    """

    def __init__(self, inner: Any, clock: Clock, busy: Callable[[], bool]) -> None:
        self._inner, self._clock, self._busy = inner, clock, busy
        self.quiet = False
        self._hold_until = 0.0
        self._probing = False

    def committed(self, empty: bool, interval_ms: float) -> None:
        """A batch committed; ``empty``: it emitted nothing."""
        self.quiet, self._probing = empty, False
        if empty:
            self._hold_until = self._clock.now_ms() + interval_ms

    def initialize_transaction(self, txid: int, prev_metadata: Any) -> Any:
        return self._inner.initialize_transaction(txid, prev_metadata)

    def is_ready(self) -> bool:
        if self.quiet:
            if self._probing or self._busy() or self._clock.now_ms() < self._hold_until:
                return False
            ready = bool(self._inner.is_ready())
            self._probing = ready  # one txid at a time while quiet
            return ready
        return bool(self._inner.is_ready())

    def close(self) -> None:
        self._inner.close()
