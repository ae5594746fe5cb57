"""Timers through the checkpoint runner: which fire, when, in what order, and exactly once.

Time is a ``ManualClock`` the driver's thread moves one second per job that ends, so every
PREPARE's start time (the processing time its timers are judged by) is known, whatever the
speed of the machine. The spout releases each event once the clock has reached its release
time, so registrations, deletions and watermarks land in known transactions. The bolts log
every ``on_timer`` call (``FIRED``), failed attempts included, and count in their state what
committed. ``STATEFULBOLTS_FAULT_SEED`` picks the parallelism and which transaction fails or
loses its driver (loop it over seeds: ``for s in $(seq 0 19); do STATEFULBOLTS_FAULT_SEED=$s
pytest tests/timers; done``).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import topologies as topo

from checkpoint.runner import CheckpointRunner
from checkpoint.status import stored_topologies
from providers import StateFactory
from statefulbolts import Fields, ManualClock, Spout, StatefulBolt, TopologyBuilder, is_tick_tuple
from statefulbolts.errors import TopologyFailedError
from statefulbolts.listeners import KillPoint, NoFaults
from statefulbolts.namespaces import TaskNamespace, timers_namespace
from statefulbolts.timers import TimeDomain, TimerBolt, stored_timers

SEED = int(os.environ.get("STATEFULBOLTS_FAULT_SEED", "0"))
FAST = {"topology.state.checkpoint.interval.ms": 1}
WATERMARKS = "watermarks"
# Every on_timer call of this process: (task, key, at, domain, the transaction's start).
FIRED: list[tuple[int, Any, Any, str, float]] = []
# The clock the spout releases its events by (the spout runs in the driver's process), and
# the events acked: committed, so a restarted spout does not send them again.
CLOCK: list[ManualClock] = []
ACKED: set[int] = set()
# A key whose on_timer raises, while set (the poison-timer test).
POISON: list[str] = []

# (release at, stream, values), in release order: registrations, a cancel, two no-ops, two
# watermarks.
EVENTS: list[tuple[float, str, list[Any]]] = [
    (0, "default", ["proc", "ann", 6000]),
    (0, "default", ["proc", "bob", 6000]),
    (0, "default", ["proc", "cat", 4000]),
    (0, "default", ["proc", "dan", 9000]),
    (0, "default", ["proc", "eve", 4000]),
    (0, "default", ["proc", "eve", 4000.0]),  # the same timer again: it fires once
    (0, "default", ["event", "ann", 100]),
    (0, "default", ["event", "bob", 300]),
    (0, "default", ["event", "cat", 200]),
    (2000, "default", ["cancel", "dan", 9000]),
    # Nothing to do but be a data tuple in a known transaction (the replay test's fault).
    (5000, "default", ["noop", "cat", 0]),
    (7000, "default", ["noop", "ann", 0]),
    (8500, WATERMARKS, [250]),  # not 8 s: the tick that starts a replay of PREPARE(3)
    (12000, WATERMARKS, [1000]),
]
# Every timer that must fire, once each: cat re-registers itself 5 s on when it fires.
EXPECTED = {
    ("cat", 4000, "processing"),
    ("eve", 4000, "processing"),
    ("ann", 6000, "processing"),
    ("bob", 6000, "processing"),
    ("cat", 9000, "processing"),
    ("ann", 100, "event"),
    ("cat", 200, "event"),
    ("bob", 300, "event"),
}
END_MS = 16_000


@pytest.fixture(autouse=True)
def _fresh_log() -> Iterator[None]:
    FIRED.clear()
    CLOCK.clear()
    ACKED.clear()
    POISON.clear()
    yield
    FIRED.clear()
    CLOCK.clear()
    ACKED.clear()
    POISON.clear()


class Schedule(Spout):
    """Emits each event once the clock reached its release time, until it is acked.

    A failed event is sent again first; a spout opened again sends every event not acked.
    """

    def open(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector
        self.left = [(i, e) for i, e in enumerate(EVENTS) if i not in ACKED]

    def next_tuple(self) -> None:
        if self.left and self.left[0][1][0] <= CLOCK[0].now_ms():
            i, (_, stream, values) = self.left.pop(0)
            self.collector.emit(values, message_id=i, stream=stream)

    def ack(self, msg_id: Any) -> None:
        ACKED.add(msg_id)

    def fail(self, msg_id: Any) -> None:
        self.left.insert(0, (msg_id, EVENTS[msg_id]))

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("kind", "key", "at"))
        declarer.declare_stream(WATERMARKS, Fields("at"))


class Sessions(TimerBolt):
    """Registers, deletes and fires timers as the events say; counts what fired in its state."""

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector, self.task = collector, context.this_task_index

    def init_state(self, state: Any) -> None:
        self.state = state

    def execute(self, tuple: Any) -> None:  # noqa: A002
        timers = self.timers
        if is_tick_tuple(tuple):
            pass
        elif tuple.source_stream_id == WATERMARKS:
            timers.advance_watermark(tuple.get_value(0))
        else:
            kind, key, at = tuple.values
            if kind == "proc":
                timers.register_processing_time_timer(key, at)
            elif kind == "cancel":
                timers.delete_processing_time_timer(key, at)
            elif kind == "event":
                timers.register_event_time_timer(key, at)
        self.collector.ack(tuple)

    def on_timer(self, key: Any, at_ms: Any, time_domain: TimeDomain, collector: Any) -> None:
        now = self.timers.current_processing_time()
        if key in POISON:
            msg = f"no session for {key}"
            raise ValueError(msg)
        FIRED.append((self.task, key, at_ms, time_domain.value, now))
        name = f"{key}@{at_ms} {time_domain.value}"
        self.state.put(name, self.state.get(name, 0) + 1)
        if key == "cat" and time_domain is TimeDomain.PROCESSING_TIME and at_ms < 9000:
            self.timers.register_processing_time_timer("cat", at_ms + 5000)
        collector.emit([name])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("fired"))


class Sink(StatefulBolt):
    """Counts what the timers emitted."""

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def init_state(self, state: Any) -> None:
        self.state = state

    def execute(self, tuple: Any) -> None:  # noqa: A002
        name = tuple.get_value(0)
        self.state.put(name, self.state.get(name, 0) + 1)
        self.collector.ack(tuple)


def _topology(parallelism: int) -> Any:
    builder = TopologyBuilder()
    builder.set_spout("source", Schedule())
    builder.set_bolt("sessions", Sessions(), parallelism).fields_grouping(
        "source", ["key"]
    ).all_grouping("source", WATERMARKS)
    builder.set_bolt("sink", Sink()).global_grouping("sessions")
    return builder.create_topology()


def _names(fired: set[tuple[Any, Any, str]]) -> dict[str, int]:
    return {f"{key}@{at} {domain}": 1 for key, at, domain in fired}


class _Advance:
    """``on_transaction``: one second on the clock per job that ends, up to ``END_MS``.

    A failed job and the ROLLBACK after it do not move it: the recovery's INITSTATE moves it
    to the next tick (which starts the replay) and no further, so the spout releases nothing
    new before the replay.
    """

    def __init__(self, clock: ManualClock, step_ms: float = 1000) -> None:
        self.clock, self.step_ms = clock, step_ms

    def __call__(self, info: Any) -> None:
        if info.ok and info.action != "ROLLBACK" and self.clock.now_ms() < END_MS:
            self.clock.advance(self.step_ms)


def _runner(
    name: str, clock: ManualClock, faults: Any = None, conf: dict[str, Any] | None = None
) -> tuple[CheckpointRunner, list[float]]:
    """A runner on the inline engine; and the start time of every PREPARE it submits."""
    runner = CheckpointRunner(
        name,
        conf or FAST,
        _topology(1 + SEED % 3),
        None,
        clock=clock,
        on_transaction=_Advance(clock),
        faults=faults,
        engine="inline",
    )
    starts: list[float] = []
    submit = runner.engine.submit

    def spying(spec: Any) -> Any:
        if spec.action == "PREPARE":
            starts.append(spec.program.started_ms)
        return submit(spec)

    runner.engine.submit = spying  # type: ignore[method-assign]
    return runner, starts


def _run(runner: CheckpointRunner) -> tuple[dict[str, int], dict[str, int]]:
    runner.start()
    try:
        runner.await_idle(60)
        return runner.read_state("sessions"), runner.read_state("sink")
    finally:
        runner.kill()


def _fired_once(sessions: dict[str, int], sink: dict[str, int]) -> None:
    """What committed: every expected timer fired once, its emit counted once."""
    assert sessions == _names(EXPECTED)
    assert sink == _names(EXPECTED)


def test_timers_fire_once_each_in_order_at_the_first_transaction_due() -> None:
    name = topo.new_key("timers-order")
    clock = ManualClock()
    CLOCK.append(clock)
    runner, starts = _runner(name, clock)
    sessions, sink = _run(runner)
    _fired_once(sessions, sink)
    assert Counter((k, a, d) for _, k, a, d, _ in FIRED) == dict.fromkeys(EXPECTED, 1)
    # A processing-time timer fires in the first PREPARE that started at or after its time.
    for _, _, at, domain, now in FIRED:
        if domain == "processing":
            assert now == min(s for s in starts if s >= at)
    # An event-time timer fires when a watermark that passes it arrives.
    event_now = {key: now for _, key, _, domain, now in FIRED if domain == "event"}
    assert 8000 <= event_now["ann"] == event_now["cat"] < 12_000 <= event_now["bob"]
    # Each task fires in time order (processing before event in one transaction), ties by key.
    rank = {"processing": 0, "event": 1}
    for task in {t for t, *_ in FIRED}:
        mine = [(now, rank[d], at, key) for t, key, at, d, now in FIRED if t == task]
        assert mine == sorted(mine)
    # Nothing is left registered, and the committed watermark is the last one.
    for task in range(1 + SEED % 3):
        own = str(TaskNamespace.of_topology(name, "sessions", task))
        timers = StateFactory.get_system_state(timers_namespace(own), FAST)
        assert stored_timers(timers) == []  # type: ignore[arg-type]
        assert timers.get("watermark") == 1000  # type: ignore[attr-defined]
    # The timers' namespaces are the tasks' own records, not another topology.
    listed = [s.topology for s in stored_topologies(FAST) or [] if s.topology.startswith(name)]
    assert listed == [name]


def test_a_failed_transaction_replays_the_same_timers_and_commits_them_once() -> None:
    # A "noop" event reaches the task of its key in the transaction whose timers include that
    # key's (PREPARE(t) starts at 1 + 2t s: the noop released at 5 s lands in PREPARE(2),
    # which fires cat and eve at 4 s; the one at 7 s in PREPARE(3), which fires ann and bob
    # at 6 s). The injected fault fails the task there, after its timers fired and before
    # the tuple; the tuple is dead-lettered at its first failure, so PREPARE(t) runs again at
    # once, at its saved start time, and must fire the very same timers.
    txid = 2 + SEED % 2
    parallelism = 1 + SEED % 3
    faults = [
        {"component": "sessions", "task": t, "at_tuple": 0, "kind": "raise",
         "attempts": "every", "txid": txid}
        for t in range(parallelism)
    ]  # fmt: skip
    conf = {**FAST, "topology.faults": {"tasks": faults}, "topology.deadletter.after.failures": 1}
    name = topo.new_key("timers-replay")
    clock = ManualClock()
    CLOCK.append(clock)
    runner, starts = _runner(name, clock, conf=conf)
    sessions, sink = _run(runner)
    _fired_once(sessions, sink)
    failed_at = 1000 + 2000 * txid
    assert starts.count(failed_at) == 2  # the failed attempt and its replay
    calls = Counter(FIRED)
    replayed = {f for f in calls if f[4] == failed_at}
    assert replayed and {f[2] for f in replayed} == {4000 + 2000 * (txid - 2)}
    assert all(calls[f] == 2 for f in replayed)
    assert all(n == 1 for f, n in calls.items() if f not in replayed)


def _registered(name: str) -> set[tuple[Any, Any, str]]:
    """Every timer the committed state of ``name``'s sessions tasks holds."""
    found = set()
    for task in range(1 + SEED % 3):
        own = str(TaskNamespace.of_topology(name, "sessions", task))
        timers = StateFactory.get_system_state(timers_namespace(own), FAST)
        found |= {(k, a, d.value) for d, a, k in stored_timers(timers)}  # type: ignore[arg-type]
    return found


