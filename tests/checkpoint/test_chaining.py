"""Chained stages: a none or local-or-shuffle grouping between components of equal parallelism.

Task i then feeds task i (``Route.local``), and a job chains the two stages (``JobLayout.narrow``):
Spark runs them as one stage, without a shuffle. The plan tests need no Spark; the end-to-end
test runs a transactional word count whose processing phase chains its emitters to the bolt
that splits the sentences, and reads the stages of its jobs from Spark's status tracker.
"""

from __future__ import annotations

import collections
import os
import random
from typing import Any

import pytest
import topologies as topo

from checkpoint import CheckpointTupleForwarder
from statefulbolts import (
    BaseTransactionalBolt,
    BasicBolt,
    Committer,
    Fields,
    LocalCluster,
    MemoryTransactionalSpout,
    Spout,
    TopologyBuilder,
    TransactionalMap,
    TransactionalTopologyBuilder,
)
from statefulbolts.components import BasicBoltExecutor
from statefulbolts.context import TopologyContext
from statefulbolts.runtime._plan import ExecutionPlan, Router
from statefulbolts.streams import GlobalStreamId, GroupingKind
from statefulbolts.testing import RecordingCollector, checkpoint_barrier, checkpoint_tuple
from statefulbolts.topology import CHECKPOINT_STREAM_ID


class _Words(Spout):
    def next_tuple(self) -> None:
        """Never called."""

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word"))


class _Pass(BasicBolt):
    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        collector.emit(tuple.values)

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word"))


def _plan(d_parallelism: int = 3) -> ExecutionPlan:
    """spout(2) -none-> a(2) -local_or_shuffle-> b(2) -fields-> c(2) -none-> d(n)."""
    builder = TopologyBuilder()
    builder.set_spout("spout", _Words(), 2)
    builder.set_bolt("a", _Pass(), 2).none_grouping("spout")
    builder.set_bolt("b", _Pass(), 2).local_or_shuffle_grouping("a")
    builder.set_bolt("c", _Pass(), 2).fields_grouping("b", Fields("word"))
    builder.set_bolt("d", _Pass(), d_parallelism).none_grouping("c")
    return ExecutionPlan(builder.create_topology())


def test_only_task_keeping_groupings_of_equal_parallelism_chain() -> None:
    plan = _plan()
    layout = plan.layout(plan.bolts(), chain=True)
    names = [{plan.component_ids[c] for c, _ in stage} for stage in layout.stages]
    assert names == [{"a"}, {"b"}, {"c"}, {"d"}]
    # a -> b chains; b -> c is a fields grouping; c -> d changes the parallelism.
    assert layout.narrow == (True, False, False)
    assert plan.layout(plan.bolts()).narrow == (False, False, False)
    assert plan.layout(plan.bolts(), chain=True).narrow[2] is False
    assert _plan(d_parallelism=2).layout(plan.bolts(), chain=True).narrow == (True, False, True)


def test_a_local_route_keeps_the_task_index_and_others_round_robin() -> None:
    plan = _plan()
    a, b, d = plan.index["a"], plan.index["b"], plan.index["d"]
    for task in (0, 1):
        router = Router(plan, a, task)
        assert {router.targets(a, 0, ["w"])[0] for _ in range(5)} == {(b, task)}
    c = plan.index["c"]
    router = Router(plan, c, 0)
    assert {router.targets(c, 0, ["w"])[0] for _ in range(6)} == {(d, t) for t in range(3)}


def test_a_record_for_a_chained_stage_starts_in_its_task_slot() -> None:
    plan = _plan()
    b = plan.index["b"]
    chained = plan.layout(plan.bolts(), chain=True)
    plain = plan.layout(plan.bolts())
    # Bound for b (stage 1) from outside the job: it rides a's slot of the same task index,
    # since nothing moves between a and b.
    assert [chained.key_for(-1, b, t) for t in (0, 1)] == [0, 1]
    assert [plain.key_for(-1, b, t) for t in (0, 1)] == [(b * 7919 + t) % 2 for t in (0, 1)]


# ------------------------------------------------- the checkpoint barrier along a chain


def _checkpoint_grouping(topology: Any, bolt: str, source: str) -> GroupingKind:
    (grouping,) = [
        i.grouping.kind
        for i in topology.inputs(bolt)
        if i.source == GlobalStreamId(source, CHECKPOINT_STREAM_ID)
    ]
    return grouping


