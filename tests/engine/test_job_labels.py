"""Every Spark job the runtime starts reads like the protocol in Spark's UI and event logs.

``job_labels`` gives a job its Spark job group (``wc/PREPARE/txid=3``) and description
(``wc: PREPARE txid=3 (120 tuples)``), and keeps the protocol's own cancellation key as the
job's tag, which ``Engine.cancel`` cancels by. The Spark tests read the labels back twice: from
inside the tasks (the job's local properties, as a bolt sees them) and from the driver's status
tracker, on the shared ``local[2]`` session.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

import pytest

from checkpoint import CheckpointTaskProgram
from statefulbolts import Bolt, Fields, LocalCluster, Spout, StatefulBolt, TopologyBuilder
from statefulbolts.runtime._engine import JobLabels, JobSpec, job_labels
from statefulbolts.runtime._records import TupleBatch
from statefulbolts.runtime._spark_engine import SparkEngine as Engine


def test_a_checkpoint_job_names_the_topology_the_action_and_the_txid() -> None:
    spec = JobSpec(None, None, [], 3, "120 tuples", action="PREPARE")
    assert job_labels("wc", spec) == JobLabels(
        "wc/PREPARE/txid=3", "wc: PREPARE txid=3 (120 tuples)", "wc"
    )


def test_a_transactional_job_names_its_attempt_and_keeps_its_cancel_key() -> None:
    spec = JobSpec(None, None, [], 7, "", group="gc-7:3", action="EMIT+PROCESS", attempt=3)
    assert job_labels("gc", spec) == JobLabels(
        "gc/EMIT+PROCESS/txid=7/attempt=3", "gc: EMIT+PROCESS txid=7 attempt=3", "gc-7:3"
    )


def test_a_job_without_an_action_is_a_job_and_free_text_is_kept() -> None:
    bare = JobSpec(None, None, [], 2, "seam test")
    assert job_labels("wc", bare)[:2] == ("wc/JOB/txid=2", "wc: JOB txid=2 (seam test)")


def test_a_cancel_key_with_commas_becomes_a_valid_distinct_tag() -> None:
    # Spark job tags may not hold commas; the escape keeps "a,b" and "a;b" apart.
    def tag(group: str) -> str:
        return job_labels("t", JobSpec(None, None, [], 1, "", group=group, action="BATCH")).tag

    assert tag("x,y%") == "x%2Cy%25"
    assert tag("a,b") != tag("a;b")


# ------------------------------------------------------------------------------ on Spark


class Words(Spout):
    """Emits ``count`` words once, with message ids."""

    def __init__(self, count: int) -> None:
        self.count = count

    def open(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector, self.sent = collector, 0

    def next_tuple(self) -> None:
        if self.sent < self.count:
            self.collector.emit([f"w{self.sent}"], message_id=self.sent)
            self.sent += 1

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word"))


class SeenLabels(StatefulBolt):
    """Keeps, per job group it ran in, the job's description and tags (its local properties)."""

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def init_state(self, state: Any) -> None:
        self.state = state

    def execute(self, tuple: Any) -> None:  # noqa: A002
        from pyspark import TaskContext

        ctx = TaskContext.get()
        assert ctx is not None
        group = ctx.getLocalProperty("spark.jobGroup.id")
        seen = [
            ctx.getLocalProperty("spark.job.description"),
            ctx.getLocalProperty("spark.job.tags"),
        ]
        self.state.put(group, seen)
        self.collector.ack(tuple)


def settled(tracker: Any, ids: list[int]) -> set[str]:
    """The jobs' statuses once none is running (at most a minute).

    Spark's status store learns of a job's end from its listener bus, after the job's result
    reached the driver: on a busy machine the last job may still read RUNNING for a moment.
    """
    deadline = time.monotonic() + 60
    while True:
        statuses = {tracker.getJobInfo(i).status for i in ids}
        if "RUNNING" not in statuses or time.monotonic() > deadline:
            return statuses
        time.sleep(0.05)


@pytest.mark.spark
def test_every_transaction_job_carries_its_group_and_description(spark: Any) -> None:
    builder = TopologyBuilder()
    builder.set_spout("words", Words(300))
    builder.set_bolt("labels", SeenLabels(), 2).shuffle_grouping("words")
    conf = {
        "topology.max.spout.pending": 100,
        "topology.state.checkpoint.interval.ms": 100,
        # Every action a Spark job, COMMIT included (by default the driver commits itself).
        "topology.state.commit.location": "executors",
    }
    with LocalCluster(spark=spark) as cluster:
        handle = cluster.submit_topology("lbl", conf, builder.create_topology())
        handle.await_idle(240)
        seen = handle.read_state("labels")
        transactions = handle.metrics()["transactions"]
        handle.kill()

    # Inside the tasks: every data-carrying job's group, description and tag.
    assert seen, "the bolt ran in no job"
    for group, (description, tags) in seen.items():
        found = re.fullmatch(r"lbl/(BATCH|PREPARE)/txid=(\d+)", group)
        assert found is not None, group
        action, txid = found.groups()
        assert re.fullmatch(rf"lbl: {action} txid={txid} \(\d+ tuples\)", description), description
        assert sorted(tags.split(",")) == ["$topology/lbl", "lbl"]  # its group's, its own
    # From the driver: each transaction the topology ran is a succeeded job of its own group.
    tracker = spark.sparkContext.statusTracker()
    actions = set()
    for tx in transactions:
        action = tx["action"] or "BATCH"
        actions.add(action)
        ids = tracker.getJobIdsForGroup(f"lbl/{action}/txid={tx['txid']}")
        assert ids, tx
        assert settled(tracker, ids) == {"SUCCEEDED"}, tx
    assert {"PREPARE", "COMMIT"} <= actions
    assert set(seen) <= {f"lbl/{t['action'] or 'BATCH'}/txid={t['txid']}" for t in transactions}


