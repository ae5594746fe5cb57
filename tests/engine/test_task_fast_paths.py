"""The runtime's per-tuple fast paths give exactly what the general paths give (no Spark here)."""

from __future__ import annotations

import functools
import random
from array import array
from typing import Any

import pytest
from pyspark import cloudpickle

from checkpoint import CheckpointTaskProgram
from checkpoint._collectors import AckTrackingOutputCollector, AnchoringOutputCollector
from statefulbolts import (
    BasicBolt,
    Bolt,
    Fields,
    Spout,
    TopologyBuilder,
    Tuple,
)
from statefulbolts.collectors import BasicOutputCollector, anchored_target
from statefulbolts.errors import TopologyError, UnanchoredEmitError
from statefulbolts.runtime._collector import TaskCollector
from statefulbolts.runtime._plan import ExecutionPlan, Router
from statefulbolts.runtime._program import TaskJob
from statefulbolts.runtime._records import AckLedger, Fails, TaskReport, TupleBatch
from statefulbolts.runtime._task import run_task
from statefulbolts.testing import RecordingCollector


class Lines(Spout):
    def next_tuple(self) -> None:
        """Never called: the tests feed records directly."""

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("line"))


class Split(BasicBolt):
    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        for word in tuple.get_value(0).split():
            collector.emit([word])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word"))


class Inspect(Bolt):
    """Records every slot of every tuple it gets; acks it."""

    seen: list[dict[str, Any]] = []

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def execute(self, tuple: Any) -> None:  # noqa: A002
        Inspect.seen.append({slot: getattr(tuple, slot) for slot in Tuple.__slots__})
        self.collector.ack(tuple)


def split_topology() -> Any:
    """lines -> split (a BasicBolt) -> inspect x2, fields grouping on the one field ``word``."""
    builder = TopologyBuilder()
    builder.set_spout("lines", Lines())
    builder.set_bolt("split", Split()).shuffle_grouping("lines")
    builder.set_bolt("inspect", Inspect(), 2).fields_grouping("split", Fields("word"))
    return builder.create_topology()


def split_plan() -> ExecutionPlan:
    return ExecutionPlan(split_topology())


def task_collector(plan: ExecutionPlan, comp: int, txid: int = 3) -> TaskCollector:
    """The collector of task 0 of ``comp``."""
    return TaskCollector(plan, comp, 0, txid, plan.component_ids[comp])


def plain_job(plan: ExecutionPlan, name: str) -> TaskJob:
    """A batch of a topology without checkpoints, over every bolt."""
    return TaskJob(plan, plan.layout(plan.bolts()), CheckpointTaskProgram(None, 0), name, {}, 0, 0)


def parent(root: int = 11, edge: int = 22) -> Tuple:
    return Tuple(["a b"], Fields("line"), "lines", 1, "default", ((root, edge),))


def emit_words(collector: TaskCollector, words: list[str]) -> list[Tuple]:
    parents = []
    for word in words:
        p = parent()
        collector.emit([word], p)
        parents.append(p)
    return parents


def test_fast_emit_gives_the_batches_of_the_general_path():
    plan = split_plan()
    comp = plan.index["split"]
    words = [f"w{i % 7}" for i in range(30)]
    fast = task_collector(plan, comp)
    general = task_collector(plan, comp)
    general.emit = functools.partial(TaskCollector.emit, general)  # the general path only
    emit_words(fast, words)
    emit_words(general, words)
    assert fast.batches == general.batches
    assert fast.emitted == general.emitted == len(words)
    # The words went to both tasks, each batch carrying the parent's root.
    assert {dtask for (_, dtask, _) in fast.batches} == {0, 1}
    for vals, roots, more in fast.batches.values():
        assert list(roots) == [11] * len(vals) and more is None
    assert sorted(v for vals, _, _ in fast.batches.values() for v in vals) == sorted(words)


