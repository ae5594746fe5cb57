"""What the driver fixes when it starts a checkpoint transaction: its time and its ticks.

A transaction's tasks cannot read a clock of their own: a replay (after a failed PREPARE, or
after a driver restart) must see what the first attempt saw, or its effects would differ. So
the driver decides, once per txid, by its injected clock:

- ``time_ms``: the transaction's timestamp, the clock's ``wall_ms`` when PREPARE(t) first
  started. Every job of ``t`` carries it (``CheckpointTaskProgram.started_ms``), so anything
  judged against time inside a task (a state's time-to-live) sees the same instant in every
  attempt and replay.
- ``ticks``: how many tick tuples each ticking bolt gets in ``t`` (``TickSchedule.take``).

Saved in the checkpoint spout's state under ``TXSTART_KEY`` before PREPARING(t) is, in the same
commit (the caller commits, as with the manifest). Stored form, plain values::

    {"txid": t, "time_ms": <float>, "ticks": {bolt id: count, ...}}

Why this keeps ticks exactly-once: only one record is kept, the last transaction's. A record
for ``t`` is reused by every PREPARE(t), whatever happened in between (a failed job rolled
back in this run, or a driver restarted with PREPARING(t) saved and rolled it back): the same
ticks are delivered again until ``t`` commits. Once ``t`` committed the next transaction is
``t + 1`` and takes new ticks, so a committed tick is never delivered again; a driver that
restarts after COMMITTING(t) rolls ``t`` forward without running PREPARE(t) again.
"""

from __future__ import annotations

import reprlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from providers import KeyValueState
from statefulbolts.errors import CheckpointError

__all__ = ["TXSTART_KEY", "TransactionStart", "TransactionStarts"]

TXSTART_KEY = "__txstart"


@dataclass(frozen=True)
class TransactionStart:
    """Transaction ``txid``'s timestamp and ticks, fixed when it first started.

    Example:
        >>> start = TransactionStart(4, 1_700_000_000_000.0, {"flush": 2})
        >>> TransactionStart.from_value(start.to_value()) == start
        True
    """

    txid: int
    time_ms: float
    ticks: Mapping[str, int] = field(default_factory=dict)

    def to_value(self) -> dict[str, Any]:
        """The stored form: ``{"txid", "time_ms", "ticks"}``."""
        return {"txid": self.txid, "time_ms": self.time_ms, "ticks": dict(self.ticks)}

    @classmethod
    def from_value(cls, value: Any) -> TransactionStart:
        """Read the stored form back; anything else is a ``CheckpointError``."""
        if isinstance(value, dict):
            txid, time_ms, ticks = value.get("txid"), value.get("time_ms"), value.get("ticks")
            if (
                isinstance(txid, int)
                and not isinstance(txid, bool)
                and isinstance(time_ms, int | float)
                and not isinstance(time_ms, bool)
                and isinstance(ticks, dict)
                and all(
                    isinstance(k, str) and isinstance(n, int) and not isinstance(n, bool)
                    for k, n in ticks.items()
                )
            ):
                return cls(txid, float(time_ms), dict(ticks))
        msg = (
            f"saved transaction start {TXSTART_KEY!r} is {reprlib.repr(value)}, not "
            '{"txid": <int>, "time_ms": <number>, "ticks": {<bolt id>: <int>, ...}}'
        )
        raise CheckpointError(msg)


class TransactionStarts:
    """The driver's record of the last transaction's start: reused by its replays.

    ``take_ticks(now_ms)`` gives the ticks due now (a ``TickSchedule``'s ``take``); ``state``
    is the checkpoint spout's, or ``None`` for a topology without one (nothing to replay).

    Example:
        >>> from providers import InMemoryKeyValueState
        >>> state = InMemoryKeyValueState("demo/$checkpointspout-0")
        >>> starts = TransactionStarts(state, lambda: 1000.0, lambda: {"flush": 1})
        >>> starts.begin(0) == TransactionStart(0, 1000.0, {"flush": 1})
        True
        >>> state.commit()  # the checkpoint spout commits it with PREPARING(0)
        >>> restarted = TransactionStarts(state, lambda: 9000.0, lambda: {"flush": 7})
        >>> restarted.begin(0).ticks  # PREPARE(0) again after a restart: the same ticks
        {'flush': 1}
        >>> restarted.begin(1).ticks, restarted.time_of(1)
        ({'flush': 7}, 9000.0)
    """

    def __init__(
        self,
        state: KeyValueState | None,
        wall_ms: Callable[[], float],
        take_ticks: Callable[[], dict[str, int]],
    ) -> None:
        self._state = state
        self._wall_ms = wall_ms
        self._take_ticks = take_ticks
        saved = None if state is None else state.get(TXSTART_KEY)
        self.last: TransactionStart | None = (
            None if saved is None else TransactionStart.from_value(saved)
        )

    def begin(self, txid: int) -> TransactionStart:
        """The start of PREPARE(``txid``): the saved one on a replay, else a new one, put.

        The caller commits the state (with PREPARING(``txid``)).
        """
        last = self.last
        if last is not None and last.txid == txid:
            return last
        start = TransactionStart(txid, self._wall_ms(), self._take_ticks())
        if self._state is not None:
            self._state.put(TXSTART_KEY, start.to_value())
        self.last = start
        return start

    def time_of(self, txid: int) -> float:
        """Transaction ``txid``'s timestamp; the clock's now for a txid never started here.

        (INITSTATE after a fresh start has no PREPARE behind it.)
        """
        last = self.last
        return last.time_ms if last is not None and last.txid == txid else self._wall_ms()
