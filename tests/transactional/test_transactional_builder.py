"""``TransactionalTopologyBuilder``: what it accepts, what it refuses, the two phases."""

from __future__ import annotations

from typing import Any

import pytest

from statefulbolts import (
    BaseTransactionalBolt,
    BasicBolt,
    Bolt,
    Committer,
    Fields,
    MemoryTransactionalSpout,
    Spout,
    StatefulBolt,
    TopologyError,
    TransactionalTopologyBuilder,
)


class Batch(BaseTransactionalBolt):
    def prepare(self, conf: Any, context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        self.collector, self.attempt = collector, id

    def execute(self, tuple: Any) -> None:  # noqa: A002
        """Nothing."""

    def finish_batch(self) -> None:
        """Nothing."""

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("id", "word"))


class Commit(Batch, Committer):
    """A committer."""


class Pass(BasicBolt):
    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        collector.emit(list(tuple.values))

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("id", "word"))


class BasicCommitter(Pass, Committer):
    """Storm ignored the marker on a BasicBolt; we refuse it."""


class Plain(Bolt):
    def execute(self, tuple: Any) -> None:  # noqa: A002
        """Nothing."""


class Stateful(StatefulBolt):
    def init_state(self, state: Any) -> None:
        """Nothing."""

    def execute(self, tuple: Any) -> None:  # noqa: A002
        """Nothing."""


class Words(Spout):
    def next_tuple(self) -> None:
        """Nothing."""


def builder(tid: str = "words") -> TransactionalTopologyBuilder:
    spout = MemoryTransactionalSpout({0: [["a"], ["b"]]}, ["word"], 2)
    return TransactionalTopologyBuilder(tid, "spout", spout, 2)


def test_the_docs_a_b_c_d_topology_splits_into_processing_and_commit():
    # spout -> A; A -> B (committer); A -> C; B -> C; C -> D (committer)  (§5.5)
    b = builder()
    b.set_bolt("A", Batch(), 2).shuffle_grouping("spout")
    b.set_committer_bolt("B", Batch()).global_grouping("A")
    b.set_bolt("C", Batch(), 2).shuffle_grouping("A").shuffle_grouping("B")
    b.set_bolt("D", Commit()).global_grouping("C")
    topology = b.build_topology()
    assert topology.committers == {"B", "D"}
    assert topology.commit_phase == {"B", "C", "D"}
    assert topology.processing_phase == {"spout", "A"}
    assert topology.spout is topology.topology.component("spout").obj
    assert topology.topology.component("spout").parallelism == 2
    assert not topology.topology.has_stateful_bolt  # no checkpoint spout, no $checkpoint
    assert sorted(topology.components) == ["A", "B", "C", "D", "spout"]


def test_a_committer_mixin_makes_set_bolt_a_committer_and_basic_bolts_are_welcome():
    b = builder()
    b.set_bolt("count", Commit(), 3).fields_grouping("spout", Fields("word"))
    b.set_bolt("after", Pass()).shuffle_grouping("count")
    topology = b.build_topology()
    assert topology.committers == {"count"}
    assert topology.commit_phase == {"count", "after"}


@pytest.mark.parametrize(
    ("bolt", "what"),
    [
        (Plain(), "a plain Bolt"),
        (Stateful(), "a StatefulBolt"),
        (Words(), "a Spout"),
        (object(), "builtins.object"),
    ],
)
def test_components_a_transactional_topology_cannot_run_are_refused(bolt: Any, what: str):
    with pytest.raises(TopologyError, match=f"bolt 'x': .* got {what}"):
        builder().set_bolt("x", bolt)


def test_a_basic_bolt_cannot_be_a_committer():
    with pytest.raises(TopologyError, match="bolt 'x': a BasicBolt cannot be a Committer"):
        builder().set_bolt("x", BasicCommitter())
    with pytest.raises(TopologyError, match="committer 'y': expected a BatchBolt"):
        builder().set_committer_bolt("y", Pass())


def test_unknown_and_hidden_sources_are_refused_naming_the_bolt():
    b = builder()
    b.set_bolt("count", Batch()).shuffle_grouping("nope")
    with pytest.raises(TopologyError, match="bolt 'count' subscribes to unknown component 'nope'"):
        b.build_topology()
    b = builder()
    b.set_bolt("count", Batch()).shuffle_grouping("spout/coordinator")
    with pytest.raises(TopologyError, match="bolt 'count' subscribes to 'spout/coordinator'"):
        b.build_topology()


def test_grouping_by_the_attempt_field_is_refused():
    b = builder()
    b.set_bolt("count", Batch()).fields_grouping("spout", Fields("word"))
    b.set_bolt("by_id", Batch()).fields_grouping("count", Fields("id"))
    with pytest.raises(TopologyError, match="bolt 'by_id': fields grouping on 'id', the attempt"):
        b.build_topology()


def test_the_usual_wiring_rules_hold():
    b = builder()
    b.set_bolt("count", Batch()).fields_grouping("spout", Fields("nope"))
    with pytest.raises(TopologyError, match="fields grouping on \\['nope'\\]"):
        b.build_topology()
    with pytest.raises(TopologyError, match="duplicate component id 'spout'"):
        builder().set_bolt("spout", Batch())
    with pytest.raises(TopologyError, match="exactly one spout"):
        builder().set_spout("more", Words())


def test_the_builder_checks_its_own_arguments():
    spout = MemoryTransactionalSpout({0: []}, ["word"], 2)
    with pytest.raises(TopologyError, match="transactional id must be a non-empty string"):
        TransactionalTopologyBuilder("a/b", "spout", spout)
    with pytest.raises(TopologyError, match="spout 'spout': expected a TransactionalSpout"):
        TransactionalTopologyBuilder("ok", "spout", Words())  # type: ignore[arg-type]
    with pytest.raises(TopologyError, match="parallelism must be an int >= 1"):
        TransactionalTopologyBuilder("ok", "spout", spout, 0)


class BatchWithoutId(BaseTransactionalBolt):
    """A batch bolt given a ``Bolt``'s ``prepare``: the attempt id is missing."""

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def execute(self, tuple: Any) -> None:  # noqa: A002
        """Nothing."""

    def finish_batch(self) -> None:
        """Nothing."""


def test_a_batch_bolt_whose_prepare_lacks_the_attempt_is_refused_at_set_bolt():
    b = builder()
    with pytest.raises(TopologyError) as caught:
        b.set_committer_bolt("sum", BatchWithoutId())
    assert str(caught.value) == (
        f"bolt 'sum': {__name__}.BatchWithoutId.prepare takes (conf, context, collector), but "
        "the framework calls statefulbolts.BatchBolt.prepare with (conf, context, collector, "
        "id): too many positional arguments. Give it BatchBolt.prepare's parameters"
    )
    b.set_committer_bolt("sum", Commit())  # the id is still free, and not a committer twice
