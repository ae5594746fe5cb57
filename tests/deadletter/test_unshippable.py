"""A value that cannot be pickled is an error of the tuple that emitted it, on both engines.

A bolt (or a spout) that emits a value no task can be sent (a dict nested 1,000 deep, a lock, a
generator: ``unshippable_topologies``) failed inside PySpark's serializer, after the task, with
an error naming no component and no tuple, and the inline engine committed it. Now the task that
emitted it finds it when it seals its output (``statefulbolts.runtime._sealing``): an
``UnshippableValueError`` whose one line names the component, task index, stream, field and the
value's type, as the error of the tuple whose processing emitted it. ``isolate`` dead-letters
that tuple's origin and commits the rest; ``stop`` stops with that line. Every test runs on
the inline engine and on local Spark.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import deadletter_topologies as dl
import pytest
import topologies as topo
import unshippable_topologies as us

from statefulbolts import LocalCluster, TopologyFailedError
from statefulbolts.deadletter import (
    BatchOrigin,
    DeadLetterStore,
    FailedTuple,
    LetterState,
    SpoutOrigin,
)

TIMEOUT = 180
N = 30
POISONED = 11
CONF = {"topology.state.checkpoint.interval.ms": 100}
ENGINES = ["inline", pytest.param("spark", marks=pytest.mark.spark)]
ROOT = Path(__file__).resolve().parents[2]
ERROR = "statefulbolts.errors.UnshippableValueError"


@pytest.fixture
def engine_cluster(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A ``LocalCluster`` on the engine ``request.param`` names (Spark: the shared session)."""
    if request.param == "spark":
        yield request.getfixturevalue("cluster")
        return
    with LocalCluster(engine="inline") as cluster:
        yield cluster


def _run(cluster: Any, name: str, topology: Any, **conf: Any) -> dict[str, Any]:
    handle = cluster.submit_topology(name, {**CONF, **conf}, topology)
    try:
        handle.await_idle(TIMEOUT)
        return {
            "count": handle.read_state("count"),
            "metrics": handle.metrics(),
            "status": handle.status(),
        }
    finally:
        handle.kill()


def _failed_prepares(metrics: dict[str, Any]) -> list[tuple[str, bool]]:
    failed = [t for t in metrics["transactions"] if not t["ok"]]
    return [(t["action"], "dead-lettered" in t["error"]) for t in failed]


# ------------------------------------------------------------------------ a bolt's value
@pytest.mark.parametrize(
    ("engine_cluster", "kind"),
    [
        ("inline", "deep"),
        ("inline", "lock"),
        ("inline", "generator"),
        pytest.param("spark", "deep", marks=pytest.mark.spark),
        pytest.param("spark", "lock", marks=pytest.mark.spark),
    ],
    indirect=["engine_cluster"],
)
def test_a_bolt_s_value_that_does_not_pickle_dead_letters_its_spout_tuple(
    engine_cluster: Any, kind: str
) -> None:
    name = topo.new_key(f"ship-{kind}")
    lines = dl.sentences(N, [POISONED])
    spout = topo.ValueSpout(name, lines, fields=("sentence",))
    topology = us.wordcount(spout, us.ShippingSplit(kind))
    run = _run(engine_cluster, name, topology)

    # Every sentence but the poisoned one counted once; its innocent words too are out.
    assert run["count"] == dict(dl.counts([s for i, s in enumerate(lines) if i != POISONED]))
    [record] = DeadLetterStore({}, topology=name).records()
    assert (
        record.component == "split" and record.task == topology.task_ids("split")[record.task_index]
    )
    sentence = [dl.POISON_SENTENCE]
    spout_task = topology.task_ids("sentences")[0]
    assert record.failed == FailedTuple(
        "sentences", spout_task, "default", sentence, repr(sentence), 0
    )
    assert record.origin == SpoutOrigin(
        "sentences", 0, POISONED, "default", sentence, repr(sentence)
    )
    assert record.types[:2] == (ERROR, "providers.errors.StatefulBoltsError")
    assert record.message == us.line(kind, "split", record.task_index, "word")
    assert (record.attempts, record.state) == (2, LetterState.DEAD)
    rec = topo.record(name)
    assert rec.acks == collections.Counter(range(N))  # the poisoned one when dead-lettered
    assert _failed_prepares(run["metrics"]) == [("PREPARE", False), ("PREPARE", True)]
    assert run["metrics"]["components"]["split"]["dead_lettered"] == 1