def test_a_first_emit_of_a_value_is_routed_by_the_memo_not_the_general_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A collector's batches are new with every job, so a small transaction's emits are mostly
    # first ones: each is routed in the memo's lookup, where the general path (five frames and
    # its checks) took them before. Every emit path: a bolt's ``emit``, a BasicBolt's, and
    # ``emit_columns``; each puts the words where the general path does.
    plan = split_plan()
    comp = plan.index["split"]
    words = [f"first-{i}" for i in range(40)]
    reference = task_collector(plan, comp)
    reference.emit = functools.partial(TaskCollector.emit, reference)  # the general path only
    emit_words(reference, words)
    general_calls: list[Any] = []
    general = TaskCollector._emit

    def counted(self: TaskCollector, *args: Any) -> Any:
        general_calls.append(args)
        return general(self, *args)

    monkeypatch.setattr(TaskCollector, "_emit", counted)
    by_emit = task_collector(plan, comp)
    emit_words(by_emit, words)
    by_basic = task_collector(plan, comp)
    basic = by_basic.basic_collector(by_basic)
    basic.set_context(parent())
    for word in words:
        basic.emit([word])
    by_columns = task_collector(plan, comp)
    by_columns.emit_columns([words], [11] * len(words))
    assert general_calls == []
    for collector in (by_emit, by_basic, by_columns):
        assert collector.batches == reference.batches
        assert collector.emitted == len(words)


def test_a_released_collector_emits_into_new_batches_and_leaves_the_old_ones_alone() -> None:
    # The memo keeps this task's batch per destination task, so a value seen first finds it by
    # its owner; once the collector let go of its batches (handed on as records), the next
    # emits must make new ones, not append to what went on.
    plan = split_plan()
    collector = task_collector(plan, plan.index["split"])
    first = [f"one-{i}" for i in range(20)]
    emit_words(collector, first)
    handed_on = {key: (list(b[0]), b) for key, b in collector.batches.items()}
    assert len(handed_on) == 2
    collector.release()
    second = [f"two-{i}" for i in range(20)]
    emit_words(collector, second)
    assert sorted(v for b in collector.batches.values() for v in b[0]) == sorted(second)
    for key, (values, batch) in handed_on.items():
        assert batch[0] == values  # nothing appended to a batch already handed on
        assert collector.batches[key] is not batch


def test_fast_emit_of_an_untracked_parent_ships_zero_roots():
    plan = split_plan()
    collector = task_collector(plan, plan.index["split"])
    untracked = Tuple(["x"], Fields("line"), "lines", 1)
    collector.emit(["storm"], untracked)
    collector.emit(["storm"], untracked)  # second emit: the cached route, the fast path
    ((vals, roots, _),) = collector.batches.values()
    assert vals == ["storm", "storm"] and list(roots) == [0, 0]


def test_an_anchor_on_two_trees_takes_the_general_path_with_both_roots():
    plan = split_plan()
    collector = task_collector(plan, plan.index["split"])
    two = Tuple(["a b"], Fields("line"), "lines", 1, "default", ((11, 1), (12, 1)))
    collector.emit(["storm"], two)
    collector.emit(["storm"], two)
    ((vals, roots, more),) = collector.batches.values()
    assert vals == ["storm", "storm"] and list(roots) == [11, 11]
    assert more == {0: (12,), 1: (12,)}


def test_fast_path_stream_still_rejects_a_wrong_number_of_values():
    plan = split_plan()
    collector = task_collector(plan, plan.index["split"])
    p = parent()
    collector.emit(["storm"], p)
    with pytest.raises(TopologyError, match=r"emitted 2 values on stream 'default'"):
        collector.emit(["storm", "extra"], p)


def test_hot_loop_tuples_have_every_slot_a_constructed_tuple_has():
    topology = split_topology()
    plan = ExecutionPlan(topology)
    job = plain_job(plan, "fast")
    split, inspect = plan.index["split"], plan.index["inspect"]
    slot = job.layout.key_for(0, inspect, 1)
    rec = TupleBatch(inspect, 1, split, 0, 0, ["storm", "spark"], [5, 6], None)
    Inspect.seen = []
    out = list(run_task(job, cloudpickle.dumps(topology), 1, slot, [(slot, [rec])]))
    expected = [
        {
            slot_name: getattr(
                Tuple(
                    [word],
                    Fields("word"),
                    "split",
                    topology.task_ids("split")[0],
                    "default",
                    ((root, edge),),
                ),
                slot_name,
            )
            for slot_name in Tuple.__slots__
        }
        # The task numbers what it is given, from 0: that is their edge id.
        for word, root, edge in [("storm", 5, 0), ("spark", 6, 1)]
    ]
    for got, want in zip(Inspect.seen, expected, strict=True):
        assert {k: v for k, v in got.items() if k != "fields"} == {
            k: v for k, v in want.items() if k != "fields"
        }
        assert got["fields"].to_list() == ["word"]
    # Both were acked once: the task sends no ack ledger at all.
    kinds = [type(r) for _, records in out for r in records]
    assert AckLedger not in kinds and Fails not in kinds


