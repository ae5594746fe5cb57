"""TopologyBuilder: validation, and the checkpoint wiring (docs/protocol/checkpoint.md)."""

from __future__ import annotations

import pytest

from statefulbolts import (
    CHECKPOINT_COMPONENT_ID,
    CHECKPOINT_STREAM_ID,
    BasicBolt,
    Bolt,
    Fields,
    GlobalStreamId,
    Grouping,
    GroupingKind,
    Spout,
    StatefulBolt,
    TopologyBuilder,
    TopologyError,
)
from statefulbolts.context import TopologyContext
from statefulbolts.topology import ExecutorKind, InputSpec

CP = CHECKPOINT_STREAM_ID
ALL = Grouping(GroupingKind.ALL)
SHUFFLE = Grouping(GroupingKind.SHUFFLE)


class WordSpout(Spout):
    def next_tuple(self) -> None:
        """Never called."""

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word"))


class TwoStreamBolt(Bolt):
    def execute(self, tuple):  # noqa: A002
        """Never called."""

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word"))
        declarer.declare_stream("extra", Fields("word", "n"))


class Split(BasicBolt):
    def execute(self, tuple, collector):  # noqa: A002
        """Never called."""

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word"))


class Count(StatefulBolt):
    def init_state(self, state):
        """Never called."""

    def execute(self, tuple):  # noqa: A002
        """Never called."""

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word", "count"))


class Sink(Bolt):
    def execute(self, tuple):  # noqa: A002
        """Never called."""


def inputs(topology, cid):
    return set(topology.inputs(cid))


def inp(component, stream="default", grouping=SHUFFLE):
    return InputSpec(GlobalStreamId(component, stream), grouping)


def stateful_topology():
    b = TopologyBuilder()
    b.set_spout("s1", WordSpout())
    b.set_spout("s2", WordSpout(), 3)
    b.set_bolt("split", Split(), 2).shuffle_grouping("s1").shuffle_grouping("s2")
    b.set_bolt("two", TwoStreamBolt(), 2).shuffle_grouping("split")
    b.set_bolt("count", Count(), 2).fields_grouping("two", ["word"]).shuffle_grouping(
        "two", "extra"
    )
    b.set_bolt("mix", Sink()).shuffle_grouping("s1").all_grouping("two").global_grouping("count")
    return b.create_topology()


# ----------------------------------------------------------------- checkpoint wiring


def test_checkpoint_spout_is_added_with_parallelism_one_when_a_stateful_bolt_exists():
    topology = stateful_topology()
    spec = topology.component(CHECKPOINT_COMPONENT_ID)
    assert (spec.parallelism, spec.is_spout, spec.inputs) == (1, True, ())
    assert dict(spec.outputs) == {CP: Fields("txid", "action")}
    assert topology.has_stateful_bolt is True
    assert sorted(topology.spouts) == [CHECKPOINT_COMPONENT_ID, "s1", "s2"]
    # A framework component: no user object, so no user class (the protocol makes the spout).
    assert (spec.obj, spec.user_class) == (None, None)


def test_two_spout_sources_collapse_into_one_checkpoint_spout_input():
    topology = stateful_topology()
    assert inputs(topology, "split") == {
        inp("s1"),
        inp("s2"),
        inp(CHECKPOINT_COMPONENT_ID, CP, ALL),
    }


def test_one_checkpoint_input_per_distinct_bolt_source_with_all_grouping():
    topology = stateful_topology()
    # count reads two streams of "two": still one ("two", $checkpoint) input.
    assert inputs(topology, "count") == {
        inp("two", grouping=Grouping(GroupingKind.FIELDS, ("word",))),
        inp("two", "extra"),
        inp("two", CP, ALL),
    }
    assert inputs(topology, "two") == {inp("split"), inp("split", CP, ALL)}
    # mix reads a spout and two bolts: one input per distinct source.
    assert inputs(topology, "mix") == {
        inp("s1"),
        inp("two", grouping=ALL),
        inp("count", grouping=Grouping(GroupingKind.GLOBAL)),
        inp(CHECKPOINT_COMPONENT_ID, CP, ALL),
        inp("two", CP, ALL),
        inp("count", CP, ALL),
    }
    assert len(topology.inputs("mix")) == 6