@pytest.mark.parametrize("engine_cluster", ENGINES, indirect=True)
def test_of_a_sentence_s_words_the_one_that_emitted_it_is_named(engine_cluster: Any) -> None:
    """``tag`` gets all six words of the poisoned sentence: the one whose processing emitted
    the value (``poison``) is found by executing them again, not the first (``the``)."""
    name = topo.new_key("ship-tag")
    lines = dl.sentences(N, [POISONED])
    spout = topo.ValueSpout(name, lines, fields=("sentence",))
    topology = us.wordcount(spout, tag=us.ShippingTag("lock"))
    run = _run(engine_cluster, name, topology)

    assert run["count"] == dict(dl.counts([s for i, s in enumerate(lines) if i != POISONED]))
    [record] = DeadLetterStore({}, topology=name).records()
    assert (record.component, record.task, record.task_index) == (
        "tag",
        topology.task_ids("tag")[0],
        0,
    )
    failed = record.failed
    assert (failed.source_component, failed.stream, failed.values, failed.text) == (
        "split",
        "default",
        [dl.POISON],
        "['poison']",
    )
    assert failed.source_task in topology.task_ids("split")
    assert record.origin.message_id == POISONED  # type: ignore[union-attr]
    assert record.message == us.line("lock", "tag", 0, "word")


@pytest.mark.parametrize("engine_cluster", ENGINES, indirect=True)
def test_a_value_that_never_leaves_its_python_task_is_not_refused(engine_cluster: Any) -> None:
    """``tag`` is chained to ``split``: Spark runs both in one Python task and pickles nothing
    between them, so a lock ``split`` sends it is no error (nor is it on the inline engine);
    ``tag`` sends the word ``unshipped`` on in its place."""
    name = topo.new_key("ship-chained")
    lines = dl.sentences(N, [POISONED])
    spout = topo.ValueSpout(name, lines, fields=("sentence",))
    topology = us.wordcount(spout, us.ShippingSplit("lock"), us.Unshipped(), chained=True)
    run = _run(engine_cluster, name, topology)

    expected = dl.counts(lines)
    expected["unshipped"] = expected.pop(dl.POISON)
    assert run["count"] == dict(expected)
    assert DeadLetterStore({}, topology=name).records() == []
    assert _failed_prepares(run["metrics"]) == []
    assert topo.record(name).acks == collections.Counter(range(N))


# ------------------------------------------------------------------------ a spout's value
@pytest.mark.parametrize("engine_cluster", ENGINES, indirect=True)
def test_a_driver_spout_s_tuple_that_does_not_pickle_is_its_own_dead_letter(
    engine_cluster: Any,
) -> None:
    name = topo.new_key("ship-spout")
    lines = dl.sentences(N, [])
    topology = us.wordcount(us.LockSpout(name, lines, POISONED))
    run = _run(engine_cluster, name, topology)

    assert run["count"] == dict(dl.counts([s for i, s in enumerate(lines) if i != POISONED]))
    [record] = DeadLetterStore({}, topology=name).records()
    spout_task = topology.task_ids("sentences")[0]
    assert (record.component, record.task, record.task_index) == ("sentences", spout_task, 0)
    failed = record.failed
    assert (failed.source_component, failed.source_task, failed.stream, failed.values) == (
        "sentences",
        spout_task,
        "default",
        None,  # a lock: kept as text only
    )
    assert failed.text.startswith("[<unlocked _thread.lock object at 0x")
    origin = record.origin
    assert isinstance(origin, SpoutOrigin)
    assert (origin.component, origin.task, origin.message_id, origin.stream, origin.values) == (
        "sentences",
        0,
        POISONED,
        "default",
        None,
    )
    assert not record.replayable
    assert record.message == us.line("lock", "sentences", 0, "sentence", what="spout")
    assert record.types[0] == ERROR and record.attempts == 2
    assert topo.record(name).acks == collections.Counter(range(N))
    assert _failed_prepares(run["metrics"]) == [("PREPARE", False), ("PREPARE", True)]


# ------------------------------------------------------------------------ stop
@pytest.mark.parametrize("engine_cluster", ENGINES, indirect=True)
def test_with_policy_stop_it_stops_with_that_line_once(engine_cluster: Any) -> None:
    name = topo.new_key("ship-stop")
    lines = dl.sentences(N, [POISONED])
    topology = us.wordcount(
        topo.ValueSpout(name, lines, fields=("sentence",)), us.ShippingSplit("deep")
    )
    conf = {**CONF, "topology.deadletter.policy": "stop", "topology.max.transaction.retries": 1}
    handle = engine_cluster.submit_topology(name, conf, topology)
    try:
        with pytest.raises(TopologyFailedError) as caught:
            handle.await_idle(TIMEOUT)
    finally:
        handle.kill()
    err = caught.value
    assert err.component == "split" and err.task in range(len(topology.task_ids("split")))
    message = str(err)
    assert message.count(us.line("deep", "split", err.task, "word")) == 1
    assert message.startswith(f"topology {name!r} stopped: PREPARE(")
    # A value that does not pickle never will: stopped at its first failure, not retried.
    assert f"failed in component 'split' task {err.task}: " in message
    assert "times in a row" not in message and "dead-letter" not in message
    assert "\n" not in message and "Traceback" not in message
    assert DeadLetterStore({}, topology=name).records() == []


