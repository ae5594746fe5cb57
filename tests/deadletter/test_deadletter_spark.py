"""Poison tuples on local Spark, checkpoint protocol: isolated as dead letters, or a stop.

The word count's ``count`` bolt raises on the word ``poison`` every time
(``deadletter_topologies.PoisonCount``). With ``topology.deadletter.policy`` "isolate" (the
default) the topology commits every other sentence, and the store holds one record naming the
component, its task, the word, the sentence it came from and the exception; with "stop" it
stops as it always did, and nothing is recorded.
"""

from __future__ import annotations

import collections
from dataclasses import replace
from pathlib import Path
from typing import Any

import deadletter_topologies as dl
import pytest
import topologies as topo
from ui_topologies import wait_for

from statefulbolts import TopologyFailedError
from statefulbolts.deadletter import (
    DeadLetter,
    DeadLetterStore,
    FailedTuple,
    LetterState,
    SpoutOrigin,
)

pytestmark = pytest.mark.spark

CONF = {"topology.state.checkpoint.interval.ms": 100}
TIMEOUT = 120
N = 60


def _submit(cluster: Any, name: str, lines: list[str], conf: dict[str, Any]) -> Any:
    spout = topo.ValueSpout(name, lines, fields=("sentence",))
    topology = dl.wordcount(spout)
    return cluster.submit_topology(name, {**CONF, **conf}, topology), topology


def test_a_poison_sentence_is_dead_lettered_and_everything_else_commits(cluster: Any) -> None:
    poisoned = 23
    name = topo.new_key("dl-isolate")
    lines = dl.sentences(N, [poisoned])
    handle, topology = _submit(cluster, name, lines, {})
    try:
        handle.await_idle(TIMEOUT)
        state = handle.read_state("count")
        metrics = handle.metrics()
        status = handle.status()
    finally:
        handle.kill()

    # Every sentence but the poisoned one, counted exactly once (its other words too: the
    # whole spout tuple is dead-lettered).
    expected = dl.counts([line for i, line in enumerate(lines) if i != poisoned])
    assert state == dict(expected)
    records = DeadLetterStore({}, topology=name).records()
    assert len(records) == 1
    record = records[0]
    assert record.component == "count" and record.task in topology.task_ids("count")
    assert record.task == topology.task_ids("count")[record.task_index]
    assert (record.failed.source_component, record.failed.stream) == ("split", "default")
    assert record.failed.source_task in topology.task_ids("split")
    assert record.failed.values == ["poison"] and record.failed.text == "['poison']"
    assert record.types[0] == "builtins.ValueError" and record.message == "cannot count 'poison'"
    assert record.traceback is not None and "cannot count" in record.traceback
    assert record.origin == SpoutOrigin(
        "sentences", 0, poisoned, "default", [dl.POISON_SENTENCE], repr([dl.POISON_SENTENCE])
    )
    assert (record.attempts, record.state, record.replays) == (2, LetterState.DEAD, 0)
    assert record.first_seen <= record.last_seen
    # The spout: the poisoned sentence acked once (when dead-lettered), never failed after
    # its second failed transaction; every sentence acked exactly once.
    rec = topo.record(name)
    assert rec.acks == collections.Counter(range(N))
    assert rec.fails[poisoned] == 1
    # Two failed transactions, both PREPAREs, then commits only.
    failed = [t for t in metrics["transactions"] if not t["ok"]]
    assert [t["action"] for t in failed] == ["PREPARE", "PREPARE"]
    assert "dead-lettered" in failed[1]["error"] and "dead-lettered" not in failed[0]["error"]
    assert metrics["components"]["count"]["dead_lettered"] == 1
    dead = status["dead_letters"]
    assert (dead["policy"], dead["held"], dead["dead_lettered"]) == ("isolate", 1, {"count": 1})
    assert [shown["id"] for shown in dead["last"]] == [record.id]


def test_with_policy_stop_a_poison_sentence_stops_the_topology(cluster: Any) -> None:
    name = topo.new_key("dl-stop")
    lines = dl.sentences(N, [5])
    conf = {"topology.deadletter.policy": "stop", "topology.max.transaction.retries": 1}
    handle, topology = _submit(cluster, name, lines, conf)
    try:
        with pytest.raises(TopologyFailedError) as caught:
            handle.await_idle(TIMEOUT)
        status = handle.status()
    finally:
        handle.kill()
    err = caught.value
    assert err.component == "count" and err.task in range(len(topology.task_ids("count")))
    assert "ValueError: cannot count 'poison'" in str(err)
    # Stopped once the same sentence failed topology.deadletter.after.failures (2) PREPAREs.
    assert "(it failed 2 transactions on the same tuple" in str(err)
    assert "dead-letter" not in str(err)
    assert DeadLetterStore({}, topology=name).records() == []
    assert status["dead_letters"]["held"] == 0