def test_checkpoint_consumers_and_outputs():
    topology = stateful_topology()
    assert sorted(topology.consumers(GlobalStreamId(CHECKPOINT_COMPONENT_ID, CP))) == [
        ("mix", ALL),
        ("split", ALL),
    ]
    assert sorted(topology.consumers(GlobalStreamId("two", CP))) == [("count", ALL), ("mix", ALL)]
    for cid in ("split", "two", "count", "mix"):
        assert topology.component(cid).outputs[CP] == Fields("txid", "action")
    assert dict(topology.component("two").outputs) == {
        "default": Fields("word"),
        "extra": Fields("word", "n"),
        CP: Fields("txid", "action"),
    }
    assert CP not in topology.component("s1").outputs


def test_stateful_bolts_run_stateful_and_every_other_bolt_is_forwarded():
    topology = stateful_topology()
    kinds = {cid: spec.executor for cid, spec in topology.components.items()}
    assert kinds == {
        CHECKPOINT_COMPONENT_ID: ExecutorKind.PLAIN,
        "s1": ExecutorKind.PLAIN,
        "s2": ExecutorKind.PLAIN,
        "split": ExecutorKind.FORWARDER,
        "two": ExecutorKind.FORWARDER,
        "count": ExecutorKind.STATEFUL,
        "mix": ExecutorKind.FORWARDER,
    }
    assert [c for c, s in topology.components.items() if s.is_stateful] == ["count"]


def test_no_stateful_bolt_means_plain_and_no_checkpoint_wiring():
    b = TopologyBuilder()
    b.set_spout("s", WordSpout())
    b.set_bolt("split", Split()).shuffle_grouping("s")
    b.set_bolt("two", TwoStreamBolt()).shuffle_grouping("split")
    topology = b.create_topology()
    assert sorted(topology.components) == ["s", "split", "two"]
    assert topology.has_stateful_bolt is False
    assert {s.executor for s in topology.components.values()} == {ExecutorKind.PLAIN}
    assert topology.inputs("split") == (inp("s"),)
    assert topology.inputs("two") == (inp("split"),)
    assert CP not in topology.component("two").outputs


def test_context_sources_include_checkpoint_inputs():
    topology = stateful_topology()
    context = TopologyContext(topology, "t", "count", 1)
    assert set(context.this_sources) == {
        GlobalStreamId("two"),
        GlobalStreamId("two", "extra"),
        GlobalStreamId("two", CP),
    }
    assert context.this_task_id == topology.task_ids("count")[1]
    assert context.state_namespace() == "t/count-1"


# ----------------------------------------------------------------- task ids and order


def test_task_ids_are_numbered_over_sorted_component_ids_from_one():
    topology = stateful_topology()
    # sorted: $checkpointspout(1) count(2) mix(1) s1(1) s2(3) split(2) two(2)
    assert {cid: topology.task_ids(cid) for cid in sorted(topology.components)} == {
        CHECKPOINT_COMPONENT_ID: (1,),
        "count": (2, 3),
        "mix": (4,),
        "s1": (5,),
        "s2": (6, 7, 8),
        "split": (9, 10),
        "two": (11, 12),
    }
    assert [topology.component_of_task(t) for t in (1, 3, 4, 8, 12)] == [
        CHECKPOINT_COMPONENT_ID,
        "count",
        "mix",
        "s2",
        "two",
    ]


