"""``ExactlyOnceSinkBolt`` through the checkpoint protocol's own task steps, without Spark.

Each "task" below is a ``checkpoint.CheckpointTask`` made, prepared, fed and finished as the
runtime does for one transaction (a fresh bolt and a fresh state object each time, the
in-memory provider's store shared by namespace), writing to a ``MemorySink`` target. So the
exact records the target holds, and the exact keys the sink's state holds, are asserted after
each step: publish at COMMIT only, once whatever is replayed, nothing for a rollback, the
leftovers of a transaction committed without the hook, a rescale of a keyed sink with
records not yet published, and the fence against a taken-over driver.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any, NamedTuple

import pytest
from sink_fixtures import MemorySink, memory_target

from checkpoint import TX_STATE_KEY, Action, CheckPointState, CheckpointTask, TxPhase
from providers import KeyValueState, StateFactory
from providers.memory import InMemoryKeyValueStateProvider
from statefulbolts import Fields, Spout, TopologyBuilder
from statefulbolts.connectors.sinks import (
    ExactlyOnceSinkBolt,
    SinkStageError,
    StagedColumns,
    StagedKey,
    _bolt,
    staged_holdings,
)
from statefulbolts.connectors.sinks._columns import staged_count
from statefulbolts.context import TopologyContext
from statefulbolts.errors import StateEvolutionError
from statefulbolts.namespaces import checkpoint_namespace
from statefulbolts.offline import evolve_to_topology
from statefulbolts.testing import RecordingCollector, checkpoint_barrier, make_tuple
from statefulbolts.topology import StormTopology
from statefulbolts.tuples import ColumnBatch

_names = itertools.count()


class Info(NamedTuple):
    component: str
    task: int
    attempt: int = 0


class Words(Spout):
    def next_tuple(self) -> None:
        """Never called: the tests feed the sink themselves."""

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("value"))


def topology(target: str, parallelism: int = 1, *, keyed: bool = False) -> StormTopology:
    builder = TopologyBuilder()
    builder.set_spout("words", Words(), 1)
    bolt = builder.set_bolt("publish", ExactlyOnceSinkBolt(MemorySink(target)), parallelism)
    if keyed:
        bolt.fields_grouping("words", Fields("value"))
    else:
        bolt.shuffle_grouping("words")
    return builder.create_topology()


class Run:
    """One topology name, its target, and the tasks it runs by hand."""

    def __init__(self, parallelism: int = 1, *, keyed: bool = False) -> None:
        self.name = f"sinkbolt-{next(_names)}"
        self.target = memory_target(self.name)
        self.topology = topology(self.name, parallelism, keyed=keyed)
        self.conf: dict[str, Any] = {"topology.name": self.name}

    def task(
        self,
        action: Action,
        txid: int,
        values: Sequence[str] = (),
        *,
        task: int = 0,
        attempt: int = 0,
        batch: bool = False,
        conf: dict[str, Any] | None = None,
    ) -> RecordingCollector:
        """One task of ``publish`` through ``action(txid)``, fed ``values`` first."""
        spec = self.topology.component("publish")
        context = TopologyContext(self.topology, self.name, "publish", task)
        step = CheckpointTask(spec, action, txid, Info("publish", task, attempt))
        out = RecordingCollector()
        target = step.prepare(conf or self.conf, context, out)
        if batch and values:
            assert step.batch_target is not None
            step.batch_target(ColumnBatch([[v] for v in values], Fields("value"), "words", 1))
        else:
            for v in values:
                target(make_tuple([v], fields=["value"], component="words"))
        for cp in checkpoint_barrier(context, action.value, txid):
            step.control(cp)
        step.finish()
        step.cleanup()
        return out

    def state(self, task: int = 0) -> KeyValueState:
        state = StateFactory.get_state(f"{self.name}/publish-{task}", self.conf)
        assert isinstance(state, KeyValueState)
        return state

    def staged(self, task: int = 0) -> dict[str, list[int]]:
        """Lane -> txids the task's state holds records of (committed and prepared)."""
        return {lane: sorted(t) for lane, t in staged_holdings(iter(self.state(task))).items()}

    def published(self) -> list[tuple[str, int, str]]:
        return [(lane, txid, r[0]) for lane, txid, r in self.target.records]

    def save_checkpoint(self, txid: int, phase: TxPhase) -> None:
        record = StateFactory.get_system_state(checkpoint_namespace(f"{self.name}/"), self.conf)
        assert isinstance(record, KeyValueState)
        record.put(TX_STATE_KEY, CheckPointState(txid, phase).to_value())
        record.commit()


