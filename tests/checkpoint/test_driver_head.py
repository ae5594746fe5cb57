"""A small transaction's stateless head runs in the driver (``topology.driver.head``).

The plan tests need no Spark: which stages are a head (``checkpoint._head``), when ``auto``
moves it, which faults refuse the run, and the config. The Spark tests run the same topologies
with the head kept on Spark (``never``) and moved to the driver (``always``, or ``auto`` for a
small batch): the committed state, the transactions, every spout tuple's acks, fails and
replays and the errors counted must be the same, and each PREPARE job must have the fewer Spark
stages Spark's status tracker shows.
"""

from __future__ import annotations

import collections
import os
from pathlib import Path
from typing import Any

import pytest
import topologies as topo

from checkpoint._head import DEFAULT_SECONDS_PER_TUPLE, DriverHead
from checkpoint._jobs import CheckpointJobs
from checkpoint._ledger import RootLedger
from examples.wordcount import SplitSentence, expected_counts
from recovery.faults import FaultPlan
from statefulbolts import (
    BasicBolt,
    Bolt,
    ConfigError,
    Fields,
    TopologyBuilder,
    validate_config,
)
from statefulbolts.listeners import NO_FAULTS, FaultListener
from statefulbolts.runtime import ExecutionPlan, JobResult
from statefulbolts.runtime._records import TaskMetrics, TaskReport, TupleBatch

CONF = {"topology.state.checkpoint.interval.ms": 100}
TIMEOUT = 120
KEY = "topology.driver.head"


# ------------------------------------------------------------------------------ topologies
class Upper(BasicBolt):
    """Re-emits its value upper-cased (a second stateless bolt of the head)."""

    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        collector.emit([str(tuple.get_value(0)).upper()])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("value"))


def chain(key: str, n: int, burst: int) -> Any:
    """src -> split (2) -local-> upper (2) -shuffle-> relay (3) -fields-> sink (``Tally``, 2).

    Sentences of numbered words; split -> upper chains (one Spark stage), the rest do not.
    """
    sentences = [f"w{i % 7} w{i % 11} w{i}" for i in range(n)]
    builder = TopologyBuilder()
    builder.set_spout("src", topo.ValueSpout(key, sentences, ("sentence",), burst=burst))
    builder.set_bolt("split", SplitSentence(), 2).shuffle_grouping("src")
    builder.set_bolt("upper", Upper(), 2).local_or_shuffle_grouping("split")
    builder.set_bolt("relay", topo.Relay(), 3).shuffle_grouping("upper")
    builder.set_bolt("sink", topo.Tally(), 2).fields_grouping("relay", Fields("value"))
    return builder.create_topology()


def chain_counts(n: int) -> dict[str, int]:
    counts: collections.Counter[str] = collections.Counter()
    for i in range(n):
        counts.update([f"W{i % 7}", f"W{i % 11}", f"W{i}"])
    return dict(counts)


class Pairing(Bolt):
    """Anchors, multi-anchors and fails, with the driver's files as its only memory.

    Each value ``v`` goes on as ``v`` (anchored to its tuple) and as ``v + 1000`` anchored to
    both its tuple and the task's tuple before it in the job (one tree more), then is acked.
    A value in ``targets`` is failed, unanswered, on its first delivery ever (a marker file
    per value in ``marks``: the same whichever process runs the task).
    """

    def __init__(self, targets: frozenset[int], marks: str) -> None:
        self.targets, self.marks = targets, marks

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector
        self.before: Any = None

    def execute(self, tuple: Any) -> None:  # noqa: A002
        value = tuple.get_value(0)
        if value in self.targets and _first_time(os.path.join(self.marks, str(value))):
            self.collector.fail(tuple)
            return
        self.collector.emit([value], anchors=tuple)
        anchors = [tuple] if self.before is None else [self.before, tuple]
        self.collector.emit([value + 1000], anchors=anchors)
        self.collector.ack(tuple)
        self.before = tuple

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("value"))