class Blocker(Bolt):
    """Holds its task until ``release`` exists (at most five minutes)."""

    def __init__(self, release: str) -> None:
        self.release = release

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def execute(self, tuple: Any) -> None:  # noqa: A002
        deadline = time.monotonic() + 300
        while not os.path.exists(self.release) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word"))


@pytest.mark.spark
def test_cancel_reaches_a_running_job_by_the_protocols_group(spark: Any, tmp_path: Path) -> None:
    release = tmp_path / "release"
    builder = TopologyBuilder()
    builder.set_spout("words", Words(1))
    builder.set_bolt("block", Blocker(str(release))).shuffle_grouping("words")
    engine = Engine(spark, builder.create_topology(), "cancel-me", {})
    tracker = spark.sparkContext.statusTracker()
    try:
        plan = engine.plan
        layout = plan.layout([plan.index["block"]])
        block, words = plan.index["block"], plan.index["words"]
        batch = TupleBatch(block, 0, words, 0, 0, ["w"], [0], None)
        spec = JobSpec(
            layout, CheckpointTaskProgram(None, 1), [[batch]], 1, "",
            group="cancel,me-1:1", action="BATCH",
        )  # fmt: skip
        future = engine.submit(spec)
        group = job_labels("cancel-me", spec).group

        def running() -> list[int]:
            ids = tracker.getJobIdsForGroup(group)
            return [i for i in ids if tracker.getJobInfo(i).status == "RUNNING"]

        deadline = time.monotonic() + 120
        while not running():
            assert time.monotonic() < deadline, "the job never started"
            assert not future.done(), future.exception()
            time.sleep(0.05)
        (job_id,) = running()
        engine.cancel("cancel,me-1:1")
        with pytest.raises(Exception) as info:  # noqa: PT011 - Spark's error, through py4j
            future.result(timeout=240)
        assert not isinstance(info.value, TimeoutError), "the job was not cancelled"
        assert "cancel" in str(info.value).lower()
        assert settled(tracker, [job_id]) == {"FAILED"}
    finally:
        release.touch()
        engine.close()


class JobTags(Bolt):
    """Emits the Spark job tags of the job it runs in, sorted."""

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def execute(self, tuple: Any) -> None:  # noqa: A002
        from pyspark import TaskContext

        ctx = TaskContext.get()
        assert ctx is not None
        tags = ctx.getLocalProperty("spark.job.tags") or ""
        self.collector.emit([",".join(sorted(tags.split(",")))], tuple)
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("tags"))


@pytest.mark.spark
def test_a_thread_sets_its_job_tags_only_when_they_change(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    builder = TopologyBuilder()
    builder.set_spout("words", Words(1))
    builder.set_bolt("tags", JobTags()).shuffle_grouping("words")
    builder.set_bolt("after", JobTags()).shuffle_grouping("tags")  # outside every job
    sc = spark.sparkContext
    added: list[str] = []
    add = type(sc).addJobTag

    def counted(self: Any, tag: str) -> None:
        added.append(tag)
        add(self, tag)

    monkeypatch.setattr(type(sc), "addJobTag", counted)
    engine = Engine(spark, builder.create_topology(), "tagged", {}, max_jobs=1)
    try:
        plan = engine.plan
        layout = plan.layout([plan.index["tags"]])
        batch = TupleBatch(plan.index["tags"], 0, plan.index["words"], 0, 0, ["w"], [0], None)
        seen, calls = [], []
        for txid, group in enumerate([None, None, "tagged-3:1", None], start=1):
            spec = JobSpec(layout, CheckpointTaskProgram(None, txid), [[batch]], txid, "",
                           group=group, action="BATCH")  # fmt: skip
            result = engine.submit(spec).result(120)
            seen.append([v for o in result.outputs for v in o.column()])
            calls.append(len(added))
    finally:
        engine.close()
    own, topology = "$topology/tagged", "tagged"
    assert seen == [[f"{own},{topology}"]] * 2 + [[f"{own},tagged-3:1"]] + [[f"{own},{topology}"]]
    # The second job's tags were the first's: no call. The third's differ, the fourth's too.
    assert calls == [2, 2, 4, 6]