def test_a_checkpoint_barrier_follows_a_chain_and_the_stages_fuse() -> None:
    topology = topo.chained_wordcount(10)
    # Storm sends a bolt's checkpoint to every downstream task; along a chain it goes to the
    # task with the same index, the only one the data can reach.
    assert _checkpoint_grouping(topology, "count", "split") is GroupingKind.ALL
    assert _checkpoint_grouping(topology, "seen", "count") is GroupingKind.LOCAL_OR_SHUFFLE
    assert _checkpoint_grouping(topology, "relay", "seen") is GroupingKind.LOCAL_OR_SHUFFLE
    plan = ExecutionPlan(topology)
    layout = plan.layout(plan.bolts(), chain=True)
    names = [{plan.component_ids[c] for c, _ in stage} for stage in layout.stages]
    assert names == [{"split"}, {"count"}, {"seen"}, {"relay"}]
    assert layout.narrow == (False, True, True)
    # Each task of ``seen`` waits for the checkpoint of its own ``count`` task only.
    count_ids = topology.task_ids("count")
    for task in (0, 1):
        context = TopologyContext(topology, "t", "seen", task)
        assert context.sending_tasks(GlobalStreamId("count", CHECKPOINT_STREAM_ID)) == [
            count_ids[task]
        ]
        assert [cp.source_task for cp in checkpoint_barrier(context, "PREPARE", 3)] == [
            count_ids[task]
        ]
    # The driver's data-free actions (COMMIT, ROLLBACK, INITSTATE) take the same path.
    seen, count = plan.index["seen"], plan.index["count"]
    cp = plan.checkpoint_stream[count]
    assert cp is not None
    assert [list(plan.sending_tasks(count, cp, seen, t)) for t in (0, 1)] == [[0], [1]]
    split, c = plan.index["split"], plan.checkpoint_stream[plan.index["split"]]
    assert c is not None
    assert list(plan.sending_tasks(split, c, count, 1)) == [0, 1]


def test_a_barrier_waits_for_the_chained_task_only() -> None:
    topology = topo.chained_wordcount(10)
    context = TopologyContext(topology, "t", "relay", 1)
    forwarder = CheckpointTupleForwarder(BasicBoltExecutor(topo.Relay()))
    out = RecordingCollector()
    forwarder.prepare({}, context, out)
    seen_ids = topology.task_ids("seen")
    # A checkpoint from the other task of ``seen`` is no part of this task's barrier...
    forwarder.execute(checkpoint_tuple("PREPARE", 0, "seen", seen_ids[0]))
    assert [e.stream for e in out.emitted] == []
    # ...its own task's completes it.
    forwarder.execute(checkpoint_tuple("PREPARE", 0, "seen", seen_ids[1]))
    assert [(e.stream, e.values) for e in out.emitted] == [(CHECKPOINT_STREAM_ID, [0, "PREPARE"])]


@pytest.mark.parametrize(
    ("case", "kind"),
    [
        ("fields", GroupingKind.ALL),  # data may come from any task
        ("unequal", GroupingKind.ALL),  # no chain between unequal parallelism
        ("mixed", GroupingKind.ALL),  # one stream chains, the other does not
        ("none", GroupingKind.LOCAL_OR_SHUFFLE),
        ("both", GroupingKind.LOCAL_OR_SHUFFLE),  # two streams, both chained
    ],
)
def test_a_barrier_chains_only_where_all_the_data_does(case: str, kind: GroupingKind) -> None:
    builder = TopologyBuilder()
    builder.set_spout("spout", _Words(), 2)
    builder.set_bolt("a", topo.ThresholdRouter("m"), 2).shuffle_grouping("spout")
    b = builder.set_bolt("b", topo.Tally(), 3 if case == "unequal" else 2)
    if case == "fields":
        b.fields_grouping("a", Fields("value"), "low")
    else:
        b.none_grouping("a", "low")
    if case == "mixed":
        b.fields_grouping("a", Fields("value"), "high")
    elif case == "both":
        b.local_or_shuffle_grouping("a", "high")
    topology = builder.create_topology()
    assert _checkpoint_grouping(topology, "b", "a") is kind
    plan = ExecutionPlan(topology)
    assert plan.layout(plan.bolts(), chain=True).narrow == (kind is GroupingKind.LOCAL_OR_SHUFFLE,)


# ---------------------------------------------------------------- end to end on Spark


class _Split(BasicBolt):
    """Splits a sentence; each word goes on with the emitter task it came from."""

    def prepare(self, conf: Any, context: Any) -> None:
        self.task = context.this_task_index

    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        for word in tuple.values[1].split():
            collector.emit([tuple.values[0], word, f"{tuple.source_task}->{self.task}"])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("id", "word", "edge"))


