"""Column batches (``BasicBolt.execute_batch``) give exactly what the per-tuple path gives.

A task whose ``BasicBolt`` defines ``execute_batch`` takes its single-tree data batches as
``ColumnBatch`` columns and acks each in one ledger step. The task-level tests drive
``run_task`` with records and compare what the task sends back (emitted batches, XOR ledgers,
fails, metrics) with the per-tuple path's; the end-to-end tests run the same topology both ways,
on the inline engine and once on the shared Spark session, and compare the committed state
and what the spout saw.
"""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import column_topologies as col
import pytest
import topologies as topo
from pyspark import cloudpickle

from checkpoint import CheckpointTaskProgram
from statefulbolts import (
    BasicBolt,
    ColumnBatch,
    FailedException,
    Fields,
    LocalCluster,
    Spout,
    TopologyBuilder,
)
from statefulbolts.acker import DeliveryLedger, tuple_id
from statefulbolts.components import BasicBoltExecutor
from statefulbolts.errors import TaskFailedError
from statefulbolts.runtime._columns import ROWS
from statefulbolts.runtime._plan import ExecutionPlan
from statefulbolts.runtime._program import TaskJob
from statefulbolts.runtime._records import AckLedger, Fails, TaskReport, TupleBatch
from statefulbolts.runtime._task import run_task
from statefulbolts.runtime._task_errors import decode_task_error
from statefulbolts.testing import RecordingCollector, make_context

# ------------------------------------------------------------------------- the ledger's runs


def test_a_run_acked_whole_settles_as_acking_each_of_its_tuples() -> None:
    roots = [7, 7, 9, 0, 9]
    whole, each = DeliveryLedger(base=100), DeliveryLedger(base=100)
    for ledger in (whole, each):
        ledger.deliver([5])  # one tuple before the batch, acked last: the run cannot settle
        ledger.deliver(roots)
    whole.ack_run(1, roots)
    whole.ack(col.Delivered(0, 5))
    for i, root in enumerate(roots):
        each.ack(col.Delivered(1 + i, root))
    each.ack(col.Delivered(0, 5))
    assert whole.acked_in_runs == 5
    assert whole.settle() == each.settle() == ({}, True)


def test_a_run_after_the_settled_prefix_settles_at_once_and_a_second_ack_shows() -> None:
    ledger = DeliveryLedger(base=100)
    ledger.deliver([7, 9])
    ledger.ack_run(0, [7, 9])
    assert (ledger.settled, ledger.acked_in_runs) == (2, 0)
    ledger.ack(col.Delivered(1, 9))  # acked twice: its tree's XOR is no longer zero
    assert ledger.settle() == ({9: tuple_id(101)}, False)


def test_a_run_not_acked_leaves_its_roots_open() -> None:
    ledger = DeliveryLedger(base=100)
    ledger.deliver([7, 9])
    ledger.deliver([9])
    ledger.ack_run(2, [9])  # the third tuple: the first two stay open
    assert ledger.settle() == ({7: tuple_id(100), 9: tuple_id(101)}, False)


# ------------------------------------------------------------------------- one task, directly


class _Lines(Spout):
    def next_tuple(self) -> None:
        """Never called: the tests feed records directly."""

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("value", "count"))


class _Sink(BasicBolt):
    """Emits ``(value, 10 * count)`` on; per tuple. ``FailedException`` on ``fail_on``."""

    fail_on: Any = None
    poison: Any = None

    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        value = tuple.get_value(0)
        if value == self.poison:
            raise RuntimeError("poison")
        if value == self.fail_on:
            raise FailedException(value)
        collector.emit([value, 10 * tuple.get_value(1)])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("value", "count"))


class _BatchSink(_Sink):
    """``_Sink`` in batches; a batch holding ``fail_on`` fails whole, ``poison`` raises."""

    calls: list[int] = []

    def execute_batch(self, batch: Any, collector: Any) -> None:
        _BatchSink.calls.append(len(batch))
        values = batch.column("value")
        if self.poison in values or "poison-batch-only" in values:
            raise RuntimeError("poison in the batch")
        if self.fail_on in values:
            raise FailedException(self.fail_on)
        for row, (value, count) in enumerate(zip(values, batch.column(1), strict=True)):
            collector.emit([value, 10 * count], row)