@pytest.fixture(autouse=True)
def _forget_memory_state() -> Any:
    yield
    InMemoryKeyValueStateProvider.drop("sinkbolt-")
    _bolt._kept.clear()


def test_records_are_published_when_their_transaction_commits_not_before() -> None:
    run = Run()
    run.task(Action.PREPARE, 0, ["a", "b", "c"])
    assert run.published() == []
    assert run.staged() == {"0of1": [0]}
    run.task(Action.COMMIT, 0)
    assert run.published() == [("0of1", 0, "a"), ("0of1", 0, "b"), ("0of1", 0, "c")]
    assert run.target.markers[f"{run.name}.publish.0of1"] == (0, None)


@pytest.mark.parametrize("batch", [False, True], ids=["tuples", "batch"])
def test_a_transaction_s_first_record_has_the_sink_get_ready_before_its_commit(batch: bool) -> None:
    run = Run(parallelism=2)
    run.task(Action.PREPARE, 0, ["a", "b", "c"], batch=batch)
    run.task(Action.PREPARE, 0, [], task=1)  # nothing to publish: nothing to get ready
    assert run.target.warmed == [("0of2", 0)]  # once, and before anything was published
    run.task(Action.COMMIT, 0)
    run.task(Action.PREPARE, 1, ["d"], batch=batch)
    assert run.target.warmed == [("0of2", 0), ("0of2", 3)]
    assert run.published() == [("0of2", 0, "a"), ("0of2", 0, "b"), ("0of2", 0, "c")]


def test_a_commit_run_again_publishes_nothing_twice() -> None:
    run = Run()
    run.task(Action.PREPARE, 0, ["a"])
    run.task(Action.COMMIT, 0)
    run.task(Action.COMMIT, 0)  # the recovery of a driver that died mid-commit
    run.task(Action.COMMIT, 0, attempt=1)  # and a Spark retry of it
    assert run.published() == [("0of1", 0, "a")]


def test_a_rolled_back_transaction_publishes_nothing_and_its_replay_is_what_commits() -> None:
    run = Run()
    run.task(Action.PREPARE, 0, ["lost-1", "lost-2"])
    run.task(Action.ROLLBACK, 0)
    assert run.staged() == {}
    run.task(Action.PREPARE, 0, ["kept"])
    run.task(Action.COMMIT, 0)
    assert run.published() == [("0of1", 0, "kept")]


def test_a_prepare_run_again_by_spark_replaces_the_first_attempts_records() -> None:
    run = Run()
    run.task(Action.PREPARE, 0, ["a", "b"])
    run.task(Action.PREPARE, 0, ["a", "b"], attempt=1)  # the first attempt's output was lost
    run.task(Action.COMMIT, 0)
    assert run.published() == [("0of1", 0, "a"), ("0of1", 0, "b")]


def test_published_records_leave_the_state_at_the_next_prepare() -> None:
    run = Run()
    run.task(Action.PREPARE, 0, ["a"])
    run.task(Action.COMMIT, 0)
    assert run.staged() == {"0of1": [0]}  # committed with txid 0, after their publish
    run.task(Action.PREPARE, 1, ["b"])
    assert run.staged() == {"0of1": [1]}
    run.task(Action.COMMIT, 1)
    run.task(Action.PREPARE, 2)
    run.task(Action.COMMIT, 2)
    assert run.staged() == {}
    assert run.published() == [("0of1", 0, "a"), ("0of1", 1, "b")]


def test_a_transaction_committed_without_the_hook_is_published_first_by_the_next_commit() -> None:
    """A start that changes the shape settles COMMITTING(t) by committing states, no hooks."""
    run = Run()
    run.task(Action.PREPARE, 0, ["settled"])
    run.state().commit(0)  # what the settle does to the sink's state: no publish
    run.task(Action.PREPARE, 1, ["next"])
    assert run.staged() == {"0of1": [0, 1]}  # 0 is kept: its marker does not cover it
    run.task(Action.COMMIT, 1)
    assert run.published() == [("0of1", 0, "settled"), ("0of1", 1, "next")]
    assert run.target.markers[f"{run.name}.publish.0of1"] == (1, None)


