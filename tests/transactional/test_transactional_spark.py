"""Transactional topologies end to end on Spark: the batch and phase rules.

Every test runs a real topology on the shared local session and reads back what the tasks
logged (``tx_topologies.events``) and what the committers stored.
"""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import pytest
import topologies as topo
import tx_topologies as tx

from examples import transactional_global_count, transactional_words
from statefulbolts import (
    MemoryTransactionalSpout,
    OpaqueMemoryTransactionalSpout,
    TopologyFailedError,
    TransactionalTopologyBuilder,
)

pytestmark = pytest.mark.spark

TIMEOUT = 240
STORM_DATA = transactional_words.DATA


def conf(pending: int = 1, **extra: Any) -> dict[str, Any]:
    return {
        "topology.max.spout.pending": pending,
        "topology.state.checkpoint.interval.ms": 100,
        **extra,
    }


def run(cluster: Any, topology: Any, config: dict[str, Any], **kw: Any) -> Any:
    """Submit, wait until idle, return the handle (killed at the end of the test by fixture)."""
    handle = cluster.submit_topology(topo.new_key("tx"), config, topology, **kw)
    handle.await_idle(TIMEOUT)
    return handle


def committed(handle: Any) -> list[int]:
    return [t["txid"] for t in handle.metrics()["transactions"] if t["ok"]]


# ---------------------------------------------------------------- the storm-starter examples


def test_global_count_example_is_exact(spark: Any, capsys: Any) -> None:
    assert transactional_global_count.main(["--json"], spark=spark) == 0
    out = capsys.readouterr().out
    assert '"count": 19' in out and '"exact": true' in out
    assert '"count": 9' in out and '"count": 16' in out  # after txids 1 and 2


@pytest.mark.parametrize("bucket_size", [10, 3])
def test_words_example_counts_and_buckets_are_exact(
    spark: Any, capsys: Any, bucket_size: int
) -> None:
    status = transactional_words.main(["--json", "--bucket-size", str(bucket_size)], spark=spark)
    import json

    out = json.loads(capsys.readouterr().out)
    assert status == 0 and out["exact"] is True
    assert out["counts"] == {"cat": 8, "dog": 7, "apple": 2, "chicken": 1, "banana": 1}
    want = {10: {"0": 5}, 3: {"0": 3, "2": 2}}[bucket_size]
    assert {str(k): v for k, v in out["buckets"].items()} == want


# ---------------------------------------------------------------- batches and phases


def global_count_topology(log: tx.Log, tid: str, fail: Any = None, sleep: float = 0.0) -> Any:
    """§7's global count, with a recording partial counter and committer."""
    spout = MemoryTransactionalSpout(STORM_DATA, ["word"], 3)
    b = TransactionalTopologyBuilder(tid, "spout", spout, 3)
    b.set_bolt("ones", tx.Ones(), 2).shuffle_grouping("spout")
    b.set_bolt("partial", tx.Recorder(log, key_field=None), 5).none_grouping("ones")
    b.set_committer_bolt("sum", _SumCommitter(log, fail=fail, sleep=sleep)).global_grouping(
        "partial"
    )
    return b.build_topology()


