"""Poison tuples in transactional topologies, on local Spark with the in-memory provider.

The word count of ``deadletter_topologies.tx_wordcount``: a partitioned memory spout of three
partitions of sentences, one of them poisoned -> ``split`` (a batch bolt that emits each word
while it executes the sentence, or a ``BasicBolt``) -> ``partial`` (counts a batch's words,
raises on ``poison``) -> ``count`` (a committer). The poisoned sentence is the emitted batch
tuple the failing word came from: it is dead-lettered, its txid is emitted again without it,
and everything else commits exactly once. Where no one emitted tuple can be blamed (an error in
``finish_batch``, an opaque spout), the topology stops as before and says why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import deadletter_topologies as dl
import pytest
import topologies as topo
from ui_topologies import wait_for

from statefulbolts import (
    BaseTransactionalBolt,
    Fields,
    OpaqueMemoryTransactionalSpout,
    TopologyFailedError,
    TransactionalTopologyBuilder,
)
from statefulbolts.deadletter import (
    BatchOrigin,
    DeadLetterStore,
    LetterState,
    Scope,
)
from statefulbolts.transactional._lineage import lineage

pytestmark = pytest.mark.spark

TIMEOUT = 120
POISONED = (1, 5)  # partition 1, row 5: txid 3 (rows 4-5), the second tuple of its emission


def _conf(pending: int, **more: Any) -> dict[str, Any]:
    return {
        "topology.max.spout.pending": pending,
        "topology.state.checkpoint.interval.ms": 100,
        **more,
    }


def _lines(data: dict[int, list[Any]]) -> list[str]:
    return [row[0] for rows in data.values() for row in rows]


@pytest.mark.parametrize(("split", "pending"), [("batch", 1), ("basic", 3)])
def test_a_poison_sentence_is_left_out_of_its_batch_and_the_rest_commits(
    cluster: Any, split: str, pending: int
) -> None:
    tid = topo.new_key(f"dltx-{split}")
    data = dl.partitions(3, 8, POISONED)
    topology = dl.tx_wordcount(data, 2, split=split, transactional_id=tid)
    handle = cluster.submit_topology(tid, _conf(pending), topology)
    try:
        handle.await_idle(TIMEOUT)
        counted = handle.read_state("count")
        status = handle.status()
        metrics = handle.metrics()
    finally:
        handle.kill()

    kept = [line for line in _lines(data) if line != dl.POISON_SENTENCE]
    assert counted == dict(dl.counts(kept))
    [record] = DeadLetterStore({}, transactional_id=tid).records()
    assert record.origin == BatchOrigin(3, "partition", 1, 1, "default", [dl.POISON_SENTENCE])
    assert (record.component, record.failed.values, record.failed.source_component) == (
        "partial",
        ["poison"],
        "split",
    )
    assert record.task in topology.topology.task_ids("partial")
    assert record.types[0] == "builtins.ValueError" and record.message == "cannot count 'poison'"
    assert (record.scope, record.name, record.txid) == (Scope.TRANSACTIONAL, tid, 3)
    assert record.state is LetterState.DEAD
    assert record.attempts == 2
    dead = status["dead_letters"]
    assert (dead["held"], dead["dead_lettered"]) == (1, {"partial": 1})
    assert metrics["components"]["partial"]["dead_lettered"] == 1
    failed = [t for t in metrics["transactions"] if not t["ok"]]
    assert [t["txid"] for t in failed] == [3, 3]
    assert "dead-lettered" in failed[1]["error"]


def test_a_replayed_batch_tuple_joins_a_new_txid_once_fixed(cluster: Any, tmp_path: Path) -> None:
    tid = topo.new_key("dltx-replay")
    data = dl.partitions(3, 8, POISONED)
    fixed = tmp_path / "fixed"
    conf = _conf(1, **{dl.FIXED_KEY: str(fixed), "topology.deadletter.replay.poll.secs": 0.2})
    handle = cluster.submit_topology(tid, conf, dl.tx_wordcount(data, 2, transactional_id=tid))
    store = DeadLetterStore({}, transactional_id=tid)
    try:
        handle.await_idle(TIMEOUT)
        [record] = store.records()
        fixed.touch()
        store.request_replay([record.id])
        gone = lambda: handle.status()["dead_letters"]["held"] == 0  # noqa: E731
        wait_for(gone, TIMEOUT, "the replayed dead letter to commit")
        handle.await_idle(TIMEOUT)
        counted = handle.read_state("count")
    finally:
        handle.kill()
    assert counted == dict(dl.counts(_lines(data)))


class _FinishPoison(BaseTransactionalBolt):
    """Counts a batch's words and raises in ``finish_batch`` when one was ``poison``."""

    def prepare(self, conf: Any, context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        self.collector, self.attempt, self.seen = collector, id, False

    def execute(self, tuple: Any) -> None:  # noqa: A002
        self.seen = self.seen or tuple.get_value(1) == dl.POISON

    def finish_batch(self) -> None:
        if self.seen:
            msg = "a poisoned batch"
            raise ValueError(msg)

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("id"))


