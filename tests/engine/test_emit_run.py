"""``TaskCollector.emit_run`` puts rows where ``emit_to`` one by one puts them (no Spark here).

A partitioned spout's task emits what it read as one run of rows with consecutive roots; the
batches, roots, round-robin and counts must be those of an ``emit_to`` per row.
"""

from __future__ import annotations

from typing import Any

import pytest

from statefulbolts import Bolt, Fields, Spout, TopologyBuilder
from statefulbolts.errors import TopologyError
from statefulbolts.runtime._collector import TaskCollector
from statefulbolts.runtime._plan import ExecutionPlan


class Pairs(Spout):
    def next_tuple(self) -> None:
        """Never called: the tests emit through the task collector."""

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("line"))
        declarer.declare_stream("pairs", Fields("word", "n"))


class Sink(Bolt):
    def execute(self, tuple: Any) -> None:  # noqa: A002
        """Never called."""

    def declare_output_fields(self, declarer: Any) -> None:
        """Nothing."""


def plan_of(grouping: str, tasks: int, stream: str = "default") -> ExecutionPlan:
    """``lines`` (2 tasks) into ``sink`` (``tasks`` tasks) by ``grouping`` on ``stream``."""
    builder = TopologyBuilder()
    builder.set_spout("lines", Pairs(), 2)
    declarer = builder.set_bolt("sink", Sink(), tasks)
    if grouping == "fields":
        declarer.fields_grouping("lines", Fields("word"), stream)
    else:
        getattr(declarer, f"{grouping}_grouping")("lines", stream)
    return ExecutionPlan(builder.create_topology())


def collector(plan: ExecutionPlan, task: int = 1) -> TaskCollector:
    comp = plan.index["lines"]
    return TaskCollector(plan, comp, task, 7, "lines")


@pytest.mark.parametrize(
    ("grouping", "tasks", "stream", "rows"),
    [
        ("shuffle", 3, "default", [[f"line {i}"] for i in range(20)]),  # by slices
        ("shuffle", 3, "default", [["a"], ["b"]]),  # fewer rows than tasks
        ("local_or_shuffle", 2, "default", [[f"line {i}"] for i in range(9)]),  # one task
        ("global", 3, "pairs", [[f"w{i}", i] for i in range(9)]),  # one task, two fields
        ("fields", 3, "pairs", [[f"w{i % 4}", i] for i in range(12)]),  # one at a time
    ],
)
def test_emit_run_gives_the_batches_roots_and_counts_of_emit_to_per_row(
    grouping: str, tasks: int, stream: str, rows: list[list[Any]]
) -> None:
    plan = plan_of(grouping, tasks, stream)
    run, each = collector(plan), collector(plan)
    for c in (run, each):  # the round-robin starts part way, as after an earlier partition
        c.emit_to(rows[0], stream, 3)
    run.emit_run(rows, stream, 100)
    for k, values in enumerate(rows):
        each.emit_to(values, stream, 100 + k)
    assert run.batches == each.batches
    assert run.emitted == each.emitted == len(rows) + 1
    roots = sorted(r for _, got, _ in run.batches.values() for r in got)
    assert roots == [3, *range(100, 100 + len(rows))]
    # And the round-robin goes on from the same place: the next emit lands alike.
    run.emit_to(rows[0], stream, 999)
    each.emit_to(rows[0], stream, 999)
    assert run.batches == each.batches


def test_emit_run_shares_rows_out_round_robin_over_the_tasks() -> None:
    run = collector(plan_of("shuffle", 3), task=0)
    run.emit_run([[f"l{i}"] for i in range(7)], "default", 10)
    got = {dtask: (vals, list(roots)) for (_, dtask, _), (vals, roots, _) in run.batches.items()}
    assert got == {
        0: (["l0", "l3", "l6"], [10, 13, 16]),
        1: (["l1", "l4"], [11, 14]),
        2: (["l2", "l5"], [12, 15]),
    }


def test_emit_run_of_nothing_makes_no_batch() -> None:
    run = collector(plan_of("shuffle", 3))
    run.emit_run([], "default", 10)
    assert run.batches == {} and run.emitted == 0


def test_emit_run_names_a_row_of_the_wrong_width() -> None:
    run = collector(plan_of("shuffle", 3))
    with pytest.raises(TopologyError, match=r"emitted 2 values on stream 'default'"):
        run.emit_run([["ok"], ["two", "values"]], "default", 10)
