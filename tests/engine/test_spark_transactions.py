"""How the driver cuts the stream into transactions: when the first PREPARE after a start goes.

Data moves only with a transaction, and a PREPARE may start no sooner than one checkpoint interval
after the one before. So the first transaction after a start is not cut while the spouts are still
producing: it carries up to one interval of data, and goes as soon as they go quiet.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import pytest
import topologies as topo

from statefulbolts import Fields, ManualClock, Spout, TopologyBuilder

pytestmark = pytest.mark.spark


class PacedSpout(Spout):
    """Emits ``count`` tuples (``None`` for endless), pausing ``pause`` seconds before each one.

    Slower than an INITSTATE job, so what a PREPARE cut right after INITSTATE would carry is a
    small part of the burst.
    """

    def __init__(self, count: int | None, pause: float) -> None:
        self.count = count
        self.pause = pause

    def open(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        """Start at zero."""
        self.collector = collector
        self.next = 0

    def next_tuple(self) -> None:
        """One tuple per call, each after a pause, until ``count``."""
        if self.count is not None and self.next >= self.count:
            return
        time.sleep(self.pause)
        self.collector.emit([self.next % 7], message_id=self.next)
        self.next += 1

    def declare_output_fields(self, declarer: Any) -> None:
        """One field: ``value``."""
        declarer.declare(Fields("value"))


def paced(count: int | None, pause: float) -> Any:
    builder = TopologyBuilder()
    builder.set_spout("src", PacedSpout(count, pause))
    builder.set_bolt("tally", topo.Tally(), 2).fields_grouping("src", Fields("value"))
    return builder.create_topology()


def _actions(handle: Any) -> list[tuple[str, int]]:
    return [(t["action"], t["tuples"]) for t in handle.metrics()["transactions"]]


def test_a_burst_goes_in_one_transaction_once_the_spout_is_quiet(spark: Any, cluster: Any) -> None:
    # 2,000 tuples at 0.5 ms each take over a second to gather, many INITSTATEs long (once the
    # Python workers are up: hence the warm-up job). Cut right after INITSTATE, the first
    # PREPARE would take a part and leave the rest waiting for the next one, a minute later.
    spark.sparkContext.parallelize(range(4), 2).map(lambda x: x + 1).collect()
    name = topo.new_key("burst")
    conf = {"topology.state.checkpoint.interval.ms": 60_000}
    handle = cluster.submit_topology(name, conf, paced(2000, 0.0005))
    try:
        handle.await_idle(45)
        counts = handle.read_state("tally")
        actions = _actions(handle)
    finally:
        handle.kill()
    assert actions == [("INITSTATE", 0), ("PREPARE", 2000), ("COMMIT", 0)]
    assert counts == {v: sum(1 for i in range(2000) if i % 7 == v) for v in range(7)}


def test_the_first_transaction_of_an_endless_spout_waits_one_interval(cluster: Any) -> None:
    clock = ManualClock()
    name = topo.new_key("endless")
    conf = {"topology.state.checkpoint.interval.ms": 1000}
    handle = cluster.submit_topology(name, conf, paced(None, 0.0005), clock=clock)
    try:
        deadline = time.monotonic() + 30
        while _actions(handle) == [] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _actions(handle) == [("INITSTATE", 0)]
        time.sleep(1.0)  # real time passes, the topology's clock does not
        assert _actions(handle) == [("INITSTATE", 0)]
        assert handle.status()["buffered"] > 0

        clock.advance(1001)
        while len(_actions(handle)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        first = _actions(handle)[1]
    finally:
        handle.kill()
    assert first[0] == "PREPARE"
    assert first[1] > 0
