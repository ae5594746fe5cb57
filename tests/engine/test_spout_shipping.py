"""Spouts run in the driver: the tasks of a checkpoint topology never load a spout's object."""

from __future__ import annotations

import collections
import os
from typing import Any

import pytest
import topologies as topo

from examples.corpus import sentence, words
from examples.wordcount import SentenceSpout, SplitSentence, WordCount
from statefulbolts import Fields, LocalCluster, TopologyBuilder, TopologyContext


class DriverOnlySpout(SentenceSpout):
    """A spout that cannot be loaded in any process but the one that made it (the driver)."""

    def __init__(self, count: int) -> None:
        super().__init__(count)
        self.made_in = os.getpid()

    def __setstate__(self, state: dict[str, Any]) -> None:
        if state["made_in"] != os.getpid():
            msg = f"a spout's object was loaded in process {os.getpid()}, not the driver"
            raise RuntimeError(msg)
        vars(self).update(state)


def _wordcount(spout: SentenceSpout) -> Any:
    builder = TopologyBuilder()
    builder.set_spout("sentences", spout)
    builder.set_bolt("split", SplitSentence(), 2).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount(), 2).fields_grouping("split", Fields("word"))
    return builder.create_topology()


@pytest.mark.spark
def test_tasks_never_load_a_spouts_object(spark: Any) -> None:
    cluster = LocalCluster(spark=spark)
    name = topo.new_key("driver-spout")
    handle = cluster.submit_topology(name, {}, _wordcount(DriverOnlySpout(60)))
    try:
        handle.await_idle(120)
        counts = handle.read_state("count")
    finally:
        handle.kill()
    assert counts == dict(collections.Counter(w for i in range(60) for w in words(sentence(i))))


def test_the_topology_without_spout_objects_keeps_every_bolt_and_all_wiring() -> None:
    spout = SentenceSpout(3)
    topology = _wordcount(spout)
    bare = topology.without_spout_objects()
    assert bare.component("sentences").obj is None
    assert topology.component("sentences").obj is spout
    for bolt in ("split", "count"):
        assert bare.component(bolt) is topology.component(bolt)
        assert bare.inputs(bolt) == topology.inputs(bolt)
    assert bare.component("sentences").outputs == topology.component("sentences").outputs
    assert [bare.task_ids(c) for c in bare.components] == [
        topology.task_ids(c) for c in topology.components
    ]
    # A bolt's context reads the same from either.
    context, full = (TopologyContext(t, "t", "count", 1) for t in (bare, topology))
    assert context.this_component_tasks == full.this_component_tasks
    assert context.this_sources == full.this_sources
    for source in full.this_sources:
        assert context.sending_tasks(source) == full.sending_tasks(source)
    assert context.component_output_fields("sentences") == Fields("sentence")