def test_topological_bolts_put_each_bolt_after_its_sources_ties_by_id():
    topology = stateful_topology()
    assert topology.topological_bolts() == ["split", "two", "count", "mix"]
    b = TopologyBuilder()
    b.set_spout("s", WordSpout())
    for name in ("d", "c", "b"):
        b.set_bolt(name, Split()).shuffle_grouping("s")
    b.set_bolt("a", Sink()).shuffle_grouping("d").shuffle_grouping("b")
    assert b.create_topology().topological_bolts() == ["b", "c", "d", "a"]


def test_basic_bolt_is_kept_as_given_and_named_by_the_users_class():
    # The description stores what the user gave; the runtime wraps it when it builds a task.
    topology = stateful_topology()
    spec = topology.component("split")
    assert type(spec.obj) is Split
    assert spec.user_class == f"{__name__}.Split"
    assert topology.component("count").user_class == f"{__name__}.Count"


def test_topology_is_immutable():
    topology = stateful_topology()
    with pytest.raises(TypeError):
        topology.components["x"] = None  # type: ignore[index]
    with pytest.raises(TypeError):
        topology.component("count").outputs["x"] = Fields("y")  # type: ignore[index]


def test_component_configuration_is_kept_per_component():
    b = TopologyBuilder()
    b.set_spout("s", WordSpout())
    b.set_bolt("count", Count()).shuffle_grouping("s").add_configuration("k", 5)
    topology = b.create_topology()
    assert dict(topology.component("count").conf) == {"k": 5}
    assert dict(topology.component("s").conf) == {}


# ----------------------------------------------------------------- errors


def builder_with_spout():
    b = TopologyBuilder()
    b.set_spout("s", WordSpout())
    return b


def test_unknown_component_is_named():
    b = builder_with_spout()
    b.set_bolt("count", Count()).shuffle_grouping("nope")
    with pytest.raises(TopologyError, match="bolt 'count' subscribes to unknown component 'nope'"):
        b.create_topology()


def test_unknown_stream_is_named():
    b = builder_with_spout()
    b.set_bolt("count", Count()).shuffle_grouping("s", "words")
    with pytest.raises(
        TopologyError, match="bolt 'count' subscribes to stream 'words' of 's', which declares"
    ):
        b.create_topology()


def test_user_cannot_subscribe_to_the_checkpoint_stream():
    b = builder_with_spout()
    b.set_bolt("a", Split()).shuffle_grouping("s")
    b.set_bolt("count", Count()).all_grouping("a", CP)
    with pytest.raises(TopologyError, match="stream '\\$checkpoint' of 'a'"):
        b.create_topology()


def test_fields_grouping_on_an_undeclared_field_is_named():
    b = builder_with_spout()
    b.set_bolt("count", Count()).fields_grouping("s", ["word", "n"])
    with pytest.raises(
        TopologyError,
        match=r"bolt 'count': fields grouping on \['n'\] but 's' stream 'default' declares "
        r"fields \['word'\]",
    ):
        b.create_topology()


def test_fields_grouping_needs_a_field():
    b = builder_with_spout()
    with pytest.raises(TopologyError, match="bolt 'count': fields_grouping on 's' needs"):
        b.set_bolt("count", Count()).fields_grouping("s", [])


def test_fields_grouping_accepts_a_single_name():
    b = builder_with_spout()
    b.set_bolt("count", Count()).fields_grouping("s", "word")
    grouping = b.create_topology().inputs("count")[0].grouping
    assert grouping == Grouping(GroupingKind.FIELDS, ("word",))


def test_subscribing_twice_to_one_stream_is_refused():
    b = builder_with_spout()
    with pytest.raises(
        TopologyError, match="bolt 'count' subscribes to 's' stream 'default' twice"
    ):
        b.set_bolt("count", Count()).shuffle_grouping("s").all_grouping("s")


@pytest.mark.parametrize("second", ["spout", "bolt"])
def test_duplicate_id_is_named(second):
    b = builder_with_spout()
    with pytest.raises(TopologyError, match="duplicate component id 's'"):
        if second == "spout":
            b.set_spout("s", WordSpout())
        else:
            b.set_bolt("s", Split())


