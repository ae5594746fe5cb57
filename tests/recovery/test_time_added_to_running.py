"""Timers and windows added to a topology that has committed already, on every store.

A topology runs with a plain stateful counter and commits. It starts again, same name and
store, with (a) the counter's code now a ``TimerBolt``, (b) a new ``TimerBolt`` component beside
it, or (c) the counter's code now a stateful windowed bolt. Nothing of the timers or windows
was stored for the checkpoint the restart resumes at, and the first INITSTATE checks every state
a task has against that checkpoint: the start must give them empty images committed there
(``recovery.evolve`` step 6), keep the committed counts, and run the new code to the end.
Stores: memory, SQLite, a real redis-server (the ``conf`` fixture); the inline engine.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import topologies as topo

from checkpoint.runner import CheckpointRunner
from statefulbolts import (
    BaseStatefulWindowedBolt,
    Count,
    Fields,
    Spout,
    StatefulBolt,
    TopologyBuilder,
    is_tick_tuple,
)
from statefulbolts.timers import TimeDomain, TimerBolt

KEYS = ["ann", "bob", "cat"]
FIRST = 9  # tuples of the first run; the second sends as many again
FAST = {"topology.state.checkpoint.interval.ms": 1}


class Keys(Spout):
    """``FIRST`` tuples cycling over ``KEYS``, from ``offset`` on."""

    def __init__(self, offset: int) -> None:
        self.offset = offset

    def open(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector, self.n = collector, 0

    def next_tuple(self) -> None:
        if self.n < FIRST:
            i = self.offset + self.n
            self.collector.emit([KEYS[i % len(KEYS)]], message_id=i)
            self.n += 1

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("key"))


class Counter(StatefulBolt):
    """Counts tuples per key."""

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def init_state(self, state: Any) -> None:
        self.state = state

    def execute(self, tuple: Any) -> None:  # noqa: A002
        if not is_tick_tuple(tuple):
            self.count(tuple.get_value(0))
        self.collector.ack(tuple)

    def count(self, key: str) -> None:
        self.state.put(key, self.state.get(key, 0) + 1)


class TimedCounter(Counter, TimerBolt):
    """Counts as ``Counter``; each key's first tuple of a run registers a timer at time 0."""

    def count(self, key: str) -> None:
        super().count(key)
        if self.state.get(f"armed:{key}") is None:
            self.state.put(f"armed:{key}", 1)
            self.timers.register_processing_time_timer(key, 0)

    def on_timer(self, key: Any, at_ms: Any, time_domain: TimeDomain, collector: Any) -> None:
        self.state.put(f"fired:{key}", self.state.get(f"fired:{key}", 0) + 1)


class CountWindows(BaseStatefulWindowedBolt):
    """Windows of three tuples; adds each window's tuples per key to the state."""

    def init_state(self, state: Any) -> None:
        self.state = state

    def execute(self, window: Any) -> None:
        for t in window.get():
            key = t.get_value(0)
            self.state.put(key, self.state.get(key, 0) + 1)
        self.state.put("windows", self.state.get("windows", 0) + 1)


def _run(
    name: str,
    conf: dict[str, Any],
    build: Callable[[TopologyBuilder], None],
    offset: int,
    until: Callable[[Callable[[str], dict[Any, Any]]], bool] = lambda read: True,
) -> Callable[[str], dict[Any, Any]]:
    """Run until idle and ``until(read_state)`` holds (timers fire in a later transaction)."""
    builder = TopologyBuilder()
    builder.set_spout("keys", Keys(offset))
    build(builder)
    runner = CheckpointRunner(name, {**FAST, **conf}, builder.create_topology(), None,
                              engine="inline")  # fmt: skip
    runner.start()
    try:
        runner.await_idle(60)
        deadline = time.monotonic() + 60
        while not until(runner.read_state) and time.monotonic() < deadline:
            runner.await_idle(60)
            time.sleep(0.05)
        return runner.read_state
    finally:
        runner.kill()


def _fired(state: dict[Any, Any]) -> dict[str, int]:
    return {k: v for k, v in state.items() if str(k).startswith("fired:")}


def _counter(builder: TopologyBuilder) -> None:
    builder.set_bolt("count", Counter(), 2).fields_grouping("keys", ["key"])


def _first_run(name: str, conf: dict[str, Any]) -> None:
    _run(name, conf, _counter, 0)


@pytest.fixture
def name() -> str:
    return topo.new_key("time-added")


def _counts(state: dict[Any, Any]) -> dict[str, int]:
    return {k: v for k, v in state.items() if k in KEYS}


def test_a_bolt_that_became_a_timer_bolt_keeps_its_counts_and_fires_its_timers(
    conf: dict[str, Any], name: str
) -> None:
    _first_run(name, conf)

    def timed(builder: TopologyBuilder) -> None:
        builder.set_bolt("count", TimedCounter(), 2).fields_grouping("keys", ["key"])

    read = _run(name, conf, timed, FIRST, lambda read: len(_fired(read("count"))) == 3)
    state = read("count")
    assert _counts(state) == dict.fromkeys(KEYS, 2 * FIRST // len(KEYS))
    assert _fired(state) == {f"fired:{k}": 1 for k in KEYS}


def test_a_timer_bolt_added_beside_a_committed_one_starts_with_no_timers(
    conf: dict[str, Any], name: str
) -> None:
    _first_run(name, conf)

    def added(builder: TopologyBuilder) -> None:
        _counter(builder)
        builder.set_bolt("sessions", TimedCounter(), 3).fields_grouping("keys", ["key"])

    read = _run(name, conf, added, FIRST, lambda read: len(_fired(read("sessions"))) == 3)
    assert _counts(read("count")) == dict.fromkeys(KEYS, 2 * FIRST // len(KEYS))
    sessions = read("sessions")
    assert _counts(sessions) == dict.fromkeys(KEYS, FIRST // len(KEYS))
    assert _fired(sessions) == {f"fired:{k}": 1 for k in KEYS}


def test_a_bolt_that_became_a_windowed_bolt_keeps_its_counts_and_fires_its_windows(
    conf: dict[str, Any], name: str
) -> None:
    _first_run(name, conf)

    def windowed(builder: TopologyBuilder) -> None:
        bolt = CountWindows().with_tumbling_window(Count(3))
        builder.set_bolt("count", bolt, 1).global_grouping("keys")

    read = _run(name, conf, windowed, FIRST)
    state = read("count")
    # The first run's counts stay (the component's one task now holds every key: a rescale
    # from 2 moved them), and each of the second run's FIRST tuples was in one window.
    assert _counts(state) == dict.fromkeys(KEYS, 2 * FIRST // len(KEYS))
    assert state["windows"] == FIRST // 3