class _SumCommitter(tx.Recorder, tx.Committer):
    """Adds the partial counts of a batch to one transactional value."""

    def __init__(self, log: tx.Log, fail: Any = None, sleep: float = 0.0) -> None:
        super().__init__(log, key_field=None, fail=fail, sleep=sleep, emit=False)

    def prepare(self, conf: Any, context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        super().prepare(conf, context, collector, id)
        self.map = tx.TransactionalMap(context.backing_map())
        self.sum = 0

    def execute(self, tuple: Any) -> None:  # noqa: A002
        super().execute(tuple)
        self.sum += tuple.get_value(1)

    def finish_batch(self) -> None:
        added = self.sum
        self.map.multi_update(self.attempt, ["total"], [lambda old: (old or 0) + added])
        super().finish_batch()


def test_every_task_prepares_and_finishes_once_per_attempt_empty_ones_too(
    cluster: Any, tmp_path: Path
) -> None:
    log = tx.Log(tmp_path)
    handle = run(cluster, global_count_topology(log, topo.new_key("gc")), conf(pending=3))
    assert handle.read_state("sum") == {"total": 19}
    for txid in committed(handle):
        prepares = tx.events(tmp_path, kind="prepare", component="partial", txid=txid)
        finishes = tx.events(tmp_path, kind="finish", component="partial", txid=txid)
        # Five tasks, each once, whether it got tuples or not (§8 item 9).
        assert sorted(e["task"] for e in prepares) == [0, 1, 2, 3, 4]
        assert sorted(e["task"] for e in finishes) == [0, 1, 2, 3, 4]
        sums = tx.events(tmp_path, kind="finish", component="sum", txid=txid)
        assert len(sums) == 1
        # finish_batch saw every tuple of its task, upstream finish_batch emits included
        # (the five partials reach sum only from partial's finish_batch: §8 item 10).
        assert sums[0]["n"] == 5
    per_txid = {
        txid: sum(
            e["n"] for e in tx.events(tmp_path, kind="finish", component="partial", txid=txid)
        )
        for txid in committed(handle)
    }
    assert [per_txid[t] for t in sorted(per_txid)][:4] == [9, 7, 3, 0]


@pytest.mark.parametrize("pending", [1, 4])
def test_commits_come_strictly_in_txid_order_each_once(
    cluster: Any, tmp_path: Path, pending: int
) -> None:
    log = tx.Log(tmp_path)
    topology = global_count_topology(log, topo.new_key("order"))
    handle = run(cluster, topology, conf(pending=pending))
    commits = [e["txid"] for e in tx.events(tmp_path, kind="finish", component="sum")]
    assert commits == list(range(1, len(commits) + 1))  # increasing, no gap, no repeat
    assert len(commits) >= 4
    assert committed(handle) == commits
    assert handle.read_state("sum") == {"total": 19}


def test_with_pending_processing_of_later_txids_overlaps_the_wait_for_a_commit(
    cluster: Any, tmp_path: Path
) -> None:
    log = tx.Log(tmp_path)
    # A slow committer: while it commits txid t, later txids are processed (§8 item 11).
    topology = global_count_topology(log, topo.new_key("overlap"), sleep=0.4)
    handle = run(cluster, topology, conf(pending=4))
    assert handle.read_state("sum") == {"total": 19}
    commit_end = {e["txid"]: e["t"] for e in tx.events(tmp_path, kind="finish", component="sum")}
    partials = tx.events(tmp_path, kind="finish", component="partial")
    overlapped = [
        e["txid"]
        for e in partials
        if e["txid"] - 1 in commit_end and e["t"] < commit_end[e["txid"] - 1]
    ]
    assert overlapped, "no later txid was processed while an earlier one committed"


def abcd_topology(log: tx.Log, tid: str, data: Any) -> Any:
    """The docs' example: spout -> A; A -> B (committer); A -> C; B -> C; C -> D (committer)."""
    b = TransactionalTopologyBuilder(tid, "spout", MemoryTransactionalSpout(data, ["word"], 2))
    b.set_bolt("ones", tx.Ones()).shuffle_grouping("spout")
    b.set_bolt("A", tx.Recorder(log), 2).fields_grouping("ones", ["word"])
    b.set_committer_bolt("B", tx.Recorder(log)).global_grouping("A")
    # C is slow: processing of later txids goes on while it commits (it never waits for C).
    b.set_bolt("C", tx.Recorder(log, sleep=1.0), 2).fields_grouping("A", ["key"]).fields_grouping(
        "B", ["key"]
    )
    b.set_committer_bolt("D", tx.CountCommitter(log)).global_grouping("C")
    return b.build_topology()


def test_the_docs_a_b_c_d_topology_completes_in_phases(cluster: Any, tmp_path: Path) -> None:
    log = tx.Log(tmp_path)
    data = tx.words_data(["a b c a", "b d d e"])
    handle = run(cluster, abcd_topology(log, topo.new_key("abcd"), data), conf(pending=3))
    words = tx.total(data)
    # D counted every word twice: once through A -> C, once through A -> B -> C.
    assert handle.read_state("D") == {w: 2 * n for w, n in words.items()}
    for txid in [t for t in committed(handle) if t <= 2]:
        done = {
            c: max(e["t"] for e in tx.events(tmp_path, kind="finish", component=c, txid=txid))
            for c in "ABCD"
        }
        # B, C and D finish only in the commit phase, in that order (§8 item 12).
        assert done["A"] < done["B"] < done["C"] < done["D"]
    # That processing never waits for C (txid 2's batch starts before commit(1)) is the
    # coordinator's contract, checked step by step without timing in
    # test_transactional_coordinator.py::test_storms_coordinator_sequence. Here whether A's
    # txid 2 ends before C's txid 1 depends on the machine's load: it is not asserted.
    assert tx.events(tmp_path, kind="finish", component="A", txid=2)


def test_a_tuple_without_the_attempt_first_is_refused_naming_the_component(
    cluster: Any, tmp_path: Path
) -> None:
    spout = MemoryTransactionalSpout(tx.words_data(["a b"]), ["word"], 2)
    b = TransactionalTopologyBuilder(topo.new_key("noattempt"), "spout", spout)
    b.set_bolt("bad", tx.NoAttempt()).shuffle_grouping("spout")
    b.set_committer_bolt("sink", tx.CountCommitter(tx.Log(tmp_path))).global_grouping("bad")
    handle = cluster.submit_topology(
        topo.new_key("noattempt"),
        conf(**{"topology.max.transaction.retries": 1}),
        b.build_topology(),
    )
    with pytest.raises(TopologyFailedError) as info:
        handle.await_idle(TIMEOUT)
    assert info.value.component == "bad"
    assert "first value of every tuple" in str(info.value) and "'oops'" in str(info.value)


# ---------------------------------------------------------------- failures


@pytest.mark.parametrize("location", ["executors", "auto"])
def test_failed_batches_in_processing_and_emitting_replay_identically(
    cluster: Any, tmp_path: Path, location: str
) -> None:
    # Commits as Spark jobs or in the driver (auto): at pending 3 each emission is a job.
    log = tx.Log(tmp_path)
    fail = tx.FailOnce(tmp_path, txids=[1, 2])
    spout = MemoryTransactionalSpout(STORM_DATA, ["word"], 3)
    b = TransactionalTopologyBuilder(topo.new_key("replay"), "spout", _FlakySpout(spout, fail), 3)
    b.set_bolt("ones", tx.Ones(), 2).shuffle_grouping("spout")
    b.set_bolt("partial", tx.Recorder(log, fail=fail), 2).fields_grouping("ones", ["word"])
    b.set_committer_bolt("count", tx.CountCommitter(log), 2).fields_grouping("partial", ["key"])
    location_conf = {"topology.transactional.commit.location": location}
    handle = run(cluster, b.build_topology(), conf(pending=3, **location_conf))
    assert handle.read_state("count") == tx.total(STORM_DATA)
    failures = [t for t in handle.metrics()["transactions"] if not t["ok"]]
    assert {t["action"] for t in failures} >= {"EMIT", "PROCESS"}
    # Each replay of a txid saw the identical batch: each partial task (fields-grouped) the same
    # words in every attempt it finished. Compared per task: an attempt that a failure of an
    # earlier txid cut short may have finished in one task and not the other.
    for txid in (1, 2, 3):
        per_task: dict[int, dict[str, collections.Counter[str]]] = collections.defaultdict(dict)
        for e in tx.events(tmp_path, kind="finish", component="partial", txid=txid):
            per_task[e["task"]][e["attempt"]] = collections.Counter(e["counts"])
        assert sorted(per_task) == [0, 1], (txid, per_task)
        for task, attempts in per_task.items():
            seen = list(attempts.values())
            assert all(s == seen[0] for s in seen), (txid, task, attempts)


class _FlakySpout(MemoryTransactionalSpout):
    """A memory spout whose emitter fails txid 1's first attempt in task 0."""

    def __init__(self, inner: MemoryTransactionalSpout, fail: Any) -> None:
        super().__init__(inner.partitions, inner.fields, inner.take_per_batch)
        self.fail = fail

    def get_emitter(self, conf: Any, context: Any) -> Any:
        emitter = super().get_emitter(conf, context)
        fail, task = self.fail, context.this_task_index
        original = emitter.emit_partition_batch_new

        def emit_new(tx_: Any, collector: Any, partition: int, last: Any) -> Any:
            if tx_.transaction_id == 1 and task == 0:
                fail.maybe("emitter", 1)
            return original(tx_, collector, partition, last)

        emitter.emit_partition_batch_new = emit_new
        return emitter


def test_a_committer_failing_after_another_committer_wrote_replays_both_phases(
    cluster: Any, tmp_path: Path
) -> None:
    log = tx.Log(tmp_path)
    fail = tx.FailOnce(tmp_path, txids=[2])
    spout = MemoryTransactionalSpout(STORM_DATA, ["word"], 3)
    b = TransactionalTopologyBuilder(topo.new_key("two-committers"), "spout", spout, 2)
    b.set_bolt("ones", tx.Ones(), 2).shuffle_grouping("spout")
    b.set_committer_bolt("first", tx.CountCommitter(log)).global_grouping("ones")
    # The second writes its map, then fails in finish_batch: the first has already written.
    b.set_committer_bolt("second", tx.CountCommitter(log, fail=fail)).global_grouping("ones")
    handle = run(cluster, b.build_topology(), conf(pending=2))
    assert handle.read_state("first") == tx.total(STORM_DATA)
    assert handle.read_state("second") == tx.total(STORM_DATA)
    failed = [t for t in handle.metrics()["transactions"] if not t["ok"]]
    assert [(t["txid"], t["action"]) for t in failed] == [(2, "COMMIT")]
    # Both phases of txid 2 ran again: more than one processing attempt logged for it.
    attempts = {
        e["attempt"] for e in tx.events(tmp_path, kind="prepare", component="first", txid=2)
    }
    assert len(attempts) == 2


def test_any_other_error_fails_after_spark_retries_then_stops_the_topology(
    cluster: Any, tmp_path: Path
) -> None:
    spout = MemoryTransactionalSpout(STORM_DATA, ["word"], 3)
    b = TransactionalTopologyBuilder(topo.new_key("poison"), "spout", spout)
    # One task: each attempt fails on the same first tuple of txid 2, in the same task.
    b.set_bolt("ones", _PoisonOnes(), 1).shuffle_grouping("spout")
    b.set_committer_bolt("count", tx.CountCommitter(tx.Log(tmp_path))).global_grouping("ones")
    topology = b.build_topology()
    handle = cluster.submit_topology(
        topo.new_key("poison"),
        conf(**{"topology.max.transaction.retries": 2, "topology.deadletter.policy": "stop"}),
        topology,
    )
    with pytest.raises(TopologyFailedError) as info:
        handle.await_idle(TIMEOUT)
    err = info.value
    assert (err.component, err.task, err.txid) == ("ones", 0, 2)
    assert "ValueError: poison in txid 2" in str(err)
    # Under "stop", known to fail every time once the same tuple failed after.failures (2)
    # attempts: stopped then, with a retry of the budget (2) left.
    assert "(it failed 2 transactions on the same tuple" in str(err)
    # What committed before stays exact: txid 1's nine words.
    counted = handle.read_state("count")
    assert sum(counted.values()) == 9
    # Each failed attempt is logged (for the dashboard) with its component and the worker's
    # Python traceback down to the user's bolt.
    failed = [e for e in handle.runner.stats.error_log if e.kind == "failed"]
    assert len(failed) == 2 and all(e.component == "ones" and e.txid == 2 for e in failed)
    assert all("_PoisonOnes" in (e.traceback or "") for e in failed), failed[0].traceback
    assert all("ValueError: poison in txid 2" in (e.traceback or "") for e in failed)


class _PoisonOnes(tx.Ones):
    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        if tuple.get_value(0).transaction_id == 2:
            msg = "poison in txid 2"
            raise ValueError(msg)
        super().execute(tuple, collector)


@pytest.fixture
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Failed transactions retried after 0.1 s doubling to 0.4 s, not doubling on to 5 s.

    The random failures come in runs (a txid can fail nine times in a row, and every failure
    restarts the txids pipelined after it), and at the driver's 5 s cap the test waited a
    minute or two of its own delays (28 s to 147 s a run). The first delays are the driver's,
    so the topology is still idle in a backoff that the wait for idle sees, as before; 10 ms
    delays left it no such pause and ran the tail of empty txids to its end (40 s). The budget
    (``topology.max.transaction.retries``) is the config's; the policy's delays are tested in
    ``tests/recovery/test_recovery_retry.py``.
    """
    from recovery import gate
    from recovery.retry import RetryPolicy

    def quick(max_retries: int) -> RetryPolicy:
        return RetryPolicy(base_s=0.1, cap_s=0.4, max_retries=max_retries)

    monkeypatch.setattr(gate, "transaction_retries", quick)


def test_random_failures_in_both_phases_leave_the_storm_results_exact(
    cluster: Any, tmp_path: Path, quick_retries: None
) -> None:
    log = tx.Log(tmp_path)
    chaos = tx.RandomFailures(tmp_path, seed=7, p=0.3)
    spout = MemoryTransactionalSpout(STORM_DATA, ["word"], 3)
    b = TransactionalTopologyBuilder(topo.new_key("chaos"), "spout", spout, 2)
    b.set_bolt("ones", tx.Ones(), 2).shuffle_grouping("spout")
    b.set_bolt("partial", _Chaotic(log, chaos), 3).fields_grouping("ones", ["word"])
    b.set_committer_bolt("count", _ChaoticCommitter(log, chaos), 2).fields_grouping(
        "partial", ["key"]
    )
    handle = run(
        cluster, b.build_topology(), conf(pending=3, **{"topology.max.transaction.retries": 50})
    )
    assert handle.read_state("count") == tx.total(STORM_DATA)
    assert any(not t["ok"] for t in handle.metrics()["transactions"])
    failed_in = {marker.name.split("-")[1] for marker in tmp_path.glob("random-*")}
    assert failed_in == {"partial", "count"}  # both phases failed, and the counts are exact


class _Chaotic(tx.Recorder):
    def __init__(self, log: tx.Log, chaos: Any) -> None:
        super().__init__(log)
        self.chaos = chaos

    def finish_batch(self) -> None:
        if self.n:  # batches with data only: the empty txids after it end the run, unfailed
            self.chaos.maybe(self.where, self.attempt)
        super().finish_batch()


class _ChaoticCommitter(tx.CountCommitter):
    def __init__(self, log: tx.Log, chaos: Any) -> None:
        super().__init__(log)
        self.chaos = chaos

    def finish_batch(self) -> None:
        super().finish_batch()  # writes, then maybe fails: the write of t must not count twice
        if self.n:
            self.chaos.maybe(self.where, self.attempt)


# ---------------------------------------------------------------- opaque spouts


def test_an_opaque_spout_whose_replay_differs_stays_exact(cluster: Any, tmp_path: Path) -> None:
    log = tx.Log(tmp_path)
    fail = tx.FailOnce(tmp_path, txids=[2])
    data = tx.words_data(["dog cat apple dog", "cat mango", "happy mango zebra"])
    spout = OpaqueMemoryTransactionalSpout(data, ["word"], 2)
    b = TransactionalTopologyBuilder(topo.new_key("opaque"), "spout", spout, 2)
    b.set_bolt("ones", tx.Ones(), 2).shuffle_grouping("spout")
    b.set_committer_bolt(
        "count", tx.CountCommitter(log, fail=fail, opaque=True), 2
    ).fields_grouping("ones", ["word"])
    changed: list[int] = []

    def change_the_data(info: Any) -> None:
        # When txid 2's commit fails, its replay reads different data (an append, a new
        # partition, a partition disabled for a while), as after a broker loss.
        if not info.ok and not changed:
            changed.append(info.txid)
            spout.partitions[0].extend([["emu"], ["dog"]])
            spout.partitions[len(spout.partitions)] = [["yak"], ["yak"]]
            spout.set_disabled(1)
        elif info.ok and info.txid == 3:
            spout.set_disabled(1, False)  # the rest of partition 1 comes in later txids

    handle = run(cluster, b.build_topology(), conf(pending=2), on_transaction=change_the_data)
    assert changed == [2]
    assert not spout.is_disabled(1)
    assert handle.read_state("count") == tx.total(spout.partitions)


# ---------------------------------------------------------------- partitioned spouts


def test_storms_partitioned_topology_test(cluster: Any, tmp_path: Path) -> None:
    """§8 item 21: take 2, a spout of 2 tasks, pending 2, data appended before txid 3."""
    log = tx.Log(tmp_path)
    data = {
        0: [["dog", 3], ["cat", 4], ["apple", 1], ["dog", 3]],
        1: [["cat", 1], ["mango", 4]],
        2: [["happy", 11], ["mango", 2], ["zebra", 1]],
    }
    spout = _AppendingSpout(data, ["word", "amount"], 2)
    b = TransactionalTopologyBuilder(topo.new_key("storm"), "spout", spout, 2)
    b.set_bolt("id1", _Identity()).shuffle_grouping("spout")
    b.set_bolt("id2", _Identity()).shuffle_grouping("spout")
    b.set_bolt("sum", tx.Recorder(log), 2).fields_grouping("id1", ["word"])
    b.set_committer_bolt("count", _KeyCounter(log), 2).fields_grouping("id2", ["word"])
    b.set_committer_bolt("count2", _TupleCounter(log)).global_grouping("sum").global_grouping(
        "count"
    )
    b.set_bolt("global", tx.Recorder(log, key_field=None, emit=False)).global_grouping("spout")
    b.set_committer_bolt("gcommit", _TupleCounter(log)).global_grouping("spout")

    run(cluster, b.build_topology(), conf(pending=2))

    def sums(txid: int) -> dict[str, int]:
        merged: collections.Counter[str] = collections.Counter()
        for e in tx.events(tmp_path, kind="finish", component="sum", txid=txid):
            merged.update(e["counts"])
        return dict(merged)

    def tuples(component: str, txid: int) -> int:
        (e,) = tx.events(tmp_path, kind="finish", component=component, txid=txid)
        return e["n"]

    assert sums(1) == {"dog": 3, "cat": 5, "mango": 6, "happy": 11}
    assert sums(2) == {"apple": 1, "dog": 3, "zebra": 1}
    assert sums(3) == {"a": 5, "b": 2, "d": 4, "c": 1, "e": 7}
    assert sums(4) == {"c": 14}
    assert [tuples("global", t) for t in range(1, 6)] == [6, 3, 7, 2, 0]
    assert [tuples("gcommit", t) for t in range(1, 6)] == [6, 3, 7, 2, 0]
    keys1 = {}
    for e in tx.events(tmp_path, kind="finish", component="count", txid=1):
        keys1.update(e["counts"])
    assert keys1 == {"dog": 1, "cat": 2, "mango": 2, "happy": 1}
    # count2 gets one tuple per key from sum and one from count: 2 per key of txid 1.
    assert tuples("count2", 1) == 2 * 4


class _AppendingSpout(MemoryTransactionalSpout):
    """Storm's test data: more rows and a new partition appear just before txid 3 starts.

    The coordinator (on the driver) counts the partitions once per new txid: its third call is
    txid 3's, and the rows go in first.
    """

    def get_coordinator(self, conf: Any, context: Any) -> Any:
        coordinator = super().get_coordinator(conf, context)
        counted, data = coordinator.num_partitions, self.partitions
        calls = [0]

        def num_partitions() -> int:
            calls[0] += 1
            if calls[0] == 3:
                data[0].extend([["a", 1], ["b", 2], ["c", 3]])
                data[1].extend([["d", 4], ["c", 1]])
                data[2].extend([["a", 2], ["e", 7], ["c", 11]])
                data[3] = [["a", 2]]
            return counted()

        coordinator.num_partitions = num_partitions
        return coordinator


class _Identity(tx.Ones):
    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        collector.emit([tuple.get_value(0), tuple.get_value(1), tuple.get_value(2)])


class _KeyCounter(tx.CountCommitter):
    """Counts tuples per key (not their amounts)."""

    def execute(self, tuple: Any) -> None:  # noqa: A002
        self.n += 1
        self.counts[tuple.get_value(1)] += 1


class _TupleCounter(tx.Recorder, tx.Committer):
    def __init__(self, log: tx.Log) -> None:
        super().__init__(log, key_field=None, emit=False)