def test_a_batch_is_staged_as_its_tuples_would_be() -> None:
    run = Run()
    run.task(Action.PREPARE, 0, ["x", "y", "z"], batch=True)
    run.task(Action.COMMIT, 0)
    assert run.published() == [("0of1", 0, "x"), ("0of1", 0, "y"), ("0of1", 0, "z")]


def test_a_batch_is_staged_with_one_call_of_the_sink_s_stage_batch() -> None:
    calls: list[int] = []

    class Batching(MemorySink):
        def stage_batch(self, batch: ColumnBatch) -> list[Any]:
            calls.append(len(batch))
            return [[f"{v}!"] for v in batch.column(0)]

    builder = TopologyBuilder()
    builder.set_spout("words", Words(), 1)
    run = Run()
    sink = ExactlyOnceSinkBolt(Batching(run.name))
    builder.set_bolt("publish", sink, 1).shuffle_grouping("words")
    run.topology = builder.create_topology()
    run.task(Action.PREPARE, 0, ["x", "y", "z"], batch=True)
    run.task(Action.COMMIT, 0)
    assert calls == [3]
    assert run.published() == [("0of1", 0, "x!"), ("0of1", 0, "y!"), ("0of1", 0, "z!")]


class ColumnSink(MemorySink):
    """A ``MemorySink`` whose ``stage_batch`` gives columns, as ``KafkaSink``'s does."""

    def stage_batch(self, batch: ColumnBatch) -> Any:
        return StagedColumns(2, {0: list(batch.column(0))}, {1: "c"})

    def stage(self, tuple_: Any) -> Any:
        return [tuple_.values[0], "c"]


def test_rows_and_columns_of_one_transaction_are_published_in_the_order_they_came() -> None:
    builder = TopologyBuilder()
    builder.set_spout("words", Words(), 1)
    run = Run()
    bolt = ExactlyOnceSinkBolt(ColumnSink(run.name), chunk_records=2)
    builder.set_bolt("publish", bolt, 1).shuffle_grouping("words")
    run.topology = builder.create_topology()
    spec = run.topology.component("publish")
    context = TopologyContext(run.topology, run.name, "publish", 0)
    step = CheckpointTask(spec, Action.PREPARE, 0, Info("publish", 0))
    target = step.prepare(run.conf, context, RecordingCollector())
    assert step.batch_target is not None
    target(make_tuple(["a"], fields=["value"], component="words"))
    step.batch_target(ColumnBatch([["b"], ["c"], ["d"]], Fields("value"), "words", 1))
    target(make_tuple(["e"], fields=["value"], component="words"))
    for cp in checkpoint_barrier(context, "PREPARE", 0):
        step.control(cp)
    step.finish()
    step.cleanup()
    # Chunks of at most 2, in order: the row, the batch's columns cut in two, the row.
    stored = [v for _, v in sorted(run.state(), key=lambda kv: str(kv[0]))]
    assert [staged_count(v) for v in stored] == [1, 2, 1, 1]
    assert [StagedColumns.is_stored(v) for v in stored] == [False, True, True, False]
    run.task(Action.COMMIT, 0)
    assert [v for _, _, v in run.published()] == ["a", "b", "c", "d", "e"]
    assert [r[1] for _, _, r in run.target.records] == ["c"] * 5


def column_run() -> Run:
    """A run whose sink stages columns (as ``KafkaSink`` does), in chunks of 2."""
    run = Run()
    builder = TopologyBuilder()
    builder.set_spout("words", Words(), 1)
    bolt = ExactlyOnceSinkBolt(ColumnSink(run.name), chunk_records=2)
    builder.set_bolt("publish", bolt, 1).shuffle_grouping("words")
    run.topology = builder.create_topology()
    return run


