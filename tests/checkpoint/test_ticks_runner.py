"""Tick tuples through the checkpoint runner: how many, to which tasks, and exactly once.

Time is a ``ManualClock`` moved by the driver's own thread: every job that ends moves it one
second on (``_Advance``), until the run's end time. So each test knows exactly which ticks fall
due, whatever the speed of the machine, and the topology goes idle only once every tick due by
the end time has been committed. The timing logic runs on the inline engine (every job in this
process, so the bolts can also log what they were delivered, ``DELIVERED``); one test runs the
same topology on Spark.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import topologies as topo

from checkpoint._txstart import TXSTART_KEY, TransactionStart
from checkpoint.runner import CheckpointRunner
from providers import StateFactory
from statefulbolts import (
    BasicBolt,
    Fields,
    LocalCluster,
    ManualClock,
    Spout,
    StatefulBolt,
    TopologyBuilder,
    is_tick_tuple,
)
from statefulbolts.errors import ConfigError
from statefulbolts.listeners import KillPoint, NoFaults
from statefulbolts.ticks import TICK_FREQ_KEY

FAST = {"topology.state.checkpoint.interval.ms": 1}
# The driver-restart test's transaction to die in: 2 + seed % 3 (loop it over seeds:
# ``for s in $(seq 0 19); do STATEFULBOLTS_FAULT_SEED=$s pytest ... -k restarted; done``).
SEED = int(os.environ.get("STATEFULBOLTS_FAULT_SEED", "0"))
# What the bolts of this process were delivered: (component, task index, "tick" | "data").
DELIVERED: list[tuple[str, int, str]] = []


@pytest.fixture(autouse=True)
def _fresh_log() -> Iterator[None]:
    DELIVERED.clear()
    yield
    DELIVERED.clear()


class OneShot(Spout):
    """Emits ``values`` once each; a failed tuple is dropped (a source that cannot replay)."""

    def __init__(self, values: list[str]) -> None:
        self.values = values

    def open(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector, self.left = collector, list(self.values)

    def next_tuple(self) -> None:
        if self.left:
            value = self.left.pop(0)
            self.collector.emit([value], message_id=value)

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("value"))


class TickReporter(BasicBolt):
    """On each tick, emits ``"<component>-<task>"``; data tuples are only logged."""

    def prepare(self, conf: Any, context: Any) -> None:
        self.me = f"{context.this_component_id}-{context.this_task_index}"
        self.component, self.task = context.this_component_id, context.this_task_index

    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        kind = "tick" if is_tick_tuple(tuple) else "data"
        DELIVERED.append((self.component, self.task, kind))
        if kind == "tick":
            collector.emit([self.me])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("reporter"))


class TickLedger(StatefulBolt):
    """Counts, in its state, its own ticks (key ``ledger-<task>``) and each reporter's."""

    def __init__(self, own: Mapping[str, Any] | None = None) -> None:
        self.own = own

    def get_component_configuration(self) -> Mapping[str, Any] | None:
        return self.own

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector
        self.component, self.task = context.this_component_id, context.this_task_index

    def init_state(self, state: Any) -> None:
        self.state = state

    def execute(self, tuple: Any) -> None:  # noqa: A002
        if is_tick_tuple(tuple):
            DELIVERED.append((self.component, self.task, "tick"))
            key = f"{self.component}-{self.task}"
        else:
            key = tuple.get_value(0)
        self.state.put(key, self.state.get(key, 0) + 1)
        self.collector.ack(tuple)


def _topology(values: list[str] | None = None) -> Any:
    """flusher ticks every 1 s (the declarer's setting), ledger every 2 s (its own component
    configuration), plain at the topology's frequency; ledger counts every reporter's ticks."""
    builder = TopologyBuilder()
    builder.set_spout("source", OneShot(values or []))
    builder.set_bolt("flusher", TickReporter(), 2).shuffle_grouping("source").add_configuration(
        TICK_FREQ_KEY, 1
    )
    builder.set_bolt("plain", TickReporter()).shuffle_grouping("source")
    builder.set_bolt("ledger", TickLedger({TICK_FREQ_KEY: 2}), 2).fields_grouping(
        "flusher", ["reporter"]
    ).fields_grouping("plain", ["reporter"])
    return builder.create_topology()


