"""What both protocols do with a poison tuple once they found it: judge it, record it, book it.

The checkpoint and transactional runners find a failing tuple's origin in their own ways (a
spout tuple's root in the ledger; an emitted batch tuple's place in its txid), and take it out
in their own ways (the spout message acked; the txid's batch stored without it). Between
finding and taking out, the policy is one, and it lives here, in ``DeadLetters``, the base of
both protocols' dead-letter objects (``checkpoint._deadletters.CheckpointDeadLetters``,
``statefulbolts.transactional._deadletters.TransactionalDeadLetters``):

1. ``_judge``: one more failed transaction counts against the origin's record id. It is poison
   once it failed ``topology.deadletter.after.failures`` transactions since the last commit,
   or at once when the store already holds a dead letter of it (a replay that failed again).
   A new record that would pass ``topology.deadletter.max`` stops the topology instead: that
   many poison tuples is a bug, not bad input. Kill point ``deadletter-decided`` follows a yes.
2. ``_letter`` makes the record (the failing task by its index, and its global id), and
   ``_record`` completes it (dead-lettered again, it adds its attempts to the held one; new,
   it keeps when its suspect was first seen) and writes it; kill point
   ``deadletter-recorded``. The protocol then takes the tuple out.
3. ``_booked``: the tuple is out: the suspect stops counting; the counters, the dashboards'
   last records and one warning line.

What a protocol's ``isolate`` answers is a ``Verdict``; ``summary`` is a record as dashboards
show it, ``poison_limit_error`` the message of a topology stopped by ``topology.deadletter.max``.

Example:
    >>> Verdict(False, "the store is full")
    Verdict(isolated=False, why_not='the store is full', repeated=None)
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, NamedTuple, Protocol, TypeVar

from statefulbolts.config import TopologyConfig
from statefulbolts.deadletter._record import (
    BatchOrigin,
    DeadLetter,
    FailedTuple,
    LetterState,
    SpoutOrigin,
)
from statefulbolts.deadletter._store import DeadLetterStore
from statefulbolts.deadletter._tracker import PoisonTracker, Suspect
from statefulbolts.errors import TopologyFailedError
from statefulbolts.listeners import NO_FAULTS, FaultListener, KillPoint

__all__ = ["BackendCalls", "DeadLetters", "Judged", "Verdict", "poison_limit_error", "summary"]

log = logging.getLogger(__name__)

T = TypeVar("T")

# Records shown on dashboards and in status(), newest first.
_LAST = 5


class BackendCalls(Protocol):
    """How every store access goes: the driver's failure gate (``recovery.gate.FailureGate``)."""

    def with_backend(self, what: str, call: Callable[[], T]) -> T:
        """Run ``call``, waiting out a state backend outage."""


class Verdict(NamedTuple):
    """What ``isolate`` did: the tuple was dead-lettered, or why it could not be (if it tried).

    ``repeated`` (policy "stop", nothing dead-lettered): the failing tuple failed this many
    transactions, ``topology.deadletter.after.failures``: every retry fails it again.
    """

    isolated: bool
    why_not: str | None = None
    repeated: int | None = None


def summary(record: DeadLetter) -> dict[str, Any]:
    """A record as dashboards show it: id, where (the task by its index), what, when."""
    return {
        "id": record.id,
        "component": record.component,
        "task": record.task_index,
        "values": record.failed.text,
        "origin": record.origin.describe(),
        "error": f"{record.type_name}: {record.message}",
        "attempts": record.attempts,
        "state": record.state.value,
        "last_seen": record.last_seen,
    }


def poison_limit_error(name: str, held: int, limit: int, where: str, cause: str) -> str:
    """The message of a topology stopped by ``topology.deadletter.max``."""
    return (
        f"topology {name!r} stopped: {where} failed on one more tuple ({cause}), and the "
        f"dead-letter store already holds {held} records (topology.deadletter.max = {limit}). "
        "A component that fails on this many tuples has a bug, not poison input: fix it, "
        "restart, then replay the records (statefulbolts deadletter replay --all)"
    )


class Judged(NamedTuple):
    """A tuple found poison: its suspect's count, and the record the store already held."""

    suspect: Suspect
    held: DeadLetter | None