def _decoding(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Record every chunk of columns decoded from the state from now on."""
    decoded: list[Any] = []
    real = StagedColumns.from_stored.__func__  # type: ignore[attr-defined]

    def recording(cls: type[StagedColumns], value: Any) -> StagedColumns:
        decoded.append(value)
        return real(cls, value)  # type: ignore[no-any-return]

    monkeypatch.setattr(StagedColumns, "from_stored", classmethod(recording))
    return decoded


def test_a_commit_on_the_worker_that_prepared_publishes_the_columns_it_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = column_run()
    run.task(Action.PREPARE, 0, ["a", "b", "c"], batch=True)
    stored = [v for _, v in sorted(run.state(), key=lambda kv: str(kv[0]))]
    assert all(isinstance(v, bytes) for v in stored) and len(stored) == 2  # packed chunks
    decoded = _decoding(monkeypatch)
    run.task(Action.COMMIT, 0)
    assert [v for _, _, v in run.published()] == ["a", "b", "c"]
    assert decoded == []  # the records its PREPARE kept: the state holds the same bytes
    assert _bolt._kept == {}  # dropped once published


def test_columns_kept_from_an_attempt_the_driver_did_not_apply_are_not_published(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """This worker ran the first attempt of PREPARE(0); a retry elsewhere staged other records
    (a replay's tuples may come in another order), and the driver applied the retry's. The
    COMMIT here must publish what the state holds, not what this worker kept."""
    run = column_run()
    run.task(Action.PREPARE, 0, ["a", "b", "c"], batch=True)
    first = dict(_bolt._kept)
    run.task(Action.PREPARE, 0, ["c", "a", "b"], batch=True, attempt=1)
    _bolt._kept.clear()
    _bolt._kept.update(first)
    decoded = _decoding(monkeypatch)
    run.task(Action.COMMIT, 0)
    assert [v for _, _, v in run.published()] == ["c", "a", "b"]
    assert len(decoded) == 2  # both chunks read from the state


def test_a_worker_keeps_the_last_transaction_of_a_few_lanes_only() -> None:
    runs = [column_run() for _ in range(_bolt.KEPT_LANES + 2)]
    for run in runs:
        run.task(Action.PREPARE, 0, ["a", "b", "c"], batch=True)
    # The oldest two lanes were forgotten: their COMMIT reads the state, and is as exact.
    assert [lane.topology for lane in _bolt._kept] == [r.name for r in runs[2:]]
    for run in runs:
        run.task(Action.COMMIT, 0)
        assert [v for _, _, v in run.published()] == ["a", "b", "c"]
    assert _bolt._kept == {}


def test_a_rolled_back_transaction_leaves_nothing_kept() -> None:
    run = column_run()
    run.task(Action.PREPARE, 0, ["a", "b", "c"], batch=True)
    assert _bolt._kept
    run.task(Action.ROLLBACK, 0)
    assert _bolt._kept == {}
    run.task(Action.PREPARE, 0, ["d"], batch=True)
    run.task(Action.COMMIT, 0)
    assert [v for _, _, v in run.published()] == ["d"]


def test_records_are_kept_in_chunks_of_the_bolt_s_size() -> None:
    run = Run()
    bolt = run.topology.component("publish").obj
    bolt.chunk_records = 2
    run.task(Action.PREPARE, 0, ["a", "b", "c", "d", "e"])
    keys = sorted(str(k) for k, _ in run.state())
    assert [StagedKey.parse(k).chunk for k in keys] == [0, 1, 2]  # type: ignore[union-attr]
    run.task(Action.COMMIT, 0)
    assert [v for _, _, v in run.published()] == ["a", "b", "c", "d", "e"]


def test_a_tuple_the_sink_cannot_stage_fails_naming_it() -> None:
    class Refusing(MemorySink):
        def stage(self, tuple_: Any) -> Any:
            raise ValueError("no such field")

    builder = TopologyBuilder()
    builder.set_spout("words", Words(), 1)
    builder.set_bolt("publish", ExactlyOnceSinkBolt(Refusing("x")), 1).shuffle_grouping("words")
    run = Run()
    run.topology = builder.create_topology()
    with pytest.raises(SinkStageError, match=r"sink 'publish' task 0: .*\['bad'\].*no such field"):
        run.task(Action.PREPARE, 0, ["bad"])


def test_a_keyed_sink_rescaled_up_publishes_what_its_old_tasks_had_not_once() -> None:
    """COMMITTING(0) left by a driver, settled by the start that rescales 2 -> 3."""
    run = Run(2, keyed=True)
    evolve_to_topology(run.conf, f"{run.name}/", run.topology)  # the shape, as a start records it
    run.task(Action.PREPARE, 0, ["a", "b"], task=0)
    run.task(Action.PREPARE, 0, ["c"], task=1)
    run.save_checkpoint(0, TxPhase.COMMITTING)  # the driver died before any task committed
    run.topology = topology(run.name, 3, keyed=True)
    report = evolve_to_topology(run.conf, f"{run.name}/", run.topology)
    assert report.lines == ["publish: parallelism 2 -> 3"]
    held = {t: run.staged(t) for t in range(3)}
    assert sorted(lane for h in held.values() for lane in h) == ["0of2", "1of2"]
    for t in range(3):  # the recovery's INITSTATE, then the next transaction
        run.task(Action.PREPARE, 1, [f"new{t}"], task=t)
    for t in range(3):
        run.task(Action.COMMIT, 1, task=t)
    assert sorted(run.published()) == [
        ("0of2", 0, "a"),
        ("0of2", 0, "b"),
        ("0of3", 1, "new0"),
        ("1of2", 0, "c"),
        ("1of3", 1, "new1"),
        ("2of3", 1, "new2"),
    ]
    for t in range(3):
        run.task(Action.COMMIT, 1, task=t)  # run again: nothing twice
    assert len(run.published()) == 6


def test_a_keyed_sink_rescaled_down_keeps_each_lane_whole() -> None:
    run = Run(2, keyed=True)
    evolve_to_topology(run.conf, f"{run.name}/", run.topology)
    run.task(Action.PREPARE, 0, ["a"], task=0)
    run.task(Action.PREPARE, 0, ["b"], task=1)
    run.save_checkpoint(0, TxPhase.COMMITTING)
    run.topology = topology(run.name, 1, keyed=True)
    evolve_to_topology(run.conf, f"{run.name}/", run.topology)
    assert run.staged(0) == {"0of2": [0], "1of2": [0]}
    run.task(Action.PREPARE, 1)
    run.task(Action.COMMIT, 1)
    assert sorted(run.published()) == [("0of2", 0, "a"), ("1of2", 0, "b")]


def test_a_sink_not_grouped_by_fields_refuses_to_scale_down_while_it_holds_records() -> None:
    run = Run(2)
    evolve_to_topology(run.conf, f"{run.name}/", run.topology)
    run.task(Action.PREPARE, 0, [], task=0)
    run.task(Action.PREPARE, 0, ["a"], task=1)
    run.save_checkpoint(0, TxPhase.COMMITTING)
    run.topology = topology(run.name, 1)
    with pytest.raises(StateEvolutionError, match=r"task 1 holds state .*not fields-grouped"):
        evolve_to_topology(run.conf, f"{run.name}/", run.topology)


# ------------------------------------------------------------------ at least once
def test_the_at_least_once_bolt_writes_at_once_and_again_on_a_replay() -> None:
    from statefulbolts.components import BasicBoltExecutor
    from statefulbolts.connectors.sinks import AtLeastOnceSinkBolt
    from statefulbolts.testing import make_context

    name = f"sinkbolt-alo-{next(_names)}"
    bolt = BasicBoltExecutor(AtLeastOnceSinkBolt(MemorySink(name)))
    out = RecordingCollector()
    bolt.prepare({}, make_context("publish", stateful=False, checkpointed=True), out)
    first = make_tuple(["a"], fields=["value"])
    bolt.execute(first)
    assert memory_target(name).values() == [["a"]]  # before any checkpoint
    assert out.acked == [first]
    bolt.execute_batch(ColumnBatch([["b"], ["c"]], Fields("value"), "words", 1))
    bolt.execute(first)  # the replay of a rolled-back transaction: written again
    assert memory_target(name).values() == [["a"], ["b"], ["c"], ["a"]]


def test_a_sink_without_write_cannot_be_written_at_least_once() -> None:
    from statefulbolts.connectors.kafka import KafkaSink
    from statefulbolts.connectors.sinks import AtLeastOnceSinkBolt, Sink

    class OnlyOnce(Sink):
        def stage(self, tuple_: Any) -> Any:
            return None

        def published(self, lane: Any) -> None:
            return None

        def publish(self, *args: Any) -> Any:
            raise NotImplementedError

    with pytest.raises(TypeError, match="has no at-least-once write"):
        AtLeastOnceSinkBolt(OnlyOnce())
    assert repr(AtLeastOnceSinkBolt(KafkaSink("t"))) == "AtLeastOnceSinkBolt(Kafka topic 't')"
    with pytest.raises(TypeError, match="needs a Sink"):
        ExactlyOnceSinkBolt(object())  # type: ignore[arg-type]