@pytest.mark.parametrize("cid", ["$x", "__x", CHECKPOINT_COMPONENT_ID, "__acker"])
def test_reserved_ids_are_refused(cid):
    with pytest.raises(TopologyError, match=f"component id '{cid.replace('$', '.')}' is reserved"):
        TopologyBuilder().set_bolt(cid, Split())
    with pytest.raises(TopologyError, match="is reserved"):
        TopologyBuilder().set_spout(cid, WordSpout())


@pytest.mark.parametrize("cid", ["", "   ", None, 5])
def test_empty_or_non_string_ids_are_refused(cid):
    with pytest.raises(TopologyError, match="component id must be a non-empty string"):
        TopologyBuilder().set_bolt(cid, Split())  # type: ignore[arg-type]


def test_slash_in_id_is_refused():
    with pytest.raises(TopologyError, match="'a/b' may not contain '/'"):
        TopologyBuilder().set_spout("a/b", WordSpout())


def test_two_bolt_cycle_is_named():
    b = builder_with_spout()
    b.set_bolt("a", Split()).shuffle_grouping("s").shuffle_grouping("b")
    b.set_bolt("b", Split()).shuffle_grouping("a")
    with pytest.raises(TopologyError, match="topology has a cycle: a -> b -> a"):
        b.create_topology()


def test_three_bolt_cycle_is_named_in_flow_order():
    b = builder_with_spout()
    b.set_bolt("a", Split()).shuffle_grouping("c")
    b.set_bolt("b", Split()).shuffle_grouping("a")
    b.set_bolt("c", Split()).shuffle_grouping("b").shuffle_grouping("s")
    with pytest.raises(TopologyError, match="topology has a cycle: a -> b -> c -> a"):
        b.create_topology()


def test_self_subscription_is_a_cycle():
    b = builder_with_spout()
    b.set_bolt("a", Split()).shuffle_grouping("s").shuffle_grouping("a")
    with pytest.raises(TopologyError, match="bolt 'a' subscribes to itself"):
        b.create_topology()


@pytest.mark.parametrize("parallelism", [0, -1, 1.5, "2", True, None])
def test_bad_parallelism_is_named(parallelism):
    with pytest.raises(
        TopologyError, match=f"component 'x': parallelism must be an int >= 1, got {parallelism!r}"
    ):
        TopologyBuilder().set_bolt("x", Split(), parallelism)  # type: ignore[arg-type]
    with pytest.raises(TopologyError, match="component 'x': parallelism must be an int >= 1"):
        TopologyBuilder().set_spout("x", WordSpout(), parallelism)  # type: ignore[arg-type]


def test_failed_declaration_leaves_the_id_free():
    b = TopologyBuilder()
    with pytest.raises(TopologyError):
        b.set_bolt("x", Split(), 0)
    b.set_spout("s", WordSpout())
    b.set_bolt("x", Split()).shuffle_grouping("s")
    assert b.create_topology().component("x").parallelism == 1


def test_stateful_bolt_with_no_input_is_named():
    b = builder_with_spout()
    b.set_bolt("count", Count())
    with pytest.raises(TopologyError, match="stateful bolt 'count' has no input"):
        b.create_topology()


def test_non_spout_objects_are_refused_with_their_class():
    with pytest.raises(
        TopologyError, match=f"spout 's': expected a statefulbolts.Spout, got {__name__}.Split"
    ):
        TopologyBuilder().set_spout("s", Split())  # type: ignore[arg-type]


@pytest.mark.parametrize("obj", [object(), WordSpout(), "bolt"])
def test_non_bolt_objects_are_refused_with_their_class(obj):
    kind = f"{type(obj).__module__}.{type(obj).__qualname__}"
    with pytest.raises(
        TopologyError,
        match=(
            f"bolt 'b': expected a statefulbolts.Bolt, BasicBolt, StatefulBolt or "
            f"BaseWindowedBolt, got {kind}"
        ),
    ):
        TopologyBuilder().set_bolt("b", obj)  # type: ignore[arg-type]