def _retry_on_manual_time(runner: CheckpointRunner, clock: ManualClock) -> None:
    """``await_idle``, moving ``clock`` on while the runner waits to retry a failed transaction.

    Its retry waits for the runner's clock; a manual one moves only when told. Replays keep
    their transaction's saved start time, so when the retries happen changes nothing they do.
    """
    deadline = time.monotonic() + 60
    while not runner.done and time.monotonic() < deadline:
        if runner.status()["recovering"]:
            clock.advance(100)
        time.sleep(0.01)
    runner.await_idle(1)


@pytest.mark.parametrize("policy", ["stop", "isolate"])
def test_a_timer_whose_callback_raises_stops_the_topology_naming_it_and_stays_registered(
    policy: str,
) -> None:
    # bob's on_timer raises: the transaction its timer fires in fails every attempt, under
    # either dead-letter policy (a timer is not a tuple), until the retry budget stops the
    # topology with an error that names the timer. Nothing of that transaction committed:
    # the timer is still registered, and fixed code on the same store fires it once.
    POISON.append("bob")
    name = topo.new_key("timers-poison")
    clock = ManualClock()
    CLOCK.append(clock)
    conf = {**FAST, "topology.deadletter.policy": policy, "topology.max.transaction.retries": 1}
    first, _ = _runner(name, clock, conf=conf)
    first.start()
    with pytest.raises(TopologyFailedError) as caught:
        _retry_on_manual_time(first, clock)
    first.kill()
    text = str(caught.value)
    assert "Sessions raised ValueError in on_timer of key 'bob' at 6000 ms (processing time)" in (
        text
    )
    assert "no session for bob" in text
    assert ("a timer is not dead-lettered" in text) is (policy == "isolate")
    assert ("bob", 6000, "processing") in _registered(name)
    assert "bob@6000 processing" not in first.read_state("sessions")
    assert not any(key == "bob" for _, key, *_ in FIRED)

    POISON.clear()
    second_clock = ManualClock(clock.now_ms())
    CLOCK[0] = second_clock
    second, _ = _runner(name, second_clock)
    sessions, sink = _run(second)
    _fired_once(sessions, sink)
    assert _registered(name) == set()


