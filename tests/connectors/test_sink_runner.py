"""A sink bolt in a running topology: what the runtime does with a sink's errors.

The inline engine runs the checkpoint protocol as Spark would (every task in the driver's
process), so a publish that fails is a COMMIT that fails, and the runtime's answer to it is
what is under test.
"""

from __future__ import annotations

import itertools
from typing import Any

import topologies as topo
from sink_fixtures import MemorySink, memory_target

from statefulbolts import TopologyBuilder
from statefulbolts._cluster import LocalCluster
from statefulbolts.connectors.sinks import ExactlyOnceSinkBolt

_names = itertools.count()
N = 40


def _run(target: str, conf: dict[str, Any]) -> list[Any]:
    builder = TopologyBuilder()
    builder.set_spout("values", topo.ValueSpout(target, list(range(N)), burst=10), 1)
    builder.set_bolt("publish", ExactlyOnceSinkBolt(MemorySink(target)), 2).shuffle_grouping(
        "values"
    )
    cluster = LocalCluster(engine="inline")
    outcomes: list[tuple[str, int, bool]] = []
    handle = cluster.submit_topology(
        target,
        {"topology.state.checkpoint.interval.ms": 10, **conf},
        builder.create_topology(),
        on_transaction=lambda info: outcomes.append((info.action, info.txid, info.ok)),
    )
    try:
        handle.await_idle(120)
    finally:
        handle.kill()
    return outcomes


def test_a_failed_publish_fails_its_commit_which_is_run_again_and_publishes_once() -> None:
    target = f"sink-runner-{next(_names)}"
    memory_target(target).fail_next = True
    outcomes = _run(target, {})
    # The first COMMIT failed (the publish raised SinkPublishError) and was run again, not
    # taken for a wiring error that stops the topology.
    failed = [(a, t) for a, t, ok in outcomes if not ok]
    assert failed and all(a == "COMMIT" for a, _ in failed), outcomes
    assert ("COMMIT", failed[0][1], True) in outcomes
    values = sorted(r[-1] for r in memory_target(target).values())
    assert values == list(range(N))  # every record once