def test_basic_collector_goes_straight_past_the_anchoring_check():
    recording = RecordingCollector()
    anchoring = AnchoringOutputCollector(recording, context=None)  # type: ignore[arg-type]
    assert anchored_target(anchoring) is recording
    basic = BasicOutputCollector(anchoring)
    t = parent()
    basic.set_context(t)
    basic.emit(["storm"])
    assert [(e.values, e.anchors) for e in recording.emitted] == [(["storm"], [t])]


def test_basic_collector_outside_execute_still_refuses_an_unanchored_emit():
    from statefulbolts import TopologyContext

    topology = split_topology()
    context = TopologyContext(topology, "t", "split", 0)
    basic = BasicOutputCollector(AnchoringOutputCollector(RecordingCollector(), context))
    with pytest.raises(UnanchoredEmitError, match="'split'"):
        basic.emit(["storm"])


def test_ack_tracking_collector_is_never_skipped():
    tracking = AckTrackingOutputCollector(RecordingCollector(), context=None)  # type: ignore[arg-type]
    assert anchored_target(tracking) is tracking


def test_single_shuffle_route_shares_its_round_robin_with_targets():
    plan = split_plan()
    spout = plan.index["lines"]
    router = Router(plan, spout, 0)
    (route,) = router.single_shuffle_routes().values()
    n = route[2]
    picks = []
    for i in range(4):
        if i % 2:
            (pair,) = router.targets(spout, 0, ["x"])
            picks.append(pair[1])
        else:
            picks.append(route[4] % n)
            route[4] += 1
    assert picks == [i % n for i in range(4)]


def test_task_basic_collector_gives_the_batches_and_counts_of_the_general_path():
    plan = split_plan()
    comp = plan.index["split"]
    fast = task_collector(plan, comp)
    general = task_collector(plan, comp)
    fast_basic = fast.basic_collector(fast)
    general_basic = BasicOutputCollector(general)
    assert type(fast_basic) is not BasicOutputCollector  # the task's own, fast path inlined
    two_trees = Tuple(["a b"], Fields("line"), "lines", 1, "default", ((11, 1), (12, 1)))
    emits: list[tuple[Tuple, list[Any]]] = [(parent(), [f"w{i % 5}"]) for i in range(12)]
    emits += [(parent(), [7]), (two_trees, ["w1"]), (parent(root=13), ["w1"])]
    for basic in (fast_basic, general_basic):
        for anchor, values in emits:
            basic.set_context(anchor)
            basic.emit(values)
    assert fast.batches == general.batches
    assert fast.emitted == general.emitted == len(emits)
    ((vals, roots, more),) = [b for b in fast.batches.values() if b[2]]
    ((pos, extra),) = more.items()
    # The two-tree input's second root, at its child's place in its batch.
    assert (vals[pos], roots[pos], extra) == ("w1", 11, (12,))


def test_a_basic_bolt_on_a_task_emits_through_the_task_basic_collector():
    from statefulbolts.components import BasicBoltExecutor

    plan = split_plan()
    collector = task_collector(plan, plan.index["split"])
    executor = BasicBoltExecutor(Split())
    executor.prepare({}, None, AnchoringOutputCollector(collector, context=None))  # type: ignore[arg-type]
    executor.execute(parent())
    assert isinstance(executor._basic, BasicOutputCollector)
    assert type(executor._basic) is not BasicOutputCollector
    assert sorted(v for vals, _, _ in collector.batches.values() for v in vals) == ["a", "b"]
    assert collector.emitted == 2
    assert [t._root for t in collector.ledger.acked] == [11]  # the input, acked once