class _DriverDies(NoFaults):
    """Ends the driver at ``point`` of the ``nth`` transaction in which timers fired."""

    def __init__(self, point: KillPoint, nth: int, clock: ManualClock) -> None:
        self.point, self.nth, self.clock = point, nth, clock
        self.seen, self.killed_at, self._mark = 0, None, 0
        self.in_flight: list[tuple[int, Any, Any, str, float]] = []

    def on_driver(self, point: Any, txid: int) -> None:
        if point is not self.point or self.killed_at is not None:
            return
        new, self._mark = FIRED[self._mark :], len(FIRED)
        if not new:
            return
        if self.seen == self.nth:
            self.killed_at, self.in_flight = self.clock.now_ms(), new
            msg = f"driver died at {point.value} of txid {txid}"
            raise SystemExit(msg)
        self.seen += 1


@pytest.mark.parametrize("point", [KillPoint.AFTER_PREPARE, KillPoint.AFTER_COMMITTING_SAVED])
def test_a_restarted_driver_fires_the_remaining_timers_exactly_once(point: KillPoint) -> None:
    name = topo.new_key("timers-restart")
    first_clock = ManualClock()
    CLOCK.append(first_clock)
    dies = _DriverDies(point, SEED % 3, first_clock)
    first, _ = _runner(name, first_clock, dies)
    first.start()
    with pytest.raises(SystemExit, match="driver died"):
        first.await_idle(60)
    first.kill()
    assert dies.killed_at is not None and dies.in_flight
    before = list(FIRED)

    # A new driver on the same store, its clock on from where the first one stopped; its
    # spout sends again what no committed transaction carried (a durable source).
    second_clock = ManualClock(dies.killed_at)
    CLOCK[0] = second_clock
    second, _ = _runner(name, second_clock)
    sessions, sink = _run(second)
    _fired_once(sessions, sink)
    after = Counter(FIRED[len(before) :])
    if point is KillPoint.AFTER_PREPARE:
        # The in-flight transaction never committed: the restart replays it, the same timers
        # at the same processing time.
        assert set(dies.in_flight) <= set(after)
    else:
        # COMMITTING was saved: the restart only rolls it forward; nothing fires again.
        assert not set(dies.in_flight) & set(after)
    assert all(n == 1 for n in after.values())
    # Over both drivers every timer was called, and only the replayed ones twice.
    total = Counter((k, a, d) for _, k, a, d, _ in FIRED)
    assert set(total) == EXPECTED
    twice = {(k, a, d) for _, k, a, d, _ in dies.in_flight}
    assert {f for f, n in total.items() if n == 2} == (
        twice if point is KillPoint.AFTER_PREPARE else set()
    )


@pytest.mark.spark
def test_timers_fire_exactly_once_on_spark(cluster: Any) -> None:
    # The memory provider on Spark: the timers' namespace is shipped to and from the tasks.
    # Three seconds a job, so few Spark jobs: PREPARE(t) starts at 3 + 6t s.
    clock = ManualClock()
    CLOCK.append(clock)
    handle = cluster.submit_topology(
        topo.new_key("timers-spark"),
        FAST,
        _topology(2),
        clock=clock,
        on_transaction=_Advance(clock, step_ms=3000),
    )
    handle.await_idle(180)
    _fired_once(handle.read_state("sessions"), handle.read_state("sink"))
