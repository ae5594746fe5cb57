"""The engine seam: run a set of component tasks as one Spark job, get back what they did.

A protocol asks for a job with a ``JobSpec`` (layout, program, inputs) and gets a ``JobResult``:
reports per task, tuples bound outside the job, open roots and fails. These tests drive the
seam directly, with programs of their own, as a second protocol would.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import pytest

from checkpoint import CheckpointTaskProgram
from statefulbolts import Bolt, Fields, Spout, TopologyBuilder
from statefulbolts.errors import FailedException
from statefulbolts.runtime._engine import JobSpec
from statefulbolts.runtime._pyrdd import PythonStages
from statefulbolts.runtime._records import JobResult, TupleBatch
from statefulbolts.runtime._spark_engine import SparkEngine as Engine
from statefulbolts.runtime._task_errors import decode_task_error
from statefulbolts.topology import ComponentSpec, StormTopology

pytestmark = pytest.mark.spark


class Lines(Spout):
    def next_tuple(self) -> None:
        """Never called: the tests feed records directly."""

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("line"))


class Upper(Bolt):
    """Emits its input upper-cased; ``boom`` in a line raises ``FailedException``."""

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def execute(self, tuple: Any) -> None:  # noqa: A002
        line = tuple.get_value(0)
        if "boom" in line:
            raise FailedException(f"boom in {line!r}")
        self.collector.emit([line.upper()], tuple)
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("line"))


def chain() -> StormTopology:
    """lines -> a (2 tasks) -> b (1 task) -> c (2 tasks), shuffle all the way."""
    builder = TopologyBuilder()
    builder.set_spout("lines", Lines())
    builder.set_bolt("a", Upper(), 2).shuffle_grouping("lines")
    builder.set_bolt("b", Upper(), 1).shuffle_grouping("a")
    builder.set_bolt("c", Upper(), 2).shuffle_grouping("b")
    return builder.create_topology()


@dataclass(frozen=True)
class Failing:
    """A program of its own: the plain checkpoint-less steps, but a ``FailedException`` fails
    the task on purpose (the transactional protocol's rule), naming what failed."""

    inner: CheckpointTaskProgram

    @property
    def data_free(self) -> None:
        return None

    @property
    def tracking(self) -> bool:
        return False

    def is_control(self, stream_id: str) -> bool:
        return False

    def failure(self, exc: Exception) -> Any:
        return ("failed", str(exc)) if isinstance(exc, FailedException) else None

    def executor(self, spec: ComponentSpec, info: Any) -> Any:
        return self.inner.executor(spec, info)


@pytest.fixture(scope="module")
def engine(spark: Any) -> Any:
    made = Engine(spark, chain(), "seam", {}, max_jobs=2)
    yield made
    made.close()


def feed(engine: Engine, components: list[str], lines: list[str]) -> tuple[Any, list[list[Any]]]:
    """A layout over ``components`` and its first stage fed with ``lines`` for task 0 of a."""
    plan = engine.plan
    layout = plan.layout([plan.index[c] for c in components])
    a, spout = plan.index["a"], plan.index["lines"]
    inputs: list[list[Any]] = [[] for _ in layout.stages[0]]
    batch = TupleBatch(a, 0, spout, 0, 0, list(lines), [0] * len(lines), None)
    inputs[layout.key_for(-1, a, 0)].append(batch)
    return layout, inputs


def run(engine: Engine, components: list[str], lines: list[str], program: Any = None) -> JobResult:
    layout, inputs = feed(engine, components, lines)
    program = program or CheckpointTaskProgram(None, 1)
    return engine.submit(JobSpec(layout, program, inputs, 1, "seam test")).result(120)


def by_component(engine: Engine, result: JobResult) -> dict[str, list[Any]]:
    names = engine.plan.component_ids
    out: dict[str, list[Any]] = {}
    for report in sorted(result.reports, key=lambda r: (r.comp, r.task)):
        out.setdefault(names[report.comp], []).append(report)
    return out


def test_a_subset_runs_in_stages_and_hands_back_what_leaves_it(engine: Engine) -> None:
    result = run(engine, ["a", "b"], ["x", "y", "z"])
    reports = by_component(engine, result)
    # Every task of a and b reported once; c did not run.
    assert {name: len(r) for name, r in reports.items()} == {"a": 2, "b": 1}
    assert [r.metrics.executed for r in reports["a"]] == [3, 0]
    assert reports["b"][0].metrics.executed == 3
    # b's tuples for c came back: c is outside the job, its input is the job's output.
    c = engine.plan.index["c"]
    assert {o.dest for o in result.outputs} == {c}
    assert sorted(v for o in result.outputs for v in o.column()) == ["X", "Y", "Z"]
    assert result.aborted is False and result.acks == {} and result.fails == set()


def test_a_layout_with_the_first_stage_outside_carries_records_to_a_later_stage(
    engine: Engine,
) -> None:
    # a alone: stage 0; its output to b is the job's output.
    result = run(engine, ["a"], ["q"])
    assert [v for o in result.outputs for v in o.column()] == ["Q"]
    assert result.outputs[0].dest == engine.plan.index["b"]


def test_a_task_failed_by_its_program_skips_every_task_after_it(engine: Engine) -> None:
    program = Failing(CheckpointTaskProgram(None, 1))
    result = run(engine, ["a", "b", "c"], ["fine", "boom now"], program)
    reports = by_component(engine, result)
    assert result.aborted is True
    failed = [r for r in reports["a"] if r.result is not None]
    assert [r.result for r in failed] == [("failed", "boom in 'boom now'")]
    # Nothing downstream acted on the partial batch, and nothing left the job.
    assert [r.metrics.executed for r in reports["b"] + reports["c"]] == [0, 0, 0]
    assert result.outputs == []


def test_a_crash_fails_the_job_with_its_type_and_place(engine: Engine) -> None:
    # The plain program treats FailedException as a crash: Spark retries, then gives up.
    with pytest.raises(Exception) as info:  # noqa: PT011 - Spark wraps it in its own type
        run(engine, ["a"], ["boom"])
    error = decode_task_error(info.value)
    assert error is not None
    assert (error.component, error.is_a(FailedException)) == ("a", True)
    assert error.user_class == f"{__name__}.Upper"
    assert "boom in 'boom'" in error.message


def test_a_flat_layout_runs_exactly_the_tasks_it_names(engine: Engine) -> None:
    plan = engine.plan
    b, c = plan.index["b"], plan.index["c"]
    layout = plan.flat_layout([(c, 1), (b, 0)])
    assert layout.stages == (((c, 1), (b, 0)),)
    spec = JobSpec(layout, CheckpointTaskProgram(None, 2), [[], []], 2, "flat")
    result = engine.submit(spec).result(120)
    assert sorted((r.comp, r.task) for r in result.reports) == [(b, 0), (c, 1)]


def test_acks_reduce_over_acker_partitions_and_merge(engine: Engine) -> None:
    # Tracked roots this time: a acks every input, but a's emits to b are the job's output, so
    # a's part of each tree is complete and every root comes back with its XOR at zero.
    layout, inputs = feed(engine, ["a"], ["r", "s"])
    inputs[0][0] = inputs[0][0]._replace(roots=[11, 12])
    spec = JobSpec(layout, CheckpointTaskProgram(None, 3), inputs, 3, "ackers", ackers=2)
    result = engine.submit(spec).result(120)
    assert result.acks == {} and result.fails == set()
    assert sum(r.metrics.acked for r in result.reports) == 2


@dataclass(frozen=True)
class SlowToPickle:
    """The plain program, whose pickling (with the job's stage functions) takes ``seconds``."""

    inner: CheckpointTaskProgram
    seconds: float

    def __reduce__(self) -> Any:
        time.sleep(self.seconds)
        return (SlowToPickle, (self.inner, self.seconds))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_pickling_a_job_s_stage_functions_counts_as_the_driver_s_time(engine: Engine) -> None:
    # A one-stage job: its stage's function is pickled when its Java RDD is built, which
    # ``JobTimings.before`` (the driver's work) must hold, not Spark's part.
    slow = SlowToPickle(CheckpointTaskProgram(None, 1), 0.3)
    result = run(engine, ["a"], ["x"], slow)
    assert result.timings is not None
    assert result.timings.before >= 0.3
    assert [v for o in result.outputs for v in o.column()] == ["X"]


# ---------------------------------------------------------------- the first stage's input


class Pid(Bolt):
    """Emits the process id of the Python worker that ran it."""

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def execute(self, tuple: Any) -> None:  # noqa: A002
        self.collector.emit([os.getpid()], tuple)
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("pid"))