class _CountCommitter(BaseTransactionalBolt, Committer):
    """Counts words and the emitter-to-splitter edges the words took, exactly once."""

    def prepare(self, conf: Any, context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        self.attempt = id
        self.counts: collections.Counter[str] = collections.Counter()
        self.task = context.this_task_index
        self.map = TransactionalMap(context.backing_map())

    def execute(self, tuple: Any) -> None:  # noqa: A002
        self.counts[tuple.values[1]] += 1
        self.counts[f"{tuple.values[2]}@{self.task}"] += 1  # a key of this task's map only

    def finish_batch(self) -> None:
        keys = list(self.counts)
        updaters = [lambda old, n=self.counts[k]: (old or 0) + n for k in keys]
        self.map.multi_update(self.attempt, keys, updaters)

    def declare_output_fields(self, declarer: Any) -> None:
        """Emits nothing."""


@pytest.mark.spark
@pytest.mark.parametrize(
    ("pending", "location", "action"),
    [(1, "auto", "EMIT+PROCESS"), (3, "auto", "PROCESS"), (3, "executors", "PROCESS")],
)
def test_transactional_processing_chains_emitters_to_splitters(
    spark: Any, pending: int, location: str, action: str
) -> None:
    sentences = {p: [[f"w{p} w{i % 3} shared"] for i in range(20)] for p in range(4)}
    spout = MemoryTransactionalSpout(sentences, ["sentence"], 7)
    tid = topo.new_key("chain")
    b = TransactionalTopologyBuilder(tid, "spout", spout, 2)
    b.set_bolt("split", _Split(), 2).none_grouping("spout")
    b.set_committer_bolt("count", _CountCommitter(), 2).fields_grouping("split", Fields("word"))
    cluster = LocalCluster(spark=spark)
    conf = {
        "topology.max.spout.pending": pending,
        "topology.state.checkpoint.interval.ms": 50,
        "topology.transactional.commit.location": location,
    }
    topology = b.build_topology()
    emitters = topology.topology.task_ids("spout")
    handle = cluster.submit_topology(tid, conf, topology)
    try:
        handle.await_idle(240)
        counts = handle.read_state("count")
    finally:
        handle.kill()
    rows = [row[0] for part in sentences.values() for row in part]
    words = collections.Counter(w for sentence in rows for w in sentence.split())
    edges = {k: v for k, v in counts.items() if "->" in k}
    assert {k: v for k, v in counts.items() if "->" not in k} == words
    # Every word went from emitter task i to splitter task i, and both tasks carried some.
    assert {k.split("@")[0] for k in edges} == {f"{emitters[0]}->0", f"{emitters[1]}->1"}
    assert sum(edges.values()) == sum(words.values())
    # The job that ran the splitters had no shuffle before them: one Spark stage.
    tracker = spark.sparkContext.statusTracker()
    runs = [tracker.getJobInfo(j) for j in _all_job_ids(tracker, tid, action)]
    stages = {len(info.stageIds) for info in runs if info is not None}
    assert stages == {1}, stages


def _all_job_ids(tracker: Any, tid: str, action: str) -> list[int]:
    """The ids of every job of topology ``tid`` that ran ``action`` (one group per txid)."""
    found: list[int] = []
    for txid in range(1, 50):
        for attempt in range(1, 60):  # attempt ids count from 1 over the whole run
            group = f"{tid}/{action}/txid={txid}/attempt={attempt}"
            found += tracker.getJobIdsForGroup(group)
    assert found, f"no {action} job of {tid} in Spark's status tracker"
    return found


def _expected_words(sentences: int) -> collections.Counter[str]:
    from examples.corpus import sentence, words

    return collections.Counter(w for i in range(sentences) for w in words(sentence(i)))


@pytest.mark.spark
@pytest.mark.parametrize(("head", "spark_stages"), [("never", 2), ("always", 1)])
def test_a_chained_checkpointed_word_count_is_exact_and_chains_its_stages(
    spark: Any, head: str, spark_stages: int
) -> None:
    # ``topology.driver.head``: with the split run by the driver, Spark runs the rest as one.
    name = topo.new_key("cp-chain")
    cluster = LocalCluster(spark=spark)
    conf = {
        "topology.state.checkpoint.interval.ms": 50,
        "topology.max.spout.pending": 40,
        "topology.driver.head": head,
    }
    handle = cluster.submit_topology(name, conf, topo.chained_wordcount(200))
    try:
        handle.await_idle(240)
        counts, seen = handle.read_state("count"), handle.read_state("seen")
        txs = [t for t in handle.metrics()["transactions"] if t["action"] == "PREPARE"]
    finally:
        handle.kill()
    expected = _expected_words(200)
    assert counts == dict(expected)
    # ``seen`` task i got exactly the pairs of ``count`` task i: each word under one task, with
    # one pair per occurrence, and both tasks carried some.
    by_word: dict[str, list[tuple[str, int]]] = collections.defaultdict(list)
    for key, n in seen.items():
        task, word = key.split("|")
        by_word[word].append((task, n))
    assert {w: [n for _, n in v] for w, v in by_word.items()} == {
        w: [n] for w, n in expected.items()
    }
    assert {t for v in by_word.values() for t, _ in v} == {"0", "1"}
    # Every PREPARE ran as two Spark stages, the split, then count + seen + relay in one; or as
    # that one alone, after the driver ran the split.
    tracker = spark.sparkContext.statusTracker()
    stages = set()
    for tx in txs:
        for job in tracker.getJobIdsForGroup(f"{name}/PREPARE/txid={tx['txid']}"):
            info = tracker.getJobInfo(job)
            if info is not None:
                stages.add(len(info.stageIds))
    assert len(txs) >= 3, txs
    assert stages == {spark_stages}, stages


# Fault loops vary the target word, the interval and the pending limit by seed.
SEED = int(os.environ.get("STATEFULBOLTS_FAULT_SEED", "0"))


def _seeded_conf(seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    return {
        "topology.state.checkpoint.interval.ms": rng.choice([20, 50, 100]),
        "topology.max.spout.pending": rng.choice([1, 10, 40]),
    }


@pytest.mark.spark
@pytest.mark.parametrize("store", ["memory", pytest.param("redis", marks=pytest.mark.redis)])
def test_a_chained_task_failing_its_job_rolls_back_and_replays_exactly(
    spark: Any, store: str, request: pytest.FixtureRequest, tmp_path: Any
) -> None:
    # ``seen`` raises on one word in every Spark attempt of the first job carrying it: Spark
    # retries the fused task (count re-runs too), then the transaction fails, rolls back
    # through the chained barriers and is replayed.
    from outage_topologies import redis_conf

    failures = topo.task_max_failures(spark)
    expected = dict(_expected_words(200))
    target = random.Random(SEED).choice(sorted(expected))
    seen = topo.FailJobOnce(target, str(tmp_path / "job.log"), failures)
    name = topo.new_key(f"cp-chain-fail-{store}")
    conf = _seeded_conf(SEED)
    if store == "redis":
        conf |= redis_conf(request.getfixturevalue("redis_db").port)
    cluster = LocalCluster(spark=spark)
    handle = cluster.submit_topology(name, conf, topo.chained_wordcount(200, seen=seen))
    try:
        handle.await_idle(240)
        counts, seen_counts = handle.read_state("count"), handle.read_state("seen")
        actions = [t["action"] for t in handle.metrics()["transactions"]]
    finally:
        handle.kill()
    assert counts == expected
    assert seen_counts == expected  # one (word, count) pair per occurrence, none twice
    assert "ROLLBACK" in actions, actions


@pytest.mark.spark
def test_a_python_worker_killed_in_a_fused_stage_is_retried_exactly(spark: Any) -> None:
    # The first attempt of ``seen`` task 1 kills its Python worker mid-stage: count task 1,
    # fused with it, dies too, and Spark's retry runs both again from their images.
    rng = random.Random(SEED)
    at = rng.randrange(0, 5)  # a transaction brings each task a few tuples at pending 10
    conf = {
        "topology.state.checkpoint.interval.ms": rng.choice([20, 50, 100]),
        "topology.max.spout.pending": rng.choice([10, 40]),
        "topology.faults": {
            "tasks": [
                {
                    "component": "seen",
                    "task": 1,
                    "at_tuple": at,
                    "kind": "crash",
                    "attempts": "first",
                }
            ]
        },
    }
    name = topo.new_key("cp-chain-crash")
    cluster = LocalCluster(spark=spark)
    handle = cluster.submit_topology(name, conf, topo.chained_wordcount(200))
    try:
        handle.await_idle(240)
        counts, seen = handle.read_state("count"), handle.read_state("seen")
        txs = handle.metrics()["transactions"]
    finally:
        handle.kill()
    expected = _expected_words(200)
    assert counts == dict(expected)
    per_word: collections.Counter[str] = collections.Counter()
    for key, n in seen.items():
        per_word[key.split("|")[1]] += n
    assert per_word == expected
    assert all(t["ok"] for t in txs)  # Spark's retry inside the job was enough
    # And the crash happened: a PREPARE job's fused stage lost a task.
    tracker = spark.sparkContext.statusTracker()
    lost = 0
    for tx in txs:
        for job in tracker.getJobIdsForGroup(f"{name}/{tx['action']}/txid={tx['txid']}"):
            info = tracker.getJobInfo(job)
            for stage in info.stageIds if info is not None else ():
                stage_info = tracker.getStageInfo(stage)
                lost += stage_info.numFailedTasks if stage_info is not None else 0
    assert lost >= 1