def test_a_basic_bolt_task_over_many_chunks_settles_exactly():
    # Over several chunks, the task forgets each chunk's in-order acks as it goes (compact);
    # the end result is the same: no ack ledger, every tuple counted as acked once.
    from statefulbolts.runtime._task import _CHUNK

    topology = split_topology()
    plan = ExecutionPlan(topology)
    job = plain_job(plan, "chunks")
    lines, split = plan.index["lines"], plan.index["split"]
    n = 2 * _CHUNK + 123
    values = [f"w{i % 9} x" for i in range(n)]
    rec = TupleBatch(split, 0, lines, 0, 0, values, list(range(1, n + 1)), None)
    out = list(run_task(job, cloudpickle.dumps(topology), 0, 0, [(0, [rec])]))
    records = [r for _, recs in out for r in recs]
    assert not [r for r in records if isinstance(r, AckLedger | Fails)]
    (metrics,) = [r.metrics for r in records if isinstance(r, TaskReport)]
    assert (metrics.executed, metrics.acked, metrics.emitted) == (n, n, 2 * n)


class Count(Bolt):
    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        """Never called."""

    def execute(self, tuple: Any) -> None:  # noqa: A002
        """Never called."""

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word", "count"))


def count_plan(sink_tasks: int = 2) -> ExecutionPlan:
    """lines -> split -> count x2 (fields) -> sink (local or shuffle), ``sink_tasks`` tasks."""
    builder = TopologyBuilder()
    builder.set_spout("lines", Lines())
    builder.set_bolt("split", Split()).shuffle_grouping("lines")
    builder.set_bolt("count", Count(), 2).fields_grouping("split", Fields("word"))
    builder.set_bolt("sink", Inspect(), sink_tasks).local_or_shuffle_grouping("count")
    return ExecutionPlan(builder.create_topology())


def test_a_stream_into_one_task_takes_the_fixed_fast_path_with_the_general_batches() -> None:
    plan = count_plan()
    comp, sink = plan.index["count"], plan.index["sink"]
    fast, general = task_collector(plan, comp), task_collector(plan, comp)
    general._fixed = {}  # every emit takes the general path
    two_trees = Tuple(["a"], Fields("word"), "split", 1, "default", ((11, 1), (12, 1)))
    for collector in (fast, general):
        for i in range(20):
            collector.emit([f"w{i % 3}", i], parent())
        collector.emit(["w0", 99], two_trees)  # two trees: the general path, both roots
    assert fast.batches == general.batches
    assert fast.emitted == general.emitted == 21
    ((key, (vals, roots, more)),) = fast.batches.items()
    assert key == (sink, 0, 0)  # task 0 of count feeds task 0 of the sink (local route)
    assert vals[:3] == [["w0", 0], ["w1", 1], ["w2", 2]] and list(roots[:20]) == [11] * 20
    assert more == {20: (12,)}
    assert fast._fixed["default"][1] is not None  # the fast path was armed after one emit
    with pytest.raises(TopologyError, match=r"emitted 1 values on stream 'default'"):
        fast.emit(["w0"], parent())


def test_a_pipelined_batch_goes_on_with_its_roots_as_emitted() -> None:
    # A batch for a chained task never leaves the Python task: its roots go on as the list
    # the emits filled (the next task's loop then reads those int objects, where an array made
    # it create each again); a batch for the next Spark stage carries them as one array.
    plan = count_plan()
    comp, sink = plan.index["count"], plan.index["sink"]
    for pipelined in (frozenset({sink}), frozenset()):
        collector = TaskCollector(plan, comp, 0, 3, "count", None, pipelined)
        for i in range(5):
            collector.emit([f"w{i}", i], parent(root=100 + i))
        assert collector.seal() is None
        (record,) = collector.records()
        ((_, (_, roots, _)),) = collector.batches.items()
        assert list(record.roots) == [100, 101, 102, 103, 104]
        if pipelined:
            assert record.roots is roots and record.values == [[f"w{i}", i] for i in range(5)]
        else:
            assert type(record.roots) is array and type(record.values) is bytes


class Many(Bolt):
    """Declares what a per-tuple bolt may emit on: the default stream and two others."""

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        """Never called."""

    def execute(self, tuple: Any) -> None:  # noqa: A002
        """Never called."""

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word", "count"))
        declarer.declare_stream("words", Fields("word"))
        declarer.declare_stream("spread", Fields("word", "n"))


def many_plan(default_tasks: int) -> ExecutionPlan:
    """lines -> split -> many x2: default into ``sink`` (local or shuffle), ``words`` by
    fields into ``inspect`` x2, ``spread`` by shuffle into ``spread`` x2."""
    builder = TopologyBuilder()
    builder.set_spout("lines", Lines())
    builder.set_bolt("split", Split()).shuffle_grouping("lines")
    builder.set_bolt("many", Many(), 2).fields_grouping("split", Fields("word"))
    builder.set_bolt("sink", Inspect(), default_tasks).local_or_shuffle_grouping("many")
    builder.set_bolt("inspect", Inspect(), 2).fields_grouping("many", Fields("word"), "words")
    builder.set_bolt("spread", Inspect(), 2).shuffle_grouping("many", "spread")
    return ExecutionPlan(builder.create_topology())


