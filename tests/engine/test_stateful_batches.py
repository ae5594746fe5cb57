"""A ``StatefulBolt`` with ``execute_batch`` gives exactly what its per-tuple ``execute`` gives.

The task-level tests drive ``run_task`` through a PREPARE with records and compare what the
task sends back (emits, the forwarded checkpoint, XOR ledgers, metrics) and the state it
prepared with the per-tuple bolt's; the executor test drives the checkpoint steps by hand
(held acks released on COMMIT, failed on ROLLBACK); the end-to-end tests run the same topology
both ways on the inline engine, and once on the shared Spark session, and compare the
committed state and what the spout saw.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import column_topologies as col
import pytest
import topologies as topo
from pyspark import cloudpickle

from checkpoint import Action, CheckpointTaskProgram, StatefulBoltExecutor
from providers import InMemoryKeyValueStateProvider, KeyValueState, StateFactory
from providers.memory import InMemoryKeyValueState
from statefulbolts import (
    BasicBolt,
    ColumnBatch,
    ColumnOutputCollector,
    Fields,
    LocalCluster,
    StatefulBolt,
    TopologyBuilder,
    Tuple,
)
from statefulbolts.acker import DeliveryLedger, tuple_id
from statefulbolts.errors import TaskFailedError, TopologyError, UnanchoredEmitError
from statefulbolts.runtime._collector import TaskCollector
from statefulbolts.runtime._columns import ROWS
from statefulbolts.runtime._plan import ExecutionPlan
from statefulbolts.runtime._program import TaskJob
from statefulbolts.runtime._records import AckLedger, Fails, TaskReport, TupleBatch
from statefulbolts.runtime._task import run_task
from statefulbolts.runtime._task_errors import decode_task_error
from statefulbolts.testing import RecordingCollector, drive, make_context
from statefulbolts.topology import CHECKPOINT_STREAM_ID

# --------------------------------------------------------------------- the ledger's runs


def test_runs_released_after_a_checkpoint_ack_settle_at_once_and_a_second_ack_shows() -> None:
    # A stateful task: its data in two batches, then the checkpoint tuple, acked first (when
    # it is forwarded); the batches' held acks come after it.
    ledger = DeliveryLedger(base=100)
    ledger.deliver([7, 7, 9])
    ledger.deliver([9, 8])
    ledger.deliver([5])  # the checkpoint tuple, number 5
    ledger.ack(col.Delivered(5, 5))
    ledger.ack_run(0, [7, 7, 9])
    ledger.ack_run(3, [9, 8])
    assert (ledger.settled, ledger.acked_in_runs) == (5, 0)
    assert ledger.settle() == ({}, True)
    ledger.ack(col.Delivered(1, 7))  # acked again, on its own: its tree's XOR shows
    assert ledger.settle() == ({7: tuple_id(101)}, False)


def test_a_tuple_acked_alone_before_its_run_leaves_its_second_xor_open() -> None:
    ledger = DeliveryLedger(base=100)
    ledger.deliver([7, 9])
    ledger.ack(col.Delivered(1, 9))
    ledger.ack_run(0, [7, 9])  # tuple 1 acked twice
    assert ledger.settle() == ({9: tuple_id(101)}, False)


# ------------------------------------------------------------------ emit_columns, per route


class _Emitter(BasicBolt):
    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        """Never called: the tests emit through the collector directly."""

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare_stream("pairs", Fields("word", "count"))  # local: into one task
        declarer.declare_stream("words", Fields("word"))  # fields grouped over two tasks
        declarer.declare_stream("single", Fields("word"))  # fields grouped into one task
        declarer.declare_stream("wide", Fields("word", "count"))  # fields grouped, two fields


def _emitter_plan() -> ExecutionPlan:
    builder = TopologyBuilder()
    builder.set_spout("src", topo.ValueSpout("unused", []))
    builder.set_bolt("emit", _Emitter(), 2).shuffle_grouping("src")
    builder.set_bolt("pairs", topo.Relay(), 2).local_or_shuffle_grouping("emit", "pairs")
    builder.set_bolt("words", topo.Relay(), 2).fields_grouping("emit", Fields("word"), "words")
    builder.set_bolt("single", topo.Relay(), 1).fields_grouping("emit", Fields("word"), "single")
    builder.set_bolt("wide", topo.Relay(), 2).fields_grouping("emit", Fields("word"), "wide")
    return ExecutionPlan(builder.create_topology())


@pytest.mark.parametrize("stream", ["pairs", "words", "single", "wide"])
def test_emit_columns_makes_the_batches_emit_makes_row_by_row(stream: str) -> None:
    plan = _emitter_plan()
    comp = plan.index["emit"]
    words = ["a", "b", "a", "c", "b", "a", 7]  # 7: not a str, the general path's
    roots = [11, 0, 12, 12, 13, 14, 15]
    width = len(plan.fields[comp][plan.stream_index[comp][stream]])
    columns = [words, list(range(len(words)))][:width]
    by_columns, by_row = (TaskCollector(plan, comp, 0, 3, "emit") for _ in range(2))
    for half in (slice(0, 3), slice(3, None)):  # twice: the routes' caches are made, then used
        by_columns.emit_columns([c[half] for c in columns], roots[half], stream)
    for i, root in enumerate(roots):
        anchor = Tuple(["x"], Fields("line"), "src", 1, "default", ((root, i),))
        by_row.emit([c[i] for c in columns], anchor, stream)
    assert by_columns.batches == by_row.batches
    assert by_columns.emitted == by_row.emitted == len(words)
    assert sum(len(values) for values, _, _ in by_columns.batches.values()) == len(words)


def test_emit_columns_refuses_a_wrong_width_unequal_columns_and_a_data_free_job() -> None:
    plan = _emitter_plan()
    comp = plan.index["emit"]
    collector = TaskCollector(plan, comp, 0, 3, "emit")
    with pytest.raises(TopologyError, match=r"emitted 1 values on stream 'pairs'"):
        collector.emit_columns([["a"]], [1], "pairs")
    with pytest.raises(TopologyError, match=r"columns of lengths \[2, 1\]"):
        collector.emit_columns([["a", "b"], [1]], [1, 2], "pairs")
    with pytest.raises(TopologyError, match="undeclared stream 'nope'"):
        collector.emit_columns([["a"]], [1], "nope")
    free = TaskCollector(plan, comp, 0, 3, "emit", data_free="COMMIT")
    with pytest.raises(TopologyError, match="during COMMIT"):
        free.emit_columns([["a"]], [1], "words")
    assert collector.batches == {} and free.batches == {}


def test_a_column_collector_s_rows_anchor_each_emit_and_a_wrong_length_is_refused() -> None:
    out = RecordingCollector()
    columns = ColumnOutputCollector(out)
    batch = ColumnBatch(["a", "b", "c"], Fields("value"), "src", 4, single=True, roots=[7, 8, 9])
    with pytest.raises(UnanchoredEmitError, match="outside execute_batch"):
        columns.emit_columns([["x"]])
    columns.set_batch(batch)
    columns.emit_columns([["x", "y"]], [2, 0])
    with pytest.raises(ValueError, match=r"one value per tuple of the batch \(3\)"):
        columns.emit_columns([["x", "y"]])
    assert [(e.values, [t.anchors for t in e.anchors]) for e in out.emitted] == [
        (["x"], [((9, 2),)]),
        (["y"], [((7, 0),)]),
    ]


# ------------------------------------------------------------------------- one task, directly


def _prepare_count(name: str, count: StatefulBolt, records: Any) -> tuple[list[Any], dict]:
    """Run task 0 of ``count`` (in ``tallied``) through PREPARE(0) over ``records(plan)``.

    Returns what the task sends back and the state it prepared.
    """
    topology = col.tallied(name, 0, count, col.BatchKeep())
    plan = ExecutionPlan(topology)
    layout = plan.layout([plan.index["count"]])
    job = TaskJob(plan, layout, CheckpointTaskProgram(Action.PREPARE, 0), name, {}, 0, 0)
    out = run_task(job, cloudpickle.dumps(topology), 0, 0, [(0, records(plan))])
    sent = [r for _, recs in out for r in recs]
    state = StateFactory.get_state(f"{name}/count-0", {})
    assert isinstance(state, KeyValueState)
    return sent, dict(state)


def _records(n: int, *, more: dict[int, tuple[int, ...]] | None = None) -> Any:
    """Both relay tasks' values for count task 0, then each one's PREPARE(0) checkpoint."""

    def make(plan: ExecutionPlan) -> list[TupleBatch]:
        count, relay = plan.index["count"], plan.index["relay"]
        data = plan.stream_index[relay]["default"]
        cp = plan.stream_index[relay][CHECKPOINT_STREAM_ID]
        values = [f"w{(i * i) % 7}" for i in range(n)]
        return [
            TupleBatch(count, 0, relay, 0, data, values, [1 + i // 3 for i in range(n)], more),
            TupleBatch(count, 0, relay, 1, data, values[:9], [900 + i for i in range(9)], None),
            TupleBatch(count, 0, relay, 0, cp, [[0, "PREPARE"]], [5000], None),
            TupleBatch(count, 0, relay, 1, cp, [[0, "PREPARE"]], [5000], None),
        ]

    return make


@pytest.mark.parametrize(
    ("case", "n"),
    [
        ("in batches", 40),
        ("emit per row", 40),
        ("over several batches", 2 * ROWS + 5),
        ("two trees", 30),
    ],
)
def test_a_stateful_batch_task_prepares_and_sends_back_what_the_per_tuple_task_does(
    tmp_path: Path, case: str, n: int
) -> None:
    more = {3: (77,), 4: (78, 79)} if case == "two trees" else None
    log = tmp_path / "batches.log"
    batches = col.BatchTally(str(log), one_by_one=case == "emit per row")
    key = topo.new_key("sbatch")
    try:
        by_batch, batch_state = _prepare_count(f"{key}-b", batches, _records(n, more=more))
        by_tuple, tuple_state = _prepare_count(f"{key}-t", col.Tallied(), _records(n, more=more))
    finally:
        InMemoryKeyValueStateProvider.drop(key)
    # Names differ only in the state: the records sent back are the same, field for field.
    assert col.comparable(by_batch) == col.comparable(by_tuple)
    assert batch_state == tuple_state
    assert sum(batch_state.values()) == n + 9
    (report,) = [r for r in by_batch if isinstance(r, TaskReport)]
    assert (report.metrics.executed, report.metrics.acked) == (n + 9, n + 9)
    assert report.metrics.emitted == n + 9  # data tuples: the forwarded checkpoint is not one
    # Every held ack was released at the end of the PREPARE: no tree is left open.
    assert not [r for r in by_batch if isinstance(r, AckLedger | Fails)]
    # A batch of tuples of several trees goes a tuple at a time; the others in batches.
    sizes = [int(s) for s in log.read_text().split()]
    assert sizes == ([9] if more else [*([ROWS] * (n // ROWS)), n % ROWS, 9])


def test_a_stateful_batch_that_raises_runs_again_per_tuple_and_names_the_failing_tuple(
    tmp_path: Path,
) -> None:
    key = topo.new_key("sbatch-poison")
    bolt = col.BatchTally(str(tmp_path / "batches.log"), poison="w2")
    try:
        with pytest.raises(TaskFailedError) as raised:
            _prepare_count(key, bolt, _records(10))
    finally:
        InMemoryKeyValueStateProvider.drop(key)
    error = decode_task_error(raised.value)
    assert error is not None and error.failing is not None
    # values(10)[3] == "w2": the first tuple holding the poison, with its root 1 + 3 // 3.
    assert (error.failing.values, error.failing.root) == (["w2"], 2)
    assert (error.component, error.message) == ("count", "poison value 'w2'")


# ------------------------------------------------------------------ the executor, by hand


def test_a_batch_s_acks_are_held_until_commit_and_failed_on_rollback() -> None:
    context = make_context("count")
    out = RecordingCollector()
    executor = StatefulBoltExecutor(col.BatchTally())
    state = InMemoryKeyValueState(f"{topo.new_key('sbatch-held')}/count-0")
    executor.prepare({}, context, out, state)

    def batch(values: list[str], roots: list[int], first: int) -> ColumnBatch:
        return ColumnBatch(
            values, Fields("value"), "source", 1, single=True, roots=roots, first=first
        )

    drive(executor, context, [batch(["a", "b"], [7, 8], 0)])  # before INITSTATE: it waits
    assert out.emitted == [] and state.get("a") is None
    drive(executor, context, [("INITSTATE", 0), batch(["a", "a"], [9, 9], 2)])
    emitted = out.on_stream("default")
    assert [e.values for e in emitted] == [["a", 1], ["b", 1], ["a", 2], ["a", 3]]
    # Each emit is anchored to its own input tuple.
    assert [[t.anchors for t in e.anchors] for e in emitted] == [
        [((7, 0),)],
        [((8, 1),)],
        [((9, 2),)],
        [((9, 3),)],
    ]
    data = [t for t in out.acked if t.source_stream_id != CHECKPOINT_STREAM_ID]
    assert data == [] and out.failed == []
    drive(executor, context, [("PREPARE", 1)])
    assert [t for t in out.acked if t.source_stream_id != CHECKPOINT_STREAM_ID] == []
    drive(executor, context, [("COMMIT", 1)])
    data = [t for t in out.acked if t.source_stream_id != CHECKPOINT_STREAM_ID]
    assert [(t.values, t.anchors) for t in data] == [
        (["a"], ((7, 0),)),
        (["b"], ((8, 1),)),
        (["a"], ((9, 2),)),
        (["a"], ((9, 3),)),
    ]
    drive(executor, context, [batch(["c"], [10], 4), ("PREPARE", 2), ("ROLLBACK", 2)])
    assert [(t.values, t.anchors) for t in out.failed] == [(["c"], ((10, 4),))]
    assert state.get("c") is None and state.get("a") == 3
    # A bolt without execute_batch takes no batch.
    per_tuple = StatefulBoltExecutor(col.Tallied())
    per_tuple.prepare({}, context, RecordingCollector(), InMemoryKeyValueState("held/count-1"))
    with pytest.raises(TypeError, match="its bolt must define execute_batch"):
        drive(per_tuple, context, [batch(["a"], [1], 0)])


# --------------------------------------------------------------------------------- end to end


def _run_topology(
    cluster: LocalCluster, key: str, n: int, count: Any, keep: Any, burst: int = 40
) -> dict[str, Any]:
    return col.outcome(cluster, key, col.tallied(key, n, count, keep, burst))


def test_stateful_batch_and_per_tuple_bolts_commit_emit_and_ack_the_same_inline(
    tmp_path: Path,
) -> None:
    n = 200
    log = tmp_path / "batches.log"
    with LocalCluster(engine="inline") as cluster:
        by_batch = _run_topology(
            cluster, topo.new_key("sbatch-b"), n, col.BatchTally(str(log)), col.BatchKeep()
        )
        by_tuple = _run_topology(cluster, topo.new_key("sbatch-t"), n, col.Tallied(), col.Keep())
    counts, _ = col.expected(n)
    # ``keep`` holds every count ``count`` emitted, per value, in the order it got them.
    assert by_batch == by_tuple
    assert by_batch["count"] == counts
    assert col.sorted_lists(by_batch["keep"]) == {
        v: list(range(1, c + 1)) for v, c in counts.items()
    }
    assert by_batch["acks"] == {i: 1 for i in range(n)} and by_batch["fails"] == {}
    assert sum(map(int, log.read_text().split())) == n  # every value went through a batch


def test_a_stateful_batch_that_crashes_once_is_rolled_back_replayed_and_counted_exactly(
    tmp_path: Path,
) -> None:
    # The first batch holding the value raises, and no tuple does when the batch runs again per
    # tuple: the task fails with the batch's error, the transaction rolls back and is replayed.
    n, value = col.crash_case()
    log = tmp_path / "batches.log"
    count = col.BatchTally(str(log), crash_on=value)
    with LocalCluster(engine="inline") as cluster:
        got = _run_topology(cluster, topo.new_key("sbatch-crash"), n, count, col.BatchKeep())
    counts, _ = col.expected(n)
    assert got["count"] == counts
    assert col.sorted_lists(got["keep"]) == {v: list(range(1, c + 1)) for v, c in counts.items()}
    assert got["rollbacks"] >= 1 and Path(f"{log}.crashed").exists()
    assert got["acks"] == {i: 1 for i in range(n)}


@pytest.mark.spark
def test_a_stateful_batch_bolt_on_spark_commits_what_the_per_tuple_path_does(
    spark: Any, tmp_path: Path
) -> None:
    n = 200
    log = tmp_path / "batches.log"
    cluster = LocalCluster(spark=spark)
    # Two bursts: few transactions, each one Spark job per stage chain.
    key = topo.new_key("sbatch-spark")
    got = _run_topology(cluster, key, n, col.BatchTally(str(log)), col.BatchKeep(), 100)
    counts, _ = col.expected(n)
    assert got["count"] == counts
    assert col.sorted_lists(got["keep"]) == {v: list(range(1, c + 1)) for v, c in counts.items()}
    assert got["acks"] == {i: 1 for i in range(n)} and got["fails"] == {}
    assert sum(map(int, log.read_text().split())) == n