class RaiseTimes(BasicBolt):
    """Raises on ``target`` the first ``times`` times it executes it, counted in ``log``."""

    def __init__(self, target: int, log: str, times: int) -> None:
        self.target, self.log, self.times = target, log, times

    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        value = tuple.get_value(0)
        if value == self.target:
            with open(self.log, "a", encoding="utf-8") as f:
                f.write(f"{os.getpid()}\n")
            raised = Path(self.log).read_text(encoding="utf-8").count("\n")
            if raised <= self.times:
                msg = f"head fault on {value} ({raised} of {self.times})"
                raise RuntimeError(msg)
        collector.emit([value])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("value"))


def _first_time(path: str) -> bool:
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def head_into_sink(key: str, n: int, head: Any, burst: int | None = None) -> Any:
    """src (numbers) -> ``head`` (2 tasks, shuffle) -> sink (``Tally``, 2, fields)."""
    builder = TopologyBuilder()
    builder.set_spout("src", topo.ValueSpout(key, list(range(n)), burst=burst))
    builder.set_bolt("head", head, 2).shuffle_grouping("src")
    builder.set_bolt("sink", topo.Tally(), 2).fields_grouping("head", Fields("value"))
    return builder.create_topology()


# ------------------------------------------------------------------------------ the plan
def _jobs(
    topology: Any,
    head: str = "auto",
    *,
    faults: FaultListener = NO_FAULTS,
    ticking: tuple[str, ...] = (),
) -> CheckpointJobs:
    plan = ExecutionPlan(topology)
    ledger = RootLedger(timeout_secs=30)
    return CheckpointJobs("head", topology, plan, ledger, None, ackers=0, faults=faults,
                          driver_head=head, head_budget_ms=10.0, ticking=ticking)  # fmt: skip


def _head(topology: Any, head: str = "auto", ticking: tuple[str, ...] = ()) -> list[str]:
    jobs = _jobs(topology, head, ticking=ticking)
    names = jobs._plan.component_ids
    return sorted(names[c] for c in jobs.head.components)


def test_the_head_is_the_leading_stateless_stages_up_to_a_wide_boundary() -> None:
    assert _head(topo.wordcount("wc", 1, 2)) == ["split"]
    assert _head(chain("chain", 1, 1)) == ["relay", "split", "upper"]
    assert _head(topo.wordcount("wc", 1, 2), "never") == []
    # A bolt with tick tuples stays on Spark, and so does everything after it.
    assert _head(chain("chain", 1, 1), ticking=("relay",)) == ["split", "upper"]
    assert _head(chain("chain", 1, 1), ticking=("upper",)) == []
    # A stateful first stage: nothing moves.
    builder = TopologyBuilder()
    builder.set_spout("src", topo.ValueSpout("s", [1]))
    builder.set_bolt("sink", topo.Tally(emit=True), 2).shuffle_grouping("src")
    builder.set_bolt("relay", topo.Relay(), 2).shuffle_grouping("sink")
    assert _head(builder.create_topology()) == []
    # A stateless bolt chained (narrow) into a stateful one: no cut there, so nothing moves.
    builder = TopologyBuilder()
    builder.set_spout("src", topo.ValueSpout("s", [1]))
    builder.set_bolt("relay", topo.Relay(), 2).shuffle_grouping("src")
    builder.set_bolt("sink", topo.Tally(), 2).local_or_shuffle_grouping("relay")
    assert _head(builder.create_topology()) == []
    # No stateful bolt at all: Spark still runs the last stage.
    builder = TopologyBuilder()
    builder.set_spout("src", topo.ValueSpout("s", [1]))
    builder.set_bolt("a", topo.Relay(), 2).shuffle_grouping("src")
    builder.set_bolt("b", topo.Relay(), 3).shuffle_grouping("a")
    assert _head(builder.create_topology(), "always") == ["a"]


