"""A task runs with the garbage collector off; young garbage is still collected, cheaply."""

from __future__ import annotations

import gc
import pickle
import threading
import weakref
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
from pyspark import cloudpickle

from checkpoint import CheckpointTaskProgram
from statefulbolts import BasicBolt, Bolt, Fields, Spout, TopologyBuilder
from statefulbolts.runtime import _worker
from statefulbolts.runtime._plan import ExecutionPlan
from statefulbolts.runtime._program import TaskJob
from statefulbolts.runtime._records import TaskReport, TupleBatch
from statefulbolts.runtime._task import run_task
from statefulbolts.runtime._worker import _QUIET_YOUNG_LIMIT, _YOUNG_LIMIT, YoungGarbage


@pytest.fixture
def gc_off() -> Iterator[None]:
    was = gc.isenabled()
    gc.disable()
    gc.collect()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _cycles(n: int) -> None:
    for _ in range(n):
        a: list[Any] = []
        a.append(a)  # unreachable once the loop moves on: only the collector frees it


def test_cyclic_garbage_is_collected_and_keeps_the_limit(gc_off: None) -> None:
    young = YoungGarbage()
    young.limit = 1_000
    _cycles(5_000)
    young()
    assert gc.get_count()[0] < 1_000  # collected
    assert young.limit == _YOUNG_LIMIT  # garbage found: keep looking at the usual pace


def test_a_collection_that_finds_nothing_backs_off(gc_off: None) -> None:
    young = YoungGarbage()
    young.limit = 1_000
    alive = [[i] for i in range(5_000)]  # tracked, young and all reachable
    young()
    assert young.limit == _QUIET_YOUNG_LIMIT
    assert len(alive) == 5_000


def test_below_the_limit_nothing_is_collected(gc_off: None) -> None:
    young = YoungGarbage()
    _cycles(100)
    before = gc.get_count()[0]
    young()
    assert gc.get_count()[0] >= before
    assert young.limit == _YOUNG_LIMIT
    assert _worker._YOUNG_LIMIT < _QUIET_YOUNG_LIMIT


def test_young_objects_the_runtime_holds_are_not_counted(gc_off: None) -> None:
    rows: list[list[Any]] = []
    young = YoungGarbage(lambda: len(rows))
    young.limit = 1_000
    rows.extend([["word", i] for i in range(5_000)])  # a task's emitted rows, alive
    before = gc.get_count()[0]
    young()
    assert gc.get_count()[0] >= before  # nothing collected: all of it is held
    assert young.limit == 1_000
    _cycles(2_000)  # garbage the bolt made, beyond the limit whatever the runtime holds
    young()
    assert gc.get_count()[0] < 1_000
    assert young.limit == _YOUNG_LIMIT


def test_young_objects_alive_when_a_task_starts_are_not_counted(gc_off: None) -> None:
    kept = [[i] for i in range(5_000)]  # the task's input, unpickled before its steps
    young = YoungGarbage()
    young.limit = 1_000
    before = gc.get_count()[0]
    young()
    assert gc.get_count()[0] >= before
    assert len(kept) == 5_000


@pytest.mark.parametrize("on", [False, True])
def test_reading_a_broadcast_leaves_the_collector_as_it_was(tmp_path: Any, on: bool) -> None:
    # A broadcast as a Spark worker sees it: a path to the pickled value, read on first use.
    # PySpark's own read turns the collector on whatever it was; a task reads images while
    # its hot loop runs with the collector off.
    from pyspark.core.broadcast import Broadcast

    path = tmp_path / "image"
    path.write_bytes(pickle.dumps(b"an image"))
    ref = Broadcast(path=str(path))
    was = gc.isenabled()
    try:
        _collector(on)
        assert _worker.broadcast_value(ref) == b"an image"
        assert gc.isenabled() is on
    finally:
        _collector(was)


def _collector(on: bool) -> None:
    if on:
        gc.enable()
    else:
        gc.disable()


class _Marker:
    """An emitted value whose lifetime a weak reference can watch."""


class _KeepsContext(Bolt):
    """Keeps its context, as bolts often do: a cycle bolt -> context -> topology -> bolt."""

    made: ClassVar[list[weakref.ref[_Marker]]] = []

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.context, self.collector = context, collector

    def execute(self, tuple: Any) -> None:  # noqa: A002
        marker = _Marker()
        _KeepsContext.made.append(weakref.ref(marker))
        self.collector.emit([marker, 1], anchors=tuple)
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("marker", "n"))


class _Lines(Spout):
    def next_tuple(self) -> None:
        """Never called: the test feeds the task directly."""

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("line"))


def _chained(first: str, bolt: Any, second: str, then: Any) -> Any:
    """lines -> ``first`` -> ``second``, the second local-or-shuffle grouped on the first."""
    builder = TopologyBuilder()
    builder.set_spout("lines", _Lines())
    builder.set_bolt(first, bolt).shuffle_grouping("lines")
    builder.set_bolt(second, then).local_or_shuffle_grouping(first)
    return builder.create_topology()