def test_a_small_input_travels_in_the_function_and_a_large_one_by_parallelize(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    builder = TopologyBuilder()
    builder.set_spout("lines", Lines())
    builder.set_bolt("a", Upper(), 2).shuffle_grouping("lines")
    builder.set_bolt("pid", Pid(), 2).shuffle_grouping("a")
    builder.set_bolt("after", Pid(), 1).shuffle_grouping("pid")  # outside every job: its input
    made = Engine(spark, builder.create_topology(), "inline-feed", {}, max_jobs=1)
    sc = spark.sparkContext
    parallelized: list[int] = []
    parallelize = type(sc).parallelize

    def counted(self: Any, data: Any, slices: Any = None) -> Any:
        parallelized.append(len(data))
        return parallelize(self, data, slices)

    PythonStages.of(sc).empty_slots(2)  # the context's, which an earlier test may have made
    monkeypatch.setattr(type(sc), "parallelize", counted)
    try:
        small = [run(made, ["a", "pid"], ["x", "y"]) for _ in range(8)]
        assert made.inline_feeds == 8 and parallelized == []
        # Every job's tasks ran, on Python workers Spark used again (a worker that left its
        # input unread would not be: a new process for every task).
        pids = [v for result in small for o in result.outputs for v in o.column()]
        assert len(pids) == 16 and len(set(pids)) <= 4
        lines = [f"line {i:06d} " + "x" * 40 for i in range(2_000)]  # some 100 KB pickled
        large = run(made, ["a"], lines)
        assert made.inline_feeds == 8 and parallelized == [2]
        assert sorted(v for o in large.outputs for v in o.column()) == [s.upper() for s in lines]
    finally:
        made.close()
