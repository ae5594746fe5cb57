"""When the next transaction starts (``topology.state.checkpoint.cadence``), on the runner.

Time is a ``ManualClock`` that only the test moves, on the inline engine: under the
``back-to-back`` cadence every transaction here starts with the clock standing still, so a
runner that waited for the interval would never start it (and the test would time out);
under ``interval`` the test watches the tuples wait, moves the clock past the interval, and
only then sees their PREPARE.

The spout emits what the test released (``RELEASED``): a wave of tuples at the start and,
from the ``on_transaction`` callback, the next wave when a transaction ends. So a
transaction carries exactly the wave that arrived during the one before.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import topologies as topo

from statefulbolts import (
    BasicBolt,
    Fields,
    LocalCluster,
    ManualClock,
    Spout,
    StatefulBolt,
    TopologyBuilder,
)

INTERVAL_MS = 10_000
WAVES = [["a", "b", "c"], ["d", "e"], ["f"], ["g", "h", "i", "j"]]
TIMEOUT = 60
# What the spout may emit next (the driver's thread pops; the test and callbacks append).
RELEASED: collections.deque[str] = collections.deque()


@pytest.fixture(autouse=True)
def _nothing_released() -> Iterator[None]:
    RELEASED.clear()
    yield
    RELEASED.clear()


class Released(Spout):
    """Emits each released value once, with itself as message id."""

    def open(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def next_tuple(self) -> None:
        if RELEASED:
            value = RELEASED.popleft()
            self.collector.emit([value], message_id=value)

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("value"))


class Seen(StatefulBolt):
    """Counts each value in its state."""

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def init_state(self, state: Any) -> None:
        self.state = state

    def execute(self, tuple: Any) -> None:  # noqa: A002
        value = tuple.get_value(0)
        self.state.put(value, self.state.get(value, 0) + 1)
        self.collector.ack(tuple)


class Drop(BasicBolt):
    """Takes each tuple and does nothing (a topology without stateful bolts)."""

    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        pass

    def declare_output_fields(self, declarer: Any) -> None:
        pass


def _topology(stateful: bool = True) -> Any:
    builder = TopologyBuilder()
    builder.set_spout("source", Released())
    bolt = Seen() if stateful else Drop()
    builder.set_bolt("seen", bolt, 2).shuffle_grouping("source")
    return builder.create_topology()


class Waves:
    """``on_transaction``: records each job; releases the next wave when one ends its transaction.

    A transaction ends with its COMMIT (a plain batch: with its job).
    """

    def __init__(self, waves: list[list[str]]) -> None:
        self.waves = [list(w) for w in waves]
        self.jobs: list[tuple[str | None, int, int]] = []  # (action, txid, tuples)
        self.changed = threading.Condition()
        RELEASED.extend(self.waves.pop(0))

    def __call__(self, info: Any) -> None:
        with self.changed:
            self.jobs.append((info.action, info.txid, info.tuples))
            if info.action in ("COMMIT", None) and self.waves:
                RELEASED.extend(self.waves.pop(0))
            self.changed.notify_all()

    def prepares(self) -> list[tuple[int, int]]:
        return [(txid, n) for action, txid, n in self.jobs if action == "PREPARE"]


def _submit(cluster: Any, name: str, conf: dict[str, Any], clock: ManualClock, waves: Waves) -> Any:
    return cluster.submit_topology(name, conf, _topology(), clock=clock, on_transaction=waves)


def test_back_to_back_the_next_prepare_starts_when_the_commit_ends_not_on_the_interval() -> None:
    clock = ManualClock()
    waves = Waves(WAVES)
    conf = {"topology.state.checkpoint.interval.ms": INTERVAL_MS}
    with LocalCluster(engine="inline") as cluster:
        handle = _submit(cluster, topo.new_key("cadence"), conf, clock, waves)
        handle.await_idle(TIMEOUT)
        state = handle.read_state("seen")
    assert clock.now_ms() == 0  # no interval ever passed
    # One transaction per wave, each carrying exactly the wave released when the one before
    # committed: PREPARE then COMMIT, one at a time.
    assert waves.jobs == [("INITSTATE", -1, 0)] + [
        (action, t, len(wave) if action == "PREPARE" else 0)
        for t, wave in enumerate(WAVES)
        for action in ("PREPARE", "COMMIT")
    ]
    assert state == {v: 1 for wave in WAVES for v in wave}


def test_back_to_back_an_idle_topology_runs_nothing_however_long_it_waits() -> None:
    clock = ManualClock()
    waves = Waves([["a"]])
    conf = {"topology.state.checkpoint.interval.ms": INTERVAL_MS}
    with LocalCluster(engine="inline") as cluster:
        handle = _submit(cluster, topo.new_key("cadence-idle"), conf, clock, waves)
        handle.await_idle(TIMEOUT)
        before = list(waves.jobs)
        for _ in range(5):  # five intervals pass with nothing to send
            clock.advance(INTERVAL_MS + 1)
            handle.await_idle(TIMEOUT)
        after = list(waves.jobs)
        # A tuple that arrives now goes at once, the clock standing still.
        with waves.changed:
            RELEASED.append("z")
            assert waves.changed.wait_for(lambda: len(waves.jobs) == len(after) + 2, TIMEOUT)
        handle.await_idle(TIMEOUT)
        state = handle.read_state("seen")
    assert before == [("INITSTATE", -1, 0), ("PREPARE", 0, 1), ("COMMIT", 0, 0)]
    assert after == before
    assert waves.jobs[len(after) :] == [("PREPARE", 1, 1), ("COMMIT", 1, 0)]
    assert state == {"a": 1, "z": 1}


def test_interval_cadence_holds_waiting_tuples_until_the_interval_passed() -> None:
    clock = ManualClock()
    waves = Waves(WAVES[:3])
    conf = {
        "topology.state.checkpoint.interval.ms": INTERVAL_MS,
        "topology.state.checkpoint.cadence": "interval",
    }
    with LocalCluster(engine="inline") as cluster:
        handle = _submit(cluster, topo.new_key("cadence-interval"), conf, clock, waves)
        for t, wave in enumerate(WAVES[:3]):
            with waves.changed:
                # PREPARE(t) went out (the first at once); its COMMIT released the next wave.
                assert waves.changed.wait_for(lambda t=t: ("COMMIT", t, 0) in waves.jobs, TIMEOUT)
            assert waves.prepares()[-1] == (t, len(wave))
            if t + 1 == 3:
                break
            # The next wave is buffered and waits: nothing starts while the clock stands.
            _wait_buffered(handle, len(WAVES[t + 1]))
            assert waves.prepares()[-1] == (t, len(wave))
            clock.advance(INTERVAL_MS + 1)
        handle.await_idle(TIMEOUT)
    assert [n for _, n in waves.prepares()] == [len(w) for w in WAVES[:3]]


def _wait_buffered(handle: Any, n: int) -> None:
    """Until the driver has ``n`` tuples buffered and no job running."""
    done = threading.Event()
    for _ in range(int(TIMEOUT / 0.01)):
        status = handle.status()
        if status["buffered"] == n and status["job"] is None:
            return
        done.wait(0.01)
    pytest.fail(f"not {n} tuples buffered: {handle.status()}")


def test_back_to_back_a_backlog_fills_each_transaction_to_the_pending_limit() -> None:
    # 1,000 tuples at once, at most 300 pending: after each commit the spout refills in bursts
    # (64 calls each, every call emitting); the PREPARE waits for it to stop at the limit, not
    # for the interval (the clock stands still), and does not go with the first burst either.
    clock = ManualClock()
    backlog = [f"v{i}" for i in range(1000)]
    waves = Waves([backlog])
    conf = {
        "topology.state.checkpoint.interval.ms": INTERVAL_MS,
        "topology.max.spout.pending": 300,
    }
    with LocalCluster(engine="inline") as cluster:
        handle = _submit(cluster, topo.new_key("cadence-backlog"), conf, clock, waves)
        handle.await_idle(TIMEOUT)
        state = handle.read_state("seen")
    assert clock.now_ms() == 0
    assert [n for _, n in waves.prepares()] == [300, 300, 300, 100]
    assert state == dict.fromkeys(backlog, 1)


def test_a_plain_topology_runs_its_batches_back_to_back() -> None:
    clock = ManualClock()
    waves = Waves(WAVES)
    conf = {"topology.state.checkpoint.interval.ms": INTERVAL_MS}
    with LocalCluster(engine="inline") as cluster:
        handle = cluster.submit_topology(
            topo.new_key("cadence-plain"),
            conf,
            _topology(stateful=False),
            clock=clock,
            on_transaction=waves,
        )
        handle.await_idle(TIMEOUT)
    assert clock.now_ms() == 0
    assert waves.jobs == [(None, t + 1, len(wave)) for t, wave in enumerate(WAVES)]