def test_an_error_in_finish_batch_is_nobody_s_tuple_and_stops(cluster: Any) -> None:
    tid = topo.new_key("dltx-finish")
    spout = dl.MemoryTransactionalSpout(dl.partitions(2, 4, (0, 1)), ["sentence"], 2)
    builder = TransactionalTopologyBuilder(tid, "spout", spout, 1)
    builder.set_bolt("split", dl.SplitWords(), 1).shuffle_grouping("spout")
    builder.set_bolt("finish", _FinishPoison(), 1).global_grouping("split")
    conf = _conf(1, **{"topology.max.transaction.retries": 1})
    handle = cluster.submit_topology(tid, conf, builder.build_topology())
    try:
        with pytest.raises(TopologyFailedError) as caught:
            handle.await_idle(TIMEOUT)
    finally:
        handle.kill()
    message = str(caught.value)
    assert caught.value.component == "finish" and "a poisoned batch" in message
    assert "not dead-lettered: the error was raised outside execute" in message
    assert DeadLetterStore({}, transactional_id=tid).records() == []


def test_an_opaque_spout_s_poison_is_not_isolated_and_stops(cluster: Any) -> None:
    tid = topo.new_key("dltx-opaque")
    spout = OpaqueMemoryTransactionalSpout(dl.partitions(2, 4, (0, 1)), ["sentence"], 2)
    builder = TransactionalTopologyBuilder(tid, "spout", spout, 1)
    builder.set_bolt("split", dl.SplitWords(), 1).shuffle_grouping("spout")
    builder.set_bolt("partial", dl.PartialCount(), 1).global_grouping("split")
    conf = _conf(1, **{"topology.max.transaction.retries": 1})
    handle = cluster.submit_topology(tid, conf, builder.build_topology())
    try:
        with pytest.raises(TopologyFailedError) as caught:
            handle.await_idle(TIMEOUT)
    finally:
        handle.kill()
    message = str(caught.value)
    assert caught.value.component == "partial" and "cannot count 'poison'" in message
    assert "not dead-lettered: an opaque spout may emit a different batch" in message
    assert DeadLetterStore({}, transactional_id=tid).records() == []


class _Tally(BaseTransactionalBolt):
    """Counts a batch's words and emits ``(word, n)`` from ``finish_batch``: no lineage."""

    def prepare(self, conf: Any, context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        self.collector, self.attempt, self.counts = collector, id, {}

    def execute(self, tuple: Any) -> None:  # noqa: A002
        word = tuple.get_value(1)
        self.counts[word] = self.counts.get(word, 0) + 1

    def finish_batch(self) -> None:
        for word, n in sorted(self.counts.items()):
            self.collector.emit([self.attempt, word, n])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("id", "word", "count"))


def test_a_poison_tuple_emitted_from_finish_batch_has_no_source_and_stops(cluster: Any) -> None:
    tid = topo.new_key("dltx-aggregate")
    spout = dl.MemoryTransactionalSpout(dl.partitions(2, 4, (0, 1)), ["sentence"], 2)
    builder = TransactionalTopologyBuilder(tid, "spout", spout, 1)
    builder.set_bolt("split", dl.SplitWords(), 1).shuffle_grouping("spout")
    builder.set_bolt("tally", _Tally(), 1).global_grouping("split")
    builder.set_bolt("partial", dl.PartialCount(), 1).global_grouping("tally")
    conf = _conf(1, **{"topology.max.transaction.retries": 1})
    handle = cluster.submit_topology(tid, conf, builder.build_topology())
    try:
        with pytest.raises(TopologyFailedError) as caught:
            handle.await_idle(TIMEOUT)
    finally:
        handle.kill()
    message = str(caught.value)
    assert caught.value.component == "partial" and "cannot count 'poison'" in message
    assert "not dead-lettered: the failing tuple has no single source in the batch" in message
    assert DeadLetterStore({}, transactional_id=tid).records() == []


def test_lineages_are_never_zero_and_name_their_place() -> None:
    assert lineage(0, 0) != 0 and lineage(-1, 0) != 0
    assert lineage(1, 1) == (3 << 32) | 1