def test_statefulbolts_run_exits_1_with_that_line_once(tmp_path: Path) -> None:
    conf = tmp_path / "conf.json"
    conf.write_text(
        json.dumps(
            {**CONF, "topology.deadletter.policy": "stop", "topology.max.transaction.retries": 1}
        )
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    command = [sys.executable, "-m", "statefulbolts.cli", "run", "unshippable_topologies:"
               "stopped_wordcount", "--engine", "inline", "--conf", str(conf)]  # fmt: skip
    done = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT
    )
    assert done.returncode == 1, done.stderr
    [error] = [ln for ln in done.stderr.splitlines() if ln.startswith("error: ")]
    assert error.startswith("error: topology 'unshippable_topologies' stopped: PREPARE(")
    # Said once, with one prefix: no log line repeats it, and nothing retried it.
    assert done.stderr.count("stopped: PREPARE(") == 1, done.stderr
    assert "stopped: topology" not in done.stderr, done.stderr
    assert "failed (split)" in done.stderr and done.stderr.count("failed (split)") == 1
    split = us.stopped_wordcount().task_ids("split")
    shown = [us.line("lock", "split", i, "word") for i in range(len(split))]
    assert sum(error.count(text) for text in shown) == 1
    assert "Traceback" not in done.stderr


# ------------------------------------------------------------------------ transactional
@pytest.mark.parametrize("engine_cluster", ENGINES, indirect=True)
def test_a_batch_bolt_s_value_that_does_not_pickle_leaves_its_batch_tuple_out(
    engine_cluster: Any,
) -> None:
    tid = topo.new_key("shiptx-bolt")
    topology = us.tx_wordcount(tid, split=us.ShippingSplitWords("generator"))
    conf = {**CONF, "topology.max.spout.pending": 1}
    handle = engine_cluster.submit_topology(tid, conf, topology)
    try:
        handle.await_idle(TIMEOUT)
        counted = handle.read_state("count")
        failed = [t for t in handle.metrics()["transactions"] if not t["ok"]]
    finally:
        handle.kill()

    assert counted == dict(dl.counts([s for s in us.tx_lines() if s != dl.POISON_SENTENCE]))
    [record] = DeadLetterStore({}, transactional_id=tid).records()
    sentence = [dl.POISON_SENTENCE]
    assert record.origin == BatchOrigin(3, "partition", 1, 1, "default", sentence)
    assert record.component == "split"
    assert record.task == topology.topology.task_ids("split")[record.task_index]
    emitter = topology.topology.task_ids("spout")[1]  # partition 1 of 2 emitter tasks
    assert record.failed == FailedTuple("spout", emitter, "default", sentence, repr(sentence), 1)
    assert record.message == us.line("generator", "split", record.task_index, "word")
    assert (record.types[0], record.txid, record.attempts) == (ERROR, 3, 2)
    assert [t["txid"] for t in failed] == [3, 3]


@pytest.mark.parametrize(
    ("engine_cluster", "pending"),
    [("inline", 1), ("inline", 3), pytest.param("spark", 3, marks=pytest.mark.spark)],
    indirect=["engine_cluster"],
)
def test_an_emitter_s_tuple_that_does_not_pickle_is_its_own_dead_letter(
    engine_cluster: Any, pending: int
) -> None:
    """``pending`` 1: emitters and bolts in one job; 3: the emitters' job of their own."""
    tid = topo.new_key("shiptx-spout")
    topology = us.tx_wordcount(tid, spout_class=us.LockingMemorySpout)
    conf = {**CONF, "topology.max.spout.pending": pending}
    handle = engine_cluster.submit_topology(tid, conf, topology)
    try:
        handle.await_idle(TIMEOUT)
        counted = handle.read_state("count")
    finally:
        handle.kill()

    assert counted == dict(dl.counts([s for s in us.tx_lines() if s != dl.POISON_SENTENCE]))
    [record] = DeadLetterStore({}, transactional_id=tid).records()
    # Left out of txid 3's emissions since: what it was is not kept (a lock), only its stream.
    assert record.origin == BatchOrigin(3, "partition", 1, 1, "default", None)
    emitter = topology.topology.task_ids("spout")[1]
    assert (record.component, record.task, record.task_index) == ("spout", emitter, 1)
    failed = record.failed
    assert (failed.source_component, failed.source_task, failed.stream, failed.values) == (
        "spout",
        emitter,
        "default",
        None,
    )
    assert failed.text.startswith("[<unlocked _thread.lock object at 0x")
    assert record.message == us.line("lock", "spout", 1, "sentence", what="spout")
    assert (record.types[0], record.txid, record.attempts) == (ERROR, 3, 2)
