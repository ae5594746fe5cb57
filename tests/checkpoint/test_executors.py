"""StatefulBoltExecutor and CheckpointTupleForwarder, driven without Spark."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from checkpoint import Action, CheckpointTupleForwarder, StatefulBoltExecutor
from providers import (
    InMemoryKeyValueState,
    InMemoryKeyValueStateProvider,
    KeyValueState,
    StateTransactionError,
)
from statefulbolts import (
    CHECKPOINT_COMPONENT_ID,
    CHECKPOINT_STREAM_ID,
    BasicBolt,
    Bolt,
    Fields,
    Spout,
    TopologyBuilder,
)
from statefulbolts.components import BasicBoltExecutor, OutputFieldsDeclarer
from statefulbolts.context import TopologyContext
from statefulbolts.errors import UnanchoredEmitError
from statefulbolts.testing import (
    RecordingCollector,
    RecordingState,
    RecordingStatefulBolt,
    checkpoint_barrier,
    checkpoint_tuple,
    drive,
    make_context,
    make_tuple,
)

INITSTATE, PREPARE, COMMIT, ROLLBACK = (
    Action.INITSTATE,
    Action.PREPARE,
    Action.COMMIT,
    Action.ROLLBACK,
)


class Rig:
    """A StatefulBoltExecutor around a RecordingStatefulBolt, over a recording in-memory state."""

    def __init__(
        self,
        context: TopologyContext | None = None,
        *,
        emit: bool = False,
        raise_in: tuple[str, ...] = (),
        state_raise_in: tuple[str, ...] = (),
    ) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.context = context or make_context("count")
        self.bolt = RecordingStatefulBolt(self.calls, emit=emit, raise_in=raise_in)
        self.executor = StatefulBoltExecutor(self.bolt)
        self.out = RecordingCollector()
        self.inner = InMemoryKeyValueState("test/count-0")
        self.state = RecordingState(self.inner, self.calls, raise_in=state_raise_in)
        self.executor.prepare({}, self.context, self.out, self.state)

    def drive(self, *steps: Any) -> None:
        drive(self.executor, self.context, steps)

    def cp(self, action: Action, txid: int) -> Any:
        """Deliver a one-task barrier and return its tuple (for the one-spout context)."""
        (cp,) = checkpoint_barrier(self.context, action, txid)
        self.executor.execute(cp)
        return cp

    def forwarded(self) -> list[list[Any]]:
        return [e.values for e in self.out.on_stream(CHECKPOINT_STREAM_ID)]


class ValueSpout(Spout):
    def next_tuple(self) -> None:
        """Never called."""

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("value"))


class PassBolt(Bolt):
    def execute(self, tuple):  # noqa: A002
        """Never called."""

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("value"))


def fan_in_context() -> TopologyContext:
    """``count`` fed by bolt ``a`` (2 tasks) and bolt ``b`` (3 tasks)."""
    builder = TopologyBuilder()
    builder.set_spout("s", ValueSpout())
    builder.set_bolt("a", PassBolt(), 2).shuffle_grouping("s")
    builder.set_bolt("b", PassBolt(), 3).shuffle_grouping("s")
    builder.set_bolt("count", RecordingStatefulBolt(), 1).shuffle_grouping("a").shuffle_grouping(
        "b"
    )
    return TopologyContext(builder.create_topology(), "test", "count", 0)


# ----------------------------------------------------------------- barrier counting


def test_barrier_waits_for_all_five_input_tasks_of_a_two_and_a_three_task_bolt():
    rig = Rig(fan_in_context())
    barrier = checkpoint_barrier(rig.context, INITSTATE, -1)
    assert [(t.source_component, t.source_task) for t in barrier] == [
        ("a", 2),
        ("a", 3),
        ("b", 4),
        ("b", 5),
        ("b", 6),
    ]
    for cp in barrier[:4]:
        rig.executor.execute(cp)
    assert rig.calls == [("prepare",)]
    assert rig.out.acked == barrier[:4]  # partial arrivals are acked at once, not forwarded
    assert rig.out.emitted == []
    rig.executor.execute(barrier[4])
    assert rig.calls == [("prepare",), ("init_state",)]
    assert rig.out.acked == barrier
    assert rig.forwarded() == [[-1, "INITSTATE"]]
    assert rig.out.emitted[0].anchors == [barrier[4]]


def test_bolt_fed_by_spouts_only_waits_for_the_single_checkpoint_spout_task():
    rig = Rig(make_context("count", sources={"s1": 2, "s2": 3}))
    barrier = checkpoint_barrier(rig.context, INITSTATE, -1)
    assert [(t.source_component, t.source_task) for t in barrier] == [(CHECKPOINT_COMPONENT_ID, 1)]
    rig.executor.execute(barrier[0])
    assert rig.calls == [("prepare",), ("init_state",)]


def test_duplicate_from_one_task_does_not_stand_in_for_a_missing_one_unlike_storm():
    rig = Rig(fan_in_context())
    barrier = checkpoint_barrier(rig.context, INITSTATE, -1)
    for cp in barrier[:4]:
        rig.executor.execute(cp)
    rig.executor.execute(barrier[3])  # a duplicate of task 5's checkpoint; Storm's count hits 5
    assert rig.calls == [("prepare",)]
    assert rig.out.emitted == []
    rig.executor.execute(barrier[4])
    assert rig.calls == [("prepare",), ("init_state",)]
    assert rig.forwarded() == [[-1, "INITSTATE"]]


def test_partial_counts_are_cleared_once_a_checkpoint_is_processed_unlike_storm():
    rig = Rig(fan_in_context())
    rig.drive((INITSTATE, -1))
    first, *rest = checkpoint_barrier(rig.context, PREPARE, 0)
    for cp in rest:  # task 2's PREPARE(0) is lost; the other four arrive
        rig.executor.execute(cp)
    rig.drive((ROLLBACK, 0), (INITSTATE, -1))  # the spout recovers
    del rig.calls[:]
    # The new round's first arrival (task 2) must not complete with the stale arrivals of 3..6.
    new_first, *new_rest = checkpoint_barrier(rig.context, PREPARE, 0)
    rig.executor.execute(new_first)
    assert rig.calls == []  # Storm's leftover count (4 + 1 = 5) would run PREPARE here
    for cp in new_rest[:-1]:
        rig.executor.execute(cp)
    assert rig.calls == []
    rig.executor.execute(new_rest[-1])
    assert rig.calls == [("pre_prepare", 0), ("state.prepare_commit", 0)]
    assert rig.forwarded()[-1] == [0, "PREPARE"]
    assert rig.out.emitted[-1].anchors == [new_rest[-1]]


def test_checkpoints_of_different_actions_are_counted_separately():
    rig = Rig(fan_in_context())
    rig.drive((INITSTATE, -1))
    prepare = checkpoint_barrier(rig.context, PREPARE, 0)
    commit = checkpoint_barrier(rig.context, COMMIT, 0)
    for cp in prepare[:4] + commit[4:]:
        rig.executor.execute(cp)
    assert rig.calls == [("prepare",), ("init_state",)]


# ----------------------------------------------------------------- INITSTATE and buffering


def test_data_before_initstate_is_buffered_then_executed_in_arrival_order():
    rig = Rig(emit=True)
    t1, t2, t3 = (make_tuple([w, i]) for i, w in enumerate("xyz"))
    rig.drive(t1, t2, t3)
    assert rig.calls == [("prepare",)]
    assert rig.out.events == []  # neither executed, acked nor failed
    cp = rig.cp(INITSTATE, -1)
    assert rig.calls == [
        ("prepare",),
        ("init_state",),
        ("execute", ["x", 0]),
        ("execute", ["y", 1]),
        ("execute", ["z", 2]),
    ]
    assert [(kind, getattr(item, "values", None)) for kind, item in rig.out.events] == [
        ("emit", ["x", 0]),
        ("emit", ["y", 1]),
        ("emit", ["z", 2]),
        ("emit", [-1, "INITSTATE"]),
        ("ack", [-1, "INITSTATE"]),
    ]
    assert rig.out.acked == [cp]  # the data acks are held back until COMMIT
    assert [e.anchors for e in rig.out.emitted[:3]] == [[t1], [t2], [t3]]
    assert rig.bolt.state is rig.state
    assert dict(rig.state) == {"x": [0], "y": [1], "z": [2]}


def test_second_initstate_is_ignored_but_forwarded():
    rig = Rig()
    rig.drive((INITSTATE, -1), (PREPARE, 0), (COMMIT, 0))
    del rig.calls[:]
    rig.cp(INITSTATE, 0)
    assert rig.calls == []
    assert rig.forwarded()[-1] == [0, "INITSTATE"]


def test_data_after_initstate_is_executed_at_once():
    rig = Rig()
    rig.cp(INITSTATE, -1)
    rig.drive(make_tuple(["k", 1]))
    assert rig.calls[-1] == ("execute", ["k", 1])
    assert rig.state.get("k") == [1]


def test_initialize_runs_initstate_body_once():
    rig = Rig()
    t = make_tuple(["k", 1])
    rig.drive(t)
    rig.executor.initialize()
    rig.executor.initialize()
    assert rig.calls == [("prepare",), ("init_state",), ("execute", ["k", 1])]
    assert rig.executor.initialized is True
    assert rig.out.emitted == []  # no checkpoint tuple, nothing forwarded


# ----------------------------------------------------------------- hook order


def test_exact_hook_order_for_every_action():
    rig = Rig()
    rig.drive((INITSTATE, -1), make_tuple(["a", 1]), (PREPARE, 0), (COMMIT, 0))
    rig.drive(make_tuple(["b", 2]), (PREPARE, 1), (ROLLBACK, 1), (INITSTATE, 0))
    assert rig.calls == [
        ("prepare",),
        ("init_state",),
        ("execute", ["a", 1]),
        ("pre_prepare", 0),
        ("state.prepare_commit", 0),
        ("pre_commit", 0),
        ("state.commit", 0),
        ("execute", ["b", 2]),
        ("pre_prepare", 1),
        ("state.prepare_commit", 1),
        ("pre_rollback",),
        ("state.rollback",),
    ]
    assert rig.forwarded() == [
        [-1, "INITSTATE"],
        [0, "PREPARE"],
        [0, "COMMIT"],
        [1, "PREPARE"],
        [1, "ROLLBACK"],
        [0, "INITSTATE"],
    ]
    assert dict(rig.state) == {"a": [1]}  # b was rolled back


def test_each_checkpoint_is_forwarded_then_acked():
    rig = Rig()
    cp = rig.cp(INITSTATE, -1)
    fwd = rig.out.emitted[0]
    assert rig.out.events == [("emit", fwd), ("ack", cp)]
    assert (fwd.stream, fwd.values, fwd.anchors) == (CHECKPOINT_STREAM_ID, [-1, "INITSTATE"], [cp])


def test_forwarded_checkpoint_is_anchored_to_the_incoming_one_for_every_action():
    rig = Rig()
    sent = [rig.cp(a, t) for a, t in [(INITSTATE, -1), (PREPARE, 0), (COMMIT, 0), (ROLLBACK, 1)]]
    assert [e.anchors for e in rig.out.emitted] == [[cp] for cp in sent]
    assert all(e.anchors[0] is cp for e, cp in zip(rig.out.emitted, sent, strict=True))


def test_retried_commit_is_processed_again_and_is_idempotent_on_the_state():
    rig = Rig()
    rig.drive((INITSTATE, -1), make_tuple(["a", 1]), (PREPARE, 0), (COMMIT, 0))
    rig.drive((COMMIT, 0))  # the spout re-sends COMMIT(0) while recovering
    assert rig.calls[-4:] == [
        ("pre_commit", 0),
        ("state.commit", 0),
        ("pre_commit", 0),
        ("state.commit", 0),
    ]
    assert rig.out.failed == []
    assert rig.forwarded()[-2:] == [[0, "COMMIT"], [0, "COMMIT"]]
    assert rig.inner.committed_txid == 0


# ----------------------------------------------------------------- deferred acks


def test_ack_before_prepare_is_released_only_at_commit():
    rig = Rig()
    rig.cp(INITSTATE, -1)
    init_acks = list(rig.out.acked)
    t1 = make_tuple(["a", 1])
    rig.drive(t1)
    assert rig.out.acked == init_acks  # held back by the ack-tracking collector
    prepare_cp = rig.cp(PREPARE, 0)
    t2 = make_tuple(["b", 2])
    rig.drive(t2)  # acked after PREPARE(0): waits for the next PREPARE/COMMIT pair
    assert rig.out.acked == [*init_acks, prepare_cp]
    commit_cp = rig.cp(COMMIT, 0)
    assert rig.out.acked == [*init_acks, prepare_cp, t1, commit_cp]
    prepare1 = rig.cp(PREPARE, 1)
    commit1 = rig.cp(COMMIT, 1)
    assert rig.out.acked[-3:] == [prepare1, t2, commit1]
    assert rig.out.failed == []


def test_rollback_fails_prepared_and_queued_acks():
    rig = Rig()
    rig.drive((INITSTATE, -1))
    t1, t2 = make_tuple(["a", 1]), make_tuple(["b", 2])
    rig.drive(t1, (PREPARE, 0), t2)
    acked_before = list(rig.out.acked)
    rb = rig.cp(ROLLBACK, 0)
    assert rig.out.failed == [t1, t2]
    assert rig.out.acked == [*acked_before, rb]
    # Nothing is left to release: a later COMMIT acks none of them.
    rig.drive((INITSTATE, -1), (PREPARE, 0), (COMMIT, 0))
    assert t1 not in rig.out.acked and t2 not in rig.out.acked


def test_rollback_before_initstate_keeps_buffered_tuples():
    rig = Rig()
    t = make_tuple(["a", 1])
    rig.drive(t, (ROLLBACK, 0))
    assert rig.out.failed == []
    assert rig.calls == [("prepare",), ("pre_rollback",), ("state.rollback",)]
    rig.drive((INITSTATE, -1))
    assert rig.calls[-2:] == [("init_state",), ("execute", ["a", 1])]


def test_bolt_fail_goes_through_at_once():
    class Failing(RecordingStatefulBolt):
        def execute(self, tuple):  # noqa: A002
            self.collector.fail(tuple)

    context = make_context("count")
    bolt, out = Failing(), RecordingCollector()
    executor = StatefulBoltExecutor(bolt)
    executor.prepare({}, context, out, InMemoryKeyValueState("t/count-0"))
    t = make_tuple(["a", 1])
    drive(executor, context, [(INITSTATE, -1), t])
    assert out.failed == [t]


def test_release_prepared_acks_acks_the_prepared_set_once():
    rig = Rig()
    t1, t2 = make_tuple(["a", 1]), make_tuple(["b", 2])
    rig.drive((INITSTATE, -1), t1, (PREPARE, 0), t2)
    before = list(rig.out.acked)
    rig.executor.release_prepared_acks()
    assert rig.out.acked == [*before, t1]  # t2 was acked after PREPARE: not prepared yet
    commit_cp = rig.cp(COMMIT, 0)
    assert rig.out.acked == [*before, t1, commit_cp]  # t1 is not acked twice


# ----------------------------------------------------------------- refused and stale checkpoints


def test_prepare_before_initstate_fails_the_checkpoint_and_forwards_nothing():
    rig = Rig()
    t = make_tuple(["a", 1])
    rig.drive(t)
    cp = rig.cp(PREPARE, 0)
    assert rig.out.failed == [cp]
    assert rig.out.acked == []
    assert rig.out.emitted == []
    assert rig.out.errors == []
    assert rig.calls == [("prepare",)]
    # The spout then recovers: ROLLBACK(0) and INITSTATE(-1) are accepted, the tuple runs.
    rig.drive((ROLLBACK, 0), (INITSTATE, -1))
    assert rig.calls[-2:] == [("init_state",), ("execute", ["a", 1])]


def test_stale_txid_is_acked_and_dropped_without_any_hook():
    rig = Rig()
    rig.drive((INITSTATE, 4), (PREPARE, 5), (COMMIT, 5))
    calls, emitted = list(rig.calls), list(rig.out.emitted)
    for action in (PREPARE, COMMIT, ROLLBACK, INITSTATE):
        cp = rig.cp(action, 4)
        assert rig.out.acked[-1] is cp
    assert rig.calls == calls
    assert rig.out.emitted == emitted
    assert rig.out.failed == []


def test_after_rollback_initstate_and_prepare_of_the_same_txid_are_accepted():
    rig = Rig()
    rig.drive((INITSTATE, -1), (PREPARE, 0), (COMMIT, 0), (PREPARE, 1), (ROLLBACK, 1))
    del rig.calls[:]
    rig.drive((INITSTATE, 0), (PREPARE, 1), (COMMIT, 1))
    assert rig.calls == [
        ("pre_prepare", 1),
        ("state.prepare_commit", 1),
        ("pre_commit", 1),
        ("state.commit", 1),
    ]
    assert rig.forwarded()[-3:] == [[0, "INITSTATE"], [1, "PREPARE"], [1, "COMMIT"]]
    assert rig.out.failed == []


@pytest.mark.parametrize(
    ("hook_raise", "state_raise", "action", "expected_tail"),
    [
        (("pre_prepare",), (), PREPARE, [("pre_prepare", 0)]),
        ((), ("state.prepare_commit",), PREPARE, [("pre_prepare", 0), ("state.prepare_commit", 0)]),
        (("pre_commit",), (), COMMIT, [("pre_commit", 0)]),
        ((), ("state.commit",), COMMIT, [("pre_commit", 0), ("state.commit", 0)]),
        (("pre_rollback",), (), ROLLBACK, [("pre_rollback",)]),
        ((), ("state.rollback",), ROLLBACK, [("pre_rollback",), ("state.rollback",)]),
        (("init_state",), (), INITSTATE, [("init_state",)]),
    ],
)
def test_exception_in_a_hook_or_state_call_fails_the_checkpoint_and_reports(
    hook_raise, state_raise, action, expected_tail
):
    rig = Rig(raise_in=hook_raise, state_raise_in=state_raise)
    if action is not INITSTATE:
        rig.drive((INITSTATE, -1))
        if action is COMMIT:
            rig.drive((PREPARE, 0))
    t = make_tuple(["a", 1])
    rig.drive(t)
    before_calls, before_emits, before_acks = (
        len(rig.calls),
        len(rig.out.emitted),
        len(rig.out.acked),
    )
    cp = rig.cp(action, 0 if action is not INITSTATE else -1)
    assert rig.calls[before_calls:] == expected_tail
    assert rig.out.failed == [cp]
    assert [str(e) for e in rig.out.errors] == [f"{(hook_raise + state_raise)[0]} failed"]
    assert len(rig.out.emitted) == before_emits  # nothing forwarded
    assert len(rig.out.acked) == before_acks  # and no held-back ack released


def test_failed_checkpoint_does_not_advance_last_txid():
    rig = Rig(state_raise_in=("state.commit",))
    rig.drive((INITSTATE, 4), (PREPARE, 5), (COMMIT, 5))
    assert len(rig.out.failed) == 1
    rig.state.raise_in = frozenset()
    del rig.calls[:]
    # A PREPARE(5) is still accepted (the failed COMMIT(5) did not move last txid to 5)...
    rig.drive((PREPARE, 5))
    assert rig.calls == [("pre_prepare", 5), ("state.prepare_commit", 5)]


def test_unknown_action_name_raises():
    rig = Rig()
    with pytest.raises(ValueError, match="NOPE"):
        rig.executor.execute(checkpoint_tuple("NOPE", 0))


# ----------------------------------------------------------------- anchoring rules


class UnanchoredBolt(RecordingStatefulBolt):
    def __init__(self, anchors: Any = None) -> None:
        super().__init__()
        self.anchors = anchors

    def execute(self, tuple):  # noqa: A002
        self.collector.emit(["out", 1], anchors=self.anchors)
        self.collector.ack(tuple)


def test_unanchored_emit_from_a_stateful_bolt_raises_naming_component_and_task():
    context = make_context("count", task_index=1, parallelism=2)
    executor, out = StatefulBoltExecutor(UnanchoredBolt()), RecordingCollector()
    executor.prepare({}, context, out, InMemoryKeyValueState("t/count-1"))
    drive(executor, context, [(INITSTATE, -1)])
    assert context.this_task_id != 1  # the message names the task index, as the docs do
    with pytest.raises(UnanchoredEmitError, match="bolt 'count' task 1 emitted"):
        drive(executor, context, [make_tuple(["a", 1])])
    assert out.on_stream("default") == []


def test_explicit_empty_anchors_are_allowed():
    context = make_context("count")
    executor, out = StatefulBoltExecutor(UnanchoredBolt(anchors=[])), RecordingCollector()
    executor.prepare({}, context, out, InMemoryKeyValueState("t/count-0"))
    drive(executor, context, [(INITSTATE, -1), make_tuple(["a", 1])])
    (emitted,) = out.on_stream("default")
    assert (emitted.values, emitted.anchors) == (["out", 1], [])


class PlainUnanchored(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tuple):  # noqa: A002
        self.collector.emit([tuple.get_value(0)])

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("value"))


def test_unanchored_emit_from_a_forwarded_bolt_raises_naming_component_and_task():
    context = make_context("split", stateful=False, checkpointed=True)
    forwarder = CheckpointTupleForwarder(PlainUnanchored())
    forwarder.prepare({}, context, RecordingCollector())
    with pytest.raises(UnanchoredEmitError, match=f"bolt 'split' task {context.this_task_index} "):
        forwarder.execute(make_tuple(["x"]))


# ----------------------------------------------------------------- the forwarder


class Split(BasicBolt):
    def execute(self, tuple, collector):  # noqa: A002
        for word in tuple.get_value(0).split():
            collector.emit([word])

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word"))


def forwarder_rig() -> tuple[CheckpointTupleForwarder, TopologyContext, RecordingCollector]:
    context = make_context("split", stateful=False, checkpointed=True)
    forwarder = CheckpointTupleForwarder(BasicBoltExecutor(Split()))
    out = RecordingCollector()
    forwarder.prepare({}, context, out)
    return forwarder, context, out


def test_forwarder_executes_data_at_once_even_before_initstate():
    forwarder, context, out = forwarder_rig()
    t = make_tuple(["a b"])
    forwarder.execute(t)
    assert [(e.values, e.anchors) for e in out.emitted] == [(["a"], [t]), (["b"], [t])]
    assert out.acked == [t]  # acks go straight through


def test_forwarder_forwards_every_action_anchored_then_acks():
    forwarder, context, out = forwarder_rig()
    steps = [(INITSTATE, -1), (PREPARE, 0), (COMMIT, 0), (PREPARE, 1), (ROLLBACK, 1)]
    sent = [checkpoint_barrier(context, a, t)[0] for a, t in steps]
    for cp in sent:
        forwarder.execute(cp)
    assert [(e.stream, e.values) for e in out.emitted] == [
        (CHECKPOINT_STREAM_ID, [-1, "INITSTATE"]),
        (CHECKPOINT_STREAM_ID, [0, "PREPARE"]),
        (CHECKPOINT_STREAM_ID, [0, "COMMIT"]),
        (CHECKPOINT_STREAM_ID, [1, "PREPARE"]),
        (CHECKPOINT_STREAM_ID, [1, "ROLLBACK"]),
    ]
    assert [e.anchors for e in out.emitted] == [[cp] for cp in sent]
    assert out.acked == sent
    assert out.failed == []


def test_forwarder_prepare_is_not_refused_before_initstate():
    forwarder, context, out = forwarder_rig()
    drive(forwarder, context, [(PREPARE, 0)])
    assert [e.values for e in out.emitted] == [[0, "PREPARE"]]
    assert out.failed == []


def test_forwarder_barrier_counts_input_tasks():
    builder = TopologyBuilder()
    builder.set_spout("s", ValueSpout())
    builder.set_bolt("a", PassBolt(), 2).shuffle_grouping("s")
    builder.set_bolt("split", BasicBoltExecutor(Split()).bolt, 1).shuffle_grouping("a")
    builder.set_bolt("count", RecordingStatefulBolt(fields=("word",)), 1).shuffle_grouping("split")
    context = TopologyContext(builder.create_topology(), "test", "split", 0)
    forwarder, out = CheckpointTupleForwarder(BasicBoltExecutor(Split())), RecordingCollector()
    forwarder.prepare({}, context, out)
    first, second = checkpoint_barrier(context, PREPARE, 3)
    forwarder.execute(first)
    assert out.emitted == [] and out.acked == [first]
    forwarder.execute(second)
    assert [(e.values, e.anchors) for e in out.emitted] == [([3, "PREPARE"], [second])]


def test_forwarder_drops_stale_checkpoints():
    forwarder, context, out = forwarder_rig()
    drive(forwarder, context, [(PREPARE, 5), (COMMIT, 5)])
    stale = checkpoint_barrier(context, PREPARE, 4)[0]
    forwarder.execute(stale)
    assert [e.values for e in out.emitted] == [[5, "PREPARE"], [5, "COMMIT"]]
    assert out.acked[-1] is stale


# ----------------------------------------------------------------- construction


def test_executors_declare_the_bolts_streams_plus_checkpoint():
    for executor in (
        StatefulBoltExecutor(RecordingStatefulBolt(fields=("word", "count"))),
        CheckpointTupleForwarder(BasicBoltExecutor(Split())),
    ):
        declarer = OutputFieldsDeclarer()
        executor.declare_output_fields(declarer)
        assert declarer.streams[CHECKPOINT_STREAM_ID] == Fields("txid", "action")
        assert set(declarer.streams) == {"default", CHECKPOINT_STREAM_ID}


def test_stateful_executor_refuses_a_non_stateful_bolt():
    with pytest.raises(TypeError, match="needs a StatefulBolt, got .*PassBolt"):
        StatefulBoltExecutor(PassBolt())  # type: ignore[arg-type]


def test_stateful_executor_gets_its_state_from_the_provider_under_its_namespace():
    name = f"exec-{uuid.uuid4().hex}"
    context = make_context("count", task_index=1, parallelism=2, topology_name=name)
    try:
        executor = StatefulBoltExecutor(RecordingStatefulBolt())
        executor.prepare({}, context, RecordingCollector())
        state = executor.state
        assert isinstance(state, InMemoryKeyValueState)
        assert state.namespace == f"{name}/count-1"
        drive(executor, context, [(INITSTATE, -1), make_tuple(["k", 7]), (PREPARE, 0), (COMMIT, 0)])
        fresh = InMemoryKeyValueStateProvider().new_state(f"{name}/count-1", {})
        assert dict(fresh) == {"k": [7]}
    finally:
        InMemoryKeyValueStateProvider.drop(name + "/")


def test_commit_without_prepare_fails_the_checkpoint_through_the_state():
    rig = Rig()
    cp = rig.cp(COMMIT, 0)  # COMMIT before INITSTATE is processed, as in Storm
    assert rig.calls == [("prepare",), ("pre_commit", 0), ("state.commit", 0)]
    assert rig.out.failed == [cp]
    assert isinstance(rig.out.errors[0], StateTransactionError)


# ----------------------------------------------------------------- the harness itself


def test_make_context_kinds():
    assert make_context("x").topology.component("x").executor.value == "stateful"
    forwarded = make_context("x", stateful=False, checkpointed=True)
    assert forwarded.topology.component("x").executor.value == "forwarder"
    plain = make_context("x", stateful=False)
    assert plain.topology.component("x").executor.value == "plain"
    assert checkpoint_barrier(plain, PREPARE, 0) == []
    with pytest.raises(ValueError, match="always checkpointed"):
        make_context("x", checkpointed=False)


def test_drive_accepts_action_names_and_enum_members():
    rig = Rig()
    rig.drive(("INITSTATE", -1), (PREPARE, 0), ("COMMIT", 0))
    assert rig.forwarded() == [[-1, "INITSTATE"], [0, "PREPARE"], [0, "COMMIT"]]


def test_recording_state_logs_supersede_and_uses_the_wrapped_states_own():
    calls: list[tuple[Any, ...]] = []
    inner = InMemoryKeyValueState("test/count-0")
    inner.put("k", 1)
    inner.prepare_commit(2)
    state = RecordingState(inner, calls)
    state.supersede_prepared(2)
    assert calls == [("state.supersede_prepared", 2)]  # not the default's state.rollback
    assert (inner.prepared_txid, state.get("k")) == (None, None)


def test_a_state_without_its_own_supersede_rolls_back():
    class Minimal(RecordingState):
        supersede_prepared = KeyValueState.supersede_prepared  # the default of the contract

    calls: list[tuple[Any, ...]] = []
    inner = InMemoryKeyValueState("test/count-1")
    inner.put("k", 1)
    inner.prepare_commit(5)
    Minimal(inner, calls).supersede_prepared(5)
    assert calls == [("state.rollback",)]
    assert inner.prepared_txid is None
