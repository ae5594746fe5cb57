"""``statefulbolts.namespaces``: every layout of a namespace is made and read back in one place."""

from __future__ import annotations

import pytest

from statefulbolts.context import TopologyContext
from statefulbolts.deadletter import deadletter_namespace
from statefulbolts.namespaces import (
    TaskNamespace,
    checkpoint_namespace,
    coordinator_namespace,
    partition_namespace,
    partition_of,
    record_namespace,
    task_name,
    topology_prefix,
    transactional_id_of,
    transactional_prefix,
)
from statefulbolts.state import shape_namespace
from statefulbolts.testing import make_context
from statefulbolts.topology import CHECKPOINT_COMPONENT_ID
from statefulbolts.transactional._owner import task_owner


@pytest.mark.parametrize(
    "namespace",
    [
        TaskNamespace.of_topology("wc", "count", 0),
        TaskNamespace.of_topology("wc", "split-words", 17),
        TaskNamespace.of_transactional("words", "count", 3),
        TaskNamespace.of_transactional("words-2", "count-by-1", 1, "default"),
    ],
)
def test_a_task_namespace_reads_back_as_itself(namespace: TaskNamespace) -> None:
    assert TaskNamespace.parse(namespace.prefix, str(namespace)) == namespace


@pytest.mark.parametrize(
    "text",
    [
        "wc/$checkpointspout-0",  # a framework record
        "wc/$shape",
        "wc/count",  # no task index
        "wc/count-01",  # a task index written otherwise than str(int)
        "wc/count-x",
        "wc/-1",  # no component
        "wc/count-1/",  # an empty map name
        "wc/count-1/a/b",  # a map below a map
        "other/count-1",  # another topology
        "wc/count-٣",  # a digit, but not an ASCII one
    ],
)
def test_what_is_not_a_task_namespace_parses_to_none(text: str) -> None:
    assert TaskNamespace.parse("wc/", text) is None


def test_the_layouts_are_spelled_as_they_are_stored() -> None:
    prefix = transactional_prefix("words")
    assert (topology_prefix("wc"), prefix) == ("wc/", "$transactional/words/")
    assert str(TaskNamespace.of_topology("wc", "count", 2)) == "wc/count-2"
    assert str(TaskNamespace.of_transactional("words", "count", 2, "m")) == (
        "$transactional/words/count-2/m"
    )
    assert task_name("count", 2) == task_owner("count", 2) == "count-2"
    assert record_namespace("wc/", "shape") == shape_namespace("wc/") == "wc/$shape"
    assert coordinator_namespace(prefix) == "$transactional/words/coordinator"
    assert partition_namespace(prefix, 4) == "$transactional/words/partition-4"
    assert deadletter_namespace(topology="wc") == "wc/$deadletter"
    assert deadletter_namespace(transactional_id="words") == "$transactional/words/$deadletter"


def test_the_checkpoint_spout_namespace_is_its_component_task_zero() -> None:
    # What the runtime opens for the spout's task 0 (TopologyContext) is what tools read.
    assert checkpoint_namespace("wc/") == f"wc/{CHECKPOINT_COMPONENT_ID}-0"
    assert TaskNamespace.parse("wc/", checkpoint_namespace("wc/")) is None


def test_a_task_context_names_its_namespace_through_the_type() -> None:
    context: TopologyContext = make_context("count", task_index=1, parallelism=2)
    parsed = TaskNamespace.parse(topology_prefix(context.topology_name), context.state_namespace())
    assert parsed == TaskNamespace.of_topology(context.topology_name, "count", 1)


def test_partitions_are_found_and_nothing_else() -> None:
    prefix = transactional_prefix("words")
    assert partition_of(prefix, partition_namespace(prefix, 12)) == 12
    for other in ("partitions", "partition-", "partition-x", "count-1/default", "coordinator"):
        assert partition_of(prefix, prefix + other) is None
    assert partition_of(prefix, "$transactional/other/partition-1") is None


def test_a_prefix_says_whose_it_is() -> None:
    assert transactional_id_of(transactional_prefix("top-n-words")) == "top-n-words"
    assert transactional_id_of(topology_prefix("wc")) is None
    assert transactional_id_of("$transactional/") is None


def test_moving_a_task_namespace_keeps_the_rest() -> None:
    ns = TaskNamespace.of_transactional("words", "count", 1, "default")
    assert str(ns.with_prefix("wc/$evolve/")) == "wc/$evolve/count-1/default"
    assert str(ns.with_task(0).with_component("counter")) == (
        "$transactional/words/counter-0/default"
    )
    assert str(ns.with_map(None)) == "$transactional/words/count-1"
