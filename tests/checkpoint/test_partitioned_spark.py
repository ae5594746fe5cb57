"""Partitioned spouts on real Spark: files and Redis streams read in the PREPARE jobs' tasks.

The word count of ``partitioned_topologies`` on the shared ``local[2]`` session, through Python
worker crashes: in ``count`` or ``split`` on the first attempt of a PREPARE (Spark runs the task
again; the spout tasks' output is the input it reads again), and in a spout task itself after
the file it read grew (its retry must read the same lines: the driver fixed each file's end).
The counts and positions are exact. The crash tests loop over the seeds of
``STATEFULBOLTS_PARTITIONED_SEEDS`` (default ``"0"`` here: a Spark run costs seconds).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import topologies as topo
from partitioned_topologies import (
    GrowsUnderItsFirstAttempt,
    corpus,
    end_positions,
    expected_counts,
    fill_streams,
    seeds,
    stream_conf,
    stream_counts,
    stream_word_count,
    word_count,
)
from redis_fixtures import RedisServer

from statefulbolts import PartitionedRedisStreamSpout

pytestmark = pytest.mark.spark


def _failed_tasks(spark: Any, group: str) -> int:
    """How many Spark task attempts failed in the job of ``group`` (one job)."""
    tracker = spark.sparkContext.statusTracker()
    [job] = tracker.getJobIdsForGroup(group)
    return sum(tracker.getStageInfo(s).numFailedTasks for s in tracker.getJobInfo(job).stageIds)


def test_the_word_count_over_a_directory_on_spark_is_exact_through_a_worker_crash(
    spark: Any, cluster: Any, tmp_path: Path
) -> None:
    folder = corpus(tmp_path / "in", files=3, lines=30)
    crash = {"component": "count", "task": 0, "kind": "crash", "txid": 2, "at_tuple": 2}
    conf = {
        "topology.state.checkpoint.interval.ms": 1,
        "topology.max.spout.pending": 25,
        "topology.faults": {"tasks": [crash]},
    }
    outcomes: list[bool] = []
    name = topo.new_key("part-spark")
    handle = cluster.submit_topology(
        name,
        conf,
        word_count(folder),
        on_transaction=lambda info: outcomes.append(info.ok),
    )
    handle.await_idle(240)
    assert handle.read_state("count") == expected_counts(folder)
    assert handle.status()["partition_positions"]["files"] == end_positions(folder)
    assert all(outcomes)  # the crash was Spark's to retry: no transaction failed
    # It happened, in PREPARE(2)'s job, whose first stage is the spout's two tasks.
    assert _failed_tasks(spark, f"{name}/PREPARE/txid=2") == 1


@pytest.mark.parametrize("seed", seeds("0"))
def test_the_word_count_over_redis_streams_on_spark_is_exact_through_a_worker_crash(
    seed: int, spark: Any, cluster: Any, redis_db: RedisServer
) -> None:
    # 3 streams of 20 entries, 10 a spout task (2) a transaction: PREPAREs 1-4 read. The seed
    # picks the data and where the Python worker dies: split or count, its task, txid 1-3.
    client = redis_db.client()
    streams = ["wc:0", "wc:1", "wc:2"]
    fill_streams(client, streams, 20, seed=seed)
    component, txid = ("count", "split")[seed % 2], 1 + (seed // 2) % 3
    crash = {
        "component": component,
        "task": (seed // 6) % 2,
        "kind": "crash",
        "txid": txid,
        "at_tuple": 1 + seed % 4,
    }
    conf = stream_conf(
        redis_db, **{"topology.max.spout.pending": 10, "topology.faults": {"tasks": [crash]}}
    )
    outcomes: list[bool] = []
    name = topo.new_key("rpart-spark")
    handle = cluster.submit_topology(
        name,
        conf,
        stream_word_count(PartitionedRedisStreamSpout(streams)),
        on_transaction=lambda info: outcomes.append(info.ok),
    )
    handle.await_idle(240)
    want, last = stream_counts(client, streams)
    assert handle.read_state("count") == want
    assert handle.status()["partition_positions"]["streams"] == last
    assert all(outcomes)  # Spark ran the crashed task again: no transaction failed
    assert _failed_tasks(spark, f"{name}/PREPARE/txid={txid}") == 1


@pytest.mark.parametrize("seed", seeds("0"))
def test_a_spout_task_run_again_after_its_file_grew_reads_the_same_lines(
    seed: int, spark: Any, cluster: Any, tmp_path: Path
) -> None:
    # The first read of one file appends lines to it and crashes the worker: Spark's second
    # attempt of that spout task sees a longer file, and must stop where the first stopped
    # (the end the driver listed); the appended lines are the next transaction's.
    folder = corpus(tmp_path / "in", files=3, lines=12 + seed % 7, seed=seed)
    victim = f"part-{seed % 3}.txt"
    listed = (folder / victim).stat().st_size
    log, marker = tmp_path / "reads.jsonl", tmp_path / "crashed"
    spout = GrowsUnderItsFirstAttempt(folder, victim, 3 + seed % 5, log, marker)
    conf = {"topology.state.checkpoint.interval.ms": 1, "topology.max.spout.pending": 100}
    outcomes: list[bool] = []
    name = topo.new_key("part-grow")
    handle = cluster.submit_topology(
        name,
        conf,
        word_count(folder, spout=spout),
        on_transaction=lambda info: outcomes.append(info.ok),
    )
    handle.await_idle(240)
    assert marker.exists() and (folder / victim).stat().st_size > listed
    reads = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    first, again, *later = [r for r in reads if r["partition"] == victim]
    assert (first["attempt"], again["attempt"]) == (0, 1)  # Spark ran the spout task again
    same = ("start", "position", "lines")
    assert [again[k] for k in same] == [first[k] for k in same] == [None, listed, first["lines"]]
    assert any(r["start"] == listed and r["lines"] > 0 for r in later)  # the appended lines
    assert handle.read_state("count") == expected_counts(folder)
    assert handle.status()["partition_positions"]["files"] == end_positions(folder)
    assert all(outcomes)