def _measured(head: DriverHead, seconds: float, tuples: int) -> None:
    (split,) = head.components
    report = TaskReport(split, 0, TaskMetrics(tuples, tuples, tuples, 0, seconds + 0.5, 0.5))
    batch = TupleBatch(split, 0, 0, 0, 0, [0] * tuples, [0] * tuples, None)
    head.observe(JobResult(reports=[report]), [batch])


def test_auto_moves_the_head_when_its_measured_cost_fits_the_budget() -> None:
    plan = ExecutionPlan(topo.wordcount("wc", 1, 2))
    layout = plan.layout(plan.bolts(), chain=True)
    head = DriverHead("auto", 10.0, layout, {plan.index["split"]})
    fits = round(0.010 / DEFAULT_SECONDS_PER_TUPLE)
    assert (head.stages(fits - 5), head.stages(fits + 5)) == (1, 0)  # before any measurement
    _measured(head, seconds=0.001, tuples=1000)  # 1 us a tuple (its setup left out)
    assert head.per_tuple == pytest.approx(1e-6)
    assert (head.stages(9_900), head.stages(10_100)) == (1, 0)
    _measured(head, seconds=0.011, tuples=1000)  # 11 us: smoothed, 1 + 0.3 * 10 = 4 us
    assert head.per_tuple == pytest.approx(4e-6)
    assert (head.stages(2_450), head.stages(2_550)) == (1, 0)
    assert DriverHead("always", 10.0, layout, {plan.index["split"]}).stages(10**9) == 1
    assert DriverHead("never", 10.0, layout, {plan.index["split"]}).stages(1) == 0


def test_a_fault_that_needs_a_worker_in_the_head_refuses_the_run_unless_never() -> None:
    def plan(fault: dict[str, Any]) -> FaultListener:
        listener = FaultPlan.from_conf({"topology.faults": {"tasks": [fault]}})
        assert listener is not None
        return listener

    wordcount = topo.wordcount("wc", 1, 2)
    crash = plan({"component": "split", "task": 0, "kind": "crash", "attempts": "every"})
    with pytest.raises(ConfigError) as refused:
        _jobs(wordcount, "auto", faults=crash)
    assert "tasks of ['split'] (at tuple)" in str(refused.value)
    assert f"set {KEY} to 'never' for this run" in str(refused.value)
    first = plan({"component": "split", "task": 1, "kind": "raise", "attempts": "first"})
    with pytest.raises(ConfigError, match=KEY):
        _jobs(wordcount, "always", faults=first)
    assert _jobs(wordcount, "never", faults=crash).head.depth == 0
    # A fault every attempt meets fires in the driver as in a task; one in the counter is
    # not the head's.
    _jobs(wordcount, faults=plan({"component": "split", "task": 0, "kind": "raise",
                                  "attempts": "every"}))  # fmt: skip
    _jobs(wordcount, faults=plan({"component": "count", "task": 0, "kind": "crash"}))


@pytest.mark.parametrize(
    ("conf", "says"),
    [
        ({KEY: "sometimes"}, f"{KEY}: Input should be 'auto', 'always' or 'never'"),
        ({f"{KEY}.budget.ms": -1}, f"{KEY}.budget.ms: Input should be greater than or equal"),
        ({f"{KEY}.budget.ms": float("nan")}, f"{KEY}.budget.ms: Input should be a finite number"),
    ],
)
def test_a_bad_head_setting_is_one_error_naming_the_key(conf: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigError, match="invalid topology config") as refused:
        validate_config(conf)
    assert says in str(refused.value)


# ------------------------------------------------------------------------------ on Spark
def _stages(spark: Any, name: str, txids: list[int]) -> list[int]:
    """Spark stages of each PREPARE(txid) job of topology ``name`` (its last job each)."""
    tracker = spark.sparkContext.statusTracker()
    found = []
    for txid in txids:
        jobs = tracker.getJobIdsForGroup(f"{name}/PREPARE/txid={txid}")
        info = tracker.getJobInfo(max(jobs)) if jobs else None
        found.append(len(info.stageIds) if info is not None else 0)
    return found