def test_the_safety_valve_stops_a_bolt_that_fails_on_everything(cluster: Any) -> None:
    """Two poison sentences with ``topology.deadletter.max`` 1: the second one stops it."""
    name = topo.new_key("dl-max")
    lines = dl.sentences(N, [10, 40])
    conf = {"topology.deadletter.max": 1, "topology.deadletter.after.failures": 1}
    handle, _ = _submit(cluster, name, lines, conf)
    try:
        with pytest.raises(TopologyFailedError) as caught:
            handle.await_idle(TIMEOUT)
    finally:
        handle.kill()
    message = str(caught.value)
    assert "topology.deadletter.max = 1" in message and "already holds 1 records" in message
    assert "bug, not poison" in message and "statefulbolts deadletter replay --all" in message
    assert caught.value.component == "count"
    records = DeadLetterStore({}, topology=name).records()
    assert len(records) == 1 and records[0].origin.message_id in (10, 40)
    assert records[0].attempts == 1


def test_a_replayed_dead_letter_counts_once_after_the_bolt_is_fixed(
    cluster: Any, tmp_path: Path
) -> None:
    poisoned = 7
    name = topo.new_key("dl-replay")
    lines = dl.sentences(N, [poisoned])
    fixed = tmp_path / "fixed"
    conf = {dl.FIXED_KEY: str(fixed), "topology.deadletter.replay.poll.secs": 0.2}
    handle, _ = _submit(cluster, name, lines, conf)
    store = DeadLetterStore({}, topology=name)
    try:
        handle.await_idle(TIMEOUT)
        [record] = store.records()
        fixed.touch()  # the bolt is fixed: the poison word now counts
        store.request_replay([record.id])
        gone = lambda: handle.status()["dead_letters"]["held"] == 0  # noqa: E731
        wait_for(gone, TIMEOUT, "the replay to commit and its record to go")
        handle.await_idle(TIMEOUT)
        state = handle.read_state("count")
        metrics = handle.metrics()
    finally:
        handle.kill()
    assert state == dict(dl.counts(lines))
    assert metrics["components"]["$deadletter"]["emitted"] == 1
    assert metrics["components"]["$deadletter"]["acked"] == 1
    assert metrics["status"]["dead_letters"]["held"] == 0


def test_a_replay_that_no_longer_fits_the_topology_stays_held(cluster: Any) -> None:
    """Records asked for replay whose stream or spout task is gone are kept, and it runs on."""
    name = topo.new_key("dl-misfit")
    failed = FailedTuple("split", 1, "default", ["poison"], "['poison']")
    store = DeadLetterStore({}, topology=name)

    def letter(message_id: int, component: str, stream: str) -> DeadLetter:
        origin = SpoutOrigin(component, 0, message_id, stream, ["a poison pill"], "")
        made = DeadLetter.first(
            name, "topology", "count", 3, 0, failed, origin, ("builtins.ValueError",),
            "bad", None, txid=1, attempts=2, at=1.0,
        )  # fmt: skip
        return replace(made, state=LetterState.REPLAY)

    store.put(letter(1, "sentences", "elsewhere"), letter(2, "gone", "default"))
    lines = dl.sentences(20, [])
    handle, _ = _submit(cluster, name, lines, {})
    try:
        handle.await_idle(TIMEOUT)
        state = handle.read_state("count")
        records = DeadLetterStore({}, topology=name).records()
    finally:
        handle.kill()
    assert state == dict(dl.counts(lines))
    dead = LetterState.DEAD
    assert sorted((r.origin.message_id, r.state) for r in records) == [(1, dead), (2, dead)]


def test_three_poison_sentences_are_each_dead_lettered_and_the_rest_commits(
    cluster: Any,
) -> None:
    """Six failed transactions in all, more than topology.max.transaction.retries (5) + 1
    allows in a row: each isolation starts the retry budget again."""
    poisoned = [3, 20, 41]
    name = topo.new_key("dl-three")
    lines = dl.sentences(N, poisoned)
    handle, _ = _submit(cluster, name, lines, {})
    try:
        handle.await_idle(TIMEOUT)
        state = handle.read_state("count")
        failed = [t for t in handle.metrics()["transactions"] if not t["ok"]]
    finally:
        handle.kill()
    assert state == dict(dl.counts([line for i, line in enumerate(lines) if i not in poisoned]))
    records = DeadLetterStore({}, topology=name).records()
    assert sorted(r.origin.message_id for r in records) == poisoned
    assert all(r.attempts == 2 and r.component == "count" for r in records)
    assert len(failed) == 6
