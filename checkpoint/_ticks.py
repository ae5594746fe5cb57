"""``TickSchedule``: which tick tuples are due, by the driver's clock, when a job starts.

The driver owns time: a task lives for one job and cannot keep a timer. Each ticking bolt
(``statefulbolts.ticks.tick_frequencies``) has a tick due every ``f`` seconds from the moment
the driver opened the topology: at ``start + f``, ``start + 2f``, ... When the driver starts a
job that carries data (a PREPARE, or a batch of a topology without stateful bolts), it takes
every tick due by then (``take``), and every task of each ticking bolt gets them in that job.

Rules:

1. Each due tick is delivered, never coalesced: a bolt that counts ticks to measure time (a
   buffer flushed every N ticks, buckets rotated per tick) stays right when a slow transaction
   or a retry backoff lets several fall due at once, as Storm's queued ticks do. A tick is a
   one-value tuple, so even a long stall costs little.
2. The schedule starts when the driver opens the topology, as a Storm executor's tick timer
   starts with the executor: a restarted driver owes no tick for the time no driver ran, and
   none is ever delivered twice (``checkpoint._txstart`` keeps a transaction's ticks across a
   restart).
3. Ticks are not tied to data: an idle topology runs a transaction for a due tick alone.

Example:
    >>> schedule = TickSchedule({"flush": 2, "rotate": 5}, start_ms=0)
    >>> schedule.due(1999), schedule.due(2000)
    (False, True)
    >>> schedule.take(10_000)
    {'flush': 5, 'rotate': 2}
    >>> schedule.take(11_000)
    {}
    >>> schedule.next_due_ms
    12000
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["TickSchedule"]


class TickSchedule:
    """When each ticking bolt's next tick is due, and how many are due at a moment."""

    def __init__(self, frequencies: Mapping[str, int], start_ms: float) -> None:
        """``frequencies``: seconds between ticks per bolt id; ``start_ms``: the clock at open."""
        self._every = {cid: secs * 1000 for cid, secs in frequencies.items()}
        self._next = {cid: start_ms + every for cid, every in self._every.items()}
        self._owed: dict[str, int] = {}

    @property
    def frequencies(self) -> dict[str, int]:
        """Seconds between ticks, per ticking bolt."""
        return {cid: every // 1000 for cid, every in self._every.items()}

    @property
    def next_due_ms(self) -> float | None:
        """When the next tick of any bolt is due (``None``: no bolt ticks)."""
        return min(self._next.values(), default=None)

    def due(self, now_ms: float) -> bool:
        """Whether any tick is due at ``now_ms`` (or owed back by a failed batch)."""
        if self._owed:
            return True
        nxt = self.next_due_ms
        return nxt is not None and nxt <= now_ms

    def take(self, now_ms: float) -> dict[str, int]:
        """Every tick due at ``now_ms``, per bolt (bolts with none left out); they are taken."""
        taken = dict(self._owed)
        self._owed = {}
        for cid, every in self._every.items():
            nxt = self._next[cid]
            if nxt <= now_ms:
                n = int((now_ms - nxt) // every) + 1
                self._next[cid] = nxt + n * every
                taken[cid] = taken.get(cid, 0) + n
        return taken

    def give_back(self, ticks: Mapping[str, int]) -> None:
        """Ticks taken by a job whose delivery did not count: the next ``take`` has them."""
        for cid, n in ticks.items():
            if n:
                self._owed[cid] = self._owed.get(cid, 0) + n