def test_what_a_task_emitted_goes_with_its_output_not_with_the_collector(gc_off: None) -> None:
    # With the collector off (PySpark's daemon collects only after the task), nothing may keep
    # the emitted values alive: the output carries them sealed (pickled), and they are freed
    # as soon as the task is done.
    topology = _chained("keep", _KeepsContext(), "sink", _KeepsContext())
    plan = ExecutionPlan(topology)
    job = TaskJob(plan, plan.layout(plan.bolts()), CheckpointTaskProgram(None, 0), "t", {}, 0, 0)
    lines, keep = plan.index["lines"], plan.index["keep"]
    slot = job.layout.key_for(0, keep, 0)
    batch = TupleBatch(keep, 0, lines, 0, 0, ["a", "b", "c"], [5, 6, 7], None)
    _KeepsContext.made = []
    out = list(run_task(job, cloudpickle.dumps(topology), 0, slot, [(slot, [batch])]))
    emitted = [r for _, records in out for r in records if type(r) is TupleBatch]
    assert [ref() for ref in _KeepsContext.made] == [None] * 3
    assert [type(v[0]) for b in emitted for v in b.column()] == [_Marker] * 3


_UNPICKLED_WITH_GC: list[bool] = []


def _unpickled() -> str:
    _UNPICKLED_WITH_GC.append(gc.isenabled())
    return "line"


class _Probe:
    """A spout value that notes, when a task unpickles it, whether the collector was on."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_unpickled, ())


@pytest.mark.parametrize("on", [False, True])
def test_an_inline_job_unpickles_its_input_with_the_collector_off(on: bool) -> None:
    # In the driver (``run_inline``: a transactional commit): the driver's heap is not frozen,
    # and with the collector on while a commit unpickled its inputs, one commit of every bench
    # run paid a full collection of that heap. The collector is left as it was.
    from statefulbolts.runtime._inline import run_inline

    builder = TopologyBuilder()
    builder.set_spout("lines", _Lines())
    builder.set_bolt("keep", _KeepsContext()).shuffle_grouping("lines")
    topology = builder.create_topology()
    plan = ExecutionPlan(topology)
    job = TaskJob(plan, plan.layout(plan.bolts()), CheckpointTaskProgram(None, 0), "t", {}, 0, 0)
    lines, keep = plan.index["lines"], plan.index["keep"]
    batch = TupleBatch(keep, 0, lines, 0, 0, [_Probe(), _Probe()], [5, 6], None)
    _UNPICKLED_WITH_GC.clear()
    was = gc.isenabled()
    try:
        _collector(on)
        result = run_inline(job, cloudpickle.dumps(topology), [[batch]])
        assert gc.isenabled() is on
    finally:
        _collector(was)
    assert _UNPICKLED_WITH_GC == [False, False]
    assert [r.metrics.executed for r in result.reports] == [2]


class _Pairs(BasicBolt):
    """Emits ``[word, n]`` per word: a row list the task holds until its output is made."""

    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        collector.emit([tuple.get_value(0), 1])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word", "n"))


class _Drop(BasicBolt):
    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        """Nothing."""

    def declare_output_fields(self, declarer: Any) -> None:
        """No output."""


def test_chained_tasks_never_walk_the_rows_they_hand_on(monkeypatch: pytest.MonkeyPatch) -> None:
    # A task's emitted rows stay alive until its output is made, and a chained task's rows
    # until the next task has executed them. No collection may start meanwhile: neither the
    # young-garbage check (the rows are the runtime's, not garbage) nor an automatic one (the
    # collector stays off from the first task to the last).
    from statefulbolts.runtime._task import run_stages

    monkeypatch.setattr(_worker, "_YOUNG_LIMIT", 5_000)
    topology = _chained("pairs", _Pairs(), "drop", _Drop())
    plan = ExecutionPlan(topology)
    pairs, drop = plan.index["pairs"], plan.index["drop"]
    layout = plan.layout([pairs, drop], chain=True)
    assert layout.depth == 2 and layout.narrow == (True,)
    job = TaskJob(plan, layout, CheckpointTaskProgram(None, 0), "t", {}, 0, 0)
    n = 60_000
    words = [f"w{i % 500}" for i in range(n)]
    batch = TupleBatch(pairs, 0, plan.index["lines"], 0, 0, words, list(range(1, n + 1)), None)
    started: list[int] = []
    me = threading.get_ident()

    def seen(phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and threading.get_ident() == me:  # not another thread's gc.collect
            started.append(info["generation"])

    was = gc.isenabled()
    gc.enable()
    gc.callbacks.append(seen)
    try:
        out = run_stages(
            job, cloudpickle.dumps(topology), (0, 1), 0, [(0, [batch])], in_worker=False
        )
    finally:
        gc.callbacks.remove(seen)
        on_after = gc.isenabled()
        _collector(was)
    assert started == []
    assert on_after
    reports = [r for _, records in out for r in records if type(r) is TaskReport]
    assert sorted((r.comp, r.metrics.executed) for r in reports) == sorted([(pairs, n), (drop, n)])