def _run(sink: BasicBolt, records: list[TupleBatch]) -> list[Any]:
    """Run the one ``sink`` task (no checkpoints) over ``records``; what it sends back."""
    builder = TopologyBuilder()
    builder.set_spout("lines", _Lines(), 2)
    builder.set_bolt("sink", sink).shuffle_grouping("lines")
    builder.set_bolt("next", _Sink()).shuffle_grouping("sink")
    topology = builder.create_topology()
    plan = ExecutionPlan(topology)
    layout = plan.layout([plan.index["sink"]])
    job = TaskJob(plan, layout, CheckpointTaskProgram(None, 0), "cols", {}, 3, 0)
    out = run_task(job, cloudpickle.dumps(topology), 0, 0, [(0, records)])
    return [r for _, recs in out for r in recs]


def _records(n: int, *, more: dict[int, tuple[int, ...]] | None = None) -> list[TupleBatch]:
    """Two source tasks' batches into ``sink`` (component 1, from ``lines``, component 0)."""
    rows = [[f"w{i % 5}", i] for i in range(n)]
    return [
        TupleBatch(2, 0, 0, 0, 0, rows, [1 + i // 3 for i in range(n)], more),
        TupleBatch(2, 0, 0, 1, 0, rows[:7], [900] * 7, None),
    ]


@pytest.mark.parametrize(
    ("case", "n"),
    [("every tuple acked", 40), ("over several batches", 2 * ROWS + 5), ("two trees", 30)],
)
def test_a_batch_task_sends_back_what_the_per_tuple_task_does(case: str, n: int) -> None:
    more = {3: (77,), 4: (78, 79)} if case == "two trees" else None
    _BatchSink.calls = []
    by_batch = _run(_BatchSink(), _records(n, more=more))
    by_tuple = _run(_Sink(), _records(n, more=more))
    assert col.comparable(by_batch) == col.comparable(by_tuple)
    (report,) = [r for r in by_batch if isinstance(r, TaskReport)]
    assert (report.metrics.executed, report.metrics.acked) == (n + 7, n + 7)
    assert not [r for r in by_batch if isinstance(r, AckLedger | Fails)]
    emitted = [r for r in by_batch if isinstance(r, TupleBatch)]
    assert sum(len(b.column()) for b in emitted) == n + 7
    # A batch of tuples of several trees goes a tuple at a time; the others in batches.
    expected = [7] if more else [*([ROWS] * (n // ROWS)), n % ROWS, 7]
    assert _BatchSink.calls == expected


def test_failed_exception_in_a_batch_fails_every_tuple_of_the_batch() -> None:
    sink = _BatchSink()
    sink.fail_on = "w9"
    records = _records(10)
    records[0].values[9][0] = "w9"  # in the first batch only
    sent = _run(sink, records)
    (fails,) = [r for r in sent if isinstance(r, Fails)]
    assert sorted(fails.roots) == sorted(1 + i // 3 for i in range(10))  # the first batch
    (report,) = [r for r in sent if isinstance(r, TaskReport)]
    assert (report.metrics.executed, report.metrics.acked, report.metrics.failed) == (17, 7, 10)
    # The failed tuples are not acked: their XORs stay open, as the per-tuple path leaves them.
    (left,) = [r for r in sent if isinstance(r, AckLedger)]
    assert set(left.acks) == set(fails.roots)


def test_a_batch_that_raises_runs_again_per_tuple_and_names_the_failing_tuple() -> None:
    sink = _BatchSink()
    sink.poison = "w4"
    with pytest.raises(TaskFailedError) as raised:
        _run(sink, _records(10))
    error = decode_task_error(raised.value)
    assert error is not None and error.failing is not None
    # The per-tuple path's error: the first tuple holding the poison, with its root.
    assert (error.failing.values, error.failing.root) == (["w4", 4], 2)
    assert error.message == "poison"


def test_a_batch_that_raises_where_no_tuple_does_fails_the_task_with_its_own_error() -> None:
    records = _records(4)
    records[0].values[2][0] = "poison-batch-only"
    with pytest.raises(TaskFailedError) as raised:
        _run(_BatchSink(), records)
    error = decode_task_error(raised.value)
    assert error is not None
    assert (error.message, error.failing) == ("poison in the batch", None)


def test_a_column_batch_reads_columns_rows_and_tuples() -> None:
    batch = ColumnBatch(
        [["a", 1], ["b", 2]], Fields("value", "count"), "src", 4, single=False, roots=[7, 8]
    )
    assert batch.columns == {"value": ["a", "b"], "count": [1, 2]}
    assert batch.row(1) == ["b", 2]
    t = batch.tuple(1)
    assert (t.values, t.source_component, t.source_task, t.anchors) == (
        ["b", 2],
        "src",
        4,
        ((8, 1),),
    )
    single = ColumnBatch(["x", "y"], Fields("word"), "src", 4, single=True)
    assert (single.column("word"), single.row(0), len(single)) == (["x", "y"], ["x"], 2)


def test_a_batch_bolt_driven_without_the_runtime_emits_anchored_and_acks_each_tuple() -> None:
    # Driven by hand (the testing harness's collector has no ``ack_batch``): acks and fails
    # come one per tuple, and each emit is anchored to its row's tuple.
    executor = BasicBoltExecutor(_BatchSink())
    out = RecordingCollector()
    executor.prepare({}, make_context("sink"), out)
    rows = [["a", 1], ["b", 2]]
    batch = ColumnBatch(rows, Fields("value", "count"), "src", 4, roots=[7, 8], first=5)
    executor.execute_batch(batch)
    assert [(e.values, [t.anchors for t in e.anchors]) for e in out.emitted] == [
        (["a", 10], [((7, 5),)]),
        (["b", 20], [((8, 6),)]),
    ]
    assert [t.anchors for t in out.acked] == [((7, 5),), ((8, 6),)]
    executor.bolt.fail_on = "b"  # type: ignore[attr-defined]
    executor.execute_batch(batch)
    assert [t.values for t in out.failed] == rows and len(out.acked) == 2


# --------------------------------------------------------------------------------- end to end


def _run_topology(
    cluster: LocalCluster, key: str, n: int, scale: BasicBolt, burst: int = 40
) -> dict[str, Any]:
    got = col.outcome(cluster, key, col.scaled(key, n, scale, burst=burst))
    return {**got, "keep": col.sorted_lists(got["keep"])}


def test_batch_and_per_tuple_bolts_commit_and_ack_the_same_on_the_inline_engine(
    tmp_path: Path,
) -> None:
    n = 200
    log = tmp_path / "batches.log"
    with LocalCluster(engine="inline") as cluster:
        by_batch = _run_topology(cluster, topo.new_key("cols-batch"), n, col.BatchScale(str(log)))
        by_tuple = _run_topology(cluster, topo.new_key("cols-tuple"), n, col.Scale())
    counts, kept = col.expected(n)
    assert by_batch == by_tuple
    assert (by_batch["count"], by_batch["keep"]) == (counts, kept)
    assert by_batch["acks"] == {i: 1 for i in range(n)} and by_batch["fails"] == {}
    # ``scale`` took every (value, count) pair through execute_batch.
    assert sum(map(int, log.read_text().split())) == n


def test_a_batch_that_crashes_once_is_rolled_back_replayed_and_counted_exactly(
    tmp_path: Path,
) -> None:
    # The first batch holding the value raises: the per-tuple search finds no tuple that raises, so
    # the task fails with the batch's error, the transaction rolls back and is replayed.
    n, value = col.crash_case()
    log = tmp_path / "batches.log"
    scale = col.BatchScale(str(log), fail_on=value, crash=True)
    with LocalCluster(engine="inline") as cluster:
        got = _run_topology(cluster, topo.new_key("cols-crash"), n, scale)
    counts, kept = col.expected(n)
    assert (got["count"], got["keep"]) == (counts, kept)
    assert got["rollbacks"] >= 1 and Path(f"{log}.failed").exists()
    assert got["acks"] == {i: 1 for i in range(n)}


def test_a_batch_failed_once_is_replayed_at_least_once(tmp_path: Path) -> None:
    # ``FailedException`` fails the batch's tuples; the spout replays each of them. As on the
    # per-tuple path, ``count`` upstream counted the failed tuples once already, and counts
    # them again when they are replayed: by exactly the failed tuples, no more.
    n = 200
    log = tmp_path / "batches.log"
    scale = col.BatchScale(str(log), fail_on="w2")
    with LocalCluster(engine="inline") as cluster:
        got = _run_topology(cluster, topo.new_key("cols-fail"), n, scale)
    counts, _ = col.expected(n)
    assert got["fails"] and set(got["fails"].values()) == {1}
    assert got["acks"] == {i: 1 for i in range(n)}
    again = collections.Counter(col.values(n)[i] for i in got["fails"])
    assert got["count"] == dict(collections.Counter(counts) + again)
    assert "w2" in again  # the failed batch held it


@pytest.mark.spark
def test_a_batch_bolt_chained_on_spark_commits_what_the_per_tuple_path_does(
    spark: Any, tmp_path: Path
) -> None:
    n = 200
    log = tmp_path / "batches.log"
    cluster = LocalCluster(spark=spark)
    # Two bursts: few transactions, each one Spark job per stage chain.
    got = _run_topology(cluster, topo.new_key("cols-spark"), n, col.BatchScale(str(log)), 100)
    counts, kept = col.expected(n)
    assert (got["count"], got["keep"]) == (counts, kept)
    assert got["acks"] == {i: 1 for i in range(n)} and got["fails"] == {}
    assert sum(map(int, log.read_text().split())) == n