class _Advance:
    """``on_transaction``: ``step_ms`` on the clock per job that ends, up to ``end_ms``."""

    def __init__(self, clock: ManualClock, end_ms: float, step_ms: float = 1000) -> None:
        self.clock, self.end_ms, self.step_ms = clock, end_ms, step_ms
        self.actions: list[tuple[str | None, int, bool]] = []  # None: a plain batch

    def __call__(self, info: Any) -> None:
        self.actions.append((info.action, info.tuples, info.ok))
        if self.clock.now_ms() < self.end_ms:
            self.clock.advance(self.step_ms)


def _expected(seconds: int, topology_wide: int | None) -> dict[str, int]:
    counts = {"ledger-0": seconds // 2, "ledger-1": seconds // 2}
    counts |= {"flusher-0": seconds, "flusher-1": seconds}
    if topology_wide is not None:
        counts["plain-0"] = seconds // topology_wide
    return counts


def _ticks_delivered() -> Counter[tuple[str, int]]:
    return Counter((c, t) for c, t, kind in DELIVERED if kind == "tick")


@pytest.mark.parametrize("topology_wide", [None, 3])
def test_an_idle_topology_ticks_each_task_at_its_components_frequency(
    topology_wide: int | None,
) -> None:
    clock = ManualClock()
    advance = _Advance(clock, 12_000)
    conf = {**FAST, TICK_FREQ_KEY: topology_wide}
    with LocalCluster(engine="inline") as cluster:
        handle = cluster.submit_topology(
            topo.new_key("ticks-idle"), conf, _topology(), clock=clock, on_transaction=advance
        )
        handle.await_idle(60)
        committed = handle.read_state("ledger")
    # No spout tuple at all: every PREPARE ran for its ticks alone.
    assert committed == _expected(12, topology_wide)
    prepares = [tuples for action, tuples, _ in advance.actions if action == "PREPARE"]
    assert prepares and set(prepares) == {0}
    assert all(ok for _, _, ok in advance.actions)
    # Each tick delivered once, to every task of its bolt; a bolt not configured gets none.
    delivered = _ticks_delivered()
    assert delivered[("ledger", 0)] == delivered[("ledger", 1)] == 6
    assert delivered[("flusher", 0)] == delivered[("flusher", 1)] == 12
    assert delivered[("plain", 0)] == (0 if topology_wide is None else 4)


def test_a_plain_topology_ticks_its_batches() -> None:
    # No stateful bolt: no checkpoint spout, batches; the ticks still come, each once.
    builder = TopologyBuilder()
    builder.set_spout("source", OneShot(["a", "b"]))
    builder.set_bolt("flusher", TickReporter(), 2).shuffle_grouping("source")
    builder.set_bolt("plain", TickReporter()).shuffle_grouping("flusher").add_configuration(
        TICK_FREQ_KEY, 5
    )
    # A batch a job: with nothing else to run, the clock moves by one flusher period a batch.
    clock = ManualClock()
    advance = _Advance(clock, 20_000, step_ms=2000)
    conf = {**FAST, TICK_FREQ_KEY: 2}
    with LocalCluster(engine="inline") as cluster:
        handle = cluster.submit_topology(
            topo.new_key("ticks-plain"),
            conf,
            builder.create_topology(),
            clock=clock,
            on_transaction=advance,
        )
        handle.await_idle(60)
    delivered = _ticks_delivered()
    assert delivered == {("flusher", 0): 10, ("flusher", 1): 10, ("plain", 0): 4}
    assert {action for action, _, _ in advance.actions} == {None}  # batches
    data = Counter(c for c, _, kind in DELIVERED if kind == "data")
    # The two spout tuples, and what flusher emitted on its ticks, reached their bolts.
    assert data == {"flusher": 2, "plain": 20}


def test_a_failed_transaction_is_replayed_with_the_same_ticks_and_counted_once() -> None:
    # The one spout tuple reaches plain in PREPARE(0), after that transaction's tick, and the
    # injected fault fails the job there (ledger, downstream, never runs). The tuple is
    # dead-lettered at its first failure, so PREPARE(0) runs again at once (no backoff to
    # wait out on the manual clock), with the same ticks and no data, and commits.
    fault = {"component": "plain", "task": 0, "at_tuple": 0, "kind": "raise", "txid": 0}
    faults = {"tasks": [fault]}
    clock = ManualClock()
    advance = _Advance(clock, 10_000)
    conf = {
        **FAST,
        TICK_FREQ_KEY: 1,
        "topology.faults": faults,
        "topology.deadletter.after.failures": 1,
    }
    with LocalCluster(engine="inline") as cluster:
        handle = cluster.submit_topology(
            topo.new_key("ticks-replay"),
            conf,
            _topology(["x"]),
            clock=clock,
            on_transaction=advance,
        )
        handle.await_idle(60)
        committed = handle.read_state("ledger")
    assert committed == _expected(10, 1)
    prepares = [(action, ok) for action, _, ok in advance.actions if action == "PREPARE"]
    assert prepares[:2] == [("PREPARE", False), ("PREPARE", True)]
    assert all(ok for _, ok in prepares[1:])
    assert "ROLLBACK" in [action for action, _, _ in advance.actions]
    # PREPARE(0) took the ticks due at 1 s: the tasks of its first stage were given them
    # twice (the failed attempt, the replay), and each was committed once.
    delivered = _ticks_delivered()
    assert delivered == {
        ("flusher", 0): 10 + 1,
        ("flusher", 1): 10 + 1,
        ("plain", 0): 10 + 1,
        ("ledger", 0): 5,
        ("ledger", 1): 5,
    }
    # The fault fires as plain's data tuple comes, before the bolt sees it: plain's 11th tick
    # is the failed attempt's, so ticks come before the data of their job.
    assert ("plain", 0, "data") not in DELIVERED


class _DriverDies(NoFaults):
    """Ends the driver loop at ``point`` of txid ``txid``, as a driver process dying there."""

    def __init__(self, point: KillPoint, txid: int, clock: ManualClock) -> None:
        self.point, self.txid, self.clock = point, txid, clock
        self.at_ms: float | None = None

    def on_driver(self, point: Any, txid: int) -> None:
        if point is self.point and txid == self.txid and self.at_ms is None:
            self.at_ms = self.clock.now_ms()
            msg = f"driver died at {point.value} of txid {txid}"
            raise SystemExit(msg)


@pytest.mark.parametrize("point", [KillPoint.AFTER_PREPARE, KillPoint.AFTER_COMMITTING_SAVED])
def test_a_restarted_driver_neither_repeats_nor_loses_a_committed_tick(point: KillPoint) -> None:
    name = topo.new_key("ticks-restart")
    first_clock = ManualClock()
    txid = 2 + SEED % 3
    dies = _DriverDies(point, txid, first_clock)
    first = CheckpointRunner(
        name,
        FAST,
        _topology(),
        None,
        clock=first_clock,
        on_transaction=_Advance(first_clock, 60_000),
        faults=dies,
        engine="inline",
    )
    first.start()
    with pytest.raises(SystemExit, match="driver died"):
        first.await_idle(60)
    assert first.starts is not None and first.starts.last is not None
    in_flight = first.starts.last  # its ticks were saved with PREPARING(txid)
    assert in_flight.txid == txid and dies.at_ms is not None
    before = int(dies.at_ms // 1000)  # every tick due when PREPARE(2) started
    assert in_flight.ticks["flusher"] >= 1

    # A new driver on the same store, its own clock from 0: its schedule starts at its open.
    second_clock = ManualClock()
    second = CheckpointRunner(
        name,
        FAST,
        _topology(),
        None,
        clock=second_clock,
        on_transaction=_Advance(second_clock, 5_000),
        engine="inline",
    )
    second.start()
    try:
        second.await_idle(60)
        committed = second.read_state("ledger")
    finally:
        second.kill()
    assert committed["flusher-0"] == committed["flusher-1"] == before + 5
    assert committed["ledger-0"] == committed["ledger-1"] == before // 2 + 5 // 2
    delivered = _ticks_delivered()
    if point is KillPoint.AFTER_PREPARE:
        # PREPARE(txid) never committed: the restart replays it, with the very same ticks.
        assert delivered[("flusher", 0)] == before + 5 + in_flight.ticks["flusher"]
    else:
        # COMMITTING(txid) was saved: the restart only rolls it forward; no tick comes again.
        assert delivered[("flusher", 0)] == before + 5


def test_each_prepare_carries_its_transactions_start_time() -> None:
    # The transaction's timestamp is the clock's when PREPARE(t) first started, saved with
    # PREPARING(t) in the checkpoint spout's state (for anything judged against time in a task).
    name = topo.new_key("ticks-time")
    clock = ManualClock(1_000_000)
    runner = CheckpointRunner(
        name,
        FAST,
        _topology(),
        None,
        clock=clock,
        on_transaction=_Advance(clock, 1_004_000),
        engine="inline",
    )
    shipped: list[tuple[str, int, float | None, dict[str, Any]]] = []
    submit = runner.engine.submit

    def spying(spec: Any) -> Any:
        program = spec.program
        shipped.append((spec.action, program.txid, program.started_ms, dict(program.ticks)))
        return submit(spec)

    runner.engine.submit = spying  # type: ignore[method-assign]
    runner.start()
    try:
        runner.await_idle(60)
        last = runner.starts.last if runner.starts is not None else None
    finally:
        runner.kill()
    # INITSTATE ends at 1001 s, PREPARE(0) starts then, and each job moves the clock 1 s:
    # PREPARE(1) at 1003 s, the end; PREPARE(2) at 1004 s for the ticks due then.
    assert last == TransactionStart(2, 1_004_000.0, {"flusher": 1, "ledger": 1})
    saved = StateFactory.get_state(f"{name}/$checkpointspout-0", FAST).get(TXSTART_KEY)
    assert TransactionStart.from_value(saved) == last
    # What every job shipped to its tasks: its transaction's time; ticks with PREPAREs only,
    # (how many, rate_secs) per ticking bolt. COMMITs ran in the driver (no job).
    assert shipped == [
        ("INITSTATE", -1, 1_000_000.0, {}),
        ("PREPARE", 0, 1_001_000.0, {"flusher": (1, 1)}),
        ("PREPARE", 1, 1_003_000.0, {"flusher": (2, 1), "ledger": (1, 2)}),
        ("PREPARE", 2, 1_004_000.0, {"flusher": (1, 1), "ledger": (1, 2)}),
    ]


def test_a_bad_frequency_stops_the_submit_naming_the_key_and_the_component() -> None:
    builder = TopologyBuilder()
    builder.set_spout("source", OneShot([]))
    builder.set_bolt("ledger", TickLedger({TICK_FREQ_KEY: 0})).shuffle_grouping("source")
    with (
        pytest.raises(ConfigError, match=rf"component 'ledger': {TICK_FREQ_KEY} must be an int"),
        LocalCluster(engine="inline") as cluster,
    ):
        cluster.submit_topology(topo.new_key("ticks-bad"), FAST, builder.create_topology())


@pytest.mark.spark
def test_ticks_reach_every_task_exactly_on_spark(cluster: Any) -> None:
    # Two Spark jobs: INITSTATE moves the clock to 2 s, and PREPARE(0) carries every tick due.
    clock = ManualClock()
    advance = _Advance(clock, 2_000, step_ms=2000)
    conf = {**FAST, TICK_FREQ_KEY: 2}
    handle = cluster.submit_topology(
        topo.new_key("ticks-spark"), conf, _topology(), clock=clock, on_transaction=advance
    )
    handle.await_idle(120)
    assert handle.read_state("ledger") == _expected(2, 2)
    assert [action for action, _, _ in advance.actions] == ["INITSTATE", "PREPARE", "COMMIT"]
