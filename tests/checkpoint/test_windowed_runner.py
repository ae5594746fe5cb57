"""Windowed bolts through the checkpoint runner: exact windows, each fired in one commit.

Time is a ``ManualClock`` moved one second per job that ends (``_Advance``) up to an end time,
so the watermark ticks (one a second, asked for by the executor itself) are known, whatever the
machine's speed; the run goes idle once nothing is due. The verdict is the committed state of
``Verdicts``: every window under its index, once, equal to ``expected_windows`` (a plain
Python computation). A window fired in two committed transactions would show there twice.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
import topologies as topo
from windowed_topologies import (
    CountingWindows,
    Readings,
    Verdicts,
    Windows,
    event_time_topology,
    expected_windows,
)

from checkpoint.runner import CheckpointRunner
from providers import StateFactory
from statefulbolts import BaseWindowedBolt, Fields, LocalCluster, ManualClock, TopologyBuilder
from statefulbolts.listeners import KillPoint, NoFaults
from statefulbolts.namespaces import TaskNamespace, window_namespace
from statefulbolts.ticks import TICK_FREQ_KEY
from statefulbolts.windowing import Count, Duration, WindowedBoltExecutor

FAST = {"topology.state.checkpoint.interval.ms": 1, "topology.max.spout.pending": 5}
SEEDS = range(20)


class _Advance:
    """``on_transaction``: ``step_ms`` on the clock per job that ends, up to ``end_ms``."""

    def __init__(self, clock: ManualClock, end_ms: float, step_ms: float = 1000) -> None:
        self.clock, self.end_ms, self.step_ms = clock, end_ms, step_ms
        self.actions: list[tuple[Any, int, bool]] = []

    def __call__(self, info: Any) -> None:
        self.actions.append((info.action, info.tuples, info.ok))
        if self.clock.now_ms() < self.end_ms:
            self.clock.advance(self.step_ms)


def _run(
    name: str,
    topology: Any,
    conf: dict[str, Any],
    end_ms: float = 30_000,
    read: str = "verdicts",
) -> tuple[dict[Any, Any], _Advance]:
    clock = ManualClock()
    advance = _Advance(clock, end_ms)
    with LocalCluster(engine="inline") as cluster:
        handle = cluster.submit_topology(
            name, conf, topology, clock=clock, on_transaction=advance
        )
        handle.await_idle(60)
        return handle.read_state(read), advance


def _drive_until(
    handle: Any, clock: ManualClock, done: Callable[[], bool], steps: int = 0
) -> None:
    """Move ``clock`` 250 ms at a time until ``done()`` (then ``steps`` more); at most 60 s."""
    deadline = time.monotonic() + 60
    while not done():
        assert time.monotonic() < deadline, f"not done after 60 s: {handle.status()}"
        clock.advance(250)
        time.sleep(0.002)
    for _ in range(steps):
        clock.advance(250)
        time.sleep(0.002)


@pytest.mark.parametrize("in_memory", [None, 3])
def test_event_time_windows_are_exact_and_each_fires_once(in_memory: int | None) -> None:
    # With 3 tuples in memory at most, the others are read back from the provider.
    conf = dict(FAST)
    if in_memory is not None:
        conf["topology.state.windowing.max.events.in.memory"] = in_memory
    committed, advance = _run(topo.new_key("win-exact"), event_time_topology(40), conf)
    assert committed == expected_windows(40)
    assert all(ok for _, _, ok in advance.actions)


def test_a_stateful_windowed_bolt_commits_its_state_with_its_windows() -> None:
    name = topo.new_key("win-stateful")
    committed, _ = _run(name, event_time_topology(30, CountingWindows()), FAST, read="windows")
    expected = expected_windows(30)
    assert committed == {"seen": sum(len(w[0][2]) for w in expected.values())}


def test_the_windows_live_in_their_own_namespace_and_shrink_as_tuples_leave() -> None:
    name = topo.new_key("win-ns")
    _run(name, event_time_topology(40), FAST)
    state = StateFactory.get_system_state(
        window_namespace(TaskNamespace.of_topology(name, "windows", 0)), {}
    )
    stored = dict(state.items())  # type: ignore[attr-defined]
    events = sorted(int(k.split("/")[1]) for k in stored if k.startswith("event/"))
    # What is still held: the tuples of the windows the watermark has not closed (ts >= 8000,
    # the start of the first window not fired), and the last window's, for its successor.
    assert events == list(range(28, 40))
    assert stored["manager"]["next_id"] == 40


FAILED_ONCE: set[str] = set()


class _FailsOnce(Windows):
    """Raises once, as window ``index`` fires: that transaction fails after its windows moved."""

    def __init__(self, key: str, index: int) -> None:
        self.key, self.index = key, index

    def execute(self, window: Any) -> None:
        super().execute(window)  # its verdict emitted: the failure must take it back
        if window.index == self.index and self.key not in FAILED_ONCE:
            FAILED_ONCE.add(self.key)
            msg = f"window {window.index} fails its transaction once"
            raise RuntimeError(msg)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_failed_transaction_is_replayed_and_no_window_fires_twice_or_is_lost(
    seed: int, caplog: pytest.LogCaptureFixture
) -> None:
    # The job fails as window ``seed % 9`` fires (after its verdict was emitted, with tuples
    # stored in the window state): ROLLBACK, then the spout replays the transaction's tuples.
    name = topo.new_key("win-fault")
    expected = expected_windows(40)
    clock = ManualClock()
    with caplog.at_level("WARNING"), LocalCluster(engine="inline") as cluster:
        topology = event_time_topology(40, _FailsOnce(name, seed % 9))
        handle = cluster.submit_topology(name, FAST, topology, clock=clock)
        # The failed transaction's retry waits out a backoff on this clock: the test moves
        # time on until the verdict is in, then on again to see that nothing more comes.
        _drive_until(handle, clock, lambda: handle.read_state("verdicts") == expected)
        _drive_until(handle, clock, lambda: handle.status()["live_roots"] == 0, steps=20)
        committed = handle.read_state("verdicts")
    assert name in FAILED_ONCE
    assert committed == expected
    assert f"window {seed % 9} fails its transaction once" in caplog.text


class _DriverDies(NoFaults):
    """Ends the driver loop at ``point`` of ``txid``, as a driver process dying there."""

    def __init__(self, point: KillPoint, txid: int) -> None:
        self.point, self.txid, self.fired = point, txid, False

    def on_driver(self, point: Any, txid: int) -> None:
        if point is self.point and txid == self.txid and not self.fired:
            self.fired = True
            msg = f"driver died at {point.value} of txid {txid}"
            raise SystemExit(msg)


def _restart_run(
    name: str, conf: dict[str, Any], point: KillPoint, txid: int, n: int = 40
) -> dict[Any, Any]:
    dies = _DriverDies(point, txid)
    clock = ManualClock()
    first = CheckpointRunner(
        name,
        conf,
        event_time_topology(n, source=name),
        None,
        clock=clock,
        on_transaction=_Advance(clock, 30_000),
        faults=dies,
        engine="inline",
    )
    first.start()
    with pytest.raises(SystemExit, match="driver died"):
        first.await_idle(60)
    # A new driver on the same store (the spout replays what was not acked), its clock on.
    second_clock = ManualClock(clock.now_ms())
    second = CheckpointRunner(
        name,
        conf,
        event_time_topology(n, source=name),
        None,
        clock=second_clock,
        on_transaction=_Advance(second_clock, clock.now_ms() + 30_000),
        engine="inline",
    )
    second.start()
    try:
        second.await_idle(60)
        return second.read_state("verdicts")
    finally:
        second.kill()


@pytest.mark.parametrize("seed", SEEDS)
def test_a_restarted_driver_resumes_the_windows_exactly(seed: int) -> None:
    # The in-memory store, kept in this process across the two drivers. Only a kill before
    # the commit decision: the in-memory provider keeps no transaction manifest (its data dies
    # with a real driver), so past the decision a restart replays t at least once.
    name = topo.new_key("win-restart")
    committed = _restart_run(name, FAST, KillPoint.AFTER_PREPARE, 1 + seed % 8)
    assert committed == expected_windows(40)


def _redis(port: int) -> dict[str, Any]:
    pool = {"jedisPoolConfig": {"host": "127.0.0.1", "port": port}}
    return {
        "topology.state.provider": "providers.redis.RedisKeyValueStateProvider",
        "topology.state.provider.config": json.dumps(pool),
    }


@pytest.mark.parametrize("seed", SEEDS)
def test_a_restarted_driver_resumes_the_windows_exactly_on_redis(seed: int, redis_db: Any) -> None:
    points = [KillPoint.AFTER_PREPARE, KillPoint.AFTER_COMMITTING_SAVED, KillPoint.AFTER_COMMITTED]
    conf = {**FAST, **_redis(redis_db.port)}
    name = topo.new_key("win-redis")
    committed = _restart_run(name, conf, points[seed % 3], 1 + seed % 7)
    assert committed == expected_windows(40)


class _Sizes(BaseWindowedBolt):
    def execute(self, window: Any) -> None:
        ids = [t.get_value(0) for t in window.get()]
        start, end = window.get_start_timestamp(), window.get_end_timestamp()
        self.collector.emit([window.index, start, end, ids])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("index", "start", "end", "ids"))


def test_processing_time_windows_follow_each_transactions_start_time() -> None:
    # Tumbling windows of 3 s in processing time: a tuple's time is its transaction's start,
    # and an idle input still closes windows (the executor asks for a tick every 3 s).
    builder = TopologyBuilder()
    builder.set_spout("readings", Readings(12))
    bolt = _Sizes().with_tumbling_window(Duration.seconds(3))
    builder.set_bolt("windows", bolt).shuffle_grouping("readings")
    builder.set_bolt("verdicts", Verdicts()).global_grouping("windows")
    topology = builder.create_topology()
    assert topology.component("windows").obj.get_component_configuration() == {TICK_FREQ_KEY: 3}
    committed, advance = _run(topo.new_key("win-proc"), topology, FAST)
    # 5 tuples per PREPARE (max pending), one transaction a second of the clock: the PREPAREs
    # carrying data start at 1 s, 3 s, 5 s (INITSTATE at 0 s, a COMMIT after each PREPARE).
    starts = [i for i, (a, n, _) in enumerate(advance.actions) if str(a) == "PREPARE" and n]
    assert len(starts) == 3
    windows = [v[0] for _, v in sorted(committed.items(), key=lambda kv: int(kv[0][1:]))]
    assert all(len(v) == 1 for v in committed.values())
    # Every tuple in exactly one window, windows 3 s long and back to back, in order.
    assert sorted(i for w in windows for i in w[2]) == list(range(12))
    assert all(end - start == 3000 for start, end, _ in windows)
    assert [w[2] for w in windows] == sorted(w[2] for w in windows)


def test_the_executor_declares_the_late_stream_and_refuses_a_bad_window() -> None:
    bolt = _Sizes().with_tumbling_window(Count(3))
    executor = WindowedBoltExecutor(
        _Sizes()
        .with_tumbling_window(Duration(1000))
        .with_timestamp_field("ts")
        .with_late_tuple_stream("late")
    )
    from statefulbolts.components import OutputFieldsDeclarer

    declarer = OutputFieldsDeclarer()
    executor.declare_output_fields(declarer)
    assert declarer.streams["late"].to_list() == ["late_tuple"]
    assert executor.get_component_configuration() == {TICK_FREQ_KEY: 1}
    assert WindowedBoltExecutor(bolt).get_component_configuration() is None
    from statefulbolts.topology import CHECKPOINT_STREAM_ID
    from statefulbolts.windowing import WindowConfigError
    from statefulbolts.windowing._executor import _BARRIER_STREAM

    assert _BARRIER_STREAM == CHECKPOINT_STREAM_ID  # its data inputs are the others
    builder = TopologyBuilder()
    with pytest.raises(WindowConfigError, match=r"bolt 'w'.*_Sizes: no window"):
        builder.set_bolt("w", _Sizes())