def _run(cluster: Any, name: str, topology: Any, conf: dict[str, Any]) -> dict[str, Any]:
    """Run to idle; what a comparison needs."""
    infos: list[Any] = []
    handle = cluster.submit_topology(name, conf, topology, on_transaction=infos.append)
    try:
        handle.await_idle(TIMEOUT)
        sink = "count" if "count" in topology.components else "sink"
        state = handle.read_state(sink)
        metrics = handle.metrics()
    finally:
        handle.kill()
    rec = topo.record(name)
    prepares = [i for i in infos if i.action is not None and i.action.value == "PREPARE" and i.ok]
    return {
        "state": state,
        "transactions": [(t["action"], t["txid"], t["ok"]) for t in metrics["transactions"]],
        "emits": rec.emits,
        "acks": rec.acks,
        "fails": rec.fails,
        "errors": {c: v.get("errors", 0) for c, v in metrics["components"].items()},
        "error_texts": metrics["errors"],
        "prepares": [i.txid for i in prepares],
        "heads": ["head" in i.phases for i in prepares],
    }


def _both(cluster: Any, prefix: str, build: Any, conf: dict[str, Any]) -> dict[str, Any]:
    """The same topology with the head on Spark, then in the driver."""
    runs = {}
    for head in ("never", "always"):
        name = topo.new_key(f"{prefix}-{head}")
        runs[head] = _run(cluster, name, build(name), {**CONF, **conf, KEY: head})
        runs[head]["stages"] = _stages(cluster.spark, name, runs[head]["prepares"])
    return runs


@pytest.mark.spark
def test_the_word_count_prepare_is_one_spark_stage_and_counts_the_same(cluster: Any) -> None:
    n = 120
    runs = _both(cluster, "head-wc", lambda name: topo.wordcount(name, n, 2),
                 {"topology.max.spout.pending": 40})  # fmt: skip
    for head, run in runs.items():
        assert run["state"] == expected_counts(n), head
        assert run["acks"] == collections.Counter(range(n)), head
        assert run["fails"] == collections.Counter(), head
        assert all(ok for _, _, ok in run["transactions"]), (head, run["transactions"])
    assert set(runs["never"]["stages"]) == {2}, runs["never"]["stages"]
    assert set(runs["always"]["stages"]) == {1}, runs["always"]["stages"]
    assert not any(runs["never"]["heads"]) and all(runs["always"]["heads"])


@pytest.mark.spark
def test_a_stateless_chain_before_the_fields_grouping_runs_in_the_driver_the_same(
    cluster: Any,
) -> None:
    n, burst = 60, 20  # a burst is a transaction of its own: the same transactions both ways
    runs = _both(cluster, "head-chain", lambda name: chain(name, n, burst), {})
    never, always = runs["never"], runs["always"]
    assert never["state"] == always["state"] == chain_counts(n)
    for field in ("transactions", "emits", "acks", "fails", "errors", "prepares"):
        assert never[field] == always[field], field
    assert never["acks"] == collections.Counter(range(n))
    # split + upper, relay, sink on Spark; the sink alone after the driver ran the rest.
    assert set(never["stages"]) == {3} and set(always["stages"]) == {1}


@pytest.mark.spark
def test_an_anchoring_and_failing_head_bolt_acks_fails_and_replays_the_same(
    cluster: Any, tmp_path: Path
) -> None:
    n, targets = 50, frozenset({3, 17, 40})

    def build(name: str) -> Any:
        marks = tmp_path / name
        marks.mkdir()
        return head_into_sink(name, n, Pairing(targets, str(marks)), burst=10)

    runs = _both(cluster, "head-pairs", build, {})
    never, always = runs["never"], runs["always"]
    expected = {**dict.fromkeys(range(n), 1), **dict.fromkeys(range(1000, 1000 + n), 1)}
    assert never["state"] == always["state"] == expected
    for field in ("emits", "acks", "fails", "errors"):
        assert never[field] == always[field], field
    assert never["fails"] == collections.Counter(targets)  # each failed once, then replayed
    assert never["acks"] == collections.Counter(range(n))
    assert set(always["stages"]) == {1}