@pytest.mark.parametrize("default_tasks", [1, 2])
@pytest.mark.parametrize("seed", range(12))
def test_random_emits_give_the_batches_counts_and_errors_of_the_general_path(
    default_tasks: int, seed: int
) -> None:
    """The instance's ``emit`` (its fast paths first) against ``TaskCollector.emit`` alone.

    Random emits of a per-tuple bolt: streams (the default one into one task or into two,
    given by the default argument, by name or by an equal str made at run time), anchors (one
    tree, untracked, two trees, a list, none), values (a list, a tuple, a list changed after
    the emit, the wrong width), and the collector released halfway, as a task does.
    """
    rng = random.Random(seed)
    plan = many_plan(default_tasks)
    comp = plan.index["many"]
    fast, general = task_collector(plan, comp), task_collector(plan, comp)
    general.emit = functools.partial(TaskCollector.emit, general)  # type: ignore[method-assign]
    anchors: list[Any] = [
        parent(11),
        parent(12),
        Tuple(["x"], Fields("line"), "lines", 1),  # untracked
        Tuple(["x"], Fields("line"), "lines", 1, "default", ((13, 1), (14, 1))),
        [parent(15), parent(16)],
        [],
        None,
    ]
    ops = []
    for _ in range(200):
        stream = rng.choice([None, "default", "".join(["def", "ault"]), "words", "spread", "no"])
        width = {"words": 1}.get(stream or "default", 2)
        width += rng.choice([0, 0, 0, 0, 0, 0, 1, -1])
        values = [f"w{rng.randrange(4)}", rng.randrange(5)][:width] + [0] * max(0, width - 2)
        shape = rng.choice(["list", "list", "tuple", "changed"])
        ops.append((stream, values, shape, rng.choice(anchors), rng.random() < 0.01))
    outcomes = []
    for collector in (fast, general):
        seen = []
        for stream, values, shape, anchor, release in ops:
            mine = tuple(values) if shape == "tuple" else list(values)
            try:
                if stream is None:
                    collector.emit(mine, anchor)
                else:
                    collector.emit(mine, anchor, stream)
            except Exception as exc:  # noqa: BLE001 - compared between the two paths
                seen.append((type(exc), str(exc)))
            if shape == "changed" and isinstance(mine, list) and mine:
                mine[0] = "changed"  # nothing emitted may change with it
            if release:
                seen.append(("batches", dict(collector.batches)))
                collector.release()
        seen.append(("batches", dict(collector.batches), collector.emitted))
        outcomes.append(seen)
    assert outcomes[0] == outcomes[1]
    assert any(isinstance(s[0], type) for s in outcomes[0])  # some emits were refused
    # The fast paths took emits the general path appended itself (what it appended since the
    # last release).
    assert fast._appends < general._appends


def test_no_fixed_fast_path_into_several_tasks() -> None:
    plan = count_plan(sink_tasks=3)  # unequal parallelism: a round robin over three tasks
    collector = task_collector(plan, plan.index["count"])
    assert collector._fixed == {}
    for i in range(6):
        collector.emit([f"w{i}", i], parent())
    assert {dtask for (_, dtask, _) in collector.batches} == {0, 1, 2}


def test_a_stateful_bolts_collector_hands_emits_to_the_task_collector_which_refuses_unanchored():
    from statefulbolts import TopologyContext

    plan = split_plan()
    collector = task_collector(plan, plan.index["split"])
    context = TopologyContext(split_topology(), "t", "split", 0)
    tracking = AckTrackingOutputCollector(collector, context)
    assert tracking.emit == collector.emit  # no frame of its own in between
    tracking.emit(["storm"], parent())
    assert collector.emitted == 1
    with pytest.raises(UnanchoredEmitError, match=r"bolt 'split' task \d+ emitted \['x'\]"):
        tracking.emit(["x"])
    tracking.emit(["untracked"], [])  # an explicit empty list is the deliberate untracked emit
    assert collector.emitted == 2