class DeadLetters:
    """The dead-letter policy both protocols share (see the module docstring).

    Args:
        name: the topology's name (in the message of a topology stopped by the limit).
        tc: the validated config (``topology.deadletter.*``).
        store: where the records go.
        count: adds to a component's counters (``Stats.add``).
        failures: the failure gate every store access goes through.
        faults: the fault listener, told at the ``deadletter-*`` kill points.
        now: wall-clock seconds (injected in tests).
        task_id: Storm's global task id of a component's task index (the record keeps both).
    """

    def __init__(
        self,
        name: str,
        tc: TopologyConfig,
        store: DeadLetterStore,
        count: Callable[..., None],
        failures: BackendCalls,
        faults: FaultListener = NO_FAULTS,
        *,
        now: Callable[[], float],
        task_id: Callable[[str, int], int],
    ) -> None:
        self._name, self._tc, self.store, self._task_id = name, tc, store, task_id
        self._count, self._failures, self._faults = count, failures, faults
        self.tracker = PoisonTracker(tc.deadletter_after_failures, now)
        self.isolating = tc.deadletter_policy == "isolate"
        self.held = 0
        self.last: collections.deque[dict[str, Any]] = collections.deque(maxlen=_LAST)
        self.dead_lettered: collections.Counter[str] = collections.Counter()

    def _remember(self, records: Sequence[DeadLetter]) -> None:
        """The store's records, read at start: how many are held, the last few shown."""
        self.held = len(records)
        self.last.clear()
        for record in sorted(records, key=lambda r: r.last_seen)[-_LAST:]:
            self.last.appendleft(summary(record))

    def _not_blamed(self, why: str | None) -> Verdict:
        """No one tuple is to blame, for ``why`` (said only when the policy would isolate it)."""
        return Verdict(False, why if self.isolating else None)

    def _repeats(self, record_id: str, error: Any) -> Verdict:
        """Policy "stop": count the failed transaction against the tuple; nothing is recorded.

        A tuple that failed ``topology.deadletter.after.failures`` transactions is known to
        fail every retry (``Verdict.repeated``): the caller stops the topology at once.
        """
        suspect = self.tracker.failed(record_id, error.component)
        repeated = suspect.failures if self.tracker.is_poison(suspect) else None
        return Verdict(False, repeated=repeated)

    def _judge(self, record_id: str, error: Any, txid: int) -> Judged | None:
        """Step 1: whether the tuple of ``record_id`` is poison now (``None``: not yet).

        ``error`` is the ``TaskError`` of the failed job.

        Raises:
            TopologyFailedError: a new record would pass ``topology.deadletter.max``.
        """
        held = self._failures.with_backend(
            "reading a dead letter", lambda: self.store.get(record_id)
        )
        suspect = self.tracker.failed(
            record_id, error.component, known=held is not None and held.state is LetterState.DEAD
        )
        if not self.tracker.is_poison(suspect):
            return None
        limit = self._tc.deadletter_max
        if held is None and self.held >= limit:
            where = f"component {error.component!r} task {error.task}"
            text = poison_limit_error(self._name, self.held, limit, where, error.cause)
            raise TopologyFailedError(
                text, component=error.component, task=error.task, txid=txid, cause=error.cause
            )
        self._kill(KillPoint.DEADLETTER_DECIDED, txid)
        return Judged(suspect, held)

    def _letter(
        self,
        error: Any,
        origin: SpoutOrigin | BatchOrigin,
        judged: Judged,
        txid: int,
        record_id: str,
        traceback: str | None,
    ) -> DeadLetter:
        """The new record of ``error``'s failing tuple (a ``TaskError`` naming one)."""
        failing = error.failing
        return DeadLetter.first(
            self.store.name,
            self.store.scope,
            error.component,
            self._task_id(error.component, error.task),
            error.task,
            FailedTuple(
                failing.source_component,
                failing.source_task,
                failing.stream,
                failing.values,
                failing.text,
                failing.source_task_index,
            ),
            origin,
            error.types,
            error.message,
            traceback,
            txid=txid,
            attempts=judged.suspect.failures,
            at=judged.suspect.last_seen,
            record_id=record_id,
        )

    def _record(self, record: DeadLetter, judged: Judged, txid: int) -> DeadLetter:
        """Step 2: complete ``record`` with what the store held, and write it."""
        if judged.held is not None:
            record = judged.held.again(record)
        else:
            record = replace(record, first_seen=judged.suspect.first_seen)
        self._failures.with_backend(
            f"recording dead letter {record.id}",
            lambda: self.store.put(record),  # noqa: B023 - called at once
        )
        self._kill(KillPoint.DEADLETTER_RECORDED, txid)
        return record

    def _booked(
        self, record: DeadLetter, judged: Judged, txid: int, what: str, unit: str
    ) -> None:
        """Step 3: the tuple is out. ``what``: the failing tuple's text; ``unit``: what failed."""
        self._kill(KillPoint.DEADLETTER_EXCLUDED, txid)
        self.tracker.isolated(judged.suspect)
        self.held += judged.held is None
        self.dead_lettered[record.component] += 1
        self._count(record.component, dead_lettered=1)
        self.last.appendleft(summary(record))
        log.warning(
            "dead-lettered %s after %d failed %s(s): %s raised %s on %s (record %s)",
            record.origin.describe(),
            judged.suspect.failures,
            unit,
            record.component,
            record.type_name,
            what,
            record.id,
        )

    def _kill(self, point: KillPoint, txid: int) -> None:
        self._faults.on_driver(point, txid)

    def _status(self, replaying: int) -> dict[str, Any]:
        """What ``status()`` and dashboards show: policy, records held, counts, the last few."""
        return {
            "policy": self._tc.deadletter_policy,
            "held": self.held,
            "dead_lettered": dict(self.dead_lettered),
            "replaying": replaying,
            "last": list(self.last),
        }