@pytest.mark.spark
@pytest.mark.parametrize("how", ["retried", "fails-the-job"])
def test_a_raising_head_bolt_ends_as_the_same_failure_on_spark(
    cluster: Any, tmp_path: Path, how: str
) -> None:
    # Raising once: the task's retry (Spark's, or the driver's as Spark would) survives it.
    # Raising on every attempt of the task: PREPARE(1) fails, rolls back and is replayed.
    n, burst, target = 40, 20, 30
    attempts = topo.task_max_failures(cluster.spark)
    times = 1 if how == "retried" else attempts

    def build(name: str) -> Any:
        return head_into_sink(name, n, RaiseTimes(target, str(tmp_path / name), times), burst)

    runs = _both(cluster, f"head-raise-{how}", build, {})
    never, always = runs["never"], runs["always"]
    assert never["state"] == always["state"] == dict.fromkeys(range(n), 1)
    for field in ("transactions", "emits", "acks", "fails", "errors", "prepares"):
        assert never[field] == always[field], field
    assert never["errors"]["head"] == 1
    second = collections.Counter(range(burst, n))
    if how == "retried":
        assert all(ok for _, _, ok in always["transactions"])
        assert always["fails"] == collections.Counter()
        [error] = always["error_texts"]
        assert error.startswith("component 'head' task ")
        assert error.endswith("the driver ran the task again, as Spark would, and it succeeded)")
    else:
        assert ("PREPARE", 1, False) in always["transactions"]
        assert always["fails"] == second  # the rolled-back burst, failed once, replayed once
        assert never["error_texts"] == always["error_texts"]  # the same failure, named alike
        [error] = always["error_texts"]
        assert error.startswith("PREPARE(1) failed: ")
    assert f"{__name__}.RaiseTimes raised RuntimeError: head fault on {target}" in error
    # The target's task raised ``times`` times, then passed: in the driver as in the workers.
    logs = sorted(tmp_path.iterdir())
    assert [log.read_text(encoding="utf-8").count("\n") for log in logs] == [times + 1] * 2
    assert set(always["stages"]) == {1}


class _Bursts(topo.ValueSpout):
    """``ValueSpout`` whose k-th burst has ``sizes[k]`` tuples (a burst: a transaction)."""

    def __init__(self, key: str, sizes: list[int]) -> None:
        super().__init__(key, list(range(sum(sizes))), burst=sizes[0])
        self.sizes = sizes

    def next_tuple(self) -> None:
        if not self.live and not self.replay and self.todo:
            done, k = len(self.values) - len(self.todo), 0
            while done >= sum(self.sizes[: k + 1]):
                k += 1
            self.burst = self.sizes[k]
        super().next_tuple()


@pytest.mark.spark
def test_auto_keeps_a_large_batch_on_spark_and_moves_a_small_one(cluster: Any) -> None:
    sizes = [5, 20_000, 5]
    name = topo.new_key("head-auto")
    builder = TopologyBuilder()
    builder.set_spout("src", _Bursts(name, sizes))
    builder.set_bolt("head", topo.Relay(), 2).shuffle_grouping("src")
    builder.set_bolt("sink", topo.Tally(), 2).fields_grouping("head", Fields("value"))
    conf = {**CONF, f"{KEY}.budget.ms": 5}  # the default KEY: auto
    run = _run(cluster, name, builder.create_topology(), conf)
    assert run["state"] == dict.fromkeys(range(sum(sizes)), 1)
    assert run["prepares"] == [0, 1, 2]
    # 5 tuples fit 5 ms at any cost the head measures; 20,000 at none.
    assert run["heads"] == [True, False, True]
    assert _stages(cluster.spark, name, run["prepares"]) == [1, 2, 1]