def test_emit_to_fast_paths_give_the_ids_batches_and_counts_of_the_general_path() -> None:
    # count -> sink: a stream into one task (fixed); split -> inspect: fields on one field.
    plan = count_plan()
    routes = [(plan.index["count"], ["w0", 1], ["w1", 2]), (plan.index["split"], ["w0"], ["w1"])]
    for comp, first, second in routes:
        fast, general = task_collector(plan, comp), task_collector(plan, comp)
        general._fixed, general._by_field = {}, {}  # every emit takes the general path
        ids = {}
        for collector in (fast, general):
            ids[id(collector)] = [
                collector.emit_to(list(values)) for values in [first, second, first] * 4
            ]
        assert ids[id(fast)] == ids[id(general)]
        assert fast.batches == general.batches
        assert fast.emitted == general.emitted == 12
        # Untracked, as emit_to's tuples are: every root is 0.
        assert all(set(batch[1]) == {0} for batch in fast.batches.values())
        with pytest.raises(TopologyError, match=r"emitted \d values on stream 'default'"):
            fast.emit_to([*first, "extra"])


def test_first_emits_of_many_values_route_as_the_plan_does_in_every_later_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``emit_to`` routes a value by the process's routes (``_collector._ROUTES``).

    Three tasks in a row, as a Python worker runs a transactional topology's jobs: every value
    goes to the task ``Router.targets`` names, in the first task (routes computed), in the
    next (routes remembered) and past the bound of what is remembered; and a task's ``emit``
    (its memo, filled from the same routes) sends each value where ``emit_to`` did.
    """
    import statefulbolts.runtime._collector as collector_module

    monkeypatch.setattr(collector_module, "_ROUTES", {})
    monkeypatch.setattr(collector_module, "_MEMO_SIZE", 150)
    plan = count_plan()
    comp, count = plan.index["split"], plan.index["count"]
    words = [f"word-{i}" for i in range(200)]
    router = Router(plan, comp, 0)
    stream = plan.stream_index[comp]["default"]
    want = [router.targets(comp, stream, [w]) for w in words]
    assert {t for ((_, t),) in want} == {0, 1}
    for _task in range(3):
        collector = task_collector(plan, comp)
        ids = [collector.emit_to([w]) for w in words]
        assert ids == [[plan.task_ids[count][t]] for ((_, t),) in want]
        by_task = {dtask: batch[0] for (_, dtask, _), batch in collector.batches.items()}
        assert sorted(by_task) == [0, 1]
        for dtask, column in by_task.items():
            assert column == [w for w, ((_, t),) in zip(words, want, strict=True) if t == dtask]
        assert collector.emitted == len(words)
        other = task_collector(plan, comp)
        for word in words:
            other.emit([word], parent())
        assert {k: b[0] for k, b in other.batches.items()} == {
            k: b[0] for k, b in collector.batches.items()
        }
    (routes,) = collector_module._ROUTES.values()
    assert len(routes) == 150  # remembered up to the bound, no further


@pytest.mark.parametrize("shape", [list, tuple])
def test_emit_to_leaves_out_the_leading_values_it_is_told_to_skip(shape: Any) -> None:
    # A transactional batch bolt's emits lead with the attempt, which the job does not ship:
    # ``skip=1`` gives what emitting the rest gives, on every path (fixed, fields, general),
    # and each kept row is a list of its own.
    plan = count_plan()
    routes = [(plan.index["count"], ["w0", 1], ["w1", 2]), (plan.index["split"], ["w0"], ["w1"])]
    for comp, first, second in routes:
        led, bare, general = (task_collector(plan, comp) for _ in range(3))
        general._fixed, general._by_field = {}, {}
        sent = [first, second, first] * 3
        ids = [led.emit_to(shape(["attempt", *v]), skip=1) for v in sent]
        assert ids == [bare.emit_to(list(v)) for v in sent]
        assert ids == [general.emit_to(shape(["attempt", *v]), skip=1) for v in sent]
        assert led.batches == bare.batches == general.batches
        assert led.emitted == general.emitted == len(sent)
        rows = [row for batch in led.batches.values() for row in batch[0]]
        if len(first) > 1:
            assert all(type(row) is list for row in rows)
            assert len({id(row) for row in rows}) == len(rows)
        with pytest.raises(TopologyError, match=r"emitted \d values on stream 'default'"):
            led.emit_to(["attempt", *first, "extra"], skip=1)
