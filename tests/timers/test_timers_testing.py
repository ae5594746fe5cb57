"""A ``TimerBolt`` unit-tested as a user would: ``statefulbolts.testing.drive``, no Spark.

``("BEGIN", started_ms)`` starts a transaction as the runtime does before its data: due timers
fire, and ``current_processing_time()`` is that start. The timers are stored with the task's
state, so a ROLLBACK brings back a timer that fired in the rolled-back transaction.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from checkpoint import StatefulBoltExecutor
from statefulbolts import Fields
from statefulbolts.components import BasicBoltExecutor
from statefulbolts.testing import BEGIN, RecordingCollector, drive, make_context, make_tuple
from statefulbolts.timers import TimeDomain, TimerBolt, TimerNotReadyError
from statefulbolts.tuples import Tuple

GAP_MS = 5000


class IdleSessions(TimerBolt):
    """Closes a user's session ``GAP_MS`` after the transaction of their last event."""

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def init_state(self, state: Any) -> None:
        self.state = state

    def execute(self, tuple: Tuple) -> None:  # noqa: A002
        user = tuple.get_value(0)
        now = self.timers.current_processing_time()
        last = self.state.get(user)
        if last is not None:
            self.timers.delete_processing_time_timer(user, last + GAP_MS)
        self.state.put(user, now)
        self.timers.register_processing_time_timer(user, now + GAP_MS)
        self.collector.ack(tuple)

    def on_timer(self, key: Any, at_ms: Any, time_domain: TimeDomain, collector: Any) -> None:
        self.state.delete(key)
        collector.emit([key, at_ms])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("user", "closed_at"))


def _rig() -> tuple[StatefulBoltExecutor, Any, RecordingCollector]:
    name = f"timers-unit-{uuid.uuid4().hex[:8]}"  # the in-memory store is per process
    context = make_context("sessions", topology_name=name, source_fields=("user",))
    executor, out = StatefulBoltExecutor(IdleSessions()), RecordingCollector()
    executor.prepare({}, context, out)
    return executor, context, out


def _event(user: str) -> Tuple:
    return make_tuple([user], fields=["user"])


def _closed(out: RecordingCollector) -> list[list[Any]]:
    return [e.values for e in out.on_stream("default")]


def test_begin_fires_the_due_timers_and_sets_the_processing_time() -> None:
    executor, context, out = _rig()
    drive(executor, context, [("INITSTATE", -1), (BEGIN, 1000), _event("ann"), _event("bob")])
    drive(executor, context, [("PREPARE", 0), ("COMMIT", 0)])
    drive(executor, context, [(BEGIN, 3000), _event("bob"), ("PREPARE", 1), ("COMMIT", 1)])
    drive(executor, context, [(BEGIN, 5999)])
    assert _closed(out) == []  # ann's timer is at 6000
    drive(executor, context, [("PREPARE", 2), ("COMMIT", 2), (BEGIN, 6000)])
    assert _closed(out) == [["ann", 6000]]
    drive(executor, context, [("PREPARE", 3), ("COMMIT", 3), (BEGIN, 9000)])
    assert _closed(out) == [["ann", 6000], ["bob", 8000]]  # bob's 6000 was deleted
    assert dict(executor.state) == {}


def test_a_rollback_brings_back_a_timer_that_fired_in_the_rolled_back_transaction() -> None:
    executor, context, out = _rig()
    drive(executor, context, [("INITSTATE", -1), (BEGIN, 0), _event("ann")])
    drive(executor, context, [("PREPARE", 0), ("COMMIT", 0), (BEGIN, 5000)])
    assert _closed(out) == [["ann", 5000]]
    drive(executor, context, [("ROLLBACK", 1), ("INITSTATE", 0), (BEGIN, 5000)])
    assert _closed(out) == [["ann", 5000], ["ann", 5000]]  # the replay fires it again
    drive(executor, context, [("PREPARE", 1), ("COMMIT", 1), (BEGIN, 99_000)])
    assert _closed(out) == [["ann", 5000], ["ann", 5000]]  # committed: never again


def test_processing_time_outside_a_transaction_and_misused_begin_say_what_is_wrong() -> None:
    executor, context, _ = _rig()
    drive(executor, context, [("INITSTATE", -1)])
    with pytest.raises(TimerNotReadyError, match="no transaction time"):
        drive(executor, context, [_event("ann")])

    early, early_context, _ = _rig()
    with pytest.raises(RuntimeError, match="BEGIN.*before 'sessions' was initialized"):
        drive(early, early_context, [(BEGIN, 0)])

    plain_context = make_context("split", stateful=False, checkpointed=True)
    plain = BasicBoltExecutor(IdleSessions())
    with pytest.raises(TypeError, match="not one"):
        drive(plain, plain_context, [(BEGIN, 0)])