def test_spout_cannot_subscribe():
    b = builder_with_spout()
    b.set_spout("t", WordSpout()).shuffle_grouping("s")
    with pytest.raises(TopologyError, match="spout 't' cannot subscribe to streams"):
        b.create_topology()


def test_bad_stream_declaration_is_named():
    class Twice(Bolt):
        def execute(self, tuple):  # noqa: A002
            """Never called."""

        def declare_output_fields(self, declarer):
            declarer.declare(Fields("a"))
            declarer.declare(Fields("b"))

    b = builder_with_spout()
    b.set_bolt("twice", Twice()).shuffle_grouping("s")
    with pytest.raises(TopologyError, match="component 'twice': declare_output_fields failed"):
        b.create_topology()


def test_unknown_component_lookup_lists_components():
    topology = stateful_topology()
    with pytest.raises(TopologyError, match="no component 'nope'; components are"):
        topology.component("nope")


# ------------------------------------------------------------- overridden methods' signatures
class BoltStylePrepare(BasicBolt):
    """A BasicBolt given a Bolt's ``prepare``: the newcomer's first-hour mistake."""

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tuple, collector):  # noqa: A002
        """Never called."""


class ExecuteWithoutCollector(BasicBolt):
    def execute(self, tuple):  # noqa: A002
        """Never called."""


class OpenWithoutCollector(Spout):
    def open(self, conf, context):
        """Never called."""

    def next_tuple(self) -> None:
        """Never called."""


class Lenient(StatefulBolt):
    """Extra parameters with defaults, ``*args`` and ``**kwargs`` all take what we pass."""

    def prepare(self, conf, context, collector, extra=None):
        """Never called."""

    def init_state(self, *args):
        """Never called."""

    def execute(self, tuple, **kwargs):  # noqa: A002
        """Never called."""


def test_a_basic_bolt_with_a_bolts_prepare_is_refused_at_set_bolt():
    with pytest.raises(TopologyError) as caught:
        TopologyBuilder().set_bolt("split", BoltStylePrepare(), 2)
    assert str(caught.value) == (
        f"bolt 'split': {__name__}.BoltStylePrepare.prepare takes (conf, context, collector), "
        "but the framework calls statefulbolts.BasicBolt.prepare with (conf, context): missing "
        "a required argument: 'collector'. Give it BasicBolt.prepare's parameters"
    )


def test_too_few_parameters_are_refused_for_bolts_and_spouts():
    with pytest.raises(TopologyError) as bolt:
        TopologyBuilder().set_bolt("split", ExecuteWithoutCollector())
    assert str(bolt.value) == (
        f"bolt 'split': {__name__}.ExecuteWithoutCollector.execute takes (tuple), but the "
        "framework calls statefulbolts.BasicBolt.execute with (tuple, collector): too many "
        "positional arguments. Give it BasicBolt.execute's parameters"
    )
    with pytest.raises(TopologyError) as spout:
        TopologyBuilder().set_spout("words", OpenWithoutCollector())
    assert str(spout.value) == (
        f"spout 'words': {__name__}.OpenWithoutCollector.open takes (conf, context), but the "
        "framework calls statefulbolts.Spout.open with (conf, context, collector): too many "
        "positional arguments. Give it Spout.open's parameters"
    )


def test_overrides_that_take_what_we_pass_are_accepted():
    b = builder_with_spout()
    b.set_bolt("count", Lenient()).shuffle_grouping("s")
    assert "count" in b.create_topology().components


def test_a_refused_override_leaves_the_id_free():
    b = TopologyBuilder()
    with pytest.raises(TopologyError):
        b.set_bolt("split", BoltStylePrepare())
    b.set_bolt("split", Split())
